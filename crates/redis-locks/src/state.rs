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
    /// The token of the latest acquisition, `None` if the lock was never taken (or the
    /// server lost its counter).
    pub fencing_counter: Option<FencingToken>,
}

/// The current holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's owner token.
    pub owner: String,
    /// The holder's fencing token.
    pub fencing_token: FencingToken,
    /// How long its lease still runs on the server's clock; `None` if the key has no expiry
    /// (it was not written by this library).
    pub lease_remaining: Option<Duration>,
}
