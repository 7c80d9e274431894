//! `--replicas N [--replicas-timeout D]` (`REDIS_LOCKS_REPLICAS`, `REDIS_LOCKS_REPLICAS_TIMEOUT`):
//! replicated acquisition on a real master with a real replica. The command learns how many
//! replicas acknowledged; a grant the replica does not acknowledge is refused (69) and leaves
//! no key; `demo` and `check` (and their worker processes) take their locks the same way; bad
//! values are bad usage.

mod common;

use common::{command, exists, expect, redis_locks, stderr, stdout, succeeded};
use test_support::RedisServer;

/// A master and one replica of it, the replica acknowledging writes.
fn master_and_replica() -> (RedisServer, RedisServer) {
    RedisServer::start_master_and_replica(&[]).expect("start a master and its replica")
}

#[test]
fn run_counts_a_grant_once_the_replica_has_it() {
    let (master, replica) = master_and_replica();
    let url = master.url();
    let show = "echo acked=$REDIS_LOCKS_REPLICAS_ACKED";
    let out = redis_locks(&[
        "run",
        "job",
        "--redis",
        &url,
        "--replicas",
        "1",
        "--",
        "sh",
        "-c",
        show,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "acked=1");
    // From the environment, with a timeout of its own.
    let out = command()
        .args(["run", "job", "--redis", &url, "--", "sh", "-c", show])
        .env("REDIS_LOCKS_REPLICAS", "1")
        .env("REDIS_LOCKS_REPLICAS_TIMEOUT", "500ms")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "acked=1");
    // Without --replicas, nothing is waited for and nothing said.
    let out = redis_locks(&["run", "job", "--redis", &url, "--", "sh", "-c", show]);
    assert_eq!(stdout(&out).trim(), "acked=");
    // A shared run, an RwLock's read side, too.
    let out = redis_locks(&[
        "run",
        "job2",
        "--shared",
        "--redis",
        &url,
        "--replicas",
        "1",
        "--",
        "sh",
        "-c",
        show,
    ]);
    assert_eq!(stdout(&out).trim(), "acked=1", "{}", stderr(&out));

    // More replicas than there are: refused, the command not run, no key left.
    let out = redis_locks(&[
        "run",
        "job",
        "--redis",
        &url,
        "--replicas",
        "2",
        "--wait",
        "0",
        "--",
        "touch",
        "/nonexistent/ran",
    ]);
    expect(&out, 69, "1 of 2 replicas acknowledged");
    assert!(!exists(&master, "job"));

    // The replica paused: no acknowledgement within the timeout, with --wait or without.
    replica.pause();
    for wait in [&["--wait", "0"][..], &["--wait", "2s"], &[]] {
        let mut args = vec!["run", "job", "--redis", &url, "--replicas", "1", "--quiet"];
        args.extend_from_slice(wait);
        args.extend(["--", "sh", "-c", "echo ran"]);
        let out = redis_locks(&args);
        expect(&out, 69, "0 of 1 replicas acknowledged");
        assert!(stdout(&out).is_empty(), "the command ran: {}", stdout(&out));
        assert!(!exists(&master, "job"), "{wait:?}: a key was left");
    }
    replica.resume();
}

#[test]
fn demo_and_check_take_their_locks_replicated() {
    let (master, replica) = master_and_replica();
    let url = master.url();
    let out = redis_locks(&[
        "demo",
        "--redis",
        &url,
        "--replicas",
        "1",
        "--processes",
        "2",
        "--tasks",
        "2",
        "--per-worker",
        "5",
    ]);
    succeeded(&out);
    let out = redis_locks(&[
        "check",
        "--redis",
        &url,
        "--replicas",
        "1",
        "--fault",
        "none",
        "--processes",
        "2",
        "--tasks",
        "1",
        "--count",
        "5",
        "--json",
    ]);
    succeeded(&out);

    // The replica paused: the demo's locks (its tasks' and its worker processes') are
    // refused, and it fails saying why (69 from a task, or 1 when a worker process gave up
    // first).
    replica.pause();
    let out = redis_locks(&[
        "demo",
        "--redis",
        &url,
        "--replicas",
        "1",
        "--processes",
        "1",
        "--tasks",
        "1",
        "--per-worker",
        "1",
    ]);
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("0 of 1 replicas acknowledged"),
        "{}",
        stderr(&out)
    );
    replica.resume();
}

#[test]
fn bad_replication_options_exit_64() {
    let servers = test_support::start_many(3).unwrap();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let url = &urls[0];
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "x", "--redis", url, "--replicas", "0", "--", "true"],
            "--replicas",
        ),
        (
            &["run", "x", "--redis", url, "--replicas", "-1", "--", "true"],
            "'-1'",
        ),
        (
            &[
                "run",
                "x",
                "--redis",
                url,
                "--replicas-timeout",
                "1s",
                "--",
                "true",
            ],
            "--replicas",
        ),
        // Not under the client's 2 s reply timeout, or no time at all.
        (
            &[
                "run",
                "x",
                "--redis",
                url,
                "--replicas",
                "1",
                "--replicas-timeout",
                "5s",
                "--",
                "true",
            ],
            "replication timeout",
        ),
        (
            &[
                "run",
                "x",
                "--redis",
                url,
                "--replicas",
                "1",
                "--replicas-timeout",
                "0s",
                "--",
                "true",
            ],
            "replication timeout",
        ),
        // A Redlock's nodes are independent masters.
        (
            &[
                "run",
                "x",
                "--redis",
                &urls[0],
                "--redis",
                &urls[1],
                "--redis",
                &urls[2],
                "--replicas",
                "1",
                "--",
                "true",
            ],
            "Redlock",
        ),
        (
            &["check", "--primitive", "redlock", "--replicas", "1"],
            "Redlock",
        ),
        (
            &["check", "--algorithm", "naive-del", "--replicas", "1"],
            "naive-del",
        ),
        // status takes no lock.
        (
            &["status", "x", "--redis", url, "--replicas", "1"],
            "--replicas",
        ),
    ];
    for (args, words) in cases {
        let out = redis_locks(args);
        let err = expect(&out, 64, words);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
