//! The `redis-locks` binary end to end: the demo's report and exit codes, bad usage, and the
//! benchmarks it runs through `redis-locks-bench` (built beside it by a workspace build).

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{redis_locks, stderr, stdout};
use test_support::RedisServer;

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
    let keys = all_keys(&server);
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
    let out = redis_locks(&["demo", "--redis", &unreachable_url()]);
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

/// The URL of a server that was there a moment ago: nothing answers on its port.
fn unreachable_url() -> String {
    let mut server = RedisServer::start().unwrap();
    server.kill();
    format!("redis://127.0.0.1:{}", server.port())
}

/// Runs `redis-locks` with `args` (a `--json` command), checks it succeeded, and returns its
/// JSON objects, one per line.
fn json_runs(args: &[&str]) -> Vec<serde_json::Value> {
    let out = redis_locks(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect()
}

/// Every key on `server` (a test server: a handful of keys).
fn all_keys(server: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap()
}

/// The keys on `server` that never expire: a run must leave none behind.
fn keys_without_expiry(server: &RedisServer) -> Vec<String> {
    let mut connection = server.connection().unwrap();
    all_keys(server)
        .into_iter()
        .filter(|key| {
            redis::cmd("PTTL")
                .arg(key)
                .query::<i64>(&mut connection)
                .unwrap()
                == -1
        })
        .collect()
}

#[test]
fn bench_throughput_reports_both_variants_and_the_ratio() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(&[
        "bench",
        "throughput",
        "--redis",
        &server.url(),
        "--workers",
        "4",
        "--duration",
        "300ms",
        "--json",
    ]);
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["bench"], "throughput");
    for variant in ["ours", "bare", "bare_fenced"] {
        assert!(
            run[variant]["acquisitions"].as_u64().unwrap() > 0,
            "{variant}: {run}"
        );
        assert_eq!(
            run[variant]["requests_per_acquisition"].as_f64().unwrap(),
            2.0,
            "{variant}"
        );
    }
    assert!(run["ratio_ours_to_bare"].as_f64().unwrap() > 0.0);
    assert!(run["memory"]["held_lock_key_bytes"].as_i64().unwrap() > 0);
    assert!(run["memory"]["fencing_counter_bytes"].as_i64().unwrap() > 0);
    assert!(run["memory"]["counter_epoch_bytes"].as_i64().unwrap() > 0);
    let left = keys_without_expiry(&server);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bench_handoff_runs_three_variants_without_overlap() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(&[
        "bench",
        "handoff",
        "--redis",
        &server.url(),
        "--workers",
        "3",
        "--duration",
        "400ms",
        "--json",
    ]);
    let variants: Vec<&str> = runs
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["mutex", "fair_mutex", "polling"]);
    for run in &runs {
        assert!(run["acquisitions"].as_u64().unwrap() > 0, "{run}");
        assert_eq!(run["overlaps"], 0, "{run}");
        assert_eq!(run["token_regressions"], 0, "{run}");
    }
    // The fair queue's keys expire on their own; nothing is left that never would.
    let left = keys_without_expiry(&server);
    assert!(left.is_empty(), "left behind: {left:?}");
    // The table form prints the rows a reader looks for.
    let out = redis_locks(&[
        "bench",
        "handoff",
        "--redis",
        &server.url(),
        "--workers",
        "2",
        "--duration",
        "200ms",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    for row in [
        "idle gap p50",
        "utilisation",
        "wait max",
        "requests/acq",
        "to longest waiter",
    ] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
}

#[test]
fn bench_refuses_bad_durations_and_counts() {
    for args in [
        &["bench", "handoff", "--duration", "soon"][..],
        &["bench", "throughput", "--duration", "0s"],
        &["bench", "market", "--duration", "300000y"],
        &["bench", "handoff", "--hold", "-1ms"],
        &["bench", "throughput", "--workers", "0"],
        &["bench", "nothing"],
    ] {
        let out = redis_locks(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
    }
}

#[test]
fn bench_market_keeps_every_invariant_in_every_strategy() {
    let server = RedisServer::start().unwrap();
    let chart = std::env::temp_dir().join(format!("market-{}.svg", std::process::id()));
    let runs = json_runs(&[
        "bench",
        "market",
        "--redis",
        &server.url(),
        "--duration",
        "700ms",
        "--sellers",
        "3",
        "--buyers",
        "3",
        "--chart",
        chart.to_str().unwrap(),
        "--json",
    ]);
    let strategies: Vec<&str> = runs
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["watch", "coarse", "fine", "fair"]);
    for run in &runs {
        assert_eq!(run["invariants_ok"], true, "{run}");
        assert!(run["listed"].as_u64().unwrap() > 0, "{run}");
        assert!(run["bought"].as_u64().unwrap() > 0, "{run}");
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("fine-grained"),
        "chart written"
    );
    let _ = std::fs::remove_file(&chart);
    // Nothing of the runs is left on the server.
    let keys = all_keys(&server);
    assert!(
        keys.is_empty(),
        "left behind: {:?}",
        &keys[..keys.len().min(5)]
    );
}

#[test]
fn bench_help_is_the_bench_programs_help() {
    let out = redis_locks(&["bench", "--help"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let help = stdout(&out);
    assert!(
        help.contains("Usage: redis-locks bench [OPTIONS] <COMMAND>"),
        "{help}"
    );
    for word in ["throughput", "handoff", "market", "--redis", "--json"] {
        assert!(help.contains(word), "{word} missing:\n{help}");
    }
}

#[test]
fn bench_options_before_the_benchmark_reach_the_bench_program() {
    let url = unreachable_url();
    // Not a usage error (64): the options went through, and the server is unreachable (69).
    let out = redis_locks(&[
        "bench",
        "--json",
        "--redis",
        &url,
        "throughput",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(stderr(&out).contains("Redis connection failed"));
    assert!(out.stdout.is_empty(), "--json prints no table header");
}

#[test]
fn bench_without_the_bench_program_exits_69_and_says_how_to_build_it() {
    // `redis-locks` alone in a directory, with nothing on PATH.
    let dir = std::env::temp_dir().join(format!("redis-locks-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let alone = dir.join("redis-locks");
    std::fs::copy(env!("CARGO_BIN_EXE_redis-locks"), &alone).unwrap();
    let mut cmd = Command::new(&alone);
    cmd.args(["bench", "throughput", "--duration", "1s"])
        .env("PATH", "")
        .env_remove("REDIS_URL");
    let out = run_fresh_copy(&mut cmd);
    let _ = std::fs::remove_dir_all(&dir);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(69), "{err}");
    for words in [
        "redis-locks-bench",
        dir.to_str().unwrap(),
        "nor on PATH",
        "cargo build --release -p redis-locks-bench",
    ] {
        assert!(err.contains(words), "{words:?} not in: {err}");
    }
    assert!(out.stdout.is_empty());
}

/// Runs `cmd`, whose program was just written: another test thread's fork may still hold it
/// open for writing for a moment (ETXTBSY).
fn run_fresh_copy(cmd: &mut Command) -> Output {
    for _ in 0..50 {
        match cmd.output() {
            Err(err) if err.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result.expect("run the copied redis-locks"),
        }
    }
    panic!("the copied redis-locks stayed busy");
}
