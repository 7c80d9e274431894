//! The topology faults of `check` (faults.md rows 13–15): `cluster-failover`,
//! `slot-migration`, `cluster-kill`, `sentinel-failover` and `sentinel-kill`. Each run of
//! one starts a private set-up of its own ([`Private::start`]): a Redis Cluster of 3 masters
//! with a replica each, or a master with 2 replicas (`min-replicas-to-write 1`,
//! `min-replicas-max-lag 2`) watched by 3 sentinels (`down-after-milliseconds` 1000); every
//! process of it is killed when the run ends. The faults go through test-support's helpers,
//! which block, so each runs on a blocking thread; each is bounded in time (the helpers wait
//! at most 10–20 s) and leaves no node paused.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cli_support::endpoint::{Endpoint, Place};
use cli_support::exit::CliError;
use cli_support::redis_target::PRIVATE_MASTER;
use cli_support::settings::ClientSettings;
use redis_locks::{Client, Error};
use test_support::{RedisCluster, SentinelSet};

use super::clock::now as now_nanos;
use super::fault::{Fault, TopologyKind};

/// How long the sentinels may take to promote a replica, and the replicas to follow it.
const SENTINEL_WAIT: Duration = Duration::from_secs(20);
/// How long the zombie master is watched for refusals after it was resumed.
const ZOMBIE_WATCH: Duration = Duration::from_secs(3);
/// How many refused grants of the zombie master are enough to show it.
const ZOMBIE_PROBES: usize = 3;

/// A private Redis Cluster, shared with the task that strikes a fault in it.
pub type SharedCluster = Arc<Mutex<RedisCluster>>;
/// A private Sentinel set-up, shared likewise.
pub type SharedSentinel = Arc<Mutex<SentinelSet>>;

/// The private set-up of a run of topology faults; its processes are killed when the last
/// handle goes.
#[derive(Clone)]
pub enum Private {
    /// 3 masters with a replica each.
    Cluster(SharedCluster),
    /// A master with 2 replicas and 3 sentinels.
    Sentinel(SharedSentinel),
}

impl Private {
    /// Starts the set-up `kind` names (on a blocking thread: a cluster takes a few
    /// seconds), and says where it is (its clients with `settings`).
    ///
    /// # Errors
    /// [`CliError::Unavailable`] when it cannot be started.
    pub async fn start(
        kind: TopologyKind,
        settings: &ClientSettings,
    ) -> Result<(Private, Endpoint, String), CliError> {
        let settings = settings.clone();
        let started = tokio::task::spawn_blocking(move || -> Result<_, String> {
            match kind {
                TopologyKind::Cluster => {
                    let cluster = RedisCluster::builder()
                        .masters(3)
                        .replicas_per_master(1)
                        .start()
                        .map_err(|err| format!("a private Redis Cluster: {err}"))?;
                    let endpoint = Endpoint::new(Place::Cluster(cluster.seed_urls()), settings);
                    let ports: Vec<String> = cluster
                        .nodes()
                        .iter()
                        .map(|n| n.port().to_string())
                        .collect();
                    let describe = format!(
                        "a private Redis Cluster of 3 masters with a replica each (ports {})",
                        ports.join(", ")
                    );
                    Ok((
                        Private::Cluster(Arc::new(Mutex::new(cluster))),
                        endpoint,
                        describe,
                    ))
                }
                TopologyKind::Sentinel => {
                    let set = SentinelSet::builder()
                        .replicas(2)
                        .sentinels(3)
                        .master_name(PRIVATE_MASTER)
                        .down_after(Duration::from_millis(1000))
                        .data_args(&[
                            "--min-replicas-to-write",
                            "1",
                            "--min-replicas-max-lag",
                            "2",
                        ])
                        .start()
                        .map_err(|err| format!("a private Sentinel set-up: {err}"))?;
                    let endpoint = Endpoint::new(
                        Place::Sentinel {
                            sentinels: set.sentinel_urls(),
                            master: PRIVATE_MASTER.to_string(),
                        },
                        settings,
                    );
                    let describe = format!(
                        "a private master {PRIVATE_MASTER} on port {} with 2 replicas \
                     (min-replicas-to-write 1, min-replicas-max-lag 2), 3 sentinels \
                     (down-after-milliseconds 1000)",
                        set.master_port()
                    );
                    Ok((
                        Private::Sentinel(Arc::new(Mutex::new(set))),
                        endpoint,
                        describe,
                    ))
                }
            }
        })
        .await
        .map_err(|err| CliError::Unavailable(format!("could not start: {err}")))?;
        started.map_err(|err| CliError::Unavailable(format!("could not start {err}")))
    }
}

/// `cluster-kill`'s first step, taken early in the run: the replica of the lock's shard
/// paused and its link cut by its master, so the grants after it reach the master only.
#[derive(Debug, Clone, Copy)]
pub struct Cut {
    /// The master of the lock's slot.
    pub master: u16,
    /// Its replica, paused.
    pub replica: u16,
    /// When the link was cut (monotonic ns).
    pub at: u64,
}

/// Cuts the replica of the shard that serves `key` off its master (paused, its replication
/// link killed by the master: a paused replica's kernel would still take in what the
/// master sends).
pub async fn cut_replica(cluster: SharedCluster, key: String) -> Result<Cut, String> {
    blocking(move || {
        let cluster = cluster
            .lock()
            .map_err(|_| "the cluster's lock is poisoned")?;
        let master = cluster.master_for_key(&key);
        let replica = cluster
            .replica_of(master)
            .ok_or_else(|| format!("master {master} of the lock's slot has no replica"))?;
        cluster.pause_node(replica);
        let cut = cluster
            .node(master)
            .ok_or("no such master")?
            .connection()
            .and_then(|mut con| {
                redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("replica")
                    .query::<i64>(&mut con)
            });
        match cut {
            Ok(n) if n >= 1 => Ok(Cut {
                master,
                replica,
                at: now_nanos(),
            }),
            other => {
                cluster.resume_node(replica);
                Err(format!(
                    "CLIENT KILL TYPE replica on master {master}: {other:?}"
                ))
            }
        }
    })
    .await
}

/// Lets a replica that [`cut_replica`] paused run again (the run ended before the kill).
pub async fn undo_cut(cluster: SharedCluster, cut: Cut) {
    let _ = blocking(move || {
        let cluster = cluster.lock().map_err(|_| "poisoned")?;
        cluster.resume_node(cut.replica);
        Ok(())
    })
    .await;
}

/// What a strike needs to know of the run.
pub struct Strike {
    /// The fault.
    pub fault: Fault,
    /// The set-up.
    pub private: Private,
    /// The lock's name.
    pub lock: String,
    /// How the run's clients reach the set-up (its key namespace).
    pub settings: ClientSettings,
    /// The lease of every acquisition.
    pub lease: Duration,
    /// For `cluster-kill`: the replica cut off before the long holder's grant.
    pub cut: Option<Cut>,
    /// When the long holder the fault strikes in acquired (monotonic ns).
    pub holder_acquired_at: Option<u64>,
    /// When the run's first acquisition came (monotonic ns).
    pub first_grant_at: Option<u64>,
}

/// What a strike did.
pub struct Struck {
    /// In words.
    pub detail: String,
    /// When a frozen master was resumed (monotonic ns): `sentinel-failover`'s zombie.
    pub resumed_at: Option<u64>,
}

impl From<String> for Struck {
    fn from(detail: String) -> Struck {
        Struck {
            detail,
            resumed_at: None,
        }
    }
}

/// Strikes one topology fault and waits until the set-up serves the lock again; says what
/// happened, or why the fault could not be injected (or, for the zombie master, what it
/// granted).
pub async fn strike(strike: Strike) -> Result<Struck, String> {
    let key = strike
        .settings
        .keys(&strike.lock)
        .map_err(|err| err.to_string())?
        .lock()
        .to_string();
    let lease = strike.lease;
    match (strike.fault, strike.private) {
        (Fault::ClusterFailover, Private::Cluster(cluster)) => blocking(move || {
            let cluster = cluster.lock().map_err(|_| "poisoned")?;
            let master = cluster.master_for_key(&key);
            let replica = cluster
                .replica_of(master)
                .ok_or_else(|| format!("master {master} has no replica"))?;
            let begun = Instant::now();
            cluster
                .failover(replica)
                .map_err(|err| format!("CLUSTER FAILOVER: {err}"))?;
            Ok(format!(
                "CLUSTER FAILOVER: replica {replica} took the lock's slot {} over from \
                     master {master}, all nodes agreeing after {} ms",
                cluster.slot_of(&key),
                begun.elapsed().as_millis()
            ))
        })
        .await
        .map(Struck::from),
        (Fault::SlotMigration, Private::Cluster(cluster)) => {
            blocking(move || {
                let cluster = cluster.lock().map_err(|_| "poisoned")?;
                let slot = cluster.slot_of(&key);
                let source = cluster.master_for_slot(slot);
                let target = cluster
                    .masters()
                    .into_iter()
                    .find(|&m| m != source)
                    .ok_or("no other master")?;
                let begun = Instant::now();
                let migration = cluster
                    .begin_migration(slot, target)
                    .map_err(|err| format!("slot {slot}: {err}"))?;
                // Half-way: the keys still on the source are served there, the rest get ASK.
                std::thread::sleep(lease / 4);
                let moved = migration
                    .move_keys()
                    .map_err(|err| format!("slot {slot}: {err}"))?;
                // Moved, the slot still the source's: every request of the lock meets ASK.
                std::thread::sleep(lease / 4);
                let half_way = begun.elapsed();
                migration
                    .finish()
                    .map_err(|err| format!("slot {slot}: {err}"))?;
                Ok(format!(
                    "slot {slot} moved from master {source} to {target} with its {moved} keys \
                     (MIGRATING/IMPORTING for {} ms: ASK, then MOVED), all nodes agreeing \
                     after {} ms",
                    half_way.as_millis(),
                    begun.elapsed().as_millis()
                ))
            })
            .await
            .map(Struck::from)
        }
        (Fault::ClusterKill, Private::Cluster(cluster)) => {
            let cut = strike
                .cut
                .ok_or("cluster-kill: the replica was not cut off before the long hold")?;
            let first = match strike.first_grant_at {
                Some(first) if first > cut.at => " and before the run's first grant (so it has \
                                                  no key of the lock)"
                    .to_string(),
                Some(first) => format!(
                    " but {:.0} ms after the run's first grant (a key of an earlier holder may \
                     have stayed on it)",
                    (cut.at - first) as f64 / 1e6
                ),
                None => String::new(),
            };
            let order = match strike.holder_acquired_at {
                Some(at) if at > cut.at => format!(
                    "cut off {:.0} ms before the holder's grant, which it never had{first}",
                    (at - cut.at) as f64 / 1e6
                ),
                Some(at) => format!(
                    "cut off only {:.0} ms after the holder's grant, which it may have had",
                    (cut.at - at) as f64 / 1e6
                ),
                None => format!("cut off{first}"),
            };
            blocking(move || {
                let mut cluster = cluster.lock().map_err(|_| "poisoned")?;
                let killed = Instant::now();
                cluster.kill_node(cut.master);
                cluster.resume_node(cut.replica);
                let promoted = cluster
                    .wait_promoted(cut.master)
                    .map_err(|err| format!("after the kill of master {}: {err}", cut.master))?;
                Ok(format!(
                    "replica {} {order}; master {} killed (SIGKILL) while the holder held; \
                     {promoted} promoted, all nodes agreeing after {} ms",
                    cut.replica,
                    cut.master,
                    killed.elapsed().as_millis()
                ))
            })
            .await
            .map(Struck::from)
        }
        (Fault::SentinelFailover, Private::Sentinel(set)) => {
            sentinel_failover(set, &strike.lock, &strike.settings).await
        }
        (Fault::SentinelKill, Private::Sentinel(set)) => blocking(move || {
            let mut set = set.lock().map_err(|_| "poisoned")?;
            set.wait_replicas_up(SENTINEL_WAIT)
                .map_err(|err| err.to_string())?;
            let old = set.master_port();
            let killed = Instant::now();
            set.kill_node(old);
            let new = set
                .wait_failover(old, SENTINEL_WAIT)
                .map_err(|err| err.to_string())?;
            let promoted = killed.elapsed();
            set.wait_replicas_up(SENTINEL_WAIT)
                .map_err(|err| err.to_string())?;
            Ok(format!(
                "master {old} killed (SIGKILL); the sentinels named {new} after {} ms, its \
                     replica in sync after {} ms",
                promoted.as_millis(),
                killed.elapsed().as_millis()
            ))
        })
        .await
        .map(Struck::from),
        (fault, _) => Err(format!("{} needs its private set-up", fault.label())),
    }
}

/// `sentinel-failover`: the master frozen until the sentinels have promoted a replica, then
/// resumed; while it still takes itself for a master (a zombie: the sentinels make it a
/// replica only seconds later), a lock client that was given its address (and so is never
/// told of the failover) tries to take a lock there: every attempt must be refused
/// (`NOREPLICAS`: its replicas follow the new master). Ends when the new master has a
/// replica in sync again (until then it refuses grants too).
async fn sentinel_failover(
    set: SharedSentinel,
    lock: &str,
    settings: &ClientSettings,
) -> Result<Struck, String> {
    let (old, ports) = {
        let set = set.clone();
        blocking(move || {
            let set = set.lock().map_err(|_| "poisoned")?;
            // A second strike starts from a set-up whose old master follows again.
            set.wait_replicas_up(SENTINEL_WAIT)
                .map_err(|err| err.to_string())?;
            Ok((set.master_port(), set.data_ports()))
        })
        .await?
    };
    let old_url = format!("redis://127.0.0.1:{old}");
    // Connected before the freeze: a zombie's client that nobody tells of the failover.
    let options = settings.client_options().map_err(|err| err.to_string())?;
    let stale = Client::connect_with(&old_url, options)
        .await
        .map_err(|err| format!("a client of master {old}: {err}"))?;
    let probe = stale
        .mutex(&format!("{lock}:zombie"))
        .map_err(|err| err.to_string())?;
    let frozen = Instant::now();
    let (new, promoted, resumed_at) = {
        let set = set.clone();
        blocking(move || {
            let set = set.lock().map_err(|_| "poisoned")?;
            set.pause_node(old);
            let new = set.wait_failover(old, SENTINEL_WAIT);
            let promoted = frozen.elapsed();
            // Resumed whatever happened.
            let resumed_at = now_nanos();
            set.resume_node(old);
            new.map(|new| (new, promoted, resumed_at))
                .map_err(|err| err.to_string())
        })
        .await?
    };
    let thawed = frozen.elapsed();
    // The zombie, as long as it takes itself for a master: it counts its replicas gone
    // within its first turns of the event loop (a request read in the very turn it wakes in
    // may still see the old count), so every attempt is made once it says so.
    let mut refused = Vec::new();
    let mut granted = Vec::new();
    let mut demoted = false;
    let watch_until = Instant::now() + ZOMBIE_WATCH;
    while refused.len() < ZOMBIE_PROBES && Instant::now() < watch_until {
        let (role, good) = replication(&old_url).await;
        if role == "slave" {
            demoted = true;
            break;
        }
        if role == "master" && good == "0" {
            match probe.try_lock().await {
                Ok(guard) => {
                    granted.push(guard.fencing_token().get());
                    let _ = guard.release().await;
                }
                Err(Error::Redis { source, .. }) if source.code() == Some("NOREPLICAS") => {
                    refused.push("NOREPLICAS")
                }
                Err(err) if err.to_string().contains("NOREPLICAS") => refused.push("NOREPLICAS"),
                Err(_) => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !granted.is_empty() {
        return Err(format!(
            "the zombie master {old} granted a lock (tokens {granted:?}) after the sentinels \
             had promoted {new}: min-replicas-to-write did not hold"
        ));
    }
    // The new master refuses grants too until a replica follows it.
    let replica_up = {
        let new_url = format!("redis://127.0.0.1:{new}");
        let until = Instant::now() + SENTINEL_WAIT;
        loop {
            let (role, good) = replication(&new_url).await;
            if role == "master" && good.parse::<u32>().is_ok_and(|n| n >= 1) {
                break true;
            }
            if Instant::now() >= until {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if !replica_up {
        return Err(format!(
            "the new master {new} had no replica in sync within {SENTINEL_WAIT:?} (data nodes \
             {ports:?})"
        ));
    }
    let zombie = match (refused.len(), demoted) {
        (0, true) => "the zombie was made a replica before it could be asked".to_string(),
        (0, false) => "the zombie was never seen counting no replica".to_string(),
        (n, _) => format!("the zombie refused all {n} grants asked of it (NOREPLICAS)"),
    };
    Ok(Struck {
        detail: format!(
            "master {old} frozen (SIGSTOP); the sentinels named {new} after {} ms; resumed \
             after {} ms as a zombie: {zombie}; {new} had a replica in sync after {} ms",
            promoted.as_millis(),
            thawed.as_millis(),
            frozen.elapsed().as_millis()
        ),
        resumed_at: Some(resumed_at),
    })
}

/// `role` and (for a master with `min-replicas-to-write`) how many replicas it counts as
/// good, from `INFO replication`; empty strings when it does not answer.
async fn replication(url: &str) -> (String, String) {
    let info = async {
        let client = redis::Client::open(url).ok()?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_millis(500)));
        let mut con = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut con)
            .await
            .ok()
    };
    let text = info.await.unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    (field("role"), field("min_slaves_good_slaves"))
}

/// Runs `work` (test-support's helpers block) on a blocking thread; a panic of a helper
/// (no live node answered) is an error like the others.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| format!("the fault's helper failed: {err}"))?
}
