//! Mutual exclusion across OS processes and tasks, and a holder killed with SIGKILL.
//!
//! The child processes are this test binary itself, re-run on one `#[ignore]`d test each
//! (see `test_support::ChildProcess`); they talk to the parent through stdout lines.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    child_main, children, client, env, holds_of, pttl, record_hold, report_holds, say_go, server,
    wait_for_go,
};
use redis_locks::{Client, LockOptions};
use test_support::ChildProcess;
use test_support::history::History;
use tokio::time::Instant;

const TASKS: usize = 16;
const PER_TASK: usize = 100;
const PROCESSES: usize = 2;
const PER_PROCESS: usize = 250;

fn contention_options() -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(2))
}

/// One contender: `count` acquisitions of `name`, each recorded as an interval.
async fn contend(client: Client, name: &str, worker: String, count: usize, history: Arc<History>) {
    let mutex = client.mutex_with(name, contention_options()).unwrap();
    for _ in 0..count {
        record_hold(mutex.lock().await.unwrap(), &worker, &history).await;
    }
}

#[test]
#[ignore = "runs only as a child process of mutual_exclusion_across_tasks_and_processes"]
fn contender_child() {
    child_main(|client| async move {
        // Start together with the parent's tasks: wait for its "go" key.
        println!("ready");
        wait_for_go(&env("CHILD_REDIS_URL")).await;
        let history = Arc::new(History::default());
        let worker = format!("process-{}", std::process::id());
        contend(client, "contended", worker, PER_PROCESS, history.clone()).await;
        report_holds(&history);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_tasks_and_processes() {
    let server = server();
    let history = Arc::new(History::default());
    let mut children =
        tokio::task::block_in_place(|| children(&server, "contender_child", PROCESSES, &[]));
    let client = client(&server).await;
    say_go(&server);
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            tokio::spawn(contend(
                client.clone(),
                "contended",
                format!("task-{i}"),
                PER_TASK,
                history.clone(),
            ))
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish")
            .unwrap();
    }
    for child in &mut children {
        history.extend(holds_of(child, PER_PROCESS));
    }
    let report = history.check();
    eprintln!("{report}");
    // The processes really competed with the tasks: their holdings interleave in time.
    let switches = common::process_switches(&history);
    eprintln!("{switches} hand-overs between a process and a task");
    assert!(
        switches >= 10,
        "processes and tasks did not compete: {switches}"
    );
    assert_eq!(
        report.acquisitions,
        TASKS * PER_TASK + PROCESSES * PER_PROCESS
    );
    assert!(report.acquisitions >= 2_000);
    common::assert_exclusive(&report);
}

#[test]
#[ignore = "runs only as a child process of a_holder_killed_with_sigkill_blocks_others_for_its_lease"]
fn holder_child() {
    child_main(|client| async move {
        let lease = Duration::from_millis(env("CHILD_LEASE_MS").parse().unwrap());
        let mutex = client
            .mutex_with("victim", LockOptions::default().lease(lease))
            .unwrap();
        let guard = mutex.lock().await.unwrap();
        println!("acquired {}", guard.fencing_token());
        // Hold until killed; bounded so a lost parent cannot leave it running.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
}

#[tokio::test]
async fn a_holder_killed_with_sigkill_blocks_others_for_its_lease() {
    let server = server();
    let mut child = ChildProcess::spawn_test(
        "holder_child",
        &[
            ("CHILD_REDIS_URL", &server.url()),
            ("CHILD_LEASE_MS", "1500"),
        ],
    )
    .unwrap();
    let line = child
        .wait_for_line("acquired", Duration::from_secs(30))
        .expect("the child took the lock");
    let child_token: u64 = line["acquired ".len()..].parse().unwrap();
    child.kill_hard();
    // The lease is what remains; measure it on the server right after the kill.
    let remaining =
        Duration::from_millis(pttl(&server, "victim").try_into().expect("key has a TTL"));
    let killed_at = Instant::now();

    let client = client(&server).await;
    let mutex = client.mutex("victim").unwrap();
    let err = mutex.try_lock().await.unwrap_err();
    assert!(
        err.is_held(),
        "a killed holder still holds its lease: {err}"
    );

    let guard = mutex.lock_timeout(Duration::from_secs(10)).await.unwrap();
    let waited = killed_at.elapsed();
    assert!(
        waited + Duration::from_millis(5) >= remaining,
        "got the lock after {waited:?}, before the lease of {remaining:?} ended"
    );
    assert!(
        waited < remaining + Duration::from_secs(1),
        "got the lock {waited:?} after the kill; the lease ended after {remaining:?}"
    );
    assert!(guard.fencing_token().get() > child_token);
    guard.release().await.unwrap();
}
