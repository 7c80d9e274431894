//! Shared helpers of the CLI tests: the real `redis-locks` binary, run against private servers.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The variables that name a Redis, or say how to reach it (TLS, the key namespace):
/// removed, so that no test reaches a server it did not start, or with settings it did not
/// give.
pub const REDIS_VARIABLES: [&str; 9] = [
    "REDIS_URL",
    "REDIS_CLUSTER",
    "REDIS_SENTINEL",
    "REDIS_MASTER",
    "REDIS_TLS_CA",
    "REDIS_TLS_CERT",
    "REDIS_TLS_KEY",
    "REDIS_TLS_INSECURE",
    "REDIS_LOCKS_NAMESPACE",
];

/// The binary, with the `REDIS_*` variables removed so that no test reaches a server it did
/// not start.
pub fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-locks"));
    for variable in REDIS_VARIABLES {
        cmd.env_remove(variable);
    }
    cmd
}

/// Runs the binary with `args` to the end.
pub fn redis_locks(args: &[&str]) -> Output {
    command().args(args).output().expect("run redis-locks")
}

/// What it printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What it printed on stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether `check` holds within `limit`, looked at every 20 ms.
pub fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Asserts the exit code and that stderr says `words`; returns stderr.
pub fn expect(out: &Output, code: i32, words: &str) -> String {
    let err = stderr(out);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {err}",
        stdout(out)
    );
    assert!(err.contains(words), "{words:?} not in: {err}");
    err
}

/// Whether `key` exists on `server`, read over a fresh connection.
pub fn exists(server: &test_support::RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.connection().unwrap())
        .unwrap()
        == 1
}

/// Asserts that the command exited 0, showing its output when it did not.
pub fn succeeded(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(out),
        stderr(out)
    );
}
