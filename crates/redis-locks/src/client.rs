//! The connection to one Redis server that every lock handle of a process shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script};

use crate::error::{Error, Result};
use crate::fair::{FairMutex, FairMutexOptions};
use crate::fenced::FencedKey;
use crate::key::LockKeys;
use crate::mutex::{Mutex, MutexOptions};
use crate::wait::{LocalQueue, LocalQueues};
use crate::wakeups::Wakeups;
use crate::watchdog::Renewals;

/// How a [`Client`] talks to Redis: bounded connect and response times, bounded reconnects.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::ClientOptions;
///
/// let options = ClientOptions::default()
///     .connect_timeout(Duration::from_millis(500))
///     .response_timeout(Duration::from_secs(1));
/// assert_eq!(options.get_response_timeout(), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    connect_timeout: Duration,
    response_timeout: Duration,
    reconnect_attempts: usize,
}

impl Default for ClientOptions {
    /// 2 s to connect, 2 s for each reply, 3 reconnect attempts.
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            reconnect_attempts: 3,
        }
    }
}

impl ClientOptions {
    /// How long one attempt to open a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a request may wait for its reply before it fails with [`Error::Connection`].
    /// Keep it well below the leases you use: a lock call blocked longer than its lease is of
    /// no use.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How many times a broken connection is re-opened (with exponential backoff) before
    /// requests fail.
    pub fn reconnect_attempts(mut self, attempts: usize) -> Self {
        self.reconnect_attempts = attempts;
        self
    }

    /// The connect timeout in force.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The response timeout in force.
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }
}

/// A connection to one Redis server, shared by every lock handle made from it. Cheap to clone.
///
/// Requests go over one multiplexed connection (redis-rs's `ConnectionManager`), so a process
/// needs one `Client` per server, not one per lock.
///
/// # Behavior
/// - A dropped connection is re-opened in the background; requests made meanwhile fail with
///   [`Error::Connection`] rather than wait.
/// - No request is ever retried by this crate: a failed release or extension has an unknown
///   outcome, and the lease bounds it.
/// - An acquire that failed with a connection error may still have been granted; its owner
///   token is released in the background. If the connection was replaced meanwhile, that
///   release can reach the server before the late acquire does; the lease then ends the lock.
/// - Waiters are woken through one extra subscriber connection, opened the first time a
///   lock must be waited for. If it drops, waiters poll (jittered) until it is back.
/// - A request that gets no reply within the response timeout fails with [`Error::Connection`].
/// - The client names its connection (`CLIENT SETNAME redis-locks:<random>`) the first time a
///   lock is granted on it, so that fast acquisitions can trust the fencing counter (see the
///   crate README, "Fencing tokens"); a connection you name yourself through
///   [`Client::connection`] keeps its name, and its grants go through a script instead.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// # let url = server.url();
/// let client = redis_locks::Client::connect(&url).await?;
/// let mutex = client.mutex("jobs:nightly")?;
/// let guard = mutex.try_lock().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    connection: ConnectionManager,
    url: String,
    options: ClientOptions,
    wakeups: Wakeups,
    renewals: Renewals,
    local_queues: LocalQueues,
    requests: AtomicU64,
    /// The name this client gave its connection last (`CLIENT SETNAME redis-locks:<hex>`),
    /// as fast attempts name it among a fencing counter's epochs; `CLIENT GETNAME` in the
    /// same pipeline checks that the connection still has it.
    connection_name: std::sync::Mutex<Option<Arc<str>>>,
    /// A `CLIENT SETNAME` is under way (one at a time).
    naming: std::sync::atomic::AtomicBool,
    /// A name given did not stick (an ACL without `CLIENT`, a proxy): never name again, and
    /// let the script number every grant.
    names_refused: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &redact(&self.inner.url))
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Client {
    /// Connects to the Redis server at `url` (`redis://host:port/db`) with default options.
    ///
    /// Sends one `PING`, so that what is wrong is said now rather than at the first lock.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a URL that cannot name a server (the error says what is
    /// wrong); [`Error::Connection`] when the server cannot be reached within the connect
    /// timeout and reconnect attempts; [`Error::Auth`] when it wants a password that was not
    /// given, or refuses the one given; [`Error::NotRedis`] when something else than Redis
    /// answers; [`Error::Redis`] when Redis answers `PING` with an error (`LOADING` while it
    /// loads its data after a restart, say: try again).
    pub async fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to the Redis server at `url` with the given options.
    ///
    /// # Errors
    /// As [`Client::connect`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the half-made connection; nothing is left behind.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client> {
        check_url(url).map_err(|reason| Error::InvalidUrl {
            url: redact(url),
            reason,
        })?;
        let client = redis::Client::open(url).map_err(|source| Error::InvalidUrl {
            url: redact(url),
            reason: source.to_string(),
        })?;
        let wakeups = Wakeups::start(client.clone(), options.connect_timeout);
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout))
            .set_response_timeout(Some(options.response_timeout))
            .set_number_of_retries(options.reconnect_attempts)
            .set_max_delay(Duration::from_secs(1));
        // The manager retries the first connection too; bound the whole of it so an unreachable
        // server fails in a known time.
        let budget = (options.connect_timeout + Duration::from_secs(1))
            * (options.reconnect_attempts as u32 + 1);
        let connect = ConnectionManager::new_with_config(client, config);
        let mut connection = match tokio::time::timeout(budget, connect).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(source)) => return Err(connect_error(url, source)),
            Err(_) => {
                return Err(Error::Connection {
                    phase: "connect",
                    source: redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {budget:?}"),
                    )),
                });
            }
        };
        // One PING, so that a server that is not Redis, or one that wants a password, is
        // reported now and as such, not at the first lock as something else.
        match redis::cmd("PING")
            .query_async::<redis::Value>(&mut connection)
            .await
        {
            Ok(redis::Value::SimpleString(_) | redis::Value::BulkString(_)) => {}
            Ok(other) => {
                return Err(Error::NotRedis {
                    url: redact(url),
                    detail: format!("PING was answered with {other:?}"),
                });
            }
            Err(source) => return Err(connect_error(url, source)),
        }
        Ok(Client {
            inner: Arc::new(Inner {
                connection,
                url: url.to_string(),
                options,
                wakeups,
                renewals: Renewals::default(),
                local_queues: LocalQueues::default(),
                requests: AtomicU64::new(0),
                connection_name: std::sync::Mutex::new(None),
                naming: std::sync::atomic::AtomicBool::new(false),
                names_refused: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// A [`Mutex`] handle for the lock `name`, with default options (a 30 s lease).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for a name [`LockKeys::new`] refuses (empty, over 1024 bytes, a
    /// broken hash tag, or one that would share keys with another lock).
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.mutex_with(name, MutexOptions::default())
    }

    /// A [`Mutex`] handle for the lock `name` with the given options.
    ///
    /// # Errors
    /// As [`Client::mutex`]; also [`Error::InvalidDuration`] for a lease under 3 ms or over
    /// 100 years, or a retry delay over 1 hour.
    pub fn mutex_with(&self, name: &str, options: MutexOptions) -> Result<Mutex> {
        Mutex::new(self.clone(), LockKeys::new(name)?, options)
    }

    /// A [`FairMutex`] handle for the lock `name`, with default options (a 30 s lease, 2 s
    /// place leases).
    ///
    /// # Errors
    /// As [`Client::mutex`].
    pub fn fair_mutex(&self, name: &str) -> Result<FairMutex> {
        self.fair_mutex_with(name, FairMutexOptions::default())
    }

    /// A [`FairMutex`] handle for the lock `name` with the given options.
    ///
    /// # Errors
    /// As [`Client::mutex_with`]; also [`Error::InvalidDuration`] for a place lease under
    /// 3 ms or over an hour.
    pub fn fair_mutex_with(&self, name: &str, options: FairMutexOptions) -> Result<FairMutex> {
        FairMutex::new(self.clone(), LockKeys::new(name)?, options)
    }

    /// A [`FencedKey`]: a string value that only the newest lock holder may write.
    ///
    /// # Errors
    /// [`Error::InvalidName`] as for [`Client::mutex`].
    pub fn fenced_key(&self, name: &str) -> Result<FencedKey> {
        FencedKey::new(self.clone(), name)
    }

    /// How many requests (round trips) this client has sent to Redis: script calls and
    /// pipelines on the main connection (a pipeline counts once), plus subscription commands
    /// and reconnects of the wake-up connection. A diagnostic for benchmarks ("requests per
    /// acquisition").
    pub fn requests_sent(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed) + self.inner.wakeups.requests()
    }

    /// The name this client believes its connection has (see `mutex_acquire.lua`, KEYS[3]).
    pub(crate) fn connection_name(&self) -> Option<Arc<str>> {
        self.inner
            .connection_name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The turn to name the connection, if this caller may name it now: none other is naming
    /// it, and names stick. The turn ends when it is dropped (cancellation included).
    pub(crate) fn naming_turn(&self) -> Option<NamingTurn> {
        let free = !self.inner.names_refused.load(Ordering::Relaxed)
            && !self.inner.naming.swap(true, Ordering::AcqRel);
        free.then(|| NamingTurn {
            client: self.clone(),
        })
    }

    /// Records the name the connection was given, or was seen to have.
    pub(crate) fn set_connection_name(&self, name: Arc<str>) {
        *self
            .inner
            .connection_name
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name);
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.inner.wakeups
    }

    pub(crate) fn renewals(&self) -> &Renewals {
        &self.inner.renewals
    }

    pub(crate) fn local_queue(&self, lock: &str) -> Arc<LocalQueue> {
        self.inner.local_queues.get(lock)
    }

    pub(crate) fn has_local_waiters(&self, lock: &str) -> bool {
        self.inner.local_queues.contains(lock)
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// A clone of the underlying multiplexed connection, for commands of your own on the same
    /// server (the fenced resource of your application, say).
    pub fn connection(&self) -> ConnectionManager {
        self.inner.connection.clone()
    }

    /// Runs one of the crate's scripts and sorts any failure into the crate's error type.
    pub(crate) async fn run_script<T: FromRedisValue>(
        &self,
        phase: &'static str,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.inner.connection.clone();
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        invocation
            .invoke_async::<T>(&mut connection)
            .await
            .map_err(|err| request_error(phase, keys, err))
    }

    /// Runs `source` (one of the crate's scripts) with `EVAL` in a pipeline after
    /// `CLIENT SETNAME name` and `CLIENT GETNAME`, so the script surely runs on the
    /// connection the name was given to (see `mutex_acquire.lua`, KEYS[3]). Used only on the
    /// rare path that brings a fencing counter up to the clock on a new connection. When the
    /// name sticks, it is recorded as the connection's; when it does not (an ACL without
    /// `CLIENT`, a proxy that answers for the server), this client never names again, and the
    /// script numbers every grant: slower, never unsafe.
    pub(crate) async fn run_script_naming<T: FromRedisValue>(
        &self,
        phase: &'static str,
        name: &str,
        source: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(name)
            .cmd("CLIENT")
            .arg("GETNAME")
            .cmd("EVAL")
            .arg(source)
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        let replies = self.run_pipeline(phase, &pipe, keys).await?;
        let [_, named, reply] =
            <[redis::Value; 3]>::try_from(replies).map_err(|_| Error::UnexpectedReply {
                phase,
                detail: "a pipeline of three commands did not get three replies".into(),
            })?;
        match named {
            redis::Value::BulkString(got) if got == name.as_bytes() => {
                self.set_connection_name(name.into());
            }
            _ => self.inner.names_refused.store(true, Ordering::Relaxed),
        }
        if let redis::Value::ServerError(err) = reply {
            return Err(request_error(phase, keys, err.into()));
        }
        T::from_redis_value(reply).map_err(|err| Error::UnexpectedReply {
            phase,
            detail: err.to_string(),
        })
    }

    /// Sends `pipe` (plain commands, not a transaction, built with
    /// [`ignore_errors`](redis::Pipeline::ignore_errors)) in one round trip and returns each
    /// command's reply, server errors included as [`redis::Value::ServerError`]: the caller
    /// decides what a failed command means. `key` names the lock in errors.
    pub(crate) async fn run_pipeline(
        &self,
        phase: &'static str,
        pipe: &redis::Pipeline,
        keys: &[&str],
    ) -> Result<Vec<redis::Value>> {
        let mut connection = self.inner.connection.clone();
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        pipe.query_async(&mut connection)
            .await
            .map_err(|err| request_error(phase, keys, err))
    }
}

/// The one naming of a client's connection under way; dropping it lets the next one start.
pub(crate) struct NamingTurn {
    client: Client,
}

impl Drop for NamingTurn {
    fn drop(&mut self) {
        self.client.inner.naming.store(false, Ordering::Release);
    }
}

/// What a failed request means for the caller.
fn request_error(phase: &'static str, keys: &[&str], err: redis::RedisError) -> Error {
    match err.kind() {
        // A reply that could not be parsed leaves the connection (and the outcome of the
        // request) in doubt, like any other broken connection.
        redis::ErrorKind::Parse => Error::Connection { phase, source: err },
        redis::ErrorKind::UnexpectedReturnType => Error::UnexpectedReply {
            phase,
            detail: err.to_string(),
        },
        _ => Error::from_redis(phase, keys, err),
    }
}

/// What a failure to connect means: refused access, something that is not Redis, or no
/// connection.
fn connect_error(url: &str, source: redis::RedisError) -> Error {
    if crate::error::is_auth_failure(&source) {
        return Error::Auth {
            phase: "connect",
            source,
        };
    }
    // Bytes that do not parse as RESP: something else listens on that port.
    if source.kind() == redis::ErrorKind::Parse {
        return Error::NotRedis {
            url: redact(url),
            detail: "its reply does not parse as the Redis protocol".into(),
        };
    }
    Error::from_redis("connect", &[], source)
}

/// Says what is wrong with a URL that cannot name a Redis server, in words: empty, no scheme,
/// a scheme other than `redis`, `rediss`, `unix` or `redis+unix`, no host, a bad port.
fn check_url(text: &str) -> std::result::Result<(), String> {
    if text.trim().is_empty() {
        return Err("the URL is empty; write it like redis://host:6379".into());
    }
    let url = url::Url::parse(text).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => {
            "it has no scheme; write it like redis://host:6379".to_string()
        }
        url::ParseError::InvalidPort => "the port must be a number from 1 to 65535".to_string(),
        other => format!("{other}; write it like redis://host:6379"),
    })?;
    match url.scheme() {
        "redis" => {}
        "rediss" => {
            return Err("rediss:// (TLS) is not supported by this build; use redis://".into());
        }
        "unix" | "redis+unix" => return Ok(()),
        other => {
            return Err(format!(
                "the scheme {other:?} is not Redis's; write it like redis://host:6379"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it names no host; write it like redis://host:6379".into());
    }
    if url.port() == Some(0) {
        return Err("the port must be a number from 1 to 65535".into());
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(format!(
            "the database {db:?} is not a number (redis://host:6379/0)"
        ));
    }
    Ok(())
}

/// The URL with any password replaced, for messages and `Debug`.
fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((head, tail)) => match head.rsplit_once(':') {
            Some((scheme_user, _password)) if scheme_user.contains("//") => {
                format!("{scheme_user}:***@{tail}")
            }
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn url_errors_say_what_is_wrong() {
        for (url, says) in [
            ("", "empty"),
            ("localhost:6379", "scheme"),
            ("http://host:6379", "\"http\""),
            ("redis://host:70000", "1 to 65535"),
            ("redis://host:0", "1 to 65535"),
            ("redis://:6379", "host"),
            ("redis://host:6379/zero", "not a number"),
            ("rediss://host", "TLS"),
        ] {
            let reason = super::check_url(url).unwrap_err();
            assert!(reason.contains(says), "{url:?}: {reason}");
        }
        for good in [
            "redis://127.0.0.1:6380",
            "redis://:pw@host/2",
            "unix:///tmp/r.sock",
        ] {
            assert_eq!(super::check_url(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(
            redact("redis://:secret@host:6000"),
            "redis://:***@host:6000"
        );
        assert_eq!(redact("redis://user:secret@host"), "redis://user:***@host");
        assert_eq!(redact("redis://host:6000/2"), "redis://host:6000/2");
    }
}
