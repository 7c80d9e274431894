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
