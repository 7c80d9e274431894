//! Lease arithmetic: validating lease lengths and turning a granted lease into a deadline on
//! the local monotonic clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Phase, Result};

/// The longest lease accepted: about 100 years. Redis adds a `PX` value to its clock in
/// milliseconds and refuses sums past `i64::MAX`; this bound keeps far away from that while
/// allowing any lease a real program wants.
pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The shortest lease accepted: the drift allowance of a lease of 2 ms or less is all of it.
pub const MIN_LEASE: Duration = Duration::from_millis(3);

/// Checks a lease length and returns it in whole milliseconds, as `PX` takes it.
///
/// # Errors
/// [`Error::InvalidDuration`] for a lease under [`MIN_LEASE`] (3 ms: a shorter one is all
/// the default [`ClockDrift`] allowance, so it could never be proven held) or over [`MAX_LEASE`].
pub(crate) fn lease_millis(lease: Duration) -> Result<u64> {
    let invalid = |reason: &str| Error::InvalidDuration {
        what: "lease",
        value: lease,
        reason: reason.to_string(),
    };
    if lease < MIN_LEASE {
        return Err(invalid(
            "a lease must be at least 3 ms (by default 1% + 2 ms of every lease is kept back \
             for clock drift, so a shorter one could never be proven held)",
        ));
    }
    if lease > MAX_LEASE {
        return Err(invalid("a lease must be at most 100 years"));
    }
    Ok(lease.as_millis() as u64)
}

/// How much of every lease is not counted on: the clocks of client and server may run at
/// slightly different rates, and Redis expires keys with up to a millisecond of imprecision.
/// The allowance is a share of the lease plus a fixed part; by default, as in Redlock, 1% of
/// the lease plus 2 ms. A guard counts on its lease only until `sent + lease - allowance`
/// (its [`lease_deadline`](crate::MutexGuard::lease_deadline)); for a
/// [`Redlock`](crate::Redlock) that is the validity, TTL − elapsed − drift.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::ClockDrift;
///
/// let default = ClockDrift::default();
/// assert_eq!(default.allowance(Duration::from_secs(10)), Duration::from_millis(102));
/// let tight = ClockDrift::new(0.001, Duration::from_millis(1))?;
/// assert_eq!(tight.allowance(Duration::from_secs(10)), Duration::from_millis(11));
/// assert!(ClockDrift::new(0.9, Duration::ZERO).is_err());
/// # Ok::<(), redis_locks::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockDrift {
    /// The share of the lease, in millionths.
    parts_per_million: u32,
    /// The fixed part, in microseconds (at most a minute: kept small, as every lease has
    /// one).
    fixed_us: u32,
}

impl Default for ClockDrift {
    /// 1% of the lease plus 2 ms.
    fn default() -> Self {
        ClockDrift {
            parts_per_million: 10_000,
            fixed_us: 2_000,
        }
    }
}

impl ClockDrift {
    /// An allowance of `rate` (a share of the lease: 0.01 is 1%) plus `fixed` (in whole
    /// microseconds).
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a rate that is not a number from 0 to 0.5 (a lease
    /// that loses more than half of itself to drift is not one to count on), or a fixed part
    /// over a minute.
    pub fn new(rate: f64, fixed: Duration) -> Result<ClockDrift> {
        if !(0.0..=0.5).contains(&rate) {
            return Err(Error::InvalidDuration {
                what: "clock drift",
                value: fixed,
                reason: format!("the drift rate must be from 0 to 0.5 of the lease, not {rate}"),
            });
        }
        if fixed > Duration::from_secs(60) {
            return Err(Error::InvalidDuration {
                what: "clock drift",
                value: fixed,
                reason: "the fixed drift allowance must be at most 1 minute".into(),
            });
        }
        Ok(ClockDrift {
            parts_per_million: (rate * 1_000_000.0).round() as u32,
            // At most 60,000,000 µs: fits. Rounded up: an allowance is never smaller than
            // asked.
            fixed_us: fixed.as_nanos().div_ceil(1_000) as u32,
        })
    }

    /// How much of `lease` is not counted on.
    pub fn allowance(self, lease: Duration) -> Duration {
        let share = lease.as_nanos() * u128::from(self.parts_per_million) / 1_000_000;
        Duration::from_nanos(u64::try_from(share).unwrap_or(u64::MAX)).saturating_add(self.fixed())
    }

    /// The share of the lease, as a fraction (0.01 is 1%).
    pub fn rate(self) -> f64 {
        f64::from(self.parts_per_million) / 1_000_000.0
    }

    /// The fixed part (in whole microseconds).
    pub fn fixed(self) -> Duration {
        Duration::from_micros(u64::from(self.fixed_us))
    }

    /// The instant until which a lease granted by a request sent at `sent_at` certainly
    /// holds: the server started counting after `sent_at`, so `sent_at + lease` minus the
    /// allowance is a safe bound on the local monotonic clock.
    pub(crate) fn deadline(self, sent_at: Instant, lease: Duration) -> Instant {
        sent_at + lease.saturating_sub(self.allowance(lease))
    }
}

/// How many grants in a row may come back after their lease before an acquisition gives up
/// (each one is asked again by owner token, which renews the lease on the server).
pub(crate) const MAX_LATE_GRANTS: u32 = 3;

/// Whether a grant of `lease` whose request was sent at `sent_at` came back too late to be
/// proven held, with `drift` kept back.
pub(crate) fn is_late(sent_at: Instant, lease: Duration, drift: ClockDrift) -> bool {
    Instant::now() >= drift.deadline(sent_at, lease)
}

/// The error of an acquisition whose grants kept coming back after their lease: Redis (or the
/// network) answers more slowly than the lease lasts. The grant has been given back.
pub(crate) fn too_slow(lease: Duration, late: u32) -> Error {
    Error::Connection {
        phase: Phase::Acquire,
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the grant came back after its lease of {lease:?} had run out ({late} time(s) \
                 in a row): Redis answers too slowly for this lease, so the grant was given back"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_deadlines_and_drift() {
        assert_eq!(lease_millis(Duration::from_secs(2)).unwrap(), 2000);
        assert!(lease_millis(Duration::ZERO).is_err());
        assert!(lease_millis(Duration::from_micros(2999)).is_err());
        assert_eq!(lease_millis(Duration::from_millis(3)).unwrap(), 3);
        assert!(lease_millis(Duration::MAX).is_err());
        let drift = ClockDrift::default();
        assert_eq!(
            drift.allowance(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        let sent = Instant::now();
        assert_eq!(
            drift.deadline(sent, Duration::from_secs(1)),
            sent + Duration::from_millis(988)
        );
        let none = ClockDrift::new(0.0, Duration::ZERO).unwrap();
        assert_eq!(none.allowance(Duration::from_secs(1)), Duration::ZERO);
        assert!(ClockDrift::new(f64::NAN, Duration::ZERO).is_err());
        assert!(ClockDrift::new(-0.1, Duration::ZERO).is_err());
    }
}
