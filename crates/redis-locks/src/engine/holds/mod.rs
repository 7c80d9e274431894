//! The hash-of-holds engine: the locks kept in a hash of holds (`holds.lua`), written once for
//! [`RwLock`](crate::RwLock) and [`ReentrantMutex`](crate::ReentrantMutex): one hold per
//! guard, each with its own lease on the server clock, an owner id for re-entry, and waiters
//! that each keep their own place in the queue (as a `FairMutex`'s do).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::Client;
use crate::engine::first::{self, Busy, First, Numbering, Plain};
use crate::error::{Error, LostReason, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{
    Hold, HoldFuture, Holder, Lease, OwedRelease, Released, extend_replicated_by, lease_millis,
};
use crate::node::quorum::Running;
use crate::node::{LockScript, Node, Registered, ScriptCall};
use crate::options::LockOptions;
use crate::owner::OwnerId;
use crate::state::{HoldInfo, HoldMode, HoldsState};
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{
    Answer, Asker, LOCK_LUA, Placed, QUEUE_LUA, acquire, answer_in_time, run_on_line, try_once,
};

/// The hash prelude: `holds_plain`, `holds_not_ours`, `holds_other_kind`, `holds_number`,
/// `hold_value`, `holds_read`, `hold_write`, `holds_find`, `holds_mark_waiting`, `holds_soonest`,
/// `holds_expire_at`, `holds_expire`, `wake_front`.
const HOLDS_LUA: &str = include_str!("holds.lua");

/// Read or write hold: `{1, token}`, `{0, ms | -2 | -3}`.
pub(crate) static ACQUIRE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        HOLDS_LUA,
        include_str!("acquire.lua"),
    ])
});
inventory::submit!(Registered(|| &ACQUIRE));

/// Release one hold by its id (and give up a place): `{1, left}`, `{0, 0}`.
pub(crate) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("release_first.lua"),
        LOCK_LUA,
        QUEUE_LUA,
        HOLDS_LUA,
        include_str!("release.lua"),
    ])
});
inventory::submit!(Registered(|| &RELEASE));

/// Set one hold's lease: `1`, `0`.
pub(crate) static EXTEND: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, HOLDS_LUA, include_str!("extend.lua")]));
inventory::submit!(Registered(|| &EXTEND));

/// Turn a write hold into a read hold: `1`, `0`, `-1`.
pub(crate) static DOWNGRADE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        LOCK_LUA,
        QUEUE_LUA,
        HOLDS_LUA,
        include_str!("downgrade.lua"),
    ])
});
inventory::submit!(Registered(|| &DOWNGRADE));

/// The state: `{kind, counter, waiting_readers, waiting_writers, (id, mode, owner, ms, token)...}`.
pub(crate) static INSPECT: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[FENCE_LUA, LOCK_LUA, HOLDS_LUA, include_str!("inspect.lua")])
});
inventory::submit!(Registered(|| &INSPECT));

/// What a name is in use as, stored in the hash (`kind`): two kinds never share a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    RwLock,
    Reentrant,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::RwLock => "rwlock",
            Kind::Reentrant => "reentrant",
        }
    }
}

/// The mode letter of the scripts and of a waiter's id in the queue.
fn letter(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Read => "r",
        HoldMode::Write => "w",
    }
}

/// How a hold is released and extended: by its hold id, which only its guard knows.
struct HoldsHold {
    node: Node,
    keys: Arc<LockKeys>,
    kind: Kind,
    /// How many releases of this handle's holds run in the background (guards dropped,
    /// acquisitions cancelled): an upgrade refused while one runs is asked again after it
    /// (see [`HoldsLock::acquire`]).
    background: watch::Sender<usize>,
    /// Until when the handle's first attempts at a read hold go straight to the script.
    busy: Busy,
}

impl HoldsHold {
    /// What the extend script's reply says: `1` extended, `0` the hold is gone.
    fn extended(&self, reply: i64) -> Result<()> {
        match reply {
            1 => Ok(()),
            0 => Err(self.gone()),
            other => Err(Error::UnexpectedReply {
                phase: Phase::Extend,
                detail: other.to_string(),
            }),
        }
    }

    fn gone(&self) -> Error {
        Error::NotHeld {
            name: self.keys.name().to_string(),
            reason: LostReason::Expired,
        }
    }
}

impl Hold for HoldsHold {
    fn background(&self) -> Option<Box<dyn Send>> {
        Some(Box::new(Running::new(self.background.clone())))
    }

    fn keys_on(&self) -> Option<(&crate::node::Node, &crate::key::LockKeys)> {
        Some((&self.node, &self.keys))
    }

    fn kind(&self) -> crate::telemetry::Kind {
        match self.kind {
            Kind::RwLock => crate::telemetry::Kind::RwLock,
            Kind::Reentrant => crate::telemetry::Kind::ReentrantMutex,
        }
    }

    fn name(&self) -> &str {
        self.keys.name()
    }

    fn taken_from<'a>(&'a self, holder: &'a Holder) -> HoldFuture<'a, bool> {
        Box::pin(async move {
            let state = inspect(&self.node, &self.keys).await?;
            Ok(state.holds.iter().any(|hold| {
                hold.owner != holder.owner.as_str()
                    && (hold.mode == HoldMode::Write || holder.mode == HoldMode::Write)
            }))
        })
    }

    fn holds_of<'a>(&'a self, holder: &'a Holder) -> HoldFuture<'a, u64> {
        Box::pin(async move {
            let state = inspect(&self.node, &self.keys).await?;
            let holds = state
                .holds
                .iter()
                .filter(|hold| hold.mode == holder.mode && hold.owner == holder.owner.as_str());
            Ok(holds.count() as u64)
        })
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let reply: (i64, u64) = run_on_line(
                &self.node,
                Phase::Release,
                &RELEASE,
                &self.keys,
                owner.as_str(),
            )
            .await?;
            match reply {
                (1, left) => Ok(Released::leaving(left)),
                (0, _) => Err(self.gone()),
                (code, left) => Err(Error::UnexpectedReply {
                    phase: Phase::Release,
                    detail: format!("[{code}, {left}]"),
                }),
            }
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let args = extend_args(owner, lease)?;
            let args = args.each_ref().map(String::as_str);
            let reply: i64 = self
                .node
                .run_script(Phase::Extend, &EXTEND, &[self.keys.lock()], &args)
                .await?;
            self.extended(reply)
        })
    }

    fn extend_on(&self) -> Option<(&Node, &str)> {
        Some((&self.node, self.keys.lock()))
    }

    fn extend_call(&self, owner: &OwnerToken, lease: Duration) -> Result<ScriptCall<'_>> {
        Ok(ScriptCall {
            script: &EXTEND,
            keys: vec![self.keys.lock()],
            args: extend_args(owner, lease)?.into(),
        })
    }

    fn extend_reply(&self, reply: i64) -> Result<()> {
        self.extended(reply)
    }

    fn extend_replicated<'a>(
        &'a self,
        owner: &'a OwnerToken,
        lease: Duration,
        replication: &'a crate::node::Replication,
    ) -> HoldFuture<'a, u32> {
        Box::pin(async move {
            let args = extend_args(owner, lease)?;
            let args = args.each_ref().map(String::as_str);
            extend_replicated_by(
                &self.node,
                &EXTEND,
                self.keys.lock(),
                &args,
                replication,
                self.keys.name(),
                |reply| self.extended(reply),
            )
            .await
        })
    }
}

/// `extend.lua`'s ARGV: the hold id and `lease` in milliseconds.
fn extend_args(hold: &OwnerToken, lease: Duration) -> Result<[String; 2]> {
    Ok([hold.as_str().to_string(), lease_millis(lease)?.to_string()])
}

/// A lock kept in a hash of holds, acting for one owner id.
#[derive(Clone)]
pub(crate) struct HoldsLock {
    client: Client,
    keys: Arc<LockKeys>,
    hold: Arc<HoldsHold>,
    options: LockOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
    owner: OwnerId,
    kind: Kind,
}

impl HoldsLock {
    pub(crate) fn new(
        client: Client,
        name: &str,
        options: LockOptions,
        kind: Kind,
    ) -> Result<HoldsLock> {
        options.check_on(client.options())?;
        let keys = Arc::new(client.keys(name)?);
        Ok(HoldsLock {
            hold: Arc::new(HoldsHold {
                node: client.node().clone(),
                keys: keys.clone(),
                kind,
                background: watch::Sender::new(0),
                busy: Busy::default(),
            }),
            lease_ms: lease_millis(options.get_lease_options().get_lease())?
                .to_string()
                .into(),
            client,
            keys,
            options,
            owner: OwnerId::random(),
            kind,
        })
    }

    pub(crate) fn name(&self) -> &str {
        self.keys.name()
    }

    pub(crate) fn owner(&self) -> &OwnerId {
        &self.owner
    }

    pub(crate) fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(crate) fn set_owner(&mut self, owner: OwnerId) {
        self.owner = owner;
    }

    /// The release a new hold owes from its request on: its hold id is a fresh owner token
    /// addressed to this lock's client, so that the release that lets it in wakes it on that
    /// client's own channel.
    /// Whose it is (this handle's owner id, in `mode`) goes with it, so that a renewal that
    /// finds the hold run out can tell whether another owner took the lock.
    fn owed(&self, mode: HoldMode) -> OwedRelease {
        OwedRelease::addressed(self.hold.clone(), self.client.node().address()).held_by(Holder {
            owner: self.owner.clone(),
            mode,
        })
    }

    /// An acquisition in `mode`: an `RwLock`'s read hold may be taken first as a plain key
    /// (see [`first`](crate::engine::first) and [`Plain::may_try`]).
    fn asking(&self, mode: HoldMode) -> Asking<'_> {
        Asking {
            lock: self,
            mode,
            first: AtomicBool::new(
                mode == HoldMode::Read && self.kind == Kind::RwLock && self.plain().may_try(),
            ),
        }
    }

    /// What a first attempt at a read hold needs.
    fn plain(&self) -> Plain<'_> {
        Plain {
            node: self.client.node(),
            keys: &self.keys,
            hold: &*self.hold,
            lease_ms: &self.lease_ms,
            lease: self.options.get_lease_options(),
            busy: &self.hold.busy,
        }
    }

    /// One attempt without waiting.
    pub(crate) async fn try_acquire(&self, mode: HoldMode) -> Result<Lease> {
        let asking = self.asking(mode);
        self.upgrade_settled(None, || try_once(&asking, self.owed(mode)))
            .await
    }

    /// Waits in line until `deadline` (`None`: as long as it takes).
    pub(crate) async fn acquire(&self, mode: HoldMode, deadline: Option<Instant>) -> Result<Lease> {
        let asking = self.asking(mode);
        self.upgrade_settled(deadline, || {
            // One hold id for the whole wait: the waiter's place in the queue (under its
            // mode letter), and its hold once granted; dropping it gives the place up.
            let owed = self.owed(mode);
            let address = format!("{}{}", letter(mode), owed.owner().as_str());
            let on = self.client.wait_on(self.options.get_wait_options());
            acquire(on, Placed::new(&asking, owed, address), deadline)
        })
        .await
    }

    /// Runs `attempt`; an upgrade it was refused while releases of this handle's holds were
    /// already running in the background when it was sent (a read guard dropped, a `read()`
    /// cancelled: holds the caller can no longer see) is asked again once they are done (by
    /// `deadline` at the latest), so the caller hears of an upgrade only while it holds a
    /// read guard it can see. Each background release is bounded by the response timeout.
    async fn upgrade_settled<F, Fut>(&self, deadline: Option<Instant>, attempt: F) -> Result<Lease>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Lease>>,
    {
        let pending = *self.hold.background.borrow() > 0;
        match attempt().await {
            Err(err @ Error::Upgrade { .. }) if pending => {
                let mut running = self.hold.background.subscribe();
                // The sender lives in `self.hold`: the channel cannot close while this waits.
                let settled = running.wait_for(|running| *running == 0);
                match deadline {
                    Some(deadline) => {
                        if tokio::time::timeout_at(deadline, settled).await.is_err() {
                            return Err(err);
                        }
                    }
                    None => drop(settled.await),
                }
                attempt().await
            }
            outcome => outcome,
        }
    }

    /// Turns the write hold `hold` into a read hold of the same owner, in one step.
    pub(crate) async fn downgrade(&self, hold: &OwnerToken) -> Result<()> {
        let node = self.client.node();
        let reply: i64 =
            run_on_line(node, Phase::Release, &DOWNGRADE, &self.keys, hold.as_str()).await?;
        match reply {
            1 => Ok(()),
            0 => Err(self.hold.gone()),
            other => Err(Error::UnexpectedReply {
                phase: Phase::Release,
                detail: other.to_string(),
            }),
        }
    }

    /// Reads the holds, the counter and the waiters in one step.
    pub(crate) async fn state(&self) -> Result<HoldsState> {
        inspect(self.client.node(), &self.keys).await
    }
}

/// Reads the state of a lock kept in a hash of holds, whichever kind (`None` holds when free).
async fn inspect(node: &Node, keys: &LockKeys) -> Result<HoldsState> {
    let reply: Vec<String> = node
        .run_script(
            Phase::Inspect,
            &INSPECT,
            &[keys.lock(), keys.fence(), keys.line().places()],
            &[],
        )
        .await?;
    let bad = || Error::UnexpectedReply {
        phase: Phase::Inspect,
        detail: format!("{reply:?}"),
    };
    let number = |text: &str| text.parse::<u64>().map_err(|_| bad());
    let [kind, counter, readers, writers, rest @ ..] = reply.as_slice() else {
        return Err(bad());
    };
    if rest.len() % 5 != 0 {
        return Err(bad());
    }
    let mut holds = rest
        .chunks_exact(5)
        .map(|hold| {
            Ok(HoldInfo {
                mode: if hold[1] == "w" {
                    HoldMode::Write
                } else {
                    HoldMode::Read
                },
                owner: hold[2].clone(),
                lease_remaining: Duration::from_millis(number(&hold[3])?),
                // 0: a read hold taken as a plain key, numbered by the client (holds.lua).
                fencing_token: Some(number(&hold[4])?)
                    .filter(|token| *token > 0)
                    .map(FencingToken::new),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    holds.sort_by_key(|hold| (hold.mode != HoldMode::Write, hold.fencing_token));
    let counter = number(counter)?;
    Ok(HoldsState {
        kind: (!kind.is_empty()).then(|| kind.clone()),
        holds,
        fencing_counter: (counter > 0).then_some(FencingToken::new(counter)),
        waiting_readers: number(readers)?,
        waiting_writers: number(writers)?,
    })
}

/// One acquisition's asking: the lock and the mode.
struct Asking<'a> {
    lock: &'a HoldsLock,
    mode: HoldMode,
    /// The first attempt is still to be made outside the script ([`first`]).
    first: AtomicBool,
}

impl Asker for Asking<'_> {
    fn kind(&self) -> crate::telemetry::Kind {
        self.lock.hold.kind()
    }

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn channel(&self) -> &str {
        self.lock.keys.wake_channel()
    }

    fn place_lease(&self) -> Duration {
        self.lock.options.get_place_lease()
    }

    fn lease(&self, owed: OwedRelease, token: FencingToken, sent_at: Instant) -> Lease {
        let options = self.lock.options.get_lease_options();
        Lease::new(owed, token, sent_at, options, self.lock.client.renewals())
    }

    /// One attempt: the first one of a read hold outside the script where it may be
    /// ([`first`]), else the script (see [`answer_in_time`] for late grants).
    async fn ask(
        &self,
        owed: &OwedRelease,
        place_lease: Duration,
        deadline: Option<Instant>,
        _nonce: u64,
    ) -> Result<Answer> {
        let lock = self.lock;
        // With a read hold the first attempt took and left the script to number.
        let value = || format!("{} r {}", owed.owner().as_str(), lock.owner.as_str());
        let taken = match first::once(&self.first, &lock.plain(), owed, value).await? {
            First::Won(answer) => return Ok(answer),
            First::Number(epoch) => Some(epoch),
            First::Script => None,
        };
        let keys = &lock.keys;
        let place = place_lease.as_millis().to_string();
        let line = keys.line();
        let key_list = [
            keys.lock(),
            keys.fence(),
            line.queue(),
            line.places(),
            line.tickets(),
            keys.epoch(),
        ];
        let numbering = Numbering::new(taken);
        let args = [
            lock.kind.as_str(),
            letter(self.mode),
            owed.owner().as_str(),
            lock.owner.as_str(),
            &lock.lease_ms,
            &place,
            keys.wake_channel(),
            numbering.name(),
        ];
        let mut calls = 0;
        let answer = answer_in_time(lock.options.get_lease_options(), deadline, || {
            calls += 1;
            let (naming, sent_keys, sent_args) = numbering.call(calls, key_list.len(), args.len());
            let (keys, args) = (&key_list[..sent_keys], &args[..sent_args]);
            async move {
                let reply: (i64, i64) = lock
                    .client
                    .node()
                    .run_script_naming(Phase::Acquire, naming, &ACQUIRE, keys, args)
                    .await?;
                if reply == (0, -3) {
                    // The upgrade refusal wrote nothing: nothing is owed.
                    return Err(Error::Upgrade {
                        name: lock.name().to_string(),
                        owner: lock.owner.to_string(),
                    });
                }
                Ok(reply)
            }
        })
        .await;
        numbering.settled(&lock.plain(), owed, answer).await
    }
}

#[cfg(test)]
mod tests {
    use crate::node::undefined_calls;
    use crate::wait::PRELUDES;

    #[test]
    fn every_script_carries_the_preludes_it_calls() {
        let preludes = [PRELUDES.as_slice(), &[super::HOLDS_LUA]].concat();
        // `holds_find` looks at the queue's types only when given the queue's keys, which
        // extend is not.
        let scripts = [
            ("acquire", &*super::ACQUIRE, &[][..]),
            ("release", &*super::RELEASE, &[]),
            ("extend", &*super::EXTEND, &["queue_wrong_type"]),
            ("downgrade", &*super::DOWNGRADE, &[]),
            ("inspect", &*super::INSPECT, &[]),
        ];
        for (name, script, never) in scripts {
            assert_eq!(
                undefined_calls(script, &preludes, never),
                Vec::<String>::new(),
                "{name}"
            );
        }
    }
}
