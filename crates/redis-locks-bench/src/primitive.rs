//! The library's primitives as the benchmarks drive them: one handle type and one guard type
//! over `Mutex`, `FairMutex`, `ReentrantMutex`, the two sides of an `RwLock` and `Redlock`, so that
//! `throughput` and `handoff` run every primitive through the same loop.

use std::time::Duration;

use redis_locks::{
    Client, FairMutex, FairMutexOptions, Mutex, MutexGuard, MutexOptions, Redlock, RedlockGuard,
    RedlockOptions, ReentrantGuard, ReentrantMutex, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use serde::Serialize;

/// Which primitive (and which side of an `RwLock`) a benchmark takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    /// `Mutex::lock`.
    Mutex,
    /// `FairMutex::lock`.
    #[value(alias = "fair")]
    FairMutex,
    /// `ReentrantMutex::lock` (one hold per acquisition, no re-entry).
    Reentrant,
    /// `RwLock::read`.
    Read,
    /// `RwLock::write`.
    Write,
    /// `Redlock::lock` over every `--redis` node (or `--nodes` private servers).
    Redlock,
}

impl Primitive {
    /// The name tables show.
    pub fn label(self) -> &'static str {
        match self {
            Primitive::Mutex => "Mutex",
            Primitive::FairMutex => "FairMutex",
            Primitive::Reentrant => "ReentrantMutex",
            Primitive::Read => "RwLock read",
            Primitive::Write => "RwLock write",
            Primitive::Redlock => "Redlock",
        }
    }

    /// Whether holders of this primitive may hold at the same time (readers).
    pub fn shared(self) -> bool {
        self == Primitive::Read
    }
}

/// A handle of one primitive on one lock name, with its own owner id where the primitive
/// has one.
pub enum Handle {
    Mutex(Mutex),
    FairMutex(FairMutex),
    Reentrant(ReentrantMutex),
    Read(RwLock),
    Write(RwLock),
    Redlock(Redlock),
}

/// What an acquisition of a [`Handle`] holds.
pub enum Guard {
    Mutex(MutexGuard),
    Reentrant(ReentrantGuard),
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
    Redlock(RedlockGuard),
}

impl Handle {
    /// A handle of `primitive` for the lock `name` on the first of `clients` (a Redlock: on
    /// all of them): with the library's default options (a 30 s lease renewed by the
    /// watchdog), or an explicit `lease` without it.
    pub fn new(
        clients: &[Client],
        name: &str,
        primitive: Primitive,
        lease: Option<Duration>,
    ) -> redis_locks::Result<Handle> {
        let fair = || match lease {
            Some(lease) => FairMutexOptions::default().lease(lease),
            None => FairMutexOptions::default(),
        };
        let client = &clients[0];
        Ok(match primitive {
            Primitive::Redlock => Handle::Redlock(Redlock::with_options(
                clients,
                name,
                match lease {
                    Some(lease) => RedlockOptions::default().lease(lease),
                    None => RedlockOptions::default(),
                },
            )?),
            Primitive::Mutex => Handle::Mutex(client.mutex_with(
                name,
                match lease {
                    Some(lease) => MutexOptions::default().lease(lease),
                    None => MutexOptions::default(),
                },
            )?),
            Primitive::FairMutex => Handle::FairMutex(client.fair_mutex_with(name, fair())?),
            Primitive::Reentrant => Handle::Reentrant(client.reentrant_mutex_with(name, fair())?),
            Primitive::Read => Handle::Read(client.rwlock_with(name, fair())?),
            Primitive::Write => Handle::Write(client.rwlock_with(name, fair())?),
        })
    }

    /// Acquires, waiting as long as it takes.
    pub async fn acquire(&self) -> redis_locks::Result<Guard> {
        Ok(match self {
            Handle::Mutex(mutex) => Guard::Mutex(mutex.lock().await?),
            Handle::FairMutex(fair) => Guard::Mutex(fair.lock().await?),
            Handle::Reentrant(reentrant) => Guard::Reentrant(reentrant.lock().await?),
            Handle::Read(rwlock) => Guard::Read(rwlock.read().await?),
            Handle::Write(rwlock) => Guard::Write(rwlock.write().await?),
            Handle::Redlock(redlock) => Guard::Redlock(redlock.lock().await?),
        })
    }
}

impl Guard {
    /// The acquisition's fencing token.
    pub fn fencing_token(&self) -> u64 {
        match self {
            Guard::Mutex(guard) => guard.fencing_token(),
            Guard::Reentrant(guard) => guard.fencing_token(),
            Guard::Read(guard) => guard.fencing_token(),
            Guard::Write(guard) => guard.fencing_token(),
            Guard::Redlock(guard) => guard.fencing_token(),
        }
        .get()
    }

    /// Releases the hold.
    pub async fn release(self) -> redis_locks::Result<()> {
        match self {
            Guard::Mutex(guard) => guard.release().await,
            Guard::Reentrant(guard) => guard.release().await.map(drop),
            Guard::Read(guard) => guard.release().await.map(drop),
            Guard::Write(guard) => guard.release().await.map(drop),
            Guard::Redlock(guard) => guard.release().await,
        }
    }
}
