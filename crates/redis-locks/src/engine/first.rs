//! The first attempt, outside the scripts, of a lock whose lone holder may be a plain key:
//! while nobody holds the lock or waits for it, one holder can be the string that `SET NX
//! PX` writes, with its lease as the key's TTL, and every script of the lock reads that form
//! as the hash it stands for and turns it into the hash before it writes. Two primitives keep
//! one: a `Semaphore`'s single permit (`'<owner> <N>'`, `semaphore/permits.lua`) and an
//! `RwLock`'s read hold (`'<hold> r <owner id>'`, `engine/holds/holds.lua`). The attempt is a
//! `Mutex`'s first attempt ([`ask_first`]) with the line's `EXISTS`: it costs the server no
//! script, so an acquisition nobody contends for costs what a `Mutex`'s costs.
//!
//! Every guarantee stays the scripts':
//! - **who may enter**: the key is taken only where it does not exist, so nobody holds, and
//!   kept only where the line's `EXISTS` in the same pipeline finds nobody waiting; what the
//!   next acquirer's script must check (a semaphore's N, a hold's mode and owner) is in the
//!   value;
//! - **the line**: a grant that finds a line (one a `break` left, or a waiter that came in
//!   after the `SET` and saw it as a holder) is given back, and the script, asked next, prods
//!   the line's first waiter;
//! - **the lease**: the key's TTL, on the server clock;
//! - **the fencing token**: the pipelined `INCR` only where the counter is vouched for on the
//!   connection (see [`ask_first`]); otherwise the script numbers the grant (a re-grant to the
//!   same owner), recording the connection's epoch so that the next first attempt is vouched.
//!
//! A refused first attempt costs a contended acquisition a request, so a handle whose first
//! attempt was refused (or found a line) sends its attempts straight to the script for
//! [`BUSY_FOR`].

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::engine::string_lock::{
    Also, Epoch, SEEDED, Vouch, ask_first, counter_error, epoch_name,
};
use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Hold, LeaseOptions, OwedRelease};
use crate::node::Node;
use crate::token::FencingToken;
use crate::wait::Answer;

/// How long a handle whose first attempt was refused asks the script first.
pub(crate) const BUSY_FOR: Duration = Duration::from_secs(1);

/// Until when a handle's first attempts go straight to the script (shared by its clones).
#[derive(Debug, Default)]
pub(crate) struct Busy(Mutex<Option<Instant>>);

impl Busy {
    /// Whether a first attempt may be made now.
    fn quiet(&self) -> bool {
        let until = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        until.is_none_or(|until| Instant::now() >= until)
    }

    /// A first attempt was refused.
    fn refused(&self) {
        let mut until = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *until = Instant::now().checked_add(BUSY_FOR);
    }
}

/// What a first attempt leaves to the script.
pub(crate) enum First {
    /// Granted and numbered: nothing.
    Won(Answer),
    /// Taken, but the token must come from the script (a re-grant), which records `Epoch`.
    Number(Epoch),
    /// Nothing taken (or taken and given back): an attempt as any other.
    Script,
}

/// The lock a first attempt is made on.
pub(crate) struct Plain<'a> {
    /// The node, whose connection vouches for its counter (not a cluster).
    pub(crate) node: &'a Node,
    /// The lock's keys: its key, the fencing counter and its epochs, the line.
    pub(crate) keys: &'a LockKeys,
    /// How the plain key is given back (its owner-checked release).
    pub(crate) hold: &'a dyn Hold,
    /// The lease in milliseconds, as `SET ... PX` takes it.
    pub(crate) lease_ms: &'a str,
    /// The lease's options: a grant that came back after its lease is numbered by the script.
    pub(crate) lease: &'a LeaseOptions,
    /// The handle's busy mark.
    pub(crate) busy: &'a Busy,
}

impl Plain<'_> {
    /// Whether an acquisition may begin with a first attempt: on a node whose connection
    /// vouches for its counter (not a cluster), by a handle not refused lately.
    pub(crate) fn may_try(&self) -> bool {
        self.node.names_its_connection() && self.busy.quiet()
    }
}

/// The first attempt, if `pending` says it is still to be made (it is then no more: one per
/// acquisition), writing `value()`; [`First::Script`] when it is not made.
///
/// # Errors
/// As [`attempt`].
pub(crate) async fn once(
    pending: &std::sync::atomic::AtomicBool,
    plain: &Plain<'_>,
    owed: &OwedRelease,
    value: impl FnOnce() -> String,
) -> Result<First> {
    if pending.swap(false, std::sync::atomic::Ordering::Relaxed) {
        attempt(plain, owed, &value()).await
    } else {
        Ok(First::Script)
    }
}

/// The first attempt by `owed`'s owner token, writing `value` (see the module's
/// documentation).
///
/// # Errors
/// A refused `SET` (read-only, no permission) with nothing written; a broken fencing counter
/// ([`Error::WrongType`]) after the key is given back; a broken connection or replies of
/// another shape, the outcome open (`owed` releases by owner token).
pub(crate) async fn attempt(plain: &Plain<'_>, owed: &OwedRelease, value: &str) -> Result<First> {
    let keys = plain.keys;
    let line = keys.line();
    let sent_at = Instant::now();
    let first = ask_first(
        plain.node,
        keys,
        value,
        plain.lease_ms,
        Also::Exists(line.queue()),
    )
    .await?;
    match (&first.set, &first.counter, &first.exists) {
        (Value::Okay, Value::Int(token), Some(Value::Int(0))) => {
            let vouch = first.vouch(plain.node);
            let late = plain.lease.is_late(sent_at);
            Ok(match vouch {
                Vouch::Vouched if *token >= SEEDED && !late => {
                    let token = FencingToken::new(token.unsigned_abs());
                    First::Won(Answer::Won((token, sent_at)))
                }
                vouch => First::Number(vouch.epoch()),
            })
        }
        (Value::Okay, Value::Int(_), Some(Value::Int(_))) => {
            // A line waits (one a `break` left, or a waiter that came in after the SET, which
            // it saw as a holder): it goes first. The script asked next prods its head.
            plain.busy.refused();
            give_back(plain.hold, owed).await;
            Ok(First::Script)
        }
        (Value::Okay, Value::ServerError(err), _) => {
            let err = counter_error(keys.fence(), err);
            give_back(plain.hold, owed).await;
            Err(err)
        }
        (Value::Nil, _, _) => {
            plain.busy.refused();
            Ok(First::Script)
        }
        (Value::ServerError(err), _, _) => Err(Error::from_redis(
            Phase::Acquire,
            &[keys.lock()],
            err.clone().into(),
        )),
        _ => Err(first.unexpected()),
    }
}

/// Gives back what the first attempt took for `owed`'s owner token. A release that finds it
/// gone already is what was wanted; one that fails (a broken connection) leaves it to
/// `owed`, still armed, which releases by owner token when the acquisition ends without a
/// guard (and otherwise the key's lease ends it).
pub(crate) async fn give_back(hold: &dyn Hold, owed: &OwedRelease) {
    match hold.release(owed.owner()).await {
        Ok(_) | Err(Error::NotHeld { .. }) => {}
        Err(err) => tracing::debug!(
            name = hold.name(),
            error = %err,
            "giving back a first attempt's plain key failed; the owed release will"
        ),
    }
}

/// What the acquire script's calls after a first attempt send besides their own keys and
/// arguments: the counter's epochs key (last of the keys) and the connection's name (last of
/// the arguments), on the first call only and only when the first attempt left its grant to
/// number (so that the script records the connection's epoch), naming the connection first
/// in the same round trip for a fresh name.
pub(crate) struct Numbering {
    fresh: Option<String>,
    named: Option<std::sync::Arc<str>>,
    /// The first attempt took a key that the script is to number.
    taken: bool,
}

impl Numbering {
    /// For a first attempt that left `taken` (its epoch) to number, or none.
    pub(crate) fn new(taken: Option<Epoch>) -> Numbering {
        let (fresh, named) = epoch_name(taken.as_ref().unwrap_or(&Epoch::Keep));
        Numbering {
            fresh,
            named,
            taken: taken.is_some(),
        }
    }

    /// The connection's name to record, or `""` (the last argument's value).
    pub(crate) fn name(&self) -> &str {
        self.fresh
            .as_deref()
            .or(self.named.as_deref())
            .unwrap_or_default()
    }

    /// For the script's call number `call` (from 1): the name to give the connection first,
    /// and how many of the keys and arguments to send, of `keys` and `args` in all (the
    /// last of each, the epochs key and the name, only on a first call with a name).
    pub(crate) fn call(&self, call: u32, keys: usize, args: usize) -> (Option<&str>, usize, usize) {
        if call == 1 && !self.name().is_empty() {
            (self.fresh.as_deref(), keys, args)
        } else {
            (None, keys - 1, args - 1)
        }
    }

    /// The script's `answer`, after the key the first attempt took is given back when the
    /// script refused to number it (no permission, say), as a `Mutex`'s attempt does.
    pub(crate) async fn settled(
        &self,
        plain: &Plain<'_>,
        owed: &OwedRelease,
        answer: Result<Answer>,
    ) -> Result<Answer> {
        if self.taken
            && let Err(Error::WrongType { .. } | Error::Redis { .. } | Error::Auth { .. }) = &answer
        {
            give_back(plain.hold, owed).await;
        }
        answer
    }
}
