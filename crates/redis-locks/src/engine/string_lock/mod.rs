//! The string-key lock engine: one owner at a time, its owner token in a string key with a
//! lease (`PX`), the waiter mark appended when someone waits, and a fencing counter beside it.
//!
//! - [`StringLock`]: one lock of this kind on one node, acquired the fast way (a pipelined
//!   `SET NX PX` + `INCR`, no script) or by the acquire script (which puts a process's waiters
//!   in line and registers the token a release hands the lock to), with late grants asked
//!   again ([`Ask`], `attempt.rs`).
//! - [`StringHold`]: the owner-checked release (handing the lock to the next waiter, or only
//!   waking it) and extend, as the lease core's [`Hold`](crate::lease::Hold) (`hold.rs`).
//! - [`acquire_on`] and [`acquire_first_on`]: one attempt on one node of several, with the
//!   token proposed by the caller (a `Redlock`'s nodes).
//! - [`inspect()`]: the state in one read; [`MutexGuard`]: the public guard of its leases.
//!
//! `Mutex`, `FairMutex` (with release and acquire scripts of its own, in ticket order) and each
//! node of a `Redlock` stand on it.

mod attempt;
mod guard;
mod hold;
mod inspect;

use std::sync::Arc;

pub(crate) use attempt::{
    Also, Ask, Epoch, InLine, SEEDED, Vouch, acquire_first_on, acquire_on, ask_first,
    counter_error, epoch_name,
};
pub use guard::MutexGuard;
pub(crate) use hold::StringHold;
pub(crate) use inspect::inspect;

use crate::client::Client;
use crate::error::Result;
use crate::key::LockKeys;
use crate::lease::lease_millis;
use crate::node::LockScript;
use crate::options::LockOptions;
use crate::state::LockState;

/// The scripts a [`Redlock`](crate::Redlock) runs on each of its nodes (its acquire, and
/// the release and extend), to load them up front.
pub(crate) fn node_scripts() -> [&'static LockScript; 3] {
    [&attempt::ACQUIRE_ON_NODE, &hold::RELEASE, &hold::EXTEND]
}

/// The token a Redlock proposes to its nodes (an attempt's grant, a release's handover): this
/// host's wall clock in µs (at least 1, below 2^53 for the scripts' Lua numbers). A node numbers
/// it `max(counter + 1, proposal)`, so nodes whose counters are behind it all agree on it.
pub(crate) fn clock_proposal() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| since.as_micros());
    micros.clamp(1, (1 << 53) - 1) as u64
}

/// One string-key lock on its client's node, with the options it is acquired with.
#[derive(Clone)]
pub(crate) struct StringLock {
    client: Client,
    keys: Arc<LockKeys>,
    hold: Arc<StringHold>,
    options: LockOptions,
    /// The lease in milliseconds, as `SET ... PX` and the acquire script take it.
    lease_ms: Arc<str>,
    /// A waiter's place lease in milliseconds, as the acquire script takes it.
    place_ms: Arc<str>,
}

impl StringLock {
    /// The lock `keys` on `client`'s node, acquired with `options` (checked against the
    /// client's); its releases hand the lock straight to the first waiter in line.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a lease or a place lease
    /// out of range.
    pub(crate) fn new(client: Client, keys: LockKeys, options: LockOptions) -> Result<StringLock> {
        options.check_on(client.options())?;
        let keys = Arc::new(keys);
        Ok(StringLock {
            hold: Arc::new(StringHold {
                node: client.node().clone(),
                keys: keys.clone(),
                hands_over: true,
                proposes: false,
            }),
            client,
            keys,
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
            place_ms: options.get_place_lease().as_millis().to_string().into(),
            options,
        })
    }

    /// The client the lock is asked through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The lock's keys.
    pub(crate) fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        self.keys.name()
    }

    /// How the lock is released and extended by its owner.
    pub(crate) fn hold(&self) -> &Arc<StringHold> {
        &self.hold
    }

    /// The options it is acquired with.
    pub(crate) fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Reads who holds the lock, for how long, and the fencing counter, in one step.
    ///
    /// # Errors
    /// As [`inspect()`].
    pub(crate) async fn state(&self) -> Result<LockState> {
        inspect(self.client.node(), &self.keys).await
    }
}

#[cfg(test)]
mod tests {
    use crate::node::assert_carries_preludes;
    use crate::wait::PRELUDES;

    #[test]
    fn every_script_carries_the_preludes_it_calls() {
        let scripts = [
            ("acquire", &*super::attempt::ACQUIRE),
            ("acquire on a node", &*super::attempt::ACQUIRE_ON_NODE),
            ("release", &*super::hold::RELEASE),
            ("extend", &*super::hold::EXTEND),
            ("extend many", &*super::hold::EXTEND_MANY),
            ("inspect", &*super::inspect::INSPECT),
        ];
        assert_carries_preludes(&scripts, &PRELUDES);
    }
}
