//! How a waiter spends the time between two attempts on a held lock.
//!
//! This is the one seam every waiting primitive goes through. Today it sleeps a jittered
//! delay, cut short when the holder's lease ends (the key expires then, so a crashed holder
//! is noticed at once) or when the caller's wait budget runs out.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// The shortest pause between two attempts: there is no tight loop, whatever the server says.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(1);

/// Jittered retry pauses for one `lock()` call.
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
    /// failed attempt reported it) and the caller's deadline.
    pub(crate) fn next_pause(
        &self,
        retry_after: Option<Duration>,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Duration {
        let half = self.delay / 2;
        let jitter = Duration::from_nanos(
            rand::rng().random_range(0..=self.delay.as_nanos().min(u64::MAX as u128) as u64),
        );
        let mut pause = half + jitter;
        if let Some(lease_left) = retry_after {
            // The key expires when the holder's lease ends: try right after that.
            pause = pause.min(lease_left + MIN_PAUSE);
        }
        if let Some(deadline) = deadline {
            pause = pause.min(deadline.saturating_duration_since(now));
        }
        pause.max(MIN_PAUSE)
    }

    /// Sleeps for [`Backoff::next_pause`].
    pub(crate) async fn pause(&self, retry_after: Option<Duration>, deadline: Option<Instant>) {
        let pause = self.next_pause(retry_after, deadline, Instant::now());
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_are_jittered_around_the_delay() {
        let backoff = Backoff::new(Duration::from_millis(40));
        let now = Instant::now();
        let pauses: Vec<Duration> = (0..200)
            .map(|_| backoff.next_pause(None, None, now))
            .collect();
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
        assert_eq!(
            backoff.next_pause(lease_left, None, now),
            Duration::from_millis(4)
        );
        let deadline = Some(now + Duration::from_millis(2));
        assert_eq!(
            backoff.next_pause(None, deadline, now),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn never_a_zero_pause() {
        let backoff = Backoff::new(Duration::ZERO);
        let now = Instant::now();
        assert_eq!(
            backoff.next_pause(Some(Duration::ZERO), Some(now), now),
            MIN_PAUSE
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pause_sleeps_no_longer_than_the_deadline() {
        let backoff = Backoff::new(Duration::from_secs(10));
        let start = Instant::now();
        backoff
            .pause(None, Some(start + Duration::from_millis(30)))
            .await;
        assert_eq!(start.elapsed(), Duration::from_millis(30));
    }
}
