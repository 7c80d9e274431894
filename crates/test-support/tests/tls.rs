//! The TLS servers, clusters and Sentinel sets: they come up, answer over `rediss://` a client
//! that trusts the test CA, and refuse the clients they should.
//!
//! Every TLS test lives in a test binary named `tls` (a run with a server program built
//! without TLS leaves them out with `-E 'not binary(tls)'`).

use std::time::{Duration, Instant};

use test_support::{
    RedisCluster, RedisServer, SentinelSet, ServerCert, TlsFiles, TlsServerOptions,
};

const CONNECT: Duration = Duration::from_secs(2);

/// `PING` over a new connection of `client`, or the error.
fn ping(client: &redis::Client) -> redis::RedisResult<String> {
    let mut con = client.get_connection_with_timeout(CONNECT)?;
    con.set_read_timeout(Some(Duration::from_secs(5)))?;
    redis::cmd("PING").query(&mut con)
}

fn tls_client(url: &str, root: &[u8], client: Option<&test_support::CertFiles>) -> redis::Client {
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: client.map(|c| c.client_tls_config()),
            root_cert: Some(root.to_vec()),
        },
    )
    .unwrap()
}

#[test]
fn certificates_are_made_once_and_read_back() {
    let started = Instant::now();
    let files = TlsFiles::get().unwrap();
    eprintln!("certificates made in {:?}", started.elapsed());
    let again = TlsFiles::get().unwrap();
    assert!(std::ptr::eq(files, again));
    for cert in [
        files.ca(),
        files.other_ca(),
        files.client(),
        files.other_client(),
        files.server(ServerCert::Good),
        files.server(ServerCert::WrongHost),
        files.server(ServerCert::Expired),
    ] {
        assert_eq!(std::fs::read(cert.cert_path()).unwrap(), cert.cert_pem());
        assert_eq!(std::fs::read(cert.key_path()).unwrap(), cert.key_pem());
        assert!(cert.cert_path().starts_with(files.dir()));
    }
    // What openssl itself says of them.
    let verify = |ca: &std::path::Path, cert: &std::path::Path| {
        std::process::Command::new("openssl")
            .arg("verify")
            .arg("-CAfile")
            .arg(ca)
            .arg(cert)
            .output()
            .unwrap()
    };
    let good = files.server(ServerCert::Good).cert_path();
    assert!(verify(files.ca_path(), good).status.success());
    assert!(!verify(files.other_ca().cert_path(), good).status.success());
    let expired = verify(
        files.ca_path(),
        files.server(ServerCert::Expired).cert_path(),
    );
    assert!(!expired.status.success());
    let said = [expired.stdout, expired.stderr].concat();
    assert!(String::from_utf8_lossy(&said).contains("expired"));
    assert!(
        verify(
            files.other_ca().cert_path(),
            files.other_client().cert_path()
        )
        .status
        .success()
    );
}

#[test]
fn tls_server_answers_a_client_that_trusts_the_ca_only() {
    let files = TlsFiles::get().unwrap();
    let started = Instant::now();
    let mut server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    eprintln!("TLS server started in {:?}", started.elapsed());
    let url = server.url();
    assert_eq!(url, format!("rediss://127.0.0.1:{}", server.port()));
    assert!(server.is_tls());

    assert_eq!(
        ping(&tls_client(&url, files.ca_pem(), None)).unwrap(),
        "PONG"
    );
    assert_eq!(ping(&server.client()).unwrap(), "PONG");
    let mut con = server.connection().unwrap();
    let () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();

    // Another CA, the system's roots, or plaintext on the TLS port: refused, promptly.
    let started = Instant::now();
    ping(&tls_client(&url, files.other_ca_pem(), None)).unwrap_err();
    ping(&redis::Client::open(url.as_str()).unwrap()).unwrap_err();
    let plain = format!("redis://127.0.0.1:{}", server.port());
    ping(&redis::Client::open(plain).unwrap()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));

    // A restart keeps TLS (and empties the data set).
    server.restart().unwrap();
    assert!(server.is_tls());
    let mut con = server.connection().unwrap();
    let value: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, None);
}

#[test]
fn mutual_tls_needs_a_client_certificate_of_the_ca() {
    let files = TlsFiles::get().unwrap();
    let server = RedisServer::start_tls(TlsServerOptions::new().mutual(true)).unwrap();
    let url = server.url();
    assert_eq!(
        ping(&tls_client(&url, files.ca_pem(), Some(files.client()))).unwrap(),
        "PONG"
    );
    ping(&tls_client(&url, files.ca_pem(), None)).unwrap_err();
    ping(&tls_client(
        &url,
        files.ca_pem(),
        Some(files.other_client()),
    ))
    .unwrap_err();

    // Without mutual TLS, a client certificate is not asked for, and no harm.
    let server = RedisServer::start_tls(TlsServerOptions::new()).unwrap();
    assert_eq!(
        ping(&tls_client(
            &server.url(),
            files.ca_pem(),
            Some(files.client())
        ))
        .unwrap(),
        "PONG"
    );
}

#[test]
fn wrong_host_and_expired_certificates_are_refused() {
    let files = TlsFiles::get().unwrap();
    for cert in [ServerCert::WrongHost, ServerCert::Expired] {
        let server = RedisServer::start_tls(TlsServerOptions::new().server_cert(cert)).unwrap();
        let err = ping(&tls_client(&server.url(), files.ca_pem(), None)).unwrap_err();
        eprintln!("{cert:?}: {err}");
        ping(&server.client()).unwrap_err();
        // The server itself is up: a client that checks nothing gets an answer.
        let insecure = format!("{}/#insecure", server.url());
        assert_eq!(
            ping(&redis::Client::open(insecure).unwrap()).unwrap(),
            "PONG"
        );
    }
}

#[test]
fn tls_server_args_and_a_plaintext_server_behind_rediss() {
    let files = TlsFiles::get().unwrap();
    let server =
        RedisServer::start_tls(TlsServerOptions::new().args(&["--requirepass", "secret"])).unwrap();
    let err = ping(&server.client()).unwrap_err();
    assert_eq!(err.code(), Some("NOAUTH"));
    let url = format!("rediss://:secret@127.0.0.1:{}", server.port());
    assert_eq!(
        ping(&tls_client(&url, files.ca_pem(), None)).unwrap(),
        "PONG"
    );

    // A plaintext server reached with a rediss:// URL: the handshake fails, in bounded time.
    let plain = RedisServer::start().unwrap();
    let started = Instant::now();
    let url = format!("rediss://127.0.0.1:{}", plain.port());
    ping(&tls_client(&url, files.ca_pem(), None)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(ping(&plain.client()).unwrap(), "PONG");
}

#[test]
fn tls_cluster_comes_up_routes_keys_and_fails_over() {
    let files = TlsFiles::get().unwrap();
    let started = Instant::now();
    let cluster = RedisCluster::builder().tls().start().unwrap();
    eprintln!("TLS cluster 3+3 started in {:?}", started.elapsed());
    let seeds = cluster.seed_urls();
    assert_eq!(seeds.len(), 3);
    assert!(seeds.iter().all(|u| u.starts_with("rediss://127.0.0.1:")));
    assert!(cluster.nodes().iter().all(RedisServer::is_tls));

    let client = redis::cluster::ClusterClientBuilder::new(seeds)
        .certs(files.certificates(false))
        .connection_timeout(CONNECT)
        .response_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut con = client.get_connection().unwrap();
    for i in 0..20 {
        let () = redis::cmd("SET")
            .arg(format!("key{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let value: i64 = redis::cmd("GET").arg("key7").query(&mut con).unwrap();
    assert_eq!(value, 7);

    // The helpers talk TLS too: a manual failover, and a slot moved with its keys (MIGRATE
    // from node to node, over TLS).
    let key = "lock:{orders}";
    let () = redis::cmd("SET").arg(key).arg("v").query(&mut con).unwrap();
    let owner = cluster.master_for_key(key);
    let replica = cluster.replica_of(owner).unwrap();
    cluster.failover(replica).unwrap();
    assert_eq!(cluster.master_for_key(key), replica);
    let target = *cluster.masters().iter().find(|&&m| m != replica).unwrap();
    cluster.migrate_slot(cluster.slot_of(key), target).unwrap();
    let mut node = cluster.node(target).unwrap().connection().unwrap();
    let value: String = redis::cmd("GET").arg(key).query(&mut node).unwrap();
    assert_eq!(value, "v");
}

#[test]
fn mutual_tls_cluster_needs_the_client_certificate() {
    let files = TlsFiles::get().unwrap();
    let started = Instant::now();
    let cluster = RedisCluster::builder()
        .replicas_per_master(0)
        .mutual_tls()
        .start()
        .unwrap();
    eprintln!("mutual-TLS cluster 3+0 started in {:?}", started.elapsed());
    let build = |certs| {
        redis::cluster::ClusterClientBuilder::new(cluster.seed_urls())
            .certs(certs)
            .connection_timeout(CONNECT)
            .response_timeout(Duration::from_secs(5))
            .retries(0)
            .build()
            .unwrap()
    };
    let mut con = build(files.certificates(true)).get_connection().unwrap();
    let () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let refused = build(files.certificates(false))
        .get_connection()
        .and_then(|mut con| redis::cmd("GET").arg("k").query::<String>(&mut con));
    refused.unwrap_err();
}

#[test]
fn tls_sentinel_set_comes_up_and_fails_over() {
    let files = TlsFiles::get().unwrap();
    let started = Instant::now();
    let mut set = SentinelSet::builder().tls().start().unwrap();
    eprintln!("TLS sentinel set 1+2+3 started in {:?}", started.elapsed());
    let urls = set.sentinel_urls();
    assert_eq!(urls.len(), 3);
    assert!(urls.iter().all(|u| u.starts_with("rediss://127.0.0.1:")));

    // The sentinels answer over TLS, and the master they name does too.
    let sentinel = tls_client(&urls[0], files.ca_pem(), None);
    let mut con = sentinel.get_connection_with_timeout(CONNECT).unwrap();
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(set.master_name())
        .query(&mut con)
        .unwrap();
    let old = set.master_port();
    assert_eq!(addr, vec!["127.0.0.1".to_owned(), old.to_string()]);
    let master = tls_client(&format!("rediss://127.0.0.1:{old}"), files.ca_pem(), None);
    assert_eq!(ping(&master).unwrap(), "PONG");

    // A failover: the sentinels reach each other and the replicas over TLS.
    let started = Instant::now();
    set.kill_node(old);
    let new = set.wait_failover(old, Duration::from_secs(30)).unwrap();
    eprintln!("TLS sentinel failover in {:?}", started.elapsed());
    assert_ne!(new, old);
    set.wait_replicas_up(Duration::from_secs(20)).unwrap();
    let master = tls_client(&format!("rediss://127.0.0.1:{new}"), files.ca_pem(), None);
    assert_eq!(ping(&master).unwrap(), "PONG");
}

#[test]
fn mutual_tls_sentinel_set_needs_the_client_certificate() {
    let files = TlsFiles::get().unwrap();
    let started = Instant::now();
    let set = SentinelSet::builder()
        .replicas(1)
        .mutual_tls()
        .start()
        .unwrap();
    eprintln!(
        "mutual-TLS sentinel set 1+1+3 started in {:?}",
        started.elapsed()
    );
    let url = &set.sentinel_urls()[0];
    assert_eq!(
        ping(&tls_client(url, files.ca_pem(), Some(files.client()))).unwrap(),
        "PONG"
    );
    ping(&tls_client(url, files.ca_pem(), None)).unwrap_err();
}
