//! `redis-locks run` and `status` over several `--redis` servers: a Redlock.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use test_support::{ChildProcess, RedisServer};

fn with_nodes(cmd: &mut Command, servers: &[RedisServer]) {
    for server in servers {
        cmd.args(["--redis", &server.url()]);
    }
}

fn run(servers: &[RedisServer], args: &[&str], command: &[&str]) -> Command {
    let mut cmd = common::command();
    cmd.arg("run");
    with_nodes(&mut cmd, servers);
    cmd.args(args).arg("--").args(command);
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run redis-locks")
}

fn holders(servers: &[RedisServer], key: &str) -> usize {
    servers
        .iter()
        .filter(|server| {
            redis::cmd("EXISTS")
                .arg(key)
                .query::<i64>(&mut server.connection().unwrap())
                .unwrap()
                == 1
        })
        .count()
}

#[test]
fn run_over_three_servers_holds_a_majority_and_tokens_increase() {
    let servers = test_support::start_many(3).unwrap();
    let script =
        "echo token=$REDIS_LOCKS_TOKEN; for p in $PORTS; do redis-cli -p $p EXISTS rl-job; done";
    let ports: Vec<String> = servers.iter().map(|s| s.port().to_string()).collect();
    let ports = ports.join(" ");
    let token = |out: &Output| -> u64 {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let field = text.split_whitespace().next().unwrap().to_string();
        field.strip_prefix("token=").unwrap().parse().unwrap()
    };
    let mut first = run(&servers, &["rl-job"], &["sh", "-c", script]);
    first.env("PORTS", &ports);
    let first = output(first);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let held_on = String::from_utf8_lossy(&first.stdout)
        .lines()
        .filter(|line| line.trim() == "1")
        .count();
    assert!(
        held_on >= 2,
        "the key is on a majority while the command runs: {first:?}"
    );
    // The same list as a comma list in REDIS_URL.
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut second = common::command();
    second
        .args(["run", "rl-job", "--", "sh", "-c", script])
        .env("REDIS_URL", urls.join(","))
        .env("PORTS", &ports);
    let second = output(second);
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert!(token(&second) > token(&first));
    assert_eq!(holders(&servers, "rl-job"), 0, "released on every node");
}

#[test]
fn a_held_redlock_makes_wait_zero_exit_75_and_status_shows_every_node() {
    let servers = test_support::start_many(3).unwrap();
    let mut holder_cmd = run(
        &servers,
        &["rl-held"],
        &["sh", "-c", "echo holding; sleep 4"],
    );
    holder_cmd.stdout(std::process::Stdio::piped());
    let mut holder = ChildProcess::spawn(holder_cmd).unwrap();
    assert!(
        holder
            .wait_for_line("holding", Duration::from_secs(10))
            .is_some()
    );
    let refused = output(run(&servers, &["rl-held", "--wait", "0"], &["true"]));
    assert_eq!(refused.status.code(), Some(75), "{refused:?}");

    let mut status = common::command();
    status.args(["status", "rl-held", "--json"]);
    with_nodes(&mut status, &servers);
    let status = output(status);
    assert_eq!(status.status.code(), Some(0), "{status:?}");
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["kind"], "redlock");
    assert_eq!(json["quorum"], 2);
    let nodes = json["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let owner = json["majority_holder"].as_str().expect("a majority holder");
    assert!(
        nodes
            .iter()
            .filter(|node| node["holder_owner"] == owner)
            .count()
            >= 2
    );

    let mut text = common::command();
    text.args(["status", "rl-held"]);
    with_nodes(&mut text, &servers);
    let text = String::from_utf8(output(text).stdout).unwrap();
    assert!(text.contains("a majority agrees on owner"), "{text}");
    assert_eq!(text.matches("node ").count(), 3, "{text}");
    assert_eq!(holder.wait_exit(Duration::from_secs(20)), Some(0));
    assert_eq!(holders(&servers, "rl-held"), 0, "released on every node");
}

#[test]
fn a_majority_down_is_exit_69_and_bad_node_lists_are_usage_errors() {
    let mut servers = test_support::start_many(3).unwrap();
    // Two nodes: an even number is refused.
    let even = output(run(&servers[..2], &["rl-bad"], &["true"]));
    assert_eq!(even.status.code(), Some(64), "{even:?}");
    let shared = output(run(&servers, &["rl-bad", "--shared"], &["true"]));
    assert_eq!(shared.status.code(), Some(64), "{shared:?}");
    // A node that cannot be reached when `run` starts: a minority, so the lock is taken on the
    // others and the command runs; with a majority down, exit 69.
    servers[2].kill();
    let started = std::time::Instant::now();
    let minority = output(run(&servers, &["rl-bad"], &["sh", "-c", "echo ran"]));
    let took = started.elapsed();
    assert_eq!(minority.status.code(), Some(0), "{minority:?}");
    assert!(String::from_utf8_lossy(&minority.stdout).contains("ran"));
    let said = String::from_utf8_lossy(&minority.stderr);
    assert!(said.contains("node 3 of 3 is down"), "{said}");
    // The node that refuses connections costs neither its reconnect attempts at the start
    // (about 1.1 s) nor a node timeout (1 s) for its release at the end: a refused request
    // fails at once. Either would take this past a second.
    assert!(
        took < Duration::from_secs(1),
        "run with a node down took {took:?}"
    );
    assert_eq!(
        holders(&servers[..2], "rl-bad"),
        0,
        "released on the nodes that are up"
    );
    servers[1].kill();
    let majority = output(run(&servers, &["rl-bad"], &["true"]));
    assert_eq!(majority.status.code(), Some(69), "{majority:?}");
    let said = String::from_utf8_lossy(&majority.stderr);
    assert!(said.contains("no majority of the 3 nodes"), "{said}");
}

#[test]
fn a_node_paused_when_run_starts_does_not_hold_up_the_command() {
    let servers = test_support::start_many(3).unwrap();
    servers[1].pause();
    // A paused server accepts the connection but never answers it: a connect would wait for
    // its whole budget (connect timeout and reconnect attempts). The command starts within the
    // grace after the majority instead; the paused node's requests end at the node timeout.
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = run(&servers, &["rl-paused"], &["sh", "-c", "echo ran"]);
    cmd.stderr(stderr.reopen().unwrap());
    let started = std::time::Instant::now();
    let mut child = ChildProcess::spawn(cmd).expect("start redis-locks run");
    let status = child.wait_exit(Duration::from_secs(30));
    let took = started.elapsed();
    servers[1].resume();
    assert_eq!(status, Some(0));
    let said = std::fs::read_to_string(stderr.path()).unwrap();
    assert!(said.contains("node 2 of 3 did not connect"), "{said}");
    assert!(
        took < Duration::from_secs(5),
        "run with a paused node took {took:?}"
    );
    assert_eq!(holders(&servers, "rl-paused"), 0, "no key left on any node");
}

/// Whether process `pid` is stopped (SIGSTOP): state `T` in `/proc/<pid>/stat`.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let (_, after) = stat.rsplit_once(')')?;
            after.split_whitespace().next().map(|state| state == "T")
        })
        .unwrap_or(false)
}

#[test]
fn run_sends_every_nodes_release_before_it_exits() {
    let servers = test_support::start_many(3).unwrap();
    let paused = servers[2].pid().unwrap();
    // The command stops the third node, so run's release is done at the majority while that
    // node's release waits; run must see it through (within the node timeout, 1 s) before it
    // exits, or that node keeps the key until the lease ends.
    let stop = format!("kill -STOP {paused}");
    let mut child = run(&servers, &["--ttl", "60s", "rl-exit"], &["sh", "-c", &stop])
        .spawn()
        .expect("start redis-locks run");
    let started = std::time::Instant::now();
    while !stopped(paused) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the command never stopped the node"
        );
        if let Some(status) = child.try_wait().unwrap() {
            servers[2].resume();
            panic!("run exited ({status}) before its command stopped the node");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    let still_running = child.try_wait().unwrap().is_none();
    servers[2].resume();
    assert!(
        still_running,
        "run exited with a node's release still under way"
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(holders(&servers, "rl-exit"), 0, "no node keeps the key");
}

#[test]
fn a_lost_redlock_is_released_where_it_still_stands_before_run_exits() {
    let servers = test_support::start_many(3).unwrap();
    let mut child = run(&servers, &["--ttl", "3s", "rl-lost"], &["sleep", "60"])
        .spawn()
        .expect("start redis-locks run");
    let started = std::time::Instant::now();
    while holders(&servers, "rl-lost") < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the key never stood on every node"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // A majority loses the key (as nodes restarted without their data would): the next
    // renewal, within a third of the lease, finds it gone there, and the lock is lost. A
    // renewal between the two deletions would prove the lock on the other two nodes and put
    // the first key back, so the deletions are repeated until run notices.
    let status = loop {
        for server in &servers[..2] {
            redis::cmd("DEL")
                .arg("rl-lost")
                .exec(&mut server.connection().unwrap())
                .unwrap();
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "run did not notice the loss"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(70), "a lost lock is exit 70");
    // The third node still had the key, with up to 3 s of lease left: run released it there.
    assert_eq!(
        holders(&servers, "rl-lost"),
        0,
        "the node that kept the key released it before run exited"
    );
}
