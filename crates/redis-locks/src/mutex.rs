//! `Mutex`: one holder at a time, with an owner token, a lease and a fencing token.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{LockKind, MutexGuard, OwedRelease};
use crate::key::LockKeys;
use crate::lease::{lease_deadline, lease_millis};
use crate::scripts::MUTEX_ACQUIRE;
use crate::state::{LockState, inspect};
use crate::token::{FencingToken, OwnerToken};
use crate::wait::{Backoff, pause, sleep_limit};
use crate::wakeups::Subscription;

/// The lease a [`Mutex`] grants when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The average pause between two attempts of a waiting `lock()`.
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(25);

/// How a [`Mutex`] acquires: the lease it asks for and how it waits.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::MutexOptions;
///
/// let options = MutexOptions::default()
///     .lease(Duration::from_secs(5))
///     .retry_delay(Duration::from_millis(10));
/// assert_eq!(options.get_lease(), Duration::from_secs(5));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MutexOptions {
    lease: Duration,
    retry_delay: Duration,
}

impl Default for MutexOptions {
    /// A 30 s lease; waiters retry every 25 ms on average (jittered), or as soon as the
    /// holder's lease ends if that is sooner.
    fn default() -> Self {
        MutexOptions {
            lease: DEFAULT_LEASE,
            retry_delay: DEFAULT_RETRY_DELAY,
        }
    }
}

impl MutexOptions {
    /// The lease each acquisition asks for: how long the lock outlives a crashed holder.
    /// Checked when the handle is made ([`Client::mutex_with`]): 1 ms to 100 years.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The average pause between two attempts while waiting (each pause is drawn from
    /// half to one and a half times it, and is never under 1 ms). At most one hour.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The lease in force.
    pub fn get_lease(&self) -> Duration {
        self.lease
    }

    /// The retry delay in force.
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay
    }

    /// Checks every value, so a bad one is reported when the handle is made.
    pub(crate) fn validate(&self) -> Result<()> {
        lease_millis(self.lease)?;
        if self.retry_delay > MAX_RETRY_DELAY {
            return Err(Error::InvalidDuration {
                what: "retry delay",
                value: self.retry_delay,
                reason: "a retry delay must be at most 1 hour".into(),
            });
        }
        Ok(())
    }
}

/// The longest retry delay accepted.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

/// A distributed mutual-exclusion lock on one Redis server: at most one holder at a time.
///
/// The handle is cheap to clone and holds no lock by itself; each successful
/// [`lock`](Mutex::lock) returns a [`MutexGuard`] with a fresh random owner token, a lease and
/// a fencing token. Names follow the key layout of [`LockKeys`].
///
/// Waiting does not poll: a release wakes the waiters (pub/sub on the lock's wake channel),
/// and a waiter whose holder crashed retries the moment the holder's lease ends. Waiters of
/// one lock inside one process take turns in FIFO order, and only the first of them talks to
/// Redis; across processes the order is not fair — whoever asks first after a release wins.
/// Use [`FairMutex`](crate::FairMutex) for first-come, first-served across processes.
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
/// use redis_locks::{Client, MutexOptions};
///
/// let client = Client::connect(&server.url()).await?;
/// let mutex = client.mutex_with("jobs:nightly", MutexOptions::default().lease(Duration::from_secs(10)))?;
///
/// let guard = mutex.lock_timeout(Duration::from_secs(1)).await?;
/// // Only one process gets here at a time.
/// let busy = mutex.try_lock().await.unwrap_err();
/// assert!(busy.is_held());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Mutex {
    client: Client,
    keys: Arc<LockKeys>,
    options: MutexOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
}

/// What one acquire attempt found.
enum Attempt {
    Acquired(MutexGuard),
    Held(Option<Duration>),
}

impl Mutex {
    pub(crate) fn new(client: Client, keys: LockKeys, options: MutexOptions) -> Result<Mutex> {
        options.validate()?;
        Ok(Mutex {
            client,
            keys: Arc::new(keys),
            lease_ms: lease_millis(options.lease)?.to_string().into(),
            options,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// The Redis keys behind this lock.
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// Tries once to take the lock.
    ///
    /// # Errors
    /// [`Error::Held`] when another owner holds it, with how long its lease still runs;
    /// [`Error::WrongType`] when the lock key holds another Redis type;
    /// [`Error::Connection`] when Redis did not answer.
    ///
    /// # Cancel safety
    /// If the future is dropped after the request went out, the server may have granted the
    /// lock; it is then released by owner token in a background task.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        match self.attempt().await? {
            Attempt::Acquired(guard) => Ok(guard),
            Attempt::Held(retry_after) => Err(Error::Held {
                name: self.name().to_string(),
                retry_after,
            }),
        }
    }

    /// Waits as long as it takes to take the lock.
    ///
    /// # Errors
    /// As [`Mutex::try_lock`], except that a held lock is waited for, not reported.
    ///
    /// # Cancel safety
    /// As [`Mutex::try_lock`]: dropping the future at any point leaves no lock behind beyond
    /// the background release.
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
        self.acquire_until(Some(Instant::now() + wait)).await
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
    /// assert_eq!(state.holder.unwrap().fencing_token, guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn state(&self) -> Result<LockState> {
        inspect(&self.client, &self.keys).await
    }

    /// Whether anyone holds the lock right now.
    ///
    /// # Errors
    /// As [`Mutex::state`].
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.state().await?.holder.is_some())
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<MutexGuard> {
        let started = Instant::now();
        let timeout = |retry_after| Error::WaitTimeout {
            name: self.name().to_string(),
            waited: started.elapsed(),
            retry_after,
        };
        // With no other waiter of this lock in this process, try at once.
        if !self.client.has_local_waiters(self.keys.lock()) {
            let retry_after = match self.attempt().await? {
                Attempt::Acquired(guard) => return Ok(guard),
                Attempt::Held(retry_after) => retry_after,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout(retry_after));
            }
        }
        // Waiters of this lock in this process take turns; only the one whose turn it is
        // talks to Redis.
        let queue = self.client.local_queue(self.keys.lock());
        let _turn = match queue.turn.try_lock() {
            Ok(turn) => turn,
            Err(_) => match deadline {
                None => queue.turn.lock().await,
                // A zero budget means one attempt, even with local waiters queued.
                Some(deadline) if deadline <= Instant::now() => {
                    return match self.attempt().await? {
                        Attempt::Acquired(guard) => Ok(guard),
                        Attempt::Held(retry_after) => Err(timeout(retry_after)),
                    };
                }
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, queue.turn.lock()).await {
                        Ok(turn) => turn,
                        Err(_) => return Err(timeout(None)),
                    }
                }
            },
        };
        let backoff = Backoff::new(self.options.retry_delay);
        let channel = self.keys.wake_channel();
        loop {
            // Listen before the attempt, so a release right after it still wakes us.
            let mut listener = queue.subscription().map(Subscription::listen);
            let retry_after = match self.attempt().await? {
                Attempt::Acquired(guard) => return Ok(guard),
                Attempt::Held(retry_after) => retry_after,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout(retry_after));
            }
            if listener.is_none() {
                // The first wait: subscribe, then look again at once, since a release between
                // the attempt above and the subscription would not wake us.
                queue.subscribe(self.client.wakeups(), channel).await;
                continue;
            }
            let live = queue.subscription().is_some_and(Subscription::is_live);
            let limit = sleep_limit(live, &backoff, retry_after, None, deadline, Instant::now());
            pause(listener.as_mut(), None, limit).await;
        }
    }

    async fn attempt(&self) -> Result<Attempt> {
        let owed = OwedRelease::new(
            self.client.clone(),
            self.keys.clone(),
            OwnerToken::random(),
            LockKind::Mutex,
        );
        let sent_at = Instant::now();
        let reply = self
            .client
            .run_script::<(i64, i64)>(
                "acquire",
                &MUTEX_ACQUIRE,
                &[self.keys.lock(), self.keys.fence()],
                &[owed.owner().as_str(), &self.lease_ms],
            )
            .await;
        match reply {
            Ok((1, token)) => {
                let token = FencingToken::new(token as u64);
                let deadline = lease_deadline(sent_at, self.options.lease);
                Ok(Attempt::Acquired(MutexGuard::new(owed, token, deadline)))
            }
            Ok((0, pttl)) => {
                owed.disarm();
                Ok(Attempt::Held(
                    u64::try_from(pttl).ok().map(Duration::from_millis),
                ))
            }
            Ok((granted, value)) => Err(Error::UnexpectedReply {
                phase: "acquire",
                detail: format!("[{granted}, {value}]"),
            }),
            // A connection error leaves the outcome open: `owed` is dropped armed and releases
            // by owner token in the background. Any other error wrote nothing.
            Err(err) if err.is_connection() => Err(err),
            Err(err) => {
                owed.disarm();
                Err(err)
            }
        }
    }
}
