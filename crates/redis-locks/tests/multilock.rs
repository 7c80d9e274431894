//! MultiLock: all or none, in one global order, so overlapping MultiLocks never deadlock;
//! a partial failure leaves nothing held; the loss of one part fires `lost()`; on one server
//! and across the slots of a Redis Cluster.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::{assert_not_held, client, eventually, exists, raw, server};
use redis_locks::{
    Client, ClientOptions, Error, LockOptions, LostReason, MAX_MULTILOCK_NAMES, MultiLock,
    MultiLockGuard,
};
use test_support::RedisCluster;
use test_support::history::{History, Interval, now_nanos};
use tokio::time::Instant;

/// Records one holding of every lock of `guard` (one history per name), held for a moment.
async fn hold_all(guard: MultiLockGuard, worker: &str, histories: &HashMap<String, History>) {
    let start = now_nanos();
    tokio::time::sleep(Duration::from_micros(200)).await;
    let end = now_nanos();
    for (name, token) in guard.fencing_tokens() {
        histories[name].record(Interval {
            worker: worker.to_string(),
            token: token.get(),
            start,
            end,
        });
    }
    guard.release().await.unwrap();
}

/// `rounds` acquisitions of a MultiLock over `names` (in the caller's order) by `worker`,
/// each within a 20 s budget: a deadlock would show as a timeout.
async fn rounds_of(
    client: Client,
    names: Vec<String>,
    worker: String,
    rounds: usize,
    histories: Arc<HashMap<String, History>>,
) {
    let options = LockOptions::default()
        .lease(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(5));
    let lock = client.multi_lock_with(&names, options).unwrap();
    for _ in 0..rounds {
        let guard = lock
            .lock_timeout(Duration::from_secs(20))
            .await
            .unwrap_or_else(|err| panic!("{worker} over {names:?}: {err}"));
        hold_all(guard, &worker, &histories).await;
    }
}

/// Overlapping MultiLocks, each named in another order, many rounds: none is ever stuck, and
/// every name is held by one at a time with growing tokens.
async fn opposite_orders_never_deadlock(clients: Vec<Client>, names: &[String]) {
    let histories: Arc<HashMap<String, History>> = Arc::new(
        names
            .iter()
            .map(|name| (name.clone(), History::default()))
            .collect(),
    );
    let (a, b, c) = (&names[0], &names[1], &names[2]);
    let sets = [
        vec![a.clone(), b.clone()],
        vec![b.clone(), a.clone()],
        vec![c.clone(), b.clone(), a.clone()],
        vec![a.clone(), c.clone()],
    ];
    let started = Instant::now();
    let tasks: Vec<_> = sets
        .iter()
        .enumerate()
        .map(|(i, set)| {
            tokio::spawn(rounds_of(
                clients[i % clients.len()].clone(),
                set.clone(),
                format!("worker-{i}"),
                40,
                histories.clone(),
            ))
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("no MultiLock is stuck")
            .unwrap();
    }
    eprintln!("160 MultiLock rounds in {:?}", started.elapsed());
    for (name, history) in histories.iter() {
        let report = history.check();
        assert!(report.is_ok(), "{name}: {report:?}");
        assert!(report.acquisitions >= 80, "{name}: {report}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multilocks_in_opposite_orders_never_deadlock() {
    let server = server();
    let clients = vec![client(&server).await, client(&server).await];
    let names: Vec<String> = ["acct:a", "acct:b", "acct:c"].map(String::from).to_vec();
    opposite_orders_never_deadlock(clients, &names).await;
}

#[tokio::test]
async fn all_or_none_with_a_token_per_name() {
    let server = server();
    let client = client(&server).await;
    let lock = client.multi_lock(["b", "c", "a"]).unwrap();
    assert_eq!(lock.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(lock.slots(), 1, "one server: one script call");
    // A Mutex holds b: nothing is taken, and the refusal names b.
    let b = client.mutex("b").unwrap().lock().await.unwrap();
    let err = lock.try_lock().await.unwrap_err();
    assert!(
        matches!(&err, Error::Held { name, retry_after: Some(_) } if name == "b"),
        "{err}"
    );
    assert!(!exists(&server, "a") && !exists(&server, "c"), "none taken");
    let err = lock
        .lock_timeout(Duration::from_millis(150))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::WaitTimeout { name, .. } if name == "b"),
        "names the lock held by another: {err}"
    );
    assert!(!exists(&server, "a") && !exists(&server, "c"), "none taken");
    let b_token = b.fencing_token();
    b.release().await.unwrap();
    let guard = lock.try_lock().await.unwrap();
    assert_eq!(guard.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(guard.fencing_token("b").unwrap() > b_token);
    assert!(guard.fencing_token("zzz").is_none());
    for name in ["a", "b", "c"] {
        let err = client.mutex(name).unwrap().try_lock().await.unwrap_err();
        assert!(err.is_held(), "{name} is held by the MultiLock");
        assert!(common::pttl(&server, name) > 25_000, "{name} has the lease");
    }
    guard.release().await.unwrap();
    for name in ["a", "b", "c"] {
        assert!(!exists(&server, name), "{name} released");
    }
}

#[tokio::test]
async fn a_waiting_multilock_is_woken_by_the_release_of_the_lock_that_refused_it() {
    let server = server();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let a = holder.mutex("w:a").unwrap().lock().await.unwrap();
    let c = holder.mutex("w:c").unwrap().lock().await.unwrap();
    let lock = waiter.multi_lock(["w:a", "w:b", "w:c"]).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await });
    // It waits in a's line, then (a released) in c's: each release wakes it, long before
    // the 30 s leases end.
    let line = |name: &'static str| {
        let server = &server;
        move || async move {
            redis::cmd("ZCARD")
                .arg(format!("{{{name}}}:queue"))
                .query::<i64>(&mut raw(server))
                .unwrap()
                == 1
        }
    };
    assert!(
        eventually(Duration::from_secs(5), line("w:a")).await,
        "in a's line"
    );
    a.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), line("w:c")).await,
        "in c's line"
    );
    assert!(!waiting.is_finished(), "c is still held");
    let released = Instant::now();
    c.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(5));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_loss_of_one_part_fires_lost_and_the_release_names_it() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default()
        .lease(Duration::from_millis(600))
        .watchdog(true);
    let lock = client.multi_lock_with(["l:a", "l:b"], options).unwrap();
    let guard = lock.lock().await.unwrap();
    // Another owner takes l:b behind the guard's back: its next renewal finds it.
    redis::cmd("SET")
        .arg("l:b")
        .arg("somebody-else")
        .arg("PX")
        .arg(60_000)
        .exec(&mut raw(&server))
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires at the next renewal");
    assert_eq!(reason, LostReason::Taken);
    assert_eq!(guard.lost_reason(), Some(LostReason::Taken));
    match guard.release().await {
        Err(Error::NotHeld { name, reason }) => {
            assert_eq!((name.as_str(), reason), ("l:b", LostReason::Taken));
        }
        other => panic!("expected NotHeld for l:b, got {other:?}"),
    }
    // The lock still ours was released; the other owner's was left alone.
    assert!(!exists(&server, "l:a"));
    let value: String = redis::cmd("GET")
        .arg("l:b")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(value, "somebody-else");
    // An extension finds the part gone.
    let guard = client
        .multi_lock(["l:a", "l:c"])
        .unwrap()
        .lock()
        .await
        .unwrap();
    redis::cmd("DEL")
        .arg("l:c")
        .exec(&mut raw(&server))
        .unwrap();
    assert_not_held(
        guard.extend(Duration::from_secs(5)).await,
        LostReason::Expired,
    );
    drop(guard);
    assert!(
        eventually(Duration::from_secs(5), || async { !exists(&server, "l:a") }).await,
        "a dropped guard releases"
    );
}

#[tokio::test]
async fn bad_names_are_typed_errors() {
    let server = server();
    let client = client(&server).await;
    let none: [&str; 0] = [];
    assert!(matches!(
        client.multi_lock(none).unwrap_err(),
        Error::InvalidNames { .. }
    ));
    let err = client.multi_lock(["x", "y", "x"]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidNames { reason } if reason.contains("\"x\"")),
        "{err}"
    );
    let many: Vec<String> = (0..=MAX_MULTILOCK_NAMES).map(|i| format!("n{i}")).collect();
    assert!(matches!(
        client.multi_lock(&many).unwrap_err(),
        Error::InvalidNames { .. }
    ));
    assert!(matches!(
        client.multi_lock(["ok", ""]).unwrap_err(),
        Error::InvalidName { .. }
    ));
    // A key of another type: WrongType, nothing taken.
    redis::cmd("LPUSH")
        .arg("listy")
        .arg("x")
        .exec(&mut raw(&server))
        .unwrap();
    let err = client
        .multi_lock(["free", "listy"])
        .unwrap()
        .try_lock()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == "listy"),
        "{err}"
    );
    assert!(!exists(&server, "free"));
    // Another primitive's plain key (a semaphore's permit, an RwLock's read hold, each taken
    // without a script): WrongType at once, whether or not the MultiLock would wait, and the
    // key is left as it was (no waiter's mark appended to it).
    for (name, value) in [("permit", "0123abcd 3"), ("read", "0123abcd@x r owner a")] {
        redis::cmd("SET")
            .arg(name)
            .arg(value)
            .arg("PX")
            .arg(60_000)
            .exec(&mut raw(&server))
            .unwrap();
        let lock = client.multi_lock(["free", name]).unwrap();
        for err in [
            lock.try_lock().await.unwrap_err(),
            lock.lock_timeout(Duration::from_secs(2)).await.unwrap_err(),
        ] {
            assert!(
                matches!(&err, Error::WrongType { key, .. } if key == name),
                "{err}"
            );
        }
        let kept: String = redis::cmd("GET")
            .arg(name)
            .query(&mut raw(&server))
            .unwrap();
        assert_eq!(kept, value);
        assert!(!exists(&server, "free"));
    }
}

async fn connect(cluster: &RedisCluster) -> Client {
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    Client::connect_cluster(&seeds, ClientOptions::default())
        .await
        .unwrap()
}

/// Three names on three different slots (masters) of `cluster`.
fn names_on_three_slots(cluster: &RedisCluster) -> Vec<String> {
    let masters = cluster.masters();
    let mut names: Vec<Option<String>> = vec![None; masters.len()];
    for i in 0..10_000 {
        let name = format!("multi{i}");
        let at = masters
            .iter()
            .position(|m| *m == cluster.master_for_key(&name))
            .unwrap();
        names[at].get_or_insert(name);
        if names.iter().all(Option::is_some) {
            break;
        }
    }
    names.into_iter().map(Option::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_cluster_slots_in_slot_order_partial_failure_leaves_none_held() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let client = connect(&cluster).await;
    let names = names_on_three_slots(&cluster);
    let lock: MultiLock = client.multi_lock(names.iter().rev()).unwrap();
    assert_eq!(lock.slots(), 3);
    // Taken by slot, as CLUSTER KEYSLOT says, whatever order they were given in.
    let slots: Vec<u16> = lock.names().map(|name| cluster.slot_of(name)).collect();
    assert!(slots.windows(2).all(|w| w[0] < w[1]), "{slots:?}");
    // Names sharing a hash tag are one slot: one script call.
    let tagged = client
        .multi_lock(["{acct}:1", "{acct}:2", "{acct}:3"])
        .unwrap();
    assert_eq!(tagged.slots(), 1);
    tagged.lock().await.unwrap().release().await.unwrap();

    // The last slot's lock is held: the wait takes the first two, then times out having
    // released them — within its one total deadline.
    let last = lock.names().last().unwrap().to_string();
    let blocker = client.mutex(&last).unwrap().lock().await.unwrap();
    let started = Instant::now();
    let err = lock
        .lock_timeout(Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "one total deadline"
    );
    let raw = redis::cluster::ClusterClient::new(cluster.seed_urls()).unwrap();
    let held = |name: &str| -> bool {
        let mut con = raw.get_connection().unwrap();
        redis::cmd("EXISTS").arg(name).query(&mut con).unwrap()
    };
    for name in lock.names().filter(|name| **name != last) {
        assert!(!held(name), "{name} was released after the timeout");
    }
    // A cancelled wait releases what it took too.
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    let first = lock.names().next().unwrap().to_string();
    assert!(
        eventually(Duration::from_secs(5), || async { held(&first) }).await,
        "the wait took the first slot"
    );
    waiting.abort();
    assert!(
        eventually(Duration::from_secs(5), || async { !held(&first) }).await,
        "a cancelled wait releases what it took"
    );
    blocker.release().await.unwrap();

    // Overlapping MultiLocks across the slots, in opposite orders: never stuck.
    let clients = vec![client.clone(), connect(&cluster).await];
    opposite_orders_never_deadlock(clients, &names).await;
}
