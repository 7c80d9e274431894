//! Leases that renew themselves and say when they are lost; fencing end to end.

mod common;

use std::time::Duration;

use common::{assert_not_held, child_main, client, eventually, exists, pttl, renewed, server};
use redis_locks::{Error, FencingToken, LockOptions, LostReason};
use test_support::ChildProcess;
use tokio::time::Instant;

/// How much sooner than the deadline `lost()` may fire: one tick of Tokio's timer (the lease
/// core sets it that much sooner, so that it never fires after the deadline).
const TIMER_TICK: Duration = Duration::from_millis(1);

#[test]
#[ignore = "runs only as a child process of the watchdog test"]
fn competitor_child() {
    child_main(|client| async move {
        let mutex = client.mutex("renewed").unwrap();
        println!("trying");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match mutex.try_lock().await {
                Ok(guard) => {
                    println!("got {}", guard.fencing_token());
                    guard.release().await.unwrap();
                    return;
                }
                Err(err) if err.is_held() => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(err) => panic!("{err}"),
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_short_lease_while_another_process_keeps_trying() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("renewed", renewed(500))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(guard.is_renewed());
    let mut competitor =
        ChildProcess::spawn_test("competitor_child", &[("CHILD_REDIS_URL", &server.url())])
            .unwrap();
    tokio::task::block_in_place(|| competitor.wait_for_line("trying", Duration::from_secs(30)))
        .expect("competitor started");
    // Ten leases long, the competitor trying every 20 ms: it must never get the lock.
    let got =
        tokio::task::block_in_place(|| competitor.wait_for_line("got", Duration::from_secs(5)));
    assert_eq!(got, None, "the competitor took a lock the watchdog kept");
    assert!(guard.lost_reason().is_none());
    assert!(
        pttl(&server, "renewed") <= 500,
        "renewed with the same short lease"
    );
    let token = guard.fencing_token();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let got =
        tokio::task::block_in_place(|| competitor.wait_for_line("got", Duration::from_secs(5)))
            .expect("the competitor got the lock after the release");
    // Its next try (every 20 ms) wins: well inside a second.
    assert!(
        released_at.elapsed() < Duration::from_secs(1),
        "{:?}",
        released_at.elapsed()
    );
    let their_token: u64 = got["got ".len()..].parse().unwrap();
    assert!(their_token > token.get());
}

#[tokio::test]
async fn no_renewal_is_sent_after_release() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("quiet", renewed(90))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Let a few renewals happen (every 30 ms), then release.
    let first = guard.lease_deadline();
    assert!(
        eventually(Duration::from_secs(5), || async {
            guard.lease_deadline() > first
        })
        .await
    );
    guard.release().await.unwrap();
    let after_release = client.stats().requests;
    // Five renewal periods later: no request was sent, and the key is still gone.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        client.stats().requests,
        after_release,
        "a renewal was sent after release"
    );
    assert!(!exists(&server, "quiet"));
}

#[tokio::test]
async fn dropping_a_renewed_guard_stops_the_watchdog_and_releases() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("dropped", renewed(90))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lost = guard.lost();
    drop(guard);
    assert_eq!(lost.await, LostReason::Released);
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "dropped")
        })
        .await
    );
    let after = client.stats().requests;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        client.stats().requests,
        after,
        "the watchdog stopped with the guard"
    );
}

#[tokio::test]
async fn without_a_watchdog_lost_resolves_at_the_lease_deadline() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default().lease(Duration::from_millis(300));
    let guard = client
        .mutex_with("plain", options)
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(!guard.is_renewed());
    let deadline = guard.lease_deadline();
    let reason = guard.lost().await;
    assert_eq!(reason, LostReason::LeaseEnded);
    // At the deadline, less at most one timer tick (the timer is set a tick sooner, so that
    // it never fires after it).
    assert!(Instant::now() + TIMER_TICK >= deadline);
    assert!(Instant::now() < deadline + Duration::from_millis(100));
    assert_eq!(guard.lost_reason(), Some(LostReason::LeaseEnded));
}

#[tokio::test]
async fn the_renewal_cap_lets_the_lease_run_out_and_says_so() {
    let server = server();
    let client = client(&server).await;
    let options = renewed(150).max_renewals(2);
    let guard = client
        .mutex_with("capped", options)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let started = Instant::now();
    let before = client.stats().requests;
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease ran out after the cap");
    assert_eq!(lost, LostReason::RenewalCapReached);
    assert_eq!(client.stats().requests - before, 2, "exactly two renewals");
    // Two renewals at 50 ms and 100 ms, then the last 150 ms lease: about 250 ms in all.
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            !exists(&server, "capped")
        })
        .await
    );
}

#[tokio::test]
async fn lost_fires_at_once_when_a_renewal_finds_the_lock_taken() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("stolen", renewed(300))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Somebody deletes the key by hand and another holder takes it.
    redis::cmd("DEL")
        .arg("stolen")
        .exec(&mut common::raw(&server))
        .unwrap();
    let thief = client
        .mutex_with(
            "stolen",
            LockOptions::default().lease(Duration::from_secs(30)),
        )
        .unwrap()
        .lock()
        .await
        .unwrap();
    let started = Instant::now();
    assert_eq!(guard.lost().await, LostReason::Taken);
    // The next renewal (every 100 ms) finds it: not the 300 ms lease end.
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_not_held(guard.release().await, LostReason::Taken);
    thief.release().await.unwrap();
}

#[tokio::test]
async fn lost_fires_by_the_lease_deadline_when_the_server_dies() {
    let mut server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("doomed", renewed(600))
        .unwrap()
        .lock()
        .await
        .unwrap();
    server.kill();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolved");
    assert_eq!(reason, LostReason::LeaseEnded);
    let now = Instant::now();
    let deadline = guard.lease_deadline();
    assert!(
        now + TIMER_TICK >= deadline,
        "not before the deadline, less a timer tick"
    );
    assert!(
        now < deadline + Duration::from_millis(100),
        "{:?} late",
        now - deadline
    );
}

#[test]
#[ignore = "runs only as a child process of a_paused_holder_cannot_overwrite_the_next_holders_write"]
fn paused_holder_child() {
    child_main(|client| async move {
        let mutex = client.mutex_with("resource-lock", renewed(300)).unwrap();
        let guard = mutex.lock().await.unwrap();
        println!("acquired {}", guard.fencing_token());
        // The parent freezes this process here (SIGSTOP) for longer than the lease.
        let reason = guard.lost().await;
        println!("lost {reason:?}");
        // A holder that ignores the signal and writes anyway is refused by the resource.
        let report = client.fenced_key("resource").unwrap();
        match report
            .set(guard.fencing_token(), "from the paused holder")
            .await
        {
            Err(Error::StaleToken { highest, .. }) => println!("write stale highest={highest}"),
            other => println!("write {other:?}"),
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_overwrite_the_next_holders_write() {
    let server = server();
    let mut holder =
        ChildProcess::spawn_test("paused_holder_child", &[("CHILD_REDIS_URL", &server.url())])
            .unwrap();
    let line =
        tokio::task::block_in_place(|| holder.wait_for_line("acquired", Duration::from_secs(30)))
            .expect("the child holds the lock");
    let stale_token: u64 = line["acquired ".len()..].parse().unwrap();
    holder.pause();
    // Past its lease: the key expires while the holder is frozen.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "resource-lock")
        })
        .await
    );

    let client = client(&server).await;
    let guard = client.mutex("resource-lock").unwrap().lock().await.unwrap();
    assert!(guard.fencing_token().get() > stale_token);
    let resource = client.fenced_key("resource").unwrap();
    resource
        .set(guard.fencing_token(), "from the new holder")
        .await
        .unwrap();

    holder.resume();
    let lost =
        tokio::task::block_in_place(|| holder.wait_for_line("lost", Duration::from_secs(10)))
            .expect("the paused holder was told");
    assert!(lost == "lost Taken" || lost == "lost LeaseEnded", "{lost}");
    let write =
        tokio::task::block_in_place(|| holder.wait_for_line("write", Duration::from_secs(10)))
            .unwrap();
    assert_eq!(
        write,
        format!("write stale highest={}", guard.fencing_token())
    );
    assert_eq!(
        resource.get().await.unwrap().as_deref(),
        Some("from the new holder")
    );
    assert_eq!(
        resource.highest_token().await.unwrap(),
        Some(guard.fencing_token())
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn fenced_writes_accept_equal_and_higher_tokens_only() {
    let server = server();
    let client = client(&server).await;
    let key = client.fenced_key("doc").unwrap();
    assert_eq!(key.get().await.unwrap(), None);
    key.set(FencingToken::new(10), "a").await.unwrap();
    key.set(FencingToken::new(10), "b").await.unwrap();
    key.set(FencingToken::new(12), "c").await.unwrap();
    let err = key.set(FencingToken::new(11), "d").await.unwrap_err();
    match err {
        Error::StaleToken { token, highest, .. } => {
            assert_eq!((token.get(), highest.get()), (11, 12));
        }
        other => panic!("{other}"),
    }
    assert_eq!(key.get().await.unwrap().as_deref(), Some("c"));
    // A key of another type is refused, not overwritten.
    redis::cmd("HSET")
        .arg("other")
        .arg("f")
        .arg("v")
        .exec(&mut common::raw(&server))
        .unwrap();
    let other = client.fenced_key("other").unwrap();
    assert!(matches!(
        other.set(FencingToken::new(1), "x").await,
        Err(Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn a_shorter_extension_shortens_the_guards_deadline_too() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default().lease(Duration::from_secs(30));
    let guard = client
        .mutex_with("shorter", options)
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.extend(Duration::from_millis(400)).await.unwrap();
    assert!(guard.lease_remaining() <= Duration::from_millis(400));
    assert!(pttl(&server, "shorter") <= 400);
    // lost() follows the server's 400 ms, not the 30 s the lock started with.
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::LeaseEnded);
}

#[tokio::test]
async fn after_a_long_extension_the_watchdogs_renewal_sets_the_deadline() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .mutex_with("mixed", renewed(300))
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(guard.lease_remaining() > Duration::from_secs(50));
    // The next renewal (within 100 ms) sets a 300 ms lease again, and the guard says so.
    assert!(
        eventually(Duration::from_secs(2), || async {
            guard.lease_remaining() <= Duration::from_millis(300)
        })
        .await
    );
    assert!(pttl(&server, "mixed") <= 300);
    guard.release().await.unwrap();
}
