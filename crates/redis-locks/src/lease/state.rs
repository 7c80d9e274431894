//! A held lease as the guard sees it: its deadline, and whether (and why) it was lost.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::time::ClockDrift;
use crate::error::LostReason;

/// How much sooner than its deadline a lease's timer is set: Tokio's timers tick in whole
/// milliseconds and fire on the tick at or after the instant asked, so a timer set at the
/// deadline would tell `lost()` up to a tick after it. Set this much sooner, it tells it at
/// the deadline at the latest (the lock is then still held: it is told early, never late).
const TIMER_TICK: std::time::Duration = std::time::Duration::from_millis(1);

/// A lease's state, shared by its guard, its watchdog and every `lost()` future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    /// Until when (local monotonic clock) the lock is certainly held.
    pub(crate) deadline: Instant,
    /// Why the lock is no longer held, once that is known.
    pub(crate) lost: Option<LostReason>,
    /// The reason to give if the deadline passes without a renewal.
    pub(crate) ending: LostReason,
    /// How many replicas acknowledged the last confirmed grant or renewal, plus one (0:
    /// never asked). Here rather than in a field of its own: it fits in the padding.
    replicas: u32,
    /// A handed-over lease's first extension is still to be made by the watchdog (the
    /// holder's own extension makes it owed no more).
    extension_owed: bool,
    /// A [`Gate`] is held.
    gated: bool,
}

/// The shared cell behind [`Status`]: kept small (a process may hold 100,000 leases), so a
/// plain mutex and one [`Notify`] for the `lost()` futures rather than a watch channel.
#[derive(Debug)]
pub(crate) struct LeaseState {
    status: Mutex<Status>,
    /// Wakes every `lost()` future when the status changes, and every [`LeaseState::gate`]
    /// waiter when the gate opens.
    changed: Notify,
    /// How much of every lease (the first, and each renewal's) is not counted on.
    drift: ClockDrift,
}

impl LeaseState {
    /// The state of a lease of `lease` granted by a request sent at `sent_at`. (Kept small:
    /// what the lock is, its name and kind, the callers of [`LeaseState::lose`] give.)
    pub(crate) fn new(
        sent_at: Instant,
        lease: std::time::Duration,
        drift: ClockDrift,
    ) -> Arc<LeaseState> {
        let deadline = drift.deadline(sent_at, lease);
        Arc::new(LeaseState {
            status: Mutex::new(Status {
                deadline,
                lost: None,
                ending: LostReason::LeaseEnded,
                replicas: 0,
                extension_owed: false,
                gated: false,
            }),
            changed: Notify::new(),
            drift,
        })
    }

    /// Until when a lease of `lease` asked for at `sent_at` certainly holds.
    pub(crate) fn deadline_for(&self, sent_at: Instant, lease: std::time::Duration) -> Instant {
        self.drift.deadline(sent_at, lease)
    }

    /// Records how many replicas acknowledged the last confirmed grant or renewal (`None`:
    /// none was asked for).
    pub(crate) fn acknowledged(&self, replicas: Option<u32>) {
        if let Some(replicas) = replicas {
            self.locked().replicas = replicas.saturating_add(1);
        }
    }

    /// How many replicas acknowledged the last confirmed grant or renewal, if any was asked
    /// for.
    pub(crate) fn replicas(&self) -> Option<u32> {
        self.status().replicas.checked_sub(1)
    }

    /// Whether a handed-over lease's first extension is still owed (see
    /// [`LeaseState::owe_extension`]).
    pub(crate) fn extension_owed(&self) -> bool {
        self.status().extension_owed
    }

    /// Records whether the watchdog still owes a handed-over lease its first extension: set
    /// when the watchdog takes the lease, cleared by that extension or by the holder's own.
    pub(crate) fn owe_extension(&self, owed: bool) {
        self.locked().extension_owed = owed;
    }

    /// Waits until no renewal, extension or release of this lease is under way, and keeps
    /// others out until the returned [`Gate`] is dropped: they never overlap, so no renewal
    /// is sent once a release has begun, and the deadline always follows the request the
    /// server applied last. (A flag in the status and the status's `Notify`, not an async
    /// mutex of its own: 40 bytes less per held lock.)
    pub(crate) async fn gate(&self) -> Gate<'_> {
        loop {
            let opened = self.changed.notified();
            let mut opened = std::pin::pin!(opened);
            // Listening before trying: an opening after the try still wakes this.
            opened.as_mut().enable();
            if let Some(gate) = self.try_gate() {
                return gate;
            }
            opened.await;
        }
    }

    /// The gate, if nothing holds it now (see [`LeaseState::gate`]).
    pub(crate) fn try_gate(&self) -> Option<Gate<'_>> {
        let mut status = self.locked();
        if status.gated {
            return None;
        }
        status.gated = true;
        Some(Gate { state: self })
    }

    fn locked(&self) -> MutexGuard<'_, Status> {
        // Every change is one assignment: a panic elsewhere leaves the status whole.
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn status(&self) -> Status {
        *self.locked()
    }

    /// Applies `change` (which says whether it changed anything), and wakes the `lost()`
    /// futures if it did.
    /// Applies `change`, and wakes the listeners when it says it changed something (which
    /// it returns).
    fn update(&self, change: impl FnOnce(&mut Status) -> bool) -> bool {
        let changed = change(&mut self.locked());
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    /// Why the lock is not held, if that is known now (a passed deadline counts).
    pub(crate) fn loss(&self) -> Option<LostReason> {
        let status = self.status();
        status
            .lost
            .or((status.deadline <= Instant::now()).then_some(status.ending))
    }

    /// A renewal or extension was granted: the lease now runs until `deadline` — later or
    /// earlier than before, as the server's new TTL says.
    pub(crate) fn extended(&self, deadline: Instant) {
        self.update(|s| {
            let change = s.lost.is_none() && deadline != s.deadline;
            if change {
                s.deadline = deadline;
            }
            change
        });
    }

    /// A request that may shorten the lease is about to go out: until its outcome is known,
    /// count on no more than `deadline`.
    pub(crate) fn at_most(&self, deadline: Instant) {
        self.update(|s| {
            let change = s.lost.is_none() && deadline < s.deadline;
            if change {
                s.deadline = deadline;
            }
            change
        });
    }

    /// The lock is known not to be held any more; the first reason given stays.
    /// Renewing stops on purpose: if the deadline passes, `reason` is why.
    pub(crate) fn ending_as(&self, reason: LostReason) {
        self.update(|s| {
            s.ending = reason;
            true
        });
    }

    /// Records that `hold`'s lock is lost for `reason` (the first reason stays), with its
    /// metric and a `warn` event (a release, [`LeaseState::end`], is neither).
    pub(crate) fn lose(&self, reason: LostReason, hold: &dyn super::Hold) {
        if !self.record(reason) {
            return;
        }
        // Counted and said before anyone listening hears of it.
        if reason != LostReason::Released {
            let (kind, name) = (hold.kind(), hold.name());
            crate::telemetry::lost(kind, name, reason);
            tracing::warn!(lock = name, primitive = kind.label(), %reason, "lock lost");
        }
        self.changed.notify_waiters();
    }

    /// The guard is gone: records [`LostReason::Released`] (only `lost()` futures made
    /// before can listen now: making one takes the guard).
    pub(crate) fn end(&self) {
        if self.record(LostReason::Released) {
            self.changed.notify_waiters();
        }
    }

    /// Records `reason` as why the lock is not held, unless one is recorded already; says
    /// whether it did.
    fn record(&self, reason: LostReason) -> bool {
        let mut status = self.locked();
        let change = status.lost.is_none();
        if change {
            status.lost = Some(reason);
        }
        change
    }

    /// Resolves with the reason once the lock is lost, or when the lease deadline passes
    /// without a renewal: at it at the latest, up to a timer tick ([`TIMER_TICK`]) before it.
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = LostReason> + Send + 'static {
        let state = self.clone();
        async move {
            loop {
                // Listening before reading: a change after the read still wakes this.
                let changed = state.changed.notified();
                let mut changed = std::pin::pin!(changed);
                changed.as_mut().enable();
                let Status { deadline, lost, .. } = state.status();
                if let Some(reason) = lost {
                    return reason;
                }
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(deadline.checked_sub(TIMER_TICK).unwrap_or(deadline)) => {
                        // No renewal moved the deadline: the lock can no longer be proven held
                        // (or will not be by the time a later timer could fire).
                        state.update(|s| {
                            let change = s.lost.is_none() && s.deadline <= Instant::now() + TIMER_TICK;
                            if change {
                                s.lost = Some(s.ending);
                            }
                            change
                        });
                    }
                }
            }
        }
    }
}

/// A held gate of a lease (see [`LeaseState::gate`]); dropping it lets the next one in.
pub(crate) struct Gate<'a> {
    state: &'a LeaseState,
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.state.locked().gated = false;
        self.state.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A deadline between two timer ticks: `lost()` fires by it, not at the next tick after
    /// it (Tokio's paused clock advances to the tick a timer is set for, as the timer wheel
    /// does). Fails when the timer is set at the deadline itself.
    #[tokio::test(start_paused = true)]
    async fn lost_fires_by_the_deadline_not_a_tick_after_it() {
        for offset_us in [1, 300, 999, 1_000, 1_500] {
            let sent = Instant::now();
            let lease = Duration::from_millis(50) + Duration::from_micros(offset_us);
            let state = LeaseState::new(sent, lease, ClockDrift::new(0.0, Duration::ZERO).unwrap());
            let deadline = state.status().deadline;
            assert_eq!(state.lost().await, LostReason::LeaseEnded);
            let told = Instant::now();
            assert!(
                told <= deadline,
                "told {:?} after the deadline",
                told - deadline
            );
            assert!(
                deadline - told <= TIMER_TICK,
                "told {:?} early",
                deadline - told
            );
            assert_eq!(state.loss(), Some(LostReason::LeaseEnded));
        }
    }
}
