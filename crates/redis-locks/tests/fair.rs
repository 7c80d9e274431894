//! FairMutex: first come, first served across waiters; dead waiters are skipped; no barging.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{child_main, client, eventually, record_hold, server};
use redis_locks::{Client, Error, FairMutex, LockOptions};
use test_support::ChildProcess;
use test_support::history::History;
use tokio::time::Instant;

fn options(place_ms: u64) -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_secs(30))
        .place_lease(Duration::from_millis(place_ms))
}

async fn wait_for_queue(lock: &FairMutex, len: u64) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            lock.waiting().await.unwrap() == len
        })
        .await,
        "queue never reached {len}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_in_the_order_they_queued() {
    let server = server();
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(client(&server).await); // separate connections, as separate processes
    }
    let lock = clients[0].fair_mutex_with("fifo", options(2_000)).unwrap();
    let holder = lock.lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, client) in clients.iter().enumerate().skip(1) {
        let (lock, order) = (
            client.fair_mutex_with("fifo", options(2_000)).unwrap(),
            order.clone(),
        );
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push((i, guard.fencing_token()));
            guard.release().await.unwrap();
        }));
        wait_for_queue(&lock_of(&clients[0]), i as u64).await;
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, [1, 2, 3, 4]);
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens increase: {order:?}"
    );
}

fn lock_of(client: &Client) -> FairMutex {
    client.fair_mutex_with("fifo", options(2_000)).unwrap()
}

#[tokio::test]
async fn try_lock_does_not_barge_past_waiters() {
    let server = server();
    let client = client(&server).await;
    let lock = client.fair_mutex_with("barge", options(2_000)).unwrap();
    let holder = lock.lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    wait_for_queue(&lock, 1).await;
    let err = lock.try_lock().await.unwrap_err();
    assert!(err.is_held());
    holder.release().await.unwrap();
    // Right after the release, the lock belongs to the waiter: try_lock still loses.
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(lock.try_lock().await.unwrap_err().is_held());
    guard.release().await.unwrap();
    assert_eq!(lock.waiting().await.unwrap(), 0);
    lock.try_lock().await.unwrap().release().await.unwrap();
}

#[test]
#[ignore = "runs only as a child process of a_waiter_that_dies_in_the_queue_is_skipped"]
fn queued_waiter_child() {
    child_main(|client| async move {
        let lock = client.fair_mutex_with("dies", options(300)).unwrap();
        println!("queueing");
        let _guard = lock.lock().await.unwrap();
        println!("acquired");
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_dies_in_the_queue_is_skipped() {
    let server = server();
    let client = client(&server).await;
    let lock = client.fair_mutex_with("dies", options(300)).unwrap();
    let holder = lock.lock().await.unwrap();
    let mut child =
        ChildProcess::spawn_test("queued_waiter_child", &[("CHILD_REDIS_URL", &server.url())])
            .unwrap();
    child
        .wait_for_line("queueing", Duration::from_secs(30))
        .unwrap();
    wait_for_queue(&lock, 1).await;
    // A second waiter, behind the child.
    let second = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.map(|guard| (Instant::now(), guard)) }
    });
    wait_for_queue(&lock, 2).await;
    child.kill_hard();
    let killed_at = Instant::now();
    holder.release().await.unwrap();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .expect("the dead waiter was skipped")
        .unwrap()
        .unwrap();
    // The dead head held up the queue for at most its place lease (300 ms) plus a renewal step.
    let waited = acquired_at - killed_at;
    assert!(waited < Duration::from_millis(1_500), "{waited:?}");
    assert_eq!(lock.waiting().await.unwrap(), 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_times_out_or_is_cancelled_leaves_the_queue() {
    let server = server();
    let client = client(&server).await;
    let lock = client.fair_mutex_with("leave", options(5_000)).unwrap();
    let holder = lock.lock().await.unwrap();
    let err = lock
        .lock_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert_eq!(
        lock.waiting().await.unwrap(),
        0,
        "a timed-out waiter gave up its place"
    );

    let cancelled = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    wait_for_queue(&lock, 1).await;
    cancelled.abort();
    // Its place lease is 5 s: leaving within 2 s proves the background give-up.
    assert!(
        eventually(Duration::from_secs(2), || async {
            lock.waiting().await.unwrap() == 0
        })
        .await
    );
    holder.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mutual_exclusion_under_contention() {
    let server = server();
    let history = Arc::new(History::default());
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let client = client(&server).await;
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            let lock = client.fair_mutex_with("contended", options(2_000)).unwrap();
            for _ in 0..60 {
                record_hold(lock.lock().await.unwrap(), &format!("w{worker}"), &history).await;
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .unwrap()
            .unwrap();
    }
    let report = history.check();
    assert_eq!(report.acquisitions, 480);
    assert!(
        report.is_ok(),
        "{report}: {:?} {:?}",
        report.overlaps,
        report.token_regressions
    );
}
