//! The settings beside the Redis a command names, without a TLS server (those tests are in
//! `tls.rs`): the key namespace (`--namespace`, `REDIS_LOCKS_NAMESPACE`) seen on the server,
//! the TLS options' usage errors (64) and unreadable files (66), and a password in the URL
//! never printed, whatever the command says (errors, `status`, `--json`, logs).

mod common;

use std::time::Duration;

use common::{command, eventually, exists, expect, redis_locks, stderr, stdout, succeeded};
use test_support::{ChildProcess, RedisServer};

fn status_json(args: &[&str]) -> serde_json::Value {
    let out = redis_locks(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    serde_json::from_str(stdout(&out).trim()).unwrap()
}

#[test]
fn the_namespace_puts_the_locks_keys_under_it() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let mut cmd = command();
    cmd.args([
        "run",
        "job",
        "--redis",
        &url,
        "--namespace",
        "locks",
        "--",
        "sleep",
        "30",
    ]);
    let mut holder = ChildProcess::spawn(cmd).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || exists(&server, "locks:job")),
        "no key locks:job"
    );
    assert!(!exists(&server, "job"), "the name itself was taken");
    assert!(exists(&server, "{locks:job}:fence"));

    // status sees the run's lock under the same namespace, from the flag or the variable.
    let held = status_json(&[
        "status",
        "job",
        "--redis",
        &url,
        "--namespace",
        "locks",
        "--json",
    ]);
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["namespace"], "locks", "{held}");
    assert_eq!(held["key"], "locks:job", "{held}");
    assert_eq!(held["tls"], false, "{held}");
    assert_eq!(held["user"], "default", "{held}");
    let out = command()
        .args(["status", "job", "--redis", &url])
        .env("REDIS_LOCKS_NAMESPACE", "locks")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("state           held"), "{text}");
    assert!(text.contains("key             locks:job"), "{text}");
    assert!(text.contains("namespace       locks"), "{text}");
    // Without it, another lock: free.
    let other = status_json(&["status", "job", "--redis", &url, "--json"]);
    assert_eq!(other["held"], false, "{other}");
    assert_eq!(other["namespace"], serde_json::Value::Null, "{other}");
    assert_eq!(other["key"], "job", "{other}");
    // A run without the namespace takes that other lock at once, beside the holder.
    let out = redis_locks(&["run", "job", "--redis", &url, "--wait", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // And one with it waits in vain.
    let out = command()
        .args(["run", "job", "--redis", &url, "--wait", "0", "--", "true"])
        .env("REDIS_LOCKS_NAMESPACE", "locks")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    // SIGTERM reaches the command too, and the lock is released.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(holder.wait_exit(Duration::from_secs(10)).is_some());
    assert!(!exists(&server, "locks:job"));
}

#[test]
fn the_namespace_reaches_the_nodes_of_a_redlock_and_the_demo_workers() {
    let servers = test_support::start_many(3).unwrap();
    let mut args = vec!["run", "job", "--namespace", "ns"];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    for url in &urls {
        args.extend(["--redis", url]);
    }
    args.extend(["--", "true"]);
    let out = redis_locks(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The counter is written on the nodes that granted: a majority at least.
    let granted = servers
        .iter()
        .filter(|server| exists(server, "{ns:job}:fence"))
        .count();
    assert!(
        granted >= 2,
        "the counter under the namespace is on {granted} nodes"
    );
    for server in &servers {
        assert!(!exists(server, "{job}:fence"), "port {}", server.port());
    }
    let mut args = vec!["status", "job", "--namespace", "ns", "--json"];
    for url in &urls {
        args.extend(["--redis", url]);
    }
    let status = status_json(&args);
    assert_eq!(status["kind"], "redlock", "{status}");
    assert_eq!(status["key"], "ns:job", "{status}");
    assert!(status["fencing_counter"].as_u64() > Some(0), "{status}");
    assert_eq!(status["nodes"][0]["user"], "default", "{status}");

    // The demo's worker processes get the namespace on their command line: they take the
    // same locks as its tasks, and every check passes.
    let out = redis_locks(&[
        "demo",
        "--redis",
        &urls[0],
        "--namespace",
        "ns",
        "--processes",
        "2",
        "--tasks",
        "2",
        "--per-worker",
        "5",
    ]);
    succeeded(&out);
    assert!(
        stdout(&out).contains("namespace \"ns\""),
        "{}",
        stdout(&out)
    );
}

#[test]
fn tls_and_namespace_usage_errors_exit_64_and_unreadable_files_66() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, "not a certificate").unwrap();
    let pem = pem.display().to_string();
    let missing = dir.path().join("missing.pem").display().to_string();
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["status", "x", "--redis", &url, "--tls-cert", &pem],
            64,
            "--tls-key",
        ),
        (
            &["run", "x", "--redis", &url, "--tls-key", &pem, "--", "true"],
            64,
            "--tls-cert",
        ),
        (
            &["status", "x", "--redis", &url, "--namespace", "a{b"],
            64,
            "--namespace",
        ),
        (
            &["status", "x", "--redis", &url, "--namespace", "a*"],
            64,
            "--namespace",
        ),
        // TLS files with a plaintext URL.
        (
            &["status", "x", "--redis", &url, "--tls-ca", &pem],
            64,
            "rediss://",
        ),
        (
            &["run", "x", "--redis", &url, "--tls-ca", &pem, "--", "true"],
            64,
            "rediss://",
        ),
        // A CA that is no PEM certificate.
        (
            &[
                "status",
                "x",
                "--redis",
                "rediss://127.0.0.1:1",
                "--tls-ca",
                &pem,
            ],
            64,
            "PEM",
        ),
        // Unreadable files: 66, before anything connects.
        (
            &[
                "status",
                "x",
                "--redis",
                "rediss://127.0.0.1:1",
                "--tls-ca",
                &missing,
            ],
            66,
            "--tls-ca",
        ),
        (
            &[
                "run",
                "x",
                "--redis",
                &url,
                "--tls-cert",
                &missing,
                "--tls-key",
                &pem,
                "--",
                "true",
            ],
            66,
            "--tls-cert",
        ),
        (
            &[
                "run",
                "x",
                "--redis",
                &url,
                "--tls-cert",
                &pem,
                "--tls-key",
                &missing,
                "--",
                "true",
            ],
            66,
            "--tls-key",
        ),
        (&["demo", "--tls-ca", &missing], 66, "--tls-ca"),
        (&["check", "--tls-ca", &missing], 66, "--tls-ca"),
        // The private servers of demo and check are plaintext.
        (&["demo", "--tls-ca", &pem], 64, "plaintext"),
        (&["check", "--tls-ca", &pem], 64, "plaintext"),
    ];
    for (args, code, words) in cases {
        let err = expect(&redis_locks(args), *code, words);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let out = command()
        .args(["status", "x", "--redis", "rediss://127.0.0.1:1"])
        .env("REDIS_TLS_CA", &missing)
        .output()
        .unwrap();
    expect(&out, 66, &missing);
}

#[test]
fn a_password_is_never_printed() {
    const PASSWORD: &str = "Sup3r-secret-pw-71c2";
    let server = RedisServer::start_with_args(&["--requirepass", PASSWORD]).unwrap();
    let port = server.port();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let user_url = format!("redis://default:{PASSWORD}@127.0.0.1:{port}");
    let wrong = format!("redis://:{PASSWORD}x@127.0.0.1:{port}");
    let down = format!("redis://:{PASSWORD}@127.0.0.1:1");
    let unix = format!("unix:///nonexistent/redis.sock?pass={PASSWORD}");
    let mut seen = String::new();
    let mut run = |args: &[&str], code: i32| {
        let out = command()
            .args(args)
            .env("RUST_LOG", "debug")
            .output()
            .expect("run redis-locks");
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(code), "{args:?}: {said}");
        seen.push_str(&said);
        said
    };
    run(&["run", "job", "--redis", &url, "--", "true"], 0);
    run(&["run", "job", "--redis", &user_url, "--", "true"], 0);
    let text = run(&["status", "job", "--redis", &url], 0);
    assert!(
        text.contains("served by       redis://:***@127.0.0.1"),
        "{text}"
    );
    assert!(text.contains("as user default"), "{text}");
    let json = run(&["status", "job", "--redis", &url, "--json"], 0);
    assert!(
        json.contains("\"served_by\":\"redis://:***@127.0.0.1"),
        "{json}"
    );
    // Failing: a wrong password (77), a server that is down (69), a Redlock with a node down
    // and a wrong password on another, a cluster and a sentinel that cannot be reached, a
    // URL that is not one, a unix socket that is not there.
    run(&["run", "job", "--redis", &wrong, "--", "true"], 77);
    run(&["status", "job", "--redis", &wrong], 77);
    run(&["status", "job", "--redis", &wrong, "--json"], 77);
    run(&["run", "job", "--redis", &down, "--", "true"], 69);
    run(&["status", "job", "--redis", &down, "--json"], 69);
    run(
        &[
            "run", "job", "--redis", &url, "--redis", &down, "--redis", &wrong, "--", "true",
        ],
        77,
    );
    run(
        &[
            "status", "job", "--redis", &url, "--redis", &down, "--redis", &url, "--json",
        ],
        64,
    );
    run(&["status", "job", "--cluster", &down], 69);
    run(&["status", "job", "--sentinel", &down, "--master", "m"], 69);
    run(
        &[
            "status",
            "job",
            &format!("--cluster=redis://:{PASSWORD}@127.0.0.1:http"),
        ],
        64,
    );
    run(
        &[
            "status",
            "job",
            "--redis",
            &format!("redis://:{PASSWORD}@127.0.0.1:0"),
        ],
        64,
    );
    run(&["status", "job", "--redis", &unix], 69);
    let bad_unix = format!("unix:///tmp/r.sock?pass={PASSWORD}&db=zero");
    run(&["status", "job", "--redis", &bad_unix], 64);
    run(&["status", "job", "--cluster", &unix], 64);
    // The demo names the Redis it uses in its header.
    let demo = run(
        &[
            "demo",
            "--redis",
            &url,
            "--processes",
            "1",
            "--tasks",
            "1",
            "--per-worker",
            "2",
        ],
        0,
    );
    assert!(demo.contains("redis://:***@127.0.0.1"), "{demo}");
    assert!(!seen.contains(PASSWORD), "the password was printed: {seen}");
}
