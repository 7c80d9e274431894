//! How an acquisition waits for a held lock: the part of every primitive's options that the
//! acquire loop reads.

use std::time::Duration;

use crate::error::{Error, Result};

/// The average pause between two attempts of a waiting `lock()` while wake-ups are down
/// (with them, a release wakes the waiter).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(25);
/// The longest retry delay accepted.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);
/// How long a waiter keeps its place in a lock's queue without renewing it, by default.
pub const DEFAULT_PLACE_LEASE: Duration = Duration::from_secs(2);
const MIN_PLACE_LEASE: Duration = Duration::from_millis(3);
const MAX_PLACE_LEASE: Duration = Duration::from_secs(3600);

/// How a waiting acquisition behaves between attempts.
///
/// Waiting does not poll: waiters queue on the server, a release wakes the first of them
/// (pub/sub; a `Mutex` release hands the lock straight to it), and a waiter whose holder
/// crashed retries the moment the holder's lease ends.
/// A waiter renews its place in the queue every third of its
/// [`place_lease`](WaitOptions::place_lease); one that died is skipped once its place lease
/// runs out. Only while the wake-up connection is down does a waiter poll, every
/// [`retry_delay`](WaitOptions::retry_delay) on average.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::WaitOptions;
///
/// let options = WaitOptions::default().retry_delay(Duration::from_millis(100));
/// assert_eq!(options.get_retry_delay(), Duration::from_millis(100));
/// assert!(WaitOptions::default().retry_delay(Duration::from_secs(3601)).check().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitOptions {
    retry_delay: Option<Duration>,
    place_lease: Option<Duration>,
}

impl WaitOptions {
    /// The average pause between two attempts while wake-ups are down (each pause is drawn
    /// from half to one and a half times it, and is never under 1 ms). At most one hour;
    /// 25 ms by default.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = Some(delay);
        self
    }

    /// How long a waiter keeps its place in the lock's queue without renewing it (3 ms to
    /// 1 hour; 2 s by default). A waiter renews every third of it; a waiter that died is
    /// skipped once it runs out, so this is how long a dead waiter at the head can hold up
    /// the lock after a release.
    pub fn place_lease(mut self, place_lease: Duration) -> Self {
        self.place_lease = Some(place_lease);
        self
    }

    /// The retry delay in force.
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay.unwrap_or(DEFAULT_RETRY_DELAY)
    }

    /// The place lease in force.
    pub fn get_place_lease(&self) -> Duration {
        self.place_lease.unwrap_or(DEFAULT_PLACE_LEASE)
    }

    /// Checks every value, as making a lock handle does.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a retry delay over 1 hour, or a place lease under 3 ms
    /// or over 1 hour.
    pub fn check(&self) -> Result<()> {
        if self.get_retry_delay() > MAX_RETRY_DELAY {
            return Err(Error::InvalidDuration {
                what: "retry delay",
                value: self.get_retry_delay(),
                reason: "a retry delay must be at most 1 hour".into(),
            });
        }
        if !(MIN_PLACE_LEASE..=MAX_PLACE_LEASE).contains(&self.get_place_lease()) {
            return Err(Error::InvalidDuration {
                what: "place lease",
                value: self.get_place_lease(),
                reason: "a place lease must be 3 ms to 1 hour".into(),
            });
        }
        Ok(())
    }
}
