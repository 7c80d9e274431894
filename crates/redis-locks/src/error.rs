//! The one error type of the crate, and why a guard's lock was lost.

use std::time::Duration;

/// Why a lock that a guard held is no longer held by it.
///
/// ```
/// use redis_locks::LostReason;
/// assert_eq!(LostReason::Expired.to_string(), "its lease ran out and the key is gone");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The lock key is gone: the lease ran out (or the server lost its data).
    Expired,
    /// The lock key holds another owner's token: the lease ran out and somebody else took it.
    Taken,
    /// The lease deadline passed without a renewal the server confirmed (no watchdog, or
    /// Redis unreachable or too slow): the lock can no longer be proven held.
    LeaseEnded,
    /// The watchdog stopped at its cap (maximum renewals or hold time) and the lease ran out.
    RenewalCapReached,
    /// The guard was released or dropped: the lock was given up, not lost.
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its lease ran out and the key is gone",
            LostReason::Taken => "its lease ran out and another owner holds it now",
            LostReason::LeaseEnded => "its lease deadline passed without a confirmed renewal",
            LostReason::RenewalCapReached => "the renewal cap was reached and its lease ran out",
            LostReason::Released => "it was released by its guard",
        })
    }
}

/// Everything that can go wrong, kept apart so callers can act on it.
///
/// "Held by somebody else, try again after D" ([`Error::Held`], [`Error::WaitTimeout`]) is never
/// mixed up with "Redis failed" ([`Error::Connection`], [`Error::Redis`]), and a release or
/// extension that finds the lock gone is [`Error::NotHeld`], never a silent success.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::Error;
///
/// let err = Error::Held { name: "jobs:nightly".into(), retry_after: Some(Duration::from_millis(250)) };
/// assert!(err.is_held());
/// assert_eq!(err.retry_after(), Some(Duration::from_millis(250)));
/// assert!(!err.is_connection());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name cannot be used (see [`LockKeys::new`](crate::LockKeys::new): empty, too
    /// long, a `}` that breaks the slot rule, or a name that would share keys with another).
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A duration argument is out of range: a zero or sub-millisecond lease, one so long that
    /// Redis's millisecond expiry would overflow, a lease under 30 ms for the watchdog to
    /// renew, a retry delay over an hour, or a place lease out of its range.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidDuration {
        /// Which argument ("lease", "retry delay", ...).
        what: &'static str,
        /// The value given.
        value: Duration,
        /// The allowed range.
        reason: String,
    },
    /// The Redis URL could not be parsed.
    #[error("invalid Redis URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What the redis crate said.
        source: redis::RedisError,
    },
    /// One attempt found the lock held by another owner.
    #[error("lock {name:?} is held by another owner{}", fmt_retry(*.retry_after))]
    Held {
        /// The lock name.
        name: String,
        /// How long the holder's lease still runs, as the server measured it; `None` when the
        /// key has no expiry (it was not written by this library), or for a `FairMutex` that
        /// is free but has waiters ahead.
        retry_after: Option<Duration>,
    },
    /// The wait budget ran out while the lock stayed held by others.
    #[error("gave up on lock {name:?} after waiting {waited:?}{}", fmt_retry(*.retry_after))]
    WaitTimeout {
        /// The lock name.
        name: String,
        /// How long this call waited.
        waited: Duration,
        /// The holder's remaining lease at the last attempt, when known.
        retry_after: Option<Duration>,
    },
    /// A release or extension found that the lock is no longer this guard's.
    #[error("lock {name:?} is no longer held by this owner: {reason}")]
    NotHeld {
        /// The lock name.
        name: String,
        /// Gone, or taken by another owner.
        reason: LostReason,
    },
    /// A fenced write carried a token lower than one that already wrote the resource: the
    /// writer's lock was lost and taken by a newer holder. Nothing was written.
    #[error(
        "stale fencing token {token} for {key:?}: a holder with token {highest} wrote it already"
    )]
    StaleToken {
        /// The resource key.
        key: String,
        /// The writer's token.
        token: crate::token::FencingToken,
        /// The highest token that wrote the resource.
        highest: crate::token::FencingToken,
    },
    /// A key of this lock holds a value of another Redis type than the lock uses; nothing was
    /// written.
    #[error("key {key:?} holds another Redis type than this lock uses: {detail}")]
    WrongType {
        /// The lock key or companion key that was looked at.
        key: String,
        /// The server's message.
        detail: String,
    },
    /// Redis could not be reached, or did not answer in time, or the connection dropped.
    /// For a release or extension, the outcome is then unknown; the lease still bounds it.
    #[error("Redis connection failed ({phase}): {source}")]
    Connection {
        /// What was being done: "connect", or the operation that was in flight.
        phase: &'static str,
        /// The underlying error.
        source: redis::RedisError,
    },
    /// Redis answered with an error that none of the variants above describes.
    #[error("Redis error during {phase}: {source}")]
    Redis {
        /// The operation that was in flight.
        phase: &'static str,
        /// The underlying error.
        source: redis::RedisError,
    },
    /// Redis answered with a reply the lock scripts never produce (a bug, or a foreign script
    /// loaded under the same SHA).
    #[error("unexpected reply from Redis during {phase}: {detail}")]
    UnexpectedReply {
        /// The operation that was in flight.
        phase: &'static str,
        /// The reply as seen.
        detail: String,
    },
}

fn fmt_retry(retry_after: Option<Duration>) -> String {
    match retry_after {
        Some(d) => format!(" (its lease ends in {d:?})"),
        None => " (no lease to wait out: others queue first, or its key has no expiry)".to_string(),
    }
}

impl Error {
    /// Whether the lock was held by somebody else ([`Error::Held`] or [`Error::WaitTimeout`]):
    /// "not now", as opposed to "cannot".
    pub fn is_held(&self) -> bool {
        matches!(self, Error::Held { .. } | Error::WaitTimeout { .. })
    }

    /// How long the current holder's lease still ran when this error was made, if known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Held { retry_after, .. } | Error::WaitTimeout { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    /// Whether Redis could not be reached or did not answer ([`Error::Connection`]).
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection { .. })
    }

    /// Whether the lock was found gone or taken ([`Error::NotHeld`]).
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// Sorts a redis-rs error into [`Error::Connection`], [`Error::WrongType`] or [`Error::Redis`].
    pub(crate) fn from_redis(phase: &'static str, key: &str, source: redis::RedisError) -> Error {
        if is_connection_failure(&source) {
            return Error::Connection { phase, source };
        }
        let text = source.to_string();
        // A key of another type, or a fencing counter that is not an integer.
        let wrong_type = source.code() == Some("WRONGTYPE")
            || text.contains("WRONGTYPE")
            || text.contains("not an integer");
        if wrong_type {
            return Error::WrongType {
                key: key.to_string(),
                detail: text,
            };
        }
        Error::Redis { phase, source }
    }
}

/// Whether a redis-rs error means the server was not reached or did not answer.
pub(crate) fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
