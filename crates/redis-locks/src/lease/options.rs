//! The lease a primitive asks for, and whether (and how long) a watchdog renews it.

use std::time::Duration;

use super::time::{ClockDrift, is_late, lease_millis};
use super::watchdog::Renewal;
use crate::error::{Error, Result};
use crate::node::Replication;

/// The lease a lock is granted when none is asked for.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// The shortest lease a watchdog can keep alive (it renews every third of it).
const MIN_RENEWED_LEASE: Duration = Duration::from_millis(30);

/// The lease every acquisition asks for, and the watchdog that renews it: the part of every
/// primitive's options that the lease core reads.
///
/// Without an explicit [`lease`](LeaseOptions::lease), a lock gets a 30 s lease that a
/// watchdog renews every 10 s for as long as the guard lives (as Redisson does): a crashed
/// holder blocks others for at most 30 s, a live one keeps the lock. With an explicit lease
/// the watchdog is off unless [`watchdog(true)`](LeaseOptions::watchdog) turns it on.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::LeaseOptions;
///
/// assert!(LeaseOptions::default().get_watchdog());
/// let fixed = LeaseOptions::default().lease(Duration::from_secs(5));
/// assert!(!fixed.get_watchdog());
/// assert!(LeaseOptions::default().lease(Duration::ZERO).check().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseOptions {
    lease: Option<Duration>,
    watchdog: Option<bool>,
    max_renewals: Option<u32>,
    max_hold: Option<Duration>,
    drift: Option<ClockDrift>,
    replication: Option<Replication>,
}

impl LeaseOptions {
    /// The lease each acquisition asks for: how long the lock outlives a crashed holder.
    /// 3 ms to 100 years (checked when a handle is made, or by [`check`](LeaseOptions::check)).
    /// Turns the watchdog off unless [`watchdog(true)`](LeaseOptions::watchdog) says otherwise.
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

    /// The watchdog renews at most this many times; then the lease runs out and the guard's
    /// `lost()` resolves with [`LostReason::RenewalCapReached`](crate::LostReason).
    pub fn max_renewals(mut self, renewals: u32) -> Self {
        self.max_renewals = Some(renewals);
        self
    }

    /// The watchdog never renews past this much time after the acquisition; then the lease
    /// runs out as with [`max_renewals`](LeaseOptions::max_renewals).
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// How much of every lease is not counted on, for clock drift (default 1% + 2 ms; see
    /// [`ClockDrift`]).
    pub fn clock_drift(mut self, drift: ClockDrift) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Counts an acquisition, and each renewal and extension, only once `replication` says
    /// the write reached the replicas (or disks) it names: `WAIT` / `WAITAOF` in the same
    /// round trip as an owner-checked extension right after the grant, and with each
    /// renewal. Too few acknowledgements are [`Error::NotReplicated`]: an acquisition then
    /// releases its grant, a renewal does not move the guard's deadline (the watchdog
    /// tries again while the lease lasts). The guard's `replicas()` says how many
    /// acknowledged. An acquisition costs one more round trip (plus the replicas' delay).
    ///
    /// This narrows one failover window and not another: a grant that the master lost
    /// before any replica had it is no longer handed out as held (the replica promoted
    /// has the key), but a replica that acknowledged may still not be the one promoted,
    /// and `WAIT` does not make the write synchronous on the server — see the crate
    /// README, "What a failover does to a lock". Not for a [`Redlock`](crate::Redlock),
    /// whose nodes are independent masters ([`Error::Unsupported`]).
    ///
    /// The confirmation comes after the grant, so a `lock_timeout` may return up to the
    /// replication timeout (and a round trip) after its wait; a holder's own `extend` waits
    /// too, so extend by more than the replication timeout.
    pub fn replication(mut self, replication: Replication) -> Self {
        self.replication = Some(replication);
        self
    }

    /// The replication policy in force, if any.
    pub fn get_replication(&self) -> Option<&Replication> {
        self.replication.as_ref()
    }

    /// The drift allowance in force.
    pub fn get_clock_drift(&self) -> ClockDrift {
        self.drift.unwrap_or_default()
    }

    /// Whether a grant of this lease whose request was sent at `sent_at` came back too late
    /// to be proven held.
    pub(crate) fn is_late(&self, sent_at: tokio::time::Instant) -> bool {
        is_late(sent_at, self.get_lease(), self.get_clock_drift())
    }

    /// Whether a grant a release handed over, counted from `placed_at` (when the refused
    /// attempt whose place it ends with was sent) for `place_lease`, is still worth taking: at
    /// least a third of the place lease is left for its extension to land. A grant that is not
    /// is asked for again, which renews it with a full lease.
    pub(crate) fn takes_handover(
        &self,
        placed_at: tokio::time::Instant,
        place_lease: Duration,
    ) -> bool {
        let deadline = self.get_clock_drift().deadline(placed_at, place_lease);
        deadline > tokio::time::Instant::now() + place_lease / 3
    }

    /// The lease in force (30 s unless set).
    pub fn get_lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// Whether the watchdog is on: as set, or on exactly when no lease was set.
    pub fn get_watchdog(&self) -> bool {
        self.watchdog.unwrap_or(self.lease.is_none())
    }

    /// Checks every value, as making a lock handle does.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a lease under 3 ms or over 100 years, a lease the
    /// clock drift allowance takes all of, a lease under 30 ms with the watchdog on, or a
    /// replication timeout under 1 ms or not under a third of the lease;
    /// [`Error::InvalidReplication`] for a replication policy that confirms nothing.
    pub fn check(&self) -> Result<()> {
        let lease = self.get_lease();
        lease_millis(lease)?;
        if self.get_clock_drift().allowance(lease) >= lease {
            return Err(Error::InvalidDuration {
                what: "lease",
                value: lease,
                reason: format!(
                    "the clock drift allowance ({:?}) takes all of this lease",
                    self.get_clock_drift().allowance(lease)
                ),
            });
        }
        if let Some(replication) = &self.replication {
            replication.check(None)?;
            if replication.timeout() >= lease / 3 {
                return Err(Error::InvalidDuration {
                    what: "replication timeout",
                    value: replication.timeout(),
                    reason: format!(
                        "under a third of the lease ({:?}), so a renewal that waits for it \
                         still lands in time",
                        lease / 3
                    ),
                });
            }
        }
        if self.get_watchdog() && lease < MIN_RENEWED_LEASE {
            return Err(Error::InvalidDuration {
                what: "lease",
                value: lease,
                reason: "a lease renewed by the watchdog must be at least 30 ms".into(),
            });
        }
        Ok(())
    }

    /// The replication policy with the lease an acquisition confirms with, if any.
    pub(crate) fn replicated(&self) -> Option<(Replication, Duration)> {
        self.replication
            .map(|replication| (replication, self.get_lease()))
    }

    /// What the watchdog does, if it is on.
    pub(crate) fn renewal(&self) -> Option<Renewal> {
        self.get_watchdog().then(|| {
            Renewal::new(
                self.get_lease(),
                self.max_renewals,
                self.max_hold,
                self.replication,
            )
        })
    }
}
