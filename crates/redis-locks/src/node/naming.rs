//! The name a node gives its connection (`CLIENT SETNAME redis-locks:<random>`), so that fast
//! acquisitions can trust a fencing counter that a script brought up to the clock on this very
//! connection (see `engine/string_lock/acquire.lua`, `KEYS[3]`, and the crate README, "Fencing tokens").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a node knows of its connection's name.
#[derive(Default)]
pub(super) struct Naming {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// The name given last, as fast attempts name it among a counter's epochs; `CLIENT
    /// GETNAME` in the same pipeline checks that the connection still has it.
    name: Mutex<Option<Arc<str>>>,
    /// A `CLIENT SETNAME` is under way (one at a time).
    naming: AtomicBool,
    /// A name given did not stick (an ACL without `CLIENT`, a proxy): never name again, and
    /// let the script number every grant.
    refused: AtomicBool,
}

/// The one naming of a node's connection under way; dropping it lets the next one start.
pub(crate) struct NamingTurn {
    state: Arc<State>,
}

impl Drop for NamingTurn {
    fn drop(&mut self) {
        self.state.naming.store(false, Ordering::Release);
    }
}

impl Naming {
    pub(super) fn get(&self) -> Option<Arc<str>> {
        self.state
            .name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set(&self, name: Arc<str>) {
        *self
            .state
            .name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name);
    }

    /// Names do not stick on this connection: stop naming it.
    pub(super) fn refuse(&self) {
        self.state.refused.store(true, Ordering::Relaxed);
    }

    pub(super) fn turn(&self) -> Option<NamingTurn> {
        let free = !self.state.refused.load(Ordering::Relaxed)
            && !self.state.naming.swap(true, Ordering::AcqRel);
        free.then(|| NamingTurn {
            state: self.state.clone(),
        })
    }
}
