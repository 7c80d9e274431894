//! The guard of a [`Mutex`](crate::Mutex) or a [`FairMutex`](crate::FairMutex).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LostReason, Result};
use crate::lease::Lease;
use crate::token::{FencingToken, OwnerToken};

/// Proof that this process holds a [`Mutex`](crate::Mutex) or a
/// [`FairMutex`](crate::FairMutex): its fencing token and its lease.
///
/// The lock is held until [`release`](MutexGuard::release) or until the lease runs out,
/// whichever comes first. With the watchdog on (the default when no lease was set), the lease
/// is renewed in the background while the guard lives. Either way, [`lost`](MutexGuard::lost)
/// tells the holder the moment the lock is lost or can no longer be proven held: stop acting
/// then. Pass [`fencing_token`](MutexGuard::fencing_token) along with every write, so the
/// resource can refuse a holder that did not stop in time.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use std::time::Duration;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let guard = client.mutex("report")?.lock().await?;
/// assert!(guard.lease_remaining() > Duration::from_secs(25));
/// tokio::select! {
///     reason = guard.lost() => println!("stop: the lock was lost ({reason})"),
///     () = tokio::time::sleep(Duration::from_millis(50)) => println!("work done"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Drop behaviour
/// Dropping a guard without calling [`release`](MutexGuard::release) stops its watchdog and
/// releases the lock in a background task on the current Tokio runtime: the drop never
/// blocks. Outside a runtime nothing can be sent, and the lease ends the lock. Prefer
/// `release().await`, which reports whether the lock was still held.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MutexGuard {
    lease: Lease,
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("lease_remaining", &self.lease_remaining())
            .field("watchdog", &self.is_renewed())
            .finish()
    }
}

impl MutexGuard {
    /// The guard of a granted lease.
    pub(crate) fn new(lease: Lease) -> MutexGuard {
        MutexGuard { lease }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lease.name()
    }

    /// This acquisition's fencing token: greater than that of every earlier holder of the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.fencing_token()
    }

    /// The random owner token stored in the lock key while this guard holds it.
    pub fn owner_token(&self) -> &OwnerToken {
        self.lease.owner_token()
    }

    /// The instant (local monotonic clock) until which the lock is certainly held: the lease
    /// counted from when the last acquire, extend or renewal request was *sent*, less a drift
    /// allowance.
    pub fn lease_deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// How much of the lease is certainly left; zero once it may have run out.
    pub fn lease_remaining(&self) -> Duration {
        self.lease.remaining()
    }

    /// Resolves the moment the lock is known lost — a renewal or extension found it gone or
    /// taken — or can no longer be proven held: the lease deadline passed without a confirmed
    /// renewal (no watchdog, Redis unreachable, or the renewal cap reached). Use it in
    /// `tokio::select!` beside the work the lock protects. The future does not borrow the
    /// guard; once the guard is released or dropped it resolves with
    /// [`LostReason::Released`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        self.lease.lost()
    }

    /// Why the lock is not held any more, if that is known now (a passed lease deadline
    /// counts); `None` while it is held.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.lease.lost_reason()
    }

    /// Whether the watchdog renews this guard's lease.
    pub fn is_renewed(&self) -> bool {
        self.lease.is_renewed()
    }

    /// Sets the lease to `lease` from now, if the lock is still this guard's.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a lease under 3 ms or over 100 years;
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock is gone or another owner's (nothing was changed, and
    /// [`lost`](MutexGuard::lost) resolves); [`Error::Connection`](crate::Error::Connection) when the outcome is unknown
    /// (the old lease still bounds it).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have changed the lease; the guard counts on the
    /// earlier of the old and the new deadline, never later than the truth.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.lease.extend(lease).await
    }

    /// Releases the lock and says whether it was still this guard's. A renewal under way is
    /// let finish and the watchdog stopped before the release is sent, so no renewal ever
    /// follows the release.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) with [`LostReason::Expired`] when the lease had run out,
    /// [`LostReason::Taken`] when another owner holds the lock now (it is left untouched);
    /// [`Error::Connection`](crate::Error::Connection) when the outcome is unknown: the lease then ends the lock.
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the lock, in the background.
    pub async fn release(self) -> Result<()> {
        self.lease.release().await
    }
}
