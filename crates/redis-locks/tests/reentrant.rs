//! `ReentrantMutex` against a real server: hold counts, foreign owners, leases renewed on
//! re-entry, cancelled re-entries, owners across handles, wake-ups.

mod common;

use std::time::Duration;

use common::{eventually, exists, pttl, raw, server};
use redis_locks::{Error, LeaseOptions, LockOptions, OwnerId, Released, WaitOptions};
use tokio::time::Instant;

#[tokio::test]
async fn one_owner_acquires_three_times_and_the_lock_is_free_after_the_third_release() {
    let server = server();
    let client = common::client(&server).await;
    let lock = client.reentrant_mutex("ledger").unwrap();
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    let third = lock.try_lock().await.unwrap();
    let token = first.fencing_token();
    assert_eq!(second.fencing_token(), token);
    assert_eq!(third.fencing_token(), token);
    let state = lock.state().await.unwrap();
    assert_eq!(state.hold_count(), 3);
    assert_eq!(state.writer(), Some(lock.owner().as_str()));
    assert_eq!(state.kind.as_deref(), Some("reentrant"));
    // Released in any order: the count goes down, the lock stays until the last.
    assert_eq!(
        second.release().await.unwrap(),
        Released::StillHeld { holds: 2 }
    );
    assert!(exists(&server, "ledger"));
    assert_eq!(
        first.release().await.unwrap(),
        Released::StillHeld { holds: 1 }
    );
    assert!(exists(&server, "ledger"));
    assert_eq!(third.release().await.unwrap(), Released::Freed);
    assert!(!exists(&server, "ledger"));
    // The next owner's first hold takes a greater token.
    let next = client
        .reentrant_mutex("ledger")
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_foreign_owner_is_refused_and_changes_nothing() {
    let server = server();
    let client = common::client(&server).await;
    let lock = client.reentrant_mutex("ledger").unwrap();
    let guard = lock.lock().await.unwrap();
    let before = lock.state().await.unwrap();
    let foreign = client.reentrant_mutex("ledger").unwrap();
    assert_ne!(foreign.owner(), lock.owner());
    assert!(matches!(
        foreign.try_lock().await,
        Err(Error::Held {
            retry_after: Some(_),
            ..
        })
    ));
    assert!(matches!(
        foreign.lock_timeout(Duration::from_millis(50)).await,
        Err(Error::WaitTimeout { .. })
    ));
    // A release by anything but the hold's own id (as another owner would send it) is
    // refused by the script and changes nothing.
    let script = redis::Script::new(
        &[
            include_str!("../src/engine/holds/release_first.lua"),
            common::LOCK_LUA,
            common::QUEUE_LUA,
            include_str!("../src/engine/holds/holds.lua"),
            include_str!("../src/engine/holds/release.lua"),
        ]
        .join("\n"),
    );
    let reply: (i64, i64) = script
        .key("ledger")
        .key("{ledger}:queue")
        .key("{ledger}:places")
        .key("{ledger}:tickets")
        .arg(format!("{:032x}", 7))
        .arg("{ledger}:wake")
        .invoke(&mut raw(&server))
        .unwrap();
    assert_eq!(reply, (0, 0));
    let after = lock.state().await.unwrap();
    assert_eq!(after.hold_count(), 1);
    assert_eq!(after.holds[0].owner, before.holds[0].owner);
    assert_eq!(after.holds[0].fencing_token, before.holds[0].fencing_token);
    assert_eq!(
        after.waiting_writers, 0,
        "the timed-out waiter left the line"
    );
    assert!(guard.release().await.unwrap().is_freed());
}

#[tokio::test]
async fn a_re_entry_renews_the_lease_of_every_hold_of_the_owner() {
    let server = server();
    let client = common::client(&server).await;
    let options = LockOptions::default().lease(Duration::from_millis(1500));
    let lock = client.reentrant_mutex_with("ledger", options).unwrap();
    // Taken before the request: the first hold's lease ends no earlier than 1500 ms after.
    let asked = Instant::now();
    let first = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Without renewal the first hold and the key would have at most 800 ms left now.
    let second = lock.lock().await.unwrap();
    assert!(
        pttl(&server, "ledger") > 1000,
        "pttl {}",
        pttl(&server, "ledger")
    );
    let state = lock.state().await.unwrap();
    assert_eq!(state.hold_count(), 2);
    for hold in &state.holds {
        assert!(
            hold.lease_remaining > Duration::from_millis(1000),
            "{hold:?}"
        );
    }
    // The first guard still counts on its own lease only (it cannot know of the renewal):
    // its lost() resolves at its own deadline, while the server keeps its hold.
    tokio::time::timeout(Duration::from_secs(2), first.lost())
        .await
        .unwrap();
    assert!(asked.elapsed() >= Duration::from_millis(1400));
    assert_eq!(lock.state().await.unwrap().hold_count(), 2);
    let foreign = client.reentrant_mutex("ledger").unwrap();
    assert!(matches!(foreign.try_lock().await, Err(Error::Held { .. })));
    assert_eq!(first.release().await.unwrap().holds(), 1);
    assert!(second.release().await.unwrap().is_freed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_re_entries_leave_the_count_right() {
    let server = server();
    let client = common::client(&server).await;
    let lock = std::sync::Arc::new(client.reentrant_mutex("ledger").unwrap());
    let outer = lock.lock().await.unwrap();
    // Re-entries cancelled at every point: before the request, in flight, after the grant.
    for i in 0..40u64 {
        let lock = lock.clone();
        let task = tokio::spawn(async move {
            let guard = lock.lock().await;
            std::future::pending::<()>().await;
            drop(guard);
        });
        for _ in 0..(i % 8) {
            tokio::task::yield_now().await;
        }
        task.abort();
        let _ = task.await;
    }
    // Every cancelled re-entry's hold is given back in the background, and only its own.
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.state().await.unwrap().hold_count() == 1
        })
        .await,
        "{:?}",
        lock.state().await.unwrap()
    );
    assert!(outer.release().await.unwrap().is_freed());
    assert!(!exists(&server, "ledger"));
}

#[tokio::test]
async fn handles_with_one_owner_id_re_enter_each_others_lock() {
    let server = server();
    let one = common::client(&server).await;
    let two = common::client(&server).await;
    let job = OwnerId::new("job 42").unwrap();
    let a = one
        .reentrant_mutex("ledger")
        .unwrap()
        .with_owner(job.clone());
    let b = two.reentrant_mutex("ledger").unwrap().with_owner(job);
    let ga = a.lock().await.unwrap();
    let gb = b.try_lock().await.unwrap();
    assert_eq!(ga.fencing_token(), gb.fencing_token());
    assert_eq!(a.state().await.unwrap().writer(), Some("job 42"));
    assert_eq!(gb.release().await.unwrap().holds(), 1);
    assert!(ga.release().await.unwrap().is_freed());
    assert!(matches!(
        OwnerId::new("bad\nid"),
        Err(Error::InvalidOwner { .. })
    ));
}

/// A waiter that polls rarely (a 20 s retry delay, a 30 s place lease renewed every third
/// of it): beside a wake-up, only the 2 s look of a live waiter lets it in.
fn quiet_waiting() -> WaitOptions {
    WaitOptions::default()
        .retry_delay(Duration::from_secs(20))
        .place_lease(Duration::from_secs(30))
}

#[tokio::test]
async fn a_release_wakes_the_next_owner_without_polling() {
    let server = server();
    let client = common::client(&server).await;
    let lock = client.reentrant_mutex("ledger").unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    // A waiter polling every 20 s: only a wake-up lets it in quickly.
    let options = LockOptions::default().wait_options(quiet_waiting());
    let waiter = client.reentrant_mutex_with("ledger", options).unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.state().await.unwrap().waiting_writers == 1
        })
        .await
    );
    // Releasing a re-entry leaves the lock held: the waiter stays out.
    inner.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    outer.release().await.unwrap();
    // Within 1 s: a live waiter looks again on its own only every 2 s.
    let next = tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("the waiter was woken by the last release")
        .unwrap();
    next.release().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_keeps_every_hold_and_lost_tells_the_end() {
    let server = server();
    let client = common::client(&server).await;
    let options = LockOptions::default().lease_options(
        LeaseOptions::default()
            .lease(Duration::from_millis(300))
            .watchdog(true),
    );
    let lock = client.reentrant_mutex_with("ledger", options).unwrap();
    let a = lock.lock().await.unwrap();
    let b = lock.lock().await.unwrap();
    assert!(a.is_renewed() && b.is_renewed());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(a.lost_reason().is_none() && b.lost_reason().is_none());
    assert_eq!(lock.state().await.unwrap().hold_count(), 2);
    // The hold deleted behind the guards' backs: the next renewal finds it gone.
    redis::cmd("DEL")
        .arg("ledger")
        .exec(&mut raw(&server))
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(2), a.lost())
        .await
        .unwrap();
    assert_eq!(lost, redis_locks::LostReason::Expired);
}

#[tokio::test]
async fn a_name_held_as_a_mutex_is_refused() {
    let server = server();
    let client = common::client(&server).await;
    let mutex = client.mutex("ledger").unwrap().lock().await.unwrap();
    let lock = client.reentrant_mutex("ledger").unwrap();
    assert!(matches!(
        lock.try_lock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        lock.lock_timeout(Duration::from_millis(100)).await,
        Err(Error::WrongType { .. })
    ));
    mutex.release().await.unwrap();
    let held = lock.lock().await.unwrap();
    assert!(matches!(
        client.rwlock("ledger").unwrap().try_write().await,
        Err(Error::WrongType { .. })
    ));
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_release_after_the_lease_says_taken_when_another_owner_holds_it_as_a_mutex_does() {
    let server = server();
    let client = common::client(&server).await;
    let short = LockOptions::default().lease_options(
        LeaseOptions::default()
            .lease(Duration::from_millis(100))
            .watchdog(false),
    );
    let late = client.reentrant_mutex_with("ledger", short).unwrap();
    let guard = late.lock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "ledger")
        })
        .await
    );
    // Gone and nobody else holds it: Expired.
    common::assert_not_held(guard.release().await, redis_locks::LostReason::Expired);
    let guard = late.lock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "ledger")
        })
        .await
    );
    let other = client.reentrant_mutex("ledger").unwrap();
    let theirs = other.lock().await.unwrap();
    // Gone and another owner holds it: Taken, as a Mutex says.
    common::assert_not_held(guard.release().await, redis_locks::LostReason::Taken);
    assert_eq!(theirs.release().await.unwrap(), Released::Freed);

    // An RwLock: a write hold that ran out while another owner reads is taken; a read hold
    // that ran out while another owner reads too is only expired (reads share).
    let short = redis_locks::LockOptions::default().lease_options(
        LeaseOptions::default()
            .lease(Duration::from_millis(100))
            .watchdog(false),
    );
    let late = client.rwlock_with("catalog", short).unwrap();
    let write = late.write().await.unwrap();
    let read = late.read().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            !exists(&server, "catalog")
        })
        .await
    );
    let reader = client.rwlock("catalog").unwrap();
    let theirs = reader.read().await.unwrap();
    common::assert_not_held(write.release().await, redis_locks::LostReason::Taken);
    common::assert_not_held(read.release().await, redis_locks::LostReason::Expired);
    theirs.release().await.unwrap();
}
