//! The blocking API, for code without an async runtime: every primitive under the same
//! names, with the same guarantees, each call waiting on the calling thread.
//!
//! A blocking [`Client`] owns a private tokio runtime (one worker thread), as
//! `reqwest::blocking` does. The worker runs what lives beside the calls: the connections,
//! the watchdog that renews every guard's lease, the wake-ups of waiters, and the
//! [`Guard::lost`] channels. A call (`lock()`, `release()`...) runs the async call of its name
//! to its end on the calling thread.
//!
//! - One [`Handle`] wraps every async handle and one [`Guard`] every async guard; their names
//!   per primitive are the aliases below ([`Mutex`], [`MutexGuard`], ...).
//! - [`Guard::lost`] is a channel that receives why the lock was lost, the moment it is;
//!   [`Guard::lost_reason`] is the check.
//! - Dropping a guard releases the lock before `drop` returns.
//! - Called inside a tokio runtime (a task, a `block_on`, a `spawn_blocking` closure), every
//!   call returns [`Error::InsideRuntime`](crate::Error::InsideRuntime) instead of blocking
//!   the runtime or panicking: use the async API there.
//!
//! # Examples
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let server = test_support::RedisServer::start()?;
//! use std::time::Duration;
//! use redis_locks::blocking::Client;
//!
//! let client = Client::connect(&server.url())?;
//! let mutex = client.mutex("jobs:nightly")?;
//! let guard = mutex.lock_timeout(Duration::from_secs(5))?;
//! let lost = guard.lost();
//! // ... work, checking `lost.try_recv()` between steps ...
//! assert!(lost.try_recv().is_err());
//! guard.release()?;
//! # Ok(()) }
//! ```

mod client;
mod guard;
mod handle;
mod impls;
mod mutexes;
mod redlock;
mod runtime;
mod rwlock;
mod semaphore;

pub use client::Client;
pub use guard::{AsyncGuard, AsyncLeaseGuard, Guard};
pub use handle::{AsyncInspect, AsyncLock, Handle};
pub use redlock::RedlockNodes;

/// A blocking [`Mutex`](crate::Mutex): one holder at a time.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let mutex: redis_locks::blocking::Mutex = client.mutex("jobs:nightly")?;
/// let guard = mutex.lock()?;
/// assert!(mutex.try_lock().unwrap_err().is_held());
/// guard.release()?;
/// # Ok(()) }
/// ```
pub type Mutex = Handle<crate::Mutex>;

/// The guard of a blocking [`Mutex`] or [`FairMutex`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let guard: redis_locks::blocking::MutexGuard = client.mutex("jobs:nightly")?.lock()?;
/// guard.release()?;
/// # Ok(()) }
/// ```
pub type MutexGuard = Guard<crate::MutexGuard>;

/// A blocking [`FairMutex`](crate::FairMutex): the longest waiter across all processes goes
/// first.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let fair: redis_locks::blocking::FairMutex = client.fair_mutex("queue:drain")?;
/// fair.lock()?.release()?;
/// # Ok(()) }
/// ```
pub type FairMutex = Handle<crate::FairMutex>;

/// A blocking [`ReentrantMutex`](crate::ReentrantMutex): one owner may take it again.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let lock: redis_locks::blocking::ReentrantMutex = client.reentrant_mutex("cache:rebuild")?;
/// let outer = lock.lock()?;
/// let inner = lock.lock()?;
/// inner.release()?;
/// outer.release()?;
/// # Ok(()) }
/// ```
pub type ReentrantMutex = Handle<crate::ReentrantMutex>;

/// The guard of a blocking [`ReentrantMutex`]: its release says how many holds are left.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let guard: redis_locks::blocking::ReentrantMutexGuard = client.reentrant_mutex("cache:rebuild")?.lock()?;
/// assert!(guard.release()?.is_freed());
/// # Ok(()) }
/// ```
pub type ReentrantMutexGuard = Guard<crate::ReentrantMutexGuard>;

/// A blocking [`RwLock`](crate::RwLock): any number of readers, or one writer.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let rw: redis_locks::blocking::RwLock = client.rwlock("reports:daily")?;
/// rw.read()?.release()?;
/// rw.write()?.release()?;
/// # Ok(()) }
/// ```
pub type RwLock = Handle<crate::RwLock>;

/// A read hold of a blocking [`RwLock`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let read: redis_locks::blocking::RwLockReadGuard = client.rwlock("reports:daily")?.read()?;
/// read.release()?;
/// # Ok(()) }
/// ```
pub type RwLockReadGuard = Guard<crate::RwLockReadGuard>;

/// The write hold of a blocking [`RwLock`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let write: redis_locks::blocking::RwLockWriteGuard = client.rwlock("reports:daily")?.write()?;
/// write.release()?;
/// # Ok(()) }
/// ```
pub type RwLockWriteGuard = Guard<crate::RwLockWriteGuard>;

/// A blocking [`Redlock`](crate::Redlock) over N independent masters.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let servers = test_support::start_many(3)?;
/// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
/// use redis_locks::blocking::Redlock;
///
/// let nodes = Redlock::connect_nodes(&urls)?;
/// let lock: Redlock = Redlock::new(&nodes.clients, "jobs:nightly")?;
/// lock.lock()?.release()?;
/// lock.settle()?;
/// # Ok(()) }
/// ```
pub type Redlock = Handle<crate::Redlock>;

/// The guard of a blocking [`Redlock`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let servers = test_support::start_many(3)?;
/// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
/// use redis_locks::blocking::{Redlock, RedlockGuard};
///
/// let nodes = Redlock::connect_nodes(&urls)?;
/// let guard: RedlockGuard = Redlock::new(&nodes.clients, "jobs:nightly")?.lock()?;
/// guard.release()?;
/// # Ok(()) }
/// ```
pub type RedlockGuard = Guard<crate::RedlockGuard>;

/// A blocking [`Semaphore`](crate::Semaphore): at most N holders at once.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let api: redis_locks::blocking::Semaphore = client.semaphore("partner-api", 4)?;
/// api.acquire()?.release()?;
/// # Ok(()) }
/// ```
pub type Semaphore = Handle<crate::Semaphore>;

/// The permits of a blocking [`Semaphore`].
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let permit: redis_locks::blocking::SemaphoreGuard = client.semaphore("partner-api", 4)?.acquire()?;
/// permit.release()?;
/// # Ok(()) }
/// ```
pub type SemaphoreGuard = Guard<crate::SemaphoreGuard>;

/// A blocking [`MultiLock`](crate::MultiLock): several locks, all or none.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let both: redis_locks::blocking::MultiLock = client.multi_lock(["account:42", "account:7"])?;
/// both.lock()?.release()?;
/// # Ok(()) }
/// ```
pub type MultiLock = Handle<crate::MultiLock>;

/// The guard of a blocking [`MultiLock`]: its names and tokens are the async guard's
/// ([`Guard::as_async`]).
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let both: redis_locks::blocking::MultiLockGuard = client.multi_lock(["a", "b"])?.lock()?;
/// assert!(both.as_async().fencing_token("a").is_some());
/// both.release()?;
/// # Ok(()) }
/// ```
pub type MultiLockGuard = Guard<crate::MultiLockGuard>;

/// A blocking [`FencedKey`](crate::FencedKey): a value that only the newest holder may
/// write.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::blocking::Client::connect(&server.url())?;
/// let report: redis_locks::blocking::FencedKey = client.fenced_key("reports:latest")?;
/// let token = client.mutex("reports")?.lock()?.fencing_token();
/// report.set(token, "done")?;
/// # Ok(()) }
/// ```
pub type FencedKey = Handle<crate::FencedKey>;
