//! One scheduler per client renews every watched lease: leases of different lengths taken in
//! any order are each renewed in time, and a released one is never renewed again.

mod common;

use std::time::Duration;

use common::{client, exists, pttl, renewed, server};

#[tokio::test]
async fn a_short_lease_taken_after_a_long_one_is_renewed_in_time() {
    let server = server();
    let client = client(&server).await;
    // The scheduler now sleeps until the long lease's first renewal, 10 s away...
    let long = client
        .mutex_with("long", renewed(30_000))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // ...and must wake far sooner for this one, renewed every 40 ms.
    let short = client
        .mutex_with("short", renewed(120))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Five leases' time: without renewals the key would be long gone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(exists(&server, "short"), "the short lease was not renewed");
    assert_eq!(short.lost_reason(), None);
    assert!(pttl(&server, "short") > 0);
    short.release().await.unwrap();
    long.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_guards_share_the_scheduler_and_each_stops_with_its_release() {
    let server = server();
    let client = client(&server).await;
    let mut guards = Vec::new();
    for i in 0..40 {
        let mutex = client
            .mutex_with(&format!("many:{i}"), renewed(150))
            .unwrap();
        guards.push(mutex.lock().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (i, guard) in guards.iter().enumerate() {
        assert_eq!(guard.lost_reason(), None, "many:{i}");
        assert!(exists(&server, &format!("many:{i}")), "many:{i} expired");
    }
    // Release every other one; the rest must go on being renewed.
    let kept: Vec<_> = guards
        .into_iter()
        .enumerate()
        .filter_map(|(i, guard)| (i % 2 == 1).then_some(guard))
        .collect();
    let released_before = client.stats().requests;
    tokio::time::sleep(Duration::from_millis(600)).await;
    for i in (0..40).step_by(2) {
        assert!(!exists(&server, &format!("many:{i}")), "many:{i} revived");
    }
    for guard in &kept {
        assert_eq!(guard.lost_reason(), None, "{}", guard.name());
        assert!(exists(&server, guard.name()), "{} expired", guard.name());
    }
    // 20 leases renewed every 50 ms for 600 ms is at most 13 renewals each, plus the 20
    // background releases; the released leases' renewals would add another 240.
    let requests = client.stats().requests - released_before;
    assert!(
        requests <= 20 * 13 + 20,
        "{requests} requests in 600 ms: released leases were renewed"
    );
    for guard in kept {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_guard_that_outlives_its_client_is_still_renewed_and_released() {
    let server = server();
    // The client and the handle are dropped at once: only the guard is kept.
    let guard = client(&server)
        .await
        .mutex_with("orphan", renewed(120))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Five leases' time: without renewals the key would be long gone.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        exists(&server, "orphan"),
        "the guard's lease was not renewed"
    );
    assert_eq!(guard.lost_reason(), None);
    guard.release().await.unwrap();
    assert!(
        !exists(&server, "orphan"),
        "and its release still reached Redis"
    );
}
