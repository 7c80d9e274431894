//! `RwLock`: many readers or one writer, every reader with its own lease, writers not
//! starved by other owners' readers; cluster-ready (one hash key and its companions, all in the lock's slot).
//!
//! The lock is the hash-of-holds engine's ([`HoldsLock`], `engine/holds/`, whose `holds.lua`
//! describes the layout and whose scripts are beside it), shared with
//! [`ReentrantMutex`](crate::ReentrantMutex) (the kind tells them apart); the guards are in
//! `guard.rs`. A read hold nobody contends for is taken without a script, as a plain key
//! (see [`first`](crate::engine::first)).

mod guard;

use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::holds::{HoldsLock, Kind};
use crate::error::Result;
use crate::options::LockOptions;
use crate::owner::OwnerId;
use crate::state::{HoldMode, HoldsState};

pub use guard::{RwLockReadGuard, RwLockWriteGuard};

/// A distributed read-write lock: many readers at once, or one writer.
///
/// # Owners and holds
/// A handle acts for one [`OwnerId`] (a fresh one per handle, or set with
/// [`with_owner`](RwLock::with_owner)). A handle is one owner, so it is not `Clone`: tasks
/// that must exclude each other make a handle each (`client.rwlock(name)` is cheap), and
/// tasks that act as one owner share one handle (`Arc<RwLock>`) or one owner id. Every
/// `read()` or `write()` returns a guard with a hold of its own: its own lease on the
/// server's clock, its own fencing token, its own random id. So a crashed reader keeps writers out only until *its* lease ends, and no
/// reader can release or extend another's hold. Fencing tokens come from one counter for
/// readers and writers: a writer's first token is greater than every earlier hold's (its
/// write re-entries share it; reads it takes while writing take new ones).
///
/// ```compile_fail
/// fn share(lock: &redis_locks::RwLock) -> redis_locks::RwLock {
///     lock.clone() // a handle is one owner: make another with `client.rwlock(name)`
/// }
/// ```
///
/// # Priority policy
/// Fair, as tokio's `RwLock`: waiters queue on the server in order of arrival. A reader
/// enters at once when no writer holds the lock and no writer waits before it; **once a
/// writer waits, readers that come later queue behind it**, so a stream of readers cannot
/// starve a writer, and the readers that queued behind a writer enter together after it. A
/// writer enters when nobody holds the lock and nobody waits before it. Releases wake only
/// those who may enter: a write release wakes the readers at the front of the queue (or the
/// next writer); a read release that leaves no reader wakes the writer at the front.
///
/// A writer that dies while waiting holds the readers behind it up for at most its place
/// lease ([`LockOptions::place_lease`], 2 s by default) and a third of theirs (when they
/// renew their places and find it gone): its place is then dropped and the readers are let
/// in. A release wakes at most the first 64 waiters at the queue's front; readers behind
/// them look again when they renew their places.
///
/// Re-entry is by owner: an owner that holds a read reads again at once, even past a
/// waiting writer (it would otherwise wait for a writer that waits for it). So an owner
/// whose reads overlap without a gap keeps writers out as one long read would: give tasks
/// that read independently a handle each.
///
/// # Re-entry, downgrade, upgrade
/// - The writer may take the write lock again (a re-entry keeps its fencing token) and may
///   read while it writes; a reader may read again even while a writer waits (it does not
///   queue behind a writer that waits for it).
/// - [`RwLockWriteGuard::downgrade`] turns a write hold into a read hold in one step: no
///   other writer can enter in between.
/// - An owner that holds only read holds and asks to write is refused at once with
///   [`Error::Upgrade`](crate::Error::Upgrade): two owners upgrading would each wait for the
///   other's read hold forever. Release the read holds, then ask to write.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let prices = client.rwlock("prices")?;
/// let reader = prices.read().await?;
/// // A writer of another owner cannot enter while the read hold lives:
/// assert!(client.rwlock("prices")?.try_write().await.is_err());
/// // An upgrade is refused at once:
/// assert!(matches!(prices.write().await, Err(redis_locks::Error::Upgrade { .. })));
/// reader.release().await?;
/// let writer = client.rwlock("prices")?.write().await?;
/// assert_eq!(prices.state().await?.holds.len(), 1);
/// writer.release().await?;
/// # Ok(()) }
/// ```
pub struct RwLock {
    lock: HoldsLock,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name())
            .field("owner", self.owner())
            .field("options", self.lock.options())
            .finish()
    }
}

impl Client {
    /// An [`RwLock`] handle for the lock `name` with a fresh owner id and default options
    /// (a 30 s lease per hold renewed by a watchdog, 2 s place leases).
    ///
    /// # Errors
    /// As [`Client::mutex`].
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        self.rwlock_with(name, LockOptions::default())
    }

    /// An [`RwLock`] handle with the given options.
    ///
    /// # Errors
    /// As [`Client::fair_mutex_with`].
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        let lock = HoldsLock::new(self.clone(), name, options, Kind::RwLock)?;
        Ok(RwLock { lock })
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The owner this handle acquires for.
    pub fn owner(&self) -> &OwnerId {
        self.lock.owner()
    }

    /// This handle acting for `owner` (re-entry and upgrade are decided by owner id).
    pub fn with_owner(mut self, owner: OwnerId) -> RwLock {
        self.lock.set_owner(owner);
        self
    }

    /// Reads if no writer holds the lock or waits for it (or if this owner holds it already).
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when a writer holds it (with the time its hold
    /// still runs) or waits (`retry_after` `None`); [`Error::WrongType`](crate::Error::WrongType)
    /// when the name is in use as another primitive; [`Error::Connection`](crate::Error::Connection).
    ///
    /// # Cancel safety
    /// A grant the caller never saw is released in the background.
    pub async fn try_read(&self) -> Result<RwLockReadGuard> {
        Ok(RwLockReadGuard::new(
            self.lock.try_acquire(HoldMode::Read).await?,
        ))
    }

    /// Reads, waiting in line behind writers that came first, as long as it takes.
    ///
    /// # Errors
    /// As [`RwLock::try_read`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// Dropping the future gives up the place in line and releases a grant the caller never
    /// saw.
    pub async fn read(&self) -> Result<RwLockReadGuard> {
        Ok(RwLockReadGuard::new(
            self.lock.acquire(HoldMode::Read, None).await?,
        ))
    }

    /// As [`RwLock::read`], waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when the turn did not come in time;
    /// otherwise as [`RwLock::read`].
    ///
    /// # Cancel safety
    /// As [`RwLock::read`].
    pub async fn read_timeout(&self, wait: Duration) -> Result<RwLockReadGuard> {
        let deadline = Instant::now().checked_add(wait);
        Ok(RwLockReadGuard::new(
            self.lock.acquire(HoldMode::Read, deadline).await?,
        ))
    }

    /// Writes if nobody holds the lock and nobody waits (or re-enters if this owner writes).
    ///
    /// # Errors
    /// [`Error::Upgrade`](crate::Error::Upgrade) when this owner holds only read holds (the
    /// holds of read guards this handle dropped, or of `read()` calls it cancelled, are not
    /// among them: their background releases are waited for and the write asked again);
    /// otherwise as [`RwLock::try_read`].
    ///
    /// # Cancel safety
    /// As [`RwLock::try_read`].
    pub async fn try_write(&self) -> Result<RwLockWriteGuard> {
        let lease = self.lock.try_acquire(HoldMode::Write).await?;
        Ok(RwLockWriteGuard::new(lease, self.lock.clone()))
    }

    /// Writes, waiting in line as long as it takes; re-enters at once if this owner writes.
    ///
    /// # Errors
    /// As [`RwLock::try_write`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// As [`RwLock::read`].
    pub async fn write(&self) -> Result<RwLockWriteGuard> {
        let lease = self.lock.acquire(HoldMode::Write, None).await?;
        Ok(RwLockWriteGuard::new(lease, self.lock.clone()))
    }

    /// As [`RwLock::write`], waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when the turn did not come in time;
    /// otherwise as [`RwLock::write`].
    ///
    /// # Cancel safety
    /// As [`RwLock::read`].
    pub async fn write_timeout(&self, wait: Duration) -> Result<RwLockWriteGuard> {
        let deadline = Instant::now().checked_add(wait);
        let lease = self.lock.acquire(HoldMode::Write, deadline).await?;
        Ok(RwLockWriteGuard::new(lease, self.lock.clone()))
    }

    /// Every live hold (mode, owner, remaining lease, token), the fencing counter and the
    /// waiting readers and writers, read in one step.
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType) when the name holds something else;
    /// [`Error::Connection`](crate::Error::Connection).
    pub async fn state(&self) -> Result<HoldsState> {
        self.lock.state().await
    }
}
