//! `redis-locks-bench multilock` run directly against a server the test started: every
//! acquisition made within its deadline, no name held twice, no key left behind; bad subset
//! bounds are a usage error.

use std::process::Command;

use test_support::RedisServer;

#[test]
fn multilock_runs_without_a_stuck_acquisition_and_leaves_no_key() {
    let server = RedisServer::start().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_redis-locks-bench"))
        .args(["--redis", &server.url(), "--json", "multilock"])
        .args(["--tasks", "12", "--names", "6", "--max-names", "4"])
        .args(["--duration", "1s", "--deadline", "20s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(report["acquisitions"].as_u64().unwrap() > 10, "{report}");
    assert_eq!(report["stuck"], 0, "{report}");
    assert_eq!(report["past_deadline"], 0, "{report}");
    assert_eq!(report["violations"], 0, "{report}");
    let p99 = report["wait"]["p99_ms"].as_f64().unwrap();
    assert!(
        p99 > 0.0 && p99 <= 20_000.0,
        "within the deadline: {report}"
    );
    let keys: i64 = redis::cmd("DBSIZE")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert_eq!(keys, 0, "the run left keys behind");
}

#[test]
fn subset_bounds_that_cannot_be_drawn_are_a_usage_error() {
    for args in [
        ["--min-names", "5", "--max-names", "3"],
        ["--names", "4", "--max-names", "8"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_redis-locks-bench"))
            .arg("multilock")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("min-names <= max-names <= names"),
            "{stderr}"
        );
    }
}
