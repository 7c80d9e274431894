//! A master with replicas watched by Redis Sentinels, all private processes on loopback ports.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::SpawnError;
use crate::probe::{self, master_sees_online, query, replicating, wait_until};
use crate::server::{Launch, RedisServer};
use crate::tls::ServerTls;

/// How long a new set may take until the replicas are in sync and every sentinel sees them all.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Settings for a [`SentinelSet`]; from [`SentinelSet::builder`].
///
/// ```no_run
/// let set = test_support::SentinelSet::builder()
///     .replicas(2)
///     .sentinels(3)
///     .master_name("locks")
///     .data_args(&["--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"])
///     .start()
///     .unwrap();
/// assert_eq!(set.master_name(), "locks");
/// ```
#[derive(Debug, Clone)]
pub struct SentinelSetBuilder {
    replicas: usize,
    sentinels: usize,
    master_name: String,
    quorum: Option<usize>,
    down_after: Duration,
    failover_timeout: Duration,
    data_args: Vec<String>,
    tls: Option<ServerTls>,
}

impl SentinelSetBuilder {
    /// The number of replicas of the master; 2 by default.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// The number of sentinels (at least 1); 3 by default.
    pub fn sentinels(mut self, sentinels: usize) -> Self {
        self.sentinels = sentinels;
        self
    }

    /// The name the sentinels monitor the master under; "mymaster" by default.
    pub fn master_name(mut self, name: &str) -> Self {
        self.master_name = name.to_owned();
        self
    }

    /// How many sentinels must agree that the master is down; a majority of the sentinels by
    /// default (2 of 3).
    pub fn quorum(mut self, quorum: usize) -> Self {
        self.quorum = Some(quorum);
        self
    }

    /// `sentinel down-after-milliseconds`; 1 s by default.
    pub fn down_after(mut self, down_after: Duration) -> Self {
        self.down_after = down_after;
        self
    }

    /// `sentinel failover-timeout`; 5 s by default.
    pub fn failover_timeout(mut self, timeout: Duration) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Extra `redis-server` arguments for the master and the replicas (not the sentinels),
    /// such as `["--min-replicas-to-write", "1", "--min-replicas-max-lag", "2"]`.
    pub fn data_args(mut self, args: &[&str]) -> Self {
        self.data_args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Every process speaks TLS only (`--tls-port`, `--port 0`), with the good certificate of
    /// [`TlsFiles`](crate::TlsFiles): the replicas replicate and the sentinels watch over TLS
    /// (`tls-replication yes`); clients need no certificate. The
    /// [`sentinel_urls`](SentinelSet::sentinel_urls) are then `rediss://` URLs, the master
    /// the sentinels name speaks TLS, and this crate's own connections use TLS.
    ///
    /// ```no_run
    /// let set = test_support::SentinelSet::builder().tls().start().unwrap();
    /// assert!(set.sentinel_urls()[0].starts_with("rediss://127.0.0.1:"));
    /// ```
    pub fn tls(mut self) -> Self {
        self.tls = Some(ServerTls::topology(false));
        self
    }

    /// As [`SentinelSetBuilder::tls`], and every process (sentinels too) requires a client
    /// certificate signed by the test CA (`tls-auth-clients yes`), such as
    /// [`TlsFiles::client`](crate::TlsFiles::client).
    ///
    /// ```no_run
    /// let set = test_support::SentinelSet::builder().mutual_tls().start().unwrap();
    /// assert!(set.servers().iter().all(|s| s.is_tls()));
    /// ```
    pub fn mutual_tls(mut self) -> Self {
        self.tls = Some(ServerTls::topology(true));
        self
    }

    /// Starts the master, the replicas (`--replicaof`) and the sentinels, and waits (at most
    /// 20 s) until every replica's link is up and every sentinel reports the master with all
    /// the replicas and all the other sentinels, so a failover test can start at once.
    ///
    /// # Errors
    /// [`SpawnError::InvalidTopology`] for no sentinel, or a master name with spaces; a
    /// process's start-up error; [`SpawnError::Timeout`] (with a tail of the logs). Processes
    /// already started are stopped.
    pub fn start(self) -> Result<SentinelSet, SpawnError> {
        if self.sentinels == 0 {
            return Err(SpawnError::InvalidTopology(
                "a Sentinel set needs at least one sentinel".into(),
            ));
        }
        if self.master_name.is_empty() || self.master_name.contains(char::is_whitespace) {
            return Err(SpawnError::InvalidTopology(format!(
                "master name {:?} must be one word",
                self.master_name
            )));
        }
        let started = Instant::now();
        let mut common: Vec<String> = ["--repl-diskless-sync-delay", "0", "--save", ""]
            .iter()
            .map(|a| a.to_string())
            .collect();
        if self.tls.is_some() {
            common.extend(["--tls-replication", "yes"].map(String::from));
        }
        common.extend(self.data_args.iter().cloned());
        let start_data = |args: &[String]| {
            RedisServer::start_with(|_| Launch {
                args: args.to_vec(),
                config: None,
                tls: self.tls,
            })
        };
        let master = start_data(&common)?;
        let master_port = master.port();
        let mut set = SentinelSet {
            sentinels: Vec::new(),
            data: vec![master],
            master_name: self.master_name.clone(),
            paused: Mutex::new(HashSet::new()),
        };
        for _ in 0..self.replicas {
            let mut args = vec![
                "--replicaof".to_owned(),
                "127.0.0.1".to_owned(),
                master_port.to_string(),
            ];
            args.extend(common.iter().cloned());
            set.data.push(start_data(&args)?);
        }
        let replica_ports: Vec<u16> = set.data[1..].iter().map(RedisServer::port).collect();
        set.wait(
            "every replica in sync with the master",
            READY_TIMEOUT.saturating_sub(started.elapsed()),
            || {
                for &port in &replica_ports {
                    if replicating(port)? != Some((master_port, true)) {
                        return Err(format!("replica {port}: link to {master_port} not up"));
                    }
                }
                master_sees_online(master_port, &replica_ports)
            },
        )?;

        let name = &self.master_name;
        let quorum = self.quorum.unwrap_or(self.sentinels / 2 + 1);
        for _ in 0..self.sentinels {
            // Over TLS, the port is the TLS one (the command line says so too).
            let listen = |port: u16| match self.tls {
                None => format!("port {port}\n"),
                Some(_) => format!("port 0\ntls-port {port}\ntls-replication yes\n"),
            };
            set.sentinels.push(RedisServer::start_with(|port| Launch {
                args: vec!["--sentinel".to_owned()],
                tls: self.tls,
                config: Some(format!(
                    "{}\
                     bind 127.0.0.1\n\
                     sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n\
                     sentinel down-after-milliseconds {name} {}\n\
                     sentinel failover-timeout {name} {}\n\
                     sentinel parallel-syncs {name} 1\n",
                    listen(port),
                    self.down_after.as_millis().max(1),
                    self.failover_timeout.as_millis().max(1),
                )),
            })?);
        }
        let (replicas, sentinels) = (self.replicas.to_string(), (self.sentinels - 1).to_string());
        set.wait(
            "every sentinel seeing the master, its replicas and the other sentinels",
            READY_TIMEOUT.saturating_sub(started.elapsed()),
            || {
                for port in set.sentinel_ports() {
                    let master = set.sentinel_master(port)?;
                    let get = |k: &str| master.get(k).map(String::as_str).unwrap_or("");
                    if get("flags") != "master"
                        || get("port") != master_port.to_string()
                        || get("num-slaves") != replicas
                        || get("num-other-sentinels") != sentinels
                    {
                        return Err(format!(
                            "sentinel {port} reports flags={} port={} num-slaves={} \
                             num-other-sentinels={}",
                            get("flags"),
                            get("port"),
                            get("num-slaves"),
                            get("num-other-sentinels"),
                        ));
                    }
                }
                Ok(())
            },
        )?;
        Ok(set)
    }
}

/// One master with replicas, watched by Redis Sentinels, all private processes on `127.0.0.1`;
/// every process (sentinels too) is killed (SIGKILL) on drop.
///
/// The data nodes run with `--repl-diskless-sync-delay 0` and no persistence; each sentinel is
/// `redis-server <config> --sentinel` with a writable config file in its own temporary
/// directory (`down-after-milliseconds` 1000, `failover-timeout` 5000, `parallel-syncs` 1). A
/// process is live unless it was killed ([`kill_node`](SentinelSet::kill_node)) or is paused
/// ([`pause_node`](SentinelSet::pause_node)).
///
/// ```no_run
/// use std::time::Duration;
///
/// let mut set = test_support::SentinelSet::start(2, 3).unwrap();
/// let old = set.master_port();
/// set.kill_node(old);
/// let new = set.wait_failover(old, Duration::from_secs(30)).unwrap();
/// assert_ne!(new, old);
/// ```
pub struct SentinelSet {
    // Declared first, so dropped (killed) before the data nodes they watch.
    sentinels: Vec<RedisServer>,
    data: Vec<RedisServer>,
    master_name: String,
    paused: Mutex<HashSet<u16>>,
}

impl std::fmt::Debug for SentinelSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelSet")
            .field("master_name", &self.master_name)
            .field("data", &self.data)
            .field("sentinels", &self.sentinels)
            .field("paused", &self.paused.lock().unwrap())
            .finish()
    }
}

impl SentinelSet {
    /// Starts a master with `replicas` replicas and `sentinels` sentinels, with the default
    /// settings of [`SentinelSet::builder`]. `start(2, 3)` is the common case.
    ///
    /// # Errors
    /// As [`SentinelSetBuilder::start`].
    pub fn start(replicas: usize, sentinels: usize) -> Result<SentinelSet, SpawnError> {
        Self::builder()
            .replicas(replicas)
            .sentinels(sentinels)
            .start()
    }

    /// Settings to change before starting: 2 replicas, 3 sentinels, "mymaster", quorum 2,
    /// down after 1 s, failover timeout 5 s unless changed.
    pub fn builder() -> SentinelSetBuilder {
        SentinelSetBuilder {
            replicas: 2,
            sentinels: 3,
            master_name: "mymaster".to_owned(),
            quorum: None,
            down_after: Duration::from_millis(1000),
            failover_timeout: Duration::from_millis(5000),
            data_args: Vec::new(),
            tls: None,
        }
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS set) of every sentinel, killed ones
    /// included.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The ports of the sentinels, killed ones included.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// The sentinels, killed ones included (their [`RedisServer::pid`] is `None`).
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The data nodes (the first started as the master, then the replicas), killed ones
    /// included.
    pub fn servers(&self) -> &[RedisServer] {
        &self.data
    }

    /// The ports of the data nodes, in the order of [`SentinelSet::servers`].
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisServer::port).collect()
    }

    /// The data node or sentinel listening on `port`, if it is one of this set's.
    pub fn server(&self, port: u16) -> Option<&RedisServer> {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|s| s.port() == port)
    }

    /// The port of the current master, as the live sentinels name it
    /// (`SENTINEL get-master-addr-by-name`; the answer most of them give).
    ///
    /// # Panics
    /// When no live sentinel answers.
    pub fn master_port(&self) -> u16 {
        let mut counts: HashMap<u16, usize> = HashMap::new();
        let mut errors = Vec::new();
        for port in self.live(&self.sentinels) {
            match self.named_master(port) {
                Ok(master) => *counts.entry(master).or_default() += 1,
                Err(err) => errors.push(err),
            }
        }
        counts
            .into_iter()
            .max_by_key(|&(port, count)| (count, port))
            .map(|(port, _)| port)
            .unwrap_or_else(|| panic!("no live sentinel named the master: {errors:?}"))
    }

    /// Kills the data node or sentinel on `port` with SIGKILL and reaps it (paused or not).
    ///
    /// # Panics
    /// When no process of this set listens on `port`.
    pub fn kill_node(&mut self, port: u16) {
        self.paused.lock().unwrap().remove(&port);
        self.data
            .iter_mut()
            .chain(&mut self.sentinels)
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no process of this Sentinel set listens on port {port}"))
            .kill();
    }

    /// Freezes the data node or sentinel on `port` with SIGSTOP until
    /// [`SentinelSet::resume_node`]. While paused it counts as not live.
    ///
    /// # Panics
    /// When no process of this set listens on `port`.
    pub fn pause_node(&self, port: u16) {
        self.process(port).pause();
        self.paused.lock().unwrap().insert(port);
    }

    /// Lets a paused process run again (SIGCONT).
    ///
    /// # Panics
    /// When no process of this set listens on `port`.
    pub fn resume_node(&self, port: u16) {
        self.process(port).resume();
        self.paused.lock().unwrap().remove(&port);
    }

    /// Waits (at most `timeout`) until every live sentinel names a master other than
    /// `old_master_port`, the same one, and that data node answers `role:master`. Returns
    /// its port.
    ///
    /// # Errors
    /// [`SpawnError::Timeout`] (with a tail of the logs).
    pub fn wait_failover(
        &self,
        old_master_port: u16,
        timeout: Duration,
    ) -> Result<u16, SpawnError> {
        self.wait(
            &format!("the sentinels naming a new master in place of port {old_master_port}"),
            timeout,
            || {
                let master = self.agreed_master()?;
                if master == old_master_port {
                    return Err(format!("the sentinels still name {old_master_port}"));
                }
                self.check_live_master(master)?;
                Ok(master)
            },
        )
    }

    /// Waits (at most `timeout`) until every live data node other than the current master (as
    /// all live sentinels name it) replicates it with its link up, and the master lists them
    /// all as online: after [`SentinelSet::wait_failover`], for a master started with
    /// `--min-replicas-to-write`, or a test that reads from replicas.
    ///
    /// # Errors
    /// [`SpawnError::Timeout`] (with a tail of the logs).
    pub fn wait_replicas_up(&self, timeout: Duration) -> Result<(), SpawnError> {
        self.wait(
            "every live replica in sync with the master",
            timeout,
            || {
                let master = self.agreed_master()?;
                self.check_live_master(master)?;
                let replicas: Vec<u16> = self
                    .live(&self.data)
                    .into_iter()
                    .filter(|&p| p != master)
                    .collect();
                for &port in &replicas {
                    if replicating(port)? != Some((master, true)) {
                        return Err(format!("replica {port}: link to {master} not up"));
                    }
                }
                master_sees_online(master, &replicas)
            },
        )
    }

    fn process(&self, port: u16) -> &RedisServer {
        self.server(port)
            .unwrap_or_else(|| panic!("no process of this Sentinel set listens on port {port}"))
    }

    /// The ports of the live (neither killed nor paused) processes among `servers`.
    fn live(&self, servers: &[RedisServer]) -> Vec<u16> {
        let paused = self.paused.lock().unwrap();
        servers
            .iter()
            .filter(|s| s.pid().is_some() && !paused.contains(&s.port()))
            .map(RedisServer::port)
            .collect()
    }

    /// `SENTINEL MASTER <name>` of the sentinel on `port`, as field/value pairs.
    fn sentinel_master(&self, port: u16) -> Result<HashMap<String, String>, String> {
        query(
            port,
            redis::cmd("SENTINEL").arg("MASTER").arg(&self.master_name),
        )
    }

    /// The master port the sentinel on `port` names.
    fn named_master(&self, port: u16) -> Result<u16, String> {
        let addr: Vec<String> = query(
            port,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master_name),
        )?;
        addr.get(1)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("sentinel {port}: odd master address {addr:?}"))
    }

    /// The master every live sentinel names, or what differs.
    fn agreed_master(&self) -> Result<u16, String> {
        let mut agreed = None;
        for port in self.live(&self.sentinels) {
            let master = self.named_master(port)?;
            match agreed {
                None => agreed = Some(master),
                Some(seen) if seen != master => {
                    return Err(format!(
                        "sentinel {port} names {master}, another sentinel {seen}"
                    ));
                }
                Some(_) => {}
            }
        }
        agreed.ok_or_else(|| "no live sentinel".to_owned())
    }

    fn check_live_master(&self, port: u16) -> Result<(), String> {
        if !self.live(&self.data).contains(&port) {
            return Err(format!("the named master {port} is not a live data node"));
        }
        match replicating(port)? {
            None => Ok(()),
            Some((of, _)) => Err(format!("the named master {port} is a replica of {of}")),
        }
    }

    /// [`wait_until`] with the tail of every live process's log in the timeout error.
    fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Result<T, String>,
    ) -> Result<T, SpawnError> {
        wait_until(what, timeout, check, || {
            probe::logs_tail(self.data.iter().chain(&self.sentinels))
        })
    }
}
