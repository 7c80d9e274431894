//! Real `redis-server` processes for tests, benchmarks and the demo — never a mock, never port 6379.
//!
//! [`RedisServer::start`] launches a private server on a free loopback port (through the
//! published `redis-test` crate), waits until it answers `PING`, and stops it when dropped.
//! Fault helpers pause ([`RedisServer::pause`], SIGSTOP), resume, kill (SIGKILL) and restart
//! a server on the same port. [`start_many`] gives N independent servers (for locks over
//! several masters, such as Redlock), and
//! [`ChildProcess`] runs a piece of a test in another OS process (a lock holder to kill -9).
//!
//! Two replicated topologies, made of the same private servers:
//!
//! - [`RedisCluster`]: a Redis Cluster (`RedisCluster::start(3, 1)`: 3 masters, 3 replicas)
//!   made by `redis-cli --cluster create`, with the slot map asked of the live nodes
//!   ([`RedisCluster::master_for_key`], [`RedisCluster::replica_of`]) and fault helpers: kill,
//!   pause and resume a node, a manual [`failover`](RedisCluster::failover), waiting for the
//!   promotion after a master is killed ([`RedisCluster::wait_promoted`]), and moving a slot
//!   ([`RedisCluster::migrate_slot`], or in two steps with [`RedisCluster::begin_migration`]
//!   to hold it half-way for `ASK` redirections).
//! - [`SentinelSet`]: a master with replicas watched by Redis Sentinels
//!   (`SentinelSet::start(2, 3)`), with [`SentinelSet::master_port`] asked of the sentinels
//!   and [`SentinelSet::wait_failover`] after the master is killed.
//!
//! Every server, cluster node and sentinel runs the same program: `redis-server`, or the one
//! the environment variable [`SERVER_ENV`] (`REDIS_LOCKS_SERVER`) names, such as Valkey's
//! `valkey-server`; [`server_flavor`] tells which it is and its version, for a test that
//! depends on it.
//!
//! TLS: [`RedisServer::start_tls`] starts a server that speaks TLS only (`rediss://`), with
//! mutual TLS or not and a good, wrong-host or expired certificate ([`TlsServerOptions`]);
//! [`RedisClusterBuilder::tls`] and [`SentinelSetBuilder::tls`] do the same for a whole
//! topology. The certificates ([`TlsFiles`]) are made once per process with `openssl`. The
//! tests that use TLS live in test binaries named `tls` (a server program without TLS, such
//! as a Valkey built without it, skips them with `-E 'not binary(tls)'`).
//!
//! Every start-up and every wait is bounded in time; a timeout is a
//! [`SpawnError::Timeout`] with a tail of the servers' logs. Every process is killed (SIGKILL)
//! when its owner is dropped.
//!
//! ```
//! let server = test_support::RedisServer::start().unwrap();
//! let mut con = server.connection().unwrap();
//! let pong: String = redis::cmd("PING").query(&mut con).unwrap();
//! assert_eq!(pong, "PONG");
//! ```

mod child;
mod cluster;
mod error;
mod flavor;
pub mod history;
mod probe;
mod program;
mod replica;
mod sentinel;
mod server;
mod tls;

pub use child::ChildProcess;
pub use cluster::{Migration, RedisCluster, RedisClusterBuilder};
pub use error::SpawnError;
pub use flavor::{ServerFlavor, ServerKind, server_flavor};
pub use program::{DEFAULT_SERVER, SERVER_ENV, server_program};
pub use sentinel::{SentinelSet, SentinelSetBuilder};
pub use server::{RedisServer, redis_server_installed, start_many, url_or_private_server};
pub use tls::{CertFiles, ServerCert, TlsFiles, TlsServerOptions};
