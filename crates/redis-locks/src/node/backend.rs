//! What a [`Node`](super::Node) stands on: one server, a Redis Cluster, or the master a set of
//! sentinels names. Each sends a command or a pipeline and says what it can do; the node
//! above it does the rest (script loading, request counting, error sorting) once for all.
//!
//! | | one server | cluster | sentinel |
//! |---|---|---|---|
//! | requests | one multiplexed connection | one connection per master, each call routed by the slot of its first key | one multiplexed connection to the current master, replaced after a failover |
//! | wake-ups | `SUBSCRIBE` / `PUBLISH` | `SSUBSCRIBE` / `SPUBLISH` on the slot's shard | `SUBSCRIBE` / `PUBLISH` on the current master |
//! | names its connection (the fast path's vouching) | yes | no | yes |
//!
//! All keys of one lock share one slot (see [`LockKeys`](crate::LockKeys)), so every script
//! and pipeline of a lock reaches one shard.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{RedisResult, Value};

use super::connect::{connect_error, explained, no_connection_within, open, watched};
use super::sentinel::Master;
use super::tls;
use super::{ClientOptions, redact};
use crate::error::{Error, Result};

/// The longest response timeout a cluster client may have: a release's tombstone lasts
/// 10 s (`RELEASED_MS` in `wait/lock.lua`), and a retry of the release must come within
/// it.
const MAX_CLUSTER_RESPONSE_TIMEOUT: Duration = Duration::from_secs(8);

/// Where a node's requests go.
pub(super) enum Backend {
    /// One server.
    Server(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The master a set of sentinels names, followed across failovers.
    Sentinel(Master),
}

impl Backend {
    /// Sends one command.
    pub(super) async fn command(&self, command: &redis::Cmd) -> RedisResult<Value> {
        match self {
            Backend::Server(connection) => command.query_async(&mut connection.clone()).await,
            Backend::Cluster(connection) => command.query_async(&mut connection.clone()).await,
            Backend::Sentinel(master) => master.command(command).await,
        }
    }

    /// Sends a pipeline in one round trip (on a cluster: to the shard of its first key).
    pub(super) async fn pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        match self {
            Backend::Server(connection) => pipe.query_async(&mut connection.clone()).await,
            Backend::Cluster(connection) => pipe.query_async(&mut connection.clone()).await,
            Backend::Sentinel(master) => master.pipeline(pipe).await,
        }
    }

    /// Whether scripts run in the cluster's form (see [`LockScript`](super::LockScript)):
    /// wake-ups published with `SPUBLISH` (sharded pub/sub, on the shard of the lock's slot)
    /// rather than `PUBLISH`, and releases leaving a tombstone, since the cluster client
    /// retries a request after a broken connection and a script may so run twice.
    pub(super) fn cluster_form(&self) -> bool {
        matches!(self, Backend::Cluster(_))
    }

    /// Whether every request of the node goes over one connection to one server, which the
    /// node can name (`CLIENT SETNAME`): the `Mutex` fast path's vouching needs it. A
    /// cluster has one connection per shard, so it has not.
    pub(super) fn one_connection(&self) -> bool {
        !matches!(self, Backend::Cluster(_))
    }

    /// The connection manager of a one-server backend, for tests that act on the connection
    /// as an application sharing it would.
    #[cfg(test)]
    pub(super) fn server_connection(&self) -> Option<ConnectionManager> {
        match self {
            Backend::Server(connection) => Some(connection.clone()),
            _ => None,
        }
    }
}

/// How a backend was made, to make another like it: the connection replicated requests go
/// over (see [`Node::run_script_replicated`](super::Node::run_script_replicated)).
pub(super) enum Recipe {
    /// One server at this URL.
    Server(String),
    /// The cluster of these seeds.
    Cluster(Vec<String>),
    /// The master these sentinels know under this name.
    Sentinel(Vec<String>, String),
}

impl Recipe {
    /// A new backend like the first, with connections of its own.
    ///
    /// # Errors
    /// As connecting the first did.
    pub(super) async fn build(&self, options: &ClientOptions) -> Result<Backend> {
        match self {
            Recipe::Server(url) => {
                let (client, config) = open(url, options)?;
                Ok(Backend::Server(
                    super::connect::manager(url, client, config, options).await?,
                ))
            }
            Recipe::Cluster(seeds) => {
                let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
                Ok(Backend::Cluster(cluster(&seeds, options).await?))
            }
            Recipe::Sentinel(sentinels, name) => {
                let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
                Ok(Backend::Sentinel(
                    Master::connect(&sentinels, name, options.clone()).await?,
                ))
            }
        }
    }
}

/// Connects to the cluster that `seeds` (one or more of its nodes' URLs) belong to.
///
/// Every request is bounded by the response timeout as a whole, retries after a `MOVED`,
/// `ASK` or a broken connection included, so a call never takes longer than that.
pub(super) async fn cluster(seeds: &[&str], options: &ClientOptions) -> Result<ClusterConnection> {
    let client = cluster_builder(seeds, options)?
        .build()
        .map_err(|source| Error::InvalidUrl {
            url: seeds
                .iter()
                .map(|url| redact(url))
                .collect::<Vec<_>>()
                .join(" "),
            reason: source.to_string(),
        })?;
    let budget = (options.get_connect_timeout() + Duration::from_secs(1))
        * (options.get_reconnect_attempts() as u32 + 1);
    let first = seeds.first().copied().unwrap_or_default();
    let connecting = tokio::time::timeout(budget, client.get_async_connection());
    let failed = match watched(first, options, connecting).await? {
        Ok(Ok(connection)) => return Ok(connection),
        Ok(Err(source)) => connect_error(first, source),
        Err(_) => no_connection_within(budget),
    };
    Err(explained(first, failed, options).await)
}

/// The cluster client settings of `seeds` and `options`, each seed URL checked.
pub(super) fn cluster_builder(
    seeds: &[&str],
    options: &ClientOptions,
) -> Result<ClusterClientBuilder> {
    if seeds.is_empty() {
        return Err(Error::InvalidUrl {
            url: String::new(),
            reason: "a cluster needs at least one seed node's URL".into(),
        });
    }
    for seed in seeds {
        // The same checks as a one-server URL (scheme, host, port).
        open(seed, options)?;
    }
    // A request and its retries end within the response timeout; a release's tombstone
    // (see `RETRIED` in lock.lua) must outlast them.
    if options.get_response_timeout() > MAX_CLUSTER_RESPONSE_TIMEOUT {
        return Err(Error::InvalidDuration {
            what: "response timeout",
            value: options.get_response_timeout(),
            reason: format!(
                "at most {MAX_CLUSTER_RESPONSE_TIMEOUT:?} on a cluster (a release retried \
                 later could no longer tell that it had released)"
            ),
        });
    }
    let urls = seeds
        .iter()
        .map(|seed| tls::effective_url(seed, options))
        .collect::<Result<Vec<_>>>()?;
    let mut builder = ClusterClientBuilder::new(urls)
        .connection_timeout(options.get_connect_timeout())
        .response_timeout(options.get_response_timeout())
        .overall_response_timeout(Some(options.get_response_timeout()));
    if let Some(certificates) = tls::certificates(seeds[0], options)? {
        // `certs` asks for checked certificates; `tls_insecure` says otherwise on purpose.
        builder = builder.certs(certificates);
        if options.get_tls_insecure() {
            builder = builder.tls(redis::TlsMode::Insecure);
        }
    }
    Ok(builder)
}

/// The `host:port` of the master serving `slot`, from a `CLUSTER SLOTS` reply.
pub(super) fn master_of_slot(slots: &Value, slot: i64) -> Option<String> {
    let Value::Array(ranges) = slots else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let Value::Array(range) = range else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (range.first(), range.get(1), range.get(2))
        else {
            return None;
        };
        if !(*start..=*end).contains(&slot) {
            return None;
        }
        let host = match master.first()? {
            Value::BulkString(host) => String::from_utf8_lossy(host).into_owned(),
            Value::SimpleString(host) => host.clone(),
            _ => return None,
        };
        let Value::Int(port) = master.get(1)? else {
            return None;
        };
        Some(format!("{host}:{port}"))
    })
}
