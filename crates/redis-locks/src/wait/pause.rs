//! How a waiter spends the time between two attempts on a held lock: until a wake-up, the
//! end of the holder's lease, a place lease to renew, or the caller's deadline; polling with a
//! jittered delay while wake-ups are not live.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::message::{HandedOver, woken};
use crate::node::Listener;

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
    /// failed attempt reported it). The caller's deadline is [`Bounds::sleep_limit`]'s business.
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

/// What bounds a waiter's sleep before its next attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Whether wake-ups are live: a release will wake the waiter.
    pub(crate) live: bool,
    /// The holder's remaining lease, as the last attempt reported it.
    pub(crate) retry_after: Option<Duration>,
    /// A place lease to renew this often, if the waiter holds one.
    pub(crate) refresh: Option<Duration>,
    /// The caller's wait budget.
    pub(crate) deadline: Option<Instant>,
}

impl Bounds {
    /// How long a waiter sleeps at most before its next attempt, when nothing wakes it.
    ///
    /// With live wake-ups: until the holder's lease ends (or [`LIVE_RECHECK`]); without: a
    /// jittered `backoff` pause. Never past the deadline, never past `refresh` (a place lease
    /// to renew), never under [`MIN_PAUSE`].
    pub(crate) fn sleep_limit(&self, backoff: &Backoff, now: Instant) -> Duration {
        let mut limit = match (self.live, self.retry_after) {
            (true, Some(lease_left)) => (lease_left + MIN_PAUSE).min(LIVE_RECHECK),
            (true, None) => LIVE_RECHECK,
            (false, _) => backoff.next_pause(self.retry_after),
        };
        if let Some(refresh) = self.refresh {
            limit = limit.min(refresh);
        }
        if let Some(deadline) = self.deadline {
            limit = limit.min(deadline.saturating_duration_since(now));
        }
        limit.max(MIN_PAUSE)
    }
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

/// Sleeps until `listener` hears a wake-up for `me` or `limit` passes; returns the grant
/// when the wake-up handed the lock to `me`.
pub(crate) async fn pause(
    listener: Option<&mut Listener>,
    me: Option<&str>,
    limit: Duration,
) -> Option<HandedOver> {
    match listener {
        Some(listener) => {
            tokio::select! {
                handed = woken(listener, me) => handed,
                () = tokio::time::sleep(limit) => None,
            }
        }
        None => {
            tokio::time::sleep(limit).await;
            None
        }
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
            Bounds {
                live: false,
                retry_after: None,
                refresh: None,
                deadline
            }
            .sleep_limit(&backoff, now),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn never_a_zero_pause() {
        let backoff = Backoff::new(Duration::ZERO);
        let now = Instant::now();
        assert_eq!(backoff.next_pause(Some(Duration::ZERO)), MIN_PAUSE);
        assert_eq!(
            Bounds {
                live: true,
                retry_after: Some(Duration::ZERO),
                refresh: None,
                deadline: Some(now)
            }
            .sleep_limit(&backoff, now),
            MIN_PAUSE
        );
    }

    #[test]
    fn live_waiters_sleep_until_the_lease_ends_polling_ones_do_not() {
        let backoff = Backoff::new(Duration::from_millis(50));
        let now = Instant::now();
        let lease_left = Some(Duration::from_millis(700));
        assert_eq!(
            Bounds {
                live: true,
                retry_after: lease_left,
                refresh: None,
                deadline: None
            }
            .sleep_limit(&backoff, now),
            Duration::from_millis(701)
        );
        assert!(
            Bounds {
                live: false,
                retry_after: lease_left,
                refresh: None,
                deadline: None
            }
            .sleep_limit(&backoff, now)
                <= Duration::from_millis(75)
        );
        // A long lease is re-checked every LIVE_RECHECK; a place lease refresh comes first.
        let long = Some(Duration::from_secs(30));
        assert_eq!(
            Bounds {
                live: true,
                retry_after: long,
                refresh: None,
                deadline: None
            }
            .sleep_limit(&backoff, now),
            LIVE_RECHECK
        );
        let refresh = Some(Duration::from_millis(300));
        assert_eq!(
            Bounds {
                live: true,
                retry_after: long,
                refresh,
                deadline: None
            }
            .sleep_limit(&backoff, now),
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
