//! What a lock looks like on the server right now.

use std::time::Duration;

use crate::client::Client;
use crate::error::Result;
use crate::key::LockKeys;
use crate::scripts::MUTEX_INSPECT;
use crate::token::FencingToken;

/// Reads a lock's state in one script call (the same layout for `Mutex` and `FairMutex`).
pub(crate) async fn inspect(client: &Client, keys: &LockKeys) -> Result<LockState> {
    let (owner, pttl, counter): (String, i64, u64) = client
        .run_script("inspect", &MUTEX_INSPECT, &[keys.lock(), keys.fence()], &[])
        .await?;
    let fencing_counter = (counter > 0).then_some(FencingToken::new(counter));
    let holder = (!owner.is_empty()).then(|| Holder {
        owner,
        fencing_token: FencingToken::new(counter),
        lease_remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
    });
    Ok(LockState {
        holder,
        fencing_counter,
    })
}

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
