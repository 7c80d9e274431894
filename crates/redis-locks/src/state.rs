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
    /// [`Holder::waited_for`], which stays for the holder's whole tenure. On a Redis Cluster
    /// it is 0: waiters there listen on sharded channels (`SSUBSCRIBE`), which `PUBSUB
    /// NUMSUB` does not count.
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

/// Which side of a lock a hold is on.
///
/// ```
/// use redis_locks::HoldMode;
/// assert_eq!(HoldMode::Read.to_string(), "read");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldMode {
    /// A shared hold: an [`RwLock`](crate::RwLock)'s reader.
    Read,
    /// An exclusive hold: an `RwLock`'s writer or a
    /// [`ReentrantMutex`](crate::ReentrantMutex)'s holder (one hold per re-entry).
    Write,
}

impl std::fmt::Display for HoldMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HoldMode::Read => "read",
            HoldMode::Write => "write",
        })
    }
}

/// One live hold of a [`ReentrantMutex`](crate::ReentrantMutex) or an
/// [`RwLock`](crate::RwLock): one guard's share of the lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HoldInfo {
    /// Read or write.
    pub mode: HoldMode,
    /// The owner id the hold was taken for (see [`OwnerId`](crate::OwnerId)).
    pub owner: String,
    /// How long the hold's own lease still runs on the server's clock.
    pub lease_remaining: Duration,
    /// The hold's fencing token (a writer's re-entries share its first token); `None` for a
    /// lone read hold taken without a script, whose token the server does not keep (its
    /// guard has it: [`RwLockReadGuard::fencing_token`](crate::RwLockReadGuard::fencing_token)).
    pub fencing_token: Option<FencingToken>,
}

/// The state of a [`ReentrantMutex`](crate::ReentrantMutex) or an [`RwLock`](crate::RwLock),
/// read in one step on the server.
///
/// ```
/// use redis_locks::HoldsState;
/// let free = HoldsState::default();
/// assert!(free.holds.is_empty() && free.kind.is_none());
/// assert_eq!(free.hold_count(), 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HoldsState {
    /// What the name is in use as while held: `"rwlock"` or `"reentrant"`; `None` when free.
    pub kind: Option<String>,
    /// The live holds, writers first, then by fencing token.
    pub holds: Vec<HoldInfo>,
    /// The latest fencing token handed out for this lock; `None` if it was never taken.
    pub fencing_counter: Option<FencingToken>,
    /// How many readers wait in line (their place lease still runs).
    pub waiting_readers: u64,
    /// How many writers (or `ReentrantMutex` owners) wait in line.
    pub waiting_writers: u64,
}

impl HoldsState {
    /// How many holds are live (a `ReentrantMutex`'s hold count: its owner's re-entries).
    pub fn hold_count(&self) -> usize {
        self.holds.len()
    }

    /// The writer's owner id (a `ReentrantMutex`'s holder), if a write hold is live.
    pub fn writer(&self) -> Option<&str> {
        self.holds
            .iter()
            .find(|hold| hold.mode == HoldMode::Write)
            .map(|hold| hold.owner.as_str())
    }
}
