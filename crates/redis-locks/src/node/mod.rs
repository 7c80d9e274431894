//! The backend seam: every request a lock makes to Redis goes through a [`Node`].
//!
//! A node is one Redis server as the locks see it: script calls ([`Node::run_script`]: a
//! function of the crate's library where the server allows it, else `EVALSHA`; see
//! [`library`] and `call.rs`),
//! pipelines of plain commands ([`Node::run_pipeline`]), single commands ([`Node::query`])
//! and wake-up subscriptions ([`Node::subscribe`]), each failure sorted into the crate's
//! [`Error`]. No primitive touches a connection.
//!
//! A node stands on one of three backends ([`backend`]): one server (one multiplexed
//! connection), a Redis Cluster (each call routed by the slot of its first key: all keys of a
//! lock share one), or the master a set of sentinels names ([`sentinel`], followed across
//! failovers). Each backend sends commands and single-slot pipelines and says what it can do:
//! whether its scripts run in the cluster's form ([`LockScript`]: `SPUBLISH`, and releases that
//! leave a tombstone because a request may run twice) and whether all its requests go over
//! one connection it can name ([`Node::names_its_connection`], which the `Mutex` fast path's
//! vouching needs). Requests that wait for replicas ([`Node::run_script_replicated`]) go over
//! a second backend like the first, made at the first of them ([`replication`]). Wake-ups
//! come through one subscriber per client ([`pubsub`]): `SUBSCRIBE`
//! on one server or the current master, `SSUBSCRIBE` on the lock's shard of a cluster. A
//! quorum over N independent nodes (a Redlock) is N `Node`s asked at once ([`quorum`]).

mod backend;
mod batch;
mod call;
mod connect;
mod library;
mod loading;
mod naming;
mod options;
mod pubsub;
pub(crate) mod quorum;
mod replication;
mod script;
mod sentinel;
mod tls;
mod url;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::error::{Error, Phase, Result};

pub(crate) use batch::ScriptCall;
use connect::{connect_error, open};
pub(crate) use naming::NamingTurn;
pub use options::{ClientOptions, DEFAULT_RENEWAL_BATCH};
pub(crate) use pubsub::{Listener, Subscription, WAKE_ALL};
pub(crate) use replication::Acked;
pub use replication::Replication;
pub(crate) use script::{LockScript, Registered};
#[cfg(test)]
pub(crate) use script::{assert_carries_preludes, undefined_calls};
pub(crate) use url::redact;

/// One Redis server, as every lock handle of a [`Client`](crate::Client) reaches it. Cheap to
/// clone.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    backend: backend::Backend,
    /// How `backend` was made, for `replicated`.
    recipe: backend::Recipe,
    /// A second backend like `backend`, made at the first replicated request: a `WAIT` holds
    /// up every later request on its connection until it returns, so replicated requests go
    /// over connections of their own and never delay the other locks of the client.
    replicated: tokio::sync::OnceCell<backend::Backend>,
    /// The URL, its password hidden.
    url: String,
    options: ClientOptions,
    pubsub: pubsub::Wakeups,
    naming: naming::Naming,
    /// Round trips sent on `connection` (a pipeline counts once).
    requests: AtomicU64,
    /// The server's `run_id` (`INFO server`) when the node connected, if it told: the same
    /// server reached by two URLs has one.
    run_id: Option<String>,
    /// The `run_id` seen last by [`Node::same_server_as_before`] (first, the one seen when the
    /// node connected).
    last_run_id: std::sync::Mutex<Option<String>>,
    /// What the server has loaded of the crate's scripts, as far as this node knows: the
    /// function library, or the scripts it runs with `EVALSHA` (see `call.rs`).
    loads: loading::Loads,
}

impl Node {
    /// Connects to the server at `url` and sends one `PING`, so that what is wrong is said now
    /// rather than at the first lock.
    ///
    /// # Errors
    /// As [`Client::connect`](crate::Client::connect).
    pub(crate) async fn connect(url: &str, options: ClientOptions) -> Result<Node> {
        let (client, config) = open(url, &options)?;
        let pubsub = pubsub::Wakeups::start(
            pubsub::Source::Server(Box::new(client.clone())),
            options.get_connect_timeout(),
        );
        let connection = connect::manager(url, client, config, &options).await?;
        let recipe = backend::Recipe::Server(url.to_string());
        Node::checked(
            url,
            backend::Backend::Server(connection),
            recipe,
            options,
            pubsub,
        )
        .await
    }

    /// Connects to the Redis Cluster that `seeds` (one or more of its nodes' URLs) belong to,
    /// and sends one `PING`.
    ///
    /// # Errors
    /// As [`Client::connect_cluster`](crate::Client::connect_cluster).
    pub(crate) async fn connect_cluster(seeds: &[&str], options: ClientOptions) -> Result<Node> {
        let connection = backend::cluster(seeds, &options).await?;
        let subscriber = backend::cluster_builder(seeds, &options)?;
        let pubsub = pubsub::Wakeups::start(
            pubsub::Source::Cluster(Box::new(subscriber)),
            options.get_connect_timeout(),
        );
        // Each URL hidden on its own (a password may hold a blank).
        let url = seeds
            .iter()
            .map(|seed| redact(seed))
            .collect::<Vec<_>>()
            .join(" ");
        let recipe = backend::Recipe::Cluster(seeds.iter().map(|s| s.to_string()).collect());
        Node::checked(
            &url,
            backend::Backend::Cluster(connection),
            recipe,
            options,
            pubsub,
        )
        .await
    }

    /// Connects to the master that `sentinels` know as `name`, and follows it across
    /// failovers.
    ///
    /// # Errors
    /// As [`Client::connect_sentinel`](crate::Client::connect_sentinel).
    pub(crate) async fn connect_sentinel(
        sentinels: &[&str],
        name: &str,
        options: ClientOptions,
    ) -> Result<Node> {
        let master = sentinel::Master::connect(sentinels, name, options.clone()).await?;
        let pubsub = pubsub::Wakeups::start(
            pubsub::Source::Sentinel(master.clone()),
            options.get_connect_timeout(),
        );
        let url = format!(
            "{} (master {name:?})",
            sentinels
                .iter()
                .map(|sentinel| redact(sentinel))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let recipe = backend::Recipe::Sentinel(
            sentinels.iter().map(|s| s.to_string()).collect(),
            name.to_string(),
        );
        Node::checked(
            &url,
            backend::Backend::Sentinel(master),
            recipe,
            options,
            pubsub,
        )
        .await
    }

    /// A node on `backend`, after one `PING` says that what answers is Redis and lets us in.
    async fn checked(
        url: &str,
        backend: backend::Backend,
        recipe: backend::Recipe,
        options: ClientOptions,
        pubsub: pubsub::Wakeups,
    ) -> Result<Node> {
        // A server that is not Redis, or one that wants a password, is reported now and as
        // such, not at the first lock as something else.
        match backend.command(&redis::cmd("PING")).await {
            Ok(Value::SimpleString(_) | Value::BulkString(_)) => {}
            Ok(other) => {
                return Err(Error::NotRedis {
                    url: redact(url),
                    detail: format!("PING was answered with {other:?}"),
                });
            }
            Err(source) => return Err(connect_error(url, source)),
        }
        may_wake(&backend, &options).await?;
        let run_id = server_run_id(&backend).await;
        Ok(Node::new(url, backend, recipe, options, pubsub, run_id))
    }

    /// Whether the server that answers now is the one that answered the last time this was
    /// asked (or, the first time, when the node connected): the same `run_id` (`INFO
    /// server`). A restart, or a failover to another server, changes it. `false` when either
    /// is unknown (a server that refuses `INFO`, a cluster: many servers), so a caller that
    /// must be sure takes the safe answer. Asked by a release whose reply was lost (see
    /// `Hold::released_first`): one request, off the hot path.
    ///
    /// # Errors
    /// Never: an unreachable server is `false`.
    pub(crate) async fn same_server_as_before(&self) -> bool {
        let now = server_run_id(&self.inner.backend).await;
        let mut seen = self
            .inner
            .last_run_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let same = now.is_some() && *seen == now;
        if now.is_some() {
            *seen = now;
        }
        same
    }

    fn new(
        url: &str,
        backend: backend::Backend,
        recipe: backend::Recipe,
        options: ClientOptions,
        pubsub: pubsub::Wakeups,
        run_id: Option<String>,
    ) -> Node {
        let loads = loading::Loads::new(options.get_functions());
        Node {
            inner: Arc::new(Inner {
                backend,
                recipe,
                replicated: tokio::sync::OnceCell::new(),
                url: redact(url),
                options,
                pubsub,
                naming: naming::Naming::default(),
                requests: AtomicU64::new(0),
                last_run_id: std::sync::Mutex::new(run_id.clone()),
                run_id,
                loads,
            }),
        }
    }

    /// A node whose connection is opened by its first request, not now: a server that cannot
    /// be reached now is no error (its requests fail with [`Error::Connection`] until it is
    /// back). Checks the URL only.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] as for [`Node::connect`].
    pub(crate) fn connect_lazy(url: &str, options: ClientOptions) -> Result<Node> {
        let (client, config) = open(url, &options)?;
        let pubsub = pubsub::Wakeups::start(
            pubsub::Source::Server(Box::new(client.clone())),
            options.get_connect_timeout(),
        );
        let connection = redis::aio::ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|source| connect_error(url, source))?;
        Ok(Node::new(
            url,
            backend::Backend::Server(connection),
            backend::Recipe::Server(url.to_string()),
            options,
            pubsub,
            None,
        ))
    }

    /// The server's URL, its password hidden.
    pub(crate) fn url(&self) -> &str {
        &self.inner.url
    }

    /// The server's `run_id` as it was when the node connected, if the server told it.
    pub(crate) fn run_id(&self) -> Option<&str> {
        self.inner.run_id.as_deref()
    }

    /// The options the node was connected with.
    pub(crate) fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Round trips sent so far: script calls, pipelines and commands (a pipeline counts
    /// once), plus subscription commands and reconnects of the wake-up connection.
    pub(crate) fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed) + self.inner.pubsub.requests()
    }

    /// Runs one of the crate's scripts; `keys` are the keys it touches, the lock key first
    /// (a `WRONGTYPE` error names the one its message starts with). It runs as a function
    /// of the crate's library (`FCALL`) where the server allows it, else with `EVALSHA`
    /// (see [`library`] and `call.rs`).
    pub(crate) async fn run_script<T: FromRedisValue>(
        &self,
        phase: Phase,
        script: &LockScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let sent = self
            .call(&call::Call::on(
                &self.inner.backend,
                phase,
                script,
                keys,
                args,
            ))
            .await?;
        let reply = sent.reply.map_err(|err| request_error(phase, keys, err))?;
        convert(phase, reply)
    }

    /// Runs one of the crate's scripts, then `replication`'s `WAIT` (or `WAITAOF`) in the
    /// same round trip on the same connection, so that what it acknowledges includes the
    /// script's write. Replicated requests have connections of their own (made at the first
    /// one), so a `WAIT` waiting for slow replicas holds up no other lock's requests. Returns
    /// the script's reply and what was acknowledged; whether that is enough is the caller's
    /// to judge ([`Replication`]'s `enough`).
    ///
    /// # Errors
    /// As [`Node::run_script`]; [`Error::Unsupported`] when the server does not know the
    /// command (the script has run: the caller undoes its write).
    pub(crate) async fn run_script_replicated<T: FromRedisValue>(
        &self,
        phase: Phase,
        script: &LockScript,
        keys: &[&str],
        args: &[&str],
        replication: &Replication,
    ) -> Result<(T, Acked)> {
        let backend = self
            .inner
            .replicated
            .get_or_try_init(|| self.inner.recipe.build(&self.inner.options))
            .await?;
        let wait = [replication.command()];
        let sent = self
            .call(&call::Call {
                after: &wait,
                ..call::Call::on(backend, phase, script, keys, args)
            })
            .await?;
        let reply = sent.reply.map_err(|err| request_error(phase, keys, err))?;
        let wait = sent.after.into_iter().next().unwrap_or(Value::Nil);
        Ok((convert(phase, reply)?, replication.acked(wait)?))
    }

    /// Sends `pipe` (plain commands, not a transaction, built with
    /// [`ignore_errors`](redis::Pipeline::ignore_errors)) in one round trip and returns each
    /// command's reply, server errors included as [`Value::ServerError`]: the caller decides
    /// what a failed command means.
    pub(crate) async fn run_pipeline(
        &self,
        phase: Phase,
        pipe: &redis::Pipeline,
        keys: &[&str],
    ) -> Result<Vec<Value>> {
        self.count_request();
        self.inner
            .backend
            .pipeline(pipe)
            .await
            .map_err(|err| request_error(phase, keys, err))
    }

    /// Loads what a call of `scripts` needs in one round trip: the function library (see
    /// [`library`]), or, where the server refuses functions, the scripts into its script
    /// cache. A call of one of them then is a single `FCALL` or `EVALSHA`: one whose reply is
    /// no longer awaited, as a Redlock's late node, still runs (it never needs a fallback).
    /// Asked of the server even when this node loaded the library before: the caller asks
    /// because the server may have come back without it (a Redlock's node that failed).
    pub(crate) async fn load_scripts(&self, scripts: &[&LockScript]) -> Result<()> {
        let library = &self.inner.loads.library;
        if let Some(epoch) = library.loaded() {
            library.lost(epoch);
        }
        self.load(Phase::Acquire, scripts).await
    }

    /// Sends one plain command (a read of a companion key, say).
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        phase: Phase,
        command: &redis::Cmd,
        keys: &[&str],
    ) -> Result<T> {
        self.count_request();
        let reply = self
            .inner
            .backend
            .command(command)
            .await
            .map_err(|err| request_error(phase, keys, err))?;
        convert(phase, reply)
    }

    /// Runs `script` (as [`Node::run_script`]), with a `name` in a pipeline after `CLIENT
    /// SETNAME name` and `CLIENT GETNAME`, so the script surely runs on the connection the
    /// name was given to (see `engine/string_lock/acquire.lua`, `KEYS[3]`). A name is given
    /// only on the rare path that brings a fencing counter up to the clock on a new
    /// connection. When the name sticks, it is recorded as the connection's; when it does not
    /// (an ACL without `CLIENT`, a proxy that answers for the server), this node never names
    /// again, and the script numbers every grant: slower, never unsafe.
    pub(crate) async fn run_script_naming<T: FromRedisValue>(
        &self,
        phase: Phase,
        name: Option<&str>,
        script: &LockScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let Some(name) = name else {
            return self.run_script(phase, script, keys, args).await;
        };
        let mut set = redis::cmd("CLIENT");
        set.arg("SETNAME").arg(name);
        let mut get = redis::cmd("CLIENT");
        get.arg("GETNAME");
        let naming = [set, get];
        let sent = self
            .call(&call::Call {
                before: &naming,
                ..call::Call::on(&self.inner.backend, phase, script, keys, args)
            })
            .await?;
        match sent.before.get(1) {
            Some(Value::BulkString(got)) if got == name.as_bytes() => {
                self.inner.naming.set(name.into());
            }
            _ => self.inner.naming.refuse(),
        }
        let reply = sent.reply.map_err(|err| request_error(phase, keys, err))?;
        convert(phase, reply)
    }

    /// Whether a request may run twice on the server (a cluster client retries after a
    /// broken connection): releases then pass a tombstone key (see `released_before` in
    /// `lock.lua`).
    pub(crate) fn may_run_twice(&self) -> bool {
        self.inner.backend.cluster_form()
    }

    /// Whether the keys of one request must share a cluster slot (a Redis Cluster); one
    /// server (or Sentinel's master) takes any keys together.
    pub(crate) fn is_cluster(&self) -> bool {
        self.inner.backend.cluster_form()
    }

    /// Whether this node's requests all go over one connection it can name: the
    /// capability the `Mutex` fast path's vouching needs (see `engine/string_lock/acquire.lua`,
    /// `KEYS[3]`). Without it (a cluster: one connection per shard), the acquire script
    /// numbers every grant.
    pub(crate) fn names_its_connection(&self) -> bool {
        self.inner.backend.one_connection()
    }

    /// Where the lock key `key` is served: the current master's address on a Sentinel
    /// node, the shard's master on a cluster (asked with `CLUSTER SHARDS`), the URL on
    /// one server.
    ///
    /// # Errors
    /// A failed request.
    pub(crate) async fn serving(&self, key: &str) -> Result<String> {
        match &self.inner.backend {
            backend::Backend::Server(_) => Ok(self.url().to_string()),
            backend::Backend::Sentinel(master) => Ok(master.address()),
            backend::Backend::Cluster(_) => {
                let slot: i64 = self
                    .query(
                        Phase::Inspect,
                        redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
                        &[key],
                    )
                    .await?;
                let slots: Value = self
                    .query(Phase::Inspect, redis::cmd("CLUSTER").arg("SLOTS"), &[])
                    .await?;
                Ok(backend::master_of_slot(&slots, slot).unwrap_or_else(|| "unknown".into()))
            }
        }
    }

    /// The name this node believes its connection has (see `engine/string_lock/acquire.lua`, `KEYS[3]`).
    pub(crate) fn connection_name(&self) -> Option<Arc<str>> {
        self.inner.naming.get()
    }

    /// Records the name the connection was seen to have.
    pub(crate) fn set_connection_name(&self, name: Arc<str>) {
        self.inner.naming.set(name);
    }

    /// The turn to name the connection, if this caller may name it now: none other is naming
    /// it, and names stick. The turn ends when it is dropped (cancellation included).
    pub(crate) fn naming_turn(&self) -> Option<NamingTurn> {
        self.inner.naming.turn()
    }

    /// Registers interest in the wake channel `channel` and waits up to `confirm_within` for
    /// the server to confirm the subscription; past that it is returned anyway, not live.
    pub(crate) async fn subscribe(&self, channel: &str, confirm_within: Duration) -> Subscription {
        self.inner.pubsub.subscribe(channel, confirm_within).await
    }

    /// This client's wake-up address: a waiter id that ends in `@` and this is woken on the
    /// client's own channel of the lock, which only this client listens to (see `wake` in
    /// `lock.lua`).
    pub(crate) fn address(&self) -> &Arc<str> {
        self.inner.pubsub.address()
    }

    /// A new reference to `channel`'s subscription if one is live already (no request).
    pub(crate) fn subscribe_live(&self, channel: &str) -> Option<Subscription> {
        self.inner.pubsub.subscribe_live(channel)
    }

    /// The request connection itself, for tests that act on it as an application sharing it
    /// would.
    #[cfg(test)]
    pub(crate) fn connection(&self) -> redis::aio::ConnectionManager {
        self.inner
            .backend
            .server_connection()
            .expect("a one-server node")
    }

    fn count_request(&self) {
        self.inner.requests.fetch_add(1, Ordering::Relaxed);
        crate::telemetry::requested();
    }
}

/// Checks that this client may publish on the locks' wake-up channels (an ACL user of Redis
/// 7 gets no channel unless given some): without that right every release would fail in
/// its script, and waiters could never be woken. One `PUBLISH` (`SPUBLISH` on a cluster) of
/// an empty message on a channel under the namespace that no lock uses.
///
/// # Errors
/// [`Error::Auth`] saying which channel patterns the user needs, when the server refuses.
async fn may_wake(backend: &backend::Backend, options: &ClientOptions) -> Result<()> {
    let namespace = options.get_namespace();
    let probe = crate::key::LockKeys::with_namespace(namespace, "redis-locks:channel-check")?;
    let publish = if backend.cluster_form() {
        "SPUBLISH"
    } else {
        "PUBLISH"
    };
    let mut command = redis::cmd(publish);
    command.arg(probe.wake_channel()).arg("");
    match backend.command(&command).await {
        Err(err) if err.code() == Some("NOPERM") => {
            let patterns = if namespace.is_empty() {
                "&*".to_string()
            } else {
                format!("&{namespace}:* &{{{namespace}:*")
            };
            Err(Error::Auth {
                phase: Phase::Connect,
                source: redis::RedisError::from((
                    redis::ErrorKind::AuthenticationFailed,
                    "this user may not publish on the locks' wake-up channels, so no waiter \
                     could be woken; give it +publish and the channels",
                    format!("{patterns} (the server said: {err})"),
                )),
            })
        }
        // Anything else (a proxy without PUBLISH, say) shows at the first lock instead.
        _ => Ok(()),
    }
}

/// A reply read whole, in the shape the caller expects: one of another shape (a foreign
/// script under the same SHA, a companion key holding what this crate never wrote) is
/// [`Error::UnexpectedReply`], not a broken connection.
fn convert<T: FromRedisValue>(phase: Phase, reply: Value) -> Result<T> {
    T::from_redis_value(reply).map_err(|err| Error::UnexpectedReply {
        phase,
        detail: err.to_string(),
    })
}

/// What a failed request means for the caller.
fn request_error(phase: Phase, keys: &[&str], err: redis::RedisError) -> Error {
    match err.kind() {
        // A reply that could not be parsed leaves the connection (and the outcome of the
        // request) in doubt, like any other broken connection.
        redis::ErrorKind::Parse => Error::Connection { phase, source: err },
        _ => Error::from_redis(phase, keys, err),
    }
}

/// Which server `backend` reaches now: its `run_id` (`INFO server`). `None` for a server that
/// refuses `INFO` or cannot be reached, a proxy that hides it, and a cluster (many servers).
async fn server_run_id(backend: &backend::Backend) -> Option<String> {
    match backend {
        backend::Backend::Cluster(_) => None,
        _ => backend
            .command(redis::cmd("INFO").arg("server"))
            .await
            .ok()
            .and_then(|info| String::from_redis_value(info).ok())
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("run_id:"))
                    .map(|id| id.trim().to_string())
            }),
    }
}
