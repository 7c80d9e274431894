//! The first attempt of a lock is a pipelined `SET NX PX` + `INCR` rather than a script; the
//! script takes over for what the pipeline cannot decide alone. These tests pin down when.

mod common;

use std::time::Duration;

use common::{client, exists, raw, server};
use redis::Commands;
use redis_locks::Error;

/// Counters below this were never seeded from the server clock.
const SEEDED: u64 = 1_000_000_000_000_000;

/// Takes `mutex` and says how many requests that cost `client`.
async fn lock_counting(
    client: &redis_locks::Client,
    mutex: &redis_locks::Mutex,
) -> (redis_locks::MutexGuard, u64) {
    let before = client.stats().requests;
    let guard = mutex.lock().await.unwrap();
    (guard, client.stats().requests - before)
}

#[tokio::test]
async fn a_free_lock_costs_one_round_trip_to_take_and_one_to_release() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("fast").unwrap();
    // The first acquisition seeds the counter from the clock (through the script).
    let first = mutex.lock().await.unwrap();
    assert!(first.fencing_token().get() > SEEDED);
    first.release().await.unwrap();
    let before = client.stats().requests;
    let mut last = 0;
    for _ in 0..10 {
        let guard = mutex.lock().await.unwrap();
        assert!(guard.fencing_token().get() > last);
        last = guard.fencing_token().get();
        guard.release().await.unwrap();
    }
    assert_eq!(client.stats().requests - before, 20);
}

#[tokio::test]
async fn an_unseeded_counter_jumps_to_the_server_clock() {
    let server = server();
    let client = client(&server).await;
    // A counter restarted after a loss, bumped a few times by refused attempts.
    let _: () = raw(&server).set("{restarted}:fence", 5).unwrap();
    let mutex = client.mutex("restarted").unwrap();
    let (guard, requests) = lock_counting(&client, &mutex).await;
    assert_eq!(requests, 2, "the pipeline, then the script to seed");
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
async fn a_counter_the_connection_cannot_vouch_for_is_numbered_by_the_script() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("vouched").unwrap();
    let first = mutex.lock().await.unwrap();
    first.release().await.unwrap();
    // The epochs name this connection: the next grant is one round trip.
    let epochs = || -> Vec<String> { raw(&server).zrange("{vouched}:epoch", 0, -1).unwrap() };
    let named = epochs();
    assert_eq!(named.len(), 1);
    assert!(named[0].starts_with("redis-locks:"), "{named:?}");
    // Epochs that name other connections only (as if they had come back from a snapshot):
    // the fast grant is not trusted and the script numbers it.
    let _: () = raw(&server).del("{vouched}:epoch").unwrap();
    let _: () = raw(&server)
        .zadd("{vouched}:epoch", "redis-locks:elsewhere", 1)
        .unwrap();
    let (guard, requests) = lock_counting(&client, &mutex).await;
    assert_eq!(requests, 2, "the pipeline, then the script");
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut raw(&server)).unwrap();
    assert!(
        guard.fencing_token().get() / 1_000_000 + 1 >= secs,
        "at the clock"
    );
    assert!(
        epochs().contains(&named[0]),
        "the script wrote this connection's name back"
    );
    guard.release().await.unwrap();
    let before = client.stats().requests;
    mutex.lock().await.unwrap().release().await.unwrap();
    assert_eq!(
        client.stats().requests - before,
        2,
        "fast again: one to take, one to release"
    );
}

#[tokio::test]
async fn clients_taking_turns_on_one_lock_each_keep_the_one_round_trip() {
    let server = server();
    let (one, two) = (client(&server).await, client(&server).await);
    let (a, b) = (one.mutex("shared").unwrap(), two.mutex("shared").unwrap());
    // Each connection is vouched for once...
    a.lock().await.unwrap().release().await.unwrap();
    b.lock().await.unwrap().release().await.unwrap();
    let (before_one, before_two) = (one.stats().requests, two.stats().requests);
    let mut last = 0;
    for _ in 0..5 {
        for mutex in [&a, &b] {
            let guard = mutex.lock().await.unwrap();
            assert!(guard.fencing_token().get() > last);
            last = guard.fencing_token().get();
            guard.release().await.unwrap();
        }
    }
    // ...and then neither one's grant unseats the other's: 2 requests per lock and release.
    assert_eq!(one.stats().requests - before_one, 10);
    assert_eq!(two.stats().requests - before_two, 10);
    let epochs: Vec<String> = raw(&server).zrange("{shared}:epoch", 0, -1).unwrap();
    assert_eq!(epochs.len(), 2, "{epochs:?}");
}

#[tokio::test]
async fn where_names_do_not_stick_the_script_numbers_every_grant_and_epochs_stay_small() {
    let server = server();
    // An ACL that forbids CLIENT SETNAME (and GETNAME): no connection can be vouched for.
    redis::cmd("ACL")
        .arg(&[
            "SETUSER", "noclient", "on", ">pw", "~*", "&*", "+@all", "-client",
        ])
        .exec(&mut raw(&server))
        .unwrap();
    let url = format!("redis://noclient:pw@127.0.0.1:{}", server.port());
    let client = redis_locks::Client::connect(&url).await.unwrap();
    let mutex = client.mutex("unnamed").unwrap();
    let mut last = 0;
    for _ in 0..20 {
        let guard = mutex.lock().await.unwrap();
        assert!(guard.fencing_token().get() > last);
        last = guard.fencing_token().get();
        guard.release().await.unwrap();
    }
    let before = client.stats().requests;
    mutex.lock().await.unwrap().release().await.unwrap();
    assert_eq!(
        client.stats().requests - before,
        3,
        "the pipeline, the script, the release"
    );
    let epochs: i64 = raw(&server).zcard("{unnamed}:epoch").unwrap();
    assert!(epochs <= 1, "one naming was tried, then none: {epochs}");
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
    assert_eq!(counter, holder.fencing_token().get() + 1);
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
    // The lock's wake channel and every client's own channel of it.
    pubsub.psubscribe("{quiet}:wake*").unwrap();
    mutex.lock().await.unwrap().release().await.unwrap();
    // Had the release published, its message would arrive before this one.
    let _: () = raw(&server).publish("{quiet}:wake", "marker").unwrap();
    let first: String = pubsub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(first, "marker");

    // With a waiter, the release does publish, addressed to the waiter's client (its place
    // in the queue, on that client's own channel of the lock): it hands the lock to the
    // owner token that client's waiters ask with, and the waiter holds it under that token,
    // with the fencing token published.
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
    let message = pubsub.get_message().unwrap();
    let woken: String = message.get_payload().unwrap();
    let parts: Vec<&str> = woken.split(' ').collect();
    let hex = |part: &str| part.bytes().all(|b| b.is_ascii_hexdigit());
    let (line, address) = parts[0].split_once('@').unwrap_or_default();
    assert!(
        parts.len() == 4 && line.len() == 32 && hex(line) && address.len() == 16 && hex(address),
        "a grant addressed to one waiter of one client: {woken:?}"
    );
    assert_eq!(
        message.get_channel_name(),
        format!("{{quiet}}:wake:{address}"),
        "on that client's own channel"
    );
    assert!(parts[1].len() == 32 && hex(parts[1]), "{woken:?}");
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter took the lock")
        .unwrap()
        .unwrap();
    assert_eq!(
        next.owner_token().as_str(),
        parts[1],
        "held under the token handed"
    );
    assert_eq!(next.fencing_token().to_string(), parts[3]);
    let value: String = raw(&server).get("quiet").unwrap();
    assert_eq!(
        value,
        format!("{}+w", parts[1]),
        "the lock key holds it, marked"
    );
    next.release().await.unwrap();
}
