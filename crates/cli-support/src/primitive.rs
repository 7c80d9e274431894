//! The library's primitives as the benchmarks and `redis-locks check` drive them: one handle
//! type and one guard type over `Mutex`, `FairMutex`, `ReentrantMutex`, the two sides of an
//! `RwLock`, `Redlock`, `Semaphore` (one permit per acquisition) and `MultiLock` (several
//! names per acquisition), so that `throughput`, `handoff` and `check` run every primitive
//! through the same loop.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redis_locks::LostReason;

use redis_locks::{
    Client, FairMutex, LockOptions, MultiLock, MultiLockGuard, Mutex, MutexGuard, Redlock,
    RedlockGuard, RedlockOptions, ReentrantMutex, ReentrantMutexGuard, Replication, RwLock,
    RwLockReadGuard, RwLockWriteGuard, Semaphore, SemaphoreGuard,
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
    /// `Semaphore::acquire`: one permit of N (N given with the handle).
    Semaphore,
    /// `MultiLock::lock` over several names ([`Handle::multi_lock`]; built from one name,
    /// a MultiLock over that name). Not offered on the benchmarks' command lines yet.
    #[value(skip)]
    MultiLock,
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
            Primitive::Semaphore => "Semaphore",
            Primitive::MultiLock => "MultiLock",
        }
    }

    /// Whether holders of this primitive may hold at the same time (readers, the holders of
    /// a semaphore's permits).
    pub fn shared(self) -> bool {
        matches!(self, Primitive::Read | Primitive::Semaphore)
    }
}

/// A handle of one primitive on one lock name, with its own owner id where the primitive
/// has one.
pub enum Handle {
    /// A `Mutex`.
    Mutex(Mutex),
    /// A `FairMutex`.
    FairMutex(FairMutex),
    /// A `ReentrantMutex`.
    Reentrant(ReentrantMutex),
    /// The read side of an `RwLock`.
    Read(RwLock),
    /// The write side of an `RwLock`.
    Write(RwLock),
    /// A `Redlock`.
    Redlock(Redlock),
    /// A `Semaphore` (each acquisition takes one permit).
    Semaphore(Semaphore),
    /// A `MultiLock` (each acquisition takes all its names).
    MultiLock(MultiLock),
}

/// What an acquisition of a [`Handle`] holds.
///
/// ```no_run
/// # async fn demo(client: redis_locks::Client) -> redis_locks::Result<()> {
/// use cli_support::primitive::{Handle, Primitive};
/// let handle = Handle::new(&[client], "job", Primitive::Mutex, None)?;
/// let guard = handle.acquire().await?;
/// assert!(guard.lease_remaining() > std::time::Duration::ZERO);
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub enum Guard {
    /// A `Mutex`'s or a `FairMutex`'s guard.
    Mutex(MutexGuard),
    /// A `ReentrantMutex`'s guard.
    Reentrant(ReentrantMutexGuard),
    /// An `RwLock` read guard.
    Read(RwLockReadGuard),
    /// An `RwLock` write guard.
    Write(RwLockWriteGuard),
    /// A `Redlock`'s guard.
    Redlock(RedlockGuard),
    /// A `Semaphore`'s guard: one permit.
    Semaphore(SemaphoreGuard),
    /// A `MultiLock`'s guard: every name, a fencing token each.
    MultiLock(MultiLockGuard),
    /// Several `Mutex` guards held together, taken one by one (what a MultiLock built by
    /// hand from `Mutex`es holds: `check`'s broken `caller-order-multilock`). Its lease is
    /// the earliest of theirs, and it is lost when any of them is.
    Several(Vec<MutexGuard>),
}

impl Handle {
    /// A handle of `primitive` for the lock `name` on the first of `clients` (a Redlock: on
    /// all of them): with the library's default options (a 30 s lease renewed by the
    /// watchdog), or an explicit `lease` without it. A semaphore gets 1 permit
    /// ([`Handle::with_permits`] gives it N).
    pub fn new(
        clients: &[Client],
        name: &str,
        primitive: Primitive,
        lease: Option<Duration>,
    ) -> redis_locks::Result<Handle> {
        Self::with_permits(clients, name, primitive, lease, 1)
    }

    /// As [`Handle::new`], a semaphore with `permits` permits (other primitives ignore it).
    ///
    /// # Errors
    /// `InvalidPermits` for 0 permits, as the library says; otherwise as [`Handle::new`].
    pub fn with_permits(
        clients: &[Client],
        name: &str,
        primitive: Primitive,
        lease: Option<Duration>,
        permits: u32,
    ) -> redis_locks::Result<Handle> {
        Self::build(clients, name, primitive, lease, false, None, permits)
    }

    /// A handle as [`Handle::new`] makes it, with a `lease` that the watchdog renews while a
    /// guard lives (as a long-running holder uses the library), and the acquisitions and
    /// renewals confirmed by `replication` when it is given; a semaphore with `permits`
    /// permits (other primitives ignore it).
    pub fn renewed(
        clients: &[Client],
        name: &str,
        primitive: Primitive,
        lease: Duration,
        replication: Option<Replication>,
        permits: u32,
    ) -> redis_locks::Result<Handle> {
        Self::build(
            clients,
            name,
            primitive,
            Some(lease),
            true,
            replication,
            permits,
        )
    }

    /// A `MultiLock` over `names` (in any order) on the first of `clients`, with a `lease`
    /// that the watchdog renews while a guard lives, confirmed by `replication` when given.
    ///
    /// # Errors
    /// `InvalidNames` for no names, a name given twice or too many, as the library says.
    pub fn multi_lock<S: AsRef<str>>(
        clients: &[Client],
        names: &[S],
        lease: Duration,
        replication: Option<Replication>,
    ) -> redis_locks::Result<Handle> {
        let options = LockOptions::default().lease(lease).watchdog(true);
        let options = match replication {
            Some(replication) => options.replication(replication),
            None => options,
        };
        Ok(Handle::MultiLock(clients[0].multi_lock_with(
            names.iter().map(AsRef::as_ref),
            options,
        )?))
    }

    fn build(
        clients: &[Client],
        name: &str,
        primitive: Primitive,
        lease: Option<Duration>,
        watchdog: bool,
        replication: Option<Replication>,
        permits: u32,
    ) -> redis_locks::Result<Handle> {
        let options = || {
            let options = match lease {
                Some(lease) => LockOptions::default().lease(lease).watchdog(watchdog),
                None => LockOptions::default(),
            };
            match replication {
                Some(replication) => options.replication(replication),
                None => options,
            }
        };
        let client = &clients[0];
        Ok(match primitive {
            Primitive::Redlock => Handle::Redlock(Redlock::with_options(
                clients,
                name,
                match lease {
                    Some(lease) => RedlockOptions::default().lease(lease).watchdog(watchdog),
                    None => RedlockOptions::default(),
                },
            )?),
            Primitive::Mutex => Handle::Mutex(client.mutex_with(name, options())?),
            Primitive::FairMutex => Handle::FairMutex(client.fair_mutex_with(name, options())?),
            Primitive::Reentrant => {
                Handle::Reentrant(client.reentrant_mutex_with(name, options())?)
            }
            Primitive::Read => Handle::Read(client.rwlock_with(name, options())?),
            Primitive::Write => Handle::Write(client.rwlock_with(name, options())?),
            Primitive::Semaphore => {
                Handle::Semaphore(client.semaphore_with(name, permits, options())?)
            }
            Primitive::MultiLock => Handle::MultiLock(client.multi_lock_with([name], options())?),
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
            Handle::Semaphore(semaphore) => Guard::Semaphore(semaphore.acquire().await?),
            Handle::MultiLock(multi) => Guard::MultiLock(multi.lock().await?),
        })
    }

    /// The permits an acquisition may hold at once with this handle: N for a semaphore, 1
    /// for the others (a reader shares, but is one holder).
    pub fn permits(&self) -> u32 {
        match self {
            Handle::Semaphore(semaphore) => semaphore.permits(),
            _ => 1,
        }
    }
}

impl Guard {
    /// The acquisition's fencing token (a MultiLock's, or several guards': the greatest of
    /// their tokens; [`Guard::fencing_tokens`] has each).
    pub fn fencing_token(&self) -> u64 {
        match self {
            Guard::MultiLock(_) | Guard::Several(_) => {
                return self
                    .fencing_tokens()
                    .into_iter()
                    .map(|(_, token)| token)
                    .max()
                    .unwrap_or(0);
            }
            Guard::Mutex(guard) => guard.fencing_token(),
            Guard::Reentrant(guard) => guard.fencing_token(),
            Guard::Read(guard) => guard.fencing_token(),
            Guard::Write(guard) => guard.fencing_token(),
            Guard::Redlock(guard) => guard.fencing_token(),
            Guard::Semaphore(guard) => guard.fencing_token(),
        }
        .get()
    }

    /// Each name held with its fencing token: a MultiLock's names (in the order taken) or
    /// several guards' (in the order they were taken); empty for the other primitives.
    pub fn fencing_tokens(&self) -> Vec<(String, u64)> {
        match self {
            Guard::MultiLock(guard) => guard
                .fencing_tokens()
                .map(|(name, token)| (name.to_string(), token.get()))
                .collect(),
            Guard::Several(guards) => guards
                .iter()
                .map(|guard| (guard.name().to_string(), guard.fencing_token().get()))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// How much of the lease is certainly left; zero once it may have run out.
    pub fn lease_remaining(&self) -> Duration {
        match self {
            Guard::MultiLock(guard) => guard.lease_remaining(),
            Guard::Several(_) => self
                .lease_deadline()
                .saturating_duration_since(tokio::time::Instant::now()),
            Guard::Mutex(guard) => guard.lease_remaining(),
            Guard::Reentrant(guard) => guard.lease_remaining(),
            Guard::Read(guard) => guard.lease_remaining(),
            Guard::Write(guard) => guard.lease_remaining(),
            Guard::Redlock(guard) => guard.lease_remaining(),
            Guard::Semaphore(guard) => guard.lease_remaining(),
        }
    }

    /// Why the hold is not certain any more, if it is not (a passed lease deadline counts).
    pub fn lost_reason(&self) -> Option<LostReason> {
        match self {
            Guard::MultiLock(guard) => guard.lost_reason(),
            Guard::Several(guards) => guards.iter().find_map(MutexGuard::lost_reason),
            Guard::Mutex(guard) => guard.lost_reason(),
            Guard::Reentrant(guard) => guard.lost_reason(),
            Guard::Read(guard) => guard.lost_reason(),
            Guard::Write(guard) => guard.lost_reason(),
            Guard::Redlock(guard) => guard.lost_reason(),
            Guard::Semaphore(guard) => guard.lost_reason(),
        }
    }

    /// Resolves the moment the hold is known lost (the guard's `lost()`).
    pub fn lost(&self) -> Pin<Box<dyn Future<Output = LostReason> + Send + 'static>> {
        match self {
            Guard::MultiLock(guard) => Box::pin(guard.lost()),
            Guard::Several(guards) => {
                let losses: Vec<_> = guards.iter().map(|guard| Box::pin(guard.lost())).collect();
                if losses.is_empty() {
                    return Box::pin(std::future::pending());
                }
                Box::pin(async move { futures_util::future::select_all(losses).await.0 })
            }
            Guard::Mutex(guard) => Box::pin(guard.lost()),
            Guard::Reentrant(guard) => Box::pin(guard.lost()),
            Guard::Read(guard) => Box::pin(guard.lost()),
            Guard::Write(guard) => Box::pin(guard.lost()),
            Guard::Redlock(guard) => Box::pin(guard.lost()),
            Guard::Semaphore(guard) => Box::pin(guard.lost()),
        }
    }

    /// The instant (local monotonic clock) until which the hold is certain.
    pub fn lease_deadline(&self) -> tokio::time::Instant {
        match self {
            Guard::MultiLock(guard) => guard.lease_deadline(),
            Guard::Several(guards) => guards
                .iter()
                .map(MutexGuard::lease_deadline)
                .min()
                .unwrap_or_else(tokio::time::Instant::now),
            Guard::Mutex(guard) => guard.lease_deadline(),
            Guard::Reentrant(guard) => guard.lease_deadline(),
            Guard::Read(guard) => guard.lease_deadline(),
            Guard::Write(guard) => guard.lease_deadline(),
            Guard::Redlock(guard) => guard.lease_deadline(),
            Guard::Semaphore(guard) => guard.lease_deadline(),
        }
    }

    /// Releases the hold.
    pub async fn release(self) -> redis_locks::Result<()> {
        match self {
            Guard::Several(guards) => {
                // Every guard is released, whatever the others say; the first failure is
                // the answer.
                let outcomes =
                    futures_util::future::join_all(guards.into_iter().map(MutexGuard::release))
                        .await;
                outcomes
                    .into_iter()
                    .try_for_each(|outcome| outcome.map(drop))
            }
            Guard::MultiLock(guard) => guard.release().await.map(drop),
            Guard::Mutex(guard) => guard.release().await.map(drop),
            Guard::Reentrant(guard) => guard.release().await.map(drop),
            Guard::Read(guard) => guard.release().await.map(drop),
            Guard::Write(guard) => guard.release().await.map(drop),
            Guard::Redlock(guard) => guard.release().await.map(drop),
            Guard::Semaphore(guard) => guard.release().await.map(drop),
        }
    }

    /// How many permits the hold counts for: a semaphore guard's, else 1.
    pub fn permits(&self) -> u32 {
        match self {
            Guard::Semaphore(guard) => guard.permits(),
            _ => 1,
        }
    }
}
