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
/// [`drift_allowance`], so it could never be proven held) or over [`MAX_LEASE`].
pub(crate) fn lease_millis(lease: Duration) -> Result<u64> {
    let invalid = |reason: &str| Error::InvalidDuration {
        what: "lease",
        value: lease,
        reason: reason.to_string(),
    };
    if lease < MIN_LEASE {
        return Err(invalid(
            "a lease must be at least 3 ms (1% + 2 ms of every lease is kept back for clock \
             drift, so a shorter one could never be proven held)",
        ));
    }
    if lease > MAX_LEASE {
        return Err(invalid("a lease must be at most 100 years"));
    }
    Ok(lease.as_millis() as u64)
}

/// How much of a lease is not counted on: clocks of client and server may run at slightly
/// different rates, and Redis expires keys with up to a millisecond of imprecision. As in
/// Redlock: 1% of the lease plus 2 ms.
pub(crate) fn drift_allowance(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The instant until which a lease granted by a request sent at `sent_at` certainly holds:
/// the server started counting after `sent_at`, so `sent_at + lease` minus the drift
/// allowance is a safe bound on the local monotonic clock.
pub(crate) fn lease_deadline(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(drift_allowance(lease))
}

/// How many grants in a row may come back after their lease before an acquisition gives up
/// (each one is asked again by owner token, which renews the lease on the server).
pub(crate) const MAX_LATE_GRANTS: u32 = 3;

/// Whether a grant whose request was sent at `sent_at` came back too late to be proven held.
pub(crate) fn is_late(sent_at: Instant, lease: Duration) -> bool {
    Instant::now() >= lease_deadline(sent_at, lease)
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
        assert_eq!(
            drift_allowance(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        let sent = Instant::now();
        assert_eq!(
            lease_deadline(sent, Duration::from_secs(1)),
            sent + Duration::from_millis(988)
        );
    }
}
