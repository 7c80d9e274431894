//! The Mutex API against a real server: acquire, wait, extend, release, queries, drop.

mod common;

use std::time::Duration;

use common::{assert_not_held, client, eventually, exists, pttl, server};
use redis_locks::{Error, LockOptions, LostReason};
use tokio::time::Instant;

fn lease(ms: u64) -> LockOptions {
    LockOptions::default().lease(Duration::from_millis(ms))
}

#[tokio::test]
async fn try_lock_on_a_held_lock_says_how_long_the_lease_still_runs() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("held", lease(10_000)).unwrap();
    let guard = mutex.try_lock().await.unwrap();
    let err = mutex.try_lock().await.unwrap_err();
    assert!(err.is_held(), "{err}");
    let retry_after = err.retry_after().expect("a lease");
    assert!(
        retry_after > Duration::from_secs(9) && retry_after <= Duration::from_secs(10),
        "{retry_after:?}"
    );
    guard.release().await.unwrap();
    assert!(!exists(&server, "held"));
}

#[tokio::test]
async fn lock_waits_for_the_release_and_tokens_increase() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("queue").unwrap();
    let first = mutex.lock().await.unwrap();
    let first_token = first.fencing_token();
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    // The waiter is blocked while the lock is held.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    first.release().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("waiter got the lock after release")
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > first_token);
    second.release().await.unwrap();
}

#[tokio::test]
async fn lock_timeout_gives_up_with_the_holders_lease() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("busy", lease(20_000)).unwrap();
    let _guard = mutex.lock().await.unwrap();
    let started = Instant::now();
    let err = mutex
        .lock_timeout(Duration::from_millis(150))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    match &err {
        Error::WaitTimeout {
            waited: reported,
            retry_after,
            ..
        } => {
            assert!(*reported >= Duration::from_millis(150), "{reported:?}");
            assert!(retry_after.unwrap() > Duration::from_secs(19));
        }
        other => panic!("expected WaitTimeout, got {other}"),
    }
    assert!(waited < Duration::from_secs(5), "bounded: {waited:?}");
}

#[tokio::test]
async fn lock_timeout_zero_tries_exactly_once() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("once").unwrap();
    let guard = mutex.lock_timeout(Duration::ZERO).await.unwrap();
    let before = client.stats().requests;
    let err = mutex.lock_timeout(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert_eq!(client.stats().requests - before, 1, "one attempt");
    assert!(err.retry_after().unwrap() > Duration::from_secs(20));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_waiter_gets_an_abandoned_lock_when_its_lease_ends_not_before() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("abandoned", lease(400)).unwrap();
    let abandoned = mutex.lock().await.unwrap();
    let holder_deadline = abandoned.lease_deadline();
    // Forget the guard without releasing: as if the holder crashed.
    std::mem::forget(abandoned);
    let started = Instant::now();
    let guard = mutex.lock_timeout(Duration::from_secs(5)).await.unwrap();
    assert!(
        Instant::now() >= holder_deadline,
        "acquired before the first lease could have ended"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_lease_is_measured_from_the_request_and_extend_renews_it() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("lease", lease(2_000)).unwrap();
    let before = Instant::now();
    let guard = mutex.lock().await.unwrap();
    let after = Instant::now();
    // Deadline = sent_at + lease - (1% + 2 ms): between these bounds.
    assert!(guard.lease_deadline() >= before + Duration::from_millis(1_978));
    assert!(guard.lease_deadline() <= after + Duration::from_millis(1_978));
    assert!(pttl(&server, "lease") <= 2_000);

    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(guard.lease_remaining() > Duration::from_secs(58));
    assert!(pttl(&server, "lease") > 59_000);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("stale", lease(100)).unwrap();
    let stale = mutex.lock().await.unwrap();
    // Wait for the key to expire (a condition on the server, not a fixed sleep).
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "stale")
        })
        .await
    );
    assert_eq!(stale.lease_remaining(), Duration::ZERO);

    let fresh = client
        .mutex_with("stale", lease(30_000))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert_not_held(
        stale.extend(Duration::from_secs(60)).await,
        LostReason::Taken,
    );
    assert_not_held(stale.release().await, LostReason::Taken);
    // The new holder's lock is intact: its own release succeeds.
    assert!(pttl(&server, "stale") > 25_000, "extend did not touch it");
    fresh.release().await.unwrap();
}

#[tokio::test]
async fn release_after_expiry_says_the_lock_is_gone() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("gone", lease(50))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "gone")
        })
        .await
    );
    assert_not_held(guard.release().await, LostReason::Expired);
}

#[tokio::test]
async fn state_reports_holder_lease_waiters_and_counter() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("state", lease(10_000)).unwrap();
    let free = mutex.state().await.unwrap();
    assert!(free.holder.is_none());
    assert_eq!(free.fencing_counter, None);
    assert!(!mutex.is_locked().await.unwrap());

    let guard = mutex.lock().await.unwrap();
    let held = mutex.state().await.unwrap();
    let holder = held.holder.clone().unwrap();
    assert_eq!(holder.owner, guard.owner_token().as_str());
    assert!(holder.lease_remaining.unwrap() > Duration::from_secs(9));
    assert!(!holder.waited_for);
    assert_eq!(held.fencing_counter, Some(guard.fencing_token()));
    assert!(mutex.is_locked().await.unwrap());

    // A waiter that gives up: its attempts leave the mark, and the holder is unchanged.
    let err = mutex
        .lock_timeout(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    let waited = mutex.state().await.unwrap();
    let holder = waited.holder.unwrap();
    assert_eq!(holder.owner, guard.owner_token().as_str());
    assert!(holder.waited_for);
    let counter = waited.fencing_counter.unwrap();
    assert!(
        counter > guard.fencing_token(),
        "the refused fast attempt took a token"
    );

    guard.release().await.unwrap();
    let after = mutex.state().await.unwrap();
    assert!(after.holder.is_none());
    assert_eq!(
        after.fencing_counter,
        Some(counter),
        "the counter outlives the lock"
    );
    let next = mutex.lock().await.unwrap();
    assert!(next.fencing_token() > counter);
    next.release().await.unwrap();
}

#[tokio::test]
async fn dropping_a_guard_releases_in_the_background() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex_with("dropped", lease(60_000)).unwrap();
    let guard = mutex.lock().await.unwrap();
    drop(guard);
    // Long before the 60 s lease: the background release ran.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "dropped")
        })
        .await
    );
    mutex.try_lock().await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn companion_keys_follow_hash_tags() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex("{tenant-9}:cart")
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(exists(&server, "{tenant-9}:cart"));
    assert!(exists(&server, "{tenant-9}:cart:fence"));
    guard.release().await.unwrap();
}
