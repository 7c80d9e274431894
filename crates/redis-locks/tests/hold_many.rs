//! Many locks held on one client: the watchdog renews them in batches (one round trip for
//! many locks), and each lease is still kept or lost on its own.

mod common;

use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use redis_locks::{Client, ClientOptions, LostReason, MutexGuard};
use test_support::RedisServer;

use common::{raw, renewed, server};

/// Takes `count` renewed locks named `many:<i>` with a lease of `lease_ms`, 64 at a time.
async fn hold(client: &Client, count: usize, lease_ms: u64) -> Vec<MutexGuard> {
    let mut guards: Vec<(usize, MutexGuard)> = futures::stream::iter(0..count)
        .map(|i| async move {
            let mutex = client
                .mutex_with(&format!("many:{i}"), renewed(lease_ms))
                .unwrap();
            (i, mutex.lock().await.unwrap())
        })
        .buffer_unordered(64)
        .collect()
        .await;
    guards.sort_by_key(|(i, _)| *i);
    guards.into_iter().map(|(_, guard)| guard).collect()
}

/// How many of `count` locks' keys exist, in one `EXISTS`.
fn existing(server: &RedisServer, count: usize) -> usize {
    let keys: Vec<String> = (0..count).map(|i| format!("many:{i}")).collect();
    redis::cmd("EXISTS")
        .arg(&keys)
        .query(&mut raw(server))
        .unwrap()
}

/// A client with a 2 s response timeout, batching renewals as by default.
async fn batching_client(server: &RedisServer) -> Client {
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1));
    Client::connect_with(&server.url(), options).await.unwrap()
}

async fn release_all(guards: Vec<MutexGuard>) {
    let outcomes: Vec<_> = futures::stream::iter(guards)
        .map(MutexGuard::release)
        .buffer_unordered(64)
        .collect()
        .await;
    for outcome in outcomes {
        outcome.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_are_renewed_in_batches_and_lost_one_by_one() {
    const LOCKS: usize = 10_000;
    let server = server();
    let client = batching_client(&server).await;
    let guards = hold(&client, LOCKS, 2_000).await;
    let before = client.stats().requests;
    // Past two leases after the last acquisition: without renewals every key would be gone.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let renewals = client.stats().requests - before;
    assert_eq!(existing(&server, LOCKS), LOCKS, "a renewed key expired");
    for guard in &guards {
        assert_eq!(guard.lost_reason(), None, "{}", guard.name());
        assert!(!guard.lease_remaining().is_zero(), "{}", guard.name());
    }
    // Renewed every 667 ms for 4.5 s, one request per lock would be about 60,000.
    assert!(
        renewals < 2_000,
        "{renewals} requests renewed {LOCKS} locks for 4.5 s: not batched"
    );

    // One key deleted by hand: that lock alone is lost at its next renewal.
    let () = redis::cmd("DEL")
        .arg("many:4321")
        .query(&mut raw(&server))
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(4), guards[4321].lost())
        .await
        .expect("the lock whose key was deleted was told");
    assert_eq!(lost, LostReason::Expired);
    // Another renewal period for all: the others of its batches are still held.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(existing(&server, LOCKS), LOCKS - 1);
    for (i, guard) in guards.iter().enumerate() {
        if i != 4321 {
            assert_eq!(guard.lost_reason(), None, "{}", guard.name());
        }
    }
    let mut guards = guards;
    let gone = guards.remove(4321);
    assert!(
        gone.release().await.is_err(),
        "the deleted lock is not held"
    );
    release_all(guards).await;
    assert_eq!(existing(&server, LOCKS), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_loses_every_batched_lock() {
    const LOCKS: usize = 2_000;
    let server = server();
    let client = batching_client(&server).await;
    let guards = hold(&client, LOCKS, 1_500).await;
    let lost: Vec<_> = guards.iter().map(MutexGuard::lost).collect();
    server.pause();
    // Each lease ends on its own deadline, whatever its batch's request does.
    let reasons = tokio::time::timeout(Duration::from_secs(5), join_all(lost)).await;
    server.resume();
    let reasons = reasons.expect("every guard was told within its lease");
    assert!(
        reasons
            .iter()
            .all(|reason| *reason == LostReason::LeaseEnded),
        "{:?}",
        reasons
            .iter()
            .find(|reason| **reason != LostReason::LeaseEnded)
    );
    drop(guards);
}

/// A batch that fails whole (the server paused shorter than the lease: the round trip times
/// out) does not carry its locks' retries with it: each lock retries alone until its renewal
/// succeeds (as `TRYAGAIN` for a migrating slot needs), then renews in batches again; none
/// is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_is_retried_lock_by_lock_then_batched_again() {
    const LOCKS: usize = 300;
    let server = server();
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300));
    let client = Client::connect_with(&server.url(), options).await.unwrap();
    let guards = hold(&client, LOCKS, 6_000).await;
    let before = client.stats().requests;
    server.pause();
    // The first renewals (due 2 s after the grants) meet the paused server: their batch times
    // out; each lock's retry (a quarter of what is left of its lease later) then fails too, or
    // meets the server back.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    server.resume();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let recovering = client.stats().requests - before;
    for guard in &guards {
        assert_eq!(guard.lost_reason(), None, "{}", guard.name());
    }
    assert_eq!(existing(&server, LOCKS), LOCKS);
    // Each lock's retry went alone: at least one request per lock.
    assert!(
        recovering >= LOCKS as u64,
        "{recovering} requests: the retries went in batches"
    );
    // Then in batches again: two renewal periods, far fewer requests than locks.
    let after = client.stats().requests;
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let batched = client.stats().requests - after;
    assert!(
        batched < (LOCKS / 3) as u64,
        "{batched} requests for two periods of {LOCKS} locks: not batched again"
    );
    assert_eq!(existing(&server, LOCKS), LOCKS);
    release_all(guards).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_per_renewal_when_batches_are_of_one() {
    const LOCKS: usize = 50;
    let server = server();
    let options = ClientOptions::default().renewal_batch(1);
    let client = Client::connect_with(&server.url(), options).await.unwrap();
    let guards = hold(&client, LOCKS, 300).await;
    let before = client.stats().requests;
    // Renewed every 100 ms: at least 5 renewals each in 700 ms, each a request.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let renewals = client.stats().requests - before;
    assert_eq!(existing(&server, LOCKS), LOCKS);
    assert!(
        renewals >= (LOCKS * 5) as u64,
        "{renewals} requests: renewals were batched"
    );
    release_all(guards).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_or_retyped_key_loses_its_lock_alone_in_a_batch() {
    const LOCKS: usize = 20;
    let server = server();
    let client = batching_client(&server).await;
    let guards = hold(&client, LOCKS, 600).await;
    // Another owner's token in one key, a hash in another: each is judged alone.
    let () = redis::cmd("SET")
        .arg("many:3")
        .arg("someone-else")
        .arg("PX")
        .arg(60_000)
        .query(&mut raw(&server))
        .unwrap();
    let () = redis::pipe()
        .cmd("DEL")
        .arg("many:7")
        .ignore()
        .cmd("HSET")
        .arg("many:7")
        .arg("field")
        .arg("value")
        .ignore()
        .query(&mut raw(&server))
        .unwrap();
    for i in [3, 7] {
        let lost = tokio::time::timeout(Duration::from_secs(2), guards[i].lost())
            .await
            .expect("the lock whose key changed was told");
        assert_eq!(lost, LostReason::Taken, "many:{i}");
    }
    // Two more renewal periods: the others are still held.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut kept = Vec::new();
    for (i, guard) in guards.into_iter().enumerate() {
        if i == 3 || i == 7 {
            assert!(guard.release().await.is_err(), "many:{i} is not held");
        } else {
            assert_eq!(guard.lost_reason(), None, "many:{i}");
            kept.push(guard);
        }
    }
    release_all(kept).await;
    assert_eq!(
        existing(&server, LOCKS),
        2,
        "only the foreign keys are left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_locks_of_one_slot_are_renewed_together() {
    let cluster = test_support::RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let client = Client::connect_cluster(&seeds, ClientOptions::default())
        .await
        .unwrap();
    // 300 locks in three slots (hash tags), and 50 locks each in a slot of its own.
    let names: Vec<String> = (0..300)
        .map(|i| format!("{{tag{}}}:lock:{i}", i % 3))
        .chain((0..50).map(|i| format!("alone:{i}")))
        .collect();
    let mut guards = Vec::with_capacity(names.len());
    for name in &names {
        let mutex = client.mutex_with(name, renewed(600)).unwrap();
        guards.push(mutex.lock().await.unwrap());
    }
    let before = client.stats().requests;
    // Two and a half leases: every lock is renewed about seven times.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let requests = client.stats().requests - before;
    for guard in &guards {
        assert_eq!(guard.lost_reason(), None, "{}", guard.name());
        assert!(!guard.lease_remaining().is_zero(), "{}", guard.name());
    }
    // One request per renewal would be about 2,600; the tagged locks go a slot at a time.
    assert!(requests < 1_000, "{requests} requests: not batched by slot");
    release_all(guards).await;
}
