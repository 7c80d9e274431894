//! The server program: every server, cluster node and sentinel runs the one
//! `REDIS_LOCKS_SERVER` names (else `redis-server`), and `server_flavor()` says which it is.

use std::collections::HashMap;

use test_support::{RedisCluster, RedisServer, SentinelSet, ServerKind, server_flavor};

/// The `field:value` lines of `INFO server` of `server`.
fn info_server(server: &RedisServer) -> HashMap<String, String> {
    let mut con = server.connection().unwrap();
    let text: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Asserts that `server` runs the program `server_flavor()` describes.
fn assert_runs_the_flavor(server: &RedisServer) {
    let flavor = server_flavor().unwrap();
    let (major, minor, patch) = flavor.version();
    let version = format!("{major}.{minor}.{patch}");
    let info = info_server(server);
    match flavor.kind() {
        // Valkey still says `redis_version` (7.2.4, the fork's), and its own beside it.
        ServerKind::Valkey => {
            assert_eq!(info.get("server_name").map(String::as_str), Some("valkey"));
            assert_eq!(info.get("valkey_version"), Some(&version), "{info:?}");
        }
        ServerKind::Redis => {
            assert_ne!(info.get("server_name").map(String::as_str), Some("valkey"));
            assert_eq!(info.get("redis_version"), Some(&version), "{info:?}");
        }
        other => panic!("a server kind this test does not know: {other:?}"),
    }
}

#[test]
fn every_server_runs_the_program_named() {
    let server = RedisServer::start().unwrap();
    assert_runs_the_flavor(&server);
    let node = RedisServer::start_cluster_node().unwrap();
    assert_runs_the_flavor(&node);
}

#[test]
fn cluster_nodes_and_sentinels_run_it_too() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    for node in cluster.nodes() {
        assert_runs_the_flavor(node);
    }
    let set = SentinelSet::start(0, 1).unwrap();
    for server in set.servers().iter().chain(set.sentinels()) {
        assert_runs_the_flavor(server);
    }
}

#[test]
fn the_flavor_says_whether_waitaof_exists() {
    let flavor = server_flavor().unwrap();
    let server = RedisServer::start().unwrap();
    let mut con = server.connection().unwrap();
    // `COMMAND INFO` answers nil for a command the server does not know.
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("WAITAOF")
        .query(&mut con)
        .unwrap();
    let known = !matches!(info.as_slice(), [redis::Value::Nil]);
    assert_eq!(known, flavor.has_waitaof(), "{flavor}: {info:?}");
}
