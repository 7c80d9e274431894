//! The benchmarks on a Redis Cluster: `throughput --cluster` beside one private server in the
//! same run, `handoff --cluster` with a client per worker, and the flags' bad usage (64).

use std::process::{Command, Output};

use test_support::RedisCluster;

fn bench(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redis-locks-bench"));
    for variable in [
        "REDIS_URL",
        "REDIS_CLUSTER",
        "REDIS_SENTINEL",
        "REDIS_MASTER",
    ] {
        command.env_remove(variable);
    }
    command.args(args).output().expect("run redis-locks-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn throughput_on_a_private_cluster_prints_it_beside_one_server_with_the_ratio() {
    let out = bench(&[
        "throughput",
        "--cluster",
        "--duration",
        "2s",
        "--workers",
        "4",
    ]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for words in [
        "a private Redis Cluster of 3 masters",
        "redis-locks Mutex on the Redis Cluster",
        "redis-locks Mutex on one private server",
        "acquire p99",
        "acquire max",
        "requests/acq",
        "ratio cluster/one server:",
    ] {
        assert!(report.contains(words), "{words:?} not in:\n{report}");
    }
}

#[test]
fn throughput_and_handoff_on_a_clusters_seeds_report_their_figures_in_json() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let out = bench(&[
        "--json",
        "--cluster",
        &seeds[0],
        "throughput",
        "--compare-single",
        "--duration",
        "1s",
        "--workers",
        "4",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(report["topology"], "cluster", "{report}");
    for side in ["ours", "single_node"] {
        let variant = &report[side];
        assert!(variant["per_second"].as_f64().unwrap() > 0.0, "{report}");
        assert!(variant["requests_per_acquisition"].as_f64().unwrap() > 0.0);
        for figure in ["p50_ms", "p99_ms", "max_ms"] {
            assert!(variant["acquire"][figure].is_number(), "{side} {figure}");
        }
    }
    assert!(report["ratio_ours_to_single_node"].as_f64().unwrap() > 0.0);

    // A Client per worker, all on one contended lock on the cluster.
    let out = bench(&[
        "--json",
        "--cluster",
        &seeds.join(","),
        "handoff",
        "--kind",
        "mutex",
        "--client-per-worker",
        "--workers",
        "4",
        "--duration",
        "1s",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(report["topology"], "cluster", "{report}");
    assert_eq!(report["client_per_worker"], true, "{report}");
    assert!(report["acquisitions"].as_u64().unwrap() > 0, "{report}");
    assert!(report["requests_per_acquisition"].as_f64().unwrap() > 0.0);
    assert!(report["wait"]["max_ms"].as_f64().unwrap() > 0.0, "{report}");
    assert_eq!(report["overlaps"], 0, "{report}");

    // No fencing counter left behind on the shards.
    for master in cluster.masters() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*bench:*:fence")
            .query(&mut cluster.node(master).unwrap().connection().unwrap())
            .unwrap();
        assert!(keys.is_empty(), "left on {master}: {keys:?}");
    }
}

#[test]
fn cluster_and_sentinel_flags_that_do_not_go_together_exit_64() {
    let url = "redis://127.0.0.1:1";
    for (args, words) in [
        (
            &["throughput", "--cluster", url, "--redis", url][..],
            "cannot be combined",
        ),
        (&["handoff", "--sentinel", url], "needs --master"),
        (&["--master", "m", "handoff"], "goes with --sentinel"),
        (&["throughput", "--compare-single"], "--compare-single"),
        (&["market", "--cluster", url], "market runs on one server"),
        (
            &["throughput", "--kind", "redlock", "--cluster", url],
            "--kind redlock",
        ),
        (
            &[
                "handoff",
                "--kind",
                "redlock",
                "--sentinel",
                url,
                "--master",
                "m",
            ],
            "--kind redlock",
        ),
        (&["--nodes", "3", "handoff", "--cluster"], "--nodes"),
        (&["--cluster", "throughput"], "put it last"),
    ] {
        let out = bench(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {words:?} not in {err}");
    }
}
