//! What a node knows of what its server has loaded: the function library, and each script
//! sent with `EVALSHA`. Every load is single-flight: the first caller that finds a thing not
//! loaded leads its load; callers that come meanwhile wait for that load to end, then call.
//! A leader that fails or is cancelled leaves the thing not loaded, so the next caller leads
//! again: a failed load poisons nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex as Gate, MutexGuard};

/// The low bits of a [`Loading`]'s word.
const UNKNOWN: u64 = 0;
const LOADED: u64 = 1;
const REFUSED: u64 = 2;
const STATE: u64 = 3;

/// How long calls do without a thing whose load failed for a reason that may pass (a
/// master of the cluster out of reach, a server out of memory), before one loads it again.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// One thing to load (the library, or one script), single-flight.
#[derive(Default)]
pub(super) struct Loading {
    /// The state in the two low bits, the count of loads above them: a call remembers the
    /// count it was sent under, so that a call that found the thing missing undoes only the
    /// load it saw, not a newer one.
    word: AtomicU64,
    /// Held by the caller that leads the load.
    gate: Gate<()>,
    /// After a failed load: calls do without the thing until then.
    paused_until: Mutex<Option<Instant>>,
}

/// What a caller does next.
pub(super) enum Ready<'a> {
    /// Call: the thing is loaded (`epoch` says which load).
    Call(u64),
    /// Load it, with the call if it can: this caller leads. Others wait until it is dropped.
    Lead(Lead<'a>),
    /// The server refused the load, or a load failed a moment ago: do without.
    Without,
}

/// The turn to load a thing; dropping it without [`Lead::loaded`] or [`Lead::refused`]
/// leaves the thing not loaded.
pub(super) struct Lead<'a> {
    loading: &'a Loading,
    _turn: MutexGuard<'a, ()>,
}

impl Lead<'_> {
    /// The load succeeded.
    pub(super) fn loaded(self) {
        // A refusal that came meanwhile (a call whose FCALL the ACL refused) stands.
        let _ = self
            .loading
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                (word & STATE != REFUSED).then_some((((word >> 2) + 1) << 2) | LOADED)
            });
    }

    /// The load failed for a reason that may pass: calls do without the thing for a
    /// moment, then one loads it again.
    pub(super) fn failed(self) {
        *self
            .loading
            .paused_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Instant::now() + PAUSE_AFTER_FAILURE);
    }

    /// The server refused the load for good (no such command, no permission, a name taken).
    pub(super) fn refused(self) {
        let word = self.loading.word.load(Ordering::Acquire);
        self.loading
            .word
            .store((word & !STATE) | REFUSED, Ordering::Release);
    }
}

impl Loading {
    /// Whether to call, lead the load, or do without; waits while another caller leads.
    pub(super) async fn ready(&self) -> Ready<'_> {
        if let Some(ready) = self.settled() {
            return ready;
        }
        let turn = self.gate.lock().await;
        self.settled().unwrap_or(Ready::Lead(Lead {
            loading: self,
            _turn: turn,
        }))
    }

    /// The turn to load now, without waiting for the load under way, if any: for a call
    /// that found the thing missing on a server the others' load did not reach (another
    /// shard of a cluster).
    pub(super) async fn lead(&self) -> Lead<'_> {
        Lead {
            loading: self,
            _turn: self.gate.lock().await,
        }
    }

    fn settled(&self) -> Option<Ready<'_>> {
        let word = self.word.load(Ordering::Acquire);
        match word & STATE {
            LOADED => Some(Ready::Call(word >> 2)),
            REFUSED => Some(Ready::Without),
            _ => self.paused().then_some(Ready::Without),
        }
    }

    /// Whether a load failed a moment ago.
    fn paused(&self) -> bool {
        let mut until = self
            .paused_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *until {
            Some(at) if Instant::now() < at => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    /// A call sent under load `epoch` found the thing missing (the server lost it): unless
    /// a newer load is done already, the next caller loads it again.
    pub(super) fn lost(&self, epoch: u64) {
        let _ = self.word.compare_exchange(
            (epoch << 2) | LOADED,
            (epoch << 2) | UNKNOWN,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The load the thing is loaded under, if it is (without waiting for a load under way).
    pub(super) fn loaded(&self) -> Option<u64> {
        let word = self.word.load(Ordering::Acquire);
        (word & STATE == LOADED).then_some(word >> 2)
    }

    /// Whether the server refused the load for good.
    pub(super) fn is_refused(&self) -> bool {
        self.word.load(Ordering::Acquire) & STATE == REFUSED
    }

    /// Marks the load refused: from the start (the client asked for `EVALSHA`), or when the
    /// server refuses to call what it loaded.
    pub(super) fn refuse(&self) {
        self.word.store(REFUSED, Ordering::Release);
    }
}

/// What a node has loaded: the library, and the scripts it sent with `EVALSHA`.
pub(super) struct Loads {
    pub(super) library: Loading,
    scripts: Mutex<HashMap<String, Arc<Loading>>>,
}

impl Loads {
    /// Nothing loaded yet; the library is never tried unless `functions`.
    pub(super) fn new(functions: bool) -> Loads {
        let loads = Loads {
            library: Loading::default(),
            scripts: Mutex::default(),
        };
        if !functions {
            loads.library.refuse();
        }
        loads
    }

    /// Records that the script whose SHA-1 is `hash` was loaded (by a load that was not
    /// single-flight: [`Node::load_scripts`](super::Node::load_scripts)).
    pub(super) fn script_loaded(&self, hash: &str) {
        let loading = self.script(hash);
        let word = loading.word.load(Ordering::Acquire);
        if word & STATE != LOADED {
            loading
                .word
                .store((((word >> 2) + 1) << 2) | LOADED, Ordering::Release);
        }
    }

    /// The loading of the script whose SHA-1 is `hash`.
    pub(super) fn script(&self, hash: &str) -> Arc<Loading> {
        let mut scripts = self
            .scripts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(loading) = scripts.get(hash) {
            return loading.clone();
        }
        let loading = Arc::new(Loading::default());
        scripts.insert(hash.to_string(), loading.clone());
        loading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_while_a_load_is_led_stands() {
        let loading = Loading::default();
        let Ready::Lead(lead) = loading.ready().await else {
            panic!("the first caller leads");
        };
        loading.refuse();
        lead.loaded();
        assert!(loading.is_refused());
        assert!(matches!(loading.ready().await, Ready::Without));
    }

    #[tokio::test]
    async fn a_failed_load_pauses_loading_then_lets_one_lead() {
        let loading = Loading::default();
        let Ready::Lead(lead) = loading.ready().await else {
            panic!("the first caller leads");
        };
        lead.failed();
        assert!(matches!(loading.ready().await, Ready::Without));
        assert!(!loading.is_refused());
        *loading.paused_until.lock().unwrap() = Some(Instant::now());
        assert!(matches!(loading.ready().await, Ready::Lead(_)));
    }

    #[tokio::test]
    async fn one_leads_the_others_wait_and_a_dropped_lead_poisons_nothing() {
        let loading = Loading::default();
        let Ready::Lead(lead) = loading.ready().await else {
            panic!("the first caller leads");
        };
        // Another caller waits while the first leads.
        let waiting = loading.ready();
        tokio::pin!(waiting);
        assert!(futures_poll_once(waiting.as_mut()).await.is_none());
        drop(lead);
        // The leader went away without a load: the waiter leads now.
        let Ready::Lead(lead) = waiting.await else {
            panic!("the next caller leads");
        };
        lead.loaded();
        let Ready::Call(epoch) = loading.ready().await else {
            panic!("loaded");
        };
        // A call that found it missing makes the next caller lead; an older epoch does not.
        loading.lost(epoch + 7);
        assert!(matches!(loading.ready().await, Ready::Call(_)));
        loading.lost(epoch);
        let Ready::Lead(lead) = loading.ready().await else {
            panic!("lost: load again");
        };
        lead.refused();
        assert!(matches!(loading.ready().await, Ready::Without));
        assert!(loading.is_refused());
    }

    /// Polls `future` once: its output, if ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
                std::task::Poll::Ready(out) => Some(out),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
