//! The cluster and Sentinel topologies, against real servers: they start, route keys, fail
//! over, move slots, and leave no process behind.

use std::time::{Duration, Instant};

use nix::sys::signal::kill;
use nix::unistd::Pid;
use redis::FromRedisValue;
use test_support::{RedisCluster, RedisServer, SentinelSet, SpawnError};

fn connect(port: u16) -> redis::Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    con
}

/// Runs `cmd` from `port` on, following `MOVED` and `ASK` redirections as a cluster client
/// does; returns the answer and the port that gave it.
fn cluster_query<T: FromRedisValue>(mut port: u16, cmd: &redis::Cmd) -> (T, u16) {
    let mut asking = false;
    for _ in 0..5 {
        let mut con = connect(port);
        if asking {
            redis::cmd("ASKING").query::<()>(&mut con).unwrap();
        }
        match cmd.query::<T>(&mut con) {
            Ok(answer) => return (answer, port),
            Err(err) => {
                let (addr, _) = err
                    .redirect_node()
                    .unwrap_or_else(|| panic!("port {port}: {err}"));
                asking = err.code() == Some("ASK");
                port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        }
    }
    panic!("more than 5 redirections");
}

fn pids<'a>(servers: impl IntoIterator<Item = &'a RedisServer>) -> Vec<u32> {
    servers.into_iter().filter_map(RedisServer::pid).collect()
}

fn assert_gone(pids: &[u32]) {
    for &pid in pids {
        assert!(
            kill(Pid::from_raw(pid as i32), None).is_err(),
            "process {pid} is still there after drop"
        );
    }
}

#[test]
fn cluster_routes_keys_and_moves_slots() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1).unwrap();
    eprintln!("cluster 3+3 started in {:?}", started.elapsed());
    assert_eq!(cluster.nodes().len(), 6);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    assert_eq!(cluster.seed_urls().len(), 3);
    for node in cluster.nodes() {
        assert_ne!(node.port(), 6379);
        assert_eq!(cluster.node_id(node.port()).len(), 40);
    }
    assert_eq!(cluster.slot_of("foo"), 12182);

    // A key written through redirections lands on the master the slot map names.
    let key = "lock:{orders}";
    let owner = cluster.master_for_key(key);
    let entry = *masters.iter().find(|&&m| m != owner).unwrap();
    let ((), landed) = cluster_query(entry, redis::cmd("SET").arg(key).arg("v1"));
    assert_eq!(landed, owner);
    let replica = cluster.replica_of(owner).unwrap();
    assert!(!masters.contains(&replica));

    // So does one written by a cluster client, from the seeds.
    let mut client = redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap()
        .get_connection()
        .unwrap();
    let other = "lock:{invoices}";
    let () = redis::cmd("SET")
        .arg(other)
        .arg("v")
        .query(&mut client)
        .unwrap();
    let value: String = redis::cmd("GET")
        .arg(other)
        .query(&mut connect(cluster.master_for_key(other)))
        .unwrap();
    assert_eq!(value, "v");
    drop(client);

    // A whole slot moves with its key.
    let slot = cluster.slot_of(key);
    let started = Instant::now();
    cluster.migrate_slot(slot, entry).unwrap();
    eprintln!("slot migrated in {:?}", started.elapsed());
    assert_eq!(cluster.master_for_key(key), entry);
    let (value, served_by): (String, u16) = cluster_query(owner, redis::cmd("GET").arg(key));
    assert_eq!((value.as_str(), served_by), ("v1", entry));

    // Held half-way: a key not moved yet is served by the source, a moved one gets ASK.
    let (a, b) = ("queue:{jobs}:a", "queue:{jobs}:b");
    let source = cluster.master_for_key(a);
    let target = *masters.iter().find(|&&m| m != source).unwrap();
    cluster_query::<()>(source, redis::cmd("SET").arg(a).arg("1"));
    cluster_query::<()>(source, redis::cmd("SET").arg(b).arg("2"));
    let migration = cluster.begin_migration(cluster.slot_of(a), target).unwrap();
    assert_eq!((migration.source(), migration.target()), (source, target));
    let value: String = redis::cmd("GET")
        .arg(a)
        .query(&mut connect(source))
        .unwrap();
    assert_eq!(value, "1");
    assert_eq!(migration.move_keys().unwrap(), 2);
    let err = redis::cmd("GET")
        .arg(a)
        .query::<String>(&mut connect(source))
        .unwrap_err();
    assert_eq!(err.code(), Some("ASK"), "{err}");
    let (value, served_by): (String, u16) = cluster_query(source, redis::cmd("GET").arg(a));
    assert_eq!((value.as_str(), served_by), ("1", target));
    migration.finish().unwrap();
    assert_eq!(cluster.master_for_key(b), target);
    let (value, served_by): (String, u16) = cluster_query(source, redis::cmd("GET").arg(b));
    assert_eq!((value.as_str(), served_by), ("2", target));

    let pids = pids(cluster.nodes());
    assert_eq!(pids.len(), 6);
    drop(cluster);
    assert_gone(&pids);
}

#[test]
fn cluster_fails_over_by_hand_and_after_a_kill() {
    let mut cluster = RedisCluster::start(3, 1).unwrap();
    let key = "lock:{payments}";
    let master = cluster.master_for_key(key);
    cluster_query::<()>(master, redis::cmd("SET").arg(key).arg("v1"));
    let replica = cluster.replica_of(master).unwrap();

    // A manual failover: the replica takes over, the old master follows it.
    let started = Instant::now();
    cluster.failover(replica).unwrap();
    eprintln!("manual failover took {:?}", started.elapsed());
    assert_eq!(cluster.master_for_key(key), replica);
    assert_eq!(cluster.replica_of(replica), Some(master));
    let (value, served_by): (String, u16) = cluster_query(master, redis::cmd("GET").arg(key));
    assert_eq!((value.as_str(), served_by), ("v1", replica));

    // kill -9 of the (new) master: its replica is promoted, the slots are served again.
    let pids = pids(cluster.nodes());
    let started = Instant::now();
    cluster.kill_node(replica);
    assert!(cluster.node(replica).unwrap().pid().is_none());
    let promoted = cluster.wait_promoted(replica).unwrap();
    eprintln!("promotion after kill -9 took {:?}", started.elapsed());
    assert_eq!(promoted, master);
    assert_eq!(cluster.master_for_key(key), master);
    let (value, served_by): (String, u16) = cluster_query(master, redis::cmd("GET").arg(key));
    assert_eq!((value.as_str(), served_by), ("v1", master));
    let entry = *cluster.masters().iter().find(|&&m| m != master).unwrap();
    let ((), landed) = cluster_query(entry, redis::cmd("SET").arg(key).arg("v2"));
    assert_eq!(landed, master);

    drop(cluster);
    assert_gone(&pids);
}

#[test]
fn cluster_needs_three_masters() {
    let err = RedisCluster::start(2, 1).unwrap_err();
    assert!(matches!(err, SpawnError::InvalidTopology(_)), "{err}");
}

#[test]
fn sentinels_fail_over_to_a_replica_that_takes_writes() {
    let started = Instant::now();
    let mut set = SentinelSet::builder()
        .replicas(2)
        .sentinels(3)
        .data_args(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "10",
        ])
        .start()
        .unwrap();
    eprintln!("sentinel set 1+2+3 started in {:?}", started.elapsed());
    assert_eq!(set.master_name(), "mymaster");
    assert_eq!(set.sentinel_urls().len(), 3);
    assert_eq!(set.servers().len(), 3);
    let old = set.master_port();
    assert_eq!(old, set.data_ports()[0]);
    assert!(set.server(old).is_some());
    // A paused sentinel is skipped, not waited on.
    let frozen = set.sentinel_ports()[0];
    set.pause_node(frozen);
    assert_eq!(set.master_port(), old);
    set.resume_node(frozen);
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v1")
        .query(&mut connect(old))
        .unwrap();

    let pids = pids(set.servers().iter().chain(set.sentinels()));
    assert_eq!(pids.len(), 6);
    let started = Instant::now();
    set.kill_node(old);
    let new = set.wait_failover(old, Duration::from_secs(30)).unwrap();
    eprintln!("sentinel failover took {:?}", started.elapsed());
    assert_ne!(new, old);
    assert_eq!(set.master_port(), new);
    // With --min-replicas-to-write 1 the new master takes writes once the other replica follows it.
    set.wait_replicas_up(Duration::from_secs(15)).unwrap();
    eprintln!(
        "replica following the new master after {:?}",
        started.elapsed()
    );
    let () = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .query(&mut connect(new))
        .unwrap();

    drop(set);
    assert_gone(&pids);
}
