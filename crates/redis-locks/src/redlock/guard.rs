//! The guard of a [`Redlock`](crate::Redlock).

use crate::error::Result;
use crate::lease::{Lease, Released};

/// Proof that this process holds a [`Redlock`](crate::Redlock) on a majority of its nodes:
/// its fencing token and its lease (the validity: the lease less the time the attempt took
/// and the drift allowance).
///
/// As a [`MutexGuard`](crate::MutexGuard): the watchdog (on by default) renews the lease on
/// a majority, [`lost`](RedlockGuard::lost) resolves the moment a majority can no longer be
/// proven, and [`fencing_token`](RedlockGuard::fencing_token) is greater than every earlier
/// holder's as long as the nodes keep their data (the crate's "Redlock" section says exactly
/// when, and what holds when a node loses it).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let servers = test_support::start_many(3)?;
/// use redis_locks::{Client, Redlock};
/// let mut clients = Vec::new();
/// for server in &servers {
///     clients.push(Client::connect(&server.url()).await?);
/// }
/// let lock = Redlock::new(&clients, "report")?;
/// let first = lock.lock().await?;
/// let token = first.fencing_token();
/// first.release().await?;
/// let second = lock.lock().await?;
/// assert!(second.fencing_token() > token);
/// second.release().await?;
/// # Ok(()) }
/// ```
///
/// # Drop behaviour
/// Dropping a guard releases the lock on every node in a background task, as for a
/// [`MutexGuard`](crate::MutexGuard).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RedlockGuard {
    lease: Lease,
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("lease_remaining", &self.lease_remaining())
            .field("watchdog", &self.is_renewed())
            .finish()
    }
}

crate::lease::guard_methods!(RedlockGuard);

impl RedlockGuard {
    pub(crate) fn new(lease: Lease) -> RedlockGuard {
        RedlockGuard { lease }
    }

    /// Releases the lock on every node and says whether a majority still held it for this
    /// guard. A renewal under way is let finish first, and so are the keys a renewal is
    /// restoring on nodes that had lost them (each within the node timeout), so that none
    /// lands after the release. It returns once a majority has
    /// released; the other nodes' releases go on in the background, which
    /// [`Redlock::settle`](crate::Redlock::settle) waits for (before a process exits).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when a majority of nodes no longer had this
    /// guard's key (its lease ran out; [`LostReason::Taken`](crate::LostReason::Taken) if
    /// another owner holds one of them now); [`Error::NoQuorum`](crate::Error::NoQuorum) when
    /// too many nodes did not answer to tell: the lease then ends the lock on them.
    ///
    /// # Cancel safety
    /// Dropping the future before the replies still releases, in the background.
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}
