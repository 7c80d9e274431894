//! Cancelling `lock()` at random points leaves no stale ownership and touches nobody else's
//! lock: a grant the caller never saw is released by owner token in the background.

mod common;

use std::time::Duration;

use common::{client, eventually, exists, server};
use rand::Rng;
use redis_locks::LockOptions;

/// Polls `future` until it finishes or `yields` scheduler turns have passed, then drops it.
async fn run_for_yields<F: std::future::Future>(future: F, yields: usize) -> Option<F::Output> {
    tokio::select! {
        biased;
        out = future => Some(out),
        () = async { for _ in 0..yields { tokio::task::yield_now().await } } => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_calls_on_a_free_lock_leave_no_key_behind() {
    let server = server();
    let client = client(&server).await;
    // A long lease: a leaked grant would keep the key for a minute, far past every wait below.
    let mutex = client
        .mutex_with(
            "cancel",
            LockOptions::default().lease(Duration::from_secs(60)),
        )
        .unwrap();
    let mut rng = rand::rng();
    let (mut completed, mut cancelled) = (0u64, 0u64);
    let counter = || async {
        mutex
            .state()
            .await
            .unwrap()
            .fencing_counter
            .map(|t| t.get())
    };
    let first = mutex.lock().await.unwrap();
    let start_token = first.fencing_token().get();
    first.release().await.unwrap();
    for _ in 0..300 {
        let attempt = mutex.lock();
        let outcome = if rng.random_bool(0.5) {
            run_for_yields(attempt, rng.random_range(0..8)).await
        } else {
            let micros = rng.random_range(0..1500);
            tokio::time::timeout(Duration::from_micros(micros), attempt)
                .await
                .ok()
        };
        match outcome {
            Some(guard) => {
                completed += 1;
                guard.unwrap().release().await.unwrap();
            }
            None => cancelled += 1,
        }
        // Whatever happened, the key is gone long before its 60 s lease.
        assert!(
            eventually(Duration::from_secs(3), || async {
                !exists(&server, "cancel")
            })
            .await,
            "a cancelled lock() left the key behind"
        );
    }
    // Every grant advanced the counter, and no attempt here found the lock held (each starts
    // after the key is gone), so the counter counts grants; those the caller never saw were
    // cancelled in flight.
    let grants = counter().await.unwrap() - start_token;
    let granted_unseen = grants - completed;
    eprintln!(
        "completed {completed}, cancelled {cancelled}, of which granted unseen {granted_unseen}"
    );
    assert!(cancelled > 0 && completed > 0, "both paths were exercised");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_calls_never_release_the_real_holders_lock() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default()
        .lease(Duration::from_secs(60))
        .retry_delay(Duration::from_millis(1));
    let mutex = client.mutex_with("held", options).unwrap();
    let holder = mutex.lock().await.unwrap();
    let mut rng = rand::rng();
    for _ in 0..200 {
        let micros = rng.random_range(0..3000);
        let outcome = tokio::time::timeout(Duration::from_micros(micros), mutex.lock()).await;
        assert!(outcome.is_err(), "nobody else can get a held lock");
    }
    // Give every background release time to land, then check the holder still owns it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let state = mutex.state().await.unwrap();
    assert_eq!(
        state.holder.map(|h| h.owner),
        Some(holder.owner_token().as_str().to_string())
    );
    holder
        .release()
        .await
        .expect("the holder's lock was intact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_never_reached_the_caller_is_released_in_the_background() {
    let server = server();
    let client = client(&server).await;
    let mutex = client
        .mutex_with(
            "unseen",
            LockOptions::default().lease(Duration::from_secs(60)),
        )
        .unwrap();
    // Load the scripts first, so the frozen request below is the acquire itself.
    mutex.lock().await.unwrap().release().await.unwrap();
    let before = mutex.state().await.unwrap().fencing_counter.unwrap();
    // Freeze the server, send the acquire, and give up on it while it is in flight.
    server.pause();
    let attempt = tokio::time::timeout(Duration::from_millis(200), mutex.lock()).await;
    assert!(attempt.is_err(), "no reply from a paused server");
    server.resume();
    // The server now runs the acquire, then the background release sent after it.
    assert!(
        eventually(Duration::from_secs(3), || async {
            !exists(&server, "unseen")
        })
        .await,
        "the unseen grant was not released"
    );
    let after = mutex.state().await.unwrap().fencing_counter.unwrap();
    assert!(after.get() > before.get(), "the frozen acquire was granted");
    mutex.try_lock().await.unwrap().release().await.unwrap();
}
