//! One acquire attempt of a [`StringLock`], asked in one of two ways: the fast way, a pipelined
//! `SET NX PX` + `INCR` that costs Redis no script, or the acquire script, which waiters use
//! because it also marks a held lock so that its release hands the lock over to them (or
//! wakes them), and registers their line's owner token for that.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::StringLock;
use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Lease, OwedRelease};
use crate::node::{LockScript, NamingTurn, Node, Registered};
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{LOCK_LUA, QUEUE_LUA, Try, grant_reply, in_time};

/// `SET NX PX` plus the fencing counter, or the waiter's mark on a held lock: `{1, token}` or
/// `{0, pttl}`.
pub(super) static ACQUIRE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, include_str!("acquire.lua")])
});
inventory::submit!(Registered(|| &ACQUIRE));

/// The acquire script with its common case for a Redlock's node first (`acquire_first.lua`:
/// a free lock costs no prelude).
pub(super) static ACQUIRE_ON_NODE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("acquire_first.lua"),
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("acquire.lua"),
    ])
});
inventory::submit!(Registered(|| &ACQUIRE_ON_NODE));

/// Counters below this were never seeded from the server clock (see `acquire.lua`).
pub(crate) const SEEDED: i64 = 1_000_000_000_000_000;

/// How an attempt asks Redis.
pub(crate) enum Ask {
    /// The pipeline `SET NX PX` + `INCR` (+ `PTTL` and `GET` with `pttl`, to say how long
    /// a refusal lasts, or that the name is in use as another primitive). Used by the first attempt of a `lock` and by every try-once call.
    Fast { pttl: bool },
    /// The acquire script, which marks a held lock so that its release publishes a wake-up,
    /// and with `waiter` gives this process's waiters that place in the lock's queue,
    /// registering `owner` (the token they all ask with,
    /// [`LocalQueue::asking`](crate::wait::LocalQueue::asking)) and this attempt's `nonce`
    /// for a release to hand the lock to. Used by waiters, after they listen on the wake
    /// channel. With `mark`, a granted lock is marked at once, for the waiters of this process
    /// queued behind this one.
    Waiting {
        mark: bool,
        waiter: Arc<str>,
        owner: OwnerToken,
        nonce: u64,
    },
}

/// What the script writes as the fencing counter's epoch on a grant (`acquire.lua`,
/// `KEYS[3]` and `ARGV[4]`; the semaphore's, `KEYS[6]` and `ARGV[7]`).
pub(crate) enum Epoch {
    /// Nothing: the waiting path, or a grant asked again after it came back late.
    Keep,
    /// The name the connection had in the fast attempt's reply.
    Named(std::sync::Arc<str>),
    /// The connection had no name (it is new): give it a fresh one in the same pipeline,
    /// in this client's one naming turn.
    Fresh(NamingTurn),
}

/// How every connection name this crate gives starts; the rest is 128 random bits.
const NAME_PREFIX: &str = "redis-locks:";

/// The name of the connection a fast attempt ran on, as `CLIENT GETNAME` said.
enum Name<'a> {
    /// None: a new connection.
    None,
    /// One this crate gave it.
    Ours(&'a [u8]),
    /// One this crate did not give it (a proxy that names connections, say).
    Foreign,
}

/// What the vouching replies of a fast attempt say of the fencing counter it incremented.
pub(crate) enum Vouch {
    /// The connection's name is among the counter's epochs: a script brought the counter
    /// up to the clock on this very connection, so its `INCR` can be trusted.
    Vouched,
    /// Not vouched for: the script must number the grant, writing this epoch.
    Not(Epoch),
}

impl Vouch {
    /// The epoch a script call numbering the grant writes: none where the counter is
    /// vouched for (it is asked only because the counter was never seeded, or the grant
    /// came back late).
    pub(crate) fn epoch(self) -> Epoch {
        match self {
            Vouch::Vouched => Epoch::Keep,
            Vouch::Not(epoch) => epoch,
        }
    }
}

/// Adds the commands that vouch for the counter on this connection to `pipe`: the
/// `ZSCORE` of the name the client believes its connection has (`believed`) in the
/// counter's epochs, and `CLIENT GETNAME` (see `acquire.lua`, `KEYS[3]`).
fn vouching<'p>(
    pipe: &'p mut redis::Pipeline,
    keys: &LockKeys,
    believed: Option<&str>,
) -> &'p mut redis::Pipeline {
    pipe.cmd("ZSCORE")
        .arg(keys.epoch())
        .arg(believed.unwrap_or_default())
        .cmd("CLIENT")
        .arg("GETNAME")
}

/// Reads the replies of [`vouching`]'s two commands (`epoch`, `name`) on `node`; when they do
/// not vouch, says which epoch the script is to write, and takes `node`'s naming turn for a
/// connection without a name.
fn vouch(node: &Node, epoch: &Value, name: &Value, believed: Option<&str>) -> Vouch {
    // Only a name this crate gave the connection vouches for anything: one the application
    // chose may be shared by other connections and servers.
    let name = match name {
        Value::Nil => Name::None,
        Value::BulkString(name) if name.is_empty() => Name::None,
        Value::BulkString(name) if name.starts_with(NAME_PREFIX.as_bytes()) => Name::Ours(name),
        _ => Name::Foreign,
    };
    let vouched = !matches!(epoch, Value::Nil | Value::ServerError(_))
        && matches!((&name, believed), (Name::Ours(name), Some(believed)) if *name == believed.as_bytes());
    if vouched {
        return Vouch::Vouched;
    }
    Vouch::Not(match name {
        Name::Ours(name) => {
            let name: Arc<str> = String::from_utf8_lossy(name).into();
            node.set_connection_name(name.clone());
            Epoch::Named(name)
        }
        // One naming at a time per client (the others would only rename the connection under
        // each other), and none where names do not stick.
        Name::None => match node.naming_turn() {
            Some(turn) => Epoch::Fresh(turn),
            None => Epoch::Keep,
        },
        // Leave the application's name alone; the script numbers every grant.
        Name::Foreign => Epoch::Keep,
    })
}

/// The connection name a script call gives and records as the counter's epoch (`ARGV[4]`
/// of `acquire.lua`, `ARGV[7]` of the semaphore's): a fresh one in a naming turn, the
/// connection's own, or none.
pub(crate) fn epoch_name(epoch: &Epoch) -> (Option<String>, Option<Arc<str>>) {
    match epoch {
        Epoch::Fresh(_turn) => (
            Some(format!("{NAME_PREFIX}{}", OwnerToken::random().as_str())),
            None,
        ),
        Epoch::Named(name) => (None, Some(name.clone())),
        Epoch::Keep => (None, None),
    }
}

impl StringLock {
    /// Asks Redis once for the lock, with a fresh owner token (a waiter: with its line's).
    /// `deadline` is the caller's wait budget: a grant that comes back after its lease is
    /// asked again (by owner token) only within it, and only so often (see [`in_time`]).
    pub(crate) async fn attempt(&self, ask: Ask, deadline: Option<Instant>) -> Result<Try> {
        match ask {
            Ask::Fast { pttl } => {
                let owed = OwedRelease::new(self.hold.clone());
                self.ask_fast(owed, pttl, deadline).await
            }
            Ask::Waiting {
                mark,
                waiter,
                owner,
                nonce,
            } => {
                let owed = OwedRelease::of_line(self.hold.clone(), owner);
                let script = Script {
                    waiter: Some(waiter),
                    nonce: nonce.to_string(),
                    ..Script::new(mark)
                };
                self.ask_script(owed, script, deadline).await
            }
        }
    }

    /// The lease of a grant whose request was sent at `sent_at`.
    fn lease(&self, mut owed: OwedRelease, token: u64, sent_at: Instant) -> Lease {
        owed.arm();
        let token = FencingToken::new(token);
        let options = self.options.get_lease_options();
        Lease::new(owed, token, sent_at, options, self.client.renewals())
    }

    /// `SET NX PX` + `INCR` of the fencing counter in one round trip, without a script, with
    /// the counter's epochs and the connection's name to vouch for the counter.
    ///
    /// The two commands are not one atomic step, yet the token is as good as the script's:
    /// a grant is kept only if its reply came back within the lease, and then the `INCR`
    /// ran while the lock key still held this owner (the key could not have expired, and
    /// only this owner deletes it) — so nobody else took the lock and a token in between.
    /// And the counter is trusted only when the connection the pipeline ran on is named
    /// among its epochs (`{K}:epoch`): the script brought the counter up to the server clock
    /// on this very connection, so this server process has held it since, and it did not
    /// come back old from a snapshot, an AOF or a replica (a connection name survives none
    /// of those). A late grant, or a counter not vouched for, is numbered by the script
    /// instead. A refused attempt advances the counter too; tokens only need to grow from
    /// one holder to the next.
    async fn ask_fast(
        &self,
        owed: OwedRelease,
        with_pttl: bool,
        deadline: Option<Instant>,
    ) -> Result<Try> {
        let (lock, fence) = (self.keys.lock(), self.keys.fence());
        let node = self.client.node();
        if !node.names_its_connection() {
            // Nothing could vouch for the counter's `INCR` (a cluster: one connection per
            // shard): the script numbers the grant, in one round trip instead of two.
            return self.ask_script(owed, Script::new(false), deadline).await;
        }
        let sent_at = Instant::now();
        // A connection error, or replies of another shape, leave the outcome open: `owed`
        // drops armed and releases by owner token in the background.
        let also = if with_pttl {
            Also::Lease
        } else {
            Also::Nothing
        };
        let first = ask_first(
            node,
            &self.keys,
            owed.owner().as_str(),
            &self.lease_ms,
            also,
        )
        .await?;
        match (&first.set, &first.counter) {
            (Value::Okay, Value::Int(token)) => {
                let vouch = first.vouch(node);
                let late = self.options.get_lease_options().is_late(sent_at);
                if late || !matches!(vouch, Vouch::Vouched) || *token < SEEDED {
                    let script = Script {
                        epoch: vouch.epoch(),
                        late: u32::from(late),
                        ..Script::new(false)
                    };
                    return self.ask_script(owed, script, deadline).await;
                }
                Ok(Try::Won(self.lease(owed, token.unsigned_abs(), sent_at)))
            }
            (Value::Okay, Value::ServerError(err)) => {
                // Taken, but the counter is broken: give the lock back before saying so.
                let err = counter_error(fence, err);
                owed.give_back().await;
                Err(err)
            }
            // A key without expiry was not written by this library (perhaps not even a
            // string), and a key of another type or another primitive's plain key is that
            // primitive's (an `RwLock`'s hash or read hold): the script says what it is, as
            // the waiting path would.
            (Value::Nil, _) if matches!(first.pttl, Some(Value::Int(-1))) || first.other_type() => {
                self.ask_script(owed, Script::new(false), deadline).await
            }
            (Value::Nil, Value::ServerError(err)) => {
                // Refused, and the counter is broken too: the next holder could not be
                // numbered, so say so now rather than "held".
                owed.disarm();
                Err(counter_error(fence, err))
            }
            (Value::Nil, _) => {
                owed.disarm();
                Ok(Try::Held(first.lease_left()))
            }
            (Value::ServerError(err), _) => {
                // The SET was refused (a read-only replica, no permission, a key of another
                // type): nothing written.
                owed.disarm();
                Err(Error::from_redis(
                    Phase::Acquire,
                    &[lock],
                    err.clone().into(),
                ))
            }
            _ => Err(first.unexpected()),
        }
    }

    /// The acquire script: grants a free lock (or re-grants one this owner already holds),
    /// or marks the holder's key so that its release wakes the waiters. A grant that comes
    /// back after its lease is asked again, by owner token, as [`in_time`] says (counting the
    /// fast attempt's late grant, `script.late`); then it is given back and the call fails: a
    /// guard is never handed out already lost.
    async fn ask_script(
        &self,
        owed: OwedRelease,
        script: Script,
        deadline: Option<Instant>,
    ) -> Result<Try> {
        let node = self.client.node();
        let owner = owed.owner().clone();
        let placing = script.waiter.as_deref().map(|waiter| Placing {
            waiter,
            place_ms: &self.place_ms,
            channel: self.keys.wake_channel(),
            wake_only: false,
            nonce: Some(&script.nonce),
            ticket: "",
        });
        let ask = |late: u32| {
            // A grant asked again writes no epoch: the first call recorded it (or failed to).
            let epoch = if late == 0 {
                &script.epoch
            } else {
                &Epoch::Keep
            };
            let call = AcquireCall {
                keys: &self.keys,
                owner: owner.as_str(),
                lease_ms: &self.lease_ms,
                mark: script.mark,
                proposal: "",
                placing,
            };
            call.run(node, &ACQUIRE, epoch)
        };
        // The grant given back when it kept coming back late: by owner token, before the
        // error returns.
        let mut owed = Some(owed);
        let give_back = |_token, give_up: bool| {
            let owed = if give_up { owed.take() } else { None };
            async move {
                if let Some(owed) = owed {
                    owed.give_back().await;
                }
            }
        };
        let answer = in_time(
            self.options.get_lease_options(),
            deadline,
            script.late,
            ask,
            give_back,
        )
        .await;
        match (answer, owed) {
            (Ok(Try::Won((token, sent_at))), Some(owed)) => {
                Ok(Try::Won(self.lease(owed, token, sent_at)))
            }
            (Ok(Try::Held(retry_after)), owed) => {
                if let Some(owed) = owed {
                    owed.disarm();
                }
                Ok(Try::Held(retry_after))
            }
            // An error reply from the server: the script takes back what it wrote when
            // the counter is broken, but a command refused midway (NOPERM, OOM) may leave
            // a grant behind, and an earlier attempt may have taken the lock: release by
            // owner token either way (a release that finds nothing changes nothing).
            (
                Err(err @ (Error::WrongType { .. } | Error::Redis { .. } | Error::Auth { .. })),
                Some(owed),
            ) => {
                owed.give_back().await;
                Err(err)
            }
            // Anything else (a broken connection, an unreadable reply, a reply the script
            // never gives) leaves the outcome open: `owed` is dropped armed and releases by
            // owner token in the background. A grant late too often was given back already.
            (Err(err), _) => Err(err),
            (Ok(Try::Won(_)), None) => unreachable!("a grant in time is still owed"),
        }
    }
}

/// A waiter's place in the lock's queue, as one acquire call asks for it.
#[derive(Debug, Clone, Copy)]
struct Placing<'a> {
    /// The waiter id (`ARGV[5]`).
    waiter: &'a str,
    /// The place lease in milliseconds (`ARGV[6]`).
    place_ms: &'a str,
    /// The lock's wake channel (`ARGV[7]`).
    channel: &'a str,
    /// A free lock is taken even with others ahead (`ARGV[9]`, a Redlock's nodes).
    wake_only: bool,
    /// The attempt's nonce, registered for a handover (`ARGV[10]`, with the handover hash as
    /// `KEYS[7]`); none: no handover.
    nonce: Option<&'a str>,
    /// With `nonce`: the ticket a new place is numbered with (`ARGV[11]`); '' for the
    /// ticket counter's next.
    ticket: &'a str,
}

/// One call of `acquire.lua`: its KEYS and ARGV are written here only (see the script's
/// header).
struct AcquireCall<'a> {
    keys: &'a LockKeys,
    /// The owner token (`ARGV[1]`).
    owner: &'a str,
    /// The lease in milliseconds (`ARGV[2]`).
    lease_ms: &'a str,
    /// Mark a grant at once (`ARGV[3]`).
    mark: bool,
    /// A Redlock's proposed token (`ARGV[8]`); '' for the server clock.
    proposal: &'a str,
    /// A place in the lock's queue; none: outside the queue (the lock, the counter and its
    /// epochs only).
    placing: Option<Placing<'a>>,
}

impl AcquireCall<'_> {
    /// Runs the call on `node` with `script`, writing `epoch` as the counter's epoch on a
    /// grant (naming the connection first, in the same round trip, for [`Epoch::Fresh`]).
    async fn run(self, node: &Node, script: &LockScript, epoch: &Epoch) -> Result<Try<u64>> {
        let keys = self.keys;
        let line = keys.line();
        let all_keys = [
            keys.lock(),
            keys.fence(),
            keys.epoch(),
            line.queue(),
            line.places(),
            line.tickets(),
            line.handover(),
        ];
        let (fresh, named) = epoch_name(epoch);
        let name = fresh.as_deref().or(named.as_deref()).unwrap_or_default();
        let place = self.placing.unwrap_or(Placing {
            waiter: "",
            place_ms: "",
            channel: "",
            wake_only: false,
            nonce: None,
            ticket: "",
        });
        let all_args = [
            self.owner,
            self.lease_ms,
            if self.mark { "1" } else { "0" },
            name,
            place.waiter,
            place.place_ms,
            place.channel,
            self.proposal,
            if place.wake_only { "1" } else { "" },
            place.nonce.unwrap_or_default(),
            place.ticket,
        ];
        let (key_count, arg_count) = match self.placing {
            None => (3, 8),
            Some(Placing { nonce: None, .. }) => (6, 9),
            Some(Placing {
                nonce: Some(_),
                ticket: "",
                ..
            }) => (7, 10),
            Some(Placing { nonce: Some(_), .. }) => (7, 11),
        };
        let (keys, args) = (&all_keys[..key_count], &all_args[..arg_count]);
        let reply = node
            .run_script_naming(Phase::Acquire, fresh.as_deref(), script, keys, args)
            .await?;
        grant_reply(reply)
    }
}

/// A waiter's place in the lock's queue on a node, for [`acquire_on`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct InLine<'a> {
    /// The waiter id (this process's [`LocalQueue::id`](crate::wait::LocalQueue::id)).
    pub(crate) waiter: &'a str,
    /// The place lease in milliseconds.
    pub(crate) place_ms: &'a str,
    /// Mark a grant at once: waiters of this process queue behind this one.
    pub(crate) mark: bool,
    /// The place is for wake-ups only: a free lock is taken even with others ahead
    /// (`ARGV[9]`).
    pub(crate) wake_only: bool,
    /// The attempt's nonce, registered with the place and `owner` for a release to hand the
    /// lock to (`ARGV[10]`, with the handover hash as `KEYS[7]`); none: no handover.
    pub(crate) nonce: Option<&'a str>,
    /// With `nonce`: the ticket a new place is numbered with (`ARGV[11]`, the same on every
    /// node of a Redlock); '' for the node's ticket counter.
    pub(crate) ticket: &'a str,
}

/// Runs `acquire.lua` once on `node` for `owner` with a lease of `lease_ms` milliseconds, with
/// no epoch, the token seeded from `proposal` instead of the server clock (`ARGV[8]`):
/// outside any queue, or `in_line` (a refusal then keeps the waiter's place in the lock's
/// queue, and, unless the place is for wake-ups only, a free lock with others ahead in it is
/// refused, `Held(None)`; with a nonce, the refusal registers `owner` for a release to hand
/// the lock to).
///
/// # Errors
/// As the script's errors (see `acquire.lua`); [`Error::Connection`] when the node did not
/// answer (the outcome is then unknown: the caller releases by owner token).
pub(crate) async fn acquire_on(
    node: &Node,
    keys: &LockKeys,
    owner: &str,
    lease_ms: &str,
    proposal: &str,
    in_line: Option<InLine<'_>>,
) -> Result<Try<u64>> {
    acquire_on_as(node, keys, owner, lease_ms, proposal, in_line, Epoch::Keep).await
}

/// [`acquire_on`], writing `epoch` as the counter's epoch on a grant (and naming the
/// connection first, in the same round trip, for [`Epoch::Fresh`]).
async fn acquire_on_as(
    node: &Node,
    keys: &LockKeys,
    owner: &str,
    lease_ms: &str,
    proposal: &str,
    in_line: Option<InLine<'_>>,
    epoch: Epoch,
) -> Result<Try<u64>> {
    let placing = in_line.map(|line| Placing {
        waiter: line.waiter,
        place_ms: line.place_ms,
        channel: keys.wake_channel(),
        wake_only: line.wake_only,
        nonce: line.nonce,
        ticket: line.ticket,
    });
    let call = AcquireCall {
        keys,
        owner,
        lease_ms,
        mark: in_line.is_some_and(|line| line.mark),
        proposal,
        placing,
    };
    // The naming turn (with `Epoch::Fresh`) ends with `epoch`, the name recorded or refused.
    call.run(node, &ACQUIRE_ON_NODE, &epoch).await
}

/// Asks `node` for the lock in one pipeline, outside any queue (a Redlock's first attempt,
/// which then costs Redis no script), as a `Mutex`'s fast attempt does: the counter's epochs
/// and the connection's name, to vouch for the counter (see `acquire.lua`, `KEYS[3]`); `SET
/// NX PX` with `owner`'s token and a lease of `lease_ms` milliseconds; the fencing counter's
/// `INCR`, the node's token (a refusal advances the counter too: tokens only need to grow from
/// one holder to the next); and, `with_pttl`, the key's `PTTL` and `GET`, to say how long a
/// holder's lease runs or that the key is another primitive's (a try-once call; the first attempt
/// of a wait leaves them out, as a `Mutex`'s does: a refusal there is followed by a waiting
/// attempt, whose script says both).
///
/// The `INCR` is trusted only where it is vouched for: the connection's name is among the
/// counter's epochs (a script brought the counter up to a proposal on this very connection,
/// so this server process has kept it since: it did not come back old from a snapshot, an AOF
/// or a replica) and the counter was seeded (at least [`SEEDED`]). Otherwise the acquire
/// script numbers the grant, `max(counter + 1, proposal)`, on the key this pipeline just
/// took (a re-grant to the same owner), and records the connection's name (naming a new
/// connection first). A refusal by a key of another type is also asked of the script, which
/// names it in its `WRONGTYPE` error.
///
/// A vouched token is the counter after its `INCR`: the two commands are not one atomic
/// step, but a refusal's `INCR` in between only advances it, and an earlier holder's key (and
/// its raise, owner-checked) was gone before this `SET` could take it.
///
/// # Errors
/// As [`acquire_on`]; an error of the counter (not an integer, another type) is
/// [`Error::WrongType`] or the server's error, the lock key then possibly granted (the caller
/// releases by owner token).
pub(crate) async fn acquire_first_on(
    node: &Node,
    keys: &LockKeys,
    owner: &str,
    lease_ms: &str,
    proposal: &str,
    with_pttl: bool,
) -> Result<Try<u64>> {
    let (lock, fence) = (keys.lock(), keys.fence());
    if !node.names_its_connection() {
        // Nothing could vouch for the counter (see `StringLock::ask_fast`).
        return acquire_on(node, keys, owner, lease_ms, proposal, None).await;
    }
    let also = if with_pttl {
        Also::Lease
    } else {
        Also::Nothing
    };
    let first = ask_first(node, keys, owner, lease_ms, also).await?;
    match (&first.set, &first.counter) {
        (Value::Okay, Value::Int(token)) => match first.vouch(node) {
            Vouch::Vouched if *token >= SEEDED => Ok(Try::Won(token.unsigned_abs())),
            vouch => {
                let epoch = vouch.epoch();
                acquire_on_as(node, keys, owner, lease_ms, proposal, None, epoch).await
            }
        },
        (Value::ServerError(err), _) => {
            // Refused by the server (a read-only replica, no permission): the lock key is not
            // written (the counter's `INCR` may have run: it only advances).
            Err(Error::from_redis(
                Phase::Acquire,
                &[lock],
                err.clone().into(),
            ))
        }
        (_, Value::ServerError(err)) => Err(counter_error(fence, err)),
        (Value::Nil, _) if first.other_type() => {
            // Another primitive's key (an `RwLock`'s hash or read hold): the script names it.
            acquire_on(node, keys, owner, lease_ms, proposal, None).await
        }
        // Held; a key without expiry (`PTTL` -1) was not written by this library and has no
        // lease to report, as the script would say.
        (Value::Nil, _) => Ok(Try::Held(first.lease_left())),
        _ => Err(first.unexpected()),
    }
}

/// What a first attempt's pipeline ([`ask_first`]) asks after its `INCR`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Also<'a> {
    /// Nothing more.
    Nothing,
    /// The key's `PTTL` and `GET`: how long a refusal lasts, or that the key is another
    /// primitive's (another type, which `GET` refuses, or another primitive's plain key, whose
    /// value has a space: a try-once call).
    Lease,
    /// `EXISTS` of this key: the line of a semaphore or an `RwLock`, which a plain key taken
    /// outside their scripts must not pass (see [`first`](crate::engine::first)).
    Exists(&'a str),
}

/// The replies of a first attempt's pipeline ([`ask_first`]), in order.
pub(crate) struct FirstReplies {
    /// The `ZSCORE` of the believed connection name in the counter's epochs.
    epoch: Value,
    /// `CLIENT GETNAME`.
    name: Value,
    /// The name this client believed its connection had when it sent the pipeline.
    believed: Option<Arc<str>>,
    /// `SET NX PX`: `Okay` taken, `Nil` held.
    pub(crate) set: Value,
    /// The counter's `INCR`: the token.
    pub(crate) counter: Value,
    /// The key's `PTTL` and `GET`, with [`Also::Lease`].
    pttl: Option<Value>,
    value: Option<Value>,
    /// The `EXISTS`, with [`Also::Exists`].
    pub(crate) exists: Option<Value>,
}

impl FirstReplies {
    /// What the vouching replies say of the counter on `node` (see [`vouch`]).
    pub(crate) fn vouch(&self, node: &Node) -> Vouch {
        vouch(node, &self.epoch, &self.name, self.believed.as_deref())
    }

    /// The key is no `Mutex`'s (as `GET` said, when asked for): of another type (refused),
    /// or another primitive's plain key (a semaphore's permit, an `RwLock`'s read hold: a
    /// space in it, which an owner token never has).
    fn other_type(&self) -> bool {
        match &self.value {
            Some(Value::ServerError(_)) => true,
            Some(Value::BulkString(value)) => value.contains(&b' '),
            _ => false,
        }
    }

    /// How long the holder's lease still runs, as `PTTL` said (none without one).
    fn lease_left(&self) -> Option<Duration> {
        match self.pttl {
            Some(Value::Int(ms)) => u64::try_from(ms).ok().map(Duration::from_millis),
            _ => None,
        }
    }

    /// The error for replies no branch expected.
    pub(crate) fn unexpected(&self) -> Error {
        let Self {
            epoch,
            name,
            set,
            counter,
            pttl,
            value,
            exists,
            ..
        } = self;
        Error::UnexpectedReply {
            phase: Phase::Acquire,
            detail: format!("{:?}", (epoch, name, set, counter, pttl, value, exists)),
        }
    }
}

/// A first attempt's pipeline on `node`, with a lease of `lease_ms` ms: the commands that
/// vouch for the counter on this connection ([`vouching`], read first, so they are settled
/// before the `INCR` whatever happens to the lease in between), `SET NX PX` of `value` (an
/// owner token; a semaphore's permit kept as a plain key, `'<owner> <N>'`, or an `RwLock`'s
/// read hold, `'<hold id> r <owner id>'`), the counter's `INCR`, and what `also` asks. The fast
/// attempt of a `Mutex`, of each Redlock node, of a semaphore's single permit and of an
/// `RwLock`'s read hold.
///
/// # Errors
/// A broken connection; [`Error::UnexpectedReply`] for replies of another shape (the outcome
/// is then open: the caller releases by owner token).
pub(crate) async fn ask_first(
    node: &Node,
    keys: &LockKeys,
    value: &str,
    lease_ms: &str,
    also: Also<'_>,
) -> Result<FirstReplies> {
    let (lock, fence) = (keys.lock(), keys.fence());
    // The name this client believes its connection has; `CLIENT GETNAME` checks it.
    let believed = node.connection_name();
    let mut pipe = redis::pipe();
    vouching(pipe.ignore_errors(), keys, believed.as_deref())
        .cmd("SET")
        .arg(lock)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(lease_ms)
        .cmd("INCR")
        .arg(fence);
    let (more, named) = match also {
        Also::Nothing => (0, ""),
        Also::Lease => {
            pipe.cmd("PTTL").arg(lock).cmd("GET").arg(lock);
            (2, "")
        }
        Also::Exists(key) => {
            pipe.cmd("EXISTS").arg(key);
            (1, key)
        }
    };
    let all = [lock, fence, keys.epoch(), named];
    let keys_named = &all[..if named.is_empty() { 3 } else { 4 }];
    let replies = node.run_pipeline(Phase::Acquire, &pipe, keys_named).await?;
    if replies.len() != 4 + more {
        return Err(Error::UnexpectedReply {
            phase: Phase::Acquire,
            detail: format!("{replies:?}"),
        });
    }
    let mut replies = replies.into_iter();
    let mut next = || replies.next().unwrap_or(Value::Nil);
    let (epoch, name, set, counter) = (next(), next(), next(), next());
    let (mut pttl, mut value, mut exists) = (None, None, None);
    match also {
        Also::Nothing => {}
        Also::Lease => (pttl, value) = (Some(next()), Some(next())),
        Also::Exists(_) => exists = Some(next()),
    }
    Ok(FirstReplies {
        epoch,
        name,
        believed,
        set,
        counter,
        pttl,
        value,
        exists,
    })
}

/// One call of the acquire script, and what came before it.
struct Script {
    /// Mark a grant at once, for waiters of this process queued behind this one.
    mark: bool,
    /// A waiter's attempt: a refusal gives this place (`LocalQueue::id`) to the process's
    /// waiters in the lock's queue (see `acquire.lua`, `ARGV[5]`), a grant takes it out.
    waiter: Option<Arc<str>>,
    /// With `waiter`: the attempt's nonce, registered with the place (`ARGV[10]`).
    nonce: String,
    /// What to write as the counter's epoch.
    epoch: Epoch,
    /// How many grants of this acquisition came back after their lease.
    late: u32,
}

impl Script {
    /// A first call, writing no epoch, outside the queue.
    fn new(mark: bool) -> Script {
        Script {
            mark,
            waiter: None,
            nonce: String::new(),
            epoch: Epoch::Keep,
            late: 0,
        }
    }
}

/// The error of an `INCR` of the fencing counter: a plain `ERR` means its value is not an
/// integer (or would overflow), which is data this lock did not write.
pub(crate) fn counter_error(fence: &str, err: &redis::ServerError) -> Error {
    let err: redis::RedisError = err.clone().into();
    if err.code() == Some("ERR") {
        return Error::WrongType {
            key: fence.to_string(),
            detail: err.to_string(),
        };
    }
    Error::from_redis(Phase::Acquire, &[fence], err)
}

#[cfg(test)]
mod tests {
    use crate::Client;

    // A unit test, not an integration test: an application can no longer reach the lock's
    // connection (`Client::connection` is gone), but a test can, to check that a name this
    // crate did not give is still never trusted.
    #[tokio::test]
    async fn a_connection_named_by_the_application_never_vouches_for_a_counter() {
        let server = test_support::RedisServer::start().unwrap();
        let client = Client::connect(&server.url()).await.unwrap();
        // Another instance may use the same name, on another server: it proves nothing.
        redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg("myapp")
            .exec_async(&mut client.node().connection())
            .await
            .unwrap();
        let mutex = client.mutex("named").unwrap();
        let mut last = 0;
        for _ in 0..3 {
            let before = client.stats().requests;
            let guard = mutex.lock().await.unwrap();
            assert_eq!(
                client.stats().requests - before,
                2,
                "the script numbers every grant"
            );
            assert!(guard.fencing_token().get() > last);
            last = guard.fencing_token().get();
            guard.release().await.unwrap();
        }
        let epoch: Option<String> = redis::cmd("GET")
            .arg("{named}:epoch")
            .query(&mut server.connection().unwrap())
            .unwrap();
        assert_eq!(
            epoch, None,
            "the application's name is never written as an epoch"
        );
        let name: String = redis::cmd("CLIENT")
            .arg("GETNAME")
            .query_async(&mut client.node().connection())
            .await
            .unwrap();
        assert_eq!(name, "myapp", "and its connection keeps its name");
    }
}
