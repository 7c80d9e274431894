//! Lease arithmetic: validating lease lengths and turning a granted lease into a deadline on
//! the local monotonic clock.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The longest lease accepted: about 100 years. Redis adds a `PX` value to its clock in
/// milliseconds and refuses sums past `i64::MAX`; this bound keeps far away from that while
/// allowing any lease a real program wants.
pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Checks a lease length and returns it in whole milliseconds, as `PX` takes it.
///
/// # Errors
/// [`Error::InvalidDuration`] for a lease under 1 ms (Redis counts milliseconds, so it
/// would be zero) or over [`MAX_LEASE`].
///
/// ```
/// use std::time::Duration;
/// use redis_locks::lease::lease_millis;
/// assert_eq!(lease_millis(Duration::from_secs(2)).unwrap(), 2000);
/// assert!(lease_millis(Duration::ZERO).is_err());
/// assert!(lease_millis(Duration::from_micros(999)).is_err());
/// assert!(lease_millis(Duration::MAX).is_err());
/// ```
pub fn lease_millis(lease: Duration) -> Result<u64> {
    let invalid = |reason: &str| Error::InvalidDuration {
        what: "lease",
        value: lease,
        reason: reason.to_string(),
    };
    if lease < Duration::from_millis(1) {
        return Err(invalid(
            "a lease must be at least 1 ms (Redis expires keys in whole milliseconds)",
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
///
/// ```
/// use std::time::Duration;
/// use redis_locks::lease::drift_allowance;
/// assert_eq!(drift_allowance(Duration::from_secs(10)), Duration::from_millis(102));
/// ```
pub fn drift_allowance(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The instant until which a lease granted by a request sent at `sent_at` certainly holds:
/// the server started counting after `sent_at`, so `sent_at + lease` minus the drift
/// allowance is a safe bound on the local monotonic clock.
///
/// ```
/// use std::time::Duration;
/// use tokio::time::Instant;
/// use redis_locks::lease::lease_deadline;
/// let sent = Instant::now();
/// assert_eq!(lease_deadline(sent, Duration::from_secs(1)), sent + Duration::from_millis(988));
/// ```
pub fn lease_deadline(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(drift_allowance(lease))
}
