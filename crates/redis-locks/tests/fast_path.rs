//! The first attempt of a lock is a pipelined `SET NX PX` + `INCR` rather than a script; the
//! script takes over for what the pipeline cannot decide alone. These tests pin down when.

mod common;

use std::time::Duration;

use common::{client, exists, raw, server};
use redis::Commands;
use redis_locks::Error;

/// Counters below this were never seeded from the server clock.
const SEEDED: u64 = 1_000_000_000_000_000;

#[tokio::test]
async fn a_free_lock_costs_one_round_trip_to_take_and_one_to_release() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("fast").unwrap();
    // The first acquisition seeds the counter from the clock (through the script).
    let first = mutex.lock().await.unwrap();
    assert!(first.fencing_token().get() > SEEDED);
    first.release().await.unwrap();
    let before = client.requests_sent();
    let mut last = 0;
    for _ in 0..10 {
        let guard = mutex.lock().await.unwrap();
        assert!(guard.fencing_token().get() > last);
        last = guard.fencing_token().get();
        guard.release().await.unwrap();
    }
    assert_eq!(client.requests_sent() - before, 20);
}

#[tokio::test]
async fn an_unseeded_counter_jumps_to_the_server_clock() {
    let server = server();
    let client = client(&server).await;
    // A counter restarted after a loss, bumped a few times by refused attempts.
    let _: () = raw(&server).set("{restarted}:fence", 5).unwrap();
    let mutex = client.mutex("restarted").unwrap();
    let before = client.requests_sent();
    let guard = mutex.lock().await.unwrap();
    assert_eq!(
        client.requests_sent() - before,
        1,
        "the pipeline alone brings the counter up to the clock"
    );
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut raw(&server)).unwrap();
    let token = guard.fencing_token().get();
    assert!(
        token > SEEDED && token / 1_000_000 <= secs,
        "clock-seeded: {token}"
    );
    let counter: u64 = raw(&server).get("{restarted}:fence").unwrap();
    assert_eq!(
        counter, token,
        "the next holder's token starts above this one"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_counter_that_came_back_old_is_brought_up_to_the_clock_by_the_fast_path() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("rewound").unwrap();
    let first = mutex.lock().await.unwrap();
    let issued = first.fencing_token().get();
    first.release().await.unwrap();
    // As a restart from an older snapshot would leave it: seeded, but behind what was issued.
    let _: () = raw(&server).set("{rewound}:fence", issued - 1_000).unwrap();
    let before = client.requests_sent();
    let guard = mutex.lock().await.unwrap();
    assert_eq!(client.requests_sent() - before, 1, "still one round trip");
    assert!(
        guard.fencing_token().get() > issued,
        "never an old token again"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_server_that_lost_its_scripts_still_grants_with_a_fresh_token() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("flushed").unwrap();
    let first = mutex.lock().await.unwrap();
    let issued = first.fencing_token().get();
    first.release().await.unwrap();
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .exec(&mut raw(&server))
        .unwrap();
    // NOSCRIPT for the token: the acquire script numbers this grant, and the token script is
    // loaded again for the next ones.
    let guard = mutex.lock().await.unwrap();
    let token = guard.fencing_token();
    assert!(token.get() > issued);
    guard.release().await.unwrap();
    let before = client.requests_sent();
    let again = mutex.lock().await.unwrap();
    assert_eq!(client.requests_sent() - before, 1, "fast again");
    assert!(again.fencing_token() > token);
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_refused_fast_attempt_takes_a_token_and_the_next_holder_a_greater_one() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("busy").unwrap();
    let holder = mutex.lock().await.unwrap();
    let err = mutex.try_lock().await.unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(err.retry_after().unwrap() > Duration::from_secs(29));
    let counter: u64 = raw(&server).get("{busy}:fence").unwrap();
    assert!(counter > holder.fencing_token().get(), "the refused try took a token");
    let value: String = raw(&server).get("busy").unwrap();
    assert_eq!(
        value,
        holder.owner_token().as_str(),
        "try_lock does not wait, so it leaves no mark"
    );
    holder.release().await.unwrap();
    let next = mutex.try_lock().await.unwrap();
    assert!(next.fencing_token().get() > counter);
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_broken_counter_gives_the_fast_grant_back() {
    let server = server();
    let client = client(&server).await;
    let _: () = raw(&server).set("{broken}:fence", "not-a-number").unwrap();
    let mutex = client.mutex("broken").unwrap();
    for err in [
        mutex.try_lock().await.unwrap_err(),
        mutex.lock().await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::WrongType { key, .. } if key == "{broken}:fence"),
            "{err}"
        );
        assert!(
            !exists(&server, "broken"),
            "the lock taken by the SET was given back"
        );
    }
}

#[tokio::test]
async fn a_held_lock_with_a_broken_counter_is_reported_not_just_held() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("spoiled").unwrap();
    let holder = mutex.lock().await.unwrap();
    let _: () = raw(&server).set("{spoiled}:fence", "not-a-number").unwrap();
    let err = mutex.try_lock().await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == "{spoiled}:fence"),
        "{err}"
    );
    let value: String = raw(&server).get("spoiled").unwrap();
    assert_eq!(
        value,
        holder.owner_token().as_str(),
        "the holder's lock is untouched"
    );
    holder.release().await.unwrap();
}

#[tokio::test]
async fn a_release_nobody_waited_for_publishes_nothing() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("quiet").unwrap();
    let mut wake = raw(&server);
    wake.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut pubsub = wake.as_pubsub();
    pubsub.subscribe("{quiet}:wake").unwrap();
    mutex.lock().await.unwrap().release().await.unwrap();
    // Had the release published, its message would arrive before this one.
    let _: () = raw(&server).publish("{quiet}:wake", "marker").unwrap();
    let first: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(first, "marker");

    // With a waiter, the release does publish, and the waiter takes the lock.
    let holder = mutex.lock().await.unwrap();
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    let marked = common::eventually(Duration::from_secs(5), || async {
        let value: String = raw(&server).get("quiet").unwrap_or_default();
        value.ends_with("+w")
    })
    .await;
    assert!(marked, "the waiter marked the lock");
    holder.release().await.unwrap();
    let woken: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(woken, "*");
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter took the lock")
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
}
