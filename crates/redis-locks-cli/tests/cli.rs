//! The `redis-locks` binary end to end: the demo's report and exit codes, bad usage.

use std::process::{Command, Output};

use test_support::RedisServer;

fn redis_locks(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run redis-locks")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn demo_against_a_given_server_reports_one_winner_and_no_overlap() {
    let server = RedisServer::start().unwrap();
    let out = redis_locks(&[
        "demo",
        "--redis",
        &server.url(),
        "--processes",
        "2",
        "--tasks",
        "4",
        "--per-worker",
        "25",
    ]);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("exactly one of 5 instances performed the draw. OK"),
        "{text}"
    );
    assert_eq!(text.matches("WON the lock").count(), 1, "{text}");
    assert!(text.contains("acquisitions      150"), "{text}");
    assert!(text.contains("overlaps          0"), "{text}");
    assert!(text.contains("strictly increasing"), "{text}");
    assert!(text.contains("All checks passed."), "{text}");
    // The demo cleans up after itself on a server it did not start.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

#[test]
fn demo_without_a_url_starts_its_own_server() {
    let out = redis_locks(&[
        "demo",
        "--processes",
        "1",
        "--tasks",
        "2",
        "--per-worker",
        "10",
    ]);
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("a private redis-server"), "{text}");
    assert!(text.contains("All checks passed."), "{text}");
}

#[test]
fn an_unreachable_server_exits_69_with_a_clear_message() {
    let port = {
        let mut server = RedisServer::start().unwrap();
        let port = server.port();
        server.kill();
        port
    };
    let out = redis_locks(&["demo", "--redis", &format!("redis://127.0.0.1:{port}")]);
    assert_eq!(out.status.code(), Some(69));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Redis connection failed"), "{err}");
}

#[test]
fn bad_usage_exits_64_and_help_exits_0() {
    for args in [
        &["demo", "--processes", "0"][..],
        &["demo", "--tasks", "many"],
        &["demo", "--bogus"],
        &["no-such-command"],
        &[],
    ] {
        let out = redis_locks(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why");
    }
    let out = redis_locks(&["demo", "--redis", "http://not-redis"]);
    assert_eq!(out.status.code(), Some(64), "an invalid URL is bad usage");
    let out = redis_locks(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("Exit codes"));
}
