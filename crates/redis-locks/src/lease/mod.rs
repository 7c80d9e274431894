//! The lease core: what every held lock has, whatever primitive took it.
//!
//! A granted lock is a [`Lease`]: its fencing token, its deadline on the local monotonic clock
//! ([`state`]), the watchdog that renews it ([`watchdog`]), the release it owes
//! ([`OwedRelease`], which makes a cancelled acquire and a dropped guard leave nothing behind;
//! a `Mutex` waiter's attempts ask with their line's token, whose release the line owes until
//! a grant is taken, [`OwedRelease::of_line`])
//! and `lost()`. The core knows no primitive: it releases and extends through the [`Hold`] the
//! primitive gave it, and the primitive's public guard (`MutexGuard`, ...) is a thin wrapper
//! around a `Lease` that adds the primitive's own words.
//!
//! # How to add a primitive
//!
//! A primitive is a folder of its own (`src/<primitive>/`) and a line in `lib.rs`: its scripts
//! plus two small implementations, standing on an engine and this core, never on another
//! primitive. [`FairMutex`](crate::FairMutex) (`src/fair/`) is the worked example.
//!
//! 0. **Pick an engine** (`src/engine/`), if one fits: the string-key lock
//!    (`engine/string_lock/`: one owner, the fast pipeline, fencing, the handover; its
//!    `StringHold` releases and extends, `inspect` reads the state, `MutexGuard` wraps its
//!    leases) or the hash of holds (`engine/holds/`: several holds per key, each with its
//!    own lease, owner id and mode; `HoldsLock` does the rest). A primitive of another
//!    storage writes its own scripts and [`Hold`].
//! 1. **Keys and scripts.** Derive every key from [`LockKeys`](crate::LockKeys) (companions
//!    through [`LockKeys::companion`](crate::LockKeys::companion), so they share the lock's
//!    cluster slot; the keys of the line through `LockKeys::line`, made for each request, so
//!    a held lock does not keep them) and write the scripts as `.lua` files in the
//!    primitive's folder, each with a header stating KEYS, ARGV and every reply. Start each with the preludes it calls, and
//!    no more: `token/fence.lua` (`next_token`: fencing tokens that survive a restart), the
//!    lock prelude `wait/lock.lua` (owner checks, the waiter mark on a held key, the wake-up
//!    publish, a release's tombstone) and, for a script that keeps waiters in line or hands
//!    the lock over, the queue prelude `wait/queue.lua` after it. Load each once as a
//!    [`LockScript`](crate::node::LockScript) in a `static LazyLock`, and check with
//!    `node::undefined_calls` in a unit test that it carries every prelude it calls. Build
//!    each script's KEYS and ARGV in one place.
//! 2. **A [`Hold`]**: release and extend by owner token, one script call each, mapping the
//!    `1 / 0 / -1` reply with [`owner_reply`]. It owns what it needs to reach the server
//!    (a [`Node`](crate::node::Node), or N of them for a quorum) and the keys. One `Hold` per
//!    handle is shared by all its guards (`Arc<dyn Hold>`). For replicated acquisition it
//!    also implements [`Hold::extend_replicated`] through [`extend_replicated_by`] (the
//!    default refuses it, as a Redlock does).
//! 3. **A [`Contender`](crate::wait::Contender)**: one acquire attempt (a
//!    [`Try`](crate::wait::Try): granted, or held and for how long), and optionally a cheaper
//!    first attempt, a place to give up on timeout, and a wake-up address.
//!    [`acquire`](crate::wait::acquire) runs the one acquire loop with it: listening for
//!    wake-ups, sleeping until the holder's lease ends, local turns, the wait budget. A
//!    primitive whose waiters each keep their own place in the queue writes only an
//!    [`Asker`](crate::wait::Asker) (one attempt, through
//!    [`answer_in_time`](crate::wait::answer_in_time), which reads the acquire script's
//!    `{1, token} | {0, pttl}` reply and asks a late grant again) and uses
//!    [`Placed`](crate::wait::Placed) as its contender. A grant becomes a [`Lease`] through
//!    [`Lease::new`], from the attempt's [`OwedRelease`] and the time its request was sent (a
//!    grant a release handed over, through `Lease::handed_over`, counted from the waiter's
//!    place).
//! 4. **Options**: the common [`LockOptions`](crate::LockOptions) (a [`LeaseOptions`] and a
//!    [`WaitOptions`](crate::WaitOptions)), or a struct of its own around a
//!    [`LeaseOptions`] for settings of its own (as [`RedlockOptions`](crate::RedlockOptions)).
//! 5. **A public guard** wraps the `Lease` and gets its methods from `guard_methods!` (see
//!    `engine/string_lock/guard.rs`), and `Client` gets a constructor. Tests: the scripts
//!    against a real server (every reply of the header), the contention checker of
//!    `test_support::history`, cancel safety, bad input.
//!
//! A primitive on the string-key engine (as `Mutex` and `FairMutex`) needs nothing more from
//! `lease/`, `wait/` or `node/`; one whose waiters each keep their own place in the queue
//! reuses [`Placed`](crate::wait::Placed) (its `Asker` says how to ask once). A lock with
//! several holds per key (`ReentrantMutex`, `RwLock`, on `engine/holds/`) gives each guard a
//! hold id of its own as the owed release's token, keeps the owner id for re-entry in the
//! hold, and reports what a release left ([`Released`]).
//!
mod guard;
mod held;
mod kept;
mod options;
mod owed;
mod state;
mod time;
mod watchdog;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, LostReason, Phase, Result};
use crate::node::{Replication, ScriptCall};
use crate::token::OwnerToken;

pub(crate) use guard::guard_methods;
pub(crate) use held::Lease;
pub(crate) use kept::BROKEN_MARK;
pub use options::{DEFAULT_LEASE, LeaseOptions};
pub(crate) use owed::OwedRelease;
pub(crate) use state::LeaseState;
pub use time::{ClockDrift, MAX_LEASE, MIN_LEASE};
pub(crate) use time::{MAX_LATE_GRANTS, lease_millis, too_slow};
pub(crate) use watchdog::Renewals;

/// A boxed future, as [`Hold`]'s methods return them (the trait is used as `dyn Hold`).
pub(crate) type HoldFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Whose hold a lease of a hold count is (an `RwLock`'s or a `ReentrantMutex`'s): its owner id
/// and mode, so that a release asked again after a lost reply can say how many holds the owner
/// has left (see [`Hold::released_first`]), and a renewal or release that finds the hold run
/// out can tell whether another owner took the lock (see [`taken`]).
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub(crate) owner: crate::owner::OwnerId,
    pub(crate) mode: crate::state::HoldMode,
}

/// A [`Holder`] shared by a lease and its watchdog: a downgrade changes its mode for both.
#[derive(Debug, Clone)]
pub(crate) struct SharedHolder(Arc<Mutex<Holder>>);

impl SharedHolder {
    pub(crate) fn new(holder: Holder) -> SharedHolder {
        SharedHolder(Arc::new(Mutex::new(holder)))
    }

    /// Whose hold it is now.
    pub(crate) fn now(&self) -> Holder {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The hold is held in `mode` from now on (a downgrade).
    pub(crate) fn set_mode(&self, mode: crate::state::HoldMode) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .mode = mode;
    }
}

/// Whether another owner took the lock from `holder` (see [`Hold::taken_from`]); `false`
/// without a holder, or when that cannot be read.
pub(super) async fn taken(hold: &dyn Hold, holder: Option<&Holder>) -> bool {
    match holder {
        Some(holder) => hold.taken_from(holder).await.unwrap_or(false),
        None => false,
    }
}

/// What the lease core needs of a primitive: release and extend by owner token.
///
/// Both are one owner-checked request. A reply that says the lock is gone or another owner's
/// is [`Error::NotHeld`] (see [`owner_reply`]); a request with an unknown outcome is
/// [`Error::Connection`]. The core serializes them per lease (no renewal once a release
/// has begun) and counts the lease from when the request was sent.
pub(crate) trait Hold: Send + Sync + 'static {
    /// The lock's name, for messages.
    fn name(&self) -> &str;

    /// The primitive, for metrics.
    fn kind(&self) -> crate::telemetry::Kind;

    /// The node and keys of a lock that lives on one node, for [`Hold::broken`] and
    /// [`Hold::released_first`]. By default `None`: a lock over several nodes (a Redlock, a
    /// MultiLock).
    fn keys_on(&self) -> Option<(&crate::node::Node, &crate::key::LockKeys)> {
        None
    }

    /// Whether an owner holds this lock once at most (a `Mutex`, a `FairMutex`, a
    /// semaphore's permits), so that a release that took it away leaves
    /// [`Released::Freed`]. By default `false` (a hold count).
    fn held_once(&self) -> bool {
        false
    }

    /// Whether a break took the lock from `owner` (see `breaking/`): asked when a renewal or
    /// a release finds the lock gone or taken. `false` for a lock over several nodes, which
    /// says only that it is gone.
    fn broken<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, bool> {
        Box::pin(async move {
            match self.keys_on() {
                Some((node, keys)) => kept::was_broken(node, keys, owner).await,
                None => Ok(false),
            }
        })
    }

    /// What a release asked again after its first reply was lost learns when it finds the
    /// hold gone or taken while its lease was still certain: whether the server still has the
    /// data of the grant numbered `token` — the same server as before (its `run_id`: no
    /// restart, no failover to another server, `Node::same_server_as_before`) whose fencing
    /// counter, which never expires, is still at least `token` (a flush, or a restore from an
    /// older snapshot, would have lost or set it back; a flush followed at once by a new grant
    /// is the one data loss this cannot see) — so that nothing but the first request ended the
    /// hold (a break is told apart by the caller), and then what that release left: [`Released::Freed`] for a lock an owner holds once at most (a `Mutex`, a
    /// `FairMutex`, a semaphore's permits); for a hold count, how many holds `holder` still
    /// has ([`Hold::holds_of`]). `None` when the server lost the data, for a lock over several
    /// nodes, or for a hold count without `holder`: the second answer stands.
    fn released_first<'a>(
        &'a self,
        token: crate::token::FencingToken,
        holder: Option<&'a Holder>,
    ) -> HoldFuture<'a, Option<Released>> {
        Box::pin(async move {
            let Some((node, keys)) = self.keys_on() else {
                return Ok(None);
            };
            // The same server as before (no restart, no failover: its run_id) that still
            // has the grant's counter (no flush or restore from an older snapshot since).
            if !node.same_server_as_before().await
                || !kept::counter_reached(node, keys, token).await?
            {
                return Ok(None);
            }
            if self.held_once() {
                return Ok(Some(Released::Freed));
            }
            match holder {
                Some(holder) => Ok(Some(Released::leaving(self.holds_of(holder).await?))),
                None => Ok(None),
            }
        })
    }

    /// Whether another owner than `holder` holds the lock in a mode that excludes
    /// `holder`'s (a write hold, or any hold when `holder`'s was a write): asked when a
    /// release of a hold count finds its hold expired, so that it says
    /// [`LostReason::Taken`] as a `Mutex`'s does. By default `false`: a lock an owner holds
    /// once at most says so itself.
    fn taken_from<'a>(&'a self, _holder: &'a Holder) -> HoldFuture<'a, bool> {
        Box::pin(async { Ok(false) })
    }

    /// How many live holds `holder` has on a lock of hold counts (see
    /// [`Hold::released_first`]). By default 0: a lock an owner holds once at most.
    fn holds_of<'a>(&'a self, _holder: &'a Holder) -> HoldFuture<'a, u64> {
        Box::pin(async { Ok(0) })
    }

    /// Releases the lock if `owner` holds it (and wakes its waiters), and says whether the
    /// owner still holds it (a reentrant hold count).
    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released>;

    /// Sets the lease to `lease` from now if `owner` holds the lock.
    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()>;

    /// As [`Hold::extend`], then waits for `replication` in the same round trip, and says
    /// how many replicas acknowledged ([`Error::NotReplicated`] when too few). By default
    /// refused: a primitive over several independent servers (a Redlock) has no replicas
    /// to wait for.
    fn extend_replicated<'a>(
        &'a self,
        _owner: &'a OwnerToken,
        _lease: Duration,
        replication: &'a Replication,
    ) -> HoldFuture<'a, u32> {
        Box::pin(async move {
            Err(Error::Unsupported {
                what: format!("{replication:?}"),
                detail: format!("lock {:?} cannot wait for replicas", self.name()),
            })
        })
    }

    /// Where [`Hold::extend`] runs when it is one script call on one node (a batch of
    /// renewals then sends it beside others, see [`Hold::extend_call`]): the node and the
    /// lock key. By default `None`: renewed one request at a time (a Redlock's extend asks N
    /// nodes, a MultiLock's spans slots).
    fn extend_on(&self) -> Option<(&crate::node::Node, &str)> {
        None
    }

    /// [`Hold::extend`] as the script call a batch sends, when [`Hold::extend_on`] names a
    /// node; [`Hold::extend_reply`] reads its reply.
    fn extend_call(&self, _owner: &OwnerToken, _lease: Duration) -> Result<ScriptCall<'_>> {
        Err(Error::Unsupported {
            what: "batched renewals".into(),
            detail: format!("lock {:?} is renewed one request at a time", self.name()),
        })
    }

    /// A script that runs many [`Hold::extend_call`]s of holds like this one in one call,
    /// if there is one: KEYS the calls' keys (one each), ARGV their ARGV in turn, and an
    /// array of their replies (each read by [`Hold::extend_reply`]). A batch of such holds on
    /// one node and slot is then one script call instead of a pipeline of them. By default
    /// `None`.
    fn extend_many(&self) -> Option<&'static crate::node::LockScript> {
        None
    }

    /// What the reply of [`Hold::extend_call`]'s script says: by default the `1 / 0 / -1`
    /// of [`owner_reply`].
    fn extend_reply(&self, reply: i64) -> Result<()> {
        owner_reply(self.name(), Phase::Extend, reply)
    }

    /// Taken at once when a release of this hold is moved to a background task (a guard
    /// dropped without `release()`, a cancelled acquisition), and dropped when that task ends:
    /// a primitive that lets a caller wait for its background requests counts it among them
    /// ([`Redlock::settle`](crate::Redlock::settle)). By default nothing.
    fn background(&self) -> Option<Box<dyn Send>> {
        None
    }
}

/// What a release left, the one answer of every guard's `release()`: for a lock an owner may
/// hold several times ([`ReentrantMutex`](crate::ReentrantMutex), the sides of an
/// [`RwLock`](crate::RwLock)) whether the owner still holds it; for every other primitive
/// (held once: a `Mutex`, a `Redlock`, a semaphore's permits, a `MultiLock`) always
/// [`Released::Freed`]. A release that found the hold gone is an error instead,
/// [`Error::NotHeld`].
///
/// ```
/// use redis_locks::Released;
/// assert!(Released::Freed.is_freed());
/// assert_eq!(Released::StillHeld { holds: 2 }.holds(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// That was the owner's last hold (of this mode, for an `RwLock`): a `ReentrantMutex`
    /// is free now; after an `RwLock` write release, no write hold is left (its owner's or
    /// other owners' reads may still hold); after a read release, this owner reads no more
    /// (other owners may).
    Freed,
    /// The owner still holds the lock `holds` more times (re-entries not yet released).
    StillHeld {
        /// How many holds of the owner are still live (at least 1).
        holds: u64,
    },
}

impl Released {
    /// A release that left `holds` holds of the owner.
    pub(crate) fn leaving(holds: u64) -> Released {
        match holds {
            0 => Released::Freed,
            holds => Released::StillHeld { holds },
        }
    }

    /// Whether the owner holds no more.
    pub fn is_freed(self) -> bool {
        self == Released::Freed
    }

    /// How many holds of the owner are left (0 when freed).
    pub fn holds(self) -> u64 {
        match self {
            Released::Freed => 0,
            Released::StillHeld { holds } => holds,
        }
    }
}

/// Extends `owner`'s hold for `lease`, and with `replication` waits for it: the one way the
/// lease core extends, for the holder's `extend` and the watchdog's renewals alike. Says how
/// many replicas acknowledged, when asked.
pub(crate) async fn extend_hold(
    hold: &dyn Hold,
    owner: &OwnerToken,
    lease: Duration,
    replication: Option<&Replication>,
) -> Result<Option<u32>> {
    match replication {
        None => hold.extend(owner, lease).await.map(|()| None),
        Some(replication) => hold
            .extend_replicated(owner, lease, replication)
            .await
            .map(Some),
    }
}

/// Runs an owner-checked extend `script` on the lock key `key` with `replication`'s wait
/// after it (the shared body of every [`Hold::extend_replicated`]): `reply` reads the
/// script's reply (gone, another owner's), then the acknowledgements are judged for the
/// lock `name`.
pub(crate) async fn extend_replicated_by(
    node: &crate::node::Node,
    script: &crate::node::LockScript,
    key: &str,
    args: &[&str],
    replication: &Replication,
    name: &str,
    reply: impl FnOnce(i64) -> Result<()>,
) -> Result<u32> {
    let (value, acked) = node
        .run_script_replicated(Phase::Extend, script, &[key], args, replication)
        .await?;
    reply(value)?;
    replication.enough(name, acked)
}

/// Maps the `1 / 0 / -1` reply of an owner-checked script: done, the lock is gone, the lock
/// is another owner's.
pub(crate) fn owner_reply(name: &str, phase: Phase, reply: i64) -> Result<()> {
    match reply {
        1 => Ok(()),
        0 => Err(Error::NotHeld {
            name: name.to_string(),
            reason: LostReason::Expired,
        }),
        -1 => Err(Error::NotHeld {
            name: name.to_string(),
            reason: LostReason::Taken,
        }),
        other => Err(Error::UnexpectedReply {
            phase,
            detail: format!("{other}"),
        }),
    }
}
