//! `run` and `status` over `rediss://` against TLS servers made at test time: a CA file
//! (`--tls-ca`, `REDIS_TLS_CA`), mutual TLS (`--tls-cert`, `--tls-key`), and each failure
//! with its exit code: an untrusted or mismatched server certificate or a refused client
//! certificate 77, a plaintext server behind `rediss://` 69 (in bounded time, not a hang), a
//! `#insecure` URL without `--tls-insecure` 64. And an ACL user's password, over TLS, never
//! printed.
//!
//! Every test that needs a TLS server lives in this binary, named `tls`: a run with a server
//! program built without TLS leaves it out with `-E 'not binary(tls)'`.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{command, expect, stderr, stdout, succeeded};
use test_support::{RedisServer, ServerCert, TlsFiles, TlsServerOptions};

/// The test CA's file.
fn ca_path() -> &'static Path {
    TlsFiles::get().unwrap().ca_path()
}

/// `redis-locks ARGS` to the end.
fn redis_locks(args: &[&str]) -> Output {
    command().args(args).output().expect("run redis-locks")
}

/// `--tls-ca <the test CA>`, as strings.
fn with_ca() -> [String; 2] {
    ["--tls-ca".into(), ca_path().display().to_string()]
}

/// `parts` with `extra` added to the options (before a `--` and the command after it).
fn args<'a>(parts: &'a [&'a str], extra: &'a [String]) -> Vec<&'a str> {
    let split = parts
        .iter()
        .position(|part| *part == "--")
        .unwrap_or(parts.len());
    let (options, command) = parts.split_at(split);
    options
        .iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .chain(command.iter().copied())
        .collect()
}

#[test]
fn run_and_status_over_tls_with_a_ca_file() {
    let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let ca = with_ca();

    let out = redis_locks(&args(
        &[
            "run",
            "job",
            "--redis",
            &url,
            "--",
            "sh",
            "-c",
            "echo token=$REDIS_LOCKS_TOKEN",
        ],
        &ca,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let token: u64 = stdout(&out)
        .trim()
        .strip_prefix("token=")
        .and_then(|token| token.parse().ok())
        .unwrap_or_else(|| panic!("no token in {:?}", stdout(&out)));

    // The CA from the environment, as the other settings.
    let out = command()
        .args(["status", "job", "--redis", &url, "--json"])
        .env("REDIS_TLS_CA", ca_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(status["tls"], true, "{status}");
    assert_eq!(status["user"], "default", "{status}");
    assert_eq!(status["held"], false, "{status}");
    assert_eq!(status["fencing_counter"], token, "{status}");

    let out = redis_locks(&args(&["status", "job", "--redis", &url], &ca));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("connection      TLS (rediss://) as user default"),
        "{}",
        stdout(&out)
    );

    // Without the CA, the system's CAs do not know the test CA: the server's certificate
    // is refused.
    let out = redis_locks(&["status", "job", "--redis", &url]);
    expect(&out, 77, "certificate");
}

#[test]
fn mutual_tls_with_a_client_certificate() {
    let files = TlsFiles::get().unwrap();
    let server = RedisServer::start_tls(TlsServerOptions::new().mutual(true)).unwrap();
    let url = server.url();
    let cert = files.client().cert_path().display().to_string();
    let key = files.client().key_path().display().to_string();
    let ca = with_ca();

    // No client certificate: the server refuses the handshake.
    let out = redis_locks(&args(&["run", "job", "--redis", &url, "--", "true"], &ca));
    expect(&out, 77, "TLS");

    let mutual = [
        ca[0].clone(),
        ca[1].clone(),
        "--tls-cert".into(),
        cert,
        "--tls-key".into(),
        key,
    ];
    let out = redis_locks(&args(
        &["run", "job", "--redis", &url, "--", "true"],
        &mutual,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = redis_locks(&args(
        &["status", "job", "--redis", &url, "--json"],
        &mutual,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("\"tls\":true"), "{}", stdout(&out));

    // The same from the environment.
    let out = command()
        .args(["run", "job", "--redis", &url, "--", "true"])
        .env("REDIS_TLS_CA", ca_path())
        .env("REDIS_TLS_CERT", files.client().cert_path())
        .env("REDIS_TLS_KEY", files.client().key_path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A certificate signed by another CA: refused too.
    let other = files.other_client();
    let out = redis_locks(&args(
        &[
            "run",
            "job",
            "--redis",
            &url,
            "--tls-cert",
            &other.cert_path().display().to_string(),
            "--tls-key",
            &other.key_path().display().to_string(),
            "--",
            "true",
        ],
        &ca,
    ));
    expect(&out, 77, "TLS");
}

#[test]
fn an_untrusted_or_mismatched_server_certificate_exits_77() {
    let files = TlsFiles::get().unwrap();
    let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    let url = server.url();
    let other_ca = files.other_ca().cert_path().display().to_string();
    for command in [
        &[
            "run", "job", "--redis", &url, "--tls-ca", &other_ca, "--", "true",
        ][..],
        &["status", "job", "--redis", &url, "--tls-ca", &other_ca],
        &[
            "status", "job", "--redis", &url, "--tls-ca", &other_ca, "--json",
        ],
    ] {
        let err = expect(&redis_locks(command), 77, "certificate");
        assert!(err.contains("TLS"), "{err}");
    }

    // A certificate for another host name, and an expired one.
    for cert in [ServerCert::WrongHost, ServerCert::Expired] {
        let server = RedisServer::start_tls(TlsServerOptions::new().server_cert(cert)).unwrap();
        let url = server.url();
        let out = redis_locks(&args(&["status", "job", "--redis", &url], &with_ca()));
        expect(&out, 77, "certificate");
        // Allowed on purpose: no check of the certificate at all.
        let out = redis_locks(&args(
            &["status", "job", "--redis", &url, "--tls-insecure"],
            &with_ca(),
        ));
        assert_eq!(out.status.code(), Some(0), "{cert:?}: {}", stderr(&out));
    }
}

#[test]
fn a_plaintext_server_behind_rediss_exits_69_in_bounded_time() {
    let plain = RedisServer::start().unwrap();
    let url = format!("rediss://127.0.0.1:{}", plain.port());
    // `run` only: `status` connects the same way.
    let started = Instant::now();
    let out = redis_locks(&args(
        &["run", "job", "--redis", &url, "--", "true"],
        &with_ca(),
    ));
    let took = started.elapsed();
    let err = expect(&out, 69, "does not speak TLS");
    assert!(err.contains("plaintext"), "{err}");
    // A plaintext server never answers the TLS greeting: after one connect timeout (2 s)
    // the client looks, finds a plaintext server, and says so, rather than waiting out
    // every reconnect attempt. Bounded, not a hang.
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

#[test]
fn an_insecure_url_needs_tls_insecure() {
    let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    let insecure = format!("{}#insecure", server.url());
    let out = redis_locks(&["run", "job", "--redis", &insecure, "--", "true"]);
    expect(&out, 64, "--tls-insecure");
    let out = redis_locks(&["status", "job", "--redis", &insecure]);
    expect(&out, 64, "--tls-insecure");
    // On purpose: no certificate check, so no CA needed either.
    let out = redis_locks(&[
        "run",
        "job",
        "--redis",
        &insecure,
        "--tls-insecure",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = command()
        .args(["status", "job", "--redis", &insecure])
        .env("REDIS_TLS_INSECURE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn an_acl_users_password_over_tls_is_never_printed() {
    const PASSWORD: &str = "tls-Pa55word-9f3e";
    let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    let mut admin = server.connection().unwrap();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ])
        .exec(&mut admin)
        .unwrap();
    let url = format!("rediss://locker:{PASSWORD}@127.0.0.1:{}", server.port());
    let wrong = format!("rediss://locker:{PASSWORD}-not@127.0.0.1:{}", server.port());
    let ca = with_ca();
    let mut seen = String::new();
    let mut keep = |out: &Output| {
        seen.push_str(&stdout(out));
        seen.push_str(&stderr(out));
    };

    let out = redis_locks(&args(&["run", "job", "--redis", &url, "--", "true"], &ca));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    keep(&out);
    let out = redis_locks(&args(&["status", "job", "--redis", &url, "--json"], &ca));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(status["user"], "locker", "{status}");
    assert_eq!(status["tls"], true, "{status}");
    keep(&out);
    let out = redis_locks(&args(&["status", "job", "--redis", &url], &ca));
    assert!(stdout(&out).contains("as user locker"), "{}", stdout(&out));
    keep(&out);
    for command in [
        &["run", "job", "--redis", &wrong, "--", "true"][..],
        &["status", "job", "--redis", &wrong],
        &["status", "job", "--redis", &wrong, "--json"],
    ] {
        let out = redis_locks(&args(command, &ca));
        expect(&out, 77, "refused access");
        keep(&out);
    }
    // A wrong CA with the password in the URL: the TLS error names the URL, hidden.
    let other_ca = TlsFiles::get()
        .unwrap()
        .other_ca()
        .cert_path()
        .display()
        .to_string();
    let out = redis_locks(&["status", "job", "--redis", &url, "--tls-ca", &other_ca]);
    let err = expect(&out, 77, "certificate");
    assert!(err.contains("locker:***@"), "{err}");
    keep(&out);
    assert!(!seen.contains(PASSWORD), "the password was printed: {seen}");
}

#[test]
fn a_tls_cluster_and_a_tls_sentinel_master() {
    let ca = with_ca();
    let cluster = test_support::RedisCluster::builder()
        .masters(3)
        .replicas_per_master(0)
        .tls()
        .start()
        .unwrap();
    let seed = cluster.seed_urls()[0].clone();
    assert!(seed.starts_with("rediss://"), "{seed}");
    let out = redis_locks(&args(
        &[
            "run",
            "job",
            "--cluster",
            &seed,
            "--namespace",
            "ns",
            "--",
            "true",
        ],
        &ca,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = redis_locks(&args(
        &[
            "status",
            "job",
            "--cluster",
            &seed,
            "--namespace",
            "ns",
            "--json",
        ],
        &ca,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(status["topology"], "cluster", "{status}");
    assert_eq!(status["tls"], true, "{status}");
    assert_eq!(status["key"], "ns:job", "{status}");
    assert!(status["fencing_counter"].as_u64() > Some(0), "{status}");
    // The demo's own connection to the cluster (it deletes its fencing counters at the end)
    // goes over TLS too.
    let out = redis_locks(&args(
        &[
            "demo",
            "--cluster",
            &seed,
            "--processes",
            "1",
            "--tasks",
            "1",
            "--per-worker",
            "2",
        ],
        &ca,
    ));
    succeeded(&out);
    drop(cluster);

    let set = test_support::SentinelSet::builder()
        .replicas(1)
        .sentinels(1)
        .master_name("tlsmaster")
        .tls()
        .start()
        .unwrap();
    let sentinel = set.sentinel_urls()[0].clone();
    assert!(sentinel.starts_with("rediss://"), "{sentinel}");
    let out = redis_locks(&args(
        &[
            "run",
            "job",
            "--sentinel",
            &sentinel,
            "--master",
            "tlsmaster",
            "--replicas",
            "1",
            "--",
            "sh",
            "-c",
            "echo acked=$REDIS_LOCKS_REPLICAS_ACKED",
        ],
        &ca,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "acked=1");
    let out = redis_locks(&args(
        &[
            "status",
            "job",
            "--sentinel",
            &sentinel,
            "--master",
            "tlsmaster",
            "--json",
        ],
        &ca,
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(status["topology"], "sentinel", "{status}");
    assert_eq!(status["tls"], true, "{status}");
}
