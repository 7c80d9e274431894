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

use super::placed::PlaceRenewal;

/// The waiters of one lock inside this process: a FIFO turn (only the holder of the turn
/// talks to Redis), the wake-up subscription they share while any of them waits, and their
/// one place in the lock's queue on the server.
pub(crate) struct LocalQueue {
    turn: Arc<tokio::sync::Mutex<()>>,
    subscription: OnceCell<Subscription>,
    /// The lease of a guard of this process that holds the lock with its key marked for a
    /// wake-up (see [`LocalHolder`]).
    holder: StdMutex<Option<Arc<LeaseState>>>,
    /// The waiters' id in the lock's queue on the server: random, and new with every queue
    /// (a queue lives while any waiter of the lock in this process waits), so that a late
    /// leave of an earlier wait never takes the place of a later one; it ends in `@` and the
    /// client's address, so its wake-ups go to this client alone.
    id: Arc<str>,
    /// Where the place is, from the moment a waiting attempt that may take one goes out until
    /// a grant takes it out; given up when the last waiter goes.
    place: StdMutex<Option<(Node, Arc<LockKeys>)>>,
    /// The owner token the waiters ask with, for a release to hand the lock to (a `Mutex`'s).
    handover: StdMutex<Handover>,
}

/// The owner token this process's waiters of a lock ask with while they wait, which they
/// register with their place so that a release can hand the lock straight to it (see
/// `queue.lua`, `hand_over`). Every waiter whose turn it is asks with the same token, so a
/// lock handed to it while one waiter gave up is taken by the next.
#[derive(Default)]
struct Handover {
    /// Made with the first waiting attempt that asks for one; taken by the grant.
    owner: Option<OwnerToken>,
    /// The nonce of the next attempt (each attempt registers its own with its place).
    next_nonce: u64,
    /// The latest attempt with `owner` whose refusal came back.
    placed: Option<PlaceRenewal>,
}

impl LocalQueue {
    /// A new queue of the waiters of one lock in the client whose wake-up address is
    /// `address` ([`Node::address`]).
    fn new(address: &str) -> Self {
        LocalQueue {
            turn: Arc::new(tokio::sync::Mutex::new(())),
            subscription: OnceCell::new(),
            holder: StdMutex::new(None),
            id: OwnerToken::addressed(address).as_str().into(),
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

/// The turn of one waiter of a lock in this process: only its holder talks to Redis (and asks
/// with the line's owner token, [`LocalQueue::asking`]).
pub(crate) type Turn = tokio::sync::OwnedMutexGuard<()>;

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
            drop(holder);
            // The waiter whose turn it is sleeps until this guard is done: wake it here. The
            // release's own wake-up may never reach this client (it is addressed to the
            // first in line, perhaps another process), and this waiter has no place in line
            // until it asks.
            if let Some(subscription) = queue.subscription.get() {
                subscription.wake_here();
            }
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

    /// The owner token the waiters ask with (and register for a handover), made if needed,
    /// and a new nonce for the attempt about to go out. Only the waiter whose turn it is asks
    /// with it.
    pub(crate) fn asking(&self) -> (OwnerToken, u64) {
        let mut handover = self.handover();
        let nonce = handover.next_nonce;
        handover.next_nonce += 1;
        let owner = handover
            .owner
            .get_or_insert_with(OwnerToken::random)
            .clone();
        (owner, nonce)
    }

    /// The attempt with `owner` and `nonce`, sent at `sent_at` asking for a place lease of
    /// `place_lease`, was refused: the server renewed the place (and registered `nonce`) then.
    pub(crate) fn refused(
        &self,
        owner: &OwnerToken,
        nonce: u64,
        sent_at: Instant,
        place_lease: Duration,
    ) {
        let mut handover = self.handover();
        if handover.owner.as_ref() == Some(owner) {
            handover.placed = Some(PlaceRenewal {
                at: sent_at,
                lease: place_lease,
                nonce,
            });
        }
    }

    /// `owner` was granted the lock: the next waiting attempt asks with a new token.
    pub(crate) fn granted(&self, owner: &OwnerToken) {
        let mut handover = self.handover();
        if handover.owner.as_ref() == Some(owner) {
            handover.owner = None;
            handover.placed = None;
        }
    }

    /// Takes a handover to `owner` under `nonce`, if that is the waiters' token and the nonce
    /// of their latest refused attempt (a grant under an older nonce was made before that
    /// refusal, which found the lock not theirs: it is void), and `valid` says the lease
    /// counted from that attempt's sending, for its place lease, still holds. Returns the
    /// token and that place (when sent, for how long); the next waiting attempt asks with a
    /// new token. Otherwise the token stays, and the next attempt, which asks with it, finds
    /// a grant to it its own.
    pub(crate) fn take_handover(
        &self,
        owner: &str,
        nonce: u64,
        valid: impl FnOnce(Instant, Duration) -> bool,
    ) -> Option<(OwnerToken, (Instant, Duration))> {
        let mut handover = self.handover();
        let (at, lease) = handover.placed?.counts(nonce)?;
        if handover.owner.as_ref()?.as_str() != owner || !valid(at, lease) {
            return None;
        }
        let token = handover.owner.take()?;
        handover.placed = None;
        Some((token, (at, lease)))
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
    pub(crate) async fn take_turn(&self, deadline: Option<Instant>) -> Option<Turn> {
        if let Some(turn) = self.try_turn() {
            return Some(turn);
        }
        let turn = self.turn.clone();
        match deadline {
            None => Some(turn.lock_owned().await),
            Some(deadline) if deadline <= Instant::now() => None,
            Some(deadline) => tokio::time::timeout_at(deadline, turn.lock_owned())
                .await
                .ok(),
        }
    }

    /// This waiter's turn if it is free now.
    pub(crate) fn try_turn(&self) -> Option<Turn> {
        self.turn.clone().try_lock_owned().ok()
    }
}

/// Every lock's [`LocalQueue`] in this client, kept while a waiter holds it; by kind of
/// primitive, then lock name (two kinds of lock on one name do not share a turn).
pub(crate) struct LocalQueues {
    kinds: StdMutex<HashMap<&'static str, HashMap<String, Weak<LocalQueue>>>>,
    /// The client's wake-up address ([`Node::address`]).
    address: Arc<str>,
}

impl LocalQueues {
    /// The queues of the client whose wake-up address is `address`.
    pub(crate) fn new(address: Arc<str>) -> LocalQueues {
        LocalQueues {
            kinds: StdMutex::default(),
            address,
        }
    }

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
        let queue = Arc::new(LocalQueue::new(&self.address));
        queues.insert(lock.to_string(), Arc::downgrade(&queue));
        queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACE: Duration = Duration::from_secs(2);
    const ALWAYS: fn(Instant, Duration) -> bool = |_, _| true;

    #[test]
    fn a_handover_is_taken_only_under_the_nonce_of_the_latest_refusal() {
        let queue = LocalQueue::new("0123456789abcdef");
        let (owner, first) = queue.asking();
        let sent = Instant::now();
        queue.refused(&owner, first, sent, PLACE);
        let (same, second) = queue.asking();
        assert_eq!(same, owner, "one token for the line");
        assert_ne!(second, first, "a nonce per attempt");
        // The second attempt's refusal came back: a grant made under the first nonce was
        // made before it, and that refusal found the lock not the line's.
        queue.refused(&owner, second, sent + Duration::from_millis(5), PLACE);
        assert!(queue.take_handover(owner.as_str(), first, ALWAYS).is_none());
        // Another token, or a lease that no longer holds, is not taken either.
        assert!(queue.take_handover("another", second, ALWAYS).is_none());
        assert!(
            queue
                .take_handover(owner.as_str(), second, |_, _| false)
                .is_none()
        );
        let (taken, (at, lease)) = queue.take_handover(owner.as_str(), second, ALWAYS).unwrap();
        assert_eq!(taken, owner);
        assert_eq!((at, lease), (sent + Duration::from_millis(5), PLACE));
        // Taken: the next attempt asks with a new token, and nothing more is taken.
        assert!(
            queue
                .take_handover(owner.as_str(), second, ALWAYS)
                .is_none()
        );
        assert_ne!(queue.asking().0, owner);
    }

    #[test]
    fn a_refusal_before_any_reply_or_of_another_token_places_nothing() {
        let queue = LocalQueue::new("0123456789abcdef");
        let (owner, nonce) = queue.asking();
        // No refusal came back yet: nothing to count a handed lease from.
        assert!(queue.take_handover(owner.as_str(), nonce, ALWAYS).is_none());
        let stranger = OwnerToken::random();
        queue.refused(&stranger, nonce, Instant::now(), PLACE);
        assert!(queue.take_handover(owner.as_str(), nonce, ALWAYS).is_none());
        // A grant to the line's token by its own attempt ends the token.
        queue.refused(&owner, nonce, Instant::now(), PLACE);
        queue.granted(&owner);
        assert!(queue.take_handover(owner.as_str(), nonce, ALWAYS).is_none());
    }
}
