//! The guards of an [`RwLock`](crate::RwLock): a read hold and a write hold.

use crate::engine::holds::HoldsLock;
use crate::error::Result;
use crate::lease::{Lease, Released, guard_methods};
use crate::state::HoldMode;

/// A read hold of an [`RwLock`](crate::RwLock): this guard's own share of the lock, with its
/// own lease and fencing token; other readers may hold it at the same time, no writer can.
///
/// Like every guard: the lease is renewed by the watchdog (when on), [`lost`](Self::lost)
/// resolves the moment the hold is lost, and dropping the guard releases the hold in the
/// background. No other reader can release or extend this hold: it is known by its own
/// random id ([`owner_token`](Self::owner_token)).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let lock = client.rwlock("catalog")?;
/// let a = lock.read().await?;
/// let b = client.rwlock("catalog")?.read().await?; // another owner reads too
/// assert!(b.fencing_token() > a.fencing_token());
/// assert!(a.release().await?.is_freed());
/// b.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct RwLockReadGuard {
    lease: Lease,
}

guard_methods!(RwLockReadGuard);

impl RwLockReadGuard {
    pub(crate) fn new(lease: Lease) -> RwLockReadGuard {
        RwLockReadGuard { lease }
    }

    /// Releases this read hold; a writer waiting for the last reader is woken.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold's lease had run out
    /// ([`LostReason::Taken`](crate::LostReason::Taken) when another owner holds the lock
    /// now in a mode that excludes it, else `Expired`);
    /// [`Error::Connection`](crate::Error::Connection) when the outcome is unknown (the
    /// lease then ends the hold).
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the hold, in the background.
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}

/// A write hold of an [`RwLock`](crate::RwLock): no other owner holds the lock, for reading
/// or writing, while it lasts. The owner may take the write lock again (each re-entry is a
/// guard of its own; they share the first one's fencing token) and may read as well.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let lock = client.rwlock("catalog")?;
/// let write = lock.write().await?;
/// let again = lock.write().await?; // the same owner re-enters
/// assert_eq!(again.fencing_token(), write.fencing_token());
/// assert_eq!(again.release().await?.holds(), 1);
/// let read = write.downgrade().await?; // no writer can enter in between
/// assert!(client.rwlock("catalog")?.try_write().await.is_err());
/// read.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct RwLockWriteGuard {
    lease: Lease,
    lock: HoldsLock,
}

impl std::fmt::Debug for RwLockWriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLockWriteGuard")
            .field("lease", &self.lease)
            .field("owner", self.lock.owner())
            .finish()
    }
}

guard_methods!(RwLockWriteGuard);

impl RwLockWriteGuard {
    pub(crate) fn new(lease: Lease, lock: HoldsLock) -> RwLockWriteGuard {
        RwLockWriteGuard { lease, lock }
    }

    /// Releases this write hold and says how many write holds the owner still has
    /// ([`Released::Freed`] when this was the last: waiting readers, or the next writer,
    /// are woken).
    ///
    /// # Errors
    /// As [`RwLockReadGuard::release`].
    ///
    /// # Cancel safety
    /// As [`RwLockReadGuard::release`].
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }

    /// Turns this write hold into a read hold, in one step on the server: no other writer
    /// can enter in between. The hold keeps its lease, fencing token and watchdog. When it
    /// was the owner's last write hold, the readers at the front of the line (those ahead
    /// of the first waiting writer) are let in.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold's lease had run out (the
    /// guard is consumed and the hold is gone); [`Error::Connection`](crate::Error::Connection)
    /// when the outcome is unknown: the guard is dropped, which releases the hold whichever
    /// mode it is in.
    pub async fn downgrade(self) -> Result<RwLockReadGuard> {
        self.lock.downgrade(self.lease.owner_token()).await?;
        self.lease.held_in(HoldMode::Read);
        Ok(RwLockReadGuard::new(self.lease))
    }
}
