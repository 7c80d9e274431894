//! Semaphore: never more than N permits held at once, across tasks and processes; leased
//! permits come back when a crashed holder's lease ends, not before and not never; first
//! come, first served, so a weighted acquisition is not starved; bad input is a typed error.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{child_main, children, client, env, eventually, raw, say_go, server, wait_for_go};
use redis_locks::{Client, Error, LockOptions, LostReason};
use test_support::ChildProcess;
use test_support::history::{Interval, check_permits, now_nanos};
use tokio::time::Instant;

const PERMITS: u32 = 4;
const TASKS: usize = 8;
const PER_TASK: usize = 40;
const PROCESSES: usize = 2;
const PER_PROCESS_TASK: usize = 40;

fn contention_options() -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(5))
}

/// `count` acquisitions of a permit of `name`, each held for about a millisecond and
/// recorded with its token.
async fn take_permits(
    client: Client,
    name: &str,
    worker: String,
    count: usize,
) -> Vec<(Interval, u32)> {
    let semaphore = client
        .semaphore_with(name, PERMITS, contention_options())
        .unwrap();
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let guard = tokio::time::timeout(Duration::from_secs(60), semaphore.acquire())
            .await
            .expect("a permit within a minute")
            .unwrap();
        let start = now_nanos();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let end = now_nanos();
        held.push((
            Interval {
                worker: worker.clone(),
                token: guard.fencing_token().get(),
                start,
                end,
            },
            guard.permits(),
        ));
        guard.release().await.unwrap();
    }
    held
}

#[test]
#[ignore = "runs only as a child process of never_more_than_n_holders_across_tasks_and_processes"]
fn permit_taker_child() {
    child_main(|client| async move {
        println!("ready");
        wait_for_go(&env("CHILD_REDIS_URL")).await;
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let worker = format!("process-{}-{i}", std::process::id());
                tokio::spawn(take_permits(
                    client.clone(),
                    "pool",
                    worker,
                    PER_PROCESS_TASK,
                ))
            })
            .collect();
        for task in tasks {
            for (interval, permits) in task.await.unwrap() {
                println!(
                    "permit {permits} {}",
                    serde_json::to_string(&interval).unwrap()
                );
            }
        }
        println!("done");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_n_holders_across_tasks_and_processes() {
    let server = server();
    let mut children =
        tokio::task::block_in_place(|| children(&server, "permit_taker_child", PROCESSES, &[]));
    let client = client(&server).await;
    say_go(&server);
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            tokio::spawn(take_permits(
                client.clone(),
                "pool",
                format!("task-{i}"),
                PER_TASK,
            ))
        })
        .collect();
    let mut holdings = Vec::new();
    for task in tasks {
        holdings.extend(task.await.unwrap());
    }
    for child in &mut children {
        let done =
            tokio::task::block_in_place(|| child.wait_for_line("done", Duration::from_secs(120)));
        assert!(done.is_some(), "child finished");
        for line in child.take_lines("permit ") {
            let (permits, json) = line["permit ".len()..].split_once(' ').unwrap();
            holdings.push((
                serde_json::from_str(json).unwrap(),
                permits.parse().unwrap(),
            ));
        }
    }
    // 16 tasks at least, over three processes.
    const { assert!(TASKS * (1 + PROCESSES) >= 16) };
    assert_eq!(
        holdings.len(),
        TASKS * PER_TASK + PROCESSES * TASKS * PER_PROCESS_TASK
    );
    let report = check_permits(holdings, PERMITS);
    eprintln!("{report}");
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(
        report.most_at_once, PERMITS,
        "all {PERMITS} permits were in use at once at some point"
    );
    // Nothing is left behind: the permits are all free again, nobody waits.
    let state = client
        .semaphore("pool", PERMITS)
        .unwrap()
        .state()
        .await
        .unwrap();
    assert!(state.holders.is_empty() && state.waiting == 0, "{state:?}");
}

#[tokio::test]
async fn permits_are_counted_tokens_grow_per_grant_and_a_release_frees() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("counted", 3).unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 3);
    let one = semaphore.acquire().await.unwrap();
    let two = semaphore.acquire_many(2).await.unwrap();
    assert_eq!((one.permits(), two.permits()), (1, 2));
    assert!(two.fencing_token() > one.fencing_token());
    assert_eq!(semaphore.available().await.unwrap(), 0);
    let err = semaphore.try_acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Held {
                retry_after: Some(_),
                ..
            }
        ),
        "{err}"
    );
    let state = semaphore.state().await.unwrap();
    assert_eq!(state.permits, Some(3));
    assert_eq!(state.in_use(), 3);
    assert_eq!(state.holders.len(), 2);
    // The refused try's first attempt advanced the counter too (tokens only need to grow
    // from one grant to the next); it never falls behind a grant.
    assert!(
        state.fencing_counter >= Some(two.fencing_token()),
        "{state:?}"
    );
    assert!(
        state
            .holders
            .iter()
            .all(|holder| holder.lease_remaining > Duration::from_secs(25))
    );
    let two_token = two.fencing_token();
    two.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 2);
    let three = semaphore.try_acquire_many(2).await.unwrap();
    assert!(three.fencing_token() > two_token);
    one.release().await.unwrap();
    three.release().await.unwrap();
    // Nobody holds or waits: nothing is left on the server but the counter and its epochs,
    // which expire an hour after the script's last grant.
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut raw(&server))
        .unwrap();
    keys.sort();
    assert_eq!(
        keys,
        vec!["{counted}:epoch".to_string(), "{counted}:fence".to_string()],
        "only the counter and its epochs stay"
    );
    let left: i64 = redis::cmd("PTTL")
        .arg("{counted}:epoch")
        .query(&mut raw(&server))
        .unwrap();
    assert!(left > 0 && left <= 3_600_000, "{left}");
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_and_waits_for_no_lease() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let held = holder_client.semaphore("woken", 1).unwrap();
    let guard = held.acquire().await.unwrap();
    let waiter = waiter_client.semaphore("woken", 1).unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            held.state().await.unwrap().waiting == 1
        })
        .await
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the release, not by the 30 s lease")
        .unwrap()
        .unwrap();
    assert!(released_at.elapsed() < Duration::from_secs(5));
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_many_is_served_before_a_stream_of_single_permits() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default().lease(Duration::from_secs(10));
    let semaphore = client
        .semaphore_with("weighted", 3, options.clone())
        .unwrap();
    // Single-permit takers keep the semaphore busy, one permit each, again and again.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let releases = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut takers = Vec::new();
    for _ in 0..3 {
        let (semaphore, stop, releases) = (semaphore.clone(), stop.clone(), releases.clone());
        takers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let guard = semaphore.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await.unwrap();
                releases.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            releases.load(std::sync::atomic::Ordering::SeqCst) >= 10
        })
        .await,
        "the single-permit stream runs"
    );
    let before = releases.load(std::sync::atomic::Ordering::SeqCst);
    let many = tokio::time::timeout(Duration::from_secs(20), semaphore.acquire_many(3))
        .await
        .expect("acquire_many(3) is not starved")
        .unwrap();
    let waited_releases = releases.load(std::sync::atomic::Ordering::SeqCst) - before;
    eprintln!("acquire_many(3) served after {waited_releases} releases of single permits");
    // It joined the line at once: the takers ahead of it (at most 3 permits held, 3 takers
    // in line) release a bounded number of times before it is served.
    assert!(
        waited_releases <= 12,
        "served only after {waited_releases} releases"
    );
    assert_eq!(many.permits(), 3);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    many.release().await.unwrap();
    for taker in takers {
        tokio::time::timeout(Duration::from_secs(10), taker)
            .await
            .unwrap()
            .unwrap();
    }
}

#[test]
#[ignore = "runs only as a child process of the crashed-holder tests"]
fn permit_holder_child() {
    child_main(|client| async move {
        let lease = Duration::from_millis(env("CHILD_LEASE_MS").parse().unwrap());
        let semaphore = client
            .semaphore_with("crash", 2, LockOptions::default().lease(lease))
            .unwrap();
        let guard = semaphore.acquire_many(2).await.unwrap();
        println!(
            "acquired {} {}",
            guard.fencing_token(),
            guard.lease_remaining().as_millis()
        );
        // Hold until killed; bounded so a lost parent cannot leave it running.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

/// A child (with `envs`) takes both permits of `crash` with a 1.5 s lease and is killed
/// with SIGKILL: the permits come back when the lease ends on the server, not before and
/// not never, and the next grant's token is greater.
async fn a_killed_holders_permits_come_back_after_its_lease(envs: &[(&str, &str)]) {
    let server = server();
    let url = server.url();
    let mut all = vec![
        ("CHILD_REDIS_URL", url.as_str()),
        ("CHILD_LEASE_MS", "1500"),
    ];
    all.extend_from_slice(envs);
    let mut child = ChildProcess::spawn_test("permit_holder_child", &all).unwrap();
    let line =
        tokio::task::block_in_place(|| child.wait_for_line("acquired", Duration::from_secs(30)))
            .expect("the child took the permits");
    let mut words = line["acquired ".len()..].split(' ');
    let child_token: u64 = words.next().unwrap().parse().unwrap();
    let child_lease: u64 = words.next().unwrap().parse().unwrap();
    assert!(
        (1_000..=1_500).contains(&child_lease),
        "the child counts its own lease from its monotonic clock: {child_lease} ms"
    );
    child.kill_hard();
    let client = client(&server).await;
    let semaphore = client.semaphore("crash", 2).unwrap();
    // The lease the server keeps is what remains, whatever the child's wall clock said.
    let state = semaphore.state().await.unwrap();
    let remaining = state.holders[0].lease_remaining;
    assert!(
        remaining <= Duration::from_millis(1_500) && remaining > Duration::from_millis(500),
        "the server times the lease by its own clock: {remaining:?}"
    );
    let killed_at = Instant::now();
    assert!(semaphore.try_acquire().await.unwrap_err().is_held());
    let guard = semaphore
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("the permits come back");
    let waited = killed_at.elapsed();
    assert!(
        waited + Duration::from_millis(5) >= remaining,
        "a permit came back after {waited:?}, before the lease of {remaining:?} ended"
    );
    assert!(
        waited < remaining + Duration::from_secs(2),
        "a permit came back only {waited:?} after the kill; the lease ended after {remaining:?}"
    );
    assert!(guard.fencing_token().get() > child_token);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_its_permits_when_its_lease_ends() {
    a_killed_holders_permits_come_back_after_its_lease(&[]).await;
}

/// libfaketime in the child: its wall clock an hour ahead or behind, the monotonic clock
/// left alone (as `redis-locks check --fault client-clock-step` runs its workers).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_clock_an_hour_off_changes_no_lease() {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "libfaketime is installed by scripts/ensure-redis.sh (apt-get install faketime)"
    );
    for step in ["+1h", "-1h"] {
        a_killed_holders_permits_come_back_after_its_lease(&[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", step),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ])
        .await;
    }
}

/// Takes `guard`'s permit away by hand (`removal`, which removes one thing) and checks that
/// its next renewal finds it gone: `lost()` fires, and its release says so.
async fn lost_by_hand(
    server: &test_support::RedisServer,
    removal: &mut redis::Cmd,
    guard: redis_locks::SemaphoreGuard,
) {
    let removed: i64 = removal.query(&mut raw(server)).unwrap();
    assert_eq!(removed, 1);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires at the next renewal");
    assert_eq!(reason, LostReason::Expired);
    common::assert_not_held(guard.release().await, LostReason::Expired);
}

#[tokio::test]
async fn a_lost_permit_fires_lost_and_a_release_says_it_is_gone() {
    let server = server();
    let client = client(&server).await;
    // Somebody deletes a permit kept as a plain key by hand.
    let (semaphore, guard) = plain_permit(&server, &client, "lost").await;
    lost_by_hand(&server, redis::cmd("DEL").arg("lost"), guard).await;
    // Two holders in the hash: somebody removes one by hand; the other keeps its permit.
    let guard = semaphore.acquire().await.unwrap();
    let other = semaphore.acquire().await.unwrap();
    let owner = guard.owner_token().as_str().to_string();
    lost_by_hand(&server, redis::cmd("HDEL").arg("lost").arg(owner), guard).await;
    // Past two of its renewals (a lease of 600 ms is renewed every 200 ms).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(other.lost_reason(), None);
    other.release().await.unwrap();
    // Without the watchdog, an extension after the lease ended says so too.
    let fixed = client
        .semaphore_with(
            "lost",
            2,
            LockOptions::default().lease(Duration::from_millis(50)),
        )
        .unwrap();
    let guard = fixed.acquire().await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease deadline passes");
    assert_eq!(lost, LostReason::LeaseEnded);
    assert!(
        eventually(Duration::from_secs(5), || async {
            fixed.state().await.unwrap().holders.is_empty()
        })
        .await
    );
    common::assert_not_held(
        guard.extend(Duration::from_secs(1)).await,
        LostReason::Expired,
    );
}

#[tokio::test]
async fn a_dropped_guard_and_a_cancelled_wait_leave_nothing_behind() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("dropped", 1).unwrap();
    drop(semaphore.acquire().await.unwrap());
    assert!(
        eventually(Duration::from_secs(5), || async {
            semaphore.available().await.unwrap() == 1
        })
        .await,
        "a dropped guard gives its permit back"
    );
    let guard = semaphore.acquire().await.unwrap();
    let waiting = semaphore.clone();
    let wait = tokio::spawn(async move { waiting.acquire().await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            semaphore.state().await.unwrap().waiting == 1
        })
        .await
    );
    wait.abort();
    assert!(
        eventually(Duration::from_secs(5), || async {
            semaphore.state().await.unwrap().waiting == 0
        })
        .await,
        "a cancelled wait gives its place up"
    );
    let err = semaphore
        .acquire_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    assert_eq!(
        semaphore.state().await.unwrap().waiting,
        0,
        "a timeout gives the place up"
    );
    guard.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 1);
}

#[tokio::test]
async fn bad_permits_and_a_mismatched_n_are_typed_errors() {
    let server = server();
    let client = client(&server).await;
    assert!(matches!(
        client.semaphore("bad", 0).unwrap_err(),
        Error::InvalidPermits { value: 0, .. }
    ));
    assert!(matches!(
        client
            .semaphore("bad", redis_locks::MAX_PERMITS + 1)
            .unwrap_err(),
        Error::InvalidPermits { .. }
    ));
    assert!(matches!(
        client.semaphore("", 1).unwrap_err(),
        Error::InvalidName { .. }
    ));
    let semaphore = client.semaphore("bad", 2).unwrap();
    for permits in [0, 3] {
        let err = semaphore.acquire_many(permits).await.unwrap_err();
        assert!(matches!(err, Error::InvalidPermits { .. }), "{err}");
        let err = semaphore.try_acquire_many(permits).await.unwrap_err();
        assert!(matches!(err, Error::InvalidPermits { .. }), "{err}");
    }
    let guard = semaphore.acquire().await.unwrap();
    let other = client.semaphore("bad", 5).unwrap();
    let err = other.acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                permits: 2,
                asked: 5,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("in use with 2 permits, not 5"),
        "{err}"
    );
    // Nothing was written by the refused attempt.
    assert_eq!(semaphore.state().await.unwrap().holders.len(), 1);
    // Changing N on purpose: the old handle is refused, the new one serves.
    let mut resized = client.semaphore("bad", 2).unwrap();
    assert_eq!(resized.set_permits(3).await.unwrap(), Some(2));
    assert_eq!(resized.permits(), 3);
    let err = semaphore.acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::PermitsMismatch {
                permits: 3,
                asked: 2,
                ..
            }
        ),
        "{err}"
    );
    let more = resized.try_acquire_many(2).await.unwrap();
    assert_eq!(resized.available().await.unwrap(), 0);
    more.release().await.unwrap();
    guard.release().await.unwrap();
    // Idle: nothing is kept, so the next acquirer's N counts.
    let fresh = client.semaphore("bad", 7).unwrap();
    fresh.acquire().await.unwrap().release().await.unwrap();
    // A key of another type: WrongType, nothing written.
    redis::cmd("SET")
        .arg("taken")
        .arg("x")
        .exec(&mut raw(&server))
        .unwrap();
    let err = client
        .semaphore("taken", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key, .. } if key == "taken"),
        "{err}"
    );
    let value: String = redis::cmd("GET")
        .arg("taken")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(value, "x");
    // A Mutex of the same name excludes it too (its key is a string).
    let mutex = client.mutex("shared-name").unwrap().lock().await.unwrap();
    let err = client
        .semaphore("shared-name", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    mutex.release().await.unwrap();
}

/// A handle on the semaphore `name` of `permits` permits (default options) whose counter is
/// vouched for on the client's connection: its first grant, numbered by the script (which
/// records the connection's epoch), is taken and given back, so the next first attempt alone
/// can grant a permit.
async fn vouched(client: &Client, name: &str, permits: u32) -> redis_locks::Semaphore {
    let semaphore = client.semaphore(name, permits).unwrap();
    semaphore.acquire().await.unwrap().release().await.unwrap();
    semaphore
}

/// A semaphore `name` of 2 permits with a 600 ms lease renewed by the watchdog, and a permit
/// of it kept as a plain key: the first grant on a connection is numbered by the script
/// (which records the connection's epoch), the next, the only holder, is the plain key.
async fn plain_permit(
    server: &test_support::RedisServer,
    client: &Client,
    name: &str,
) -> (redis_locks::Semaphore, redis_locks::SemaphoreGuard) {
    let options = LockOptions::default()
        .lease(Duration::from_millis(600))
        .watchdog(true);
    let semaphore = client.semaphore_with(name, 2, options).unwrap();
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let guard = semaphore.acquire().await.unwrap();
    assert_eq!(
        common::key_type(server, name),
        "string",
        "a permit kept as a plain key"
    );
    (semaphore, guard)
}

#[tokio::test]
async fn a_permit_nobody_contends_for_is_a_plain_key_taken_without_a_script() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client.semaphore("plain", 3).unwrap();
    // The first grant on a connection: the counter is not vouched for there yet, so the
    // script numbers it, in the hash, and records the connection among the counter's epochs.
    let first = semaphore.acquire().await.unwrap();
    assert_eq!(common::key_type(&server, "plain"), "hash");
    let epochs: i64 = redis::cmd("ZCARD")
        .arg("{plain}:epoch")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(epochs, 1);
    let first_token = first.fencing_token();
    first.release().await.unwrap();
    // The next: one pipeline, no script; the permit is the key '<owner> <N>' with the lease.
    let (scripts, attempts) = common::scripts_and_first_attempts(&server);
    let guard = semaphore.acquire().await.unwrap();
    let (scripts_after, attempts_after) = common::scripts_and_first_attempts(&server);
    assert_eq!((scripts_after - scripts, attempts_after - attempts), (0, 1));
    assert_eq!(common::key_type(&server, "plain"), "string");
    let value: String = redis::cmd("GET")
        .arg("plain")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(value, format!("{} 3", guard.owner_token().as_str()));
    let left = common::pttl(&server, "plain");
    assert!((25_000..=30_000).contains(&left), "the lease: {left}");
    assert!(guard.fencing_token() > first_token);
    let state = semaphore.state().await.unwrap();
    assert_eq!(
        (state.permits, state.in_use(), state.holders.len()),
        (Some(3), 1, 1)
    );
    assert_eq!(state.holders[0].owner, guard.owner_token().as_str());
    // It is no Mutex's: a Mutex that waits for the name, or reads it, is told what it is.
    let mutex = client.mutex("plain").unwrap();
    for err in [
        mutex
            .lock_timeout(Duration::from_secs(2))
            .await
            .unwrap_err(),
        mutex.state().await.unwrap_err(),
        mutex.try_lock().await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::WrongType { .. }), "{err}");
    }
    // A second holder (another handle: its first attempt is refused, the script grants it)
    // turns the key into the hash; both count.
    let other = client
        .semaphore("plain", 3)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    assert_eq!(common::key_type(&server, "plain"), "hash");
    assert!(other.fencing_token() > guard.fencing_token());
    assert_eq!(semaphore.available().await.unwrap(), 1);
    // Another N is refused against either form.
    let wrong = client.semaphore("plain", 4).unwrap();
    assert!(matches!(
        wrong.try_acquire().await.unwrap_err(),
        Error::PermitsMismatch { permits: 3, .. }
    ));
    other.release().await.unwrap();
    guard.release().await.unwrap();
    assert!(
        !common::exists(&server, "plain"),
        "released, nothing held is kept"
    );
    let guard = semaphore.acquire().await.unwrap();
    assert_eq!(common::key_type(&server, "plain"), "string");
    let err = wrong.try_acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::PermitsMismatch { permits: 3, .. }),
        "{err}"
    );
    assert_eq!(
        common::key_type(&server, "plain"),
        "string",
        "the refusal wrote nothing"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_first_attempt_that_finds_a_line_gives_its_permit_back_and_prods_the_line() {
    let server = server();
    let client = client(&server).await;
    let semaphore = vouched(&client, "lined", 2).await;
    // A line that outlived its semaphore (a `break` leaves one): a waiter placed for 10 s.
    common::put_line(&mut raw(&server), "lined", "w", 10_000);
    let mut wakes = common::subscribed(&server, "{lined}:wake");
    let (_, attempts) = common::scripts_and_first_attempts(&server);
    let err = semaphore.try_acquire().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Held {
                retry_after: None,
                ..
            }
        ),
        "others wait first: {err}"
    );
    assert_eq!(common::scripts_and_first_attempts(&server).1 - attempts, 1);
    assert!(
        !common::exists(&server, "lined"),
        "the permit the first attempt took was given back"
    );
    assert_eq!(common::next_message(&mut wakes).as_deref(), Some("w"));
}

#[tokio::test]
async fn a_handle_whose_first_attempt_was_refused_asks_the_script_first_for_a_while() {
    let server = server();
    let client = client(&server).await;
    let (a, b) = (
        client.semaphore("busy", 2).unwrap(),
        client.semaphore("busy", 2).unwrap(),
    );
    a.acquire().await.unwrap().release().await.unwrap();
    let held = a.acquire().await.unwrap();
    assert_eq!(common::key_type(&server, "busy"), "string");
    let attempts = |server| common::scripts_and_first_attempts(server).1;
    let before = attempts(&server);
    let second = b.acquire().await.unwrap();
    assert_eq!(attempts(&server) - before, 1, "refused, then the script");
    second.release().await.unwrap();
    let before = attempts(&server);
    b.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(attempts(&server) - before, 0, "straight to the script");
    held.release().await.unwrap();
    // A second later (`BUSY_FOR`) its first attempts come back.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = attempts(&server);
    let plain = b.acquire().await.unwrap();
    assert_eq!(attempts(&server) - before, 1);
    assert_eq!(common::key_type(&server, "busy"), "string");
    plain.release().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_renews_a_plain_permit_past_its_lease() {
    let server = server();
    let client = client(&server).await;
    let (_semaphore, guard) = plain_permit(&server, &client, "renewed").await;
    // Three leases: kept only if renewed (every 200 ms).
    let until = Instant::now() + Duration::from_millis(1_800);
    while Instant::now() < until {
        assert!(common::pttl(&server, "renewed") > 0, "renewed in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(guard.lost_reason(), None);
    assert_eq!(common::key_type(&server, "renewed"), "string");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_first_attempt_that_finds_the_counter_broken_gives_its_permit_back() {
    let server = server();
    let client = client(&server).await;
    let semaphore = vouched(&client, "broken", 2).await;
    redis::cmd("SET")
        .arg("{broken}:fence")
        .arg("nope")
        .exec(&mut raw(&server))
        .unwrap();
    let (_, attempts) = common::scripts_and_first_attempts(&server);
    let err = semaphore.acquire().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(common::scripts_and_first_attempts(&server).1 - attempts, 1);
    assert!(
        !common::exists(&server, "broken"),
        "the permit taken was given back before the error returned"
    );
}
