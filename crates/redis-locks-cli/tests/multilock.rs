//! `redis-locks run NAME1 NAME2 ... -- CMD` (a `MultiLock`: the `Mutex` of every name, taken
//! together or not at all, in one global order), as real processes against a real server.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{
    command, eventually, expect, most_at_once, redis_locks, run, scratch, stderr, stdout,
    until_exists,
};
use test_support::{ChildProcess, RedisServer};

/// Whether the lock `name` is held, as `status --json` says.
fn held(server: &RedisServer, name: &str) -> bool {
    let out = redis_locks(&["status", name, "--json", "--redis", &server.url()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["held"].as_bool().unwrap()
}

#[test]
fn runs_over_a_b_and_b_a_at_once_never_overlap_and_all_run() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("order");
    let log = dir.join("log");
    let script = format!(
        "echo start $$ $(date +%s%N) >> {log}; sleep 0.3; echo end $$ $(date +%s%N) >> {log}",
        log = log.display()
    );
    // Six runs at once, half naming `a b`, half `b a`: taken in one order, they neither
    // deadlock nor overlap.
    let children: Vec<_> = (0..6)
        .map(|n| {
            // A deadlock would end each run at its wait budget (exit 75), not hang the test.
            let names: &[&str] = if n % 2 == 0 {
                &["a", "b", "--wait", "20s"]
            } else {
                &["b", "a", "--wait", "20s"]
            };
            run(&server, names, &script)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        common::succeeded(&out);
    }
    let log = std::fs::read_to_string(&log).unwrap();
    let (most, started) = most_at_once(&log);
    assert_eq!(started, 6, "every command ran: {log}");
    assert_eq!(most, 1, "one at a time: {log}");
    assert!(!held(&server, "a") && !held(&server, "b"), "all released");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_over_x_y_waits_for_a_held_y_and_takes_nothing_meanwhile() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("partial");
    let release = dir.join("release");
    // A plain run holds `y`.
    let mut holder = ChildProcess::spawn(run(
        &server,
        &["y"],
        &format!("echo ready; {}", until_exists(&release)),
    ))
    .unwrap();
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the holder of y runs");

    // Tried once: "held" (75), naming `y`; `x` left free.
    let out = run(&server, &["x", "y", "--wait", "0"], "echo ran")
        .output()
        .unwrap();
    expect(&out, 75, "\"y\"");
    assert!(!stdout(&out).contains("ran"));
    assert!(!held(&server, "x"), "x is free after a failed try");

    // Within a wait: the same when it runs out (the library names the slot's locks together,
    // "x, y", there).
    let out = run(&server, &["x", "y", "--wait", "300ms"], "echo ran")
        .output()
        .unwrap();
    expect(&out, 75, "gave up on lock");
    assert!(!held(&server, "x"), "x is free after a wait ran out");

    // Without --wait it waits, holding nothing (x stays free, and says who holds y), and
    // runs once y is released.
    let err = dir.join("waiter.err");
    let mut waiting = run(
        &server,
        &["x", "y"],
        "echo started tokens=$REDIS_LOCKS_TOKENS",
    );
    waiting.stderr(std::fs::File::create(&err).unwrap());
    let mut waiter = ChildProcess::spawn(waiting).unwrap();
    let notice = || std::fs::read_to_string(&err).unwrap_or_default();
    // The notice is read while the waiter writes it: wait for the whole of it.
    assert!(
        eventually(Duration::from_secs(10), || {
            let notice = notice();
            notice.contains("waiting for locks") && notice.contains("\"y\" held by owner")
        }),
        "the waiter says what it waits for and who holds it: {}",
        notice()
    );
    assert!(
        !held(&server, "x"),
        "x is free while the waiter waits for y"
    );
    assert!(held(&server, "y"));
    std::fs::write(&release, "").unwrap();
    assert_eq!(holder.wait_exit(Duration::from_secs(20)), Some(0));
    waiter
        .wait_for_line("started tokens=x=", Duration::from_secs(20))
        .expect("the waiter ran once y was free");
    assert_eq!(waiter.wait_exit(Duration::from_secs(20)), Some(0));
    assert!(eventually(Duration::from_secs(5), || !held(&server, "x")
        && !held(&server, "y")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_command_gets_every_name_with_its_fencing_token() {
    let server = RedisServer::start().unwrap();
    // Given as `b a`, taken (and listed) as `a b`.
    let script = "echo \"tokens=[$REDIS_LOCKS_TOKENS] names=[$REDIS_LOCKS_NAMES] \
                  token=[${REDIS_LOCKS_TOKEN-unset}] name=[${REDIS_LOCKS_NAME-unset}]\"";
    let out = run(&server, &["b", "a"], script).output().unwrap();
    common::succeeded(&out);
    let text = stdout(&out);
    let tokens = text
        .split("tokens=[")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap();
    let pairs: Vec<(&str, u64)> = tokens
        .split(' ')
        .map(|pair| {
            let (name, token) = pair.rsplit_once('=').unwrap();
            (name, token.parse().unwrap())
        })
        .collect();
    assert_eq!(
        pairs.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["a", "b"],
        "{text}"
    );
    assert!(pairs.iter().all(|(_, token)| *token > 0), "{text}");
    assert!(text.contains("names=[a b]"), "{text}");
    assert!(
        text.contains("token=[unset] name=[unset]"),
        "no single token for several names: {text}"
    );

    // Each name's token grows from one run to the next.
    let again = run(&server, &["a", "b"], script).output().unwrap();
    common::succeeded(&again);
    let again = stdout(&again);
    let next = again
        .split("tokens=[")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap();
    assert_eq!(next.split(' ').count(), pairs.len(), "{again}");
    for (pair, (name, before)) in next.split(' ').zip(&pairs) {
        let (again_name, after) = pair.rsplit_once('=').unwrap();
        assert_eq!(again_name, *name);
        assert!(
            after.parse::<u64>().unwrap() > *before,
            "{text} then {again}"
        );
    }

    // One name: REDIS_LOCKS_TOKEN and REDIS_LOCKS_NAME as ever, and the pair too.
    let out = run(
        &server,
        &["a"],
        "echo \"$REDIS_LOCKS_NAME $REDIS_LOCKS_TOKEN [$REDIS_LOCKS_TOKENS]\"",
    )
    .output()
    .unwrap();
    common::succeeded(&out);
    let text = stdout(&out);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields[0], "a");
    assert_eq!(fields[2], format!("[a={}]", fields[1]), "{text}");
}

#[test]
fn bad_names_and_what_several_names_cannot_go_with_are_bad_usage() {
    // Refused before anything connects: no server is needed.
    let nowhere = "redis://127.0.0.1:1";
    let cases: [(&[&str], &str); 6] = [
        (
            &["a", "b", "a"],
            "invalid MultiLock names: \"a\" is given twice",
        ),
        (&["a", "b", "--permits", "2"], "--permits takes one name"),
        (
            &["a", "b", "--shared"],
            "--shared and --exclusive take one name",
        ),
        (
            &["a", "b", "--exclusive"],
            "--shared and --exclusive take one name",
        ),
        (&["a", "", "b"], "name"),
        (&["a", "b\tc"], "name"),
    ];
    for (args, words) in cases {
        let out = command()
            .args(["run", "--redis", nowhere])
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        expect(&out, 64, words);
    }
    let out = command()
        .args(["run", "--redis", "redis://127.0.0.1:1"])
        .args([
            "--redis",
            "redis://127.0.0.1:2",
            "--redis",
            "redis://127.0.0.1:3",
        ])
        .args(["a", "b", "--", "true"])
        .output()
        .unwrap();
    expect(&out, 64, "several names take one Redis");
}

#[test]
fn a_name_held_as_an_rwlock_is_refused_with_65_naming_it() {
    let server = RedisServer::start().unwrap();
    let dir = scratch("kind");
    let release = dir.join("release");
    let mut reader = ChildProcess::spawn(run(
        &server,
        &["--shared", "b"],
        &format!("echo ready; {}", until_exists(&release)),
    ))
    .unwrap();
    reader
        .wait_for_line("ready", Duration::from_secs(30))
        .expect("the reader of b runs");
    let out = run(&server, &["a", "b"], "echo ran").output().unwrap();
    expect(&out, 65, "lock \"b\" is in use as an RwLock");
    assert!(!held(&server, "a"), "a is free");
    std::fs::write(&release, "").unwrap();
    assert_eq!(reader.wait_exit(Duration::from_secs(20)), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}
