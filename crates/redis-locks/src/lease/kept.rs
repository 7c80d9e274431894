//! What the server kept of a grant, asked when a renewal or a release finds the lock gone or
//! taken: whether a break took it (its mark, written by `breaking/`), and whether the fencing
//! counter still reaches the grant's token (no restart, flush or failover lost the data).

use crate::error::{Phase, Result};
use crate::key::LockKeys;
use crate::node::Node;
use crate::token::{FencingToken, OwnerToken};

/// The companion set of owner tokens a break took the lock from (`breaking/break.lua`,
/// `KEYS[3]`).
pub(crate) const BROKEN_MARK: &str = "broken";

/// Whether a break took the lock `keys` from `owner` (its mark still lasts): asked when a
/// renewal or a release finds the lock gone or taken.
///
/// # Errors
/// [`Error::Connection`](crate::Error::Connection); [`Error::WrongType`](crate::Error::WrongType)
/// when the mark is not a set.
pub(crate) async fn was_broken(node: &Node, keys: &LockKeys, owner: &OwnerToken) -> Result<bool> {
    let mark = keys.companion(BROKEN_MARK);
    let command = redis::cmd("SISMEMBER")
        .arg(&mark)
        .arg(owner.as_str())
        .to_owned();
    let member: i64 = node.query(Phase::Break, &command, &[&mark]).await?;
    Ok(member == 1)
}

/// Whether the fencing counter of the lock `keys` is at least `token` (see `Hold::released_first`):
/// `false` when it is gone or lower.
///
/// # Errors
/// [`Error::Connection`](crate::Error::Connection).
pub(crate) async fn counter_reached(
    node: &Node,
    keys: &LockKeys,
    token: FencingToken,
) -> Result<bool> {
    let command = redis::cmd("GET").arg(keys.fence()).to_owned();
    let counter: Option<String> = node
        .query(Phase::Release, &command, &[keys.fence()])
        .await?;
    Ok(counter
        .and_then(|counter| counter.parse::<u64>().ok())
        .is_some_and(|counter| counter >= token.get()))
}
