//! `redis-locks run --permits N` (a permit of a `Semaphore`: at most N commands at once) and
//! `status` of a semaphore, as real processes against a real server.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{expect, most_at_once, redis_locks, run, scratch, status, until_exists};
use test_support::{ChildProcess, RedisServer};

/// A holder of one permit: `run ARGS -- sh -c 'echo ready token=...; <until release
/// exists>'`, started and seen ready. Returns it with its fencing token.
fn holder(server: &RedisServer, args: &[&str], release: &Path) -> (ChildProcess, u64) {
    let script = format!(
        "echo ready token=$REDIS_LOCKS_TOKEN permits=$REDIS_LOCKS_PERMITS; {}",
        until_exists(release)
    );
    let mut child = ChildProcess::spawn(run(server, args, &script)).unwrap();
    let line = child
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the holder started its command");
    let token = line
        .split_whitespace()
        .find_map(|field| field.strip_prefix("token="))
        .unwrap()
        .parse()
        .unwrap();
    (child, token)
}

#[test]
fn of_four_runs_with_two_permits_never_more_than_two_run_at_once_and_all_run() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("limit");
    let log = dir.join("log");
    // Each command logs its start and end (nanoseconds of the wall clock, inside its hold)
    // and holds for 600 ms: four at once with two permits must run two by two.
    let script = format!(
        "echo start $$ $(date +%s%N) >> {log}; echo token=$REDIS_LOCKS_TOKEN; sleep 0.6; \
         echo end $$ $(date +%s%N) >> {log}",
        log = log.display()
    );
    let children: Vec<_> = (0..4)
        .map(|_| {
            // A leaked permit would end a run at its wait budget (exit 75), not hang the test.
            run(
                &server,
                &["pool", "--permits", "2", "--wait", "20s"],
                &script,
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut tokens = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        common::succeeded(&out);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        tokens.push(
            text.trim()
                .strip_prefix("token=")
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let (most, started) = most_at_once(&log);
    assert_eq!(started, 4, "every command ran: {log}");
    assert_eq!(most, 2, "two at once, never three: {log}");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 4, "every permit its own fencing token");
    let free = status(&server, "pool");
    assert_eq!(free["held"], false, "all released: {free}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_shows_the_permits_in_use_and_every_holder_with_its_lease() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("status");
    let release = dir.join("release");
    let args = ["jobs", "--permits", "3", "--ttl", "5s"];
    let (mut a, token_a) = holder(&server, &args, &release);
    let (mut b, token_b) = holder(&server, &args, &release);
    assert_ne!(token_a, token_b);

    let held = status(&server, "jobs");
    assert_eq!(held["kind"], "semaphore", "{held}");
    assert_eq!(held["held"], true);
    assert_eq!(held["permits"], 3);
    assert_eq!(held["permits_in_use"], 2);
    assert_eq!(held["permits_available"], 1);
    assert_eq!(held["waiting"], 0);
    assert_eq!(held["fencing_counter"], token_a.max(token_b));
    let holders = held["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{held}");
    for holder in holders {
        assert_eq!(holder["permits"], 1);
        assert!(!holder["owner"].as_str().unwrap().is_empty(), "{held}");
        let left = holder["lease_remaining_ms"].as_u64().unwrap();
        assert!(left > 1_000 && left <= 5_000, "{held}");
    }
    // The table form, for people.
    let out = redis_locks(&["status", "jobs", "--redis", &server.url()]);
    common::succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("kind            semaphore"), "{text}");
    assert!(
        text.contains("permits         2 of 3 in use, 1 free"),
        "{text}"
    );
    assert_eq!(text.matches("holder          owner").count(), 2, "{text}");
    assert!(text.contains("lease remaining"), "{text}");

    std::fs::write(&release, "").unwrap();
    assert_eq!(a.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(b.wait_exit(Duration::from_secs(10)), Some(0));
    let free = status(&server, "jobs");
    assert_eq!(free["held"], false, "{free}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_semaphore_refuses_or_waits_and_another_n_or_another_kind_is_refused_with_65() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("mismatch");
    let release = dir.join("release");
    let (mut holder, _) = holder(&server, &["gate", "--permits", "1"], &release);
    let url = server.url();
    let attempt = |flags: &[&str]| {
        let mut args = vec!["run", "gate", "--redis", &url];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "echo", "ran"]);
        redis_locks(&args)
    };
    // Full: one attempt is refused (75), a wait of over a second says who holds.
    let out = attempt(&["--permits", "1", "--wait", "0"]);
    expect(&out, 75, "held by another owner");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    let out = attempt(&["--permits", "1", "--wait", "1500ms"]);
    expect(
        &out,
        75,
        "waiting for lock \"gate\": 1 of its 1 permits held by 1 holder(s)",
    );
    // Another N while a holder holds: a data error (65) that names both, nothing run.
    let out = attempt(&["--permits", "2", "--wait", "0"]);
    let err = expect(&out, 65, "in use with 1 permits, not 2");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ran"),
        "{err}"
    );
    // The name taken as a Mutex or an RwLock while it is a semaphore: 65, saying what it is.
    for flags in [&["--wait", "0"][..], &["--shared", "--wait", "0"][..]] {
        let out = attempt(flags);
        expect(&out, 65, "in use as a Semaphore (`run --permits N`)");
    }
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait_exit(Duration::from_secs(10)), Some(0));
    // Once nobody holds or waits, the next run's N counts.
    let out = attempt(&["--permits", "2", "--wait", "0"]);
    common::succeeded(&out);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_whose_permit_is_lost_stops_its_command_and_exits_70() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("lost");
    let release = dir.join("release");
    let (mut holder, _) = holder(
        &server,
        &["lossy", "--permits", "2", "--ttl", "600ms", "--grace", "1s"],
        &release,
    );
    // The permits taken away by hand (the semaphore's hash), as an operator or a server that
    // lost its data would: the watchdog's next renewal finds the permit gone.
    let started = Instant::now();
    let _: i64 = redis::cmd("DEL")
        .arg("lossy")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert_eq!(holder.wait_exit(Duration::from_secs(10)), Some(70));
    assert!(started.elapsed() < Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_permits_are_bad_usage() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    for (flags, says) in [
        (&["--permits", "0"][..], "--permits"),
        (&["--permits", "two"][..], "--permits"),
        (&["--permits", "-1"][..], "'-1'"),
        (&["--permits"][..], "--permits"),
        (&["--permits", "2", "--shared"][..], "cannot be used with"),
        (
            &["--permits", "2", "--exclusive"][..],
            "cannot be used with",
        ),
    ] {
        let mut args = vec!["run", "name", "--redis", &url];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "echo", "ran"]);
        let out = redis_locks(&args);
        expect(&out, 64, says);
        assert!(out.stdout.is_empty(), "{flags:?}");
    }
    // Several --redis make a Redlock, which has no permits (refused before connecting).
    let out = redis_locks(&[
        "run",
        "name",
        "--permits",
        "2",
        "--redis",
        "redis://127.0.0.1:1",
        "--redis",
        "redis://127.0.0.1:2",
        "--redis",
        "redis://127.0.0.1:3",
        "--",
        "echo",
        "ran",
    ]);
    expect(&out, 64, "--permits takes one Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_permit_kept_as_a_plain_key_as_the_semaphore_it_is() {
    let server = RedisServer::start().unwrap();
    let client = redis_locks::Client::connect(&server.url()).await.unwrap();
    let semaphore = client.semaphore("solo", 2).unwrap();
    // The first grant on a connection is numbered by the script; the next, the only holder,
    // is a plain key.
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let kind: String = redis::cmd("TYPE").arg("solo").query(&mut con).unwrap();
    assert_eq!(kind, "string");
    let held = tokio::task::block_in_place(|| status(&server, "solo"));
    assert_eq!(held["kind"], "semaphore", "{held}");
    assert_eq!(held["permits"], 2);
    assert_eq!(held["permits_in_use"], 1);
    assert_eq!(held["permits_available"], 1);
    let holders = held["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{held}");
    assert_eq!(holders[0]["owner"], permit.owner_token().as_str());
    assert_eq!(held["fencing_counter"], permit.fencing_token().get());
    permit.release().await.unwrap();
}
