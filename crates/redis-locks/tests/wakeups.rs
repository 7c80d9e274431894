//! Waiters are woken by the release, not by polling: a release hands over at once, a crashed
//! holder's lease end is noticed at once, and a lost subscriber connection is survived.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{child_main, client, eventually, pttl, raw, server, slow_polling, subscribers};
use redis_locks::{LockOptions, Mutex, MutexGuard};
use test_support::ChildProcess;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Spawns `mutex.lock()` and returns once the waiter listens on the lock's wake channel (a
/// condition, not a sleep); the task yields when it got the lock, and the instant it did.
async fn spawn_subscribed_waiter(
    server: &test_support::RedisServer,
    mutex: &Mutex,
) -> JoinHandle<redis_locks::Result<(Instant, MutexGuard)>> {
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await.map(|guard| (Instant::now(), guard)) }
    });
    let channel = mutex.keys().wake_channel().to_string();
    assert!(
        eventually(Duration::from_secs(5), || async {
            subscribers(server, &channel) == 1
        })
        .await,
        "the waiter subscribed"
    );
    waiter
}

/// `CLIENT KILL TYPE pubsub`: how many subscriber connections were cut.
fn kill_subscriber_connections(server: &test_support::RedisServer) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut raw(server))
        .unwrap()
}

#[tokio::test]
async fn a_release_wakes_a_waiter_without_any_retry_delay() {
    let server = server();
    let client = client(&server).await;
    let mutex = client
        .mutex_with("handoff", slow_polling(Duration::from_secs(30)))
        .unwrap();
    let holder = mutex.lock().await.unwrap();
    let waiter = spawn_subscribed_waiter(&server, &mutex).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was woken")
        .unwrap()
        .unwrap();
    // The lease had 30 s to run and polling would wait 10-30 s: a wake-up did it.
    let handoff = acquired_at - released_at;
    assert!(handoff < Duration::from_secs(1), "handoff took {handoff:?}");
    guard.release().await.unwrap();
    // The last waiter gone, the subscription is dropped.
    assert!(
        eventually(Duration::from_secs(5), || async {
            subscribers(&server, "{handoff}:wake") == 0
        })
        .await
    );
}

#[test]
#[ignore = "runs only as a child process of a_crashed_holders_waiter_gets_the_lock_when_the_lease_ends"]
fn crashing_holder_child() {
    child_main(|client| async move {
        let mutex = client
            .mutex_with(
                "crash",
                LockOptions::default().lease(Duration::from_millis(1500)),
            )
            .unwrap();
        let guard = mutex.lock().await.unwrap();
        println!("acquired {}", guard.fencing_token());
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

#[tokio::test]
async fn a_crashed_holders_waiter_gets_the_lock_when_the_lease_ends() {
    let server = server();
    let mut child = ChildProcess::spawn_test(
        "crashing_holder_child",
        &[("CHILD_REDIS_URL", &server.url())],
    )
    .unwrap();
    child
        .wait_for_line("acquired", Duration::from_secs(30))
        .expect("child holds the lock");
    let client = client(&server).await;
    let mutex = client
        .mutex_with("crash", slow_polling(Duration::from_secs(5)))
        .unwrap();
    let waiter = spawn_subscribed_waiter(&server, &mutex).await;
    child.kill_hard();
    let remaining = Duration::from_millis(pttl(&server, "crash").try_into().expect("a lease"));
    let killed_at = Instant::now();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    let waited = acquired_at - killed_at;
    assert!(
        waited + Duration::from_millis(5) >= remaining,
        "{waited:?} < lease {remaining:?}"
    );
    // Polling every ~20 s would come far later: the waiter slept exactly until the lease end.
    assert!(
        waited < remaining + Duration::from_millis(500),
        "{waited:?}, lease {remaining:?}"
    );
    guard.release().await.unwrap();
}

/// How many channels matching `pattern` have a subscriber.
fn channels(server: &test_support::RedisServer, pattern: &str) -> usize {
    let names: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(pattern)
        .query(&mut common::raw(server))
        .unwrap();
    names.len()
}

#[tokio::test]
async fn waiters_survive_a_killed_subscriber_connection() {
    let server = server();
    let client = client(&server).await;
    // Polling every ~50 ms covers the gap while the subscription is restored.
    let options = LockOptions::default()
        .lease(Duration::from_secs(30))
        .retry_delay(Duration::from_millis(50));
    let mutex = client.mutex_with("killed", options).unwrap();
    let holder = mutex.lock().await.unwrap();
    let waiter = spawn_subscribed_waiter(&server, &mutex).await;
    assert_eq!(kill_subscriber_connections(&server), 1);
    // The subscription comes back by itself: the lock's wake channel and the client's own.
    assert!(
        eventually(Duration::from_secs(5), || async {
            subscribers(&server, "{killed}:wake") == 1 && channels(&server, "{killed}:wake*") == 2
        })
        .await
    );
    holder.release().await.unwrap();
    let (_, guard) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter still got the lock")
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_release_during_the_subscriber_outage_is_not_missed() {
    let server = server();
    let client = client(&server).await;
    let mutex = client
        .mutex_with("outage", slow_polling(Duration::from_secs(30)))
        .unwrap();
    let holder = mutex.lock().await.unwrap();
    let waiter = spawn_subscribed_waiter(&server, &mutex).await;
    // Kill the subscriber and release at once: the wake-up is published to nobody.
    kill_subscriber_connections(&server);
    holder.release().await.unwrap();
    // The reconnect wakes every waiter to look again, so the lock is taken without polling.
    let (_, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter looked again after the reconnect")
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_take_turns_and_only_one_talks_to_redis() {
    let server = server();
    let client = client(&server).await;
    let mutex = client
        .mutex_with("herd", slow_polling(Duration::from_secs(10)))
        .unwrap();
    let holder = mutex.lock().await.unwrap();
    let before = client.stats().requests;
    let order = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let (mutex, order) = (mutex.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            let position = order.fetch_add(1, Ordering::SeqCst);
            guard.release().await.unwrap();
            (i, position)
        }));
        // Queue them in a known order.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 8 waiters sit out a 300 ms hold: a herd polling every few ms would send hundreds.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(holder); // released in the background
    let mut positions = Vec::new();
    for waiter in waiters {
        positions.push(
            tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    let sent = client.stats().requests - before;
    assert!(
        positions.iter().all(|(i, position)| i == position),
        "FIFO inside the process: {positions:?}"
    );
    // Per waiter: one grant and one release, and at most one refused attempt (the first
    // waiter's, and any that looks just as the guard before it lets go); plus one
    // subscription, one unsubscription and the holder's release.
    assert!(sent <= 8 * 3 + 3, "{sent} requests for 8 waiters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_cancelled_at_random_points_leave_no_subscription_behind() {
    use rand::Rng;
    let server = server();
    let client = client(&server).await;
    let mutex = client
        .mutex_with("abandoned-waits", slow_polling(Duration::from_secs(30)))
        .unwrap();
    let holder = mutex.lock().await.unwrap();
    for _ in 0..40 {
        let waiter = tokio::spawn({
            let mutex = mutex.clone();
            async move { mutex.lock().await }
        });
        let micros = rand::rng().random_range(0..3_000);
        tokio::time::sleep(Duration::from_micros(micros)).await;
        waiter.abort();
        let _ = waiter.await;
    }
    // Every reference was given back: the channel is unsubscribed, and so is the client's
    // own channel of the lock.
    assert!(
        eventually(Duration::from_secs(5), || async {
            channels(&server, "{abandoned-waits}:wake*") == 0
        })
        .await,
        "a cancelled waiter kept the subscription"
    );
    holder.release().await.unwrap();
}
