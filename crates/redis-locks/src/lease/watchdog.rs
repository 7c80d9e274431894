//! The watchdog: renews the leases of held locks in the background, owner-checked.
//!
//! One scheduler task per [`Client`](crate::Client) keeps every renewed lease in a queue
//! ordered by when its next renewal is due, sleeps until the earliest, and starts each due
//! renewal as a task of its own. Taking a lock adds an entry and releasing it removes one — a
//! map insert and remove under a mutex, with no task spawned and no timer armed per lock. The
//! scheduler is started with the first renewed lease (again if the runtime it ran on shut
//! down) and ends once the client and every watched guard are gone. A renewal is the
//! primitive's owner-checked extend ([`Hold::extend`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard as StdGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::state::LeaseState;
use super::{Hold, extend_hold};
use crate::error::{Error, LostReason};
use crate::node::Replication;
use crate::token::OwnerToken;

/// The shortest pause between two renewal tries after a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(5);
/// The shortest extension a handed-over lease without renewals is given (see
/// [`First::Extend`]), when the lease asked for is over by the time it is sent.
const MIN_EXTENSION: Duration = Duration::from_millis(1);

/// When the watchdog stops renewing on its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal {
    pub(crate) lease: Duration,
    pub(crate) max_renewals: Option<u32>,
    pub(crate) max_hold: Option<Duration>,
    /// What each renewal waits for, if anything.
    pub(crate) replication: Option<Replication>,
}

/// One client's renewal queue and its scheduler task. The scheduler ends when the client and
/// every watched guard are gone (a guard may outlive the client it came from).
pub(crate) struct Renewals {
    shared: Arc<Shared>,
    open: Arc<Open>,
}

impl Default for Renewals {
    fn default() -> Self {
        let shared = Arc::new(Shared::default());
        Renewals {
            open: Arc::new(Open {
                shared: shared.clone(),
            }),
            shared,
        }
    }
}

/// Keeps the scheduler running while it exists: held by the client and by every watchdog.
struct Open {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Nudges the scheduler: an entry due sooner than it planned to wake, or the end.
    nudge: Notify,
}

#[derive(Default)]
struct Queue {
    /// Waiting renewals by due time (ties broken by id).
    due: BTreeMap<(Instant, u64), Arc<Job>>,
    /// Every live renewal: when it is due, or `None` while its renewal runs. A job missing
    /// here was stopped (its guard released or dropped) and is never renewed again.
    live: HashMap<u64, Option<Instant>>,
    next_id: u64,
    /// When the scheduler wakes on its own next (`None`: only when nudged).
    wakes_at: Option<Instant>,
    /// The scheduler task, once started; started again if its runtime shut down.
    scheduler: Option<JoinHandle<()>>,
    closed: bool,
}

/// A held lease to renew: whose, on which lock, how, since when.
pub(crate) struct Watched {
    pub(crate) hold: Arc<dyn Hold>,
    pub(crate) owner: OwnerToken,
    pub(crate) state: Arc<LeaseState>,
    pub(crate) renewal: Renewal,
    pub(crate) acquired_at: Instant,
}

/// What the watchdog does first for a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum First {
    /// Renew a third of the lease after the acquisition, and so on.
    Renew,
    /// The lease was handed over by a release with a short server lease (see
    /// `queue.lua`, `hand_over`): extend it — whatever the renewal caps, and not counted as
    /// a renewal — once a third of what is left of it has passed, as a renewal would be, so a
    /// guard released sooner never sends it (at once if the lease asked for is shorter than
    /// what is left: the extension then shortens it).
    /// With `then_renew`, extend it to the full lease and renew as usual from then; without
    /// (a guard taken without the watchdog), extend it to end the lease asked for after the
    /// handover, and stop.
    Extend { then_renew: bool },
}

/// A watched lease in the queue.
struct Job {
    id: u64,
    lease: Watched,
    /// Renewals so far.
    renewals: AtomicU32,
    /// A handed-over lease's first extension is still to be made (shared with the guard's
    /// [`Watchdog`], whose holder's own extension makes it owed no more).
    extending: Arc<std::sync::atomic::AtomicBool>,
    /// Whether renewals follow the first extension of a handed-over lease.
    renews: bool,
    /// When the job was made (for a handed-over lease: when it was taken).
    since: Instant,
}

/// A guard's place in the watchdog; dropping it stops the renewals (a renewal already sent
/// still lands, which is why release and renewals share [`LeaseState::gate`]).
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    id: u64,
    /// The job's `extending`.
    extending: Arc<std::sync::atomic::AtomicBool>,
    /// The job's `renews`.
    renews: bool,
    _open: Arc<Open>,
}

impl Watchdog {
    /// Whether the lease is renewed (else the watchdog only owes a handed-over lease its
    /// first extension).
    pub(crate) fn renews(&self) -> bool {
        self.renews
    }

    /// The holder extended the lease itself: a handed-over lease's first extension is owed no
    /// more (without renewals to follow, the watchdog then sends nothing; with them, its next
    /// request is a renewal, on the schedule it had).
    pub(crate) fn holder_extended(&self) {
        self.extending.store(false, Ordering::Relaxed);
    }
}

impl Renewals {
    /// Renews the lease every third of it, owner-checked, until the returned handle is
    /// dropped, until the lock is found lost, or until a cap is reached (then the lease
    /// simply runs out).
    ///
    /// With [`First::Extend`], the first request extends a handed-over lease (see there).
    pub(crate) fn watch(&self, lease: Watched, first: First) -> Watchdog {
        let (due, extending, renews) = match first {
            First::Renew => (lease.acquired_at + lease.renewal.lease / 3, false, true),
            First::Extend { then_renew } => {
                // At once when the lease asked for is the shorter (the extension shortens the
                // handed lease to it); else a third of the way into the handed lease.
                let now = Instant::now();
                let left = lease.state.status().deadline.saturating_duration_since(now);
                let wait = if lease.renewal.lease < left {
                    Duration::ZERO
                } else {
                    left / 3
                };
                (now + wait, true, then_renew)
            }
        };
        let mut queue = self.shared.lock();
        let id = queue.next_id;
        queue.next_id += 1;
        let job = Arc::new(Job {
            id,
            lease,
            renewals: AtomicU32::new(0),
            extending: Arc::new(std::sync::atomic::AtomicBool::new(extending)),
            renews,
            since: Instant::now(),
        });
        queue.live.insert(id, None);
        if queue.scheduler.as_ref().is_none_or(JoinHandle::is_finished) {
            queue.wakes_at = None;
            queue.scheduler = Some(tokio::spawn(run_scheduler(self.shared.clone())));
        }
        let extending = job.extending.clone();
        self.shared.schedule(&mut queue, job, due);
        Watchdog {
            shared: self.shared.clone(),
            id,
            extending,
            renews,
            _open: self.open.clone(),
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.nudge.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        let job = match queue.live.remove(&self.id) {
            Some(Some(due)) => queue.due.remove(&(due, self.id)),
            _ => None,
        };
        drop(queue);
        // The job holds the primitive's `Hold`: let it go only after the queue is unlocked.
        drop(job);
    }
}

impl Shared {
    fn lock(&self) -> StdGuard<'_, Queue> {
        // The queue is left consistent at every step, so a panic elsewhere does not spoil it.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `job` for `at`, unless it was stopped meanwhile; nudges the scheduler if it
    /// would otherwise sleep past `at`.
    fn schedule(&self, queue: &mut Queue, job: Arc<Job>, at: Instant) {
        let Some(slot) = queue.live.get_mut(&job.id) else {
            return;
        };
        *slot = Some(at);
        queue.due.insert((at, job.id), job);
        if queue.wakes_at.is_none_or(|wakes| at < wakes) {
            queue.wakes_at = Some(at);
            self.nudge.notify_one();
        }
    }
}

/// Starts every due renewal, then sleeps until the next is due or a nudge comes.
async fn run_scheduler(shared: Arc<Shared>) {
    loop {
        let mut due = Vec::new();
        let wakes_at = {
            let mut queue = shared.lock();
            if queue.closed {
                return;
            }
            let now = Instant::now();
            while let Some(entry) = queue.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let job = entry.remove();
                queue.live.insert(job.id, None);
                due.push(job);
            }
            queue.wakes_at = queue.due.keys().next().map(|(at, _)| *at);
            queue.wakes_at
        };
        // Spawned with the queue unlocked: a job holds the primitive's `Hold`.
        for job in due {
            tokio::spawn(renew(shared.clone(), job));
        }
        match wakes_at {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = shared.nudge.notified() => {}
                }
            }
            None => shared.nudge.notified().await,
        }
    }
}

/// One renewal of `job`'s lease; queues the next one unless the lease is over.
async fn renew(shared: Arc<Shared>, job: Arc<Job>) {
    let Watched {
        hold,
        owner,
        state,
        renewal,
        acquired_at,
    } = &job.lease;
    // Never beside an extension or the release (see `LeaseState::gate`).
    let _gate = state.gate.lock().await;
    if !shared.lock().live.contains_key(&job.id) {
        return; // released while this renewal waited for the gate
    }
    let status = state.status();
    if status.lost.is_some() {
        return;
    }
    if status.deadline <= Instant::now() {
        // Too late: the lease may be gone, so no renewal may revive it now.
        state.lose(status.ending);
        return;
    }
    // A handed-over lease's first extension is owed whatever the caps: the lease the caller
    // asked for begins with it.
    let extending = job.extending.load(Ordering::Relaxed);
    if !extending && !job.renews {
        return; // the holder extended the handed lease itself: nothing more is owed
    }
    let renewals = job.renewals.load(Ordering::Relaxed);
    let capped = renewal.max_renewals.is_some_and(|max| renewals >= max)
        || renewal
            .max_hold
            .is_some_and(|max| Instant::now() + renewal.lease > *acquired_at + max);
    if capped && !extending {
        // Let the lease run out; `lost()` tells the holder at its deadline.
        tracing::debug!(lock = hold.name(), renewals, "renewal cap reached");
        state.ending_as(LostReason::RenewalCapReached);
        return;
    }
    let period = renewal.lease / 3;
    let sent_at = Instant::now();
    // A handed-over lease without renewals is extended to end the lease asked for after the
    // handover; past that, the handed lease simply runs out.
    let lease = if extending && !job.renews {
        // Past the lease asked for (a late retry), a last millisecond ends it.
        renewal
            .lease
            .saturating_sub(sent_at - job.since)
            .max(MIN_EXTENSION)
    } else {
        renewal.lease
    };
    // After a longer `extend`, a renewal shortens the lease: count on that at once.
    state.at_most(state.deadline_for(sent_at, lease));
    let next = match extend_hold(hold.as_ref(), owner, lease, renewal.replication.as_ref()).await {
        Ok(replicas) => {
            state.extended(state.deadline_for(sent_at, lease));
            state.acknowledged(replicas);
            if extending {
                job.extending.store(false, Ordering::Relaxed);
                if !job.renews {
                    return;
                }
            } else {
                job.renewals.fetch_add(1, Ordering::Relaxed);
            }
            sent_at + period
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
            tracing::debug!(lock = hold.name(), %err, "renewal failed; retrying");
            let left = status.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.lose(LostReason::LeaseEnded);
                return;
            }
            Instant::now() + (left / 4).clamp(MIN_RETRY.min(period), period)
        }
    };
    let mut queue = shared.lock();
    shared.schedule(&mut queue, job.clone(), next);
}
