//! Real `redis-server` processes for tests, benchmarks and the demo — never a mock, never port 6379.
//!
//! [`RedisServer::start`] launches a private server on a free loopback port (through the
//! published `redis-test` crate), waits until it answers `PING`, and stops it when dropped.
//! Fault helpers pause ([`RedisServer::pause`], SIGSTOP), resume, kill (SIGKILL) and restart
//! a server on the same port. [`start_many`] gives N independent servers (for locks over
//! several masters, such as Redlock), and
//! [`ChildProcess`] runs a piece of a test in another OS process (a lock holder to kill -9).
//!
//! ```
//! let server = test_support::RedisServer::start().unwrap();
//! let mut con = server.connection().unwrap();
//! let pong: String = redis::cmd("PING").query(&mut con).unwrap();
//! assert_eq!(pong, "PONG");
//! ```

mod child;
mod server;

pub use child::ChildProcess;
pub use server::{
    RedisServer, SpawnError, redis_server_installed, start_many, url_or_private_server,
};
