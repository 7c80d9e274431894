//! The clock of every time `check` records: the system's monotonic clock, in nanoseconds. It
//! is one clock for all processes of the machine (so the workers' holdings compare), and no
//! wall-clock step moves it — not even the one the `client-clock-step` fault makes in the
//! workers (libfaketime, with the monotonic clock left alone).

use nix::time::{ClockId, clock_gettime};

/// Now, in nanoseconds of the system's monotonic clock.
pub fn now() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Sleeps until the monotonic clock reads `at` (nanoseconds), so workers begin together.
pub async fn sleep_until(at: u64) {
    let now = now();
    if at > now {
        tokio::time::sleep(std::time::Duration::from_nanos(at - now)).await;
    }
}
