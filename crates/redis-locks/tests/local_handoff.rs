//! A waiter queued behind a guard of its own process asks Redis nothing while that guard
//! holds: the guard marked its key when it was granted, so its release wakes the waiter.

mod common;

use std::time::Duration;

use common::{client, eventually, raw, server, slow_polling, subscribers};
use redis::Commands;
use redis_locks::{Client, Mutex, MutexGuard, Result};
use test_support::RedisServer;
use tokio::task::JoinHandle;

/// Three callers of `mutex` in this process: the first holds; the second waits (listening,
/// its refused attempt marked the lock); the third queues behind the second, with a wait
/// budget of `third_waits` (`None`: as long as it takes). Then the first releases. Returns
/// the second's guard — granted with the third behind it — and the third's pending call,
/// with the requests sent since just before the release.
async fn second_holds_with_third_queued(
    server: &RedisServer,
    client: &Client,
    mutex: &Mutex,
    third_waits: Option<Duration>,
) -> (MutexGuard, JoinHandle<Result<MutexGuard>>, u64) {
    let first = mutex.lock().await.unwrap();
    second_holds_after(server, client, mutex, first, third_waits).await
}

/// As [`second_holds_with_third_queued`], with `first` holding the lock (a guard of this or
/// another client).
async fn second_holds_after(
    server: &RedisServer,
    client: &Client,
    mutex: &Mutex,
    first: MutexGuard,
    third_waits: Option<Duration>,
) -> (MutexGuard, JoinHandle<Result<MutexGuard>>, u64) {
    let lock = |budget: Option<Duration>| {
        let mutex = mutex.clone();
        tokio::spawn(async move {
            match budget {
                Some(budget) => mutex.lock_timeout(budget).await,
                None => mutex.lock().await,
            }
        })
    };
    let second = lock(None);
    let (name, channel) = (mutex.name(), mutex.keys().wake_channel());
    assert!(
        eventually(Duration::from_secs(5), || async {
            let value: String = raw(server).get(name).unwrap();
            subscribers(server, channel) == 1 && value.ends_with("+w")
        })
        .await,
        "the second waiter listens, and its refused attempt marked the lock"
    );
    let third = lock(third_waits);
    // One turn of this single-threaded runtime: the third waiter queues behind the second.
    tokio::task::yield_now().await;
    let before = client.stats().requests;
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the second waiter was woken")
        .unwrap()
        .unwrap();
    (second, third, before)
}

#[tokio::test]
async fn a_waiter_behind_a_local_holder_asks_redis_nothing_until_the_release() {
    let server = server();
    let client = client(&server).await;
    // Polling this slowly (and re-checking a live subscription every 2 s) could not pass.
    let mutex = client
        .mutex_with("relay", slow_polling(Duration::from_secs(30)))
        .unwrap();
    let (second, third, before) =
        second_holds_with_third_queued(&server, &client, &mutex, None).await;
    // Granted with the third waiter queued behind it: its key is marked already.
    let value: String = raw(&server).get("relay").unwrap();
    assert_eq!(value, format!("{}+w", second.owner_token().as_str()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The release handed the lock to this process's line: the second holds it without
    // asking, and its lease's extension is not due before a third of the handed lease.
    assert_eq!(
        client.stats().requests - before,
        1,
        "beyond the release, the third waiter asked Redis while a local guard held the lock"
    );
    assert!(!third.is_finished());
    let second_token = second.fencing_token();
    second.release().await.unwrap();
    // Woken by the release, long before a 2 s re-check or a 20 s poll would come.
    let third = tokio::time::timeout(Duration::from_millis(1_500), third)
        .await
        .expect("the third waiter was woken by the release")
        .unwrap()
        .unwrap();
    assert!(third.fencing_token() > second_token);
    // Then the release, the third waiter's one attempt, and its unsubscription.
    let sent = client.stats().requests - before;
    assert!(sent <= 5, "{sent} requests for two handoffs");
    third.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_behind_a_local_holder_still_ends_on_time_and_asks_redis_once() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("beside").unwrap();
    // The third waiter has 300 ms: it becomes first in line behind the second (a local
    // holder), so it sleeps without asking Redis, and when its time is up it asks once.
    let budget = Duration::from_millis(300);
    let (second, third, _) =
        second_holds_with_third_queued(&server, &client, &mutex, Some(budget)).await;
    let before = client.stats().requests;
    let err = tokio::time::timeout(Duration::from_secs(2), third)
        .await
        .expect("the wait ended while the local holder still held the lock")
        .unwrap()
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    // What is left of the holder's lease: the one handed to it (it ends with the line's
    // place lease, 2 s) or, once extended, the full 30 s.
    assert!(
        err.retry_after().unwrap() > Duration::from_secs(1),
        "the holder's lease: {err:?}"
    );
    // Its one attempt, and leaving the line as the last waiter of this process.
    let sent = client.stats().requests - before;
    assert!((1..=2).contains(&sent), "{sent} requests");

    // A zero budget with a waiter of this process queued (its turn is taken): one attempt.
    let fourth = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    // It waits in line (the process's place in the lock's queue) with the turn taken.
    assert!(
        eventually(Duration::from_secs(5), || async {
            let queued: i64 = redis::cmd("ZCARD")
                .arg("{beside}:queue")
                .query(&mut raw(&server))
                .unwrap();
            subscribers(&server, "{beside}:wake") == 1 && queued == 1
        })
        .await
    );
    let before = client.stats().requests;
    let err = mutex.lock_timeout(Duration::ZERO).await.unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.retry_after().unwrap() > Duration::from_secs(1));
    assert_eq!(client.stats().requests - before, 1, "exactly one attempt");
    second.release().await.unwrap();
    let fourth = tokio::time::timeout(Duration::from_secs(5), fourth)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    fourth.release().await.unwrap();
}

/// Whether `lock`'s queue holds `count` places within a second (well before a waiter that
/// sleeps re-checks its live subscription, every 2 s).
async fn line_is(server: &RedisServer, lock: &str, count: i64) -> bool {
    eventually(Duration::from_secs(1), || async {
        let queued: i64 = redis::cmd("ZCARD")
            .arg(format!("{{{lock}}}:queue"))
            .query(&mut raw(server))
            .unwrap();
        queued == count
    })
    .await
}

#[tokio::test]
async fn a_waiter_behind_a_local_holder_gets_in_line_when_the_lock_goes_to_another_process() {
    let server = server();
    let before_us = client(&server).await;
    let ours = client(&server).await;
    let theirs = client(&server).await;
    // Place leases of 30 s and a 20 s poll: a waiter that slept until it renews its place or
    // polls would not get in line within the test's bounds.
    let options = slow_polling(Duration::from_secs(30)).place_lease(Duration::from_secs(30));
    let mutex = ours.mutex_with("across", options.clone()).unwrap();
    // Another client holds; this client's second waiter gets in line and the third queues
    // behind it; the release hands the lock to the second, a local holder.
    let held = before_us.mutex_with("across", options.clone()).unwrap();
    let first = held.lock().await.unwrap();
    let (second, third, _) = second_holds_after(&server, &ours, &mutex, first, None).await;
    // Another process waits in line while the second holds.
    let waiting = tokio::spawn({
        let mutex = theirs.mutex_with("across", options).unwrap();
        async move { mutex.lock().await }
    });
    assert!(
        line_is(&server, "across", 1).await,
        "the other process is in line"
    );
    // The release hands the lock to the other process: its message goes to that client only.
    second.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("handed to the other process")
        .unwrap()
        .unwrap();
    // The third waiter was woken by its own process and got in line behind it.
    assert!(
        line_is(&server, "across", 1).await,
        "the third waiter got in line"
    );
    assert!(!third.is_finished());
    taken.release().await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the third waiter was handed the lock")
        .unwrap()
        .unwrap();
    third.release().await.unwrap();
}
