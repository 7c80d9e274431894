//! The floor examples (`examples/read_floor`, `examples/handoff_floor`) run as tests, each
//! against a server the test started: every variant gets through (a refused cycle or a waiter
//! never handed the lock fails the run), contention really happened, and the run leaves no
//! key behind. No figure is asserted: the examples are measurements.

#[allow(dead_code)]
#[path = "../examples/handoff_floor/main.rs"]
mod handoff_floor;
#[allow(dead_code)]
#[path = "../examples/read_floor/main.rs"]
mod read_floor;

use std::time::Duration;

use test_support::RedisServer;

/// How many keys `server` holds.
fn keys_in(server: &RedisServer) -> i64 {
    redis::cmd("DBSIZE")
        .query(&mut server.connection().unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_floor_runs_every_variant_and_leaves_no_key() {
    let server = RedisServer::start().unwrap();
    let rates = read_floor::run(&read_floor::Args {
        redis: Some(server.url()),
        workers: 4,
        duration: Duration::from_millis(500),
    })
    .await
    .unwrap();
    assert_eq!(rates.len(), 5, "{rates:?}");
    assert!(rates[0].0.starts_with("bare"), "{rates:?}");
    for (name, rate) in &rates {
        assert!(*rate > 0.0, "{name} did no cycle: {rates:?}");
    }
    assert_eq!(keys_in(&server), 0, "the run left keys behind");
}

/// The built example `name` (cargo builds the examples beside the tests: `target/<profile>/
/// examples`, next to this test's `deps`).
fn example(name: &str) -> std::path::PathBuf {
    let test = std::env::current_exe().unwrap();
    let profile = test.parent().and_then(|deps| deps.parent()).unwrap();
    let example = profile.join("examples").join(name);
    assert!(
        example.exists(),
        "{} is not built (cargo build --examples)",
        example.display()
    );
    example
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_floor_hands_the_lock_over_in_every_layout_and_leaves_no_key() {
    let server = RedisServer::start().unwrap();
    let tallies = handoff_floor::run(&handoff_floor::Args {
        redis: Some(server.url()),
        workers: 4,
        duration: Duration::from_millis(500),
        processes: 2,
        program: Some(example("handoff_floor")),
        child: Default::default(),
    })
    .await
    .unwrap();
    assert_eq!(tallies.len(), 3, "shared, a client each, a process each");
    for tally in &tallies {
        assert!(tally.held > 0, "no acquisition");
        assert!(
            tally.handed > 0 && tally.handed <= tally.held,
            "contention: {} of {} handed over",
            tally.handed,
            tally.held
        );
    }
    assert_eq!(keys_in(&server), 0, "the run left keys behind");
}
