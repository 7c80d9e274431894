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
        .env_remove("REDIS_CLUSTER")
        .env_remove("REDIS_SENTINEL")
        .env_remove("REDIS_MASTER")
        .output()
        .expect("run redis-locks-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the benchmark `command` (its words, without `--redis` and `--json`) against
/// `server`; its JSON objects.
fn json_runs(server: &RedisServer, command: &str) -> Vec<serde_json::Value> {
    json_runs_on_nodes(std::slice::from_ref(server), command)
}

/// Fails when a run left a fencing counter behind in `server`.
fn assert_no_counters_left(server: &RedisServer) {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*bench:*:fence")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
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
    for word in [
        "throughput",
        "handoff",
        "market",
        "hold-many",
        "--redis",
        "--json",
        "--runtime",
        "69",
    ] {
        assert!(help.contains(word), "{word} missing:\n{help}");
    }
    for args in [
        &[][..],
        &["nothing"],
        &["throughput", "--duration", "0s"],
        &["handoff", "--workers", "1"],
        &["handoff", "--kind", "rwlock", "--workers", "4"],
        &["handoff", "--readers", "2"],
        &["handoff", "--kind", "rwlock", "--writers", "0"],
        &["throughput", "--kind", "upgradable"],
        &["--runtime", "single", "throughput"],
        &["handoff", "--compare-layouts", "--kind", "rwlock"],
        &["handoff", "--compare-layouts", "--client-per-worker"],
        &["handoff", "--permits", "2"],
        &["handoff", "--kind", "mutex", "--permits", "2"],
        &["handoff", "--kind", "semaphore", "--permits", "0"],
        &["handoff", "--kind", "semaphore", "--permits", "many"],
        &["handoff", "--compare-layouts", "--kind", "semaphore"],
        &["throughput", "--permits", "2"],
        &["throughput", "--kind", "semaphore", "--permits", "0"],
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
    let reports = json_runs(
        &server,
        "handoff --workers 4 --processes 2 --client-per-worker --duration 500ms",
    );
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
    assert_no_counters_left(&server);
}

#[test]
fn handoff_compares_the_three_layouts_in_one_run_without_overlaps() {
    let server = RedisServer::start().unwrap();
    let reports = json_runs(
        &server,
        "handoff --kind mutex --workers 4 --processes 2 --compare-layouts --duration 1s",
    );
    assert_eq!(reports.len(), 1, "one object: {reports:?}");
    let report = &reports[0];
    assert_eq!(report["bench"], "handoff-layouts", "{report}");
    assert_eq!(report["slices"], 10, "{report}");
    let layouts = report["layouts"].as_array().unwrap();
    let spread: Vec<(bool, u64)> = layouts
        .iter()
        .map(|l| {
            (
                l["client_per_worker"].as_bool().unwrap(),
                l["processes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(spread, [(false, 1), (true, 1), (true, 2)], "{report}");
    assert_eq!(layouts[0]["ratio_to_shared"], 1.0, "{report}");
    for layout in layouts {
        assert!(layout["acquisitions"].as_u64().unwrap() > 0, "{layout}");
        assert_eq!(layout["overlaps"], 0, "{layout}");
        assert_eq!(layout["token_regressions"], 0, "{layout}");
        // Contended: every acquisition asks and releases at least once.
        assert!(layout["requests_per_acquisition"].as_f64().unwrap() >= 2.0);
        let ratio = layout["ratio_to_shared"].as_f64().unwrap();
        let rate = layout["per_second"].as_f64().unwrap();
        let shared = layouts[0]["per_second"].as_f64().unwrap();
        assert!((ratio - rate / shared).abs() < 1e-9, "{layout}");
    }
    assert_no_counters_left(&server);
}

#[test]
fn throughput_measures_every_kind_of_lock_against_the_bare_minimum_and_its_floor() {
    let server = RedisServer::start().unwrap();
    for (kind, name) in [
        ("mutex", "redis-locks Mutex"),
        ("fair-mutex", "redis-locks FairMutex"),
        ("reentrant", "redis-locks ReentrantMutex"),
        ("read", "redis-locks RwLock read"),
        ("write", "redis-locks RwLock write"),
    ] {
        let runs = json_runs(
            &server,
            &format!("throughput --kind {kind} --workers 2 --duration 200ms"),
        );
        assert_eq!(runs.len(), 1, "{runs:?}");
        let run = &runs[0];
        assert_eq!(run["kind"], kind.replace('-', "_"), "{run}");
        assert_eq!(run["ours"]["name"], name, "{run}");
        for variant in ["ours", "bare", "bare_fenced"] {
            assert!(run[variant]["acquisitions"].as_u64().unwrap() > 0, "{run}");
            // An uncontended acquire + release is two round trips, for the library too.
            let requests = run[variant]["requests_per_acquisition"].as_f64().unwrap();
            assert!((2.0..2.5).contains(&requests), "{run}");
        }
        assert!(run["ratio_ours_to_bare"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["ratio_ours_to_bare_fenced"].as_f64().unwrap() > 0.0);
        assert!(run["memory"]["held_lock_key_bytes"].as_i64().unwrap() > 0);
        // The floor, the least the design must send, in the same run (for a Mutex its own
        // commands sent bare): each of its acquisitions checked (taken, then released).
        assert!(
            run["floor"]["name"]
                .as_str()
                .unwrap()
                .starts_with("floor: ")
        );
        assert!(run["floor"]["acquisitions"].as_u64().unwrap() > 0, "{run}");
        let requests = run["floor"]["requests_per_acquisition"].as_f64().unwrap();
        assert!((2.0..2.5).contains(&requests), "{run}");
        assert!(run["ratio_ours_to_floor"].as_f64().unwrap() > 0.0, "{run}");
    }
    assert_no_counters_left(&server);
    // Nor any floor's hold or lock.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

#[test]
fn rwlock_handoff_lets_readers_share_and_writers_in_alone() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(
        &server,
        "handoff --kind rwlock --readers 4 --writers 2 --hold 2ms --duration 1s",
    );
    assert_eq!(runs.len(), 1, "only the variant asked for: {runs:?}");
    let run = &runs[0];
    assert_eq!(run["variant"], "rwlock", "{run}");
    assert_eq!((&run["readers"], &run["writers"]), (&4.into(), &2.into()));
    assert_eq!(run["workers"], 6, "{run}");
    for side in ["reads", "writes"] {
        assert!(run[side]["acquisitions"].as_u64().unwrap() > 0, "{run}");
        assert!(run[side]["per_second"].as_f64().unwrap() > 0.0, "{run}");
        // Every reader and every writer got in: nobody starved.
        assert!(run[side]["per_worker_min"].as_u64().unwrap() > 0, "{run}");
        let wait = &run[side]["wait"];
        assert!(wait["p50_ms"].as_f64().unwrap() <= wait["p99_ms"].as_f64().unwrap());
        assert!(wait["p99_ms"].as_f64().unwrap() <= wait["max_ms"].as_f64().unwrap());
    }
    assert!(run["max_concurrent_readers"].as_u64().unwrap() > 1, "{run}");
    assert_eq!(run["overlaps"], 0, "{run}");
    assert_eq!(run["token_regressions"], 0, "{run}");
    assert!(run["requests_per_acquisition"].as_f64().unwrap() >= 2.0);
    assert_no_counters_left(&server);
    // The table form says what a reader looks for.
    let url = server.url();
    let command =
        format!("handoff --redis {url} --kind rwlock --readers 2 --writers 1 --duration 200ms");
    let out = bench(&command.split_whitespace().collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for row in [
        "2 readers and 1 writer,",
        "reads",
        "writes",
        "wait max",
        "per worker min/max",
        "max concurrent readers",
        "requests/acq",
    ] {
        assert!(table.contains(row), "{row} missing:\n{table}");
    }
}

#[test]
fn semaphore_handoff_keeps_at_most_n_holders_and_reports_their_use() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(
        &server,
        "handoff --kind semaphore --permits 3 --workers 8 --hold 2ms --duration 1s --client-per-worker",
    );
    assert_eq!(runs.len(), 1, "only the variant asked for: {runs:?}");
    let run = &runs[0];
    assert_eq!(run["variant"], "semaphore", "{run}");
    assert_eq!((&run["permits"], &run["workers"]), (&3.into(), &8.into()));
    assert!(run["acquisitions"].as_u64().unwrap() > 0, "{run}");
    // Everybody got permits, never more than 3 at once, and all 3 were in use at times.
    assert!(run["per_worker_min"].as_u64().unwrap() > 0, "{run}");
    assert_eq!(run["most_at_once"], 3, "{run}");
    assert_eq!(run["over_limit"], 0, "{run}");
    assert_eq!(run["repeated_tokens"], 0, "{run}");
    assert_eq!(run["token_regressions"], 0, "{run}");
    let utilisation = run["utilisation"].as_f64().unwrap();
    assert!(utilisation > 0.0 && utilisation <= 1.0, "{run}");
    let full = run["all_in_use_share"].as_f64().unwrap();
    assert!(full > 0.0 && full <= utilisation + 1e-9, "{run}");
    assert!(run["wait"]["max_ms"].as_f64().unwrap() >= run["wait"]["p99_ms"].as_f64().unwrap());
    // With a client per worker, every acquisition's own round trips are counted: one when
    // it got a permit at once, more when it had to wait.
    assert!(
        run["requests_per_acquisition"].as_f64().unwrap() >= 2.0,
        "{run}"
    );
    assert!(run["refused_first_share"].as_f64().unwrap() > 0.0, "{run}");
    assert!(
        run["requests_per_contended_acquisition"].as_f64().unwrap() > 1.0,
        "{run}"
    );
    assert_no_counters_left(&server);
    // Across processes (each its own clients), and the table form.
    let url = server.url();
    let command = format!(
        "handoff --redis {url} --kind semaphore --permits 2 --workers 4 --processes 2 --duration 300ms"
    );
    let out = bench(&command.split_whitespace().collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for row in [
        "one Semaphore of 2 permits",
        "permits in use (mean share of N)",
        "all N in use (share of the time)",
        "most holders at once",
        "wait max",
        "requests/acq",
        "over N at once",
    ] {
        assert!(table.contains(row), "{row} missing:\n{table}");
    }
    assert_no_counters_left(&server);
}

#[test]
fn semaphore_throughput_is_measured_beside_a_mutex_in_the_same_run() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(
        &server,
        "throughput --kind semaphore --permits 2 --workers 2 --duration 300ms",
    );
    let run = &runs[0];
    assert_eq!(run["kind"], "semaphore", "{run}");
    assert_eq!(run["permits"], 2, "{run}");
    assert_eq!(run["ours"]["name"], "redis-locks Semaphore", "{run}");
    assert_eq!(run["one_node"]["name"], "redis-locks Mutex", "{run}");
    // The floor: one script (reclaim by the server clock, count, add, fence) and a ZREM.
    assert_eq!(
        run["floor"]["name"], "floor: 1 script (reclaim, count, add, INCR) + ZREM",
        "{run}"
    );
    for variant in ["ours", "one_node", "floor", "bare", "bare_fenced"] {
        assert!(run[variant]["acquisitions"].as_u64().unwrap() > 0, "{run}");
        // Uncontended: an acquire and a release, two round trips.
        let requests = run[variant]["requests_per_acquisition"].as_f64().unwrap();
        assert!((2.0..2.5).contains(&requests), "{variant}: {run}");
    }
    for ratio in [
        "ratio_ours_to_mutex",
        "ratio_cycle_p50_to_one_node",
        "ratio_ours_to_floor",
        "ratio_floor_to_mutex",
    ] {
        assert!(run[ratio].as_f64().unwrap() > 0.0, "{ratio}: {run}");
    }
    // No key left behind: not the floor's holders nor its counter, nor any lock's.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// Runs `command` against `servers` (with several, the nodes of a Redlock); its JSON objects.
fn json_runs_on_nodes(servers: &[RedisServer], command: &str) -> Vec<serde_json::Value> {
    let mut args: Vec<String> = command.split_whitespace().map(String::from).collect();
    for server in servers {
        args.push("--redis".into());
        args.push(server.url());
    }
    args.push("--json".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = bench(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn redlock_throughput_is_measured_beside_one_node_and_the_bare_fan_out() {
    let servers = test_support::start_many(3).unwrap();
    // On the one-thread runtime (the other tests run on the default, multi-threaded one).
    let runs = json_runs_on_nodes(
        &servers,
        "--runtime current-thread throughput --kind redlock --workers 2 --duration 500ms",
    );
    let run = &runs[0];
    assert_eq!(run["kind"], "redlock");
    assert_eq!(run["nodes"], 3);
    for variant in ["ours", "one_node", "bare_quorum", "floor"] {
        assert!(
            run[variant]["acquisitions"].as_u64().unwrap() > 0,
            "{variant}: {run}"
        );
        assert!(run[variant]["cycle"]["p50_ms"].as_f64().unwrap() > 0.0);
    }
    // A Redlock asks every node: at least 2 requests per node per acquisition (acquire,
    // release), in the same units as the one-node Mutex's 2.
    let requests = run["ours"]["requests_per_acquisition"].as_f64().unwrap();
    assert!((6.0..=9.5).contains(&requests), "{requests}");
    assert!(run["ratio_cycle_p50_to_one_node"].as_f64().unwrap() > 0.0);
    assert!(run["ratio_ours_to_floor"].as_f64().unwrap() > 0.0);
    for server in &servers {
        assert_no_counters_left(server);
    }
}

#[test]
fn redlock_handoff_runs_across_processes_with_no_overlap() {
    let servers = test_support::start_many(3).unwrap();
    // Warmed up: each client (each worker's) takes the lock once before the run, in each
    // process (the flag reaches the worker processes).
    let runs = json_runs_on_nodes(
        &servers,
        "handoff --kind redlock --workers 4 --processes 2 --client-per-worker --warm-up --duration 1s",
    );
    let run = &runs[0];
    assert_eq!(run["variant"], "redlock", "{run}");
    assert_eq!(run["warm_up"], true, "{run}");
    assert!(run["acquisitions"].as_u64().unwrap() > 4, "{run}");
    assert_eq!(run["overlaps"], 0);
    assert_eq!(run["token_regressions"], 0);
    for server in &servers {
        assert_no_counters_left(server);
    }
}

#[test]
fn hold_many_renews_in_batches_beside_one_request_per_renewal_and_loses_none() {
    let server = RedisServer::start().unwrap();
    let runs = json_runs(
        &server,
        "hold-many --locks 300 --lease 300ms --hold 700ms --compare",
    );
    let run = &runs[0];
    assert_eq!(runs.len(), 1, "one object: {runs:?}");
    let before = &run["one_per_lock"];
    assert_eq!(run["batch"], 500, "{run}");
    assert_eq!(before["batch"], 1, "{run}");
    for report in [run, before] {
        assert_eq!(report["locks"], 300, "{run}");
        assert_eq!(report["lost"], 0, "{run}");
        for field in [
            "acquire_s",
            "renewal_round_trips_per_s",
            "script_calls_per_s",
            "redis_bytes_per_lock",
            "client_bytes_per_lock",
        ] {
            assert!(report[field].as_f64().is_some(), "{field}: {run}");
        }
    }
    // 300 locks renewed every 100 ms: about 3,000 requests a second one by one.
    let batched = run["renewal_round_trips_per_s"].as_f64().unwrap();
    let one_by_one = before["renewal_round_trips_per_s"].as_f64().unwrap();
    assert!(batched * 10.0 < one_by_one, "{run}");
    // Each lock's key was released, each counter deleted.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
    // Fewer than two leases of hold is refused.
    let out = bench(&[
        "hold-many",
        "--redis",
        &server.url(),
        "--lease",
        "1s",
        "--hold",
        "1500ms",
    ]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
}
