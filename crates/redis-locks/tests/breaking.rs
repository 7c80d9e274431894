//! `Client::break_lock` on a real server: a held lock of each kind is freed on purpose, its
//! holder's `lost()` fires with `Broken` at its next renewal (its release says so too), a
//! waiter gets the lock, the fencing counter passed every token so the old holder's fenced
//! write is refused once the new one wrote; a free lock is left alone; a key that is no lock's
//! is refused with nothing changed.

mod common;

use std::time::Duration;

use redis_locks::{Client, Error, LockOptions, LostReason};
use test_support::RedisServer;

/// Options with a short lease renewed by the watchdog (renewals every 100 ms).
fn short() -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_millis(300))
        .watchdog(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_mutex_tells_its_holder_and_lets_a_waiter_in_with_a_higher_token() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let mutex = client.mutex_with("jobs:nightly", short()).unwrap();
    let guard = mutex.lock().await.unwrap();
    let resource = client.fenced_key("report").unwrap();
    resource
        .set(guard.fencing_token(), "old holder")
        .await
        .unwrap();
    let waiter_client = Client::connect(&server.url()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let mutex = waiter_client.mutex("jobs:nightly").unwrap();
        let guard = mutex.lock().await.unwrap();
        let token = guard.fencing_token();
        waiter_client
            .fenced_key("report")
            .unwrap()
            .set(token, "new holder")
            .await
            .unwrap();
        guard.release().await.unwrap();
        token
    });
    // Let the waiter wait.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let broken = client.break_lock("jobs:nightly").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("mutex"));
    assert_eq!(broken.holders.len(), 1);
    assert!(broken.fencing_counter > guard.fencing_token());
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires at the next renewal");
    assert_eq!(lost, LostReason::Broken);
    let new_token = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter gets the lock")
        .unwrap();
    assert!(
        new_token > broken.fencing_counter,
        "a token past the break's"
    );
    // The old holder's next fenced write is refused.
    let refused = resource
        .set(guard.fencing_token(), "late")
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::StaleToken { .. }), "{refused}");
    assert_eq!(resource.get().await.unwrap().as_deref(), Some("new holder"));
    // A free lock is left as it is.
    let free = client.break_lock("jobs:nightly").await.unwrap();
    assert_eq!(free.kind, None);
    assert!(free.holders.is_empty());
    assert_eq!(free.fencing_counter, new_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_broken_and_its_holders_told() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let rwlock = client
        .rwlock_with(
            "cart",
            LockOptions::default()
                .lease(Duration::from_millis(300))
                .watchdog(true),
        )
        .unwrap();
    let read = rwlock.read().await.unwrap();
    let broken = client.break_lock("cart").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("rwlock"));
    assert!(broken.holders[0].starts_with("r "), "{:?}", broken.holders);
    let lost = tokio::time::timeout(Duration::from_secs(5), read.lost()).await;
    assert_eq!(lost.unwrap(), LostReason::Broken);
    // Free for a writer now.
    rwlock.try_write().await.unwrap().release().await.unwrap();
    // A read hold kept as a plain key (the counter is vouched for on the connection by now,
    // and this handle's first attempts were never refused): broken as an RwLock's.
    let read = rwlock.read().await.unwrap();
    assert_eq!(common::key_type(&server, "cart"), "string", "a plain key");
    let broken = client.break_lock("cart").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("rwlock"));
    assert_eq!(broken.holders, [format!("r {}", rwlock.owner())]);
    let lost = tokio::time::timeout(Duration::from_secs(5), read.lost()).await;
    assert_eq!(lost.unwrap(), LostReason::Broken);
    match read.release().await {
        Err(Error::NotHeld { reason, .. }) => assert_eq!(reason, LostReason::Broken),
        other => panic!("a broken plain read hold's release: {other:?}"),
    }

    let semaphore = client.semaphore("slots", 2).unwrap();
    let permit = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let broken = client.break_lock("slots").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("semaphore"));
    assert_eq!(broken.holders.len(), 2);
    assert_eq!(semaphore.available().await.unwrap(), 2, "both permits free");
    // The broken holder's release says it was broken.
    match permit.release().await {
        Err(Error::NotHeld { reason, .. }) => assert_eq!(reason, LostReason::Broken),
        other => panic!("a broken permit's release: {other:?}"),
    }
    drop(second);
    // A permit kept as a plain key: the only holder, its counter vouched for by now, asked
    // by a handle whose first attempt was not refused lately (`second`'s was).
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            semaphore.available().await.unwrap() == 2
        })
        .await
    );
    let semaphore = client.semaphore("slots", 2).unwrap();
    let permit = semaphore.acquire().await.unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg("slots")
        .query(&mut common::raw(&server))
        .unwrap();
    assert_eq!(kind, "string", "a permit kept as a plain key");
    let broken = client.break_lock("slots").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("semaphore"));
    assert_eq!(broken.holders, [permit.owner_token().as_str()]);
    match permit.release().await {
        Err(Error::NotHeld { reason, .. }) => assert_eq!(reason, LostReason::Broken),
        other => panic!("a broken plain permit's release: {other:?}"),
    }

    let reentrant = client.reentrant_mutex("ledger").unwrap();
    let held = reentrant.lock().await.unwrap();
    assert_eq!(
        client.break_lock("ledger").await.unwrap().kind.as_deref(),
        Some("reentrant")
    );
    drop(held);
    let fair = client.fair_mutex("queue").unwrap();
    let held = fair.lock().await.unwrap();
    assert_eq!(
        client.break_lock("queue").await.unwrap().kind.as_deref(),
        Some("mutex")
    );
    match held.release().await {
        Err(Error::NotHeld { reason, .. }) => assert_eq!(reason, LostReason::Broken),
        other => panic!("a broken FairMutex's release: {other:?}"),
    }
}

#[tokio::test]
async fn a_key_that_is_no_lock_is_refused_and_left_as_it_is() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut raw = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("RPUSH")
        .arg("queue-of-jobs")
        .arg("a")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = client.break_lock("queue-of-jobs").await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    let len: i64 = redis::cmd("LLEN")
        .arg("queue-of-jobs")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(len, 1);
    let counter: Option<String> = redis::cmd("GET")
        .arg("{queue-of-jobs}:fence")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(counter, None, "no counter written");

    // Hashes without a kind that are no RwLock's: one with an application's field, one with
    // no hold at all (fields named like a writer's only).
    for (name, fields) in [
        ("profile", &[("name", "ada"), ("h:x", "not a hold")][..]),
        ("settings", &[("writer", "bob"), ("token", "77")][..]),
    ] {
        let mut set = redis::cmd("HSET");
        set.arg(name);
        for (field, value) in fields {
            set.arg(*field).arg(*value);
        }
        let _: i64 = set.query_async(&mut raw).await.unwrap();
        let err = client.break_lock(name).await.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{name}: {err}");
        let left: i64 = redis::cmd("HLEN")
            .arg(name)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(left, fields.len() as i64, "{name} left as it is");
    }
}

#[tokio::test]
async fn a_semaphore_with_ten_thousand_holders_is_broken_whole() {
    // More holders than Lua's unpack gives at once (about 8,000): their owner tokens join the
    // broken mark in slices.
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let keys = client.keys("crowd").unwrap();
    let mut con = server.connection().unwrap();
    let ends = common::server_ms(&mut con) + 60_000;
    common::put_semaphore(&mut con, keys.lock(), 20_000, 10_000, ends);
    let broken = client.break_lock("crowd").await.unwrap();
    assert_eq!(broken.kind.as_deref(), Some("semaphore"));
    assert_eq!(broken.holders.len(), 10_000);
    let mark = keys.companion("broken");
    let marked: i64 = redis::cmd("SCARD").arg(&mark).query(&mut con).unwrap();
    assert_eq!(marked, 10_000);
    let exists: i64 = redis::cmd("EXISTS")
        .arg(keys.lock())
        .query(&mut con)
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_semaphore_with_only_waiters_is_free_and_left_as_it_is() {
    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    let semaphore = client.semaphore("gate", 1).unwrap();
    let held = semaphore.acquire().await.unwrap();
    // A waiter in line (its place lease runs 2 s by default), then the holder gone by hand:
    // the hash stays for the waiter, with N and the mark, and holds nobody.
    let waiter = tokio::spawn({
        let semaphore = client.semaphore("gate", 1).unwrap();
        async move { semaphore.acquire_timeout(Duration::from_secs(10)).await }
    });
    let keys = client.keys("gate").unwrap();
    let mut con = server.connection().unwrap();
    let within = tokio::time::Instant::now() + Duration::from_secs(5);
    while !redis::cmd("HEXISTS")
        .arg(keys.lock())
        .arg("waiting")
        .query::<bool>(&mut con)
        .unwrap()
    {
        assert!(
            tokio::time::Instant::now() < within,
            "the waiter never joined"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let owner = held.owner_token().as_str().to_string();
    redis::cmd("HDEL")
        .arg(keys.lock())
        .arg(&owner)
        .exec(&mut con)
        .unwrap();
    let before: Vec<String> = redis::cmd("HGETALL")
        .arg(keys.lock())
        .query(&mut con)
        .unwrap();
    let counter: i64 = redis::cmd("GET").arg(keys.fence()).query(&mut con).unwrap();
    let free = client.break_lock("gate").await.unwrap();
    assert_eq!(free.kind, None, "nobody holds it: {free:?}");
    let after: Vec<String> = redis::cmd("HGETALL")
        .arg(keys.lock())
        .query(&mut con)
        .unwrap();
    assert_eq!(after, before, "nothing written");
    let now: i64 = redis::cmd("GET").arg(keys.fence()).query(&mut con).unwrap();
    assert_eq!(now, counter, "the counter as it was");
    waiter.abort();
    drop(held);
}
