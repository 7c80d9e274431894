//! What a semaphore looks like on the server right now.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Phase, Result};
use crate::token::FencingToken;

/// A [`Semaphore`](crate::Semaphore)'s state, read in one step on the server.
///
/// ```
/// use redis_locks::SemaphoreState;
/// let idle = SemaphoreState::default();
/// assert!(idle.holders.is_empty() && idle.permits.is_none());
/// assert_eq!(idle.in_use(), 0);
/// assert_eq!(idle.available(3), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// N as the server keeps it; `None` when nobody holds or waits (the next acquirer's N
    /// counts).
    pub permits: Option<u32>,
    /// The holders whose lease has not ended, the earliest to end first.
    pub holders: Vec<PermitHolder>,
    /// The latest fencing token handed out; `None` if no permit was ever granted.
    pub fencing_counter: Option<FencingToken>,
    /// How many waiters stand in line (their place lease still runs).
    pub waiting: u64,
}

/// One holder of a semaphore's permits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PermitHolder {
    /// The owner token of the acquisition.
    pub owner: String,
    /// How many permits it holds.
    pub permits: u32,
    /// How long its lease still runs on the server's clock.
    pub lease_remaining: Duration,
}

impl SemaphoreState {
    /// How many permits the holders hold.
    pub fn in_use(&self) -> u32 {
        self.holders.iter().map(|holder| holder.permits).sum()
    }

    /// How many permits are free: N (as the server keeps it, else `permits`) less those in
    /// use; 0 when N shrank below what is held.
    pub fn available(&self, permits: u32) -> u32 {
        self.permits
            .unwrap_or(permits)
            .saturating_sub(self.in_use())
    }

    /// The state in `inspect.lua`'s reply: `{limit, counter, waiting, (owner, permits,
    /// ms)*}`.
    pub(crate) fn from_reply(reply: Vec<Value>) -> Result<SemaphoreState> {
        let unexpected = || Error::UnexpectedReply {
            phase: Phase::Inspect,
            detail: format!("{reply:?}"),
        };
        let number = |value: &Value| -> Option<i64> { redis::from_redis_value(value.clone()).ok() };
        let (head, rest) = reply.split_at_checked(3).ok_or_else(unexpected)?;
        let [limit, counter, waiting] = head else {
            return Err(unexpected());
        };
        let (limit, counter, waiting) = (
            number(limit).ok_or_else(unexpected)?,
            number(counter).ok_or_else(unexpected)?,
            number(waiting).ok_or_else(unexpected)?,
        );
        if rest.len() % 3 != 0 {
            return Err(unexpected());
        }
        let mut holders = Vec::with_capacity(rest.len() / 3);
        for holder in rest.chunks(3) {
            let owner: String =
                redis::from_redis_value(holder[0].clone()).map_err(|_| unexpected())?;
            let permits = number(&holder[1]).ok_or_else(unexpected)?;
            let left = number(&holder[2]).ok_or_else(unexpected)?;
            holders.push(PermitHolder {
                owner,
                permits: u32::try_from(permits).map_err(|_| unexpected())?,
                lease_remaining: Duration::from_millis(u64::try_from(left).unwrap_or_default()),
            });
        }
        Ok(SemaphoreState {
            permits: u32::try_from(limit).ok().filter(|limit| *limit > 0),
            holders,
            fencing_counter: u64::try_from(counter)
                .ok()
                .filter(|counter| *counter > 0)
                .map(FencingToken::new),
            waiting: u64::try_from(waiting).unwrap_or_default(),
        })
    }
}
