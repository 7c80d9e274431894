//! A semaphore's first attempt at a single permit, outside its scripts: while nobody holds
//! the semaphore or waits for it, a permit can be the plain key `'<owner> <N>'` that `SET NX
//! PX` writes, with the holder's lease as its TTL (`permits.lua` says how every script reads
//! that form and turns it into the hash before it writes). The attempt is a `Mutex`'s first
//! attempt ([`ask_first`]) with the line's `EXISTS`: it costs the server no script, so a
//! permit nobody contends for costs what a `Mutex` costs.
//!
//! Every guarantee stays the script's:
//! - **N**: the key is taken only where it does not exist, so nobody holds or waits (a line
//!   keeps the hash alive, see `permits.lua`), and it carries N for the next acquirer's
//!   script to check;
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

use super::Semaphore;
use crate::engine::string_lock::{Also, Epoch, SEEDED, Vouch, ask_first, counter_error};
use crate::error::{Error, Phase, Result};
use crate::lease::{Hold, OwedRelease};
use crate::token::FencingToken;
use crate::wait::Answer;

/// How long a handle whose first attempt was refused asks the script first.
pub(super) const BUSY_FOR: Duration = Duration::from_secs(1);

/// Until when a handle's first attempts go straight to the script (shared by its clones).
#[derive(Debug, Default)]
pub(super) struct Busy(Mutex<Option<Instant>>);

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
pub(super) enum First {
    /// Granted and numbered: nothing.
    Won(Answer),
    /// Taken, but the token must come from the script (a re-grant), which records `Epoch`.
    Number(Epoch),
    /// Nothing taken (or taken and given back): an attempt as any other.
    Script,
}

/// Whether `semaphore` makes a first attempt for `permits` permits: one permit, on a node
/// whose connection vouches for its counter (not a cluster), by a handle not refused lately.
pub(super) fn eligible(semaphore: &Semaphore, permits: u32) -> bool {
    permits == 1 && semaphore.client.node().names_its_connection() && semaphore.hold.busy.quiet()
}

/// The first attempt by `owed`'s owner token (see the module's documentation).
///
/// # Errors
/// A refused `SET` (read-only, no permission) with nothing written; a broken fencing counter
/// ([`Error::WrongType`]) after the permit is given back; a broken connection or replies of
/// another shape, the outcome open (`owed` releases by owner token).
pub(super) async fn attempt(
    semaphore: &Semaphore,
    owed: &OwedRelease,
    limit: &str,
) -> Result<First> {
    let keys = &semaphore.keys;
    let node = semaphore.client.node();
    let line = keys.line();
    let value = format!("{} {limit}", owed.owner().as_str());
    let sent_at = Instant::now();
    let first = ask_first(
        node,
        keys,
        &value,
        &semaphore.lease_ms,
        Also::Exists(line.queue()),
    )
    .await?;
    match (&first.set, &first.counter, &first.exists) {
        (Value::Okay, Value::Int(token), Some(Value::Int(0))) => {
            let vouch = first.vouch(node);
            let late = semaphore.options.get_lease_options().is_late(sent_at);
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
            semaphore.hold.busy.refused();
            give_back(semaphore, owed).await;
            Ok(First::Script)
        }
        (Value::Okay, Value::ServerError(err), _) => {
            let err = counter_error(keys.fence(), err);
            give_back(semaphore, owed).await;
            Err(err)
        }
        (Value::Nil, _, _) => {
            semaphore.hold.busy.refused();
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

/// Gives back the permit the first attempt took for `owed`'s owner token. A release that
/// finds it gone already is what was wanted; one that fails (a broken connection) leaves it
/// to `owed`, still armed, which releases by owner token when the acquisition ends without a
/// guard (and otherwise the permit's lease ends it).
pub(super) async fn give_back(semaphore: &Semaphore, owed: &OwedRelease) {
    match semaphore.hold.release(owed.owner()).await {
        Ok(_) | Err(Error::NotHeld { .. }) => {}
        Err(err) => tracing::debug!(
            name = semaphore.name(),
            error = %err,
            "giving back a first attempt's permit failed; the owed release will"
        ),
    }
}
