//! Where the locks of a command live, and how its clients talk to them, as every process of
//! a run can be told it (worker processes get it on their command line or in their plan):
//! one server, a Redlock's independent servers, a Redis Cluster, or a master watched by
//! Sentinels ([`Place`]), with the TLS settings and key namespace of
//! [`ClientSettings`]. The one place that connects a lock client ([`Endpoint::connect`]) and
//! a connection of the program's own beside it ([`Endpoint::side`]).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redis_locks::{Client, ClientOptions, LockKeys};
use serde::{Deserialize, Serialize};

use crate::exit::CliError;
use crate::settings::{ClientSettings, is_tls};

/// Where the locks live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
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

/// Where the locks live ([`Place`]), and how every client of the run talks to them
/// ([`ClientSettings`]: TLS, the key namespace).
///
/// ```
/// use cli_support::endpoint::{Endpoint, Place};
/// use cli_support::settings::ClientSettings;
///
/// let endpoint = Endpoint::new(
///     Place::Servers(vec!["rediss://locks:secret@redis.internal:6380".into()]),
///     ClientSettings::default(),
/// );
/// assert_eq!(endpoint.kind(), "server");
/// assert!(endpoint.is_tls());
/// assert_eq!(endpoint.user(), "locks");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    place: Place,
    settings: ClientSettings,
}

/// How long a connection of [`Endpoint::side`] may take to open, and a reply to come.
const SIDE_TIMEOUT: Duration = Duration::from_secs(2);

impl Endpoint {
    /// The locks at `place`, reached with `settings`.
    pub fn new(place: Place, settings: ClientSettings) -> Endpoint {
        Endpoint { place, settings }
    }

    /// One server, or a Redlock's servers, reached with `settings`.
    pub fn servers(urls: Vec<String>, settings: ClientSettings) -> Endpoint {
        Endpoint::new(Place::Servers(urls), settings)
    }

    /// Where the locks live.
    pub fn place(&self) -> &Place {
        &self.place
    }

    /// How the clients talk to them.
    pub fn settings(&self) -> &ClientSettings {
        &self.settings
    }

    /// Another place, reached with the same settings.
    pub fn with_place(&self, place: Place) -> Endpoint {
        Endpoint::new(place, self.settings.clone())
    }

    /// The keys of the lock `name` under the settings' namespace.
    ///
    /// # Errors
    /// [`CliError::Usage`] for a name no lock can have.
    pub fn keys(&self, name: &str) -> Result<LockKeys, CliError> {
        self.settings.keys(name)
    }

    /// The URL whose scheme and user name every connection of the lock client follows: the
    /// (first) server's, the first seed's, the first sentinel's (the master is reached as
    /// the sentinels are, with their user).
    pub fn first_url(&self) -> &str {
        match &self.place {
            Place::Servers(urls) | Place::Cluster(urls) => urls.first(),
            Place::Sentinel { sentinels, .. } => sentinels.first(),
        }
        .map_or("", String::as_str)
    }

    /// Whether the connections are TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        is_tls(self.first_url())
    }

    /// The user the connections log in as: the URL's user name, or `default` (Redis's
    /// user for a connection that names none, or only a password).
    pub fn user(&self) -> String {
        user_of(self.first_url())
    }

    /// Whether this is a Redlock's servers (more than one independent server).
    pub fn is_redlock(&self) -> bool {
        matches!(&self.place, Place::Servers(urls) if urls.len() > 1)
    }

    /// What it is, in a word (`--json` reports carry it): `server`, `redlock`, `cluster`
    /// or `sentinel`.
    pub fn kind(&self) -> &'static str {
        match &self.place {
            Place::Servers(urls) if urls.len() > 1 => "redlock",
            Place::Servers(_) => "server",
            Place::Cluster(_) => "cluster",
            Place::Sentinel { .. } => "sentinel",
        }
    }

    /// The one lock service of it: the first server of a Redlock's, the rest as it is.
    pub fn first(&self) -> Endpoint {
        match &self.place {
            Place::Servers(urls) => {
                self.with_place(Place::Servers(urls.iter().take(1).cloned().collect()))
            }
            _ => self.clone(),
        }
    }

    /// The first server's URL, for what only a plain server offers (`None` for a cluster or
    /// Sentinel).
    pub fn server_url(&self) -> Option<&str> {
        match &self.place {
            Place::Servers(urls) => urls.first().map(String::as_str),
            _ => None,
        }
    }

    /// The command-line options that name it (`--redis URL`..., `--cluster URL`...,
    /// `--sentinel URL`... `--master NAME`) and its settings (`--tls-ca FILE`...,
    /// `--namespace NS`), for a worker process of this program.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let mut each = |flag: &str, urls: &[String]| {
            for url in urls {
                args.push(flag.to_string());
                args.push(url.clone());
            }
        };
        match &self.place {
            Place::Servers(urls) => each("--redis", urls),
            Place::Cluster(seeds) => each("--cluster", seeds),
            Place::Sentinel { sentinels, master } => {
                each("--sentinel", sentinels);
                args.push("--master".into());
                args.push(master.clone());
            }
        }
        args.extend(self.settings.args());
        args
    }

    /// The lock clients' options: the library's defaults with the settings (see
    /// [`ClientSettings::apply`]).
    ///
    /// # Errors
    /// [`CliError::NoInput`] for a TLS file that cannot be read.
    pub fn client_options(&self) -> Result<ClientOptions, CliError> {
        self.settings.client_options()
    }

    /// A lock client, with the settings: of the (first) server, of the cluster, or of the
    /// master the sentinels name.
    ///
    /// # Errors
    /// What connecting said, as [`CliError`]: 64 for a bad URL or TLS settings that cannot
    /// be used, 66 for a TLS file that cannot be read, 69 when unreachable (or not TLS
    /// behind `rediss://`), 77 when refused (or a certificate is).
    pub async fn connect(&self) -> Result<Client, CliError> {
        self.connect_with(self.client_options()?).await
    }

    /// As [`Endpoint::connect`], with `options` as they are (made with
    /// [`ClientSettings::apply`]).
    ///
    /// # Errors
    /// As [`Endpoint::connect`].
    pub async fn connect_with(&self, options: ClientOptions) -> Result<Client, CliError> {
        Ok(match &self.place {
            Place::Servers(urls) => {
                let url = urls.first().map_or("", String::as_str);
                Client::connect_with(url, options).await?
            }
            Place::Cluster(seeds) => Client::connect_cluster(&strs(seeds), options).await?,
            Place::Sentinel { sentinels, master } => {
                Client::connect_sentinel(&strs(sentinels), master, options).await?
            }
        })
    }

    /// A lock client per server of a Redlock; otherwise the one of [`Endpoint::connect`].
    ///
    /// # Errors
    /// As [`Endpoint::connect`], for the first server that fails.
    pub async fn connect_each(&self) -> Result<Vec<Client>, CliError> {
        let options = self.client_options()?;
        match &self.place {
            Place::Servers(urls) if urls.len() > 1 => {
                let mut clients = Vec::with_capacity(urls.len());
                for url in urls {
                    clients.push(Client::connect_with(url, options.clone()).await?);
                }
                Ok(clients)
            }
            _ => Ok(vec![self.connect_with(options).await?]),
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
        match &self.place {
            Place::Servers(urls) => Ok(SideConnection::Server(
                crate::connection_with(urls.first().map_or("", String::as_str), &self.settings)
                    .await?,
            )),
            Place::Cluster(seeds) => {
                let urls = seeds
                    .iter()
                    .map(|seed| self.settings.effective_url(seed))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut builder = redis::cluster::ClusterClientBuilder::new(urls)
                    .connection_timeout(SIDE_TIMEOUT)
                    .response_timeout(SIDE_TIMEOUT);
                if let Some(certificates) = self.settings.certificates(self.first_url())? {
                    builder = builder.certs(certificates);
                    if self.settings.tls_insecure() {
                        builder = builder.tls(redis::TlsMode::Insecure);
                    }
                }
                let client = builder
                    .build()
                    .map_err(|err| CliError::Usage(format!("invalid cluster seed: {err}")))?;
                let connection = client.get_async_connection().await.map_err(|err| {
                    CliError::Unavailable(format!("cannot connect to the Redis Cluster: {err}"))
                })?;
                Ok(SideConnection::Cluster(connection))
            }
            Place::Sentinel { .. } => Ok(SideConnection::Server(
                crate::connection_with(&self.master_url().await?, &self.settings).await?,
            )),
        }
    }

    /// Each server of a Redlock as an endpoint of its own; the one otherwise.
    pub fn nodes(&self) -> Vec<Endpoint> {
        match &self.place {
            Place::Servers(urls) if urls.len() > 1 => urls
                .iter()
                .map(|url| self.with_place(Place::Servers(vec![url.clone()])))
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
        match &self.place {
            Place::Servers(urls) => Ok(urls.first().cloned().unwrap_or_default()),
            Place::Cluster(_) => Err(CliError::Usage(
                "a Redis Cluster has a master per shard, not one".into(),
            )),
            Place::Sentinel { sentinels, master } => {
                let mut errors = Vec::new();
                for sentinel in sentinels {
                    match ask_sentinel(sentinel, master, &self.settings).await {
                        Ok((host, port)) => return with_address(&sentinels[0], &host, port),
                        Err(err) => errors.push(format!("{}: {err}", crate::redact(sentinel))),
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

/// The user a connection to `url` logs in as: its user name, or `default` (Redis's user
/// for a connection that names none, or only a password). A `unix://` URL names it in its
/// `user=` query.
///
/// ```
/// use cli_support::endpoint::user_of;
/// assert_eq!(user_of("rediss://locks:secret@h:6380"), "locks");
/// assert_eq!(user_of("redis://:secret@h:6379"), "default");
/// assert_eq!(user_of("redis://h:6379"), "default");
/// assert_eq!(user_of("unix:///tmp/r.sock?user=locks&pass=secret"), "locks");
/// ```
pub fn user_of(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        return "default".into();
    };
    let user = if parsed.scheme().contains("unix") {
        parsed
            .query_pairs()
            .find(|(key, _)| key == "user")
            .map(|(_, user)| user.into_owned())
            .unwrap_or_default()
    } else {
        percent_decoded(parsed.username())
    };
    if user.is_empty() {
        "default".into()
    } else {
        user
    }
}

/// `text` with its `%XX` escapes decoded (as redis-rs decodes a URL's user name).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME master` of the sentinel at `url`.
async fn ask_sentinel(
    url: &str,
    master: &str,
    settings: &ClientSettings,
) -> Result<(String, u16), String> {
    let mut connection = crate::connection_with(url, settings)
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
    let mut url = url::Url::parse(url).map_err(|err| {
        CliError::Usage(format!(
            "invalid sentinel URL {}: {err}",
            crate::redact(url)
        ))
    })?;
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
