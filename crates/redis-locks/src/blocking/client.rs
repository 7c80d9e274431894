//! The blocking [`Client`]: the async client and the private runtime it runs on.

use std::sync::Arc;

use super::handle::Handle;
use super::runtime::Runtime;
use super::{FairMutex, FencedKey, MultiLock, Mutex, ReentrantMutex, RwLock, Semaphore};
use crate::error::Result;
use crate::node::ClientOptions;
use crate::options::LockOptions;

/// A connection to Redis for code without an async runtime: the async
/// [`Client`](crate::Client) and a private runtime (one worker thread) that runs its
/// connections, watchdog and wake-ups. Cheap to clone; every handle made from it shares the
/// runtime, which stops when the last of them is dropped.
///
/// Every method waits on the calling thread. Called inside a tokio runtime, each returns
/// [`Error::InsideRuntime`](crate::Error::InsideRuntime) instead: use the async API there.
///
/// # Examples
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// # let url = server.url();
/// let client = redis_locks::blocking::Client::connect(&url)?;
/// let guard = client.mutex("jobs:nightly")?.lock()?;
/// guard.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    client: crate::Client,
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Client").field(&self.client).finish()
    }
}

impl Client {
    /// Connects to the Redis server at `url`, as [`Client::connect`](crate::Client::connect).
    ///
    /// # Errors
    /// As [`Client::connect`](crate::Client::connect);
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) inside a tokio runtime;
    /// [`Error::RuntimeStart`](crate::Error::RuntimeStart) when the runtime's thread cannot
    /// be started.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// # Ok(()) }
    /// ```
    pub fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, ClientOptions::default())
    }

    /// Connects to the Redis server at `url` with `options`.
    ///
    /// # Errors
    /// As [`Client::connect`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use redis_locks::{ClientOptions, blocking::Client};
    ///
    /// let client = Client::connect_with(&server.url(), ClientOptions::default().namespace("locks"))?;
    /// assert_eq!(client.as_async().keys("jobs:nightly")?.lock(), "locks:jobs:nightly");
    /// # Ok(()) }
    /// ```
    pub fn connect_with(url: &str, options: ClientOptions) -> Result<Client> {
        let runtime = Runtime::start("Client::connect")?;
        let client = runtime.run("Client::connect", crate::Client::connect_with(url, options))?;
        Ok(Client::from_async(client, runtime))
    }

    /// Connects to a Redis Cluster through `seeds`, as
    /// [`Client::connect_cluster`](crate::Client::connect_cluster).
    ///
    /// # Errors
    /// As [`Client::connect_cluster`](crate::Client::connect_cluster), and as
    /// [`Client::connect`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let cluster = test_support::RedisCluster::start(3, 0)?;
    /// # let seeds = cluster.seed_urls();
    /// use redis_locks::{ClientOptions, blocking::Client};
    ///
    /// let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    /// let client = Client::connect_cluster(&seeds, ClientOptions::default())?;
    /// client.mutex("jobs:nightly")?.lock()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn connect_cluster(seeds: &[&str], options: ClientOptions) -> Result<Client> {
        let runtime = Runtime::start("Client::connect_cluster")?;
        let client = runtime.run(
            "Client::connect_cluster",
            crate::Client::connect_cluster(seeds, options),
        )?;
        Ok(Client::from_async(client, runtime))
    }

    /// Connects to the master that the sentinels at `sentinels` watch under `master`, as
    /// [`Client::connect_sentinel`](crate::Client::connect_sentinel).
    ///
    /// # Errors
    /// As [`Client::connect_sentinel`](crate::Client::connect_sentinel), and as
    /// [`Client::connect`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let set = test_support::SentinelSet::start(1, 1)?;
    /// # let sentinels = set.sentinel_urls();
    /// use redis_locks::{ClientOptions, blocking::Client};
    ///
    /// let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
    /// let client = Client::connect_sentinel(&sentinels, "mymaster", ClientOptions::default())?;
    /// client.mutex("jobs:nightly")?.lock()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn connect_sentinel(
        sentinels: &[&str],
        master: &str,
        options: ClientOptions,
    ) -> Result<Client> {
        let runtime = Runtime::start("Client::connect_sentinel")?;
        let client = runtime.run(
            "Client::connect_sentinel",
            crate::Client::connect_sentinel(sentinels, master, options),
        )?;
        Ok(Client::from_async(client, runtime))
    }

    /// A client whose connection is opened by its first request, as
    /// [`Client::connect_lazy`](crate::Client::connect_lazy) (for a
    /// [`Redlock`](super::Redlock) node that is down when the process starts).
    ///
    /// # Errors
    /// As [`Client::connect_lazy`](crate::Client::connect_lazy), and as [`Client::connect`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use redis_locks::{ClientOptions, blocking::Client};
    ///
    /// let client = Client::connect_lazy("redis://127.0.0.1:1", ClientOptions::default())?;
    /// assert!(client.mutex("jobs:nightly")?.try_lock().unwrap_err().is_connection());
    /// # Ok(()) }
    /// ```
    pub fn connect_lazy(url: &str, options: ClientOptions) -> Result<Client> {
        let runtime = Runtime::start("Client::connect_lazy")?;
        let client = {
            let _entered = runtime.enter();
            crate::Client::connect_lazy(url, options)?
        };
        Ok(Client::from_async(client, runtime))
    }

    pub(super) fn from_async(client: crate::Client, runtime: Arc<Runtime>) -> Client {
        Client { client, runtime }
    }

    pub(super) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The async client inside, for what this type does not wrap (its options, its stats,
    /// where a lock is served).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.as_async().keys("jobs:nightly")?.lock(), "jobs:nightly");
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &crate::Client {
        &self.client
    }

    fn handle<H>(&self, lock: Result<H>) -> Result<Handle<H>> {
        Ok(Handle::wrap(lock?, self.runtime.clone()))
    }

    /// A [`Mutex`] named `name`, with default options.
    ///
    /// # Errors
    /// As [`Client::mutex`](crate::Client::mutex).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// # Ok(()) }
    /// ```
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        self.handle(self.client.mutex(name))
    }

    /// A [`Mutex`] named `name`, with `options`.
    ///
    /// # Errors
    /// As [`Client::mutex_with`](crate::Client::mutex_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    /// use redis_locks::LockOptions;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let options = LockOptions::default().lease(Duration::from_secs(10));
    /// let mutex = client.mutex_with("jobs:nightly", options)?;
    /// # Ok(()) }
    /// ```
    pub fn mutex_with(&self, name: &str, options: LockOptions) -> Result<Mutex> {
        self.handle(self.client.mutex_with(name, options))
    }

    /// A [`FairMutex`] named `name`, with default options.
    ///
    /// # Errors
    /// As [`Client::fair_mutex`](crate::Client::fair_mutex).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let fair = client.fair_mutex("queue:drain")?;
    /// fair.lock()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_mutex(&self, name: &str) -> Result<FairMutex> {
        self.handle(self.client.fair_mutex(name))
    }

    /// A [`FairMutex`] named `name`, with `options`.
    ///
    /// # Errors
    /// As [`Client::fair_mutex_with`](crate::Client::fair_mutex_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let fair = client.fair_mutex_with("queue:drain", redis_locks::LockOptions::default())?;
    /// # Ok(()) }
    /// ```
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<FairMutex> {
        self.handle(self.client.fair_mutex_with(name, options))
    }

    /// A [`ReentrantMutex`] named `name`, with default options and an owner of its own.
    ///
    /// # Errors
    /// As [`Client::reentrant_mutex`](crate::Client::reentrant_mutex).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let lock = client.reentrant_mutex("cache:rebuild")?;
    /// let outer = lock.lock()?;
    /// let inner = lock.lock()?; // the same owner: taken again
    /// assert_eq!(inner.release()?.holds(), 1);
    /// assert!(outer.release()?.is_freed());
    /// # Ok(()) }
    /// ```
    pub fn reentrant_mutex(&self, name: &str) -> Result<ReentrantMutex> {
        self.handle(self.client.reentrant_mutex(name))
    }

    /// A [`ReentrantMutex`] named `name`, with `options`.
    ///
    /// # Errors
    /// As [`Client::reentrant_mutex_with`](crate::Client::reentrant_mutex_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let options = redis_locks::LockOptions::default();
    /// let lock = client.reentrant_mutex_with("cache:rebuild", options)?;
    /// # Ok(()) }
    /// ```
    pub fn reentrant_mutex_with(&self, name: &str, options: LockOptions) -> Result<ReentrantMutex> {
        self.handle(self.client.reentrant_mutex_with(name, options))
    }

    /// An [`RwLock`] named `name`, with default options and an owner of its own.
    ///
    /// # Errors
    /// As [`Client::rwlock`](crate::Client::rwlock).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let rw = client.rwlock("reports:daily")?;
    /// rw.read()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        self.handle(self.client.rwlock(name))
    }

    /// An [`RwLock`] named `name`, with `options`.
    ///
    /// # Errors
    /// As [`Client::rwlock_with`](crate::Client::rwlock_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let rw = client.rwlock_with("reports:daily", redis_locks::LockOptions::default())?;
    /// # Ok(()) }
    /// ```
    pub fn rwlock_with(&self, name: &str, options: LockOptions) -> Result<RwLock> {
        self.handle(self.client.rwlock_with(name, options))
    }

    /// A [`Semaphore`] named `name` of `permits` permits, with default options.
    ///
    /// # Errors
    /// As [`Client::semaphore`](crate::Client::semaphore).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let api = client.semaphore("partner-api", 4)?;
    /// api.acquire()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        self.handle(self.client.semaphore(name, permits))
    }

    /// A [`Semaphore`] named `name` of `permits` permits, with `options`.
    ///
    /// # Errors
    /// As [`Client::semaphore_with`](crate::Client::semaphore_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let options = redis_locks::LockOptions::default();
    /// let api = client.semaphore_with("partner-api", 4, options)?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        self.handle(self.client.semaphore_with(name, permits, options))
    }

    /// A [`MultiLock`] over `names`, with default options.
    ///
    /// # Errors
    /// As [`Client::multi_lock`](crate::Client::multi_lock).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let both = client.multi_lock(["account:42", "account:7"])?.lock()?;
    /// assert!(both.as_async().fencing_token("account:7").is_some());
    /// # Ok(()) }
    /// ```
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle(self.client.multi_lock(names))
    }

    /// A [`MultiLock`] over `names`, with `options`.
    ///
    /// # Errors
    /// As [`Client::multi_lock_with`](crate::Client::multi_lock_with).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let options = redis_locks::LockOptions::default();
    /// let both = client.multi_lock_with(["account:42", "account:7"], options)?;
    /// # Ok(()) }
    /// ```
    pub fn multi_lock_with<I, S>(&self, names: I, options: LockOptions) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.handle(self.client.multi_lock_with(names, options))
    }

    /// A [`FencedKey`] named `name`: a value that only the newest holder may write.
    ///
    /// # Errors
    /// As [`Client::fenced_key`](crate::Client::fenced_key).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let report = client.fenced_key("reports:latest")?;
    /// # Ok(()) }
    /// ```
    pub fn fenced_key(&self, name: &str) -> Result<FencedKey> {
        self.handle(self.client.fenced_key(name))
    }

    /// Frees the lock `name` on purpose, whoever holds it (see
    /// [`Client::break_lock`](crate::Client::break_lock)).
    ///
    /// # Errors
    /// As [`Client::break_lock`](crate::Client::break_lock);
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) inside a tokio runtime.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let broken = client.break_lock("jobs:nightly")?;
    /// assert_eq!(broken.kind, None, "nobody held it");
    /// # Ok(()) }
    /// ```
    pub fn break_lock(&self, name: &str) -> Result<crate::BrokenLock> {
        self.runtime
            .run("Client::break_lock", self.client.break_lock(name))
    }
}
