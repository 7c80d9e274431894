//! How a waiter spends the time between two attempts on a held lock.
//!
//! This is the one seam every waiting primitive goes through. A waiter listens on the lock's
//! wake channel (see [`crate::wakeups`]) and sleeps until a release wakes it, or until the
//! holder's lease ends (the key expires then, so a crashed holder is noticed at once), or until
//! the caller's wait budget runs out. While the wake-up connection is not live, it polls with
//! a jittered delay instead. A `Mutex`'s waiters of one lock inside one process queue
//! locally ([`LocalQueue`]), so only one of them talks to Redis at a time (a `FairMutex`'s
//! each keep their own place in the server's queue).

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use rand::Rng;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::lease_state::LeaseState;
use crate::wakeups::{Listener, Subscription, Wakeups};

/// The shortest pause between two attempts: there is no tight loop, whatever the server says.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(1);
/// The longest a live waiter sleeps without looking again, in case a wake-up was lost.
pub(crate) const LIVE_RECHECK: Duration = Duration::from_secs(2);
/// How long a waiter waits for the server to confirm its subscription before it polls.
pub(crate) const CONFIRM_WITHIN: Duration = Duration::from_secs(1);

/// Jittered retry pauses, for polling while wake-ups are not live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    delay: Duration,
}

impl Backoff {
    /// Pauses of `delay` on average, each drawn uniformly from `[delay/2, 3·delay/2]`, so
    /// waiters that started together drift apart.
    pub(crate) fn new(delay: Duration) -> Backoff {
        Backoff { delay }
    }

    /// How long to pause before the next attempt, given the holder's remaining lease (as the
    /// failed attempt reported it). The caller's deadline is [`sleep_limit`]'s business.
    pub(crate) fn next_pause(&self, retry_after: Option<Duration>) -> Duration {
        let half = self.delay / 2;
        let jitter = Duration::from_nanos(
            rand::rng().random_range(0..=self.delay.as_nanos().min(u64::MAX as u128) as u64),
        );
        let mut pause = half + jitter;
        if let Some(lease_left) = retry_after {
            // The key expires when the holder's lease ends: try right after that.
            pause = pause.min(lease_left + MIN_PAUSE);
        }
        pause.max(MIN_PAUSE)
    }
}

/// How long a waiter sleeps at most before its next attempt, when nothing wakes it.
///
/// With live wake-ups: until the holder's lease ends (or [`LIVE_RECHECK`]); without: a
/// jittered [`Backoff`] pause. Never past the deadline, never past `refresh` (a place lease
/// to renew), never under [`MIN_PAUSE`].
pub(crate) fn sleep_limit(
    live: bool,
    backoff: &Backoff,
    retry_after: Option<Duration>,
    refresh: Option<Duration>,
    deadline: Option<Instant>,
    now: Instant,
) -> Duration {
    let mut limit = match (live, retry_after) {
        (true, Some(lease_left)) => (lease_left + MIN_PAUSE).min(LIVE_RECHECK),
        (true, None) => LIVE_RECHECK,
        (false, _) => backoff.next_pause(retry_after),
    };
    if let Some(refresh) = refresh {
        limit = limit.min(refresh);
    }
    if let Some(deadline) = deadline {
        limit = limit.min(deadline.saturating_duration_since(now));
    }
    limit.max(MIN_PAUSE)
}

/// How long a waiter may wait for the server to confirm its subscription: at most
/// [`CONFIRM_WITHIN`], and never past its deadline or its next place-lease renewal.
pub(crate) fn confirm_limit(deadline: Option<Instant>, refresh: Option<Duration>) -> Duration {
    let mut limit = CONFIRM_WITHIN;
    if let Some(deadline) = deadline {
        limit = limit.min(deadline.saturating_duration_since(Instant::now()));
    }
    if let Some(refresh) = refresh {
        limit = limit.min(refresh);
    }
    limit
}

/// Sleeps until `listener` hears a wake-up for `me` or `limit` passes.
pub(crate) async fn pause(listener: Option<&mut Listener>, me: Option<&str>, limit: Duration) {
    match listener {
        Some(listener) => {
            tokio::select! {
                () = listener.woken(me) => {}
                () = tokio::time::sleep(limit) => {}
            }
        }
        None => tokio::time::sleep(limit).await,
    }
}

/// The waiters of one lock inside this process: a FIFO turn (only the holder of the turn
/// talks to Redis) and the wake-up subscription they share while any of them waits.
#[derive(Default)]
pub(crate) struct LocalQueue {
    pub(crate) turn: tokio::sync::Mutex<()>,
    subscription: OnceCell<Subscription>,
    /// The lease of a guard of this process that holds the lock with its key marked for a
    /// wake-up (see [`LocalHolder`]).
    holder: StdMutex<Option<Arc<LeaseState>>>,
}

/// A guard that took the lock from the head of its process's local queue, with waiters
/// behind it, and marked its key at once: its release publishes a wake-up, so the next
/// waiter need not ask Redis while the guard holds. Dropping it says the guard is done
/// holding — before its release is sent, so a waiter that still sees it is certain to be
/// listening when the wake-up comes.
///
/// It does not keep the queue alive: with no waiter left, the queue (and this note) goes.
pub(crate) struct LocalHolder {
    queue: Weak<LocalQueue>,
    state: Arc<LeaseState>,
}

impl LocalHolder {
    pub(crate) fn new(queue: &Arc<LocalQueue>, state: Arc<LeaseState>) -> LocalHolder {
        *queue.holder.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.clone());
        LocalHolder {
            queue: Arc::downgrade(queue),
            state,
        }
    }
}

impl Drop for LocalHolder {
    fn drop(&mut self) {
        let Some(queue) = self.queue.upgrade() else {
            return;
        };
        let mut holder = queue.holder.lock().unwrap_or_else(|p| p.into_inner());
        // Only this guard's note: a later holder's stays.
        if holder
            .as_ref()
            .is_some_and(|state| Arc::ptr_eq(state, &self.state))
        {
            *holder = None;
        }
    }
}

impl LocalQueue {
    /// How long a guard of this process is still certain to hold the lock with its key
    /// marked (see [`LocalHolder`]); `None` when no such guard holds it.
    pub(crate) fn local_holder_lease(&self) -> Option<Duration> {
        let holder = self.holder.lock().unwrap_or_else(|p| p.into_inner());
        let state = holder.as_ref()?;
        if state.loss().is_some() {
            return None;
        }
        Some(
            state
                .status()
                .deadline
                .saturating_duration_since(Instant::now()),
        )
    }

    /// The subscription, made (and confirmed, or given up on after `confirm_within`) now if
    /// needed.
    pub(crate) async fn subscribe(
        &self,
        wakeups: &Wakeups,
        channel: &str,
        confirm_within: Duration,
    ) -> &Subscription {
        self.subscription
            .get_or_init(|| wakeups.subscribe(channel, confirm_within))
            .await
    }
}

/// Every lock's [`LocalQueue`] in this client, kept while a waiter holds it.
#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: StdMutex<HashMap<String, Weak<LocalQueue>>>,
}

impl LocalQueues {
    /// Whether a waiter of `lock` holds its queue now.
    pub(crate) fn contains(&self, lock: &str) -> bool {
        let queues = self.queues.lock().expect("never poisoned");
        queues
            .get(lock)
            .is_some_and(|queue| queue.strong_count() > 0)
    }

    /// The queue of `lock`, made if no waiter holds one now.
    pub(crate) fn get(&self, lock: &str) -> Arc<LocalQueue> {
        let mut queues = self.queues.lock().expect("never poisoned");
        if let Some(queue) = queues.get(lock).and_then(Weak::upgrade) {
            return queue;
        }
        if queues.len() >= 1024 {
            queues.retain(|_, queue| queue.strong_count() > 0);
        }
        let queue = Arc::new(LocalQueue::default());
        queues.insert(lock.to_string(), Arc::downgrade(&queue));
        queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_jittered_around_the_delay() {
        let backoff = Backoff::new(Duration::from_millis(40));
        let pauses: Vec<Duration> = (0..200).map(|_| backoff.next_pause(None)).collect();
        assert!(pauses.iter().all(|p| *p >= Duration::from_millis(20)));
        assert!(pauses.iter().all(|p| *p <= Duration::from_millis(60)));
        let distinct: std::collections::HashSet<_> = pauses.iter().collect();
        assert!(distinct.len() > 10, "pauses are not jittered: {distinct:?}");
    }

    #[test]
    fn a_short_lease_or_deadline_cuts_the_pause() {
        let backoff = Backoff::new(Duration::from_millis(500));
        let now = Instant::now();
        let lease_left = Some(Duration::from_millis(3));
        assert_eq!(backoff.next_pause(lease_left), Duration::from_millis(4));
        let deadline = Some(now + Duration::from_millis(2));
        assert_eq!(
            sleep_limit(false, &backoff, None, None, deadline, now),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn never_a_zero_pause() {
        let backoff = Backoff::new(Duration::ZERO);
        let now = Instant::now();
        assert_eq!(backoff.next_pause(Some(Duration::ZERO)), MIN_PAUSE);
        assert_eq!(
            sleep_limit(true, &backoff, Some(Duration::ZERO), None, Some(now), now),
            MIN_PAUSE
        );
    }

    #[test]
    fn live_waiters_sleep_until_the_lease_ends_polling_ones_do_not() {
        let backoff = Backoff::new(Duration::from_millis(50));
        let now = Instant::now();
        let lease_left = Some(Duration::from_millis(700));
        assert_eq!(
            sleep_limit(true, &backoff, lease_left, None, None, now),
            Duration::from_millis(701)
        );
        assert!(
            sleep_limit(false, &backoff, lease_left, None, None, now) <= Duration::from_millis(75)
        );
        // A long lease is re-checked every LIVE_RECHECK; a place lease refresh comes first.
        let long = Some(Duration::from_secs(30));
        assert_eq!(
            sleep_limit(true, &backoff, long, None, None, now),
            LIVE_RECHECK
        );
        let refresh = Some(Duration::from_millis(300));
        assert_eq!(
            sleep_limit(true, &backoff, long, refresh, None, now),
            Duration::from_millis(300)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pause_sleeps_no_longer_than_the_limit() {
        let start = Instant::now();
        pause(None, None, Duration::from_millis(30)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(30));
    }
}
