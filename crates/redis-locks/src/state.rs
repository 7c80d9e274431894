//! What a lock looks like on the server right now.

use std::time::Duration;

use crate::token::FencingToken;

/// A lock's state as read in one step on the server.
///
/// ```
/// use redis_locks::LockState;
/// let free = LockState::default();
/// assert!(free.holder.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct LockState {
    /// Who holds the lock, if anyone.
    pub holder: Option<Holder>,
    /// The latest fencing token handed out for this lock: the holder's token, or a later
    /// one (an attempt refused on its fast path takes a token too, so the holder's own
    /// token is at most this; [`MutexGuard::fencing_token`](crate::MutexGuard::fencing_token)
    /// tells the holder its own). The next holder's token is greater. `None` if the lock was
    /// never taken (or the server lost its counter).
    pub fencing_counter: Option<FencingToken>,
    /// How many clients wait for the lock right now: the connections subscribed to its wake
    /// channel (one per [`Client`](crate::Client) with a waiter of this lock waiting, which
    /// is one per process unless a process makes several clients). A client stays subscribed
    /// for about a second after its last waiter of the lock is done (it took the lock, or
    /// gave up), so a process that takes the lock again and again keeps counting. A client
    /// whose process exited or was killed stops counting as soon as the server sees its
    /// connection close, at once on the same host; a host that vanished from the network
    /// counts until the server's `tcp-keepalive` notices (300 s by default). Unlike
    /// [`Holder::waited_for`], which stays for the holder's whole tenure.
    pub listeners: u64,
}

/// The current holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's owner token.
    pub owner: String,
    /// How long its lease still runs on the server's clock; `None` if the key has no expiry
    /// (it was not written by this library).
    pub lease_remaining: Option<Duration>,
    /// Whether the lock is marked for a wake-up, so that its release publishes one (a release
    /// nobody waits for publishes nothing): a waiter found it held
    /// at some time during this holder's tenure, or the holder was granted it with waiters of
    /// its own process queued behind it. The mark stays until the release, even when that
    /// waiter has died or given up since: for who waits now, see
    /// [`LockState::listeners`]; for how many wait in line, see
    /// [`FairMutex::waiting`](crate::FairMutex::waiting) (which counts a `Mutex`'s waiting
    /// processes of the same name too, one each).
    pub waited_for: bool,
}
