//! `ReentrantMutex`: one owner at a time, who may take the lock again and again.
//!
//! Seed 001's reentrant lock is a hash `{owner -> hold count}`. This one is kept in the same
//! hash of holds as an [`RwLock`](crate::RwLock)'s write side (`engine/holds/holds.lua`, with the
//! kind `reentrant`): each acquisition is a hold of its own with its own id, so a cancelled
//! re-entry takes back exactly its own hold and never another's count.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::holds::{HoldsLock, Kind};
use crate::error::Result;
use crate::lease::{Lease, Released, guard_methods};
use crate::options::LockOptions;
use crate::owner::OwnerId;
use crate::state::{HoldMode, HoldsState};
/// A distributed lock that its owner may take again while holding it.
///
/// The owner is an explicit [`OwnerId`], never a thread (async tasks move between threads):
/// one is generated per handle, or set with [`with_owner`](ReentrantMutex::with_owner). A
/// handle is one owner, so it is not `Clone`: tasks that must exclude each other make a
/// handle each, and code that re-enters shares one handle (by reference, or `Arc`). Each `lock()` by the owner while it holds the
/// lock is granted at once and returns a guard of its own (a *hold*); the lock is free when
/// the last hold is released, and each release says how many are left ([`Released`]).
///
/// - **Fencing**: the first hold takes a new fencing token; re-entries keep it.
/// - **Leases**: every hold has its own lease on the server, renewed by its guard's watchdog;
///   a re-entry renews the owner's other holds on the server to at least its own lease. A
///   guard still counts on its own lease only (its `lost()` resolves at its own deadline,
///   unless its watchdog renews it); a hold whose lease ran out counts for nothing, while
///   the owner's other holds keep the lock.
/// - **Waiting**: other owners wait in line, first come first served, woken one at a time
///   (as for a [`FairMutex`](crate::FairMutex)); cancel-safe as every `lock()`.
/// - **Kinds**: a name held as a `ReentrantMutex` refuses to be taken as any other primitive
///   ([`Error::WrongType`](crate::Error::WrongType)), and the other way round.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use redis_locks::{OwnerId, Released};
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let lock = client.reentrant_mutex("ledger")?.with_owner(OwnerId::new("job-42")?);
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // re-entry: granted at once
/// assert_eq!(inner.fencing_token(), outer.fencing_token());
/// assert_eq!(lock.state().await?.hold_count(), 2);
/// assert_eq!(inner.release().await?, Released::StillHeld { holds: 1 });
/// assert_eq!(outer.release().await?, Released::Freed);
/// # Ok(()) }
/// ```
pub struct ReentrantMutex {
    lock: HoldsLock,
}

impl std::fmt::Debug for ReentrantMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReentrantMutex")
            .field("name", &self.name())
            .field("owner", self.owner())
            .field("options", self.lock.options())
            .finish()
    }
}

impl Client {
    /// A [`ReentrantMutex`] handle for the lock `name` with a fresh owner id and default
    /// options (a 30 s lease renewed by a watchdog, 2 s place leases).
    ///
    /// # Errors
    /// As [`Client::mutex`].
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        self.reentrant_mutex_with(name, LockOptions::default())
    }

    /// A [`ReentrantMutex`] handle with the given options.
    ///
    /// # Errors
    /// As [`Client::fair_mutex_with`].
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        let lock = HoldsLock::new(self.clone(), name, options, Kind::Reentrant)?;
        Ok(ReentrantMutex { lock })
    }
}

impl ReentrantMutex {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The owner this handle acquires for.
    pub fn owner(&self) -> &OwnerId {
        self.lock.owner()
    }

    /// This handle acting for `owner`: every handle with the same owner id, in any process,
    /// re-enters the lock that owner holds.
    pub fn with_owner(mut self, owner: OwnerId) -> ReentrantMutex {
        self.lock.set_owner(owner);
        self
    }

    /// Takes the lock if it is free and nobody waits, or re-enters it if this owner holds it.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when another owner holds it (with the time its
    /// hold still runs) or others wait first (`retry_after` `None`);
    /// [`Error::WrongType`](crate::Error::WrongType) when the name is in use as another
    /// primitive; [`Error::Connection`](crate::Error::Connection).
    ///
    /// # Cancel safety
    /// A grant the caller never saw is released in the background.
    pub async fn try_lock(&self) -> Result<ReentrantMutexGuard> {
        let lease = self.lock.try_acquire(HoldMode::Write).await?;
        Ok(ReentrantMutexGuard { lease })
    }

    /// Takes the lock, waiting in line as long as it takes; re-enters at once if this owner
    /// holds it.
    ///
    /// # Errors
    /// As [`ReentrantMutex::try_lock`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// Dropping the future gives up the place in line and releases a grant the caller never
    /// saw (only that hold: the owner's other holds stay).
    pub async fn lock(&self) -> Result<ReentrantMutexGuard> {
        self.lock_until(None).await
    }

    /// As [`ReentrantMutex::lock`], waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when the turn did not come in time;
    /// otherwise as [`ReentrantMutex::lock`].
    ///
    /// # Cancel safety
    /// As [`ReentrantMutex::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<ReentrantMutexGuard> {
        self.lock_until(Instant::now().checked_add(wait)).await
    }

    /// The holder, its holds (each with its remaining lease), the fencing counter and the
    /// waiters, read in one step.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType) when the name holds something else;
    /// [`Error::Connection`](crate::Error::Connection).
    pub async fn state(&self) -> Result<HoldsState> {
        self.lock.state().await
    }

    async fn lock_until(&self, deadline: Option<Instant>) -> Result<ReentrantMutexGuard> {
        let lease = self.lock.acquire(HoldMode::Write, deadline).await?;
        Ok(ReentrantMutexGuard { lease })
    }
}

/// One hold of a [`ReentrantMutex`]: its fencing token (shared by the owner's re-entries)
/// and its own lease.
///
/// Released with [`release`](ReentrantMutexGuard::release), which says how many holds the owner
/// still has; dropped, it releases its hold in the background.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let guard = client.reentrant_mutex("ledger")?.lock().await?;
/// assert!(guard.release().await?.is_freed());
/// # Ok(()) }
/// ```
#[must_use = "the hold is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct ReentrantMutexGuard {
    lease: Lease,
}

guard_methods!(ReentrantMutexGuard);

impl ReentrantMutexGuard {
    /// Releases this hold: [`Released::StillHeld`] with the owner's holds left, or
    /// [`Released::Freed`] when it was the last (the next owner in line is woken).
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when this hold's lease had run out
    /// ([`LostReason::Taken`](crate::LostReason::Taken) when another owner holds the lock
    /// now in a mode that excludes it, else `Expired`);
    /// [`Error::Connection`](crate::Error::Connection) when the outcome is unknown.
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the hold, in the background.
    pub async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}
