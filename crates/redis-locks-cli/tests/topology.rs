//! `--cluster` and `--sentinel --master`: `run` and `status` on a real Redis Cluster and a
//! real Sentinel set-up (started here), the node `status` names, and every bad combination
//! of the flags and their environment variables (64).

mod common;

use common::{command, redis_locks, stderr, stdout};
use test_support::{RedisCluster, SentinelSet};

/// `run NAME <where> -- redis-locks status NAME <where> --json`: the lock's status as seen
/// while `run` holds it; then `status` again once `run` has released it. Both parsed.
fn held_then_released(name: &str, place: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let status: Vec<&str> = ["status", name]
        .into_iter()
        .chain(place.iter().copied())
        .chain(["--json"])
        .collect();
    let out = command()
        .args(["run", name])
        .args(place)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_redis-locks"))
        .args(&status)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let held = serde_json::from_str(stdout(&out).trim()).unwrap();
    let out = redis_locks(&status);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let released = serde_json::from_str(stdout(&out).trim()).unwrap();
    (held, released)
}

#[test]
fn run_on_a_cluster_takes_and_releases_the_lock_and_status_names_its_slot_master() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let seeds = cluster.seed_urls();
    let name = "jobs:nightly";
    let master = format!("127.0.0.1:{}", cluster.master_for_key(name));
    let place = ["--cluster", &seeds[0], "--cluster", &seeds[1]];
    let (held, released) = held_then_released(name, &place);
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["served_by"], master.as_str(), "{held}");
    assert_eq!(held["topology"], "cluster", "{held}");
    assert_eq!(released["held"], false, "{released}");
    assert_eq!(released["served_by"], master.as_str(), "{released}");

    // REDIS_CLUSTER (a comma list) names it too; the text says which node serves the slot.
    let out = command()
        .args(["status", name])
        .env("REDIS_CLUSTER", seeds.join(","))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        text.contains(&format!(
            "served by       {master} (the master of the lock's hash slot)"
        )),
        "{text}"
    );
}

#[test]
fn run_on_a_sentinel_master_takes_and_releases_the_lock() {
    let set = SentinelSet::start(1, 1).unwrap();
    let sentinels = set.sentinel_urls();
    let master = format!("127.0.0.1:{}", set.master_port());
    let place = ["--sentinel", &sentinels[0], "--master", set.master_name()];
    let (held, released) = held_then_released("jobs:sentinel", &place);
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["served_by"], master.as_str(), "{held}");
    assert_eq!(held["topology"], "sentinel", "{held}");
    assert_eq!(released["held"], false, "{released}");

    // REDIS_SENTINEL and REDIS_MASTER name it too.
    let out = command()
        .args(["run", "jobs:sentinel", "--", "true"])
        .env("REDIS_SENTINEL", &sentinels[0])
        .env("REDIS_MASTER", set.master_name())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn bad_combinations_of_redis_cluster_sentinel_and_master_exit_64() {
    let (a, b, c) = (
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "x", "--cluster", a, "--redis", b, "--", "true"],
            "--cluster cannot be combined with --redis",
        ),
        (
            &[
                "status",
                "x",
                "--cluster",
                a,
                "--sentinel",
                b,
                "--master",
                "m",
            ],
            "cannot be combined",
        ),
        (
            &[
                "status",
                "x",
                "--redis",
                a,
                "--sentinel",
                b,
                "--master",
                "m",
            ],
            "cannot be combined",
        ),
        (&["status", "x", "--sentinel", a], "needs --master"),
        (&["run", "x", "--sentinel", "--", "true"], "needs --master"),
        (&["status", "x", "--master", "m"], "goes with --sentinel"),
        (
            &["status", "x", "--redis", a, "--master", "m"],
            "goes with --sentinel",
        ),
        (
            &[
                "run",
                "x",
                "--redis",
                a,
                "--redis",
                b,
                "--redis",
                c,
                "--cluster",
                "--",
                "true",
            ],
            "Redlock",
        ),
        (
            &[
                "status",
                "x",
                "--redis",
                &format!("{a},{b},{c}"),
                "--sentinel",
                a,
                "--master",
                "m",
            ],
            "Redlock",
        ),
        (
            &["status", "x", "--cluster", "not-a-url"],
            "not a Redis URL",
        ),
        (&["status", "--cluster", "x"], "put it last"),
        (
            &["status", "x", "--cluster=http://127.0.0.1:1"],
            "invalid Redis URL",
        ),
        (
            &[
                "run",
                "x",
                "--sentinel=garbage://",
                "--master",
                "m",
                "--",
                "true",
            ],
            "invalid Redis URL",
        ),
        (&["demo", "--cluster", "--redis", a], "cannot be combined"),
        (
            &["check", "--sentinel", a, "--cluster", b],
            "cannot be combined",
        ),
        (
            &["check", "--cluster", a, "--fault", "server-pause"],
            "--fault server-pause",
        ),
        (
            &["check", "--cluster", a, "--primitive", "redlock"],
            "--primitive redlock",
        ),
        (
            &[
                "check",
                "--sentinel",
                a,
                "--master",
                "m",
                "--algorithm",
                "setnx-expire",
            ],
            "only ours",
        ),
    ];
    for (args, words) in cases {
        let out = redis_locks(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: {words:?} not in {err}");
    }

    // Two kinds in the environment, none on the command line: bad usage too.
    let out = command()
        .args(["status", "x"])
        .env("REDIS_URL", a)
        .env("REDIS_CLUSTER", b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(stderr(&out).contains("REDIS_URL and REDIS_CLUSTER are both set"));
    // The command line wins over the environment: the cluster is used (and is unreachable).
    for (variable, flag) in [("REDIS_URL", "--cluster"), ("REDIS_CLUSTER", "--redis")] {
        let out = command()
            .args(["status", "x", flag, c])
            .env(variable, a)
            .env("REDIS_MASTER", "m")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(69), "{flag}: {}", stderr(&out));
    }
}
