//! The `redis-locks-bench` binary run directly: its help, bad usage, its name in messages.
//!
//! Having integration tests also makes a workspace test build (`cargo nextest run
//! --workspace`, `cargo test --workspace`) build this binary into the target directory,
//! beside `redis-locks`, whose tests run the benchmarks through `redis-locks bench`.

use std::process::{Command, Output};

use test_support::RedisServer;

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redis-locks-bench"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run redis-locks-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_the_benchmarks_and_bad_usage_exits_64() {
    let out = bench(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(
        help.contains("Usage: redis-locks-bench [OPTIONS] <COMMAND>"),
        "{help}"
    );
    for word in ["throughput", "handoff", "market", "--redis", "--json", "69"] {
        assert!(help.contains(word), "{word} missing:\n{help}");
    }
    for args in [
        &[][..],
        &["nothing"],
        &["throughput", "--duration", "0s"],
        &["handoff", "--workers", "1"],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} says why");
    }
}

#[test]
fn an_unreachable_server_exits_69_under_the_programs_own_name() {
    let mut server = RedisServer::start().unwrap();
    server.kill();
    let url = format!("redis://127.0.0.1:{}", server.port());
    let out = bench(&["handoff", "--redis", &url, "--duration", "1s"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.starts_with("redis-locks-bench: Redis connection failed"),
        "{err}"
    );
}

#[test]
fn handoff_across_processes_with_a_client_each_reports_every_variant_without_overlaps() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let out = bench(&[
        "handoff",
        "--redis",
        &url,
        "--json",
        "--workers",
        "4",
        "--processes",
        "2",
        "--client-per-worker",
        "--duration",
        "500ms",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let reports: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(reports.len(), 3, "Mutex, FairMutex, polling");
    for report in &reports {
        assert_eq!(report["processes"], 2, "{report}");
        assert_eq!(report["client_per_worker"], true, "{report}");
        assert_eq!(report["overlaps"], 0, "{report}");
        assert!(report["acquisitions"].as_u64().unwrap() > 0, "{report}");
        // Every worker, in both processes, took the lock.
        assert!(report["per_worker_min"].as_u64().unwrap() > 0, "{report}");
        assert!(report["requests_per_acquisition"].as_f64().unwrap() >= 2.0);
    }
    // The run left no fencing counter behind.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*bench:handoff:*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.iter().all(|key| !key.ends_with(":fence")), "{keys:?}");
}
