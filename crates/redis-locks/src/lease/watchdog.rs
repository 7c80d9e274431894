//! The watchdog: renews the leases of held locks in the background, owner-checked.
//!
//! One scheduler task per [`Client`](crate::Client) keeps every renewed lease in a queue
//! ordered by when its next renewal is due, and sleeps until the earliest. Taking a lock adds
//! an entry and releasing it removes one — a map insert and remove under a mutex, with no
//! task spawned and no timer armed per lock. The scheduler is started with the first renewed
//! lease (again if the runtime it ran on shut down) and ends once the client and every
//! watched guard are gone. A renewal is the primitive's owner-checked extend
//! ([`Hold::extend`]).
//!
//! # Batches
//!
//! When the scheduler wakes for the earliest due renewal, it also takes those due within
//! their window after it: an eighth of the renewal period, or of the wait when that is
//! shorter (a retry, a handed-over lease's first extension; [`COALESCE`]). Renewals close in
//! time are so sent together, a little early. Those of one node (one slot, on a cluster) go
//! in batches of at most
//! [`ClientOptions::renewal_batch`](crate::ClientOptions::renewal_batch), one round trip
//! each: one script call when the holds have a script that renews many
//! ([`Hold::extend_many`]: a `Mutex`'s, a `FairMutex`'s), else a pipeline of their own calls
//! ([`Hold::extend_call`]). 100,000 locks on a 30 s lease so cost about 20 round trips a
//! second, not 10,000. Each lock keeps its own owner check and reply:
//!
//! - a lock whose extend says it is gone or taken is lost; the others of the batch are not;
//! - a failed batch is retried lock by lock on each lease's own schedule, as a failed
//!   renewal always was, each retry a request of its own until one succeeds (a batch the
//!   server refuses whole, as `TRYAGAIN` while its slot migrates, does not carry its locks'
//!   retries with it); each lease's deadline (and so `lost()`) stands on its own, whatever
//!   a batch does;
//! - a lock whose release or extension is under way is left out and renewed alone after it,
//!   so a batch waits for no holder.
//!
//! Renewals that wait for replicas, and those of a hold that is not one script call on one
//! node (a `Redlock`, a `MultiLock`), go one request per lock. With a batch of one, every
//! renewal is a request of its own, sent when due.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard as StdGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::state::LeaseState;
use super::{Hold, extend_hold};
use crate::error::{Error, LostReason, Phase};
use crate::node::Replication;
use crate::token::OwnerToken;

/// The shortest pause between two renewal tries after a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(5);
/// The shortest extension a handed-over lease without renewals is given (see
/// [`First::Extend`]), when the lease asked for is over by the time it is sent.
const MIN_EXTENSION: Duration = Duration::from_millis(1);
/// A renewal may be sent with a batch up to `1 / COALESCE` of its wait (at most of its
/// renewal period) before it is due.
const COALESCE: u32 = 8;

/// When the watchdog stops renewing on its own.
#[derive(Debug, Clone)]
pub(crate) struct Renewal {
    pub(crate) lease: Duration,
    /// The caps and the replicas to wait for, when any is set (boxed: most leases have none,
    /// and a process may hold 100,000).
    limits: Option<Box<Limits>>,
}

#[derive(Debug, Clone, Copy)]
struct Limits {
    max_renewals: Option<u32>,
    max_hold: Option<Duration>,
    /// What each renewal waits for, if anything.
    replication: Option<Replication>,
    /// When a handed-over lease without renewals was taken (its one extension ends the
    /// lease asked for after that).
    handed_at: Option<Instant>,
}

impl Renewal {
    /// Renewals of `lease`, capped at `max_renewals` and `max_hold`, each waiting for
    /// `replication`.
    pub(crate) fn new(
        lease: Duration,
        max_renewals: Option<u32>,
        max_hold: Option<Duration>,
        replication: Option<Replication>,
    ) -> Renewal {
        let limited = max_renewals.is_some() || max_hold.is_some() || replication.is_some();
        Renewal {
            lease,
            limits: limited.then(|| {
                Box::new(Limits {
                    max_renewals,
                    max_hold,
                    replication,
                    handed_at: None,
                })
            }),
        }
    }

    /// The one extension of a lease handed over at `at`, without renewals after it.
    pub(crate) fn handed_over(
        lease: Duration,
        at: Instant,
        replication: Option<Replication>,
    ) -> Renewal {
        Renewal {
            lease,
            limits: Some(Box::new(Limits {
                max_renewals: None,
                max_hold: None,
                replication,
                handed_at: Some(at),
            })),
        }
    }

    fn handed_at(&self) -> Option<Instant> {
        self.limits.as_ref().and_then(|limits| limits.handed_at)
    }

    fn max_renewals(&self) -> Option<u32> {
        self.limits.as_ref().and_then(|limits| limits.max_renewals)
    }

    fn max_hold(&self) -> Option<Duration> {
        self.limits.as_ref().and_then(|limits| limits.max_hold)
    }

    fn replication(&self) -> Option<&Replication> {
        self.limits
            .as_ref()
            .and_then(|limits| limits.replication.as_ref())
    }
}

/// One client's renewal queue and its scheduler task. The scheduler ends when the client and
/// every watched guard are gone (a guard may outlive the client it came from).
pub(crate) struct Renewals {
    shared: Arc<Shared>,
    open: Arc<Open>,
}

impl Renewals {
    /// The renewal queue of a client that sends at most `batch` renewals in one round trip.
    pub(crate) fn new(batch: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::new()),
            nudge: Notify::new(),
            batch: batch.max(1),
        });
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

struct Shared {
    queue: Mutex<Queue>,
    /// Nudges the scheduler: an entry due sooner than it planned to wake, or the end.
    nudge: Notify,
    /// The most renewals sent in one round trip (1: each alone, when due).
    batch: usize,
}

struct Queue {
    /// What due times count from: they are kept as [`Tick`]s (8 bytes, not an `Instant`'s
    /// 16), as a process may hold 100,000 leases.
    base: Instant,
    /// Waiting renewals by due time (ties broken by id).
    due: BTreeMap<(Tick, u64), Arc<Job>>,
    /// Every live renewal: when it is due, or [`RUNNING`] while its renewal runs. A job
    /// missing here was stopped (its guard released or dropped) and is never renewed again.
    live: HashMap<u64, Tick>,
    next_id: u64,
    /// The coalescing windows (see [`Job::window`]) of the jobs in `due`, with how many have
    /// each: the widest bounds how far past now `take_due` looks, and it narrows again when
    /// the job that had it leaves the queue (one long lease does not widen every scan for
    /// good).
    windows: BTreeMap<Tick, usize>,
    /// When the scheduler wakes on its own next (`None`: only when nudged).
    wakes_at: Option<Instant>,
    /// The scheduler task, once started; started again if its runtime shut down.
    scheduler: Option<JoinHandle<()>>,
    closed: bool,
}

/// An instant as nanoseconds after the queue's `base`.
type Tick = u64;

/// The [`Tick`] of a job whose renewal is under way (not in the due queue).
const RUNNING: Tick = Tick::MAX;

impl Queue {
    fn new() -> Queue {
        Queue {
            base: Instant::now(),
            due: BTreeMap::new(),
            live: HashMap::new(),
            next_id: 0,
            windows: BTreeMap::new(),
            wakes_at: None,
            scheduler: None,
            closed: false,
        }
    }

    /// `at` as a tick (an instant before `base` as `base`: due at once).
    fn tick(&self, at: Instant) -> Tick {
        let since = at.saturating_duration_since(self.base);
        // Short of `RUNNING` for 584 years.
        u64::try_from(since.as_nanos()).unwrap_or(RUNNING - 1)
    }

    fn instant(&self, tick: Tick) -> Instant {
        self.base + Duration::from_nanos(tick)
    }
}

/// A held lease to renew: whose, on which lock, how, since when.
pub(crate) struct Watched {
    pub(crate) hold: Arc<dyn Hold>,
    pub(crate) owner: OwnerToken,
    pub(crate) state: Arc<LeaseState>,
    pub(crate) renewal: Renewal,
    pub(crate) acquired_at: Instant,
    /// Whose hold of a hold count it is (see [`OwedRelease::held_by`](super::OwedRelease::held_by)).
    pub(crate) holder: Option<super::SharedHolder>,
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
    /// Whether renewals follow the first extension of a handed-over lease.
    renews: bool,
    /// Whether its last renewal failed for a reason that may pass (a round trip that timed
    /// out, a batch the server refused whole, as `TRYAGAIN` while its slot migrates): its
    /// retries go alone until one succeeds, so a failing batch does not carry them with it.
    alone: AtomicBool,
    /// How much earlier than due the next renewal may go with a batch, in nanoseconds (see
    /// [`Job::window`]).
    window: std::sync::atomic::AtomicU64,
}

/// A guard's place in the watchdog; dropping it stops the renewals (a renewal already sent
/// still lands, which is why release and renewals share [`LeaseState::gate`]).
pub(crate) struct Watchdog {
    /// Keeps the scheduler running, and reaches its queue (`open.shared`).
    open: Arc<Open>,
    id: u64,
    /// The job's `renews`.
    renews: bool,
}

impl Watchdog {
    /// Whether the lease is renewed (else the watchdog only owes a handed-over lease its
    /// first extension).
    pub(crate) fn renews(&self) -> bool {
        self.renews
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
            renews,
            alone: AtomicBool::new(false),
            window: std::sync::atomic::AtomicU64::new(0),
        });
        queue.live.insert(id, RUNNING);
        if queue.scheduler.as_ref().is_none_or(JoinHandle::is_finished) {
            queue.wakes_at = None;
            queue.scheduler = Some(tokio::spawn(run_scheduler(self.shared.clone())));
        }
        job.lease.state.owe_extension(extending);
        self.shared.schedule(&mut queue, job, due);
        Watchdog {
            open: self.open.clone(),
            id,
            renews,
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
        let mut queue = self.open.shared.lock();
        let job = match queue.live.remove(&self.id) {
            Some(due) if due != RUNNING => queue.remove(due, self.id),
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
        let tick = queue.tick(at);
        let Some(slot) = queue.live.get_mut(&job.id) else {
            return;
        };
        *slot = tick;
        // An eighth of the wait, at most an eighth of the renewal period: a lease due soon
        // after it was taken (a handed-over one) or a retry is not sent much earlier.
        let window = (at.saturating_duration_since(Instant::now()) / COALESCE)
            .min(job.lease.renewal.lease / 3 / COALESCE);
        job.window.store(
            u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        *queue.windows.entry(job.window()).or_default() += 1;
        queue.due.insert((tick, job.id), job);
        if queue.wakes_at.is_none_or(|wakes| at < wakes) {
            queue.wakes_at = Some(at);
            self.nudge.notify_one();
        }
    }
}

impl Queue {
    /// Takes the renewals due by `now` — and, with `coalesce`, those due within their
    /// window after it, so they go in one batch with the others — each marked as running.
    fn take_due(&mut self, now: Instant, coalesce: bool) -> Vec<Arc<Job>> {
        let widest = self.windows.keys().next_back().copied().unwrap_or(0);
        let now = self.tick(now);
        let horizon = if coalesce {
            now.saturating_add(widest)
        } else {
            now
        };
        let taken: Vec<(Tick, u64)> = self
            .due
            .range(..=(horizon, u64::MAX))
            .filter(|((at, _), job)| {
                *at <= now || (coalesce && *at <= now.saturating_add(job.window()))
            })
            .map(|(key, _)| *key)
            .collect();
        taken
            .into_iter()
            .filter_map(|(tick, id)| {
                let job = self.remove(tick, id)?;
                self.live.insert(job.id, RUNNING);
                Some(job)
            })
            .collect()
    }

    /// Takes the job `id` due at `tick` out of `due`, and its window out of `windows`.
    fn remove(&mut self, tick: Tick, id: u64) -> Option<Arc<Job>> {
        let job = self.due.remove(&(tick, id))?;
        if let Some(count) = self.windows.get_mut(&job.window()) {
            *count -= 1;
            if *count == 0 {
                self.windows.remove(&job.window());
            }
        }
        Some(job)
    }
}

/// Starts every due renewal (in batches, when the client batches them), then sleeps until
/// the next is due or a nudge comes.
async fn run_scheduler(shared: Arc<Shared>) {
    loop {
        let (due, wakes_at) = {
            let mut queue = shared.lock();
            if queue.closed {
                return;
            }
            let due = queue.take_due(Instant::now(), shared.batch > 1);
            queue.wakes_at = queue.due.keys().next().map(|(at, _)| queue.instant(*at));
            (due, queue.wakes_at)
        };
        // Started with the queue unlocked: a job holds the primitive's `Hold`.
        start(&shared, due);
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

/// Starts the renewals of `due`: those of one node (one slot of a cluster) in batches of at
/// most `shared.batch`, each batch a task and one round trip; the others each a task of
/// their own.
fn start(shared: &Arc<Shared>, due: Vec<Arc<Job>>) {
    let mut batches: HashMap<BatchKey, Vec<Arc<Job>>> = HashMap::new();
    for job in due {
        match job.batch_key(shared.batch) {
            Some(key) => batches.entry(key).or_default().push(job),
            None => drop(tokio::spawn(renew_alone(shared.clone(), job))),
        }
    }
    for jobs in batches.into_values() {
        let mut jobs = jobs.into_iter().peekable();
        while jobs.peek().is_some() {
            let mut batch: Vec<Arc<Job>> = jobs.by_ref().take(shared.batch).collect();
            let shared = shared.clone();
            if batch.len() == 1 {
                drop(tokio::spawn(renew_alone(shared, batch.remove(0))));
            } else {
                let span = tracing::debug_span!("renew", locks = batch.len());
                drop(tokio::spawn(renew_batch(shared, batch).instrument(span)));
            }
        }
    }
}

/// [`renew`] in a span naming the lock and its primitive.
fn renew_alone(shared: Arc<Shared>, job: Arc<Job>) -> impl Future<Output = ()> + Send {
    let hold = &job.lease.hold;
    let span = tracing::debug_span!("renew", lock = hold.name(), primitive = hold.kind().label());
    renew(shared, job).instrument(span)
}

/// One renewal of `job`'s lease, a request of its own; queues the next one unless the lease
/// is over.
async fn renew(shared: Arc<Shared>, job: Arc<Job>) {
    // Never beside an extension or the release (see `LeaseState::gate`).
    let _gate = job.lease.state.gate().await;
    let Some(plan) = job.plan(&shared) else {
        return;
    };
    let Watched {
        hold,
        owner,
        renewal,
        ..
    } = &job.lease;
    let outcome = extend_hold(hold.as_ref(), owner, plan.lease, renewal.replication()).await;
    let outcome = broken_or(&job, outcome).await;
    job.settle(&shared, plan, outcome.as_ref().copied());
}

/// A renewal's `outcome`, except that a lock found gone or taken that a break took from this
/// holder is [`LostReason::Broken`] (an error asking counts as not broken), and a hold of a
/// hold count that ran out while another owner holds the lock in a mode that excludes it is
/// [`LostReason::Taken`], as its release would say (see [`super::taken`]).
async fn broken_or<T>(job: &Job, outcome: Result<T, Error>) -> Result<T, Error> {
    let Watched {
        hold,
        owner,
        holder,
        ..
    } = &job.lease;
    match outcome {
        Err(Error::NotHeld {
            name,
            reason: LostReason::Expired | LostReason::Taken,
        }) if hold.broken(owner).await.unwrap_or(false) => Err(Error::NotHeld {
            name,
            reason: LostReason::Broken,
        }),
        Err(Error::NotHeld {
            name,
            reason: LostReason::Expired,
        }) if super::taken(
            hold.as_ref(),
            holder.as_ref().map(super::SharedHolder::now).as_ref(),
        )
        .await =>
        {
            Err(Error::NotHeld {
                name,
                reason: LostReason::Taken,
            })
        }
        outcome => outcome,
    }
}

/// The renewals of `jobs` (all of one node and slot) in one round trip; each lease's
/// outcome is its own, as if renewed alone. A job whose extension or release is under way
/// is renewed alone after it, so the batch waits for no holder.
async fn renew_batch(shared: Arc<Shared>, jobs: Vec<Arc<Job>>) {
    let mut sent = Vec::with_capacity(jobs.len());
    let mut calls = Vec::with_capacity(jobs.len());
    let mut node = None;
    for job in &jobs {
        let Some(gate) = job.lease.state.try_gate() else {
            drop(tokio::spawn(renew(shared.clone(), job.clone())));
            continue;
        };
        let Some(plan) = job.plan(&shared) else {
            continue;
        };
        let hold = job.lease.hold.as_ref();
        match (
            hold.extend_on(),
            hold.extend_call(&job.lease.owner, plan.lease),
        ) {
            (Some((on, _)), Ok(call)) => {
                node.get_or_insert(on);
                calls.push(call);
                sent.push((job, gate, plan));
            }
            (_, Err(err)) => job.settle(&shared, plan, Err(&err)),
            (None, Ok(_)) => unreachable!("a batched job's hold names its node"),
        }
    }
    let Some(node) = node else {
        return;
    };
    let many = jobs.first().and_then(|job| job.lease.hold.extend_many());
    let replies = match many {
        Some(script) => run_as_one(node, script, &calls).await,
        None => node.run_scripts::<i64>(Phase::Extend, &calls).await,
    };
    match replies {
        Ok(replies) => {
            for ((job, _gate, plan), reply) in sent.into_iter().zip(replies) {
                let outcome = reply.and_then(|reply| job.lease.hold.extend_reply(reply));
                let outcome = broken_or(job, outcome).await;
                job.settle(&shared, plan, outcome.as_ref().map(|_| None));
            }
        }
        Err(err) => {
            tracing::debug!(%err, locks = calls.len(), "batched renewal failed; retrying");
            for (job, _gate, plan) in sent {
                job.settle(&shared, plan, Err(&err));
            }
        }
    }
}

/// Runs `calls` (of one key each) as one call of `script`, which takes their keys and ARGV
/// in turn and replies with an array of their replies.
async fn run_as_one(
    node: &crate::node::Node,
    script: &crate::node::LockScript,
    calls: &[crate::node::ScriptCall<'_>],
) -> crate::error::Result<Vec<crate::error::Result<i64>>> {
    let keys: Vec<&str> = calls
        .iter()
        .flat_map(|call| call.keys.iter().copied())
        .collect();
    let args: Vec<&str> = calls
        .iter()
        .flat_map(|call| call.args.iter().map(String::as_str))
        .collect();
    let replies: Vec<i64> = node.run_script(Phase::Extend, script, &keys, &args).await?;
    if replies.len() != calls.len() {
        return Err(Error::UnexpectedReply {
            phase: Phase::Extend,
            detail: format!("{} replies to {} renewals", replies.len(), calls.len()),
        });
    }
    Ok(replies.into_iter().map(Ok).collect())
}

/// What the renewals of one batch share: the node's id, the slot (0 on one server), and the
/// address of the script that renews them all in one call (0: none, a pipeline).
type BatchKey = (usize, u16, usize);

/// A renewal about to be sent: when, for how long, and the lease's state before it.
struct Plan {
    sent_at: Instant,
    lease: Duration,
    /// The lease's deadline before this renewal.
    deadline: Instant,
    /// Whether this is a handed-over lease's first extension.
    extending: bool,
}

impl Job {
    /// How long after the earliest due renewal this one may be sent with it, in a batch.
    fn window(&self) -> Tick {
        self.window.load(Ordering::Relaxed)
    }

    /// Which batch this job's renewal may join (its node, slot, and the script that renews
    /// many such holds in one call, if any), if any: with batches of one, a renewal that
    /// waits for replicas, or a hold renewed otherwise, none.
    fn batch_key(&self, batch: usize) -> Option<BatchKey> {
        if batch <= 1
            || self.lease.renewal.replication().is_some()
            || self.alone.load(Ordering::Relaxed)
        {
            return None;
        }
        let hold = self.lease.hold.as_ref();
        let (node, key) = hold.extend_on()?;
        let many = hold
            .extend_many()
            .map_or(0, |script| std::ptr::from_ref(script) as usize);
        Some((node.id(), node.slot_of(key), many))
    }

    /// What to send now, with the gate held, if anything: nothing once the job was stopped,
    /// the lease is lost or over, or a cap is reached. Counts on the new lease's end at once
    /// (a renewal after a longer `extend` shortens the lease).
    fn plan(&self, shared: &Shared) -> Option<Plan> {
        let Watched {
            hold,
            state,
            renewal,
            acquired_at,
            ..
        } = &self.lease;
        if !shared.lock().live.contains_key(&self.id) {
            return None; // released while this renewal waited for the gate
        }
        let status = state.status();
        if status.lost.is_some() {
            return None;
        }
        if status.deadline <= Instant::now() {
            // Too late: the lease may be gone, so no renewal may revive it now.
            state.lose(status.ending, hold.as_ref());
            return None;
        }
        // A handed-over lease's first extension is owed whatever the caps: the lease the
        // caller asked for begins with it.
        let extending = state.extension_owed();
        if !extending && !self.renews {
            return None; // the holder extended the handed lease itself: nothing more is owed
        }
        let renewals = self.renewals.load(Ordering::Relaxed);
        let capped = renewal.max_renewals().is_some_and(|max| renewals >= max)
            || renewal
                .max_hold()
                .is_some_and(|max| Instant::now() + renewal.lease > *acquired_at + max);
        if capped && !extending {
            // Let the lease run out; `lost()` tells the holder at its deadline.
            tracing::debug!(lock = hold.name(), renewals, "renewal cap reached");
            state.ending_as(LostReason::RenewalCapReached);
            return None;
        }
        let sent_at = Instant::now();
        // A handed-over lease without renewals is extended to end the lease asked for after
        // the handover; past that, the handed lease simply runs out.
        let lease = if extending && !self.renews {
            // Past the lease asked for (a late retry), a last millisecond ends it.
            renewal
                .lease
                .saturating_sub(sent_at - renewal.handed_at().unwrap_or(*acquired_at))
                .max(MIN_EXTENSION)
        } else {
            renewal.lease
        };
        // After a longer `extend`, a renewal shortens the lease: count on that at once.
        state.at_most(state.deadline_for(sent_at, lease));
        Some(Plan {
            sent_at,
            lease,
            deadline: status.deadline,
            extending,
        })
    }

    /// Records the outcome of the renewal `plan` sent (how many replicas acknowledged, or
    /// why it failed) and queues the next one, unless the lease is over.
    fn settle(self: &Arc<Self>, shared: &Shared, plan: Plan, outcome: Result<Option<u32>, &Error>) {
        let Watched {
            hold,
            state,
            renewal,
            ..
        } = &self.lease;
        let period = renewal.lease / 3;
        crate::telemetry::renewed(hold.kind(), hold.name(), outcome.is_ok());
        let next = match outcome {
            Ok(replicas) => {
                self.alone.store(false, Ordering::Relaxed);
                state.extended(state.deadline_for(plan.sent_at, plan.lease));
                state.acknowledged(replicas);
                if plan.extending {
                    state.owe_extension(false);
                    if !self.renews {
                        return;
                    }
                } else {
                    self.renewals.fetch_add(1, Ordering::Relaxed);
                }
                plan.sent_at + period
            }
            Err(Error::NotHeld { reason, .. }) => {
                state.lose(*reason, hold.as_ref());
                return;
            }
            Err(Error::WrongType { .. }) => {
                // The lock key was replaced by a value of another type.
                state.lose(LostReason::Taken, hold.as_ref());
                return;
            }
            Err(err) => {
                // Redis unreachable or slow: keep trying while the lease lasts, alone.
                tracing::debug!(lock = hold.name(), %err, "renewal failed; retrying");
                self.alone.store(true, Ordering::Relaxed);
                let left = plan.deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    state.lose(LostReason::LeaseEnded, hold.as_ref());
                    return;
                }
                Instant::now() + (left / 4).clamp(MIN_RETRY.min(period), period)
            }
        };
        let mut queue = shared.lock();
        shared.schedule(&mut queue, self.clone(), next);
    }
}
