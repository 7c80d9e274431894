//! Owner tokens (who holds a lock) and fencing tokens (which acquisition this is).

use std::fmt;
use std::sync::Arc;

/// The fencing prelude of the scripts that hand out tokens: `server_micros`, `next_token`.
pub(crate) const FENCE_LUA: &str = include_str!("fence.lua");

/// A fencing token: a number per acquisition of one lock that only grows.
///
/// Hand it to the resource the lock protects with every write; a resource that remembers the
/// highest token it has seen and refuses lower ones can never be written by a holder whose
/// lease ran out while it was paused. Tokens are not dense: a lock's counter starts at the
/// Redis server's clock in microseconds, so tokens keep growing even when the server loses
/// the counter (a restart without persistence), and a refused attempt takes a number too.
///
/// ```
/// use redis_locks::FencingToken;
/// assert!(FencingToken::new(7) > FencingToken::new(6));
/// assert_eq!(FencingToken::new(7).get(), 7);
/// assert_eq!(FencingToken::new(7).to_string(), "7");
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value (as read back from a resource, say).
    pub const fn new(value: u64) -> FencingToken {
        FencingToken(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The random secret that marks one acquisition as the owner of a lock: 128 random bits as
/// 32 lowercase hex characters. Only a request that carries it may release or extend the lock.
///
/// The token of a guard that may have waited in line for its lock (a `FairMutex`'s, an
/// `RwLock`'s or a `ReentrantMutex`'s, whose waiting attempt stands in the lock's queue under
/// it) goes on with `@` and its client's wake-up address (16 more hex characters), so that a
/// release wakes that waiter on its client's own channel of the lock (see the crate README,
/// "Waiting").
///
/// ```
/// use redis_locks::OwnerToken;
/// let a = OwnerToken::random();
/// assert_eq!(a.as_str().len(), 32);
/// assert_ne!(a, OwnerToken::random());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(Arc<str>);

impl OwnerToken {
    /// A fresh token from the thread-local cryptographically secure generator.
    pub fn random() -> OwnerToken {
        OwnerToken(format!("{:032x}", rand::random::<u128>()).into())
    }

    /// A fresh token for a waiter of the client whose wake-up address is `address`: random
    /// as [`random`](Self::random)'s, then `@` and `address`.
    pub(crate) fn addressed(address: &str) -> OwnerToken {
        OwnerToken(format!("{:032x}@{address}", rand::random::<u128>()).into())
    }

    /// The token as stored in the lock key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    /// Shows only a prefix: the full token is a capability to release the lock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", &self.0[..8])
    }
}
