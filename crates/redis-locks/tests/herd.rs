//! Contention across processes: a release wakes one waiting process, not all of them; a
//! waiter that died or lost its wake-up does not strand the lock; and many processes with
//! tasks each still never overlap.
//!
//! The child processes are this test binary itself, re-run on one `#[ignore]`d test each
//! (see `test_support::ChildProcess`); they talk to the parent through stdout lines and wait
//! for a `go` key, so that they all start waiting at once.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    child_main, children, client, env, eventually, holds_of, raw, record_hold, report_holds, say,
    say_go, server, wait_for_go,
};
use redis_locks::{Client, LockOptions};
use test_support::RedisServer;
use test_support::history::History;
use tokio::time::Instant;

fn queued(server: &RedisServer, lock: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(format!("{{{lock}}}:queue"))
        .query(&mut raw(server))
        .unwrap()
}

/// A waiting process: reports every change of its client's request count, takes the lock,
/// says so, and holds it until it is killed.
#[test]
#[ignore = "runs only as a child process of one_release_wakes_one_waiting_process"]
fn herd_waiter_child() {
    child_main(|client| async move {
        let place = Duration::from_millis(env("PLACE_MS").parse().unwrap());
        let mutex = client
            .mutex_with(
                "herd",
                LockOptions::default()
                    .lease(Duration::from_secs(30))
                    .place_lease(place),
            )
            .unwrap();
        tokio::spawn({
            let client = client.clone();
            async move {
                let mut last = u64::MAX;
                loop {
                    let requests = client.stats().requests;
                    if requests != last {
                        println!("requests {requests}");
                        last = requests;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
        println!("ready");
        wait_for_go(&env("CHILD_REDIS_URL")).await;
        let guard = mutex.lock().await.unwrap();
        println!("acquired {}", guard.fencing_token());
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_waiting_process() {
    const WAITERS: usize = 4;
    let server = server();
    let client = client(&server).await;
    let holder = client.mutex("herd").unwrap().lock().await.unwrap();
    // Place leases of 10 s: no waiter renews its place during the test (renewals would be
    // attempts of their own; the other periodic look, every 2 s, comes after the test's
    // checks on any machine that starts the children within a second).
    let mut children = children(
        &server,
        "herd_waiter_child",
        WAITERS,
        &[("PLACE_MS", "10000")],
    );
    say_go(&server);
    assert!(
        eventually(Duration::from_secs(10), || async {
            queued(&server, "herd") == WAITERS as i64
        })
        .await,
        "every process waits in line"
    );
    // Let the last counts come in, then note them.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for child in &mut children {
        let _ = child.take_lines("requests ");
    }
    holder.release().await.unwrap();
    let mut winners = Vec::new();
    let within = Instant::now() + Duration::from_secs(5);
    while winners.is_empty() && Instant::now() < within {
        for (i, child) in children.iter_mut().enumerate() {
            if !child.take_lines("acquired ").is_empty() {
                winners.push(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(winners.len(), 1, "exactly one process took the lock");
    // Time for any other woken process to have asked (a herd asks within a millisecond).
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, child) in children.iter_mut().enumerate() {
        let sent = child.take_lines("requests ");
        if i == winners[0] {
            // Handed the lock, it asks for nothing: not even the extension of the handed
            // lease, due only once a third of it (about 3 s here) has passed.
            assert!(
                sent.is_empty(),
                "the process handed the lock asked: {sent:?}"
            );
        } else {
            assert!(sent.is_empty(), "process {i} was woken too: {sent:?}");
            assert!(child.take_lines("acquired ").is_empty());
        }
    }
    assert_eq!(
        queued(&server, "herd"),
        WAITERS as i64 - 1,
        "the others still wait in line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_at_the_head_holds_the_lock_up_no_longer_than_its_place_lease() {
    let server = server();
    let client = client(&server).await;
    let holder = client.mutex("herd").unwrap().lock().await.unwrap();
    let place = Duration::from_millis(1000);
    // The first child in line, then the second.
    let envs = |go| [("PLACE_MS", "1000"), ("GO_KEY", go)];
    let mut first = children(&server, "herd_waiter_child", 1, &envs("go-first"));
    let mut second = children(&server, "herd_waiter_child", 1, &envs("go-second"));
    say(&server, "go-first");
    assert!(
        eventually(Duration::from_secs(10), || async {
            queued(&server, "herd") == 1
        })
        .await,
        "the first waits in line"
    );
    say(&server, "go-second");
    assert!(
        eventually(Duration::from_secs(10), || async {
            queued(&server, "herd") == 2
        })
        .await,
        "then the second"
    );
    first[0].kill_hard();
    let released_at = Instant::now();
    holder.release().await.unwrap();
    // The release hands the lock to the dead head, for what is left of its place lease; the
    // second takes the lock once that has run out (it renews its own place, and looks, every
    // third of its lease).
    assert!(
        tokio::task::block_in_place(|| second[0].wait_for_line("acquired", Duration::from_secs(10)))
            .is_some(),
        "the second waiter got the lock"
    );
    let took = released_at.elapsed();
    assert!(
        took <= place + place / 3 + Duration::from_millis(500),
        "served {took:?} after the release; the dead waiter's place lease is {place:?}"
    );
    // It did wait for the dead head: a waiter does not jump the line while the head's
    // place is leased.
    assert!(
        took >= place / 4,
        "served after {took:?}: the line was not kept"
    );
}

#[tokio::test]
async fn a_wake_up_lost_with_the_subscriber_connection_does_not_strand_the_lock() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let holder = holder_client
        .mutex("stranded")
        .unwrap()
        .lock()
        .await
        .unwrap();
    // A 30 s place lease: the waiter renews its place (and looks) only every 10 s, so nothing
    // but the recovery of its wake-ups (or the 2 s periodic look) can get it going.
    let waiter = tokio::spawn({
        let options = LockOptions::default().place_lease(Duration::from_secs(30));
        let mutex = waiter_client.mutex_with("stranded", options).unwrap();
        async move { mutex.lock().await.map(|guard| (Instant::now(), guard)) }
    });
    assert!(
        eventually(Duration::from_secs(5), || async {
            queued(&server, "stranded") == 1
        })
        .await,
        "the waiter is in line"
    );
    // Its subscriber connection (the only one: the holder never waited) dies just before
    // the release, so the grant handed to it is published to nobody: its next attempt, with
    // the same line token, finds the lock its own.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(killed, 1);
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (acquired_at, guard) = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter took the lock after all")
        .unwrap()
        .unwrap();
    // Recovered when the subscriber connection was back (it reconnects within tens of ms),
    // not by the periodic look 2 s later.
    let took = acquired_at - released_at;
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    assert_eq!(queued(&server, "stranded"), 0, "and left the line");
    guard.release().await.unwrap();
}

const TASKS_PER_PROCESS: usize = 2;
const PER_TASK: usize = 15;
const PROCESSES: usize = 8;

/// One contending process: two tasks sharing its client, each recording its holdings.
#[test]
#[ignore = "runs only as a child process of eight_processes_with_two_tasks_each_never_overlap"]
fn contending_child() {
    child_main(|client| async move {
        println!("ready");
        wait_for_go(&env("CHILD_REDIS_URL")).await;
        let history = Arc::new(History::default());
        let tasks: Vec<_> = (0..TASKS_PER_PROCESS)
            .map(|task| {
                let worker = format!("process-{}-task-{task}", std::process::id());
                tokio::spawn(contend(client.clone(), worker, history.clone()))
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        report_holds(&history);
    });
}

async fn contend(client: Client, worker: String, history: Arc<History>) {
    let options = LockOptions::default().lease(Duration::from_secs(10));
    let mutex = client.mutex_with("crowded", options).unwrap();
    for _ in 0..PER_TASK {
        record_hold(mutex.lock().await.unwrap(), &worker, &history).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_with_two_tasks_each_never_overlap() {
    let server = server();
    let mut children = children(&server, "contending_child", PROCESSES, &[]);
    say_go(&server);
    let history = History::default();
    for child in &mut children {
        history.extend(holds_of(child, TASKS_PER_PROCESS * PER_TASK));
    }
    let report = history.check();
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
    assert_eq!(
        history.intervals().len(),
        PROCESSES * TASKS_PER_PROCESS * PER_TASK
    );
    assert_eq!(queued(&server, "crowded"), 0, "nobody left in line");
}

#[tokio::test]
async fn a_cancelled_wait_gives_up_its_place_in_line() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let holder = holder_client.mutex("left").unwrap().lock().await.unwrap();
    let mutex = waiter_client.mutex("left").unwrap();
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    assert!(
        eventually(Duration::from_secs(5), || async {
            queued(&server, "left") == 1
        })
        .await,
        "the waiter is in line"
    );
    waiter.abort();
    let _ = waiter.await;
    assert!(
        eventually(Duration::from_secs(1), || async {
            queued(&server, "left") == 0
        })
        .await,
        "the cancelled wait left the line"
    );
    holder.release().await.unwrap();
}

#[tokio::test]
async fn a_late_leave_of_a_cancelled_wait_never_takes_a_later_waits_place() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let holder = holder_client.mutex("late").unwrap().lock().await.unwrap();
    let mutex = waiter_client.mutex("late").unwrap();
    let line = |server: &RedisServer| -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg("{late}:queue")
            .arg(0)
            .arg(-1)
            .query(&mut raw(server))
            .unwrap()
    };
    let first = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    assert!(
        eventually(Duration::from_secs(5), || async {
            line(&server).len() == 1
        })
        .await,
        "the first wait is in line"
    );
    let first_place = line(&server)[0].clone();
    // Cancel it, and wait again at once: on this one-thread runtime the new wait's attempt
    // goes out before the cancelled one's leave, which runs in the background.
    first.abort();
    let _ = first.await;
    let second = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await }
    });
    assert!(
        eventually(Duration::from_secs(5), || async {
            let line = line(&server);
            line.len() == 1 && line[0] != first_place
        })
        .await,
        "the second wait took a place of its own, and the first one's is gone"
    );
    // Long after the late leave: the second wait is still in line.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let places = line(&server);
    assert_eq!(places.len(), 1, "{places:?}");
    assert_ne!(places[0], first_place);
    holder.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(1), second)
        .await
        .expect("the second wait was woken by the release")
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
}
