//! Which Redis a command talks to: the one named by `--redis` / `REDIS_URL` (several: a
//! Redlock's servers), a Redis Cluster (`--cluster`), a Sentinel-watched master
//! (`--sentinel --master`), or private ones started for this run on free loopback ports
//! (`redis-server` installed from Debian's packages when missing): a server, a cluster of 3
//! masters, or a master with 2 replicas and 3 sentinels.

use std::process::Command;

use redis_locks::Client;
use test_support::{RedisCluster, RedisServer, SentinelSet, redis_server_installed};

use crate::endpoint::{Endpoint, Place};
use crate::exit::CliError;
use crate::settings::ClientSettings;
use crate::topology::Wanted;

/// Where `run` and `status` look for Redis when no URL is given.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// Where `run` and `status` look for a sentinel when a bare `--sentinel` is given.
pub const DEFAULT_SENTINEL_URL: &str = "redis://127.0.0.1:26379";
/// The name a private Sentinel set-up watches its master under, unless `--master` says.
pub const PRIVATE_MASTER: &str = "mymaster";
/// The masters of a private cluster.
pub const PRIVATE_CLUSTER_MASTERS: usize = 3;
/// The replicas and sentinels of a private Sentinel set-up.
pub const PRIVATE_SENTINEL: (usize, usize) = (2, 3);

/// The private servers a run started; stopped when dropped.
enum Private {
    None,
    Servers(Vec<RedisServer>),
    Cluster(RedisCluster),
    Sentinel(SentinelSet),
}

/// The Redis a command uses; private servers are stopped when this is dropped.
pub struct RedisTarget {
    endpoint: Endpoint,
    private: Private,
}

impl RedisTarget {
    /// What `wanted` names, with private servers started for what it leaves open: servers
    /// (`nodes` of them, each on its own free port) when no `--redis` is given, a cluster of
    /// 3 masters for a bare `--cluster`, a master with 2 replicas and 3 sentinels for a bare
    /// `--sentinel`; every client reaches them with `settings`. Private servers are
    /// plaintext: TLS files are refused with them.
    ///
    /// # Errors
    /// [`CliError::Usage`] for `nodes` other than 1 with a cluster or Sentinel, or TLS
    /// files with private servers; [`CliError::NoInput`] for a TLS file that cannot be read;
    /// [`CliError::Unavailable`] when the private servers cannot be started.
    pub fn private_or(
        wanted: Wanted,
        nodes: usize,
        settings: ClientSettings,
    ) -> Result<RedisTarget, CliError> {
        if nodes > 1 && !matches!(wanted, Wanted::Servers(_)) {
            return Err(CliError::Usage(
                "--nodes starts independent servers for a Redlock; not with --cluster or \
                 --sentinel"
                    .into(),
            ));
        }
        let unavailable = |what: &str, err: test_support::SpawnError| {
            CliError::Unavailable(format!("could not start {what}: {err}"))
        };
        settings.check_files()?;
        let private = match &wanted {
            Wanted::Servers(urls) | Wanted::Cluster(urls) => urls.is_empty(),
            Wanted::Sentinel { sentinels, .. } => sentinels.is_empty(),
        };
        if private && settings.has_tls_files() {
            return Err(CliError::Usage(
                "--tls-ca, --tls-cert and --tls-key are for rediss:// servers; the private \
                 servers this command starts are plaintext: name your TLS servers with \
                 --redis, --cluster or --sentinel"
                    .into(),
            ));
        }
        match wanted {
            Wanted::Servers(urls) if urls.is_empty() => {
                ensure_installed()?;
                let servers = test_support::start_many(nodes.max(1))
                    .map_err(|err| unavailable("a private redis-server", err))?;
                Ok(RedisTarget {
                    endpoint: Endpoint::servers(
                        servers.iter().map(RedisServer::url).collect(),
                        settings,
                    ),
                    private: Private::Servers(servers),
                })
            }
            Wanted::Cluster(seeds) if seeds.is_empty() => {
                ensure_installed()?;
                let cluster = RedisCluster::start(PRIVATE_CLUSTER_MASTERS, 0)
                    .map_err(|err| unavailable("a private Redis Cluster", err))?;
                Ok(RedisTarget {
                    endpoint: Endpoint::new(Place::Cluster(cluster.seed_urls()), settings),
                    private: Private::Cluster(cluster),
                })
            }
            Wanted::Sentinel { sentinels, master } if sentinels.is_empty() => {
                ensure_installed()?;
                let master = master.unwrap_or_else(|| PRIVATE_MASTER.to_string());
                let (replicas, count) = PRIVATE_SENTINEL;
                let set = SentinelSet::builder()
                    .replicas(replicas)
                    .sentinels(count)
                    .master_name(&master)
                    .start()
                    .map_err(|err| unavailable("a private Sentinel set-up", err))?;
                Ok(RedisTarget {
                    endpoint: Endpoint::new(
                        Place::Sentinel {
                            sentinels: set.sentinel_urls(),
                            master,
                        },
                        settings,
                    ),
                    private: Private::Sentinel(set),
                })
            }
            wanted => RedisTarget::local_or(wanted, settings),
        }
    }

    /// What `wanted` names, with this machine's default ports for what it leaves open:
    /// redis://127.0.0.1:6379 for a server or a cluster seed, redis://127.0.0.1:26379 for a
    /// sentinel; every client reaches it with `settings`.
    ///
    /// # Errors
    /// [`CliError::Usage`] for a Sentinel without a master name; [`CliError::NoInput`] for a
    /// TLS file that cannot be read.
    pub fn local_or(wanted: Wanted, settings: ClientSettings) -> Result<RedisTarget, CliError> {
        settings.check_files()?;
        let or_default = |urls: Vec<String>, default: &str| {
            if urls.is_empty() {
                vec![default.to_string()]
            } else {
                urls
            }
        };
        let place = match wanted {
            Wanted::Servers(urls) => Place::Servers(or_default(urls, DEFAULT_URL)),
            Wanted::Cluster(seeds) => Place::Cluster(or_default(seeds, DEFAULT_URL)),
            Wanted::Sentinel { sentinels, master } => Place::Sentinel {
                sentinels: or_default(sentinels, DEFAULT_SENTINEL_URL),
                master: master.ok_or_else(|| {
                    CliError::Usage(
                        "--sentinel needs --master NAME (or REDIS_MASTER): the name the \
                         sentinels watch the master under"
                            .into(),
                    )
                })?,
            },
        };
        Ok(RedisTarget::at(Endpoint::new(place, settings)))
    }

    /// The server `url` names, or a private one: what `--redis URL` alone gives, with the
    /// default settings (no TLS files, no namespace).
    ///
    /// # Errors
    /// [`CliError::Unavailable`] when no private server can be started.
    pub fn resolve(url: Option<String>) -> Result<RedisTarget, CliError> {
        RedisTarget::private_or(
            Wanted::Servers(url.into_iter().collect()),
            1,
            ClientSettings::default(),
        )
    }

    /// The first server's URL; empty for a cluster or Sentinel (see
    /// [`Endpoint::server_url`]).
    pub fn url(&self) -> &str {
        self.endpoint.server_url().unwrap_or_default()
    }

    /// `endpoint`, started by someone else.
    pub fn at(endpoint: Endpoint) -> RedisTarget {
        RedisTarget {
            endpoint,
            private: Private::None,
        }
    }

    /// Where the locks live, as worker processes can be told it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Whether this run started the servers (and may do what it likes with them).
    pub fn is_private(&self) -> bool {
        !matches!(self.private, Private::None)
    }

    /// A lock client, the one way every command connects: see [`Endpoint::connect`].
    ///
    /// # Errors
    /// As [`Endpoint::connect`].
    pub async fn connect(&self) -> Result<Client, CliError> {
        self.endpoint.connect().await
    }

    /// One line that says which Redis this is, for a report's header (passwords hidden; the
    /// namespace, if there is one, named).
    pub fn describe(&self) -> String {
        let namespace = self.endpoint.settings().namespace();
        let described = self.describe_place();
        if namespace.is_empty() {
            described
        } else {
            format!("{described}; keys under the namespace {namespace:?}")
        }
    }

    fn describe_place(&self) -> String {
        let ports = |servers: &[RedisServer]| {
            servers
                .iter()
                .map(|server| server.port().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let private = "started for this run and stopped at its end";
        match (&self.private, self.endpoint.place()) {
            (Private::Servers(servers), _) if servers.len() > 1 => format!(
                "{} private redis-servers ({}) on 127.0.0.1 ports {}, {private}",
                servers.len(),
                server_version(),
                ports(servers)
            ),
            (Private::Servers(servers), _) => format!(
                "a private redis-server ({}) on 127.0.0.1:{}, {private}",
                server_version(),
                ports(servers)
            ),
            (Private::Cluster(cluster), _) => format!(
                "a private Redis Cluster of {} masters ({}) on 127.0.0.1 ports {}, {private}",
                cluster.nodes().len(),
                server_version(),
                ports(cluster.nodes())
            ),
            (Private::Sentinel(set), Place::Sentinel { master, .. }) => format!(
                "a private Sentinel set-up ({}): master {master} on 127.0.0.1:{} with {} \
                 replicas, watched by {} sentinels on ports {}, {private}",
                server_version(),
                set.data_ports().first().copied().unwrap_or_default(),
                set.servers().len().saturating_sub(1),
                set.sentinels().len(),
                ports(set.sentinels())
            ),
            (_, Place::Servers(urls)) => {
                format!(
                    "{} (from --redis / REDIS_URL)",
                    crate::redact(&urls.join(", "))
                )
            }
            (_, Place::Cluster(seeds)) => format!(
                "a Redis Cluster via {} (from --cluster / REDIS_CLUSTER)",
                crate::redact(&seeds.join(", "))
            ),
            (_, Place::Sentinel { sentinels, master }) => format!(
                "Sentinel master {master} via {} (from --sentinel / REDIS_SENTINEL)",
                crate::redact(&sentinels.join(", "))
            ),
        }
    }
}

/// The private servers' program and version (`Redis 7.0.15`, `Valkey 9.1.2`: the program
/// `REDIS_LOCKS_SERVER` names, else `redis-server`).
fn server_version() -> String {
    test_support::server_flavor()
        .map(|flavor| flavor.to_string())
        .unwrap_or_else(|_| "unknown version".into())
}

/// Installs `redis-server` from Debian's packages when it is not on `PATH`: as root directly,
/// otherwise through `sudo -n`; a clear error when neither can work. When `REDIS_LOCKS_SERVER`
/// names another server program (see [`test_support::server_program`]), that one must run:
/// nothing is installed for it.
///
/// # Errors
/// [`CliError::Unavailable`] when it is missing and cannot be installed here.
pub fn ensure_installed() -> Result<(), CliError> {
    if redis_server_installed() {
        return Ok(());
    }
    let program = test_support::server_program();
    if program.as_os_str() != test_support::DEFAULT_SERVER {
        return Err(CliError::Unavailable(format!(
            "{} (from {}) does not run: point it at a redis-server or valkey-server, or pass \
             --redis URL",
            program.display(),
            test_support::SERVER_ENV
        )));
    }
    let manual = "install it yourself (sudo apt-get install -y redis-server redis-tools), or pass --redis URL";
    if Command::new("apt-get").arg("--version").output().is_err() {
        return Err(CliError::Unavailable(format!(
            "redis-server is not installed and there is no apt-get here: {manual}"
        )));
    }
    let sudo: &[&str] = if nix::unistd::Uid::effective().is_root() {
        &[]
    } else if Command::new("sudo")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        &["sudo", "-n"]
    } else {
        return Err(CliError::Unavailable(format!(
            "redis-server is not installed, and installing it needs root or password-less sudo: {manual}"
        )));
    };
    eprintln!("redis-server is not installed; installing it from Debian's packages...");
    for args in [
        &["apt-get", "update", "-qq"][..],
        &[
            "apt-get",
            "install",
            "-y",
            "-qq",
            "redis-server",
            "redis-tools",
        ][..],
    ] {
        let full: Vec<&str> = sudo.iter().chain(args).copied().collect();
        let status = Command::new(full[0])
            .args(&full[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|err| CliError::Unavailable(format!("{}: {err}", full.join(" "))))?;
        if !status.success() {
            return Err(CliError::Unavailable(format!(
                "`{}` failed ({status}): {manual}",
                full.join(" ")
            )));
        }
    }
    if redis_server_installed() {
        Ok(())
    } else {
        Err(CliError::Unavailable(format!(
            "redis-server is still not on PATH after installing: {manual}"
        )))
    }
}
