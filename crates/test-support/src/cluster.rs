//! A Redis Cluster of private nodes on loopback ports, with fault helpers.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::SpawnError;
use crate::probe::{self, field, info, query, replicating, run, wait_until};
use crate::server::{Launch, RedisServer, free_port, tail};
use crate::tls::{ServerTls, TlsFiles};

/// The number of hash slots of a Redis Cluster.
const SLOTS: usize = 16384;
/// How long `redis-cli --cluster create` may run before it is killed.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a new cluster may take to be `cluster_state:ok` with every replica in sync.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a manual failover may take until every live node agrees on the new master.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the cluster may take to promote a replica of a killed master.
const PROMOTION_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the nodes may take to agree on a migrated slot's new master.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Keys moved by one `MIGRATE`.
const MIGRATE_BATCH: usize = 100;

/// Settings for a [`RedisCluster`]; from [`RedisCluster::builder`].
///
/// ```no_run
/// use std::time::Duration;
///
/// let cluster = test_support::RedisCluster::builder()
///     .masters(3)
///     .replicas_per_master(1)
///     .node_timeout(Duration::from_millis(1000))
///     .args(&["--maxmemory", "64mb"])
///     .start()
///     .unwrap();
/// assert_eq!(cluster.nodes().len(), 6);
/// ```
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas_per_master: usize,
    node_timeout: Duration,
    args: Vec<String>,
    tls: Option<ServerTls>,
}

impl RedisClusterBuilder {
    /// The number of masters (at least 3, as `redis-cli --cluster create` requires); 3 by default.
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// The number of replicas of each master; 1 by default.
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas_per_master = replicas;
        self
    }

    /// `--cluster-node-timeout`: how long a node may be unreachable before it counts as
    /// failing (and a replica of a failing master is promoted); 2 s by default.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Extra `redis-server` arguments for every node, after (so overriding) the cluster's own.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Every node speaks TLS only (`--tls-port`, `--port 0`), on the cluster bus and for
    /// replication and `MIGRATE` too (`--tls-cluster yes`, `--tls-replication yes`), with the
    /// good certificate of [`TlsFiles`]; clients need no certificate. The
    /// [`seed_urls`](RedisCluster::seed_urls) are then `rediss://` URLs, and this crate's own
    /// connections to the nodes use TLS.
    ///
    /// ```no_run
    /// let cluster = test_support::RedisCluster::builder().tls().start().unwrap();
    /// assert!(cluster.seed_urls()[0].starts_with("rediss://127.0.0.1:"));
    /// ```
    pub fn tls(mut self) -> Self {
        self.tls = Some(ServerTls::topology(false));
        self
    }

    /// As [`RedisClusterBuilder::tls`], and every node requires a client certificate signed
    /// by the test CA (`--tls-auth-clients yes`), such as [`TlsFiles::client`].
    ///
    /// ```no_run
    /// let cluster = test_support::RedisCluster::builder().mutual_tls().start().unwrap();
    /// assert!(cluster.nodes().iter().all(|n| n.is_tls()));
    /// ```
    pub fn mutual_tls(mut self) -> Self {
        self.tls = Some(ServerTls::topology(true));
        self
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create`, and waits (at most
    /// 30 s) until every node reports `cluster_state:ok` and every replica's link is up.
    ///
    /// # Errors
    /// [`SpawnError::InvalidTopology`] for fewer than 3 masters; a node's start-up error;
    /// [`SpawnError::Command`] when `redis-cli` fails; [`SpawnError::Timeout`] (with a tail of
    /// the logs) when `redis-cli` or the cluster takes too long. Nodes already started are
    /// stopped.
    pub fn start(self) -> Result<RedisCluster, SpawnError> {
        if self.masters < 3 {
            return Err(SpawnError::InvalidTopology(format!(
                "a Redis Cluster made by redis-cli needs at least 3 masters, not {}",
                self.masters
            )));
        }
        let total = self.masters * (1 + self.replicas_per_master);
        let node_timeout = self.node_timeout.as_millis().max(1).to_string();
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            nodes.push(RedisServer::start_with(|port| {
                // Always explicit: the default bus port (port + 10000) may be taken.
                let bus = loop {
                    let bus = free_port();
                    if bus != port {
                        break bus;
                    }
                };
                let mut args: Vec<String> = [
                    "--cluster-enabled",
                    "yes",
                    // Relative to the node's own temporary directory (its `--dir`).
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-node-timeout",
                    &node_timeout,
                    "--repl-diskless-sync-delay",
                    "0",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--enable-debug-command",
                    "local",
                ]
                .iter()
                .map(|a| a.to_string())
                .collect();
                if self.tls.is_some() {
                    args.extend(
                        ["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from),
                    );
                }
                args.extend(self.args.iter().cloned());
                Launch {
                    args,
                    config: None,
                    tls: self.tls,
                }
            })?);
        }
        let ports: Vec<u16> = nodes.iter().map(RedisServer::port).collect();
        let cli_args = match self.tls {
            Some(_) => TlsFiles::get()?.redis_cli_args(),
            None => Vec::new(),
        };
        create(&ports, self.replicas_per_master, &cli_args)?;
        let mut ids = HashMap::new();
        for &port in &ports {
            let id: String = run(port, "CLUSTER MYID", redis::cmd("CLUSTER").arg("MYID"))?;
            ids.insert(port, id);
        }
        let cluster = RedisCluster {
            nodes,
            ids,
            paused: Mutex::new(HashSet::new()),
            fault_slots: Mutex::new(HashMap::new()),
        };
        let masters = self.masters;
        cluster.wait(
            "a new cluster with cluster_state:ok everywhere and every replica in sync",
            READY_TIMEOUT,
            || cluster.check_ready(masters, total),
        )?;
        Ok(cluster)
    }
}

/// A Redis Cluster of private `redis-server` nodes on `127.0.0.1`, made by
/// `redis-cli --cluster create`; every node is killed (SIGKILL) on drop.
///
/// Each node runs with `--cluster-enabled yes`, its own `nodes.conf` in its own temporary
/// directory, an explicit free `--cluster-port`, `--cluster-node-timeout 2000` (see
/// [`RedisClusterBuilder::node_timeout`]), no persistence and `--repl-diskless-sync-delay 0`.
/// Questions about the topology ([`master_for_slot`](RedisCluster::master_for_slot),
/// [`replica_of`](RedisCluster::replica_of), ...) are asked of the live nodes each time, so the
/// answers are current after a failover or a migration. A node is live unless it was killed
/// ([`kill_node`](RedisCluster::kill_node)) or is paused
/// ([`pause_node`](RedisCluster::pause_node)).
///
/// The accessors that ask the nodes panic when no live node answers.
///
/// ```no_run
/// let cluster = test_support::RedisCluster::start(3, 1).unwrap();
/// let master = cluster.master_for_key("lock:{orders}");
/// let replica = cluster.replica_of(master).unwrap();
/// cluster.failover(replica).unwrap();
/// assert_eq!(cluster.master_for_key("lock:{orders}"), replica);
/// ```
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    ids: HashMap<u16, String>,
    paused: Mutex<HashSet<u16>>,
    /// The slots a master served when it was killed or paused, for `wait_promoted`.
    fault_slots: Mutex<HashMap<u16, Vec<u16>>>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .field("paused", &self.paused.lock().unwrap())
            .finish()
    }
}

impl RedisCluster {
    /// Starts `masters` masters (at least 3) with `replicas_per_master` replicas each, with the
    /// default settings of [`RedisCluster::builder`]. `start(3, 1)` gives 3 masters and 3
    /// replicas.
    ///
    /// # Errors
    /// As [`RedisClusterBuilder::start`].
    pub fn start(masters: usize, replicas_per_master: usize) -> Result<RedisCluster, SpawnError> {
        Self::builder()
            .masters(masters)
            .replicas_per_master(replicas_per_master)
            .start()
    }

    /// Settings to change before starting: 3 masters, 1 replica each and a 2 s node timeout
    /// unless changed.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder {
            masters: 3,
            replicas_per_master: 1,
            node_timeout: Duration::from_millis(2000),
            args: Vec::new(),
            tls: None,
        }
    }

    /// Every node, in start order, killed ones included (their [`RedisServer::pid`] is `None`).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node listening on `port`, if it is one of this cluster's.
    pub fn node(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// The cluster node id (`CLUSTER MYID`, recorded at start) of the node on `port`.
    ///
    /// # Panics
    /// When no node of this cluster listens on `port`.
    pub fn node_id(&self, port: u16) -> &str {
        self.ids
            .get(&port)
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}"))
    }

    /// The ports of the masters that serve slots now, by the live nodes' `CLUSTER SLOTS`
    /// (the view most of them share), in ascending order.
    ///
    /// # Panics
    /// When no live node answers.
    pub fn masters(&self) -> Vec<u16> {
        let owners = self.majority_owners();
        let mut masters: Vec<u16> = owners.iter().flatten().copied().collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS cluster) of every master that serves
    /// slots now (see [`RedisCluster::masters`]): seeds for a cluster client.
    ///
    /// # Panics
    /// When no live node answers.
    pub fn seed_urls(&self) -> Vec<String> {
        self.masters().into_iter().map(probe::url).collect()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of a live node).
    ///
    /// # Panics
    /// When no live node answers.
    pub fn slot_of(&self, key: &str) -> u16 {
        let cmd = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).clone();
        let mut errors = Vec::new();
        for port in self.live_ports() {
            match query::<u16>(port, &cmd) {
                Ok(slot) => return slot,
                Err(err) => errors.push(err),
            }
        }
        panic!("no live node answered CLUSTER KEYSLOT: {errors:?}")
    }

    /// The port of the master that serves `slot` now, by the live nodes' `CLUSTER SLOTS` (the
    /// answer most of them give).
    ///
    /// # Panics
    /// When `slot` is not below 16384, no live node answers, or no node serves the slot.
    pub fn master_for_slot(&self, slot: u16) -> u16 {
        assert!((slot as usize) < SLOTS, "slot {slot} is not below {SLOTS}");
        self.majority_owners()[slot as usize]
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// The port of the master that serves `key`'s slot now.
    ///
    /// # Panics
    /// As [`RedisCluster::master_for_slot`].
    pub fn master_for_key(&self, key: &str) -> u16 {
        self.master_for_slot(self.slot_of(key))
    }

    /// A live replica that replicates the master on `master_port` now (by its own
    /// `INFO replication`), one whose link is up if there is such; `None` when there is none.
    pub fn replica_of(&self, master_port: u16) -> Option<u16> {
        let mut down = None;
        for port in self.live_ports() {
            if port == master_port {
                continue;
            }
            match replicating(port) {
                Ok(Some((master, true))) if master == master_port => return Some(port),
                Ok(Some((master, false))) if master == master_port => down = down.or(Some(port)),
                _ => {}
            }
        }
        down
    }

    /// Kills the node on `port` with SIGKILL and reaps it (paused or not). When it served
    /// slots, they are remembered for [`RedisCluster::wait_promoted`].
    ///
    /// # Panics
    /// When no node of this cluster listens on `port`.
    pub fn kill_node(&mut self, port: u16) {
        self.remember_slots(port);
        self.paused.lock().unwrap().remove(&port);
        self.node_mut(port).kill();
    }

    /// Freezes the node on `port` with SIGSTOP (it keeps its port but answers nothing, not even
    /// the cluster bus) until [`RedisCluster::resume_node`]. While paused it counts as not live.
    ///
    /// # Panics
    /// When no node of this cluster listens on `port`.
    pub fn pause_node(&self, port: u16) {
        self.remember_slots(port);
        self.node_ref(port).pause();
        self.paused.lock().unwrap().insert(port);
    }

    /// Lets a paused node run again (SIGCONT).
    ///
    /// # Panics
    /// When no node of this cluster listens on `port`.
    pub fn resume_node(&self, port: u16) {
        self.node_ref(port).resume();
        self.paused.lock().unwrap().remove(&port);
    }

    /// A manual failover: sends `CLUSTER FAILOVER` to the replica on `replica_port`, then waits
    /// (at most 10 s) until it reports `role:master`, every live node's `CLUSTER SLOTS` names it
    /// for its old master's slots with `cluster_state:ok`, and the old master (when live)
    /// replicates it with its link up.
    ///
    /// # Errors
    /// [`SpawnError::InvalidTopology`] when the node is not a live replica;
    /// [`SpawnError::Command`] when it refuses; [`SpawnError::Timeout`] when the failover does
    /// not complete in time (the old master must be reachable: a manual failover needs it).
    ///
    /// # Panics
    /// When no node of this cluster listens on `replica_port`, or no live node answers.
    pub fn failover(&self, replica_port: u16) -> Result<(), SpawnError> {
        self.node_ref(replica_port);
        let old_master = match replicating(replica_port) {
            Ok(Some((master, _))) => master,
            Ok(None) => {
                return Err(SpawnError::InvalidTopology(format!(
                    "port {replica_port} is a master, not a replica"
                )));
            }
            Err(err) => {
                return Err(SpawnError::InvalidTopology(format!(
                    "cannot tell whose replica port {replica_port} is: {err}"
                )));
            }
        };
        let slots = self.slots_served_by(old_master);
        let started = Instant::now();
        // The master ignores a manual failover request of a node it does not know as its
        // replica yet (right after the cluster was made, or after an earlier failover).
        self.wait(
            &format!("every node seeing port {replica_port} as a replica of {old_master}"),
            FAILOVER_TIMEOUT,
            || self.check_roles(),
        )?;
        run::<()>(
            replica_port,
            "CLUSTER FAILOVER",
            redis::cmd("CLUSTER").arg("FAILOVER"),
        )?;
        self.wait(
            &format!("port {replica_port} promoted by CLUSTER FAILOVER (from {old_master})"),
            FAILOVER_TIMEOUT.saturating_sub(started.elapsed()),
            || {
                if replicating(replica_port)?.is_some() {
                    return Err(format!("port {replica_port} is still a replica"));
                }
                let owner = self.agreed_owner(&slots)?;
                if owner != Some(replica_port) {
                    return Err(format!("the nodes name {owner:?} for the slots"));
                }
                if self.is_live(old_master)
                    && replicating(old_master)? != Some((replica_port, true))
                {
                    return Err(format!(
                        "old master {old_master} does not replicate {replica_port} yet"
                    ));
                }
                self.check_roles()
            },
        )
    }

    /// After the master on `old_master_port` was killed (or paused past the node timeout):
    /// waits (at most 15 s) until another node, a master, serves all the slots it served,
    /// every live node agrees on that in `CLUSTER SLOTS`, and every live node reports
    /// `cluster_state:ok`. Returns the new master's port.
    ///
    /// # Errors
    /// [`SpawnError::InvalidTopology`] when the node served no slots; [`SpawnError::Timeout`].
    ///
    /// # Panics
    /// When no node of this cluster listens on `old_master_port`, or no live node answers.
    pub fn wait_promoted(&self, old_master_port: u16) -> Result<u16, SpawnError> {
        self.node_ref(old_master_port);
        let remembered = self
            .fault_slots
            .lock()
            .unwrap()
            .get(&old_master_port)
            .cloned();
        let slots = match remembered {
            Some(slots) => slots,
            None => self.slots_served_by(old_master_port),
        };
        if slots.is_empty() {
            return Err(SpawnError::InvalidTopology(format!(
                "port {old_master_port} served no slots"
            )));
        }
        self.wait(
            &format!("a replica promoted in place of port {old_master_port}"),
            PROMOTION_TIMEOUT,
            || {
                let owner = self
                    .agreed_owner(&slots)?
                    .ok_or("the slots are unassigned")?;
                if owner == old_master_port {
                    return Err(format!("the nodes still name {old_master_port}"));
                }
                if !self.is_live(owner) || replicating(owner)?.is_some() {
                    return Err(format!("the named port {owner} is not a live master"));
                }
                self.check_roles()?;
                Ok(owner)
            },
        )
    }

    /// Moves `slot` with its keys from its current master to the master on `to_master_port`
    /// (`CLUSTER SETSLOT ... IMPORTING`/`MIGRATING`, `MIGRATE` in batches, `CLUSTER SETSLOT
    /// ... NODE` on the target, the source and every other master), then waits (at most 10 s)
    /// until every live node names the target for it. Nothing is done when the target serves
    /// it already.
    ///
    /// # Errors
    /// As [`RedisCluster::begin_migration`] and [`Migration::finish`].
    ///
    /// # Panics
    /// As [`RedisCluster::begin_migration`].
    pub fn migrate_slot(&self, slot: u16, to_master_port: u16) -> Result<(), SpawnError> {
        if self.master_for_slot(slot) == to_master_port {
            return Ok(());
        }
        self.begin_migration(slot, to_master_port)?.finish()
    }

    /// Starts moving `slot` to the master on `to_master_port` and stops half-way: the target
    /// has the slot `IMPORTING`, the source `MIGRATING`, and no key has moved yet. A key still
    /// on the source is served there; any other key of the slot gets an `ASK` redirection to
    /// the target. Move the keys with [`Migration::move_keys`], end with [`Migration::finish`].
    ///
    /// # Errors
    /// [`SpawnError::InvalidTopology`] when the target is not a live master or serves the slot
    /// already; [`SpawnError::Command`] when a node refuses `CLUSTER SETSLOT`.
    ///
    /// # Panics
    /// As [`RedisCluster::master_for_slot`].
    pub fn begin_migration(
        &self,
        slot: u16,
        to_master_port: u16,
    ) -> Result<Migration<'_>, SpawnError> {
        let source = self.master_for_slot(slot);
        let target = to_master_port;
        if source == target {
            return Err(SpawnError::InvalidTopology(format!(
                "port {target} serves slot {slot} already"
            )));
        }
        if !self.is_live(target) || !matches!(replicating(target), Ok(None)) {
            return Err(SpawnError::InvalidTopology(format!(
                "port {target} is not a live master"
            )));
        }
        let setslot = |port: u16, state: &str, id: &str| {
            run::<()>(
                port,
                &format!("CLUSTER SETSLOT {slot} {state}"),
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(id),
            )
        };
        setslot(target, "IMPORTING", self.node_id(source))?;
        setslot(source, "MIGRATING", self.node_id(target))?;
        Ok(Migration {
            cluster: self,
            slot,
            source,
            target,
        })
    }

    fn node_ref(&self, port: u16) -> &RedisServer {
        self.node(port)
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of this cluster listens on port {port}"))
    }

    fn is_live(&self, port: u16) -> bool {
        self.node(port).is_some_and(|n| n.pid().is_some())
            && !self.paused.lock().unwrap().contains(&port)
    }

    /// The ports of the nodes neither killed nor paused.
    fn live_ports(&self) -> Vec<u16> {
        let paused = self.paused.lock().unwrap();
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some() && !paused.contains(&n.port()))
            .map(RedisServer::port)
            .collect()
    }

    /// Records the slots `port` serves (if any), before it is killed or paused.
    fn remember_slots(&self, port: u16) {
        self.node_ref(port);
        if !self.is_live(port) {
            return;
        }
        // Best effort: with no other live node to ask, there is nothing to wait for anyway.
        if let Ok(slots) = self.try_slots_served_by(port)
            && !slots.is_empty()
        {
            self.fault_slots.lock().unwrap().insert(port, slots);
        }
    }

    /// The slots the live nodes' majority view gives to `port`.
    ///
    /// # Panics
    /// When no live node answers.
    fn slots_served_by(&self, port: u16) -> Vec<u16> {
        self.try_slots_served_by(port)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    fn try_slots_served_by(&self, port: u16) -> Result<Vec<u16>, String> {
        Ok(self
            .try_majority_owners()?
            .iter()
            .enumerate()
            .filter(|(_, owner)| **owner == Some(port))
            .map(|(slot, _)| slot as u16)
            .collect())
    }

    /// For each slot, the master most live nodes name for it.
    ///
    /// # Panics
    /// When no live node answers.
    fn majority_owners(&self) -> Vec<Option<u16>> {
        self.try_majority_owners()
            .unwrap_or_else(|err| panic!("{err}"))
    }

    fn try_majority_owners(&self) -> Result<Vec<Option<u16>>, String> {
        let mut views = Vec::new();
        let mut errors = Vec::new();
        for port in self.live_ports() {
            match owners(port) {
                Ok(view) => views.push(view),
                Err(err) => errors.push(err),
            }
        }
        if views.is_empty() {
            return Err(format!("no live node answered CLUSTER SLOTS: {errors:?}"));
        }
        Ok((0..SLOTS)
            .map(|slot| {
                let mut counts: HashMap<Option<u16>, usize> = HashMap::new();
                for view in &views {
                    *counts.entry(view[slot]).or_default() += 1;
                }
                counts
                    .into_iter()
                    .max_by_key(|&(owner, count)| (count, owner))
                    .and_then(|(owner, _)| owner)
            })
            .collect())
    }

    /// The slot map every live node shares, each with `cluster_state:ok`; otherwise what
    /// differs.
    fn agreed_view(&self) -> Result<Vec<Option<u16>>, String> {
        let mut agreed: Option<(u16, Vec<Option<u16>>)> = None;
        for port in self.live_ports() {
            cluster_ok(port)?;
            let view = owners(port)?;
            match &agreed {
                None => agreed = Some((port, view)),
                Some((first, seen)) => {
                    if let Some(slot) = (0..SLOTS).find(|&s| seen[s] != view[s]) {
                        return Err(format!(
                            "port {port} names {:?} for slot {slot}, port {first} {:?}",
                            view[slot], seen[slot]
                        ));
                    }
                }
            }
        }
        agreed
            .map(|(_, view)| view)
            .ok_or_else(|| "no live node".to_owned())
    }

    /// The one master every live node names for all of `slots` (see
    /// [`RedisCluster::agreed_view`]); otherwise what differs.
    fn agreed_owner(&self, slots: &[u16]) -> Result<Option<u16>, String> {
        let view = self.agreed_view()?;
        let owner = view[*slots.first().ok_or("no slots")? as usize];
        match slots.iter().find(|&&s| view[s as usize] != owner) {
            Some(&slot) => Err(format!(
                "slot {slot} is served by {:?}, slot {} by {owner:?}",
                view[slot as usize], slots[0]
            )),
            None => Ok(owner),
        }
    }

    /// Whether every live node's `CLUSTER NODES` agrees with the live nodes' own
    /// `INFO replication`: each replica listed as a replica of its master, each master as a
    /// master, none flagged failing, every link connected. A manual failover needs the master
    /// to know its replica as such.
    fn check_roles(&self) -> Result<(), String> {
        let live = self.live_ports();
        let mut roles = HashMap::new();
        for &port in &live {
            roles.insert(port, replicating(port)?.map(|(master, _)| master));
        }
        for &port in &live {
            let view = cluster_nodes(port)?;
            for (&node, &master) in &roles {
                let line = view
                    .get(&node)
                    .ok_or_else(|| format!("port {port} does not know node {node}"))?;
                let bad = ["fail", "fail?", "handshake", "noaddr"];
                if line.flags.iter().any(|f| bad.contains(&f.as_str())) || !line.connected {
                    return Err(format!("port {port} sees node {node} as {line:?}"));
                }
                let ok = match master {
                    None => line.flags.iter().any(|f| f == "master"),
                    Some(master) => {
                        line.flags.iter().any(|f| f == "slave")
                            && self.ids.get(&master) == Some(&line.master)
                    }
                };
                if !ok {
                    return Err(format!(
                        "port {port} sees node {node} as {line:?}, not as the replica of {master:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_ready(&self, masters: usize, total: usize) -> Result<(), String> {
        let mut master_count = 0;
        for port in self.live_ports() {
            let state = cluster_ok(port)?;
            if field(&state, "cluster_known_nodes") != total.to_string() {
                return Err(format!(
                    "port {port} knows {} nodes of {total}",
                    field(&state, "cluster_known_nodes")
                ));
            }
            match replicating(port)? {
                None => master_count += 1,
                Some((master, false)) => {
                    return Err(format!("replica {port}: link to {master} not up"));
                }
                Some((_, true)) => {}
            }
        }
        if master_count != masters {
            return Err(format!("{master_count} masters, not {masters}"));
        }
        let view = self.agreed_view()?;
        if let Some(slot) = view.iter().position(Option::is_none) {
            return Err(format!("slot {slot} is not served"));
        }
        self.check_roles()
    }

    /// [`wait_until`] with the tail of every live node's log in the timeout error.
    fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut() -> Result<T, String>,
    ) -> Result<T, SpawnError> {
        wait_until(what, timeout, check, || probe::logs_tail(&self.nodes))
    }
}

/// A slot half-way through a move between two masters, from [`RedisCluster::begin_migration`].
///
/// Dropping it leaves the slot in the `MIGRATING`/`IMPORTING` state; [`Migration::finish`]
/// completes the move.
#[derive(Debug)]
#[must_use = "the slot stays MIGRATING/IMPORTING until `finish` is called"]
pub struct Migration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: u16,
    target: u16,
}

impl Migration<'_> {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The port of the master the slot moves from (the one that still serves it).
    pub fn source(&self) -> u16 {
        self.source
    }

    /// The port of the master the slot moves to.
    pub fn target(&self) -> u16 {
        self.target
    }

    /// Moves every key of the slot still on the source to the target (`CLUSTER GETKEYSINSLOT`
    /// and `MIGRATE ... KEYS`, 100 keys at a time); returns how many keys moved.
    ///
    /// # Errors
    /// [`SpawnError::Command`] when a node refuses a command.
    pub fn move_keys(&self) -> Result<usize, SpawnError> {
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = run(
                self.source,
                "CLUSTER GETKEYSINSLOT",
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(self.slot)
                    .arg(MIGRATE_BATCH),
            )?;
            if keys.is_empty() {
                return Ok(moved);
            }
            run::<redis::Value>(
                self.source,
                "MIGRATE",
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(self.target)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys),
            )?;
            moved += keys.len();
        }
    }

    /// Moves the remaining keys, then gives the slot to the target (`CLUSTER SETSLOT ... NODE`
    /// on the target, the source and every other live master) and waits (at most 10 s) until
    /// every live node names the target for it with `cluster_state:ok`.
    ///
    /// # Errors
    /// [`SpawnError::Command`] when a node refuses a command; [`SpawnError::Timeout`].
    pub fn finish(self) -> Result<(), SpawnError> {
        self.move_keys()?;
        let cluster = self.cluster;
        let target_id = cluster.node_id(self.target);
        let others: Vec<u16> = cluster
            .live_ports()
            .into_iter()
            .filter(|&p| p != self.source && p != self.target)
            .filter(|&p| matches!(replicating(p), Ok(None)))
            .collect();
        for port in [self.target, self.source].into_iter().chain(others) {
            run::<()>(
                port,
                &format!("CLUSTER SETSLOT {} NODE", self.slot),
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg("NODE")
                    .arg(target_id),
            )?;
        }
        cluster.wait(
            &format!("slot {} served by port {}", self.slot, self.target),
            MIGRATION_TIMEOUT,
            || match cluster.agreed_owner(&[self.slot])? {
                Some(owner) if owner == self.target => Ok(()),
                other => Err(format!("the nodes name {other:?}")),
            },
        )
    }
}

/// For each slot, the port of its master in the view of the node on `port` (`CLUSTER SLOTS`).
fn owners(port: u16) -> Result<Vec<Option<u16>>, String> {
    let ranges: Vec<Vec<redis::Value>> = query(port, redis::cmd("CLUSTER").arg("SLOTS"))?;
    let mut owners = vec![None; SLOTS];
    for range in ranges {
        let parse = || -> Option<(usize, usize, u16)> {
            let start: usize = redis::from_redis_value_ref(range.first()?).ok()?;
            let end: usize = redis::from_redis_value_ref(range.get(1)?).ok()?;
            let master: Vec<redis::Value> = redis::from_redis_value_ref(range.get(2)?).ok()?;
            let master_port: u16 = redis::from_redis_value_ref(master.get(1)?).ok()?;
            (start <= end && end < SLOTS).then_some((start, end, master_port))
        };
        let (start, end, master) =
            parse().ok_or_else(|| format!("port {port}: odd CLUSTER SLOTS entry {range:?}"))?;
        owners[start..=end].fill(Some(master));
    }
    Ok(owners)
}

/// A node as another node's `CLUSTER NODES` shows it.
#[derive(Debug)]
struct NodeLine {
    flags: Vec<String>,
    /// The id of its master, or "-".
    master: String,
    connected: bool,
}

/// The nodes the node on `port` knows, by port (`CLUSTER NODES`).
fn cluster_nodes(port: u16) -> Result<HashMap<u16, NodeLine>, String> {
    let text: String = query(port, redis::cmd("CLUSTER").arg("NODES"))?;
    let mut nodes = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let parse = || -> Option<(u16, NodeLine)> {
            let addr = fields.get(1)?.split('@').next()?;
            let node_port = addr.rsplit(':').next()?.parse().ok()?;
            Some((
                node_port,
                NodeLine {
                    flags: fields.get(2)?.split(',').map(str::to_owned).collect(),
                    master: (*fields.get(3)?).to_owned(),
                    connected: *fields.get(7)? == "connected",
                },
            ))
        };
        let (node_port, node) =
            parse().ok_or_else(|| format!("port {port}: odd CLUSTER NODES line {line:?}"))?;
        nodes.insert(node_port, node);
    }
    Ok(nodes)
}

/// Runs `redis-cli <cli_args> --cluster create` over `ports` (killed if it takes more than
/// 30 s).
fn create(ports: &[u16], replicas: usize, cli_args: &[String]) -> Result<(), SpawnError> {
    let output = tempfile::NamedTempFile::new()?;
    let mut cmd = Command::new("redis-cli");
    cmd.args(cli_args).arg("--cluster").arg("create");
    cmd.args(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    cmd.arg("--cluster-replicas")
        .arg(replicas.to_string())
        .arg("--cluster-yes")
        .stdin(Stdio::null())
        .stdout(output.as_file().try_clone()?)
        .stderr(output.as_file().try_clone()?);
    let mut child = cmd.spawn()?;
    let started = Instant::now();
    let text = || std::fs::read_to_string(output.path()).unwrap_or_default();
    loop {
        if let Some(status) = child.try_wait()? {
            let text = text();
            if status.success() && text.contains("All 16384 slots covered") {
                return Ok(());
            }
            return Err(SpawnError::Command {
                port: ports[0],
                command: "redis-cli --cluster create".into(),
                detail: format!("exited with {status}: {}", tail(&text)),
            });
        }
        if started.elapsed() > CREATE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(SpawnError::Timeout {
                what: "redis-cli --cluster create".into(),
                waited: started.elapsed(),
                detail: format!("killed; output: {}", tail(&text())),
            });
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// The `CLUSTER INFO` of the node on `port`, if it reports `cluster_state:ok`.
fn cluster_ok(port: u16) -> Result<std::collections::HashMap<String, String>, String> {
    let state = info(port, "cluster-info")?;
    match field(&state, "cluster_state") {
        "ok" => Ok(state),
        other => Err(format!("port {port} has cluster_state:{other}")),
    }
}
