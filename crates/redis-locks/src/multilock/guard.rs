//! The guard of a [`MultiLock`](crate::MultiLock): every lock, with a token per name.

use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;

use crate::error::{LostReason, Result};
use crate::key::LockKeys;
use crate::lease::{Lease, Released};
use crate::token::FencingToken;

/// The locks of one slot, held under one lease.
pub(super) struct Part {
    lease: Lease,
    /// Each lock's name and fencing token, in the global order.
    tokens: Vec<(String, FencingToken)>,
}

impl Part {
    pub(super) fn new(lease: Lease, locks: &[LockKeys], tokens: Vec<FencingToken>) -> Part {
        let tokens = locks
            .iter()
            .map(|keys| keys.name().to_string())
            .zip(tokens)
            .collect();
        Part { lease, tokens }
    }

    pub(super) async fn release(self) -> Result<Released> {
        self.lease.release().await
    }
}

/// Proof that this process holds every lock of a [`MultiLock`](crate::MultiLock): a fencing
/// token per name, and a lease (per cluster slot; one on one server) renewed by the
/// watchdog while the guard lives.
///
/// [`lost`](Self::lost) resolves the moment any lock is lost: stop acting on all of them
/// then. Dropping the guard releases every lock in the background; prefer
/// [`release`](Self::release), which says whether they were all still held.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let guard = client.multi_lock(["buyer:1", "seller:2", "item:3"])?.lock().await?;
/// for (name, token) in guard.fencing_tokens() {
///     println!("{name}: write with token {token}");
/// }
/// assert!(guard.lease_remaining() > std::time::Duration::from_secs(25));
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    parts: Vec<Part>,
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("fencing_tokens", &self.fencing_tokens().collect::<Vec<_>>())
            .field("lease_remaining", &self.lease_remaining())
            .field("watchdog", &self.is_renewed())
            .finish()
    }
}

impl MultiLockGuard {
    pub(super) fn new(parts: Vec<Part>) -> MultiLockGuard {
        MultiLockGuard { parts }
    }

    /// The names held, in the order they were taken.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fencing_tokens().map(|(name, _)| name)
    }

    /// Each name with its fencing token (greater than that of every earlier holder of that
    /// lock), in the order they were taken.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, FencingToken)> {
        self.parts.iter().flat_map(|part| {
            part.tokens
                .iter()
                .map(|(name, token)| (name.as_str(), *token))
        })
    }

    /// The fencing token of the lock `name`, if this guard holds it.
    pub fn fencing_token(&self, name: &str) -> Option<FencingToken> {
        self.fencing_tokens()
            .find(|(held, _)| *held == name)
            .map(|(_, token)| token)
    }

    /// The instant (local monotonic clock) until which every lock is certainly held: the
    /// earliest of the parts' lease deadlines.
    pub fn lease_deadline(&self) -> Instant {
        self.parts
            .iter()
            .map(|part| part.lease.deadline())
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// How much of the lease is certainly left for every lock; zero once any may have run
    /// out.
    pub fn lease_remaining(&self) -> Duration {
        self.lease_deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Resolves the moment any lock is known lost, or can no longer be proven held (as
    /// [`MutexGuard::lost`](crate::MutexGuard::lost) for each), with the first reason. The
    /// future does not borrow the guard; once the guard is released or dropped it resolves
    /// with [`LostReason::Released`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        let parts: Vec<_> = self
            .parts
            .iter()
            .map(|part| Box::pin(part.lease.lost()))
            .collect();
        async move { select_all(parts).await.0 }
    }

    /// Why a lock is not held any more, if that is known now (a passed lease deadline
    /// counts); `None` while every lock is held.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.parts.iter().find_map(|part| part.lease.lost_reason())
    }

    /// How many replicas acknowledged the last confirmed grant or renewal of every lock (the
    /// fewest of the slots'), when the options ask for replicated acquisition; `None`
    /// otherwise.
    pub fn replicas(&self) -> Option<u32> {
        self.parts
            .iter()
            .map(|part| part.lease.replicas())
            .min()
            .flatten()
    }

    /// Whether the watchdog renews the leases.
    pub fn is_renewed(&self) -> bool {
        self.parts.iter().all(|part| part.lease.is_renewed())
    }

    /// Sets every lock's lease to `lease` from now, if they are still this guard's: one
    /// owner-checked request per cluster slot, all at once, each all or none for its slot (a
    /// slot that lost a lock is left as it was; the other slots are extended).
    ///
    /// # Errors
    /// As [`MutexGuard::extend`](crate::MutexGuard::extend), for the first lock that failed.
    ///
    /// # Cancel safety
    /// As [`MutexGuard::extend`](crate::MutexGuard::extend).
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let outcomes = join_all(self.parts.iter().map(|part| part.lease.extend(lease))).await;
        outcomes.into_iter().collect()
    }

    /// Releases every lock at once and says whether they were all still this guard's;
    /// every lock still held is released whatever the others say.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) naming a lock whose lease had run out or
    /// that another owner holds now; [`Error::Connection`](crate::Error::Connection) when the
    /// outcome is unknown (the leases then end the locks).
    ///
    /// # Cancel safety
    /// Dropping the future before the replies still releases the locks, in the background.
    pub async fn release(self) -> Result<Released> {
        let outcomes = join_all(self.parts.into_iter().map(Part::release)).await;
        outcomes
            .into_iter()
            .collect::<Result<Vec<Released>>>()
            .map(|_| Released::Freed)
    }
}
