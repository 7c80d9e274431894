//! Where the locks of a command live, as every process of a run can be told it (worker
//! processes get it on their command line or in their plan): one server, a Redlock's
//! independent servers, a Redis Cluster, or a master watched by Sentinels. The one place
//! that connects a lock client ([`Endpoint::connect`]) and a connection of the program's own
//! beside it ([`Endpoint::side`]).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redis_locks::{Client, ClientOptions};
use serde::{Deserialize, Serialize};

use crate::exit::CliError;

/// Where the locks live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// One server, or (several) a Redlock's independent servers.
    Servers(Vec<String>),
    /// A Redis Cluster, through seed nodes.
    Cluster(Vec<String>),
    /// The master the sentinels watch under `master`.
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The name they watch the master under.
        master: String,
    },
}

/// How long a connection of [`Endpoint::side`] may take to open, and a reply to come.
const SIDE_TIMEOUT: Duration = Duration::from_secs(2);

impl Endpoint {
    /// Whether this is a Redlock's servers (more than one independent server).
    pub fn is_redlock(&self) -> bool {
        matches!(self, Endpoint::Servers(urls) if urls.len() > 1)
    }

    /// What it is, in a word (`--json` reports carry it): `server`, `redlock`, `cluster`
    /// or `sentinel`.
    pub fn kind(&self) -> &'static str {
        match self {
            Endpoint::Servers(urls) if urls.len() > 1 => "redlock",
            Endpoint::Servers(_) => "server",
            Endpoint::Cluster(_) => "cluster",
            Endpoint::Sentinel { .. } => "sentinel",
        }
    }

    /// The one lock service of it: the first server of a Redlock's, the rest as it is.
    pub fn first(&self) -> Endpoint {
        match self {
            Endpoint::Servers(urls) => Endpoint::Servers(urls.iter().take(1).cloned().collect()),
            other => other.clone(),
        }
    }

    /// The first server's URL, for what only a plain server offers (`None` for a cluster or
    /// Sentinel).
    pub fn server_url(&self) -> Option<&str> {
        match self {
            Endpoint::Servers(urls) => urls.first().map(String::as_str),
            _ => None,
        }
    }

    /// The command-line options that name it (`--redis URL`..., `--cluster URL`...,
    /// `--sentinel URL`... `--master NAME`), for a worker process of this program.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut each = |flag: &str, urls: &[String]| {
            for url in urls {
                args.push(flag.to_string());
                args.push(url.clone());
            }
        };
        match self {
            Endpoint::Servers(urls) => each("--redis", urls),
            Endpoint::Cluster(seeds) => each("--cluster", seeds),
            Endpoint::Sentinel { sentinels, master } => {
                each("--sentinel", sentinels);
                args.push("--master".into());
                args.push(master.clone());
            }
        }
        args
    }

    /// A lock client: of the (first) server, of the cluster, or of the master the sentinels
    /// name.
    ///
    /// # Errors
    /// What connecting said, as [`CliError`]: 64 for a bad URL, 69 when unreachable, 77
    /// when refused.
    pub async fn connect(&self, options: ClientOptions) -> Result<Client, CliError> {
        Ok(match self {
            Endpoint::Servers(urls) => {
                let url = urls.first().map_or("", String::as_str);
                Client::connect_with(url, options).await?
            }
            Endpoint::Cluster(seeds) => Client::connect_cluster(&strs(seeds), options).await?,
            Endpoint::Sentinel { sentinels, master } => {
                Client::connect_sentinel(&strs(sentinels), master, options).await?
            }
        })
    }

    /// A lock client per server of a Redlock; otherwise the one of [`Endpoint::connect`].
    ///
    /// # Errors
    /// As [`Endpoint::connect`], for the first server that fails.
    pub async fn connect_each(&self, options: ClientOptions) -> Result<Vec<Client>, CliError> {
        match self {
            Endpoint::Servers(urls) if urls.len() > 1 => {
                let mut clients = Vec::with_capacity(urls.len());
                for url in urls {
                    clients.push(Client::connect_with(url, options.clone()).await?);
                }
                Ok(clients)
            }
            _ => Ok(vec![self.connect(options).await?]),
        }
    }

    /// A connection of the program's own beside the lock client's, for commands that are not
    /// the locks' (deleting fencing counters, the benchmarks' bare baselines, `MEMORY
    /// USAGE`): to the (first) server; a cluster connection that sends each command to the
    /// master of its key's slot; or to the master the sentinels name now (not followed
    /// across a failover).
    ///
    /// # Errors
    /// [`CliError::Usage`] for a bad URL, [`CliError::Unavailable`] when nothing answers.
    pub async fn side(&self) -> Result<SideConnection, CliError> {
        match self {
            Endpoint::Servers(urls) => Ok(SideConnection::Server(
                crate::connection(urls.first().map_or("", String::as_str)).await?,
            )),
            Endpoint::Cluster(seeds) => {
                let client = redis::cluster::ClusterClientBuilder::new(seeds.clone())
                    .connection_timeout(SIDE_TIMEOUT)
                    .response_timeout(SIDE_TIMEOUT)
                    .build()
                    .map_err(|err| CliError::Usage(format!("invalid cluster seed: {err}")))?;
                let connection = client.get_async_connection().await.map_err(|err| {
                    CliError::Unavailable(format!("cannot connect to the Redis Cluster: {err}"))
                })?;
                Ok(SideConnection::Cluster(connection))
            }
            Endpoint::Sentinel { .. } => Ok(SideConnection::Server(
                crate::connection(&self.master_url().await?).await?,
            )),
        }
    }

    /// Each server of a Redlock as an endpoint of its own; the one otherwise.
    pub fn nodes(&self) -> Vec<Endpoint> {
        match self {
            Endpoint::Servers(urls) if urls.len() > 1 => urls
                .iter()
                .map(|url| Endpoint::Servers(vec![url.clone()]))
                .collect(),
            _ => vec![self.clone()],
        }
    }

    /// A connection of [`Endpoint::side`] to each server of a Redlock; the one otherwise.
    ///
    /// # Errors
    /// As [`Endpoint::side`].
    pub async fn sides(&self) -> Result<Vec<SideConnection>, CliError> {
        let mut sides = Vec::new();
        for node in self.nodes() {
            sides.push(node.side().await?);
        }
        Ok(sides)
    }

    /// The URL of the server that holds the data now: the (first) server's; the master
    /// the sentinels name (with the first sentinel URL's user, password and database, as
    /// the lock client connects to it). `None` for a cluster, which has one per shard.
    ///
    /// # Errors
    /// [`CliError::Unavailable`] when no sentinel names the master.
    pub async fn master_url(&self) -> Result<String, CliError> {
        match self {
            Endpoint::Servers(urls) => Ok(urls.first().cloned().unwrap_or_default()),
            Endpoint::Cluster(_) => Err(CliError::Usage(
                "a Redis Cluster has a master per shard, not one".into(),
            )),
            Endpoint::Sentinel { sentinels, master } => {
                let mut errors = Vec::new();
                for sentinel in sentinels {
                    match ask_sentinel(sentinel, master).await {
                        Ok((host, port)) => return with_address(&sentinels[0], &host, port),
                        Err(err) => errors.push(format!("{sentinel}: {err}")),
                    }
                }
                Err(CliError::Unavailable(format!(
                    "no sentinel named the master {master:?}: {}",
                    errors.join("; ")
                )))
            }
        }
    }
}

fn strs(urls: &[String]) -> Vec<&str> {
    urls.iter().map(String::as_str).collect()
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME master` of the sentinel at `url`.
async fn ask_sentinel(url: &str, master: &str) -> Result<(String, u16), String> {
    let mut connection = crate::connection(url)
        .await
        .map_err(|err| err.to_string())?;
    let address: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut connection)
        .await
        .map_err(|err| err.to_string())?;
    address.ok_or_else(|| format!("it watches no master named {master:?}"))
}

/// `url` with its host and port replaced.
fn with_address(url: &str, host: &str, port: u16) -> Result<String, CliError> {
    let mut url = url::Url::parse(url)
        .map_err(|err| CliError::Usage(format!("invalid sentinel URL {url:?}: {err}")))?;
    url.set_host(Some(host))
        .and_then(|()| {
            url.set_port(Some(port))
                .map_err(|()| url::ParseError::InvalidPort)
        })
        .map_err(|err| {
            CliError::Unavailable(format!("the master's address {host}:{port}: {err}"))
        })?;
    Ok(url.to_string())
}

/// A connection of [`Endpoint::side`]: to one server, or to a cluster (each command to the
/// master of its key's slot; a pipeline's keys must share a slot).
#[derive(Clone)]
pub enum SideConnection {
    /// To one server.
    Server(ConnectionManager),
    /// To a cluster.
    Cluster(ClusterConnection),
}

impl SideConnection {
    /// Sends `cmd` to the server that holds `key`: the server, or the master of `key`'s slot
    /// (for a command whose arguments do not name the key, such as `SCAN`).
    ///
    /// # Errors
    /// What Redis or the connection said.
    pub async fn query_at<T: redis::FromRedisValue>(
        &mut self,
        key: &str,
        cmd: Cmd,
    ) -> redis::RedisResult<T> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        match self {
            SideConnection::Server(connection) => cmd.query_async(connection).await,
            SideConnection::Cluster(connection) => {
                let route = Route::with_key(key, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                let value = connection.route_command(cmd, routing).await?;
                Ok(redis::from_redis_value(value)?)
            }
        }
    }
}

impl ConnectionLike for SideConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            SideConnection::Server(connection) => connection.req_packed_command(cmd),
            SideConnection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            SideConnection::Server(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            SideConnection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            SideConnection::Server(connection) => connection.get_db(),
            SideConnection::Cluster(connection) => connection.get_db(),
        }
    }
}
