//! A held lease as the guard sees it — its deadline and whether it was lost — and the watchdog
//! that renews it in the background.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, LostReason};
use crate::guard::extend_lease;
use crate::key::LockKeys;
use crate::token::OwnerToken;

/// The shortest pause between two renewal tries after a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(5);

/// A lease's state, shared by its guard, its watchdog and every `lost()` future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    /// Until when (local monotonic clock) the lock is certainly held.
    pub(crate) deadline: Instant,
    /// Why the lock is no longer held, once that is known.
    pub(crate) lost: Option<LostReason>,
    /// The reason to give if the deadline passes without a renewal.
    ending: LostReason,
}

/// The shared cell behind [`Status`].
#[derive(Debug)]
pub(crate) struct LeaseState {
    status: watch::Sender<Status>,
    /// Held while a renewal, an extension or the release is under way, so they never
    /// overlap: no renewal is sent once a release has begun, and the deadline always follows
    /// the request the server applied last.
    pub(crate) gate: tokio::sync::Mutex<()>,
}

impl LeaseState {
    pub(crate) fn new(deadline: Instant) -> Arc<LeaseState> {
        Arc::new(LeaseState {
            status: watch::Sender::new(Status {
                deadline,
                lost: None,
                ending: LostReason::LeaseEnded,
            }),
            gate: tokio::sync::Mutex::new(()),
        })
    }

    pub(crate) fn status(&self) -> Status {
        *self.status.borrow()
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
        self.status.send_if_modified(|s| {
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
        self.status.send_if_modified(|s| {
            let change = s.lost.is_none() && deadline < s.deadline;
            if change {
                s.deadline = deadline;
            }
            change
        });
    }

    /// The lock is known not to be held any more; the first reason given stays.
    pub(crate) fn lose(&self, reason: LostReason) {
        self.status.send_if_modified(|s| {
            let change = s.lost.is_none();
            if change {
                s.lost = Some(reason);
            }
            change
        });
    }

    /// Resolves with the reason once the lock is lost, or at the lease deadline if it passes
    /// without a renewal.
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = LostReason> + Send + 'static {
        let state = self.clone();
        let mut changes = self.status.subscribe();
        async move {
            loop {
                let Status { deadline, lost, .. } = *changes.borrow_and_update();
                if let Some(reason) = lost {
                    return reason;
                }
                tokio::select! {
                    changed = changes.changed() => {
                        if changed.is_err() {
                            return LostReason::Released;
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => {
                        // No renewal moved the deadline: the lock can no longer be proven held.
                        state.status.send_if_modified(|s| {
                            let change = s.lost.is_none() && s.deadline <= Instant::now();
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

/// When the watchdog stops renewing on its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub(crate) lease: Duration,
    pub(crate) max_renewals: Option<u32>,
    pub(crate) max_hold: Option<Duration>,
}

/// The watchdog task; aborted (so it sends nothing more) when dropped.
#[derive(Debug)]
pub(crate) struct Watchdog(JoinHandle<()>);

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Watchdog {
    /// Renews the lease every third of it, owner-checked, until dropped, until the lock is
    /// found lost, or until a cap is reached (then the lease simply runs out).
    pub(crate) fn spawn(
        client: Client,
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        state: Arc<LeaseState>,
        renewal: Renewal,
        acquired_at: Instant,
    ) -> Watchdog {
        Watchdog(tokio::spawn(async move {
            let period = renewal.lease / 3;
            let mut next = acquired_at + period;
            let mut renewals = 0u32;
            loop {
                tokio::time::sleep_until(next).await;
                // Never beside an extension or the release (see `LeaseState::gate`).
                let _gate = state.gate.lock().await;
                let status = state.status();
                if status.lost.is_some() {
                    return;
                }
                if status.deadline <= Instant::now() {
                    // Too late: the lease may be gone, so no renewal may revive it now.
                    state.lose(status.ending);
                    return;
                }
                let capped = renewal.max_renewals.is_some_and(|max| renewals >= max)
                    || renewal
                        .max_hold
                        .is_some_and(|max| Instant::now() + renewal.lease > acquired_at + max);
                if capped {
                    // Let the lease run out; `lost()` tells the holder at its deadline.
                    tracing::debug!(lock = keys.name(), renewals, "renewal cap reached");
                    state.ending_as(LostReason::RenewalCapReached);
                    return;
                }
                let sent_at = Instant::now();
                // After a longer `extend`, a renewal shortens the lease: count on that at once.
                state.at_most(crate::lease::lease_deadline(sent_at, renewal.lease));
                match extend_lease(&client, &keys, &owner, renewal.lease).await {
                    Ok(deadline) => {
                        renewals += 1;
                        state.extended(deadline);
                        next = sent_at + period;
                    }
                    Err(Error::NotHeld { reason, .. }) => {
                        state.lose(reason);
                        return;
                    }
                    Err(Error::WrongType { .. }) => {
                        // The lock key was replaced by a value of another type.
                        state.lose(LostReason::Taken);
                        return;
                    }
                    Err(err) => {
                        // Redis unreachable or slow: keep trying while the lease lasts.
                        tracing::debug!(lock = keys.name(), %err, "renewal failed; retrying");
                        let left = status.deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            state.lose(LostReason::LeaseEnded);
                            return;
                        }
                        next = Instant::now() + (left / 4).clamp(MIN_RETRY, period);
                    }
                }
            }
        }))
    }
}

impl LeaseState {
    /// Renewing stops on purpose: if the deadline passes, `reason` is why.
    fn ending_as(&self, reason: LostReason) {
        self.status.send_modify(|s| s.ending = reason);
    }
}
