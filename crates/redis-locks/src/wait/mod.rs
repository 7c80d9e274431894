//! The one acquire loop: every primitive waits for a held lock through [`acquire`].
//!
//! The first attempt of a call is made the cheapest way: without a subscription (an
//! uncontended lock never needs one), or, when this process waited for the lock a moment ago
//! and its subscription still lingers, listening already and getting in line at once. After
//! that a waiter listens on the lock's wake channel (a subscription through the [`Node`])
//! *before* each attempt, so a release right after the attempt still wakes it; then
//! it sleeps until a release wakes it or hands it the lock ([`Contender::handed_over`]: a
//! `Mutex`'s release gives the lock straight to the first process in line, which then holds
//! it without asking again), or until the holder's lease ends (the key expires then,
//! so a crashed holder is noticed at once), or until its place lease must be renewed, or
//! until the caller's wait budget runs out. While the wake-up connection is not live it polls
//! with a jittered delay ([`pause`](mod@pause)). A primitive that takes *local turns* (a `Mutex`) lets
//! only the first of its waiters of one lock in this process talk to Redis ([`local`]); one
//! whose waiters keep their own place on the server (a `FairMutex`) does not.
//!
//! The primitive says how to attempt through a [`Contender`], whose attempt answers a
//! [`Try`]: granted, or held by another owner and for how long ([`grant`](mod@grant): the one
//! type for it, the acquire scripts' `{1, token} | {0, pttl}` reply read once, and
//! [`in_time`], the late-grant rule every engine's attempt goes through). The owner checks, the waiter
//! mark and the wake-up publish that its scripts use are in the lock prelude `lock.lua`
//! ([`LOCK_LUA`]), the queue of waiters and the handover in the queue prelude `queue.lua`
//! ([`QUEUE_LUA`]); a wait that ends without the lock leaves the queue (`leave.lua`).

mod grant;
mod local;
mod message;
mod options;
mod pause;
mod placed;

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::lease::Lease;
use crate::node::{LockScript, Node, Registered, Subscription};

pub(crate) use grant::{Try, grant_reply, in_time, nothing_owed};
pub(crate) use local::{LocalHolder, LocalQueue, LocalQueues};
pub(crate) use message::{HandedOver, woken};
pub use options::{DEFAULT_PLACE_LEASE, DEFAULT_RETRY_DELAY, WaitOptions};
use pause::{Backoff, Bounds, confirm_limit, pause};
pub(crate) use placed::{Answer, Asker, Placed, answer_in_time, try_once};

/// The lock prelude, in front of every script that reads or writes a lock key: the owner
/// checks (`holder_of`, `holder_in`, `owner_refusal`), the server clock (`server_ms`), the
/// waiter mark (`mark_waited`, `with_mark`), the wake-up (`wake`, `wake_all`: the one
/// `PUBLISH` line, which the cluster form makes `SPUBLISH`), a release's tombstone
/// (`given`, `released_before`, `remember_release`: the one `RETRIED` line) and the type
/// checks (`wrong_kind`, `checked`).
pub(crate) const LOCK_LUA: &str = include_str!("lock.lua");

/// The queue prelude, after [`LOCK_LUA`], in the scripts that keep waiters in line or hand
/// the lock over: the queue (`queue_wrong_type`, `queue_purge`, `queue_drop`, `queue_look`,
/// `queue_join`, `queue_enter`, `queue_leave`, `queue_head`) and the handover
/// (`handover_wrong_type`, `handover_register`, `handover_owner`, `hand_over`, which calls
/// `token/fence.lua`'s `next_token`: a script that hands over puts that prelude first).
pub(crate) const QUEUE_LUA: &str = include_str!("queue.lua");

/// Every prelude but the holds engine's, for the tests that check which ones a script carries.
#[cfg(test)]
pub(crate) const PRELUDES: [&str; 3] = [crate::token::FENCE_LUA, LOCK_LUA, QUEUE_LUA];

/// Runs `script` on a lock and its line of waiters: KEYS the lock key, the queue, the place
/// leases and the ticket counter (and, where a script may run twice, `id`'s tombstone key
/// last); ARGV `id` (an owner token, hold id or waiter id) and the wake channel. Every release (and leave, and downgrade) takes these, whatever primitive
/// (one that hands the lock over: [`run_handing_over`]).
pub(crate) async fn run_on_line<T: redis::FromRedisValue>(
    node: &Node,
    phase: Phase,
    script: &LockScript,
    keys: &LockKeys,
    id: &str,
) -> Result<T> {
    let tombstone = tombstone(node, keys, id);
    let line = keys.line();
    let all = [
        keys.lock(),
        line.queue(),
        line.places(),
        line.tickets(),
        tombstone.as_deref().unwrap_or_default(),
    ];
    let count = if tombstone.is_some() { 5 } else { 4 };
    node.run_script(phase, script, &all[..count], &[id, keys.wake_channel()])
        .await
}

/// Where a node may run a script twice (a cluster client's retry): the key a release by `id`
/// leaves its tombstone in, passed as the script's last KEY (see `released_before` in
/// `lock.lua`). None elsewhere: nothing is passed, nothing is written.
pub(crate) fn tombstone(node: &Node, keys: &LockKeys, id: &str) -> Option<String> {
    node.may_run_twice()
        .then(|| keys.companion(&format!("released:{id}")))
}

/// As [`run_on_line`], for the scripts that may hand the lock to the next waiter (`hand_over`
/// in `queue.lua`): KEYS the lock key, the queue, the place leases, the ticket counter, the
/// handover hash and the fencing counter; ARGV `id`, the wake channel, then `third` if given.
/// A `Mutex`'s and a `FairMutex`'s release, a `Mutex` line's leave with its registered
/// token (`third`), and a Redlock node's release with its proposed token (`third`), run so.
pub(crate) async fn run_handing_over<T: redis::FromRedisValue>(
    node: &Node,
    phase: Phase,
    script: &LockScript,
    keys: &LockKeys,
    id: &str,
    third: Option<&str>,
) -> Result<T> {
    let all = [id, keys.wake_channel(), third.unwrap_or_default()];
    let args = &all[..if third.is_some() { 3 } else { 2 }];
    let tombstone = tombstone(node, keys, id);
    let line = keys.line();
    let all_keys = [
        keys.lock(),
        line.queue(),
        line.places(),
        line.tickets(),
        line.handover(),
        keys.fence(),
        tombstone.as_deref().unwrap_or_default(),
    ];
    let count = if tombstone.is_some() { 7 } else { 6 };
    node.run_script(phase, script, &all_keys[..count], args)
        .await
}

/// Gives a waiter's place in a lock's queue up (`leave.lua`): for a wait that ended without
/// the lock. If the lock is free, the next waiter is woken, in case the release was meant for
/// this one. With `owner`, the token the waiter registered for a handover: a lock handed to
/// it is released first. A failure is only logged: the place lease ends the place (and a
/// lock handed over) anyway.
pub(crate) async fn leave_queue(
    node: &Node,
    keys: &LockKeys,
    waiter: &str,
    owner: Option<&crate::token::OwnerToken>,
) {
    let outcome = match owner {
        None => run_on_line::<i64>(node, Phase::Release, &LEAVE, keys, waiter).await,
        Some(owner) => {
            let owner = Some(owner.as_str());
            run_handing_over::<i64>(node, Phase::Release, &LEAVE, keys, waiter, owner).await
        }
    };
    if let Err(err) = outcome {
        tracing::debug!(lock = keys.name(), %err, "leaving the queue; its place lease ends it");
    }
}

/// Leave a lock's queue, waking the next waiter if the lock is free: `1` left, `0` had no
/// place.
pub(crate) static LEAVE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, QUEUE_LUA, include_str!("leave.lua")]));
inventory::submit!(Registered(|| &LEAVE));

/// How an attempt stands in line.
#[derive(Clone, Copy)]
pub(crate) struct Line<'a> {
    /// Waiters of this process queue behind this one (local turns only): a grant should be
    /// marked at once, so that its release wakes them.
    pub(crate) mark: bool,
    /// This process's waiters of the lock (local turns only): their one place in the lock's
    /// queue on the server is [`LocalQueue::id`]; tell it [`LocalQueue::placing`] before an
    /// attempt that may take the place, and [`LocalQueue::unplaced`] after a grant.
    pub(crate) local: Option<&'a LocalQueue>,
}

/// A primitive's side of the acquire loop: how to attempt, and what its waiting needs.
pub(crate) trait Contender: Send {
    /// The lock's name, for [`Error::WaitTimeout`].
    fn name(&self) -> &str;

    /// The primitive, for metrics.
    fn kind(&self) -> crate::telemetry::Kind;

    /// The lock's wake channel: where the wake-up that ends the next wait comes from. It
    /// may change after a refused attempt (a MultiLock listens on the lock that refused
    /// it); the loop then listens there before the next attempt.
    fn channel(&self) -> &str;

    /// One attempt, made while listening for wake-ups, standing in `line`. `deadline` is the
    /// wait budget, for a grant that comes back late and would be asked again.
    fn attempt(
        &mut self,
        line: Line<'_>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Try>> + Send;

    /// The first attempt of a call, when no other waiter of this process waits for the lock
    /// (and the try-once after a local turn did not come in time): the cheapest way to ask.
    /// With a `line`, a subscription to the lock's wake channel was live already (this
    /// process waited for the lock a moment ago) and hears every wake-up from before the
    /// attempt, and the wait has time left: a refusal may put the waiter in line at once, and
    /// the loop then waits for its wake-up without asking again. By default, an attempt.
    fn first(
        &mut self,
        deadline: Option<Instant>,
        line: Option<Line<'_>>,
    ) -> impl Future<Output = Result<Try>> + Send {
        let line = line.unwrap_or(Line {
            mark: false,
            local: None,
        });
        self.attempt(line, deadline)
    }

    /// Whether this primitive's waiters of one lock in this process take turns, only the
    /// first of them talking to Redis: `Some(kind)`, the primitive's name, which keeps the
    /// turns of two kinds of lock on one name apart.
    fn local_turns(&self) -> Option<&'static str> {
        None
    }

    /// The payload of a wake-up addressed to this waiter only (a `FairMutex` waiter's owner
    /// token, the [`LocalQueue::id`] of a `Mutex`'s waiters in this process), if releases
    /// wake one waiter at a time; `None` when any wake-up on the channel is for it.
    fn address(&self) -> Option<&str> {
        None
    }

    /// How often the waiter must attempt even without a wake-up (to renew a place lease).
    fn refresh(&self) -> Option<Duration> {
        None
    }

    /// A release handed the lock straight to this waiter's line (see `queue.lua`,
    /// `hand_over`): the lease, if the grant is this waiter's to take and still holds;
    /// `None` to ask Redis again (which finds a grant it did not take here). By default
    /// `None`: only a `Mutex`'s releases hand over.
    fn handed_over(&mut self, line: Line<'_>, handed: &HandedOver) -> Option<Lease> {
        let _ = (line, handed);
        None
    }

    /// As [`handed_over`](Contender::handed_over), for a primitive that must hear more than
    /// this one message before it holds (a `Redlock`, handed the lock on each of its nodes,
    /// waits for a majority of them). By default, `handed_over`.
    fn take_handed(
        &mut self,
        line: Line<'_>,
        handed: &HandedOver,
    ) -> impl Future<Output = Option<Lease>> + Send {
        let lease = self.handed_over(line, handed);
        async move { lease }
    }

    /// The wait budget ran out after a refused attempt: give up whatever the attempts left
    /// on the server that the loop does not (a `FairMutex`'s place, by owner token; a place
    /// in line shared with this process's other waiters is the loop's).
    fn give_up(self) -> impl Future<Output = ()> + Send
    where
        Self: Sized,
    {
        async {}
    }
}

/// Where a waiter waits: the node its wake-ups come from, and this process's local queues.
#[derive(Clone, Copy)]
pub(crate) struct WaitOn<'a> {
    pub(crate) node: &'a Node,
    pub(crate) local: &'a LocalQueues,
    pub(crate) options: &'a WaitOptions,
}

/// Acquires with `contender`, waiting until `deadline` (`None`: as long as it takes).
///
/// # Errors
/// [`Error::WaitTimeout`] when the budget ran out with the lock held by others (after at
/// least one attempt); any error of an attempt, at once.
pub(crate) async fn acquire<C: Contender>(
    on: WaitOn<'_>,
    contender: C,
    deadline: Option<Instant>,
) -> Result<Lease> {
    let (kind, started) = (contender.kind(), Instant::now());
    // The name outlives the contender only when the metrics label names (no copy otherwise).
    let name = crate::telemetry::names_labelled().then(|| contender.name().to_string());
    // The lock's name and primitive, the attempts made, the wait, the outcome and the
    // fencing token: never the owner token.
    let span = tracing::debug_span!(
        "acquire",
        lock = contender.name(),
        primitive = kind.label(),
        attempts = 0u32,
        waited_ms = tracing::field::Empty,
        outcome = tracing::field::Empty,
        fencing_token = tracing::field::Empty,
    );
    // A grant counts once it is replicated as the options ask (at once without a policy).
    let outcome = async {
        match granted(on, contender, deadline).await {
            Ok(lease) => lease.replicated().await,
            Err(err) => Err(err),
        }
    }
    .instrument(span.clone())
    .await;
    let named = name.as_deref().unwrap_or_default();
    crate::telemetry::acquired(kind, named, started.elapsed(), &outcome);
    span.record("waited_ms", started.elapsed().as_millis() as u64);
    match &outcome {
        Ok(lease) => {
            span.record("outcome", "acquired");
            span.record("fencing_token", lease.fencing_token().get());
        }
        Err(Error::WaitTimeout { .. }) => {
            span.record("outcome", "timeout");
        }
        Err(_) => {
            span.record("outcome", "error");
        }
    }
    outcome
}

/// One attempt of the acquire loop is made for a lock of `kind`: counted in the metrics and
/// on the acquire span.
fn attempting(kind: crate::telemetry::Kind, name: &str, attempts: &mut u32) {
    crate::telemetry::attempted(kind, name);
    *attempts += 1;
    tracing::Span::current().record("attempts", *attempts);
}

/// The acquire loop itself: waits until `contender` is granted the lock or `deadline`.
async fn granted<C: Contender>(
    on: WaitOn<'_>,
    mut contender: C,
    deadline: Option<Instant>,
) -> Result<Lease> {
    let started = Instant::now();
    let mut attempts = 0u32;
    let over = |deadline: Option<Instant>| deadline.is_some_and(|d| Instant::now() >= d);
    let timeout = |name: &str, retry_after| Error::WaitTimeout {
        name: name.to_string(),
        waited: started.elapsed(),
        retry_after,
    };
    let local_turns = contender.local_turns();
    // A subscription that other waiters of this process keep live, or that lingers after
    // this process's last wait, is joined at once (no request): then listen from the very
    // first attempt.
    let mut own: Option<Subscription> = on.node.subscribe_live(contender.channel());
    let alone = match local_turns {
        Some(kind) => !on.local.contains(kind, contender.name()),
        None => own.is_none(),
    };
    // The first attempt's refusal, if it was heard while listening: wait for the wake-up
    // with that listener rather than ask again.
    let mut heard = None;
    let mut queue: Option<Arc<LocalQueue>> = None;
    // The turn, once this waiter has it.
    let mut early_turn = None;
    if alone {
        // Listen first, then look whether the subscription is live: a connection lost in
        // between wakes this listener.
        let listener = own
            .as_ref()
            .map(Subscription::listen)
            .filter(|_| own.as_ref().is_some_and(Subscription::is_live));
        // Listening, with time left to wait: the first attempt may get in line — in its turn
        // only, since an attempt in line asks with the line's owner token (a waiter of this
        // process that came meanwhile would otherwise ask with it at the same time).
        let may_wait = listener.is_some() && !over(deadline);
        if let (true, Some(kind)) = (may_wait, local_turns) {
            let local = on.local.get(kind, contender.name());
            early_turn = local.try_turn();
            queue = Some(local);
        }
        let line = match (may_wait, local_turns) {
            (true, Some(_)) if early_turn.is_some() => Some(Line {
                mark: false,
                local: queue.as_deref(),
            }),
            (true, Some(_)) => None,
            (true, None) => Some(Line {
                mark: false,
                local: None,
            }),
            (false, _) => None,
        };
        let in_line = line.is_some();
        attempting(contender.kind(), contender.name(), &mut attempts);
        match contender.first(deadline, line).await? {
            Try::Won(lease) => return Ok(lease),
            Try::Held(retry_after) if over(deadline) => {
                let name = contender.name().to_string();
                drop(early_turn);
                leave_if_last(queue).await;
                contender.give_up().await;
                return Err(timeout(&name, retry_after));
            }
            Try::Held(retry_after) if in_line => {
                heard = listener.map(|listener| (listener, retry_after));
            }
            Try::Held(_) => {}
        }
    }
    // Waiters of this lock in this process take turns; only the one whose turn it is talks
    // to Redis.
    let queue = queue.or_else(|| local_turns.map(|kind| on.local.get(kind, contender.name())));
    let turn = match (&queue, early_turn) {
        (None, _) => None,
        (Some(_), Some(turn)) => Some(turn),
        (Some(queue), None) => queue.take_turn(deadline).await,
    };
    if queue.is_some() && turn.is_none() {
        // A zero budget, or a turn that did not come in time: one attempt, never none.
        drop(turn);
        attempting(contender.kind(), contender.name(), &mut attempts);
        return match contender.first(deadline, None).await? {
            Try::Won(lease) => Ok(lease),
            Try::Held(retry_after) => {
                let name = contender.name().to_string();
                leave_if_last(queue).await;
                contender.give_up().await;
                Err(timeout(&name, retry_after))
            }
        };
    }
    let backoff = Backoff::new(on.options.get_retry_delay());
    loop {
        if let Some((mut listener, retry_after)) = heard.take() {
            let bounds = Bounds {
                live: own.as_ref().is_some_and(Subscription::is_live),
                retry_after,
                refresh: contender.refresh(),
                deadline,
            };
            let limit = bounds.sleep_limit(&backoff, Instant::now());
            let handed = pause(Some(&mut listener), contender.address(), limit).await;
            if let Some(handed) = handed
                && let Some(lease) = take_handover(&mut contender, &queue, &handed).await
            {
                return Ok(lease);
            }
            continue;
        }
        let confirm_within = confirm_limit(deadline, contender.refresh());
        let channel = contender.channel();
        let subscription = match &queue {
            // Kept while any waiter of this process queues.
            Some(queue) => queue.subscribe(on.node, channel, confirm_within).await,
            None => {
                // A contender whose attempts may be refused by several locks (a
                // MultiLock's) listens on the channel of the one that refused it last.
                if own.as_ref().is_some_and(|own| own.channel() != channel) {
                    own = None;
                }
                match &mut own {
                    Some(own) => &*own,
                    none => &*none.insert(on.node.subscribe(channel, confirm_within).await),
                }
            }
        };
        // Listen before the attempt, so a release right after it still wakes us.
        let mut listener = subscription.listen();
        let live = subscription.is_live();
        // A guard of this process holds the lock with its key marked: its release will wake
        // us, so there is nothing to ask Redis until then (but a wait that is over still
        // asks once, below).
        if let Some(left) = queue
            .as_ref()
            .and_then(|queue| queue.local_holder_lease())
            .filter(|left| live && !over(deadline) && !left.is_zero())
        {
            let bounds = Bounds {
                live,
                retry_after: Some(left),
                refresh: contender.refresh(),
                deadline,
            };
            let limit = bounds.sleep_limit(&backoff, Instant::now());
            // Any wake-up counts here: the local holder's guard wakes this waiter when it is
            // done (`LocalHolder`), whoever its release hands the lock to or wakes.
            pause(Some(&mut listener), None, limit).await;
            continue;
        }
        // Waiters of this process queued behind this one: mark a grant at once.
        let mark = queue
            .as_ref()
            .is_some_and(|queue| Arc::strong_count(queue) > 1);
        let line = Line {
            mark,
            local: queue.as_deref(),
        };
        attempting(contender.kind(), contender.name(), &mut attempts);
        let retry_after = match contender.attempt(line, deadline).await? {
            Try::Won(lease) => return Ok(noted(&queue, mark, lease)),
            Try::Held(retry_after) => retry_after,
        };
        if over(deadline) {
            let name = contender.name().to_string();
            drop(turn);
            leave_if_last(queue).await;
            contender.give_up().await;
            return Err(timeout(&name, retry_after));
        }
        let bounds = Bounds {
            live,
            retry_after,
            refresh: contender.refresh(),
            deadline,
        };
        let limit = bounds.sleep_limit(&backoff, Instant::now());
        let handed = pause(Some(&mut listener), contender.address(), limit).await;
        if let Some(handed) = handed
            && let Some(lease) = take_handover(&mut contender, &queue, &handed).await
        {
            return Ok(lease);
        }
    }
}

/// A grant, with a note for the waiters of this process queued behind it when its key is
/// marked for them (its release then wakes them, so they need not ask Redis meanwhile).
fn noted(queue: &Option<Arc<LocalQueue>>, marked: bool, mut lease: Lease) -> Lease {
    if let Some(queue) = queue.as_ref().filter(|_| marked) {
        let note = LocalHolder::new(queue, lease.state().clone());
        lease.attach(Box::new(note));
    }
    lease
}

/// The lease a release handed to this waiter's line, if the contender takes it. A handed-over
/// key is always marked, so waiters of this process still queued behind it are noted.
async fn take_handover<C: Contender>(
    contender: &mut C,
    queue: &Option<Arc<LocalQueue>>,
    handed: &HandedOver,
) -> Option<Lease> {
    let line = Line {
        mark: true,
        local: queue.as_deref(),
    };
    let lease = contender.take_handed(line, handed).await?;
    let others = queue
        .as_ref()
        .is_some_and(|queue| Arc::strong_count(queue) > 1);
    Some(noted(queue, others, lease))
}

/// A wait that ran out of time: if no other waiter of this process waits for the lock, its
/// place in the lock's queue is given up now (so the caller hears of the timeout after it);
/// otherwise the others keep it, and the last of them gives it up.
async fn leave_if_last(queue: Option<Arc<LocalQueue>>) {
    if let Some(queue) = queue
        && Arc::strong_count(&queue) == 1
    {
        queue.leave().await;
    }
}

#[cfg(test)]
mod tests {
    use crate::node::undefined_calls;

    #[test]
    fn leave_carries_the_preludes_it_calls() {
        let missing = undefined_calls(&super::LEAVE, &super::PRELUDES, &[]);
        assert_eq!(missing, Vec::<String>::new());
    }
}
