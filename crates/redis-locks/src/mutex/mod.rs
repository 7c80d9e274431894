//! `Mutex`: one holder at a time, with an owner token, a lease and a fencing token.
//!
//! The lock itself is the string-key engine's ([`StringLock`]); this module adds the
//! `Mutex`'s side of the acquire loop: its waiters of one lock in this process take local
//! turns and share one place in the lock's queue.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::string_lock::{Ask, StringLock};
use crate::error::{Error, Result};
use crate::key::LockKeys;
use crate::lease::{Lease, OwedRelease};
use crate::options::LockOptions;
use crate::state::LockState;
use crate::token::FencingToken;
use crate::wait::HandedOver;
use crate::wait::{Contender, Line, Try, acquire};

pub use crate::engine::string_lock::MutexGuard;

/// A distributed mutual-exclusion lock on one Redis server: at most one holder at a time.
///
/// The handle is cheap to clone and holds no lock by itself; each successful
/// [`lock`](Mutex::lock) returns a [`MutexGuard`] with a random owner token of its own (one
/// that no other guard ever holds), a lease and a fencing token. Names follow the key layout
/// of [`LockKeys`].
///
/// Waiting does not poll: waiting processes queue on the server, and a release hands the lock
/// straight to the first of them — it writes the lock key with the owner token that process's
/// waiters registered, takes the next fencing token and publishes the grant on the lock's wake
/// channel, so the waiter holds the lock when the message reaches it, without asking Redis
/// again (its short, place-long lease is then extended to the full lease in the background;
/// see the crate README, "Waiting"). A waiter whose holder crashed retries the moment the
/// holder's lease ends. Waiters of one lock inside one process take turns in FIFO order and
/// share the process's place in line and its owner token; only the one whose turn it is talks
/// to Redis.
/// Across processes, waiters are served in line, but the first attempt of a `lock()` that
/// finds no waiter of its own process (the fast path) takes a free lock whoever waits: use
/// [`FairMutex`](crate::FairMutex) for strict first-come, first-served.
///
/// # When not to use it
/// - For exclusion between tasks of one process, use `tokio::sync::Mutex`: it costs no
///   network round trip.
/// - Where a paused holder must never act after losing the lock, the lease alone is not
///   enough; make the protected resource check [`MutexGuard::fencing_token`].
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use std::time::Duration;
/// use redis_locks::{Client, LockOptions};
///
/// let client = Client::connect(&server.url()).await?;
/// let mutex = client.mutex_with("jobs:nightly", LockOptions::default().lease(Duration::from_secs(10)))?;
///
/// let guard = mutex.lock_timeout(Duration::from_secs(1)).await?;
/// // Only one process gets here at a time.
/// let busy = mutex.try_lock().await.unwrap_err();
/// assert!(busy.is_held());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    lock: StringLock,
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("name", &self.name())
            .field("options", self.lock.options())
            .finish()
    }
}

impl Client {
    /// A [`Mutex`] handle for the lock `name`, with default options (a 30 s lease renewed by
    /// a watchdog).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name [`LockKeys::new`] refuses (empty, over 1024 bytes, a
    /// broken hash tag, or one that would share keys with another lock).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.mutex_with(name, LockOptions::default())
    }

    /// A [`Mutex`] handle for the lock `name` with the given options.
    ///
    /// # Errors
    /// As [`Client::mutex`]; also [`Error::InvalidDuration`] for a lease under 3 ms or over
    /// 100 years, a retry delay over 1 hour, or a place lease under 3 ms or over 1 hour.
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        Mutex::new(self.clone(), self.keys(name)?, options)
    }
}

impl Mutex {
    fn new(client: Client, keys: LockKeys, options: LockOptions) -> Result<Mutex> {
        Ok(Mutex {
            lock: StringLock::new(client, keys, options)?,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The Redis keys behind this lock.
    pub fn keys(&self) -> &LockKeys {
        self.lock.keys()
    }

    /// Tries once to take the lock.
    ///
    /// # Errors
    /// [`Error::Held`] when another owner holds it, with how long its lease still runs;
    /// [`Error::WrongType`] when the lock key holds another Redis type, or its fencing
    /// counter is not an integer (a grant taken meanwhile is given back);
    /// [`Error::Connection`] when Redis did not answer.
    ///
    /// # Cancel safety
    /// If the future is dropped after the request went out, the server may have granted the
    /// lock; it is then released by owner token in a background task.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        self.try_once(|retry_after| Error::Held {
            name: self.name().to_string(),
            retry_after,
        })
        .await
    }

    /// One fast attempt that says how long a refusal lasts; `refused` makes the error.
    async fn try_once(
        &self,
        refused: impl FnOnce(Option<Duration>) -> Error,
    ) -> Result<MutexGuard> {
        match self
            .lock
            .attempt(Ask::Fast { pttl: true }, Some(Instant::now()))
            .await?
        {
            Try::Won(lease) => Ok(MutexGuard::new(lease.replicated().await?)),
            Try::Held(retry_after) => Err(refused(retry_after)),
        }
    }

    /// Waits as long as it takes to take the lock.
    ///
    /// # Errors
    /// As [`Mutex::try_lock`], except that a held lock is waited for, not reported.
    ///
    /// # Cancel safety
    /// As [`Mutex::try_lock`]: dropping the future at any point leaves no lock behind beyond
    /// the background release. (While it waits in line, a grant to its process's line token —
    /// an attempt's or a release's handover — is the line's: the next waiter of the process
    /// takes it, or the last one to go releases it as it leaves the line.) A future that is
    /// kept but no longer polled (say, pinned in a
    /// `select!` whose other branch won) holds its turn among this process's waiters of the
    /// lock, as a held `tokio::sync::MutexGuard` would: drop it rather than park it.
    pub async fn lock(&self) -> Result<MutexGuard> {
        self.acquire_until(None).await
    }

    /// Waits at most `wait` to take the lock; `Duration::ZERO` tries exactly once.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when the lock stayed held for all of `wait`, with the holder's
    /// remaining lease at the last attempt; otherwise as [`Mutex::try_lock`].
    ///
    /// # Cancel safety
    /// As [`Mutex::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<MutexGuard> {
        // A wait too long for the clock to represent is a wait as long as it takes.
        self.acquire_until(Instant::now().checked_add(wait)).await
    }

    /// Reads who holds the lock, for how long, and the fencing counter, in one step.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a key of the lock holds another Redis type;
    /// [`Error::Connection`] when Redis did not answer.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::Client::connect(&server.url()).await?;
    /// let mutex = client.mutex("inventory")?;
    /// assert!(mutex.state().await?.holder.is_none());
    /// let guard = mutex.lock().await?;
    /// let state = mutex.state().await?;
    /// assert_eq!(state.holder.unwrap().owner, guard.owner_token().as_str());
    /// assert!(state.fencing_counter.unwrap() >= guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn state(&self) -> Result<LockState> {
        self.lock.state().await
    }

    /// Whether anyone holds the lock right now.
    ///
    /// # Errors
    /// As [`Mutex::state`].
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.state().await?.holder.is_some())
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<MutexGuard> {
        let on = self
            .lock
            .client()
            .wait_on(self.lock.options().get_wait_options());
        let contending = Contending {
            mutex: self,
            place: None,
        };
        let lease = acquire(on, contending, deadline).await?;
        Ok(MutexGuard::new(lease))
    }
}

/// A `Mutex`'s side of the acquire loop: the fast pipeline first, then the acquire script,
/// which marks a held lock and gives this process's waiters a place in the lock's queue (one
/// place, [`LocalQueue::id`](crate::wait::LocalQueue::id), shared by the waiters of the lock
/// in this process, which take turns) with their owner token registered, so that a release
/// hands the lock to them alone, in turn.
struct Contending<'a> {
    mutex: &'a Mutex,
    /// The place in line this wait's attempts took, to be woken by.
    place: Option<Arc<str>>,
}

impl Contending<'_> {
    /// One attempt of the acquire script, in `line`.
    async fn in_line(&mut self, line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        let Some(local) = line.local else {
            // The loop gives every contender with local turns its queue; without one, there
            // is no place to take: ask once, the fast way.
            return self
                .mutex
                .lock
                .attempt(Ask::Fast { pttl: true }, deadline)
                .await;
        };
        let lock = &self.mutex.lock;
        local.placing(lock.client().node(), lock.keys());
        self.place = Some(local.id().clone());
        let (owner, nonce) = local.asking();
        let ask = Ask::Waiting {
            mark: line.mark,
            waiter: local.id().clone(),
            owner: owner.clone(),
            nonce,
        };
        // Before the request goes out: the place the server renews counts from no earlier.
        let sent_at = Instant::now();
        let attempt = lock.attempt(ask, deadline).await?;
        match &attempt {
            Try::Won(_) => {
                local.unplaced();
                local.granted(&owner);
            }
            Try::Held(_) => {
                local.refused(&owner, nonce, sent_at, lock.options().get_place_lease());
            }
        }
        Ok(attempt)
    }
}

impl Contender for Contending<'_> {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Mutex
    }

    fn name(&self) -> &str {
        self.mutex.name()
    }

    fn channel(&self) -> &str {
        self.mutex.lock.keys().wake_channel()
    }

    async fn attempt(&mut self, line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        self.in_line(line, deadline).await
    }

    async fn first(&mut self, deadline: Option<Instant>, line: Option<Line<'_>>) -> Result<Try> {
        if let Some(line) = line {
            // This process waited for the lock a moment ago: it is contended, so ask the way
            // that puts its waiters in line if it is held.
            return self.in_line(line, deadline).await;
        }
        // With a budget, a refusal may end the wait: then say how long the holder's lease
        // lasts.
        let pttl = deadline.is_some();
        self.mutex.lock.attempt(Ask::Fast { pttl }, deadline).await
    }

    fn local_turns(&self) -> Option<&'static str> {
        Some(LOCAL_TURNS)
    }

    fn address(&self) -> Option<&str> {
        self.place.as_deref()
    }

    fn refresh(&self) -> Option<Duration> {
        Some(self.mutex.lock.options().get_place_lease() / 3)
    }

    fn handed_over(&mut self, line: Line<'_>, handed: &HandedOver) -> Option<Lease> {
        let local = line.local?;
        let lock = &self.mutex.lock;
        let lease_options = lock.options().get_lease_options();
        // A grant with too little of its place-long lease left for its extension to land (the
        // wake-up came late) is left to the next attempt, which asks with the same token and
        // so takes it with a full lease.
        let (owner, placed) =
            local.take_handover(&handed.owner, handed.nonce, |placed_at, place_lease| {
                lease_options.takes_handover(placed_at, place_lease)
            })?;
        local.unplaced();
        let owed = OwedRelease::of_line(lock.hold().clone(), owner);
        Some(Lease::handed_over(
            owed,
            FencingToken::new(handed.token),
            placed,
            lease_options,
            lock.client().renewals(),
        ))
    }
}

/// The name of a `Mutex`'s local turns.
const LOCAL_TURNS: &str = "mutex";

#[cfg(test)]
mod tests {
    use crate::{Client, LockKeys};

    /// A held lock keeps only the keys holding uses: every request of the library makes the
    /// keys of the line for itself (`LockKeys::line`), so 100,000 held locks keep none of
    /// them (about 120 bytes each). (Without `layout-internals` nothing can keep them.)
    #[cfg(feature = "layout-internals")]
    #[tokio::test]
    async fn a_lock_taken_contended_and_released_keeps_no_keys_of_its_line() {
        let server = test_support::RedisServer::start().unwrap();
        let client = Client::connect(&server.url()).await.unwrap();
        let mutex = client.mutex("held:keys").unwrap();
        // The first acquisition on a connection is the script, which names the line's keys.
        let guard = mutex.lock().await.unwrap();
        assert!(!mutex.keys().keeps_line());
        // A waiter of another client gets in line, and is handed the lock by the release.
        let other = Client::connect(&server.url()).await.unwrap();
        let waiter = other.mutex("held:keys").unwrap();
        let waiting = tokio::spawn(async move {
            let guard = waiter.lock().await.unwrap();
            let kept = waiter.keys().keeps_line();
            guard.release().await.unwrap();
            kept
        });
        let queue = LockKeys::new("held:keys").unwrap().queue().to_string();
        let mut raw = server.connection().unwrap();
        let within = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while redis::cmd("EXISTS")
            .arg(&queue)
            .query::<i64>(&mut raw)
            .unwrap()
            == 0
        {
            assert!(
                tokio::time::Instant::now() < within,
                "the waiter never got in line"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        guard.release().await.unwrap();
        assert!(!waiting.await.unwrap(), "the waiter's keys");
        assert!(!mutex.keys().keeps_line(), "the holder's keys");
    }
}
