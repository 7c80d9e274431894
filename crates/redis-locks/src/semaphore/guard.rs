//! The guard of a [`Semaphore`](crate::Semaphore)'s permits.

use crate::error::Result;
use crate::lease::{Lease, Released, guard_methods};

/// Proof that this process holds permits of a [`Semaphore`](crate::Semaphore): how many,
/// their fencing token and their lease.
///
/// As every guard: the watchdog renews the lease while the guard lives (when on),
/// [`lost`](Self::lost) resolves the moment the permits are lost (their lease ended on the
/// server), and dropping the guard gives the permits back in the background. No other
/// holder can release or extend them: they are known by this guard's own random
/// [`owner_token`](Self::owner_token).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let jobs = client.semaphore("nightly-jobs", 4)?;
/// let guard = jobs.acquire_many(2).await?;
/// assert_eq!(guard.permits(), 2);
/// tokio::select! {
///     reason = guard.lost() => println!("stop: the permits were lost ({reason})"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(20)) => println!("job done"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the permits are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct SemaphoreGuard {
    lease: Lease,
    permits: u32,
}

impl std::fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("name", &self.name())
            .field("permits", &self.permits)
            .field("fencing_token", &self.fencing_token())
            .field("lease_remaining", &self.lease_remaining())
            .field("watchdog", &self.is_renewed())
            .finish()
    }
}

guard_methods!(SemaphoreGuard);

impl SemaphoreGuard {
    pub(crate) fn new(lease: Lease, permits: u32) -> SemaphoreGuard {
        SemaphoreGuard { lease, permits }
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back and wakes the first waiter; says whether they were still
    /// this guard's. A renewal under way is let finish first.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) with
    /// [`LostReason::Expired`](crate::LostReason::Expired) when the lease had ended (the
    /// permits came back then); [`Error::Connection`](crate::Error::Connection) when the
    /// outcome is unknown (the lease then ends the permits).
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the permits, in the background.
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}
