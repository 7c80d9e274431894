//! The guard of a [`Mutex`](crate::Mutex) or a [`FairMutex`](crate::FairMutex).

use crate::error::Result;
use crate::lease::{Lease, Released};

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

crate::lease::guard_methods!(MutexGuard);

impl MutexGuard {
    /// The guard of a granted lease.
    pub(crate) fn new(lease: Lease) -> MutexGuard {
        MutexGuard { lease }
    }

    /// Releases the lock and says whether it was still this guard's. A renewal under way is
    /// let finish and the watchdog stopped before the release is sent, so no renewal ever
    /// follows the release.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) with [`LostReason::Expired`](crate::LostReason::Expired) when the lease had run out,
    /// [`LostReason::Taken`](crate::LostReason::Taken) when another owner holds the lock now (it is left untouched);
    /// [`Error::Connection`](crate::Error::Connection) when the outcome is unknown: the lease then ends the lock.
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the lock, in the background.
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}
