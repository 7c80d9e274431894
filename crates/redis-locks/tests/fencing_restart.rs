//! Fencing tokens keep growing when the counter comes back OLD (a restart from an older RDB
//! snapshot, an AOF that lost its tail, a failover to a replica that lagged), and a grant
//! that comes back after its lease is never handed out already lost.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{client, eventually, raw};
use redis::Commands;
use redis_locks::{Client, Error, FencingToken, LockOptions, LostReason, MutexGuard};
use test_support::RedisServer;
use tokio::time::Instant;

/// Takes and releases `name` `n` times; returns the tokens.
async fn grants(client: &Client, name: &str, n: usize) -> Vec<u64> {
    let mutex = client.mutex(name).unwrap();
    let mut tokens = Vec::new();
    for _ in 0..n {
        let guard = mutex.lock().await.unwrap();
        tokens.push(guard.fencing_token().get());
        guard.release().await.unwrap();
    }
    tokens
}

/// A server that keeps its files in `dir`, with `extra` arguments.
fn persistent(dir: &Path, extra: &[&str]) -> RedisServer {
    let dir = dir.to_str().unwrap();
    let mut args = vec!["--dir", dir, "--dbfilename", "dump.rdb"];
    args.extend_from_slice(extra);
    RedisServer::start_with_args(&args).expect("start a persistent redis-server")
}

/// A client that waits out the reconnect after a restart: the first requests may fail.
async fn first_token_after(client: &Client, name: &str) -> u64 {
    let mutex = client.mutex(name).unwrap();
    for _ in 0..50 {
        match mutex.lock_timeout(Duration::from_secs(2)).await {
            Ok(guard) => {
                let token = guard.fencing_token().get();
                guard.release().await.unwrap();
                return token;
            }
            Err(err) if err.is_connection() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("{err}"),
        }
    }
    panic!("no grant after the restart");
}

#[tokio::test]
async fn tokens_after_a_restart_from_an_older_snapshot_exceed_every_token_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = persistent(dir.path(), &[]);
    let client = client(&server).await;
    let mut before = grants(&client, "nightly", 2).await;
    let _: () = redis::cmd("SAVE").query(&mut raw(&server)).unwrap();
    // These grants are not in the snapshot: the counter will come back behind them.
    before.extend(grants(&client, "nightly", 3).await);
    server.restart().unwrap();
    let counter: u64 = raw(&server).get("{nightly}:fence").unwrap();
    assert!(
        counter < before[4],
        "the snapshot brought back an old counter"
    );
    let highest = *before.iter().max().unwrap();
    // A new client, and the old one once it has reconnected.
    let fresh = common::client(&server).await;
    let after = grants(&fresh, "nightly", 2).await;
    assert!(after[0] > highest, "{after:?} after {before:?}");
    assert!(after[1] > after[0]);
    let reconnected = first_token_after(&client, "nightly").await;
    assert!(reconnected > after[1], "{reconnected} after {after:?}");
}

#[tokio::test]
async fn tokens_after_an_aof_that_lost_its_tail_exceed_every_token_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = persistent(
        dir.path(),
        &["--appendonly", "yes", "--appendfsync", "always"],
    );
    let client = client(&server).await;
    let mut before = grants(&client, "aof", 2).await;
    // The tail that `appendfsync everysec` can lose in a crash: cut it off by hand.
    let incr = incr_aof(dir.path());
    let kept = std::fs::metadata(&incr).unwrap().len();
    before.extend(grants(&client, "aof", 3).await);
    server.kill();
    let file = std::fs::OpenOptions::new().write(true).open(&incr).unwrap();
    file.set_len(kept).unwrap();
    drop(file);
    server.restart().unwrap();
    let counter: u64 = raw(&server).get("{aof}:fence").unwrap();
    assert_eq!(counter, before[1], "the AOF replayed up to the cut");
    let fresh = common::client(&server).await;
    let after = grants(&fresh, "aof", 1).await;
    assert!(
        after[0] > *before.iter().max().unwrap(),
        "{after:?} after {before:?}"
    );
}

/// The AOF file that takes new writes (Redis 7 keeps a base file and an incremental one).
fn incr_aof(dir: &Path) -> std::path::PathBuf {
    let aof_dir = dir.join("appendonlydir");
    std::fs::read_dir(&aof_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_string_lossy().ends_with(".incr.aof"))
        .expect("an incremental AOF file")
}

#[tokio::test]
async fn after_a_failover_to_a_lagging_replica_tokens_grow_and_the_old_holder_is_fenced_off() {
    let master = common::server();
    let replica = common::server();
    let mut on_replica = raw(&replica);
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query(&mut on_replica)
        .unwrap();
    let old = client(&master).await;
    let before = grants(&old, "orders", 2).await;
    let synced = eventually(Duration::from_secs(10), || async {
        raw(&replica)
            .get::<_, Option<u64>>("{orders}:fence")
            .unwrap()
            == Some(before[1])
    })
    .await;
    assert!(synced, "the replica caught up");
    // Cut the link: the replica now follows a master that does not exist, keeping its data.
    let dead_port = {
        let mut dead = RedisServer::start().unwrap();
        let port = dead.port();
        dead.kill();
        port
    };
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(dead_port)
        .query(&mut on_replica)
        .unwrap();
    // The master goes on granting; the last holder keeps the lock and writes with its token.
    let mut tokens = before.clone();
    tokens.extend(grants(&old, "orders", 2).await);
    let old_holder = old.mutex("orders").unwrap().lock().await.unwrap();
    let old_token = old_holder.fencing_token();
    assert!(old_token.get() > tokens[3]);
    // Failover by hand: the lagging replica becomes the master, and clients move to it.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut on_replica)
        .unwrap();
    let counter: u64 = raw(&replica).get("{orders}:fence").unwrap();
    assert!(counter < old_token.get(), "the replica's counter is behind");
    let moved = common::client(&replica).await;
    let new_holder = moved.mutex("orders").unwrap().lock().await.unwrap();
    assert!(
        new_holder.fencing_token() > old_token,
        "{} after {old_token}",
        new_holder.fencing_token()
    );
    // The resource lives on the new master too: the new holder writes, then the old holder
    // (who still believes it holds the lock) is refused.
    let report = moved.fenced_key("report").unwrap();
    report.set(new_holder.fencing_token(), "new").await.unwrap();
    let stale = report.set(old_token, "old").await.unwrap_err();
    assert!(matches!(stale, Error::StaleToken { .. }), "{stale}");
    assert_eq!(report.get().await.unwrap().as_deref(), Some("new"));
    assert!(report.highest_token().await.unwrap() == Some(new_holder.fencing_token()));
    new_holder.release().await.unwrap();
    drop(old_holder);
}

/// A holder with a 1.5 s lease, and a waiter (300 ms lease, `budget`) that sends its attempt
/// when that lease ends, while the server stalls for `stall_for` seconds (more than 1.5), so
/// its grant comes back after its own lease. Returns the holder and what the waiter got.
async fn wait_through_a_stall(
    server: &RedisServer,
    name: &str,
    budget: Duration,
    stall_for: f64,
) -> (MutexGuard, redis_locks::Result<MutexGuard>) {
    let client = patient(server).await;
    let lease = |ms| LockOptions::default().lease(Duration::from_millis(ms));
    let holder = client
        .mutex_with(name, lease(HOLDER_LEASE_MS))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let taken = Instant::now();
    let waiter = tokio::spawn({
        let mutex = client.mutex_with(name, lease(300)).unwrap();
        async move { mutex.lock_timeout(budget).await }
    });
    // Marked: the waiter's attempt found the lock held, and it now sleeps until the holder's
    // lease ends, which must come during the stall for the test to mean anything.
    wait_for_mark(server, name).await;
    stall(server, stall_for).await;
    assert_stall_covers_the_lease_end(taken);
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finished")
        .unwrap();
    (holder, got)
}

#[tokio::test]
async fn a_grant_delayed_past_its_lease_on_the_waiting_path_is_asked_again_not_handed_out_lost() {
    let server = debuggable();
    let (holder, got) = wait_through_a_stall(&server, "slow", Duration::from_secs(20), 2.2).await;
    let guard = got.expect("the late grant was asked again and kept");
    assert_eq!(
        guard.lost_reason(),
        None,
        "a guard is never handed out lost"
    );
    assert!(guard.lease_remaining() > Duration::ZERO);
    assert!(guard.fencing_token() > holder.fencing_token());
    let value: String = raw(&server).get("slow").unwrap();
    assert!(value.starts_with(guard.owner_token().as_str()));
    guard.release().await.unwrap();
    drop(holder);
}

#[tokio::test]
async fn a_grant_delayed_past_its_lease_and_the_wait_budget_is_given_back() {
    let server = debuggable();
    let (_holder, got) =
        wait_through_a_stall(&server, "late", Duration::from_millis(1_800), 2.2).await;
    let err = got.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("too slowly"), "{err}");
    // The grant was given back, not left to its lease.
    // Given back before the error returned, not left to run out its 300 ms lease.
    assert!(
        !common::exists(&server, "late"),
        "the late grant was released"
    );
}

#[tokio::test]
async fn a_fair_grant_delayed_past_its_lease_is_asked_again_not_handed_out_lost() {
    let server = debuggable();
    let client = patient(&server).await;
    let lease = |ms| LockOptions::default().lease(Duration::from_millis(ms));
    let holder = client
        .fair_mutex_with("fair", lease(HOLDER_LEASE_MS))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let taken = Instant::now();
    let waiter = tokio::spawn({
        let mutex = client.fair_mutex_with("fair", lease(300)).unwrap();
        async move { mutex.lock_timeout(Duration::from_secs(20)).await }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        raw(&server).zcard::<_, u64>("{fair}:queue").unwrap_or(0) == 1
    })
    .await;
    assert!(queued, "the waiter queued");
    stall(&server, 2.2).await;
    assert_stall_covers_the_lease_end(taken);
    let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter finished")
        .unwrap()
        .expect("the late grant was asked again and kept");
    assert_eq!(
        guard.lost_reason(),
        None,
        "a guard is never handed out lost"
    );
    assert!(guard.fencing_token() > holder.fencing_token());
    guard.release().await.unwrap();
    drop(holder);
}

/// A client that waits out the stalls below (the default test client gives up after 1 s).
async fn patient(server: &RedisServer) -> Client {
    let options = redis_locks::ClientOptions::default().response_timeout(Duration::from_secs(5));
    Client::connect_with(&server.url(), options).await.unwrap()
}

/// The lease of the holder a waiter waits for in the stall tests.
const HOLDER_LEASE_MS: u64 = 1_500;

/// Fails (rather than pass without testing anything) when the stall began after the holder's
/// lease ended: then the waiter's attempt was not delayed by it.
fn assert_stall_covers_the_lease_end(taken: Instant) {
    assert!(
        taken.elapsed() < Duration::from_millis(HOLDER_LEASE_MS - 200),
        "the stall began {:?} after the holder's grant, too late to delay the waiter",
        taken.elapsed()
    );
}

/// Waits until a waiter has marked the lock key (its attempt found the lock held).
async fn wait_for_mark(server: &RedisServer, key: &str) {
    let marked = eventually(Duration::from_secs(10), || async {
        let value: String = raw(server).get(key).unwrap_or_default();
        value.ends_with("+w")
    })
    .await;
    assert!(marked, "the waiter marked the lock");
}

/// Stalls the server for `seconds` (`DEBUG SLEEP` from another thread); returns once the
/// stall has begun.
async fn stall(server: &RedisServer, seconds: f64) {
    // Connect first: a connection made during the stall would wait it out.
    let mut probe = raw(server);
    probe
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut con = raw(server);
    std::thread::spawn(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query(&mut con);
    });
    // The stall has begun when a PING no longer gets through at once.
    let begun = eventually(Duration::from_secs(5), || {
        let answered = redis::cmd("PING").query::<String>(&mut probe).is_ok();
        async move { !answered }
    })
    .await;
    assert!(begun, "the server stalled");
}

/// A server that accepts `DEBUG` (Redis 7 refuses it by default).
fn debuggable() -> RedisServer {
    RedisServer::start_with_args(&["--enable-debug-command", "yes"]).expect("start a redis-server")
}

#[tokio::test]
async fn a_semaphore_first_attempt_delayed_past_its_lease_is_numbered_again_not_handed_out_lost() {
    let server = debuggable();
    let client = patient(&server).await;
    let lease = LockOptions::default().lease(Duration::from_millis(300));
    let semaphore = client.semaphore_with("permit", 2, lease).unwrap();
    late_first_attempt(&server, async || {
        let guard = semaphore.acquire().await.unwrap();
        let kind = common::key_type(&server, "permit");
        let facts = (
            guard.fencing_token(),
            guard.lost_reason(),
            guard.lease_remaining(),
        );
        guard.release().await.unwrap();
        (facts, kind)
    })
    .await;
}

#[tokio::test]
async fn a_read_first_attempt_delayed_past_its_lease_is_numbered_again_not_handed_out_lost() {
    let server = debuggable();
    let client = patient(&server).await;
    let lease = LockOptions::default().lease(Duration::from_millis(300));
    let lock = client.rwlock_with("read", lease).unwrap();
    late_first_attempt(&server, async || {
        let guard = lock.read().await.unwrap();
        let kind = common::key_type(&server, "read");
        let facts = (
            guard.fencing_token(),
            guard.lost_reason(),
            guard.lease_remaining(),
        );
        guard.release().await.unwrap();
        (facts, kind)
    })
    .await;
}

/// A first attempt (of a lock that keeps a lone holder as a plain key, with a 300 ms lease)
/// whose pipeline is sent during a stall longer than the lease: `take` (which acquires, says
/// the guard's token, loss and lease left and the lock key's type while held, and releases)
/// gets a grant numbered again by the script, never one handed out lost.
async fn late_first_attempt(
    server: &RedisServer,
    take: impl AsyncFn() -> ((FencingToken, Option<LostReason>, Duration), String),
) {
    // The first grant on the connection vouches for the counter there: a first attempt in
    // time is granted by its pipeline.
    let ((first_token, ..), _) = take().await;
    // The next one's grant comes back late, so the script numbers it again (a re-grant,
    // with a lease from now), turning the plain key into the hash.
    stall(server, 1.0).await;
    let sent = Instant::now();
    let ((token, lost, left), kind) = take().await;
    assert!(
        sent.elapsed() > Duration::from_millis(300),
        "the stall delayed it"
    );
    assert_eq!(lost, None, "a guard is never handed out lost");
    assert!(left > Duration::ZERO);
    assert!(token > first_token);
    assert_eq!(
        kind, "hash",
        "the script turned the plain key into the hash"
    );
}
