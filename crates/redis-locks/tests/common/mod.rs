//! Shared helpers of the integration tests: every test starts its own redis-server.
#![allow(dead_code)]

use std::time::Duration;

use redis_locks::{Client, ClientOptions, LockOptions};
use test_support::{ChildProcess, RedisServer};
use tokio::time::Instant;

/// A private server; panics with the reason when it cannot start (the test cannot run).
pub fn server() -> RedisServer {
    RedisServer::start().expect("start a private redis-server")
}

/// A client with short timeouts, so a fault shows quickly.
pub async fn client(server: &RedisServer) -> Client {
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .reconnect_attempts(1);
    Client::connect_with(&server.url(), options)
        .await
        .expect("connect to the private server")
}

/// A plain synchronous connection for checks made beside the library.
pub fn raw(server: &RedisServer) -> redis::Connection {
    server.connection().expect("raw connection")
}

/// Polls `condition` every 5 ms until it holds; false if `limit` passes first.
pub async fn eventually<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `key` exists, read over a fresh raw connection.
/// The server's clock in µs (`TIME`): scripts seed fencing tokens and time leases by it.
pub fn server_micros(con: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1_000_000 + micros
}

/// The `calls` of each of `commands` (as `INFO commandstats` names them, say `fcall` or
/// `client|getname`) that `server` has run, summed; zero for one that never ran.
pub fn command_calls(server: &RedisServer, commands: &[&str]) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut raw(server))
        .unwrap();
    commands
        .iter()
        .map(|command| {
            let prefix = format!("cmdstat_{command}:calls=");
            info.lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse::<u64>().unwrap())
        })
        .sum()
}

/// The server's clock in ms, as the scripts count leases and place leases.
pub fn server_ms(con: &mut redis::Connection) -> i64 {
    server_micros(con) / 1_000
}

/// Writes the hash `key` by hand, `fields` in one `HSET`, lasting 60 s (as a lock's hash
/// always has a TTL). For tests of more holders than the scripts would grant quickly.
pub fn put_hash(con: &mut redis::Connection, key: &str, fields: &[(String, String)]) {
    redis::cmd("HSET").arg(key).arg(fields).exec(con).unwrap();
    redis::cmd("PEXPIRE")
        .arg(key)
        .arg(60_000)
        .exec(con)
        .unwrap();
}

/// Writes a `Semaphore`'s hash by hand ([`put_hash`]), as `semaphore/permits.lua` lays it
/// out: N (`limit`), `holders` holders `holder-<i>` of one permit each whose leases end at
/// `ends` (server ms), and their count (`used`).
pub fn put_semaphore(con: &mut redis::Connection, key: &str, limit: u32, holders: u32, ends: i64) {
    let mut fields = vec![
        ("limit".to_string(), limit.to_string()),
        ("used".to_string(), holders.to_string()),
    ];
    fields.extend((0..holders).map(|i| (format!("holder-{i}"), format!("{ends} 1"))));
    put_hash(con, key, &fields);
}

pub fn exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut raw(server))
        .unwrap()
        == 1
}

/// Puts `waiter` alone in the line of the lock `name` (without a hash tag), its place leased
/// for `ms` and both line keys expiring then: a line that outlived its lock, as a `break`
/// leaves one.
pub fn put_line(con: &mut redis::Connection, name: &str, waiter: &str, ms: u64) {
    let (queue, places) = (format!("{{{name}}}:queue"), format!("{{{name}}}:places"));
    let until = server_ms(con) + ms as i64;
    redis::pipe()
        .cmd("ZADD")
        .arg(&queue)
        .arg(1)
        .arg(waiter)
        .cmd("ZADD")
        .arg(&places)
        .arg(until)
        .arg(waiter)
        .cmd("PEXPIRE")
        .arg(&queue)
        .arg(ms)
        .cmd("PEXPIRE")
        .arg(&places)
        .arg(ms)
        .exec(con)
        .unwrap();
}

/// The key's Redis type (`none` when absent).
pub fn key_type(server: &RedisServer, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query(&mut raw(server)).unwrap()
}

/// The scripts (`FCALL`, `EVALSHA`, `EVAL`) and the first attempts (each sends one `CLIENT
/// GETNAME`; no script does) that `server` has run.
pub fn scripts_and_first_attempts(server: &RedisServer) -> (u64, u64) {
    (
        command_calls(server, &["fcall", "evalsha", "eval"]),
        command_calls(server, &["client|getname"]),
    )
}

/// The key's remaining TTL in ms (-1 no expiry, -2 absent).
pub fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(&mut raw(server)).unwrap()
}

/// An environment variable the parent test set for a child process.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent test"))
}

/// The body of a child process (an `#[ignore]`d test run by `ChildProcess::spawn_test`): a
/// runtime, and a client connected to the parent's server (`CHILD_REDIS_URL`).
pub fn child_main<F, Fut>(body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = Client::connect(&env("CHILD_REDIS_URL")).await.unwrap();
        body(client).await;
    });
}

/// Asserts that `result` failed with `Error::NotHeld` for `reason`.
pub fn assert_not_held<T: std::fmt::Debug>(
    result: redis_locks::Result<T>,
    reason: redis_locks::LostReason,
) {
    match result {
        Err(redis_locks::Error::NotHeld { reason: got, .. }) => assert_eq!(got, reason),
        other => panic!("expected NotHeld({reason:?}), got {other:?}"),
    }
}

/// A raw connection subscribed to `channel`, whose reads give up after 300 ms: what the
/// scripts publish there is read with [`next_message`].
pub fn subscribed(server: &RedisServer, channel: &str) -> redis::Connection {
    let mut con = raw(server);
    con.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    redis::cmd("SUBSCRIBE").arg(channel).exec(&mut con).unwrap();
    con
}

/// The payload of the next message on a [`subscribed`] connection, or `None` if none came
/// within its read timeout (the connection cannot be read again after that: to show that
/// nothing more was published, use [`nothing_more`]).
pub fn next_message(con: &mut redis::Connection) -> Option<String> {
    let value: redis::Value = con.recv_response().ok()?;
    let parts: Vec<redis::Value> = redis::FromRedisValue::from_redis_value(value).ok()?;
    redis::FromRedisValue::from_redis_value(parts.get(2)?.clone()).ok()
}

/// Whether nothing was published on `channel` since the last message read on `con` (a
/// [`subscribed`] connection): a marker published now is the next message.
pub fn nothing_more(server: &RedisServer, con: &mut redis::Connection, channel: &str) -> bool {
    redis::cmd("PUBLISH")
        .arg(channel)
        .arg("marker")
        .exec(&mut raw(server))
        .unwrap();
    next_message(con).as_deref() == Some("marker")
}

pub fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let (_, count): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut raw(server))
        .unwrap();
    count
}

/// A lease of `lease_ms` that the watchdog renews.
pub fn renewed(lease_ms: u64) -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_millis(lease_ms))
        .watchdog(true)
}

/// A `lease`, and a 20 s retry delay: polling this slowly would fail any test that a waiter
/// passes only by being woken.
pub fn slow_polling(lease: Duration) -> LockOptions {
    LockOptions::default()
        .lease(lease)
        .retry_delay(Duration::from_secs(20))
}

/// The fencing prelude the library puts in front of the scripts that hand out tokens.
pub const FENCE_LUA: &str = include_str!("../../src/token/fence.lua");
/// The lock prelude (owner checks, the mark, the wake-up) the library puts in front of the
/// lock scripts.
pub const LOCK_LUA: &str = include_str!("../../src/wait/lock.lua");
/// The queue prelude (the queue of waiters, the handover), after the lock prelude in the
/// scripts that keep waiters in line.
pub const QUEUE_LUA: &str = include_str!("../../src/wait/queue.lua");

/// A script made as the library makes it: the preludes it calls, then its body.
pub fn lua(parts: &[&str]) -> redis::Script {
    redis::Script::new(&parts.join("\n"))
}

/// Waits (bounded) for the parent's `go` key, or the key named by the `GO_KEY` variable, so
/// that child processes start contending at one moment.
pub async fn wait_for_go(url: &str) {
    let go = std::env::var("GO_KEY").unwrap_or_else(|_| "go".into());
    let mut con = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let within = Instant::now() + Duration::from_secs(30);
    while redis::cmd("EXISTS")
        .arg(&go)
        .query_async::<i64>(&mut con)
        .await
        .unwrap()
        == 0
    {
        assert!(Instant::now() < within, "the parent never said {go}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Holds `guard` for a little work (so that overlaps would have room to show), records the
/// holding in `history` as `worker`'s, and releases.
pub async fn record_hold(
    guard: redis_locks::MutexGuard,
    worker: &str,
    history: &test_support::history::History,
) {
    let start = test_support::history::now_nanos();
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    history.record(test_support::history::Interval {
        worker: worker.to_string(),
        token: guard.fencing_token().get(),
        start,
        end: test_support::history::now_nanos(),
    });
    guard.release().await.unwrap();
}

/// In a child process: prints its recorded holdings (exclusive, then shared) for the parent,
/// then `done`.
pub fn report_holds(history: &test_support::history::History) {
    for interval in history.intervals() {
        println!("interval {}", serde_json::to_string(&interval).unwrap());
    }
    for interval in history.shared_intervals() {
        println!("shared {}", serde_json::to_string(&interval).unwrap());
    }
    println!("done");
}

/// In the parent: a child's exclusive holdings, once it said `done` (within two minutes);
/// exactly `expected` of them.
pub fn holds_of(
    child: &mut test_support::ChildProcess,
    expected: usize,
) -> Vec<test_support::history::Interval> {
    let done =
        tokio::task::block_in_place(|| child.wait_for_line("done", Duration::from_secs(120)));
    assert!(done.is_some(), "child finished its acquisitions");
    let intervals = reported(child, "interval ");
    assert_eq!(intervals.len(), expected);
    intervals
}

/// In the parent, after [`holds_of`]: the child's shared holdings; exactly `expected`.
pub fn shared_holds_of(
    child: &mut test_support::ChildProcess,
    expected: usize,
) -> Vec<test_support::history::Interval> {
    let intervals = reported(child, "shared ");
    assert_eq!(intervals.len(), expected);
    intervals
}

/// The intervals a child printed after `marker`.
fn reported(
    child: &mut test_support::ChildProcess,
    marker: &str,
) -> Vec<test_support::history::Interval> {
    child
        .take_lines(marker)
        .iter()
        .map(|line| serde_json::from_str(&line[marker.len()..]).unwrap())
        .collect()
}

/// Records one holding by `worker` of a lock with `token`, held for a few yields.
pub async fn hold_recorded(
    history: &test_support::history::History,
    worker: &str,
    token: redis_locks::FencingToken,
) {
    let start = test_support::history::now_nanos();
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    history.record(test_support::history::Interval {
        worker: worker.to_string(),
        token: token.get(),
        start,
        end: test_support::history::now_nanos(),
    });
}

/// `count` acquisitions of `name` as `kind` (`mutex`, `fair`, `reentrant`, `rwlock` for its
/// writes, `semaphore` with one permit, or `multilock` over it and a second name) by `worker`, each recorded in `history`.
pub async fn contend_as(
    client: Client,
    kind: String,
    name: String,
    worker: String,
    count: usize,
    history: std::sync::Arc<test_support::history::History>,
) {
    let name = &name;
    let options = LockOptions::default().lease(Duration::from_secs(10));
    for _ in 0..count {
        match kind.as_str() {
            "mutex" => {
                let guard = client
                    .mutex_with(name, options.clone())
                    .unwrap()
                    .lock()
                    .await
                    .unwrap();
                hold_recorded(&history, &worker, guard.fencing_token()).await;
                guard.release().await.unwrap();
            }
            "fair" => {
                let guard = client.fair_mutex(name).unwrap().lock().await.unwrap();
                hold_recorded(&history, &worker, guard.fencing_token()).await;
                guard.release().await.unwrap();
            }
            "reentrant" => {
                let guard = client.reentrant_mutex(name).unwrap().lock().await.unwrap();
                hold_recorded(&history, &worker, guard.fencing_token()).await;
                guard.release().await.unwrap();
            }
            "rwlock" => {
                let guard = client.rwlock(name).unwrap().write().await.unwrap();
                hold_recorded(&history, &worker, guard.fencing_token()).await;
                guard.release().await.unwrap();
            }
            "semaphore" => {
                // One permit: exclusive, so the one checker applies.
                let semaphore = client.semaphore(name, 1).unwrap();
                let guard = semaphore.acquire().await.unwrap();
                hold_recorded(&history, &worker, guard.fencing_token()).await;
                guard.release().await.unwrap();
            }
            "multilock" => {
                // The name and a second one (another slot, on a cluster, as often as not);
                // the name's own token is recorded.
                let second = format!("{name}:second");
                let lock = client.multi_lock([name.as_str(), &second]).unwrap();
                let guard = lock.lock().await.unwrap();
                hold_recorded(&history, &worker, guard.fencing_token(name).unwrap()).await;
                guard.release().await.unwrap();
            }
            other => panic!("no primitive {other}"),
        }
    }
}

/// Starts `count` children running the `#[ignore]`d test `name` (with `CHILD_REDIS_URL` the
/// server's URL, and `envs`), and waits (bounded) until each has connected (it prints
/// `ready`). Blocking: from a multi-threaded async test, call it in `block_in_place`.
pub fn children(
    server: &RedisServer,
    name: &str,
    count: usize,
    envs: &[(&str, &str)],
) -> Vec<ChildProcess> {
    let url = server.url();
    let mut all_envs = vec![("CHILD_REDIS_URL", url.as_str())];
    all_envs.extend_from_slice(envs);
    let mut children: Vec<ChildProcess> = (0..count)
        .map(|_| ChildProcess::spawn_test(name, &all_envs).unwrap())
        .collect();
    for child in &mut children {
        assert!(
            child
                .wait_for_line("ready", Duration::from_secs(30))
                .is_some(),
            "child connected"
        );
    }
    children
}

/// Sets the `go` key the children wait for ([`wait_for_go`]): they start at one moment.
pub fn say_go(server: &RedisServer) {
    say(server, "go");
}

/// Sets `key` on `server` (a `GO_KEY` of [`wait_for_go`]).
pub fn say(server: &RedisServer, key: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(1)
        .exec(&mut raw(server))
        .unwrap();
}

/// Records one holding that began at `start` and ends now, as `worker`'s with `token`:
/// shared (a read) or exclusive.
pub fn record_since(
    history: &test_support::history::History,
    worker: &str,
    token: u64,
    start: u64,
    shared: bool,
) {
    let interval = test_support::history::Interval {
        worker: worker.to_string(),
        token,
        start,
        end: test_support::history::now_nanos(),
    };
    if shared {
        history.record_shared(interval);
    } else {
        history.record(interval);
    }
}

/// How many times the holder changed between a process (a worker named `process...`) and a
/// task or thread of the test: how much they competed.
pub fn process_switches(history: &test_support::history::History) -> usize {
    let mut sorted = history.intervals();
    sorted.sort_by_key(|i| i.start);
    sorted
        .windows(2)
        .filter(|w| w[0].worker.starts_with("process") != w[1].worker.starts_with("process"))
        .count()
}

/// Asserts that no two exclusive holdings of `report` overlapped and that tokens grew.
pub fn assert_exclusive(report: &test_support::history::Report) {
    assert!(
        report.overlaps.is_empty(),
        "overlaps: {:?}",
        report.overlaps
    );
    assert!(
        report.token_regressions.is_empty(),
        "regressions: {:?}",
        report.token_regressions
    );
}
