//! Shared helpers of the CLI tests: the real `redis-locks` binary, run against private servers.
#![allow(dead_code)]

use std::process::{Command, Output};

pub mod tmux;

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

/// `redis-locks run --redis URL ARGS... -- sh -c SCRIPT`.
pub fn run(server: &test_support::RedisServer, args: &[&str], script: &str) -> Command {
    let mut cmd = command();
    cmd.args(["run", "--redis", &server.url()])
        .args(args)
        .args(["--", "sh", "-c", script]);
    cmd
}

/// A directory of the test's own, named after `tag` (each test runs in a process of its own),
/// emptied first.
pub fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redis-locks-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A shell line that waits, for 20 s at most, until `file` exists, and exits 9 if it never
/// does.
pub fn until_exists(file: &std::path::Path) -> String {
    format!(
        "i=0; while [ ! -e {file} ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.02; done",
        file = file.display()
    )
}

/// `status NAME --json`.
pub fn status(server: &test_support::RedisServer, name: &str) -> serde_json::Value {
    let out = redis_locks(&["status", name, "--json", "--redis", &server.url()]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The most intervals of `log` open at once, and how many began: lines `start ID NS` and
/// `end ID NS` (an end and a start at the same nanosecond are not two at once).
pub fn most_at_once(log: &str) -> (usize, usize) {
    let mut edges: Vec<(u128, i32)> = Vec::new();
    let mut started = 0;
    for line in log.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let at: u128 = fields[2].parse().unwrap();
        match fields[0] {
            "start" => {
                started += 1;
                edges.push((at, 1));
            }
            "end" => edges.push((at, -1)),
            other => panic!("unexpected line {other:?} in {log}"),
        }
    }
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    (most as usize, started)
}
