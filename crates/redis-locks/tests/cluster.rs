//! Every primitive on a real Redis Cluster (3 masters, `test_support::RedisCluster`): mutual
//! exclusion with names spread over every master, across tasks and OS processes; wake-ups
//! by sharded pub/sub on the lock's shard, also after the subscriber connection was killed
//! and after the slot moved; a held, waited-on lock through a manual failover and a slot
//! migration; scripts that run twice for the same owner token; fencing tokens across a
//! failover.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{env, eventually};
use redis_locks::{Client, ClientOptions, LockOptions};
use test_support::history::History;
use test_support::{ChildProcess, RedisCluster};
use tokio::time::Instant;

/// Acquisitions per worker in the contention checks.
const PER_WORKER: usize = 15;
/// Workers (a `Client` each) per lock in one process.
const WORKERS: usize = 3;

async fn connect(seeds: &[String]) -> Client {
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    Client::connect_cluster(&seeds, ClientOptions::default())
        .await
        .unwrap()
}

fn raw(cluster: &RedisCluster) -> redis::cluster::ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap()
        .get_connection()
        .unwrap()
}

/// One name per master of `cluster`, each of whose keys live on that master.
fn names_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let masters = cluster.masters();
    let mut names: Vec<Option<String>> = vec![None; masters.len()];
    for i in 0..10_000 {
        let name = format!("{prefix}{i}");
        let port = cluster.master_for_key(&name);
        let at = masters.iter().position(|m| *m == port).unwrap();
        names[at].get_or_insert(name);
        if names.iter().all(Option::is_some) {
            break;
        }
    }
    names.into_iter().map(Option::unwrap).collect()
}

#[test]
#[ignore = "runs only as a child process of every_primitive_excludes_on_every_master"]
fn cluster_contender_child() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let seeds: Vec<String> = env("CHILD_SEEDS").split(' ').map(String::from).collect();
        let client = connect(&seeds).await;
        println!("ready");
        let history = Arc::new(History::default());
        let pid = std::process::id();
        let locks = env("CHILD_LOCKS");
        let runs = locks
            .split(' ')
            .map(|lock| {
                let (kind, name) = lock.split_once('=').unwrap();
                let worker = format!("process-{pid}@{lock}");
                common::contend_as(
                    client.clone(),
                    kind.into(),
                    name.into(),
                    worker,
                    PER_WORKER,
                    history.clone(),
                )
            })
            .collect::<Vec<_>>();
        futures::future::join_all(runs).await;
        common::report_holds(&history);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_excludes_on_every_master() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let kinds = [
        "mutex",
        "fair",
        "reentrant",
        "rwlock",
        "semaphore",
        "multilock",
    ];
    // Each primitive on a name of each master: 12 locks, spread over the three shards.
    let mut locks = Vec::new();
    for kind in kinds {
        for name in names_on_every_master(&cluster, &format!("{kind}:")) {
            locks.push((kind, name));
        }
    }
    let masters: std::collections::HashSet<u16> = locks
        .iter()
        .map(|(_, name)| cluster.master_for_key(name))
        .collect();
    assert_eq!(masters.len(), 3, "the names reach every master");
    let spec: Vec<String> = locks.iter().map(|(k, n)| format!("{k}={n}")).collect();
    // The processes start with the tasks' first acquisitions, near enough: each makes
    // PER_WORKER acquisitions of every lock, interleaved with theirs.
    let spec = spec.join(" ");
    let seed_list = seeds.join(" ");
    let mut children: Vec<ChildProcess> = (0..2)
        .map(|_| {
            ChildProcess::spawn_test(
                "cluster_contender_child",
                &[("CHILD_SEEDS", &seed_list), ("CHILD_LOCKS", &spec)],
            )
            .unwrap()
        })
        .collect();
    for child in &mut children {
        let ready =
            tokio::task::block_in_place(|| child.wait_for_line("ready", Duration::from_secs(30)));
        assert!(ready.is_some(), "child connected");
    }
    let mut histories = Vec::new();
    let mut tasks = Vec::new();
    for (kind, name) in &locks {
        let history = Arc::new(History::default());
        for worker in 0..WORKERS {
            let client = connect(&seeds).await;
            tasks.push(tokio::spawn(common::contend_as(
                client,
                kind.to_string(),
                name.clone(),
                format!("task-{worker}@{kind}={name}"),
                PER_WORKER,
                history.clone(),
            )));
        }
        histories.push(((*kind, name.clone()), history));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish")
            .unwrap();
    }
    for child in &mut children {
        for interval in common::holds_of(child, locks.len() * PER_WORKER) {
            let lock = interval.worker.split_once('@').unwrap().1.to_string();
            let (_, history) = histories
                .iter()
                .find(|((kind, name), _)| format!("{kind}={name}") == lock)
                .unwrap();
            history.record(interval);
        }
    }
    // Each lock's holders, tasks and processes together: never two at once, tokens growing.
    let mut total = 0;
    for ((kind, name), history) in &histories {
        let report = history.check();
        assert!(report.is_ok(), "{kind} {name}: {report}");
        assert_eq!(
            report.acquisitions,
            (WORKERS + 2) * PER_WORKER,
            "{kind} {name}"
        );
        total += report.acquisitions;
    }
    assert_eq!(total, locks.len() * (WORKERS + 2) * PER_WORKER);
    // Every lock ends free, and no key was left without a TTL.
    let mut con = raw(&cluster);
    for (_, name) in &locks {
        let ttl: i64 = redis::cmd("PTTL").arg(name).query(&mut con).unwrap();
        assert_eq!(ttl, -2, "{name} is left behind");
    }
}

/// The shard master serving `name`'s slot, as a plain connection.
fn shard(cluster: &RedisCluster, name: &str) -> redis::Connection {
    node(cluster, cluster.master_for_key(name))
}

/// Whether a client is subscribed to `channel` on the shard serving it (`PUBSUB
/// SHARDNUMSUB`).
fn shard_subscribed(cluster: &RedisCluster, name: &str, channel: &str) -> bool {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut shard(cluster, name))
        .unwrap();
    count > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_on_its_shard_after_its_subscriber_died_and_its_slot_moved() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let name = "wake:{me}";
    let channel = redis_locks::LockKeys::new(name)
        .unwrap()
        .wake_channel()
        .to_string();
    // A 20 s retry delay and place lease: a waiter that is not woken misses the 5 s budget
    // below.
    let options =
        common::slow_polling(Duration::from_secs(30)).place_lease(Duration::from_secs(20));
    let holder = connect(&seeds)
        .await
        .mutex_with(name, options.clone())
        .unwrap();
    let waiter = connect(&seeds).await.mutex_with(name, options).unwrap();
    for round in [
        "as it is",
        "after its subscriber was killed",
        "after the slot moved",
    ] {
        let guard = holder.try_lock().await.unwrap();
        let first = guard.fencing_token();
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move { waiter.lock_timeout(Duration::from_secs(5)).await })
        };
        assert!(
            eventually(Duration::from_secs(5), || async {
                shard_subscribed(&cluster, name, &channel)
            })
            .await,
            "{round}: the waiter subscribed on the lock's shard"
        );
        match round {
            "after its subscriber was killed" => {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query(&mut shard(&cluster, name))
                    .unwrap();
                assert!(killed >= 1, "the subscriber connection was killed");
            }
            "after the slot moved" => {
                let from = cluster.master_for_key(name);
                let to = *cluster.masters().iter().find(|m| **m != from).unwrap();
                cluster.migrate_slot(cluster.slot_of(name), to).unwrap();
                assert_eq!(cluster.master_for_key(name), to);
            }
            _ => {}
        }
        // Subscribed again (on the new shard, after a move) before the release.
        assert!(
            eventually(Duration::from_secs(10), || async {
                shard_subscribed(&cluster, name, &channel)
            })
            .await,
            "{round}: the waiter is subscribed again"
        );
        let released_at = Instant::now();
        guard.release().await.unwrap();
        let got = waiting
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("{round}: {err}"));
        assert!(got.fencing_token() > first, "{round}: tokens grow");
        // Not woken, a waiter looks again only when it rechecks its subscription (every
        // 2 s): a wake-up published where it does not listen (PUBLISH to a sharded
        // subscriber, or to the old shard) fails this.
        let waited = released_at.elapsed();
        assert!(
            waited < Duration::from_millis(1500),
            "{round}: woken, not polled ({waited:?})"
        );
        got.release().await.unwrap();
    }
}

/// Waits until `guard`'s lease was renewed to end at least `past` after `since`, with no
/// loss: the watchdog renews it through whatever the cluster did meanwhile.
async fn renewed_past(guard: &redis_locks::MutexGuard, since: Instant, past: Duration) {
    let renewed = eventually(Duration::from_secs(15), || async {
        assert_eq!(guard.lost_reason(), None, "the holder lost its lock");
        guard.lease_deadline() > since + past
    })
    .await;
    assert!(renewed, "the lease was not renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_waited_lock_keeps_through_a_manual_failover_and_a_slot_migration() {
    let cluster = RedisCluster::start(3, 1).unwrap();
    let seeds = cluster.seed_urls();
    let name = "held:{through}";
    let channel = redis_locks::LockKeys::new(name)
        .unwrap()
        .wake_channel()
        .to_string();
    // Longer than a manual failover keeps the slot's writes paused (up to about 2 s here).
    let lease = Duration::from_secs(4);
    let holder = connect(&seeds)
        .await
        .mutex_with(name, LockOptions::default().lease(lease).watchdog(true))
        .unwrap();
    let guard = holder.try_lock().await.unwrap();
    let first = guard.fencing_token();
    let waiting = {
        let waiter = connect(&seeds).await.mutex(name).unwrap();
        tokio::spawn(async move { waiter.lock_timeout(Duration::from_secs(60)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            shard_subscribed(&cluster, name, &channel)
        })
        .await,
        "the waiter waits"
    );

    // A manual failover of the lock's shard: the replica becomes its master.
    let old = cluster.master_for_key(name);
    let replica = cluster.replica_of(old).expect("the shard has a replica");
    cluster.failover(replica).unwrap();
    assert_eq!(cluster.master_for_key(name), replica);
    renewed_past(&guard, Instant::now(), lease).await;

    // The slot moves to another shard, keys and all.
    let to = *cluster.masters().iter().find(|m| **m != replica).unwrap();
    cluster.migrate_slot(cluster.slot_of(name), to).unwrap();
    assert_eq!(cluster.master_for_key(name), to);
    renewed_past(&guard, Instant::now(), lease).await;

    assert!(
        !waiting.is_finished(),
        "the waiter got in while the lock was held"
    );
    guard.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(
        got.fencing_token() > first,
        "tokens grow across the failover and the move"
    );
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_before_its_replica_had_the_grant_lets_a_second_holder_in_with_a_greater_token()
 {
    let mut cluster = RedisCluster::start(3, 1).unwrap();
    let seeds = cluster.seed_urls();
    let name = "window:{lagged}";
    let client = connect(&seeds).await;
    // A first holder the replica has heard of: its token is on both.
    let before = client.mutex(name).unwrap().try_lock().await.unwrap();
    let mut tokens = vec![before.fencing_token()];
    before.release().await.unwrap();
    let master = cluster.master_for_key(name);
    let replica = cluster.replica_of(master).unwrap();
    let mut con = shard(&cluster, name);
    // The replica has everything so far.
    let offset: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut con).unwrap();
    assert_eq!(offset, 1, "the replica acknowledged");
    // The replica stops hearing from its master: paused, its link cut by the master (a
    // paused replica's kernel would still take in what the master sends), the next grant
    // and its counter reach the master only.
    cluster.pause_node(replica);
    let cut: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut con)
        .unwrap();
    assert_eq!(cut, 1, "the replica's link was cut");
    let lease = Duration::from_secs(30);
    let first = client
        .mutex_with(name, LockOptions::default().lease(lease))
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    tokens.push(first.fencing_token());
    let killed_at = Instant::now();
    cluster.kill_node(master);
    cluster.resume_node(replica);
    // The window the docs state: the grant was lost with the master, and a second holder
    // gets in while the first's lease still runs, as soon as the replica is promoted.
    let (second, promoted_at) = eventually_lock(&client, name, replica).await;
    eprintln!(
        "kill -9 of the master: replica promoted after {:?}, first grant on it after {:?} \
         (cluster-node-timeout 2 s)",
        promoted_at.map(|at| at - killed_at),
        killed_at.elapsed()
    );
    // The grant came from the replica; the other nodes' views of the slot may lag behind it
    // for a moment (a majority of them named the dead master in one CI run).
    assert_eq!(cluster.wait_promoted(master).unwrap(), replica);
    assert_eq!(cluster.master_for_key(name), replica);
    assert!(
        first.lease_remaining() > Duration::ZERO,
        "the first holder's lease still runs"
    );
    // Its token is still greater than every token handed out before: the counter that
    // came back old on the replica is raised to the shard's clock.
    let token = second.fencing_token();
    assert!(
        tokens.iter().all(|t| token > *t),
        "{token:?} after {tokens:?}"
    );
    second.release().await.unwrap();
}

/// Takes `name` on `client` as soon as the cluster serves it again (bounded); also when
/// `replica` first said it is a master (asked every 10 ms meanwhile).
async fn eventually_lock(
    client: &Client,
    name: &str,
    replica: u16,
) -> (redis_locks::MutexGuard, Option<Instant>) {
    let until = Instant::now() + Duration::from_secs(15);
    let watch = tokio::spawn(async move {
        let mut role = redis::Client::open(format!("redis://127.0.0.1:{replica}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        loop {
            let reply: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut role).await.unwrap();
            if reply.first() == Some(&redis::Value::BulkString(b"master".to_vec())) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    loop {
        match client.mutex(name).unwrap().try_lock().await {
            Ok(guard) => {
                let promoted_at = if watch.is_finished() {
                    watch.await.ok()
                } else {
                    watch.abort();
                    None
                };
                return (guard, promoted_at);
            }
            Err(err) if Instant::now() < until => {
                assert!(!err.is_held(), "the grant reached the replica: {err}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(err) => panic!("the promoted replica never granted: {err}"),
        }
    }
}

#[tokio::test]
async fn connect_cluster_refuses_bad_input_promptly() {
    let options = ClientOptions::default().connect_timeout(Duration::from_millis(300));
    let refused = |result: redis_locks::Result<Client>| match result {
        Err(err) => err,
        Ok(_) => panic!("connected"),
    };
    let err = refused(Client::connect_cluster(&[], options.clone()).await);
    assert!(
        matches!(err, redis_locks::Error::InvalidUrl { .. }),
        "{err}"
    );
    for bad in [
        "",
        "localhost:7000",
        "http://127.0.0.1:7000",
        "redis://127.0.0.1:0",
    ] {
        let err = refused(Client::connect_cluster(&[bad], options.clone()).await);
        assert!(
            matches!(err, redis_locks::Error::InvalidUrl { .. }),
            "{bad}: {err}"
        );
    }
    let slow = options.clone().response_timeout(Duration::from_secs(9));
    let err = refused(Client::connect_cluster(&["redis://127.0.0.1:7000"], slow).await);
    assert!(
        matches!(err, redis_locks::Error::InvalidDuration { .. }),
        "{err}"
    );
    // A seed where nothing listens: a connection error, in bounded time.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let seed = format!("redis://127.0.0.1:{port}");
    let err = refused(Client::connect_cluster(&[&seed], options.clone()).await);
    assert!(err.is_connection(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // A single server that is not a cluster.
    let server = test_support::RedisServer::start().unwrap();
    let err = refused(Client::connect_cluster(&[&server.url()], options).await);
    assert!(
        err.to_string().contains("cluster support disabled"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_released_while_their_slot_migrates_are_released_without_error() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let holder = connect(&seeds).await;
    let waiter = connect(&seeds).await;
    for (kind, name) in [("mutex", "moving:{m}"), ("rwlock", "moving:{r}")] {
        let from = cluster.master_for_key(name);
        let to = *cluster.masters().iter().find(|m| **m != from).unwrap();
        let options = LockOptions::default().lease(Duration::from_secs(30));
        // Held, with a waiter in line (its queue keys live in the slot too).
        let (release, waiting): (
            tokio::task::JoinHandle<redis_locks::Result<redis_locks::Released>>,
            tokio::task::JoinHandle<redis_locks::FencingToken>,
        ) = match kind {
            "mutex" => {
                let guard = holder
                    .mutex_with(name, options.clone())
                    .unwrap()
                    .lock()
                    .await
                    .unwrap();
                let mutex = waiter.mutex_with(name, options).unwrap();
                let waiting = tokio::spawn(async move {
                    let got = mutex.lock_timeout(Duration::from_secs(20)).await.unwrap();
                    let token = got.fencing_token();
                    got.release().await.unwrap();
                    token
                });
                wait_in_line(&cluster, name).await;
                let migration = cluster.begin_migration(cluster.slot_of(name), to).unwrap();
                let release = tokio::spawn(async move { guard.release().await });
                migration.move_keys().unwrap();
                migration.finish().unwrap();
                (release, waiting)
            }
            _ => {
                let guard = holder.rwlock(name).unwrap().write().await.unwrap();
                let rwlock = waiter.rwlock(name).unwrap();
                let waiting = tokio::spawn(async move {
                    let got = rwlock.write_timeout(Duration::from_secs(20)).await.unwrap();
                    let token = got.fencing_token();
                    got.release().await.unwrap();
                    token
                });
                wait_in_line(&cluster, name).await;
                let migration = cluster.begin_migration(cluster.slot_of(name), to).unwrap();
                let release = tokio::spawn(async move { guard.release().await });
                migration.move_keys().unwrap();
                migration.finish().unwrap();
                (release, waiting)
            }
        };
        release
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("{kind}: the release during the migration: {err}"));
        let started = Instant::now();
        let token = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the waiter gets the lock")
            .unwrap();
        assert!(token.get() > 0);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{kind}: the waiter got in only after {:?}, by the lease's end",
            started.elapsed()
        );
        assert_eq!(cluster.master_for_key(name), to);
    }
}

/// Waits until somebody waits in `name`'s line (its queue key exists on the lock's shard).
async fn wait_in_line(cluster: &RedisCluster, name: &str) {
    let queue = redis_locks::LockKeys::new(name)
        .unwrap()
        .queue()
        .to_string();
    let lined = eventually(Duration::from_secs(5), || async {
        redis::cmd("EXISTS")
            .arg(&queue)
            .query::<i64>(&mut shard(cluster, name))
            .unwrap()
            == 1
    })
    .await;
    assert!(lined, "a waiter stands in {name}'s line");
}

/// A plain connection to the cluster's node on `port`.
fn node(cluster: &RedisCluster, port: u16) -> redis::Connection {
    cluster
        .node(port)
        .expect("a node of the cluster")
        .connection()
        .unwrap()
}

/// Whether a client is subscribed to `channel` on the cluster's node on `port`.
fn subscribed_on(cluster: &RedisCluster, port: u16, channel: &str) -> bool {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut node(cluster, port))
        .unwrap();
    count > 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_on_another_shard_leaves_waiters_listening_not_polling() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let name = "elsewhere:{dropped}";
    let channel = redis_locks::LockKeys::new(name)
        .unwrap()
        .wake_channel()
        .to_string();
    let home = cluster.master_for_key(name);
    let other = *cluster.masters().iter().find(|m| **m != home).unwrap();
    // The default retry delay: a waiter that believes its channel dead polls every 25 ms.
    let holder = connect(&seeds).await.mutex(name).unwrap();
    let waiter_client = connect(&seeds).await;
    let waiter = waiter_client.mutex(name).unwrap();
    let guard = holder.try_lock().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.lock_timeout(Duration::from_secs(30)).await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            subscribed_on(&cluster, home, &channel)
        })
        .await
    );
    // Every client connection of another master dropped (as its `timeout` setting drops idle
    // ones): the waiter's client hears of a dropped connection, not which one.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut node(&cluster, other))
        .unwrap();
    assert!(killed >= 1);
    // Its channel is live again at once: the waiter listens, and sends next to nothing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = waiter_client.stats().requests;
    let span = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = waiter_client.stats().requests - before;
    assert!(
        sent < 30,
        "the waiter sent {sent} requests in {:?}: it polls",
        span.elapsed()
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(released_at.elapsed() < Duration::from_millis(1500));
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_on_a_replica_promoted_after_its_master_was_killed() {
    let mut cluster = RedisCluster::start(3, 1).unwrap();
    let seeds = cluster.seed_urls();
    let name = "promoted:{wake}";
    let channel = redis_locks::LockKeys::new(name)
        .unwrap()
        .wake_channel()
        .to_string();
    let master = cluster.master_for_key(name);
    let replica = cluster.replica_of(master).unwrap();
    // A 20 s retry delay and place lease: only a wake-up gets the waiter in within 1.5 s.
    let options =
        common::slow_polling(Duration::from_secs(30)).place_lease(Duration::from_secs(20));
    let holder = connect(&seeds).await;
    let waiter = connect(&seeds).await;
    // The waiter's client subscribes on the master before it dies: its wake-up connection
    // knows the cluster as it was.
    let warm = "promoted:{wake}:warm";
    let held = holder.mutex(warm).unwrap().try_lock().await.unwrap();
    let warming = {
        let mutex = waiter.mutex_with(warm, options.clone()).unwrap();
        tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(10)).await })
    };
    let warm_channel = redis_locks::LockKeys::new(warm)
        .unwrap()
        .wake_channel()
        .to_string();
    assert!(
        eventually(Duration::from_secs(5), || async {
            subscribed_on(&cluster, master, &warm_channel)
        })
        .await
    );
    held.release().await.unwrap();
    warming.await.unwrap().unwrap().release().await.unwrap();

    cluster.kill_node(master);
    assert_eq!(cluster.wait_promoted(master).unwrap(), replica);
    // A lock of the dead master's slots, held on the promoted replica, and waited for.
    let until = Instant::now() + Duration::from_secs(15);
    let guard = loop {
        match holder
            .mutex_with(name, options.clone())
            .unwrap()
            .try_lock()
            .await
        {
            Ok(guard) => break guard,
            Err(err) => assert!(Instant::now() < until, "never granted: {err}"),
        }
    };
    let waiting = {
        let mutex = waiter.mutex_with(name, options).unwrap();
        tokio::spawn(async move {
            // Until its client learns of the new master, an attempt may fail (an error it
            // is told of): it waits again, as an application would.
            loop {
                match mutex.lock_timeout(Duration::from_secs(60)).await {
                    Err(err) if err.is_connection() => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => return other,
                }
            }
        })
    };
    assert!(
        eventually(Duration::from_secs(15), || async {
            subscribed_on(&cluster, replica, &channel)
        })
        .await,
        "the waiter subscribed on the promoted replica"
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    let waited = released_at.elapsed();
    assert!(
        waited < Duration::from_millis(1500),
        "woken, not polled ({waited:?})"
    );
    got.release().await.unwrap();
}
