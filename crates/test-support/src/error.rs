//! Why a private server, cluster or sentinel set could not be started or used.

use std::io;
use std::time::Duration;

use crate::program::server_name;

/// Why a private server could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The server program ([`crate::server_program`]: `redis-server` unless
    /// `REDIS_LOCKS_SERVER` names another) does not run.
    #[error(
        "{} is not installed (it is the server program: set REDIS_LOCKS_SERVER to another, or \
         on Debian: apt-get install -y redis-server, or run scripts/test)",
        server_name()
    )]
    NotInstalled,
    /// The server process could not be spawned.
    #[error("could not spawn {program}: {err}", program = server_name(), err = .0)]
    Spawn(#[from] io::Error),
    /// The server did not answer `PING` in time, or exited early, on every port tried.
    #[error("{} did not become ready on port {port}: {detail}", server_name())]
    NotReady {
        /// The last port tried.
        port: u16,
        /// What was seen (exit status or the last connection error, and the server log).
        detail: String,
    },
    /// A topology ([`RedisCluster`], [`SentinelSet`]) did not reach the awaited state in
    /// time: at start-up, or after a failover or slot migration a helper waits for.
    ///
    /// [`RedisCluster`]: crate::RedisCluster
    /// [`SentinelSet`]: crate::SentinelSet
    #[error("{what}: not reached within {waited:?}: {detail}")]
    Timeout {
        /// The state waited for.
        what: String,
        /// How long was waited.
        waited: Duration,
        /// What was still missing at the last look, and a tail of the servers' logs.
        detail: String,
    },
    /// A topology was asked for that cannot be built or used as asked (a cluster of fewer
    /// than 3 masters, a port that is not one of its nodes' masters, ...).
    #[error("invalid topology request: {0}")]
    InvalidTopology(String),
    /// The test certificates ([`TlsFiles`]) could not be made with `openssl`.
    ///
    /// [`TlsFiles`]: crate::TlsFiles
    #[error("could not make the test TLS certificates: {0}")]
    Certificates(String),
    /// A command a topology helper sent (`redis-cli --cluster create`, `CLUSTER FAILOVER`,
    /// `MIGRATE`, ...) failed, or was refused by the node.
    #[error("{command} (port {port}) failed: {detail}")]
    Command {
        /// The port of the node the command went to (for `redis-cli`, the first node).
        port: u16,
        /// The command, in short.
        command: String,
        /// The error or output.
        detail: String,
    },
}
