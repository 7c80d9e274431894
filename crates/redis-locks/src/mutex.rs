//! `Mutex`: one holder at a time, with an owner token, a lease and a fencing token.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::MutexGuard;
use crate::key::LockKeys;
use crate::lease::lease_millis;
use crate::state::{LockState, inspect};
use crate::wait::{Backoff, confirm_limit, pause, sleep_limit};
use crate::watchdog::Renewal;

mod attempt;

use attempt::{Ask, Attempt};

/// The lease a [`Mutex`] grants when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The average pause between two attempts of a waiting `lock()` while wake-ups are down
/// (with them, a release wakes the waiter).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(25);

/// How a [`Mutex`] acquires: the lease it asks for, whether a watchdog renews it, how it
/// waits.
///
/// Without an explicit [`lease`](MutexOptions::lease), a lock gets a 30 s lease that a
/// watchdog renews every 10 s for as long as the guard lives (as Redisson does): a crashed
/// holder blocks others for at most 30 s, a live one keeps the lock. With an explicit lease
/// the watchdog is off unless [`watchdog(true)`](MutexOptions::watchdog) turns it on.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::MutexOptions;
///
/// let renewed = MutexOptions::default();
/// assert!(renewed.get_watchdog());
///
/// let fixed = MutexOptions::default().lease(Duration::from_secs(5));
/// assert!(!fixed.get_watchdog());
///
/// let capped = MutexOptions::default()
///     .lease(Duration::from_millis(500))
///     .watchdog(true)
///     .max_renewals(10);
/// assert!(capped.get_watchdog());
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct MutexOptions {
    lease: Option<Duration>,
    watchdog: Option<bool>,
    max_renewals: Option<u32>,
    max_hold: Option<Duration>,
    retry_delay: Option<Duration>,
}

impl MutexOptions {
    /// The lease each acquisition asks for: how long the lock outlives a crashed holder.
    /// Checked when the handle is made ([`Client::mutex_with`]): 3 ms to 100 years. Turns the
    /// watchdog off unless [`watchdog(true)`](MutexOptions::watchdog) says otherwise.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Whether a background watchdog renews the lease every third of it while the guard
    /// lives (owner-checked; it stops at release or drop, and when the lock is found lost).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = Some(on);
        self
    }

    /// The watchdog renews at most this many times; then the lease runs out and
    /// [`MutexGuard::lost`] resolves with [`LostReason::RenewalCapReached`](crate::LostReason).
    pub fn max_renewals(mut self, renewals: u32) -> Self {
        self.max_renewals = Some(renewals);
        self
    }

    /// The watchdog never renews past this much time after the acquisition; then the lease
    /// runs out as with [`max_renewals`](MutexOptions::max_renewals).
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// The average pause between two attempts while wake-ups are down (each pause is drawn
    /// from half to one and a half times it, and is never under 1 ms). At most one hour;
    /// 25 ms by default.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = Some(delay);
        self
    }

    /// The lease in force (30 s unless set).
    pub fn get_lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// Whether the watchdog is on: as set, or on exactly when no lease was set.
    pub fn get_watchdog(&self) -> bool {
        self.watchdog.unwrap_or(self.lease.is_none())
    }

    /// The retry delay in force.
    pub fn get_retry_delay(&self) -> Duration {
        self.retry_delay.unwrap_or(DEFAULT_RETRY_DELAY)
    }

    /// What the watchdog does, if it is on.
    pub(crate) fn renewal(&self) -> Option<Renewal> {
        self.get_watchdog().then(|| Renewal {
            lease: self.get_lease(),
            max_renewals: self.max_renewals,
            max_hold: self.max_hold,
        })
    }

    /// Checks every value, so a bad one is reported when the handle is made.
    pub(crate) fn validate(&self) -> Result<()> {
        let lease = self.get_lease();
        lease_millis(lease)?;
        if self.get_watchdog() && lease < MIN_RENEWED_LEASE {
            return Err(Error::InvalidDuration {
                what: "lease",
                value: lease,
                reason: "a lease renewed by the watchdog must be at least 30 ms".into(),
            });
        }
        if self.get_retry_delay() > MAX_RETRY_DELAY {
            return Err(Error::InvalidDuration {
                what: "retry delay",
                value: self.get_retry_delay(),
                reason: "a retry delay must be at most 1 hour".into(),
            });
        }
        Ok(())
    }
}

/// The longest retry delay accepted.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);
/// The shortest lease a watchdog can keep alive (it renews every third of it).
const MIN_RENEWED_LEASE: Duration = Duration::from_millis(30);

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
    /// The lease in milliseconds, as `SET ... PX` and the acquire script take it.
    lease_ms: Arc<str>,
}

impl Mutex {
    pub(crate) fn new(client: Client, keys: LockKeys, options: MutexOptions) -> Result<Mutex> {
        options.validate()?;
        Ok(Mutex {
            client,
            keys: Arc::new(keys),
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
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
            .attempt(Ask::Fast { pttl: true }, Some(Instant::now()))
            .await?
        {
            Attempt::Acquired(guard) => Ok(guard),
            Attempt::Held(retry_after) => Err(refused(retry_after)),
        }
    }

    /// Waits as long as it takes to take the lock.
    ///
    /// # Errors
    /// As [`Mutex::try_lock`], except that a held lock is waited for, not reported.
    ///
    /// # Cancel safety
    /// As [`Mutex::try_lock`]: dropping the future at any point leaves no lock behind beyond
    /// the background release. A future that is kept but no longer polled (say, pinned in a
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
            // With a budget, a refusal may end the wait: then say how long the holder's
            // lease lasts.
            let pttl = deadline.is_some();
            let retry_after = match self.attempt(Ask::Fast { pttl }, deadline).await? {
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
                    return self.try_once(timeout).await;
                }
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, queue.turn.lock()).await {
                        Ok(turn) => turn,
                        // Never give up without having asked Redis once.
                        Err(_) => return self.try_once(timeout).await,
                    }
                }
            },
        };
        let backoff = Backoff::new(self.options.get_retry_delay());
        let channel = self.keys.wake_channel();
        loop {
            // Subscribe and listen before the attempt, so a release right after it still
            // wakes us (the subscription is kept while any waiter of this process queues).
            let confirm_within = confirm_limit(deadline, None);
            let subscription = queue
                .subscribe(self.client.wakeups(), channel, confirm_within)
                .await;
            let mut listener = Some(subscription.listen());
            let live = subscription.is_live();
            // A guard of this process holds the lock with its key marked: its release will
            // wake us, so there is nothing to ask Redis until then (but a wait that is over
            // still asks once, below).
            let over = deadline.is_some_and(|d| Instant::now() >= d);
            if let Some(left) = queue
                .local_holder_lease()
                .filter(|left| live && !over && !left.is_zero())
            {
                let limit = sleep_limit(live, &backoff, Some(left), None, deadline, Instant::now());
                pause(listener.as_mut(), None, limit).await;
                continue;
            }
            // Waiters of this process queued behind this one: mark a grant at once.
            let mark = Arc::strong_count(&queue) > 1;
            let retry_after = match self.attempt(Ask::Waiting { mark }, deadline).await? {
                Attempt::Acquired(mut guard) => {
                    if mark {
                        guard.hold_for_local_waiters(&queue);
                    }
                    return Ok(guard);
                }
                Attempt::Held(retry_after) => retry_after,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(timeout(retry_after));
            }
            let limit = sleep_limit(live, &backoff, retry_after, None, deadline, Instant::now());
            pause(listener.as_mut(), None, limit).await;
        }
    }
}
