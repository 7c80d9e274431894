//! `redis-locks top`, driven in `tmux` as a person would use it (`send-keys`, `capture-pane`),
//! against a real server: a held lock, its waiter, a lease that counts down, `q` to quit; and
//! the message without a terminal (common/tmux.rs: the terminal).

mod common;

use std::time::Duration;

use common::tmux::Tmux;
use common::{REDIS_VARIABLES, eventually, expect, redis_locks};
use redis_locks::Client;
use test_support::RedisServer;

/// The lease column of the line of `name` on `screen`, in seconds.
fn lease_of(screen: &str, name: &str) -> Option<f64> {
    let line = screen.lines().find(|line| line.starts_with(name))?;
    line.split_whitespace()
        .find_map(|word| word.strip_suffix('s')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_a_held_lock_its_waiter_and_a_countdown_and_quits_on_q() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let held = client.mutex("jobs:nightly").unwrap().lock().await.unwrap();
    let other = Client::connect(&url).await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = other.mutex("jobs:nightly").unwrap().lock().await.unwrap();
        guard.release().await.unwrap();
    });
    let unset: String = REDIS_VARIABLES.iter().map(|v| format!("-u {v} ")).collect();
    let command = format!(
        "env {unset}{} top --redis {url} --interval 200ms",
        env!("CARGO_BIN_EXE_redis-locks")
    );
    let checked = tokio::task::spawn_blocking(move || {
        let tmux = Tmux::start("top", &command, 120, 20);
        let mut screen = String::new();
        let shown = eventually(Duration::from_secs(15), || {
            screen = tmux.screen();
            screen.lines().any(|line| {
                line.starts_with("jobs:nightly")
                    && line.contains("mutex")
                    && line.split_whitespace().nth(4) == Some("1")
            })
        });
        assert!(
            shown,
            "the held lock and its waiter never showed:\n{screen}"
        );
        assert!(
            screen.contains("NAME") && screen.contains("q quits"),
            "{screen}"
        );
        let first = lease_of(&screen, "jobs:nightly").expect("a lease on the line");
        assert!(first > 0.0 && first <= 30.0, "{first}");
        let moved = eventually(Duration::from_secs(5), || {
            screen = tmux.screen();
            lease_of(&screen, "jobs:nightly").is_some_and(|now| now < first)
        });
        assert!(moved, "the countdown did not move from {first}:\n{screen}");
        tmux.send_keys("q");
        assert!(
            eventually(Duration::from_secs(5), || !tmux.running()),
            "top did not quit on q"
        );
    })
    .await;
    held.release().await.unwrap();
    waiter.await.unwrap();
    checked.unwrap();
}

#[test]
fn top_without_a_terminal_says_so_and_exits_64() {
    let server = RedisServer::start().unwrap();
    let out = redis_locks(&["top", "--redis", &server.url()]);
    expect(&out, 64, "top needs a terminal");
    let out = redis_locks(&["top", "--redis", &server.url(), "--interval", "0s"]);
    expect(&out, 64, "--interval");
}
