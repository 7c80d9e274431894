//! `redis-locks break NAME` against a real server: a lock held by a `run` is broken — the run
//! hears it lost its lock (exit 70) and a waiting run gets it; a free lock says so; off a
//! terminal it needs --yes; `--json`.

mod common;

use std::time::Duration;

use common::{expect, redis_locks, run, scratch, stdout, until_exists};
use test_support::{ChildProcess, RedisServer};

#[test]
fn a_broken_runs_command_is_stopped_and_a_waiting_run_gets_the_lock() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let dir = scratch("break");
    let release = dir.join("release");
    // A 3 s lease: renewed every second, so the break is heard within about a second.
    let holding = format!("echo ready; {}", until_exists(&release));
    let mut holder =
        ChildProcess::spawn(run(&server, &["jobs:nightly", "--ttl", "3s"], &holding)).unwrap();
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the first run holds the lock");
    let mut waiter =
        ChildProcess::spawn(run(&server, &["jobs:nightly", "--quiet"], "echo got it")).unwrap();
    // Off a terminal, without --yes: nothing done.
    let out = redis_locks(&["break", "jobs:nightly", "--redis", &url]);
    expect(&out, 64, "--yes");
    let out = redis_locks(&["break", "jobs:nightly", "--redis", &url, "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["broken"], true, "{report}");
    assert_eq!(report["kind"], "mutex", "{report}");
    assert_eq!(report["holders"].as_array().unwrap().len(), 1, "{report}");
    assert!(report["fencing_counter"].as_u64().unwrap() > 0);
    // The holder's run hears it: its command is stopped and it exits 70 (lost), saying why.
    assert_eq!(holder.wait_exit(Duration::from_secs(15)), Some(70));
    assert!(
        waiter
            .wait_for_line("got it", Duration::from_secs(15))
            .is_some(),
        "the waiting run got the lock"
    );
    assert_eq!(waiter.wait_exit(Duration::from_secs(15)), Some(0));
    // Now free: nothing to break, exit 0, said so.
    let out = redis_locks(&["break", "jobs:nightly", "--redis", &url]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout(&out).contains("not held"), "{}", stdout(&out));
    std::fs::write(&release, "").unwrap();
}
