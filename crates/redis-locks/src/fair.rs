//! `FairMutex`: one holder at a time, granted first come, first served across processes.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{LockKind, MutexGuard, OwedRelease};
use crate::key::LockKeys;
use crate::lease::{MAX_LATE_GRANTS, is_late, lease_millis, too_slow};
use crate::mutex::MutexOptions;
use crate::scripts::FAIR_ACQUIRE;
use crate::state::{LockState, inspect};
use crate::token::{FencingToken, OwnerToken};
use crate::wait::{Backoff, confirm_limit, pause, sleep_limit};
use crate::wakeups::Subscription;

/// How long a waiter keeps its place in the queue without renewing it, by default.
pub const DEFAULT_PLACE_LEASE: Duration = Duration::from_secs(2);
const MIN_PLACE_LEASE: Duration = Duration::from_millis(3);
const MAX_PLACE_LEASE: Duration = Duration::from_secs(3600);

/// How a [`FairMutex`] acquires: the lease and watchdog (as for a [`Mutex`](crate::Mutex)), and the place
/// lease of a waiter in the queue.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::{FairMutexOptions, MutexOptions};
///
/// let options = FairMutexOptions::default()
///     .lease(Duration::from_secs(5))
///     .place_lease(Duration::from_millis(500));
/// assert_eq!(options.get_place_lease(), Duration::from_millis(500));
/// assert!(!options.get_lease_options().get_watchdog());
///
/// // Everything a Mutex takes, at once:
/// let renewed = FairMutexOptions::default().lease_options(MutexOptions::default().max_renewals(3));
/// assert!(renewed.get_lease_options().get_watchdog());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FairMutexOptions {
    base: MutexOptions,
    place_lease: Duration,
}

impl Default for FairMutexOptions {
    /// As [`MutexOptions::default`] (a 30 s lease renewed by a watchdog), 2 s place leases.
    fn default() -> Self {
        FairMutexOptions {
            base: MutexOptions::default(),
            place_lease: DEFAULT_PLACE_LEASE,
        }
    }
}

impl FairMutexOptions {
    /// The lease, watchdog, caps and polling delay, as for a [`Mutex`](crate::Mutex).
    pub fn lease_options(mut self, options: MutexOptions) -> Self {
        self.base = options;
        self
    }

    /// Shorthand for [`MutexOptions::lease`].
    pub fn lease(mut self, lease: Duration) -> Self {
        self.base = self.base.lease(lease);
        self
    }

    /// How long a waiter keeps its place without renewing it (3 ms to 1 hour). A waiter
    /// renews every third of it; a waiter that died is skipped once it runs out, so this is
    /// how long a dead waiter at the head can hold up the queue.
    pub fn place_lease(mut self, place_lease: Duration) -> Self {
        self.place_lease = place_lease;
        self
    }

    /// The lease options in force.
    pub fn get_lease_options(&self) -> &MutexOptions {
        &self.base
    }

    /// The place lease in force.
    pub fn get_place_lease(&self) -> Duration {
        self.place_lease
    }

    fn validate(&self) -> Result<()> {
        self.base.validate()?;
        if !(MIN_PLACE_LEASE..=MAX_PLACE_LEASE).contains(&self.place_lease) {
            return Err(Error::InvalidDuration {
                what: "place lease",
                value: self.place_lease,
                reason: "a place lease must be 3 ms to 1 hour".into(),
            });
        }
        Ok(())
    }
}

/// The queue's companion keys: (queue, places, tickets).
pub(crate) fn queue_keys(keys: &LockKeys) -> (String, String, String) {
    (
        keys.companion("queue"),
        keys.companion("places"),
        keys.companion("tickets"),
    )
}

/// A distributed lock granted in first-come, first-served order, across every process.
///
/// Waiters queue on the server, ordered by a ticket the server hands out (not by client
/// clocks). Only the head of the queue may take the lock; a release wakes only the next
/// waiter, so there is no thundering herd and no barging: a holder that releases and asks
/// again goes to the back of the queue. Each waiter renews a short place lease
/// ([`FairMutexOptions::place_lease`]), so a waiter that crashed is skipped once its place
/// lease runs out. Guards are [`MutexGuard`]s: fencing token, lease, `extend`, `release`.
///
/// # When not to use it
/// Fairness costs a little: each attempt also maintains the queue, and a handoff always
/// goes to the head waiter even if another is quicker. When throughput matters more than
/// order, use [`Mutex`](crate::Mutex).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let lock = client.fair_mutex("printer")?;
/// let guard = lock.lock().await?;
/// assert_eq!(lock.waiting().await?, 0);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FairMutex {
    client: Client,
    keys: Arc<LockKeys>,
    options: FairMutexOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
}

impl FairMutex {
    pub(crate) fn new(
        client: Client,
        keys: LockKeys,
        options: FairMutexOptions,
    ) -> Result<FairMutex> {
        options.validate()?;
        Ok(FairMutex {
            client,
            keys: Arc::new(keys),
            lease_ms: lease_millis(options.base.get_lease())?.to_string().into(),
            options,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Takes the lock only if it is free and nobody waits for it; never joins the queue.
    ///
    /// # Errors
    /// [`Error::Held`] when it is held (with the holder's remaining lease) or others wait
    /// (`retry_after` is then `None`); [`Error::WrongType`], [`Error::Connection`] as for
    /// [`Mutex::try_lock`](crate::Mutex::try_lock).
    ///
    /// # Cancel safety
    /// If the future is dropped after the request went out, a grant is released by owner
    /// token in the background.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let owed = self.owed();
        match self
            .attempt(&owed, Duration::ZERO, Some(Instant::now()))
            .await?
        {
            Ok((token, sent_at)) => Ok(self.guard(owed, token, sent_at)),
            Err(retry_after) => {
                owed.disarm();
                Err(Error::Held {
                    name: self.name().to_string(),
                    retry_after,
                })
            }
        }
    }

    /// Joins the queue and waits as long as it takes for this caller's turn.
    ///
    /// # Errors
    /// As [`FairMutex::try_lock`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// Dropping the future at any point gives up the place in the queue and releases a grant
    /// the caller never saw, in the background.
    pub async fn lock(&self) -> Result<MutexGuard> {
        self.acquire_until(None).await
    }

    /// Joins the queue and waits at most `wait` for this caller's turn; on timeout the place
    /// is given up (the next waiter is woken if it is now first).
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when the turn did not come within `wait`; otherwise as
    /// [`FairMutex::lock`].
    ///
    /// # Cancel safety
    /// As [`FairMutex::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<MutexGuard> {
        // A wait too long for the clock to represent is a wait as long as it takes.
        self.acquire_until(Instant::now().checked_add(wait)).await
    }

    /// Who holds the lock, for how long, and the fencing counter, read in one step.
    ///
    /// # Errors
    /// As [`Mutex::state`](crate::Mutex::state).
    pub async fn state(&self) -> Result<LockState> {
        inspect(&self.client, &self.keys).await
    }

    /// How many waiters are queued (including any whose place lease ran out but who were
    /// not yet removed).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the queue key holds another type; [`Error::Connection`].
    pub async fn waiting(&self) -> Result<u64> {
        let (queue, _, _) = queue_keys(&self.keys);
        redis::cmd("ZCARD")
            .arg(&queue)
            .query_async(&mut self.client.connection())
            .await
            .map_err(|err| Error::from_redis("waiting", &[&queue], err))
    }

    fn owed(&self) -> OwedRelease {
        OwedRelease::new(
            self.client.clone(),
            self.keys.clone(),
            OwnerToken::random(),
            LockKind::Fair,
        )
    }

    fn guard(&self, owed: OwedRelease, token: FencingToken, sent_at: Instant) -> MutexGuard {
        MutexGuard::new(owed, token, sent_at, &self.options.base)
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<MutexGuard> {
        let started = Instant::now();
        // One owner token for the whole wait: it is this caller's place in the queue, and it
        // becomes the lock's owner token when the turn comes. Until then, dropping `owed`
        // gives the place up in the background.
        let owed = self.owed();
        let backoff = Backoff::new(self.options.base.get_retry_delay());
        let refresh = self.options.place_lease / 3;
        let channel = self.keys.wake_channel();
        // Others of this process may be waiting already: then listen from the first attempt.
        let mut subscription = self.client.wakeups().subscribe_live(channel);
        loop {
            let mut listener = subscription.as_ref().map(Subscription::listen);
            let attempt = self.attempt(&owed, self.options.place_lease, deadline);
            let retry_after = match attempt.await? {
                Ok((token, sent_at)) => return Ok(self.guard(owed, token, sent_at)),
                Err(retry_after) => retry_after,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // Give the place up now. The reply is "not held", as expected; anything else
                // (Redis gone, say) leaves the place to run out with its place lease.
                match owed.pay().await {
                    Ok(()) | Err(Error::NotHeld { .. }) => {}
                    Err(err) => tracing::debug!(%err, "giving up a place in the queue"),
                }
                return Err(Error::WaitTimeout {
                    name: self.name().to_string(),
                    waited: started.elapsed(),
                    retry_after,
                });
            }
            let Some(sub) = &subscription else {
                let confirm_within = confirm_limit(deadline, Some(refresh));
                subscription = Some(
                    self.client
                        .wakeups()
                        .subscribe(channel, confirm_within)
                        .await,
                );
                continue;
            };
            let limit = sleep_limit(
                sub.is_live(),
                &backoff,
                retry_after,
                Some(refresh),
                deadline,
                Instant::now(),
            );
            pause(listener.as_mut(), Some(owed.owner().as_str()), limit).await;
        }
    }

    /// One attempt: `Ok((token, sent_at))` when granted, `Err(retry_after)` when not. A grant
    /// that comes back after its lease is asked again (the script re-grants to the same
    /// owner, with a fresh lease) within `deadline` and at most [`MAX_LATE_GRANTS`] times;
    /// then the call fails, and the caller's `owed` gives the grant back as it drops.
    async fn attempt(
        &self,
        owed: &OwedRelease,
        place_lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<std::result::Result<(FencingToken, Instant), Option<Duration>>> {
        let place = place_lease.as_millis().to_string();
        let (queue, places, tickets) = queue_keys(&self.keys);
        let mut late = 0;
        loop {
            let sent_at = Instant::now();
            let reply: (i64, i64) = self
                .client
                .run_script(
                    "acquire",
                    &FAIR_ACQUIRE,
                    &[
                        self.keys.lock(),
                        self.keys.fence(),
                        &queue,
                        &places,
                        &tickets,
                    ],
                    &[
                        owed.owner().as_str(),
                        &self.lease_ms,
                        &place,
                        self.keys.wake_channel(),
                    ],
                )
                .await?;
            let lease = self.options.base.get_lease();
            match reply {
                (1, token) if !is_late(sent_at, lease) => {
                    return Ok(Ok((FencingToken::new(token as u64), sent_at)));
                }
                // Granted after the lease: ask again (a re-grant to this owner), or fail.
                (1, _) => {
                    late += 1;
                    if late >= MAX_LATE_GRANTS || deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(too_slow(lease, late));
                    }
                }
                (0, pttl) => return Ok(Err(u64::try_from(pttl).ok().map(Duration::from_millis))),
                (granted, value) => {
                    return Err(Error::UnexpectedReply {
                        phase: "acquire",
                        detail: format!("[{granted}, {value}]"),
                    });
                }
            }
        }
    }
}
