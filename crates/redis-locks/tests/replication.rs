//! Replicated acquisition (`LeaseOptions::replication`): a grant counts once `WAIT` (or
//! `WAITAOF`) says the replicas have it, on a real master with a real replica.

mod common;

use std::time::Duration;

use redis_locks::{Client, ClientOptions, Error, LockOptions, LostReason, Replication};
use test_support::RedisServer;

use common::eventually;

/// A master and one replica of it (both with `args`), the replica acknowledging writes.
fn master_and_replica(args: &[&str]) -> (RedisServer, RedisServer) {
    RedisServer::start_master_and_replica(args).expect("start a master and its replica")
}

fn flavor() -> test_support::ServerFlavor {
    test_support::server_flavor().expect("the server program tells its version")
}

async fn client(server: &RedisServer) -> Client {
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .reconnect_attempts(1);
    Client::connect_with(&server.url(), options).await.unwrap()
}

fn wait_for(replicas: u32) -> LockOptions {
    LockOptions::default().replication(Replication::Wait {
        replicas,
        timeout: Duration::from_millis(200),
    })
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection().unwrap())
        .unwrap()
}

#[tokio::test]
async fn every_primitive_reports_the_replica_that_acknowledged() {
    let (master, replica) = master_and_replica(&[]);
    let client = client(&master).await;

    let mutex = client.mutex_with("repl:mutex", wait_for(1)).unwrap();
    let guard = mutex.lock().await.unwrap();
    assert_eq!(guard.replicas(), Some(1));
    // Acknowledged means the replica has it: the owner token is there, not only on the master.
    assert_eq!(
        get(&replica, "repl:mutex").as_deref(),
        Some(guard.owner_token().as_str())
    );
    guard.release().await.unwrap();

    let fair = client.fair_mutex_with("repl:fair", wait_for(1)).unwrap();
    let guard = fair.try_lock().await.unwrap();
    assert_eq!(guard.replicas(), Some(1));
    guard.release().await.unwrap();

    let rwlock = client.rwlock_with("repl:rw", wait_for(1)).unwrap();
    let read = rwlock.read().await.unwrap();
    assert_eq!(read.replicas(), Some(1));
    read.release().await.unwrap();
    let write = rwlock.write().await.unwrap();
    assert_eq!(write.replicas(), Some(1));
    write.release().await.unwrap();

    let reentrant = client
        .reentrant_mutex_with("repl:reentrant", wait_for(1))
        .unwrap();
    let guard = reentrant.lock().await.unwrap();
    assert_eq!(guard.replicas(), Some(1));
    guard.release().await.unwrap();

    let semaphore = client
        .semaphore_with("repl:semaphore", 2, wait_for(1))
        .unwrap();
    let permit = semaphore.acquire().await.unwrap();
    assert_eq!(permit.replicas(), Some(1));
    permit.extend(Duration::from_secs(20)).await.unwrap();
    permit.release().await.unwrap();

    let multi = client
        .multi_lock_with(["repl:a", "repl:b"], wait_for(1))
        .unwrap();
    let both = multi.lock().await.unwrap();
    assert_eq!(both.replicas(), Some(1));
    // Acknowledged: the replica has both locks.
    assert!(get(&replica, "repl:a").is_some() && get(&replica, "repl:b").is_some());
    both.release().await.unwrap();

    // Without a policy, nothing is asked and nothing is reported.
    let plain = client.mutex("repl:plain").unwrap().lock().await.unwrap();
    assert_eq!(plain.replicas(), None);
    plain.release().await.unwrap();
}

#[tokio::test]
async fn a_grant_the_replica_does_not_acknowledge_is_refused_and_released() {
    let (master, replica) = master_and_replica(&[]);
    let client = client(&master).await;
    replica.pause();

    let mutex = client.mutex_with("repl:paused", wait_for(1)).unwrap();
    match mutex.try_lock().await {
        Err(Error::NotReplicated {
            wanted: 1,
            acked: 0,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    // The grant was released: no key is left on the master.
    assert!(!common::exists(&master, "repl:paused"));

    // The same through the waiting path, and for a hash-of-holds lock.
    assert!(matches!(
        mutex.lock_timeout(Duration::from_secs(2)).await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(!common::exists(&master, "repl:paused"));
    let rwlock = client.rwlock_with("repl:paused-rw", wait_for(1)).unwrap();
    assert!(matches!(
        rwlock.write().await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(!common::exists(&master, "repl:paused-rw"));
    let semaphore = client
        .semaphore_with("repl:paused-sem", 1, wait_for(1))
        .unwrap();
    assert!(matches!(
        semaphore.acquire().await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(!common::exists(&master, "repl:paused-sem"));
    let multi = client
        .multi_lock_with(["repl:paused-a", "repl:paused-b"], wait_for(1))
        .unwrap();
    assert!(matches!(
        multi.lock().await,
        Err(Error::NotReplicated { .. })
    ));
    assert!(!common::exists(&master, "repl:paused-a"));

    // Asking for more replicas than there are fails the same way, the replica live again.
    replica.resume();
    let two = client.mutex_with("repl:two", wait_for(2)).unwrap();
    assert!(matches!(
        two.try_lock().await,
        Err(Error::NotReplicated {
            wanted: 2,
            acked: 1,
            ..
        })
    ));
    assert!(!common::exists(&master, "repl:two"));
}

#[tokio::test]
async fn renewals_that_are_not_replicated_end_the_lease() {
    let (master, replica) = master_and_replica(&[]);
    let client = client(&master).await;
    let options = LockOptions::default()
        .lease(Duration::from_millis(600))
        .watchdog(true)
        .replication(Replication::Wait {
            replicas: 1,
            timeout: Duration::from_millis(50),
        });
    let guard = client
        .mutex_with("repl:renew", options)
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert_eq!(guard.replicas(), Some(1));
    // Renewed, and replicated, for longer than the lease.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(guard.lost_reason(), None);
    replica.pause();
    // The master still extends the key, but no renewal counts: the guard's lease ends.
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolves once the lease runs out");
    assert_eq!(reason, LostReason::LeaseEnded);
    replica.resume();
}

#[tokio::test]
async fn waitaof_works_where_the_server_has_it_and_is_refused_at_once_where_not() {
    let flavor = flavor();
    let (master, _replica) =
        master_and_replica(&["--appendonly", "yes", "--appendfsync", "always"]);
    // A replica reports what its disk has about once a second: give it that.
    let options = ClientOptions::default().response_timeout(Duration::from_secs(3));
    let client = Client::connect_with(&master.url(), options).await.unwrap();
    let options = LockOptions::default().replication(Replication::WaitAof {
        local: true,
        replicas: 1,
        timeout: Duration::from_millis(2500),
    });
    let mutex = client.mutex_with("repl:aof", options).unwrap();
    let started = std::time::Instant::now();
    let outcome = mutex.try_lock().await;
    if flavor.has_waitaof() {
        let guard = outcome.expect("WAITAOF on a server that has it");
        assert_eq!(guard.replicas(), Some(1));
        guard.release().await.unwrap();
    } else {
        match outcome {
            Err(Error::Unsupported { what, .. }) => assert!(what.contains("WAITAOF"), "{what}"),
            other => panic!("expected Unsupported on {flavor:?}, got {other:?}"),
        }
        // At once, not after the timeout; and the grant is not left behind.
        assert!(started.elapsed() < Duration::from_millis(400));
        assert!(
            eventually(Duration::from_secs(2), || async {
                !common::exists(&master, "repl:aof")
            })
            .await
        );
    }
}

#[tokio::test]
async fn policies_that_cannot_work_are_refused_when_the_handle_is_made() {
    let server = common::server();
    let client = client(&server).await;
    let policy = |replicas, millis| {
        LockOptions::default().replication(Replication::Wait {
            replicas,
            timeout: Duration::from_millis(millis),
        })
    };
    assert!(matches!(
        client.mutex_with("bad", policy(1, 0)),
        Err(Error::InvalidDuration { .. })
    ));
    assert!(matches!(
        client.mutex_with("bad", policy(0, 100)),
        Err(Error::InvalidReplication { .. })
    ));
    // Not under the client's response timeout (1 s): the reply would be given up first.
    assert!(matches!(
        client.mutex_with(
            "bad",
            policy(1, 1500)
                .lease(Duration::from_secs(30))
                .watchdog(true)
        ),
        Err(Error::InvalidDuration { .. })
    ));
    // Not under a third of the lease: a renewal waiting for it could land too late.
    assert!(matches!(
        client.fair_mutex_with("bad", policy(1, 200).lease(Duration::from_millis(500))),
        Err(Error::InvalidDuration { .. })
    ));
    // A Redlock's nodes have no replicas to wait for.
    let options = redis_locks::RedlockOptions::default().lock_options(policy(1, 100));
    assert!(matches!(
        redis_locks::Redlock::with_options(std::slice::from_ref(&client), "bad", options),
        Err(Error::Unsupported { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_slow_replica_delays_no_other_lock_of_the_client() {
    let (master, replica) = master_and_replica(&[]);
    let client = client(&master).await;
    replica.pause();
    let replicated = client
        .mutex_with(
            "repl:slow",
            LockOptions::default().replication(Replication::Wait {
                replicas: 1,
                timeout: Duration::from_millis(800),
            }),
        )
        .unwrap();
    let waiting = tokio::spawn(async move { replicated.try_lock().await });
    // The replicated acquisition is waiting for the paused replica (its WAIT was sent) ...
    assert!(
        eventually(Duration::from_secs(2), || async {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut master.connection().unwrap())
                .unwrap();
            clients.contains("cmd=wait")
        })
        .await,
        "the WAIT never reached the master"
    );
    // ... and meanwhile a plain lock of the same client is taken and released: its requests
    // do not queue behind the WAIT.
    let plain = client.mutex("repl:unrelated").unwrap();
    plain.try_lock().await.unwrap().release().await.unwrap();
    assert!(
        !waiting.is_finished(),
        "the plain lock came back only after the WAIT had returned"
    );
    assert!(matches!(
        waiting.await.unwrap(),
        Err(Error::NotReplicated { .. })
    ));
    replica.resume();
}
