//! The options every primitive takes: a lease, and how to wait.

use std::time::Duration;

use crate::error::Result;
use crate::lease::LeaseOptions;
use crate::wait::WaitOptions;

/// How a lock acquires, whichever primitive: the lease it asks for and whether a watchdog
/// renews it ([`LeaseOptions`]), and how it waits ([`WaitOptions`]: the retry delay while
/// wake-ups are down, and the place lease of a waiter in line). One type, one name, for every
/// primitive on one server (or cluster, or Sentinel master): `Mutex`, `FairMutex`,
/// `ReentrantMutex`, `RwLock`, `Semaphore` and `MultiLock` each take it through their
/// `*_with` constructor; a [`Redlock`](crate::Redlock) takes
/// [`RedlockOptions`](crate::RedlockOptions), which has settings of its own. (For a semaphore
/// the lease is each permit's; for a `MultiLock`, each group's.)
///
/// Without an explicit [`lease`](LockOptions::lease), a lock gets a 30 s lease that a
/// watchdog renews every 10 s for as long as the guard lives (as Redisson does): a crashed
/// holder blocks others for at most 30 s, a live one keeps the lock. With an explicit lease
/// the watchdog is off unless [`watchdog(true)`](LockOptions::watchdog) turns it on.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::{LeaseOptions, LockOptions};
///
/// let renewed = LockOptions::default();
/// assert!(renewed.get_watchdog());
///
/// let fixed = LockOptions::default().lease(Duration::from_secs(5));
/// assert!(!fixed.get_watchdog());
///
/// let capped = LockOptions::default()
///     .lease(Duration::from_millis(500))
///     .watchdog(true)
///     .max_renewals(10);
/// assert!(capped.get_watchdog());
///
/// // The same, from the parts every primitive's options share:
/// let lease = LeaseOptions::default().lease(Duration::from_millis(500)).watchdog(true);
/// assert_eq!(LockOptions::default().lease_options(lease).get_lease(), Duration::from_millis(500));
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LockOptions {
    lease: LeaseOptions,
    wait: WaitOptions,
}

impl LockOptions {
    /// The lease, watchdog and renewal caps, all at once.
    pub fn lease_options(mut self, options: LeaseOptions) -> Self {
        self.lease = options;
        self
    }

    /// How a waiting `lock()` behaves between attempts, all at once (it replaces what
    /// [`retry_delay`](LockOptions::retry_delay) and
    /// [`place_lease`](LockOptions::place_lease) set before).
    pub fn wait_options(mut self, options: WaitOptions) -> Self {
        self.wait = options;
        self
    }

    /// Shorthand for [`LeaseOptions::lease`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = self.lease.lease(lease);
        self
    }

    /// Shorthand for [`LeaseOptions::watchdog`].
    pub fn watchdog(mut self, on: bool) -> Self {
        self.lease = self.lease.watchdog(on);
        self
    }

    /// Shorthand for [`LeaseOptions::max_renewals`].
    pub fn max_renewals(mut self, renewals: u32) -> Self {
        self.lease = self.lease.max_renewals(renewals);
        self
    }

    /// Shorthand for [`LeaseOptions::max_hold`].
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.lease = self.lease.max_hold(hold);
        self
    }

    /// Shorthand for [`LeaseOptions::clock_drift`].
    pub fn clock_drift(mut self, drift: crate::ClockDrift) -> Self {
        self.lease = self.lease.clock_drift(drift);
        self
    }

    /// Shorthand for [`LeaseOptions::replication`].
    pub fn replication(mut self, replication: crate::Replication) -> Self {
        self.lease = self.lease.replication(replication);
        self
    }

    /// Shorthand for [`WaitOptions::retry_delay`].
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.wait = self.wait.retry_delay(delay);
        self
    }

    /// Shorthand for [`WaitOptions::place_lease`].
    pub fn place_lease(mut self, place_lease: Duration) -> Self {
        self.wait = self.wait.place_lease(place_lease);
        self
    }

    /// The lease options in force.
    pub fn get_lease_options(&self) -> &LeaseOptions {
        &self.lease
    }

    /// The wait options in force.
    pub fn get_wait_options(&self) -> &WaitOptions {
        &self.wait
    }

    /// The lease in force (30 s unless set).
    pub fn get_lease(&self) -> Duration {
        self.lease.get_lease()
    }

    /// Whether the watchdog is on: as set, or on exactly when no lease was set.
    pub fn get_watchdog(&self) -> bool {
        self.lease.get_watchdog()
    }

    /// The retry delay in force.
    pub fn get_retry_delay(&self) -> Duration {
        self.wait.get_retry_delay()
    }

    /// The place lease in force (see [`WaitOptions::place_lease`]).
    pub fn get_place_lease(&self) -> Duration {
        self.wait.get_place_lease()
    }

    /// Checks every value, so a bad one is reported when the handle is made.
    ///
    /// # Errors
    /// As [`LeaseOptions::check`] and [`WaitOptions::check`].
    pub fn check(&self) -> Result<()> {
        self.lease.check()?;
        self.wait.check()
    }

    /// As [`check`](LockOptions::check), for a lock of a client with `client` options: a
    /// replication timeout must also be under the client's response timeout (the reply
    /// would be given up before the server's `WAIT` ends).
    pub(crate) fn check_on(&self, client: &crate::ClientOptions) -> Result<()> {
        self.check()?;
        match self.lease.get_replication() {
            Some(replication) => replication.check(Some(client.get_response_timeout())),
            None => Ok(()),
        }
    }
}
