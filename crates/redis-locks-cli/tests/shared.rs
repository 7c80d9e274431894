//! `redis-locks run --shared` / `--exclusive` (the two sides of an `RwLock`) and `status` of
//! an `RwLock`, as real processes against a real server.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{redis_locks, run, scratch, status, stderr, stdout, until_exists};
use test_support::{ChildProcess, RedisServer};

/// A holder: `run ARGS -- sh -c 'echo ready token=$REDIS_LOCKS_TOKEN; <until release exists>'`,
/// started and seen ready. Returns it with its fencing token.
fn holder(server: &RedisServer, args: &[&str], release: &Path) -> (ChildProcess, u64) {
    let script = format!(
        "echo ready token=$REDIS_LOCKS_TOKEN; {}",
        until_exists(release)
    );
    let mut child = ChildProcess::spawn(run(server, args, &script)).unwrap();
    let line = child
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the holder started its command");
    let token = line.rsplit_once("token=").unwrap().1.parse().unwrap();
    (child, token)
}

/// Polls `status NAME --json` for 10 s at most until `want` holds, and returns that status.
fn status_until(
    server: &RedisServer,
    name: &str,
    want: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = status(server, name);
        if want(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "status never got there: {now}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn two_shared_runs_hold_the_lock_at_the_same_time() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("overlap");
    // Each command says it is in, then waits for the other to be in: only two commands
    // that hold the lock at the same time both get past the wait.
    let spawn = |me: &str, other: &str| {
        let script = format!(
            "touch {dir}/{me}; {}; echo overlapped token=$REDIS_LOCKS_TOKEN name=$REDIS_LOCKS_NAME",
            until_exists(&dir.join(other)),
            dir = dir.display()
        );
        ChildProcess::spawn(run(&server, &["readers", "--shared"], &script)).unwrap()
    };
    let (mut a, mut b) = (spawn("a", "b"), spawn("b", "a"));
    let token = |child: &mut ChildProcess| -> u64 {
        let line = child
            .wait_for_line("overlapped", Duration::from_secs(30))
            .expect("both commands ran at once");
        assert!(line.ends_with("name=readers"), "{line}");
        let field = line.split_whitespace().nth(1).unwrap();
        field.strip_prefix("token=").unwrap().parse().unwrap()
    };
    let (token_a, token_b) = (token(&mut a), token(&mut b));
    assert_ne!(
        token_a, token_b,
        "each reader has a fencing token of its own"
    );
    assert_eq!(a.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(b.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status(&server, "readers")["held"], false, "both released");
}

#[test]
fn an_exclusive_run_keeps_shared_runs_out_until_it_exits() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("exclusive");
    let release = dir.join("release");
    let (mut writer, _) = holder(&server, &["books", "--exclusive"], &release);

    // One attempt, or a wait: not acquired (75), the command never runs; a wait of over a
    // second says who holds the lock.
    for (wait, says) in [
        ("0", "held by another owner"),
        (
            "1500ms",
            "waiting for lock \"books\": held for writing by owner",
        ),
    ] {
        let out = redis_locks(&[
            "run",
            "books",
            "--shared",
            "--wait",
            wait,
            "--redis",
            &server.url(),
            "--",
            "echo",
            "ran",
        ]);
        assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
        assert!(!stdout(&out).contains("ran"));
    }

    // A waiting reader is in line while the writer holds the lock, and runs once it exits.
    let mut reader = ChildProcess::spawn(run(
        &server,
        &["books", "--shared", "--quiet"],
        "echo reader-ran",
    ))
    .unwrap();
    status_until(&server, "books", |now| now["waiting_readers"] == 1);
    assert_eq!(reader.wait_exit(Duration::ZERO), None, "it waits");
    assert!(reader.take_lines("reader-ran").is_empty());
    std::fs::write(&release, "").unwrap();
    assert_eq!(writer.wait_exit(Duration::from_secs(10)), Some(0));
    reader
        .wait_for_line("reader-ran", Duration::from_secs(10))
        .expect("the reader ran after the writer");
    assert_eq!(reader.wait_exit(Duration::from_secs(10)), Some(0));

    // And the other way round: a writer is refused while a reader holds the lock.
    let release = dir.join("release-reader");
    let (mut reader, _) = holder(&server, &["books", "--shared"], &release);
    let out = redis_locks(&[
        "run",
        "books",
        "-x",
        "--wait",
        "0",
        "--redis",
        &server.url(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    std::fs::write(&release, "").unwrap();
    assert_eq!(reader.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_name_held_as_another_kind_of_lock_exits_65_saying_which() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let dir = scratch("kinds");
    let release = dir.join("release");
    let (mut mutex, _) = holder(&server, &["plain"], &release);
    let (mut rwlock, _) = holder(&server, &["rw", "--exclusive"], &release);
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["plain", "--shared", "--wait", "0"],
            "in use as a Mutex",
            "taken as an RwLock",
        ),
        // A wait changes nothing: the kind is refused at once, not waited out.
        (
            &["plain", "--exclusive", "--wait", "5s"],
            "in use as a Mutex",
            "taken as an RwLock",
        ),
        (
            &["rw", "--wait", "0"],
            "in use as an RwLock",
            "taken as a Mutex",
        ),
        (
            &["rw", "--wait", "5s"],
            "in use as an RwLock",
            "taken as a Mutex",
        ),
    ];
    for (args, in_use, taken_as) in cases {
        let started = Instant::now();
        let out =
            redis_locks(&[&["run", "--redis", &url][..], args, &["--", "echo", "ran"]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(65), "{args:?}: {err}");
        assert!(
            err.contains(in_use) && err.contains(taken_as),
            "{args:?}: {err}"
        );
        assert!(!stdout(&out).contains("ran"));
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{args:?} waited"
        );
    }
    std::fs::write(&release, "").unwrap();
    assert_eq!(mutex.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(rwlock.wait_exit(Duration::from_secs(10)), Some(0));
    // Once free, a name may be taken as either kind.
    let out = redis_locks(&["run", "rw", "--redis", &url, "--wait", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_lists_every_reader_and_the_writers_in_line() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("status");
    let release = dir.join("release");
    let (mut a, token_a) = holder(&server, &["shelf", "--shared", "--ttl", "20s"], &release);
    let (mut b, token_b) = holder(&server, &["shelf", "-s", "--ttl", "20s"], &release);
    let mut writer =
        ChildProcess::spawn(run(&server, &["shelf", "-x", "--quiet"], "true")).unwrap();
    let shown = status_until(&server, "shelf", |now| now["waiting_writers"] == 1);
    assert_eq!(shown["kind"], "rwlock", "{shown}");
    assert_eq!(shown["held"], true);
    assert_eq!(shown["hold_count"], 2);
    assert_eq!(shown["waiting_readers"], 0);
    let holds = shown["holds"].as_array().unwrap();
    assert_eq!(holds.len(), 2, "{shown}");
    let mut tokens: Vec<u64> = holds
        .iter()
        .map(|hold| hold["fencing_token"].as_u64().unwrap())
        .collect();
    tokens.sort();
    assert_eq!(tokens, [token_a.min(token_b), token_a.max(token_b)]);
    for hold in holds {
        assert_eq!(hold["mode"], "read", "{hold}");
        let lease = hold["lease_remaining_ms"].as_u64().unwrap();
        assert!((1_000..=20_000).contains(&lease), "{hold}");
    }
    let owners: Vec<&str> = holds.iter().map(|h| h["owner"].as_str().unwrap()).collect();
    assert!(
        !owners[0].is_empty() && owners[0] != owners[1],
        "{owners:?}"
    );
    assert!(shown["fencing_counter"].as_u64().unwrap() >= token_a.max(token_b));

    // The table form, for people.
    let out = redis_locks(&["status", "shelf", "--redis", &server.url()]);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    for words in [
        "kind            rwlock",
        "state           held for reading by 2 holds",
        "holds           2",
        "0 reader(s) and 1 writer(s) in line",
        &format!("owner {}", owners[0]),
        &format!("fencing token {token_a}"),
    ] {
        assert!(text.contains(words), "{words:?} not in:\n{text}");
    }
    assert_eq!(text.matches("hold            read ").count(), 2, "{text}");

    std::fs::write(&release, "").unwrap();
    for child in [&mut a, &mut b, &mut writer] {
        assert_eq!(child.wait_exit(Duration::from_secs(10)), Some(0));
    }
    let free = status(&server, "shelf");
    assert_eq!(free["held"], false, "{free}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shared_and_exclusive_together_are_bad_usage() {
    for args in [
        &["run", "x", "--shared", "--exclusive", "--", "true"][..],
        &["run", "x", "-s", "-x", "--", "true"],
    ] {
        let out = redis_locks(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains("cannot be used with"), "{err}");
    }
    let out = redis_locks(&["run", "--help"]);
    let help = stdout(&out);
    for words in ["--shared", "--exclusive", "flock -s", "flock -x", "exit 65"] {
        assert!(help.contains(words), "{words:?} not in:\n{help}");
    }
}
