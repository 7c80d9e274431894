//! `redis-locks list`: every lock on a real server — of every kind, held, waited for and
//! released — and ten thousand of them; a cluster's every master; bad input.

mod common;

use std::time::Duration;

use common::{eventually, expect, redis_locks, stdout};
use redis_locks::Client;
use serde_json::Value;
use test_support::{RedisCluster, RedisServer};

/// `list ARGS --json` against `url`, parsed; asserts it exits 0.
fn list(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["list"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--redis", url, "--json"]);
    let out = redis_locks(&all);
    assert!(out.status.success(), "list failed: {out:?}");
    serde_json::from_str(&stdout(&out)).expect("one JSON object")
}

/// The listed lock `name`.
fn lock<'a>(listing: &'a Value, name: &str) -> &'a Value {
    listing["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|lock| lock["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {listing}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_held_waited_for_and_released_is_listed_with_its_holders_and_counter() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();

    let mutex = client.mutex("jobs:nightly").unwrap();
    let _held = mutex.lock().await.unwrap();
    // A second client waits for the held Mutex.
    let waiter_client = Client::connect(&url).await.unwrap();
    let waiter = tokio::spawn(async move {
        let mutex = waiter_client.mutex("jobs:nightly").unwrap();
        let guard = mutex.lock().await.unwrap();
        guard.release().await.unwrap();
    });
    let rwlock = client.rwlock("{tenant-7}:cart").unwrap();
    let _read_one = rwlock.read().await.unwrap();
    let _read_two = client
        .rwlock("{tenant-7}:cart")
        .unwrap()
        .read()
        .await
        .unwrap();
    let writer = client.rwlock("{tenant-7}:cart").unwrap();
    let writing = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        guard.release().await.unwrap();
    });
    let reentrant = client.reentrant_mutex("ledger").unwrap();
    let _outer = reentrant.lock().await.unwrap();
    let _inner = reentrant.lock().await.unwrap();
    let semaphore = client.semaphore("api-slots", 3).unwrap();
    let _permits = semaphore.acquire_many(2).await.unwrap();
    // Released: free, its fencing counter kept.
    let done = client.mutex("done").unwrap();
    let counter = done.lock().await.unwrap().fencing_token().get();
    let done_guard = done.lock().await.unwrap();
    let last = done_guard.fencing_token().get();
    assert!(last > counter);
    done_guard.release().await.unwrap();
    // Expired: its holder vanished without a release (forgotten, as a killed process would),
    // and its 200 ms lease ran out.
    let lapsing = client
        .mutex_with(
            "lapsed",
            redis_locks::LockOptions::default().lease(Duration::from_millis(200)),
        )
        .unwrap();
    let lapsed_guard = lapsing.lock().await.unwrap();
    let lapsed_token = lapsed_guard.fencing_token().get();
    std::mem::forget(lapsed_guard);
    tokio::time::sleep(Duration::from_millis(400)).await;

    // Wait until both waiters are seen waiting.
    let listed = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            let mut listing = Value::Null;
            let seen = eventually(Duration::from_secs(10), || {
                listing = list(&url, &[]);
                lock(&listing, "jobs:nightly")["waiting"].as_u64() >= Some(1)
                    && lock(&listing, "{tenant-7}:cart")["waiting"].as_u64() == Some(1)
            });
            assert!(seen, "the waiters never showed: {listing}");
            listing
        }
    })
    .await
    .unwrap();

    assert_eq!(listed["count"], 6, "{listed}");
    let lapsed = lock(&listed, "lapsed");
    assert_eq!(lapsed["kind"], "free", "an expired lock: {lapsed}");
    assert_eq!(lapsed["fencing_counter"].as_u64(), Some(lapsed_token));
    let nightly = lock(&listed, "jobs:nightly");
    assert_eq!(nightly["kind"], "mutex");
    assert_eq!(nightly["holders"].as_array().unwrap().len(), 1);
    assert!(nightly["lease_remaining_ms"].as_u64().unwrap() > 0);
    assert!(nightly["fencing_counter"].as_u64().unwrap() > 0);

    let cart = lock(&listed, "{tenant-7}:cart");
    assert_eq!(cart["kind"], "rwlock");
    let holds = cart["holders"].as_array().unwrap();
    assert_eq!(holds.len(), 2);
    assert!(holds.iter().all(|hold| hold["mode"] == "read"));

    let ledger = lock(&listed, "ledger");
    assert_eq!(ledger["kind"], "reentrant");
    assert_eq!(
        ledger["holders"].as_array().unwrap().len(),
        2,
        "one hold per entry"
    );

    let slots = lock(&listed, "api-slots");
    assert_eq!(slots["kind"], "semaphore");
    assert_eq!(slots["permits"], 3);
    assert_eq!(slots["holders"][0]["permits"], 2);

    let done = lock(&listed, "done");
    assert_eq!(done["kind"], "free");
    assert!(done["holders"].as_array().unwrap().is_empty());
    assert_eq!(done["fencing_counter"].as_u64(), Some(last));

    // A pattern keeps only the names it matches.
    let url_again = url.clone();
    let some = tokio::task::spawn_blocking(move || list(&url_again, &["jobs:*"]))
        .await
        .unwrap();
    assert_eq!(some["count"], 1, "{some}");
    assert_eq!(some["locks"][0]["name"], "jobs:nightly");

    // The table: a header, a line per lock, the count.
    let url_again = url.clone();
    let table =
        tokio::task::spawn_blocking(move || stdout(&redis_locks(&["list", "--redis", &url_again])))
            .await
            .unwrap();
    assert!(table.starts_with("NAME"), "{table}");
    assert!(
        table.contains("api-slots") && table.contains("2/3"),
        "{table}"
    );
    assert!(table.trim_end().ends_with("6 locks"), "{table}");

    drop((_held, _read_one, _read_two));
    waiter.await.unwrap();
    writing.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_held_locks_are_listed() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let mut guards = Vec::with_capacity(10_000);
    for batch in 0..100 {
        let mut taking = Vec::new();
        for i in 0..100 {
            let mutex = client.mutex(&format!("order:{}", batch * 100 + i)).unwrap();
            taking.push(tokio::spawn(async move { mutex.lock().await }));
        }
        for task in taking {
            guards.push(task.await.unwrap().unwrap());
        }
    }
    let listed = tokio::task::spawn_blocking(move || list(&url, &["order:*"]))
        .await
        .unwrap();
    assert_eq!(listed["count"], 10_000);
    let locks = listed["locks"].as_array().unwrap();
    assert!(locks.iter().all(|lock| lock["kind"] == "mutex"));
    assert!(
        locks
            .iter()
            .all(|lock| lock["holders"].as_array().unwrap().len() == 1)
    );
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_listed_from_every_master() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let client = Client::connect_cluster(&seeds, Default::default())
        .await
        .unwrap();
    let mut guards = Vec::new();
    // Names spread over the slots of every master.
    for i in 0..60 {
        guards.push(
            client
                .mutex(&format!("shard-{i}"))
                .unwrap()
                .lock()
                .await
                .unwrap(),
        );
    }
    let seed = seeds[0].to_string();
    let out =
        tokio::task::spawn_blocking(move || redis_locks(&["list", "--cluster", &seed, "--json"]))
            .await
            .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["count"], 60, "{listed}");
    drop(guards);
}

#[test]
fn a_bad_pattern_and_several_servers_are_bad_usage() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let out = redis_locks(&["list", "[unclosed", "--redis", &url]);
    expect(&out, 64, "bad PATTERN");
    let out = redis_locks(&["list", "--redis", &url, "--redis", &url, "--redis", &url]);
    expect(&out, 64, "one lock service is read");
}

#[test]
fn an_empty_server_has_no_locks() {
    let server = RedisServer::start().unwrap();
    let out = redis_locks(&["list", "--redis", &server.url()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out).trim(), "no locks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_lists_its_own_locks_by_their_names() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let spaced = redis_locks::ClientOptions::default().namespace("app");
    let inside = Client::connect_with(&url, spaced).await.unwrap();
    let outside = Client::connect(&url).await.unwrap();
    let _a = inside.mutex("a").unwrap().lock().await.unwrap();
    let _b = outside.mutex("b").unwrap().lock().await.unwrap();
    let out = tokio::task::spawn_blocking(move || {
        redis_locks(&["list", "--redis", &url, "--namespace", "app", "--json"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["count"], 1, "{listed}");
    assert_eq!(listed["locks"][0]["name"], "a");
    assert_eq!(listed["locks"][0]["kind"], "mutex");
}
