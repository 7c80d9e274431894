//! Every exit code of `run` and `status` that says what happened, and the messages beside
//! them: refused access (77), data that is not the lock's (65), a server that is not Redis,
//! bad URLs, negative durations, long and control-character names (64), the waiting notice.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{command, expect, redis_locks, stderr, stdout};
use test_support::{ChildProcess, RedisServer};

fn raw(server: &RedisServer) -> redis::Connection {
    server.connection().unwrap()
}

#[test]
fn refused_access_exits_77_for_noauth_wrongpass_and_noperm() {
    let locked = RedisServer::start_with_args(&["--requirepass", "secret"]).unwrap();
    let url = locked.url();
    for command in [
        &["run", "job", "--redis", &url, "--", "true"][..],
        &["status", "job", "--redis", &url],
    ] {
        let out = redis_locks(command);
        expect(&out, 77, "NOAUTH");
    }
    let wrong = format!("redis://default:wrong@127.0.0.1:{}", locked.port());
    let out = redis_locks(&["run", "job", "--redis", &wrong, "--", "true"]);
    expect(&out, 77, "refused access");
    // The right password works.
    let right = format!("redis://default:secret@127.0.0.1:{}", locked.port());
    let out = redis_locks(&["run", "job", "--redis", &right, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A user whose ACL forbids the lock's commands.
    let server = RedisServer::start().unwrap();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER", "limited", "on", ">pw", "~*", "&*", "-@all", "+ping", "+client", "+hello",
        ])
        .exec(&mut raw(&server))
        .unwrap();
    let limited = format!("redis://limited:pw@127.0.0.1:{}", server.port());
    let out = redis_locks(&["run", "job", "--redis", &limited, "--", "true"]);
    let err = expect(&out, 77, "refused access");
    assert!(err.contains("no permissions"), "{err}");
}

#[test]
fn keys_that_are_not_the_locks_exit_65_naming_the_key() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    redis::cmd("LPUSH")
        .arg("wt")
        .arg("x")
        .exec(&mut raw(&server))
        .unwrap();
    let out = redis_locks(&["run", "wt", "--redis", &url, "--", "true"]);
    expect(&out, 65, "\"wt\"");
    let out = redis_locks(&["status", "wt", "--redis", &url]);
    expect(&out, 65, "\"wt\"");

    redis::cmd("SET")
        .arg("{fl}:fence")
        .arg("not-a-number")
        .exec(&mut raw(&server))
        .unwrap();
    for command in [
        &["run", "fl", "--redis", &url, "--", "true"][..],
        &["status", "fl", "--redis", &url],
    ] {
        let out = redis_locks(command);
        let err = expect(&out, 65, "\"{fl}:fence\"");
        assert!(!err.contains("key \"fl\""), "{err}");
    }
    // Nothing was left held.
    let held: i64 = redis::cmd("EXISTS")
        .arg("fl")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(held, 0);
}

#[test]
fn a_server_that_is_not_redis_is_named_as_such() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().take(20).flatten() {
            let _ = stream.write_all(b"HTTP/1.0 400 Bad Request\r\nServer: not-redis\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let out = redis_locks(&["run", "job", "--redis", &url, "--", "true"]);
    let err = expect(&out, 69, "did not answer as Redis does");
    assert!(err.contains(&url), "{err}");
    assert!(err.lines().count() <= 2, "one clear message: {err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn bad_urls_durations_and_names_exit_64_and_say_what_is_wrong() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let cases: [(&[&str], &str); 9] = [
        (&["run", "x", "--redis", "", "--", "true"], "empty"),
        (
            &["run", "x", "--redis", "http://host:1", "--", "true"],
            "scheme",
        ),
        (
            &["run", "x", "--redis", "redis://host:99999", "--", "true"],
            "1 to 65535",
        ),
        (&["status", "x", "--redis", "localhost:6380"], "scheme"),
        (
            &["run", "x", "--redis", &url, "--ttl", "-5s", "--", "true"],
            "cannot be negative",
        ),
        (
            &["run", "x", "--redis", &url, "--wait", "-1s", "--", "true"],
            "cannot be negative",
        ),
        (
            &["run", "x", "--redis", &url, "--ttl", "2ms", "--", "true"],
            "at least 3 ms",
        ),
        (
            &[
                "run",
                "a\nstate           free",
                "--redis",
                &url,
                "--",
                "true",
            ],
            "control characters",
        ),
        (
            &["status", "nul\u{1b}[2J", "--redis", &url],
            "control characters",
        ),
    ];
    for (args, words) in cases {
        let out = redis_locks(args);
        let err = expect(&out, 64, words);
        assert!(!err.contains('\u{1b}'), "{err:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    }
    let long = "n".repeat(10_000);
    let out = redis_locks(&["status", &long, "--redis", &url]);
    let err = expect(&out, 64, "(10000 bytes)");
    assert!(err.len() < 400, "{} bytes of message", err.len());
}

#[test]
fn a_waiting_run_says_once_who_holds_the_lock_unless_quiet() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let mut holder = ChildProcess::spawn({
        let mut cmd = command();
        cmd.args([
            "run",
            "busy",
            "--redis",
            &url,
            "--",
            "sh",
            "-c",
            "echo ready; sleep 4",
        ]);
        cmd
    })
    .unwrap();
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let out = redis_locks(&[
        "run", "busy", "--redis", &url, "--wait", "1500ms", "--", "true",
    ]);
    let err = expect(&out, 75, "waiting for lock \"busy\": held by owner");
    assert!(err.contains("lease ends in"), "{err}");
    assert_eq!(
        err.matches("waiting for lock").count(),
        1,
        "said once: {err}"
    );
    let out = redis_locks(&[
        "run", "busy", "--redis", &url, "--wait", "1500ms", "--quiet", "--", "true",
    ]);
    assert_eq!(out.status.code(), Some(75));
    assert!(
        !stderr(&out).contains("waiting for lock"),
        "{}",
        stderr(&out)
    );
    // A short wait says nothing either.
    let out = redis_locks(&[
        "run", "busy", "--redis", &url, "--wait", "200ms", "--", "true",
    ]);
    assert!(!stderr(&out).contains("waiting for lock"));
    assert_eq!(holder.wait_exit(Duration::from_secs(10)), Some(0));

    // A key that will never expire is called out.
    redis::cmd("SET")
        .arg("forever")
        .arg("someone")
        .exec(&mut raw(&server))
        .unwrap();
    let out = redis_locks(&[
        "run", "forever", "--redis", &url, "--wait", "1500ms", "--", "true",
    ]);
    expect(&out, 75, "no expiry");
}

#[test]
fn status_counts_waiting_processes_and_forgets_a_killed_one() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let status = || -> serde_json::Value {
        let out = redis_locks(&["status", "watched", "--json", "--redis", &url]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let run = |args: &[&str]| {
        let mut cmd = command();
        cmd.args(["run", "watched", "--redis", &url, "--quiet"])
            .args(args);
        ChildProcess::spawn(cmd).unwrap()
    };
    let mut holder = run(&["--", "sh", "-c", "echo ready; sleep 6"]);
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    assert_eq!(status()["waiting_processes"], 0);
    let mut waiter = run(&["--", "true"]);
    let until = |want: &dyn Fn(&serde_json::Value) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = status();
            if want(&now) {
                return now;
            }
            assert!(Instant::now() < deadline, "status never got there: {now}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let shown = until(&|now: &serde_json::Value| {
        now["waiting_processes"] == 1 && now["waited_for"] == true
    });
    assert_eq!(shown["waited_for"], true);
    waiter.kill_hard();
    // The waiter is gone: the count says so at once, while the mark stays for the tenure.
    let shown = until(&|now: &serde_json::Value| now["waiting_processes"] == 0);
    assert_eq!(shown["waited_for"], true);
    let out = redis_locks(&["status", "watched", "--redis", &url]);
    let text = stdout(&out);
    assert!(text.contains("waiting         none"), "{text}");
    assert!(text.contains("may have gone"), "{text}");
    assert_eq!(holder.wait_exit(Duration::from_secs(15)), Some(0));
}

#[test]
fn help_lists_every_benchmark_and_market_checks_its_chart_first() {
    let out = redis_locks(&["--help"]);
    let help = stdout(&out);
    assert!(help.contains("market"), "{help}");
    for code in ["65", "77", "75", "70", "69", "64"] {
        assert!(help.contains(code), "exit code {code} in --help: {help}");
    }
    let started = Instant::now();
    let out = redis_locks(&[
        "bench",
        "market",
        "--duration",
        "5s",
        "--sellers",
        "1",
        "--buyers",
        "1",
        "--chart",
        "/no/such/dir/market.svg",
    ]);
    expect(&out, 1, "cannot write there");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "nothing was run first"
    );
}
