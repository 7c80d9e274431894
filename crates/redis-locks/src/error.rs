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
    /// The lock key holds another owner's token: the lease ran out and somebody else took it
    /// (for a hold of an `RwLock` or a `ReentrantMutex`: another owner holds the lock in a
    /// mode that excludes it).
    Taken,
    /// The lease deadline passed without a renewal the server confirmed (no watchdog, or
    /// Redis unreachable or too slow): the lock can no longer be proven held.
    LeaseEnded,
    /// The watchdog stopped at its cap (maximum renewals or hold time) and the lease ran out.
    RenewalCapReached,
    /// The guard was released or dropped: the lock was given up, not lost.
    Released,
    /// Somebody broke the lock on purpose (`redis-locks break`,
    /// [`Client::break_lock`](crate::Client::break_lock)): its fencing counter was advanced
    /// past this holder's token and the key deleted.
    Broken,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "its lease ran out and the key is gone",
            LostReason::Taken => "its lease ran out and another owner holds it now",
            LostReason::LeaseEnded => "its lease deadline passed without a confirmed renewal",
            LostReason::RenewalCapReached => "the renewal cap was reached and its lease ran out",
            LostReason::Released => "it was released by its guard",
            LostReason::Broken => "it was broken on purpose (redis-locks break)",
        })
    }
}

/// What one node of a [`Redlock`](crate::Redlock) answered to one request: the per-node
/// outcome carried by [`Error::NoQuorum`].
///
/// ```
/// use redis_locks::{Error, Vote};
///
/// /// The nodes that did not answer, when a Redlock could not reach a majority.
/// fn down(err: &Error) -> Vec<&str> {
///     match err {
///         Error::NoQuorum { votes, .. } => votes
///             .iter()
///             .filter(|node| matches!(node.vote, Vote::TimedOut | Vote::Failed(_)))
///             .map(|node| node.url.as_str())
///             .collect(),
///         _ => Vec::new(),
///     }
/// }
/// assert!(down(&Error::InvalidNodes { reason: "none given".into() }).is_empty());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Vote {
    /// The node granted the lock (or did what was asked: released, extended, connected).
    Granted,
    /// Another owner holds the lock on this node (for a release or extension: the lock is
    /// gone or another owner's there), with its remaining lease when known.
    Held {
        /// How long the other holder's lease still runs on that node.
        retry_after: Option<Duration>,
    },
    /// No reply within the per-node timeout.
    TimedOut,
    /// The node answered with an error, or could not be reached.
    Failed(Box<Error>),
    /// The outcome was decided before this node answered; its request finishes (or times
    /// out) in the background.
    Pending,
}

/// One node's [`Vote`], with the node's URL (password hidden).
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeVote {
    /// The node's URL, its password hidden.
    pub url: String,
    /// What it answered.
    pub vote: Vote,
}

impl std::fmt::Display for NodeVote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.url)?;
        match &self.vote {
            Vote::Granted => f.write_str("granted"),
            Vote::Held {
                retry_after: Some(left),
            } => write!(f, "held by another owner for {left:?}"),
            Vote::Held { retry_after: None } => f.write_str("held by another owner"),
            Vote::TimedOut => f.write_str("timed out"),
            Vote::Failed(err) => write!(f, "failed: {err}"),
            Vote::Pending => f.write_str("no answer yet when the outcome was decided"),
        }
    }
}

/// `lock "NAME": ` before a message about the lock `name`; nothing without a name.
fn fmt_lock(name: &str) -> String {
    if name.is_empty() {
        return String::new();
    }
    format!("lock {}: ", fmt_name(name))
}

fn fmt_votes(votes: &[NodeVote]) -> String {
    votes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What went wrong in a TLS handshake: the `problem` of [`Error::Tls`].
///
/// ```
/// use redis_locks::TlsProblem;
/// assert_eq!(TlsProblem::NotTls.to_string(), "the server does not speak TLS");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The server's certificate was not accepted: signed by a CA this client does not trust,
    /// issued for another host name, expired or not yet valid.
    ServerCertificate,
    /// The server refused this client's certificate, or wanted one and got none (mutual
    /// TLS).
    ClientCertificate,
    /// The server does not speak TLS: a plaintext server behind a `rediss://` URL.
    NotTls,
    /// The TLS settings cannot be used: a CA or certificate that does not parse as PEM, a
    /// key that does not match, TLS settings given with a `redis://` URL.
    Settings,
}

impl std::fmt::Display for TlsProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsProblem::ServerCertificate => "the server's certificate is not trusted",
            TlsProblem::ClientCertificate => "the server refused this client's certificate",
            TlsProblem::NotTls => "the server does not speak TLS",
            TlsProblem::Settings => "the TLS settings cannot be used",
        })
    }
}

/// What was being done when a request failed: the `phase` of [`Error::Connection`],
/// [`Error::Auth`], [`Error::Redis`] and [`Error::UnexpectedReply`].
///
/// ```
/// use redis_locks::Phase;
/// assert_eq!(Phase::Acquire.to_string(), "acquire");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Opening the connection (and the `PING` after it).
    Connect,
    /// An acquire attempt: the fast pipeline or the acquire script.
    Acquire,
    /// An owner-checked release (or giving up a place in a queue).
    Release,
    /// An owner-checked extension: [`MutexGuard::extend`](crate::MutexGuard::extend) or a
    /// watchdog renewal.
    Extend,
    /// Reading a lock's state.
    Inspect,
    /// Counting a lock's waiters.
    Waiting,
    /// A [`FencedKey`](crate::FencedKey) write.
    FencedWrite,
    /// A [`FencedKey`](crate::FencedKey) read.
    FencedRead,
    /// Breaking a lock on purpose ([`Client::break_lock`](crate::Client::break_lock)), or
    /// asking whether a lost lock was broken.
    Break,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Connect => "connect",
            Phase::Acquire => "acquire",
            Phase::Release => "release",
            Phase::Extend => "extend",
            Phase::Inspect => "inspect",
            Phase::Waiting => "waiting",
            Phase::FencedWrite => "fenced write",
            Phase::FencedRead => "fenced read",
            Phase::Break => "break",
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
    /// long, control characters, a `}` that breaks the slot rule, or a name that would share
    /// keys with another). The message quotes a long name by its length and first characters.
    #[error("invalid lock name {}: {reason}", fmt_name(name))]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An owner id cannot be used (see [`OwnerId::new`](crate::OwnerId::new): empty, longer
    /// than 256 bytes, or with control characters).
    #[error("invalid owner id {}: {reason}", fmt_name(owner))]
    InvalidOwner {
        /// The owner id as given.
        owner: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An owner that holds an [`RwLock`](crate::RwLock) for reading asked for it for writing:
    /// refused at once, as two owners upgrading would each wait for the other's read hold
    /// forever. Release the read guards first, then ask for the write lock.
    #[error("lock {name:?}: owner {owner:?} holds it for reading and cannot upgrade to writing")]
    Upgrade {
        /// The lock name.
        name: String,
        /// The owner that asked.
        owner: String,
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
    /// The Redis URL cannot be used: empty, not a URL, an unsupported scheme, a port out of
    /// range, a database that is not a number...
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server at the URL answered, but not as Redis does (an HTTP server on that port,
    /// say).
    #[error("the server at {url} did not answer as Redis does ({detail}); is that the right port?")]
    NotRedis {
        /// The URL, its password hidden.
        url: String,
        /// What was seen.
        detail: String,
    },
    /// A TLS connection (`rediss://`) could not be made: the server's certificate is not
    /// trusted (an unknown CA, another host's name, expired), the server refused this
    /// client's certificate or wanted one, the server does not speak TLS (a plaintext server
    /// behind a `rediss://` URL), or the TLS settings themselves cannot be used (a CA or
    /// certificate that is not PEM, TLS settings with a `redis://` URL). Nothing was sent.
    #[error("TLS with {url} failed ({problem}): {detail}")]
    Tls {
        /// The URL, its password hidden.
        url: String,
        /// Which side of the handshake failed.
        problem: TlsProblem,
        /// What rustls or the server said.
        detail: String,
    },
    /// Redis refused this client: no password given where one is required (`NOAUTH`), a wrong
    /// user or password (`WRONGPASS`), or an ACL that does not permit a command or key the
    /// lock needs (`NOPERM`). Nothing was written.
    #[error("Redis refused access ({phase}): {source}")]
    Auth {
        /// What was being done.
        phase: Phase,
        /// The server's answer.
        source: redis::RedisError,
    },
    /// A grant or renewal under a [`Replication`](crate::Replication) policy did not reach
    /// the copies it asked for within its timeout. After an acquisition the grant has been
    /// released; after a renewal the guard counts on its earlier deadline only (the
    /// watchdog tries again while the lease lasts).
    #[error(
        "lock {name:?}: {acked} of {wanted} replicas acknowledged{}",
        if *local { "" } else { ", and not on the master's disk" }
    )]
    NotReplicated {
        /// The lock name.
        name: String,
        /// How many replicas were asked for.
        wanted: u32,
        /// How many acknowledged in time.
        acked: u32,
        /// Whether the master's own append-only file had it (always `true` for `WAIT`).
        local: bool,
    },
    /// The server does not offer what was asked of it (`WAITAOF` before Redis 7.2, a
    /// replicated acquisition on a `Redlock`); nothing was left held.
    #[error("not supported here: {what} ({detail})")]
    Unsupported {
        /// What was asked for.
        what: String,
        /// What the server or the library said.
        detail: String,
    },
    /// A [`Replication`](crate::Replication) policy that cannot confirm anything.
    #[error("invalid replication policy: {reason}")]
    InvalidReplication {
        /// What is wrong with it.
        reason: String,
    },
    /// The names given to a [`MultiLock`](crate::MultiLock) cannot be used together: none,
    /// more than [`MAX_MULTILOCK_NAMES`](crate::MAX_MULTILOCK_NAMES), or a name given twice.
    #[error("invalid MultiLock names: {reason}")]
    InvalidNames {
        /// What is wrong.
        reason: String,
    },
    /// A number of semaphore permits cannot be used: N of 0 or over
    /// [`MAX_PERMITS`](crate::MAX_PERMITS), or an acquisition of 0 permits or of more than N.
    #[error("semaphore {}: invalid {value} permits: {reason}", fmt_name(name))]
    InvalidPermits {
        /// The semaphore's name.
        name: String,
        /// The number given.
        value: u32,
        /// What is wrong with it.
        reason: String,
    },
    /// The semaphore is in use with another number of permits than this handle was opened
    /// with: every process must agree on N while anybody holds or waits. Nothing was
    /// written; open it with `permits`, or change N on purpose with
    /// [`Semaphore::set_permits`](crate::Semaphore::set_permits).
    #[error(
        "semaphore {name:?} is in use with {permits} permits, not {asked}: open it with {permits}, or change it with set_permits"
    )]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// N as the server keeps it.
        permits: u32,
        /// N this handle was opened with.
        asked: u32,
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
    /// A key of this lock holds something this lock did not write: a value of another Redis
    /// type, or a fencing counter that is not an integer. `key` names the key that is wrong;
    /// nothing was written.
    #[error("key {key:?} holds something that is not this lock's: {detail}")]
    WrongType {
        /// The lock key or companion key that was looked at.
        key: String,
        /// The server's message.
        detail: String,
    },
    /// A [`Redlock`](crate::Redlock) request could not reach the majority it needs: too
    /// many of its nodes timed out, failed or could not be reached (not: were held by
    /// others, which is [`Error::Held`]), or a majority granted but the fencing token could
    /// not be raised on a majority (their keys gone by then). `votes` says what each node
    /// answered. After a failed acquire, whatever a node granted has been released.
    /// Also [`Redlock::connect_nodes`](crate::Redlock::connect_nodes) when too many nodes
    /// cannot be reached for a majority: `phase` is [`Phase::Connect`], `name` empty, and
    /// each vote [`Vote::Granted`] (connected), [`Vote::Failed`] with its error, or
    /// [`Vote::Pending`] (still connecting).
    #[error("{}{phase} needs {needed} of {} nodes and could not get them ({})", fmt_lock(name), votes.len(), fmt_votes(votes))]
    NoQuorum {
        /// The lock name (empty for [`Redlock::connect_nodes`](crate::Redlock::connect_nodes)).
        name: String,
        /// What was being done.
        phase: Phase,
        /// How many nodes must agree (a majority).
        needed: usize,
        /// Each node's answer, in the order the nodes were given.
        votes: Vec<NodeVote>,
    },
    /// The nodes given to a [`Redlock`](crate::Redlock) cannot form a quorum: none, an even
    /// number of them, or one server given twice.
    #[error("invalid Redlock nodes: {reason}")]
    InvalidNodes {
        /// What is wrong.
        reason: String,
    },
    /// Redis could not be reached, or did not answer in time, or the connection dropped, or
    /// it cannot serve anyone now (`BUSY`: a script runs past `busy-reply-threshold`;
    /// `LOADING`: it loads its data after a restart) — each passes, so an acquire may be
    /// tried again. For a release or extension, the outcome is then unknown; the lease still
    /// bounds it.
    #[error("Redis connection failed ({phase}): {source}")]
    Connection {
        /// What was being done.
        phase: Phase,
        /// The underlying error.
        source: redis::RedisError,
    },
    /// Redis answered with an error that none of the variants above describes.
    #[error("Redis error during {phase}: {source}")]
    Redis {
        /// The operation that was in flight.
        phase: Phase,
        /// The underlying error.
        source: redis::RedisError,
    },
    /// A [`blocking`](crate::blocking) call was made inside a tokio runtime (a task, a
    /// `block_on`, a `spawn_blocking` closure): it would block a thread the runtime may need.
    /// Nothing was sent. Use the async API there, or call from a thread of your own.
    #[error(
        "redis_locks::blocking::{call} was called inside a tokio runtime; use the async API there"
    )]
    InsideRuntime {
        /// The blocking call refused (`"Mutex::lock"`, say).
        call: &'static str,
    },
    /// The private runtime of a [`blocking`](crate::blocking) client could not be started
    /// (the system refused a thread, say).
    #[error("the blocking client's runtime could not be started: {source}")]
    RuntimeStart {
        /// What the system said.
        source: std::io::Error,
    },
    /// Redis answered with a reply the lock scripts never produce (a bug, or a foreign script
    /// loaded under the same SHA).
    #[error("unexpected reply from Redis during {phase}: {detail}")]
    UnexpectedReply {
        /// The operation that was in flight.
        phase: Phase,
        /// The reply as seen.
        detail: String,
    },
}

/// A lock name for a message: quoted (control characters escaped), or for a long one its
/// length and first characters.
fn fmt_name(name: &str) -> String {
    const SHOWN: usize = 40;
    if name.chars().count() <= SHOWN {
        return format!("{name:?}");
    }
    let prefix: String = name.chars().take(SHOWN).collect();
    format!("{prefix:?}... ({} bytes)", name.len())
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

    /// Whether a TLS connection could not be made ([`Error::Tls`]).
    pub fn is_tls(&self) -> bool {
        matches!(self, Error::Tls { .. })
    }

    /// Whether the lock was found gone or taken ([`Error::NotHeld`]).
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// Whether Redis refused this client ([`Error::Auth`]): authentication or permission.
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. })
    }

    /// Sorts a redis-rs error into [`Error::Auth`], [`Error::Connection`],
    /// [`Error::WrongType`] or [`Error::Redis`]. `keys` are the keys the request touched, the
    /// first being the lock key; a `WRONGTYPE` error names the one its message starts with
    /// (the crate's scripts write `WRONGTYPE <key> ...`), else the first.
    pub(crate) fn from_redis(phase: Phase, keys: &[&str], source: redis::RedisError) -> Error {
        if is_auth_failure(&source) {
            return Error::Auth { phase, source };
        }
        if is_connection_failure(&source) {
            return Error::Connection { phase, source };
        }
        if source.code() == Some("WRONGTYPE") {
            let detail = source.detail().unwrap_or_default().to_string();
            let key = keys
                .iter()
                .filter(|key| {
                    detail
                        .strip_prefix(**key)
                        .is_some_and(|rest| rest.starts_with(' '))
                })
                .max_by_key(|key| key.len())
                .or(keys.first())
                .copied()
                .unwrap_or_default();
            return Error::WrongType {
                key: key.to_string(),
                detail: source.to_string(),
            };
        }
        Error::Redis { phase, source }
    }
}

/// Whether a redis-rs error means Redis refused this client: `NOAUTH`, `WRONGPASS`, `NOPERM`,
/// or a failed `AUTH` at connect.
pub(crate) fn is_auth_failure(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// Whether a redis-rs error means the server was not reached or did not answer: no
/// connection, a timeout, or a server that cannot serve anyone now — `BUSY` (a script runs
/// past `busy-reply-threshold`) and `LOADING` (it loads its data after a restart). Those two
/// pass, so an acquire may be tried again; as for any connection error, what a request in a
/// pipeline of several did before the one refused is unknown to the caller.
pub(crate) fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_unrecoverable_error()
        || matches!(server_code(err).as_deref(), Some("BUSY" | "LOADING"))
}

/// The code of a server's error reply (`BUSY`, `WRONGTYPE`...), also when it came inside a
/// pipeline (the first failed command's).
fn server_code(err: &redis::RedisError) -> Option<String> {
    err.code().map(str::to_string).or_else(|| {
        err.clone()
            .into_server_errors()
            .and_then(|items| items.first().map(|(_, item)| item.code().to_string()))
    })
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
