//! TLS (`rediss://`) on real TLS servers whose certificates are made at test time: every
//! primitive over TLS, mutual TLS, the cluster and Sentinel backends and Redlock nodes over TLS,
//! and each way a handshake can fail as its typed error, bounded in time.
//!
//! (Named `tls` so that the Valkey pass of `scripts/test`, whose `valkey-server` is built without
//! TLS, leaves it out.)

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_locks::{Client, ClientOptions, Error, Redlock, TlsProblem};
use test_support::history::History;
use test_support::{
    RedisCluster, RedisServer, SentinelSet, ServerCert, TlsFiles, TlsServerOptions,
};

fn files() -> &'static TlsFiles {
    TlsFiles::get().expect("make the test certificates")
}

/// Options trusting the test CA, with short timeouts.
fn trusting() -> ClientOptions {
    ClientOptions::default()
        .connect_timeout(Duration::from_millis(800))
        .response_timeout(Duration::from_secs(2))
        .reconnect_attempts(0)
        .tls_ca(files().ca_pem().to_vec())
}

fn tls_server(options: TlsServerOptions) -> RedisServer {
    RedisServer::start_tls(options).expect("start a TLS server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_takes_and_releases_its_lock_over_tls() {
    let server = tls_server(TlsServerOptions::new());
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let history = Arc::new(History::default());
    let mut workers = Vec::new();
    for worker in 0..3 {
        let client = Client::connect_with(&url, trusting()).await.unwrap();
        workers.push(tokio::spawn(common::contend_as(
            client,
            "mutex".into(),
            "tls:mutex".into(),
            format!("w{worker}"),
            5,
            history.clone(),
        )));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let report = history.check();
    assert!(report.is_ok(), "{report}");

    let client = Client::connect_with(&url, trusting()).await.unwrap();
    client
        .fair_mutex("tls:fair")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let rwlock = client.rwlock("tls:rw").unwrap();
    rwlock.read().await.unwrap().release().await.unwrap();
    rwlock.write().await.unwrap().release().await.unwrap();
    client
        .reentrant_mutex("tls:reentrant")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A waiter is woken over the TLS subscriber connection too.
    a_waiter_gets_the_lock_after_its_holder(&client, "tls:woken").await;
}

/// A holder of the lock `name`, a waiter refused by it, the release: the waiter takes the
/// lock. The holder's lease (30 s, renewed) outlasts the waiter's 10 s budget, so only the
/// release's wake-up can let it in.
async fn a_waiter_gets_the_lock_after_its_holder(client: &Client, name: &str) {
    let mutex = client.mutex(name).unwrap();
    let holder = mutex.lock().await.unwrap();
    let waiter = {
        let mutex = mutex.clone();
        tokio::spawn(async move { mutex.lock_timeout(Duration::from_secs(10)).await })
    };
    let watched = &mutex;
    let refused = common::eventually(Duration::from_secs(5), || async move {
        watched
            .state()
            .await
            .is_ok_and(|state| state.holder.is_some_and(|holder| holder.waited_for))
    })
    .await;
    assert!(refused, "the waiter never asked for the lock");
    holder.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let server = tls_server(TlsServerOptions::new().mutual(true));
    let refused = Client::connect_with(&server.url(), trusting()).await;
    match refused {
        Err(Error::Tls {
            problem: TlsProblem::ClientCertificate,
            ..
        }) => {}
        other => panic!("expected a client certificate error, got {other:?}"),
    }
    let files = files();
    let options = trusting().tls_client_cert(
        files.client_cert_pem().to_vec(),
        files.client_key_pem().to_vec(),
    );
    let client = Client::connect_with(&server.url(), options).await.unwrap();
    client
        .mutex("tls:mutual")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn each_failed_handshake_is_a_typed_error_in_bounded_time() {
    let good = tls_server(TlsServerOptions::new());
    let wrong_host = tls_server(TlsServerOptions::new().server_cert(ServerCert::WrongHost));
    let expired = tls_server(TlsServerOptions::new().server_cert(ServerCert::Expired));
    let plaintext = common::server();
    let files = files();
    let plaintext_as_tls = format!("rediss://127.0.0.1:{}", plaintext.port());
    let cases: Vec<(&str, String, ClientOptions, TlsProblem)> = vec![
        (
            "another CA",
            good.url(),
            trusting().tls_ca(files.other_ca_pem().to_vec()),
            TlsProblem::ServerCertificate,
        ),
        (
            "the system's CAs",
            good.url(),
            ClientOptions::default().reconnect_attempts(0),
            TlsProblem::ServerCertificate,
        ),
        (
            "another host's certificate",
            wrong_host.url(),
            trusting(),
            TlsProblem::ServerCertificate,
        ),
        (
            "an expired certificate",
            expired.url(),
            trusting(),
            TlsProblem::ServerCertificate,
        ),
        (
            "a plaintext server",
            plaintext_as_tls.clone(),
            trusting(),
            TlsProblem::NotTls,
        ),
        (
            // The default 3 reconnect attempts would each time out: it is said after the
            // first connect timeout instead.
            "a plaintext server, default reconnects",
            plaintext_as_tls,
            ClientOptions::default().tls_ca(files.ca_pem().to_vec()),
            TlsProblem::NotTls,
        ),
        (
            "a CA that is not PEM",
            good.url(),
            trusting().tls_ca(b"not a certificate".to_vec()),
            TlsProblem::Settings,
        ),
        (
            "TLS settings on a plaintext URL",
            plaintext.url(),
            trusting(),
            TlsProblem::Settings,
        ),
    ];
    for (what, url, options, expected) in cases {
        let started = Instant::now();
        match Client::connect_with(&url, options).await {
            Err(Error::Tls { problem, .. }) => assert_eq!(problem, expected, "{what}"),
            other => panic!("{what}: expected Error::Tls({expected:?}), got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what} took {:?}",
            started.elapsed()
        );
    }
    // No certificate check only on purpose.
    let insecure = format!("{}#insecure", good.url());
    assert!(matches!(
        Client::connect_with(&insecure, trusting()).await,
        Err(Error::InvalidUrl { .. })
    ));
    let on_purpose = ClientOptions::default().tls_insecure(true);
    Client::connect_with(&insecure, on_purpose.clone())
        .await
        .expect("#insecure allowed on purpose");
    Client::connect_with(&expired.url(), on_purpose)
        .await
        .expect("tls_insecure skips the certificate check");
}

#[tokio::test]
async fn redlock_nodes_over_tls() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| tls_server(TlsServerOptions::new()))
        .collect();
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(
            Client::connect_with(&server.url(), trusting())
                .await
                .unwrap(),
        );
    }
    let lock = Redlock::new(&clients, "tls:redlock").unwrap();
    let guard = lock.try_lock().await.unwrap();
    assert!(guard.fencing_token().get() > 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_cluster_over_tls() {
    let cluster = RedisCluster::builder()
        .masters(3)
        .replicas_per_master(0)
        .tls()
        .start()
        .expect("start a TLS cluster");
    let seeds = cluster.seed_urls();
    assert!(seeds[0].starts_with("rediss://"));
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let client = Client::connect_cluster(&seeds, trusting()).await.unwrap();
    a_waiter_gets_the_lock_after_its_holder(&client, "tls:cluster").await;
}

#[tokio::test]
async fn a_sentinel_master_over_tls() {
    let set = SentinelSet::builder()
        .tls()
        .start()
        .expect("start a TLS Sentinel set");
    let sentinels = set.sentinel_urls();
    assert!(sentinels[0].starts_with("rediss://"));
    let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
    let client = Client::connect_sentinel(&sentinels, set.master_name(), trusting())
        .await
        .unwrap();
    let guard = client.mutex("tls:sentinel").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();
}
