//! The waiters of one lock inside this process: they take turns, and only the one whose
//! turn it is talks to Redis.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::key::LockKeys;
use crate::lease::LeaseState;
use crate::node::{Node, Subscription};
use crate::token::OwnerToken;

/// The waiters of one lock inside this process: a FIFO turn (only the holder of the turn
/// talks to Redis), the wake-up subscription they share while any of them waits, and their
/// one place in the lock's queue on the server.
pub(crate) struct LocalQueue {
    turn: tokio::sync::Mutex<()>,
    subscription: OnceCell<Subscription>,
    /// The lease of a guard of this process that holds the lock with its key marked for a
    /// wake-up (see [`LocalHolder`]).
    holder: StdMutex<Option<Arc<LeaseState>>>,
    /// The waiters' id in the lock's queue on the server: random, and new with every queue
    /// (a queue lives while any waiter of the lock in this process waits), so that a late
    /// leave of an earlier wait never takes the place of a later one.
    id: Arc<str>,
    /// Where the place is, from the moment a waiting attempt that may take one goes out until
    /// a grant takes it out; given up when the last waiter goes.
    place: StdMutex<Option<(Node, Arc<LockKeys>)>>,
    /// The owner token the waiters ask with, for a release to hand the lock to (a `Mutex`'s).
    handover: StdMutex<Handover>,
}

/// The owner token this process's waiters of a lock ask with while they wait, which they
/// register with their place so that a release can hand the lock straight to it (see
/// `waiters.lua`, `hand_over`). Every waiter whose turn it is asks with the same token, so a
/// lock handed to it while one waiter gave up is taken by the next.
#[derive(Default)]
struct Handover {
    /// Made with the first waiting attempt that asks for one; taken by the grant.
    owner: Option<OwnerToken>,
    /// When the latest attempt with `owner` whose refusal came back was sent, and the place
    /// lease it asked for: the server renewed the place then, and a lock handed over since
    /// lasts on the server as long as that place would have.
    placed: Option<(Instant, Duration)>,
}

impl Default for LocalQueue {
    fn default() -> Self {
        LocalQueue {
            turn: tokio::sync::Mutex::new(()),
            subscription: OnceCell::new(),
            holder: StdMutex::new(None),
            id: OwnerToken::random().as_str().into(),
            place: StdMutex::new(None),
            handover: StdMutex::new(Handover::default()),
        }
    }
}

impl Drop for LocalQueue {
    /// The last waiter is gone (granted, timed out, failed or cancelled): a place still held
    /// is given up in the background, so that no release wakes a process where nobody waits.
    fn drop(&mut self) {
        let place = self
            .place
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some((node, keys)) = place else {
            return;
        };
        let id = self.id.clone();
        let owner = self.handover_owner();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                super::leave_queue(&node, &keys, &id, owner.as_ref()).await;
            });
        }
    }
}

/// A guard that took the lock from the head of its process's local queue, with waiters
/// behind it, and marked its key at once: its release publishes a wake-up, so the next
/// waiter need not ask Redis while the guard holds. Dropping it says the guard is done
/// holding — before its release is sent, so a waiter that still sees it is certain to be
/// listening when the wake-up comes.
///
/// It does not keep the queue alive: with no waiter left, the queue (and this note) goes.
pub(crate) struct LocalHolder {
    queue: Weak<LocalQueue>,
    state: Arc<LeaseState>,
}

impl LocalHolder {
    pub(crate) fn new(queue: &Arc<LocalQueue>, state: Arc<LeaseState>) -> LocalHolder {
        *queue.holder.lock().unwrap_or_else(|p| p.into_inner()) = Some(state.clone());
        LocalHolder {
            queue: Arc::downgrade(queue),
            state,
        }
    }
}

impl Drop for LocalHolder {
    fn drop(&mut self) {
        let Some(queue) = self.queue.upgrade() else {
            return;
        };
        let mut holder = queue.holder.lock().unwrap_or_else(|p| p.into_inner());
        // Only this guard's note: a later holder's stays.
        if holder
            .as_ref()
            .is_some_and(|state| Arc::ptr_eq(state, &self.state))
        {
            *holder = None;
        }
    }
}

impl LocalQueue {
    /// The waiters' id in the lock's queue on the server.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// A waiting attempt that may take a place in the lock `keys` on `node` is about to go
    /// out.
    pub(crate) fn placing(&self, node: &Node, keys: &Arc<LockKeys>) {
        *self.place.lock().unwrap_or_else(|p| p.into_inner()) = Some((node.clone(), keys.clone()));
    }

    /// A grant took the place out.
    pub(crate) fn unplaced(&self) {
        self.place.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Gives the place up now, if one is held (the last waiter's wait ended without the lock),
    /// with a lock handed to the waiters' owner token that none of them took.
    pub(crate) async fn leave(&self) {
        let place = self.place.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((node, keys)) = place {
            let owner = self.handover_owner();
            super::leave_queue(&node, &keys, &self.id, owner.as_ref()).await;
        }
    }

    fn handover(&self) -> std::sync::MutexGuard<'_, Handover> {
        self.handover.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The owner token registered for a handover, if any (taken: the place is being given up).
    fn handover_owner(&self) -> Option<OwnerToken> {
        let mut handover = self.handover();
        handover.placed = None;
        handover.owner.take()
    }

    /// The owner token the waiters ask with (and register for a handover), made if needed.
    pub(crate) fn asking_owner(&self) -> OwnerToken {
        self.handover()
            .owner
            .get_or_insert_with(OwnerToken::random)
            .clone()
    }

    /// An attempt with `owner`, sent at `sent_at` asking for a place lease of `place_lease`,
    /// was refused: the server renewed the place (and `owner`'s registration) then.
    pub(crate) fn refused(&self, owner: &OwnerToken, sent_at: Instant, place_lease: Duration) {
        let mut handover = self.handover();
        if handover.owner.as_ref() == Some(owner)
            && handover.placed.is_none_or(|(at, _)| at <= sent_at)
        {
            handover.placed = Some((sent_at, place_lease));
        }
    }

    /// `owner` was granted the lock: the next waiting attempt asks with a new token.
    pub(crate) fn granted(&self, owner: &OwnerToken) {
        let mut handover = self.handover();
        if handover.owner.as_ref() == Some(owner) {
            *handover = Handover::default();
        }
    }

    /// Takes a handover to `owner` if that is the waiters' token and `valid` says the lease
    /// counted from its place (when the place was renewed, for how long) still holds: returns
    /// the token and that place, and the next waiting attempt asks with a new token. Otherwise
    /// the token stays, and the next attempt (which asks with it) finds the lock its own.
    pub(crate) fn take_handover(
        &self,
        owner: &str,
        valid: impl FnOnce(Instant, Duration) -> bool,
    ) -> Option<(OwnerToken, (Instant, Duration))> {
        let mut handover = self.handover();
        let placed = handover.placed?;
        if handover.owner.as_ref()?.as_str() != owner || !valid(placed.0, placed.1) {
            return None;
        }
        let token = handover.owner.take()?;
        handover.placed = None;
        Some((token, placed))
    }

    /// How long a guard of this process is still certain to hold the lock with its key
    /// marked (see [`LocalHolder`]); `None` when no such guard holds it.
    pub(crate) fn local_holder_lease(&self) -> Option<Duration> {
        let holder = self.holder.lock().unwrap_or_else(|p| p.into_inner());
        let state = holder.as_ref()?;
        if state.loss().is_some() {
            return None;
        }
        Some(
            state
                .status()
                .deadline
                .saturating_duration_since(Instant::now()),
        )
    }

    /// The subscription, made (and confirmed, or given up on after `confirm_within`) now if
    /// needed.
    pub(crate) async fn subscribe(
        &self,
        node: &Node,
        channel: &str,
        confirm_within: Duration,
    ) -> &Subscription {
        self.subscription
            .get_or_init(|| node.subscribe(channel, confirm_within))
            .await
    }

    /// This waiter's turn, in FIFO order: `None` when `deadline` passes first (or has passed
    /// already and the turn is not free).
    pub(crate) async fn take_turn(
        &self,
        deadline: Option<Instant>,
    ) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        if let Ok(turn) = self.turn.try_lock() {
            return Some(turn);
        }
        match deadline {
            None => Some(self.turn.lock().await),
            Some(deadline) if deadline <= Instant::now() => None,
            Some(deadline) => tokio::time::timeout_at(deadline, self.turn.lock())
                .await
                .ok(),
        }
    }
}

/// Every lock's [`LocalQueue`] in this client, kept while a waiter holds it; by kind of
/// primitive, then lock name (two kinds of lock on one name do not share a turn).
#[derive(Default)]
pub(crate) struct LocalQueues {
    kinds: StdMutex<HashMap<&'static str, HashMap<String, Weak<LocalQueue>>>>,
}

impl LocalQueues {
    /// Whether a waiter of the `kind` lock `lock` holds its queue now.
    pub(crate) fn contains(&self, kind: &'static str, lock: &str) -> bool {
        let kinds = self.kinds.lock().expect("never poisoned");
        kinds
            .get(kind)
            .and_then(|queues| queues.get(lock))
            .is_some_and(|queue| queue.strong_count() > 0)
    }

    /// The queue of the `kind` lock `lock`, made if no waiter holds one now.
    pub(crate) fn get(&self, kind: &'static str, lock: &str) -> Arc<LocalQueue> {
        let mut kinds = self.kinds.lock().expect("never poisoned");
        let queues = kinds.entry(kind).or_default();
        if let Some(queue) = queues.get(lock).and_then(Weak::upgrade) {
            return queue;
        }
        if queues.len() >= 1024 {
            queues.retain(|_, queue| queue.strong_count() > 0);
        }
        let queue = Arc::new(LocalQueue::default());
        queues.insert(lock.to_string(), Arc::downgrade(&queue));
        queue
    }
}
