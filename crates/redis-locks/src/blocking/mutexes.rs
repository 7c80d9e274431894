//! What the blocking [`Mutex`], [`FairMutex`], [`ReentrantMutex`] and [`FencedKey`] add to
//! every handle.

use super::{FairMutex, FencedKey, Mutex, ReentrantMutex};
use crate::error::Result;
use crate::owner::OwnerId;
use crate::token::FencingToken;

impl Mutex {
    /// Whether anyone holds the lock now.
    ///
    /// # Errors
    /// As the async `is_locked()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let guard = mutex.lock()?;
    /// assert!(mutex.is_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.run("Mutex::is_locked", self.as_async().is_locked())
    }
}

impl FairMutex {
    /// How many processes wait in line for the lock now.
    ///
    /// # Errors
    /// As the async `waiting()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.fair_mutex("queue:drain")?.waiting()?, 0);
    /// # Ok(()) }
    /// ```
    pub fn waiting(&self) -> Result<u64> {
        self.run("FairMutex::waiting", self.as_async().waiting())
    }
}

impl ReentrantMutex {
    /// The owner this handle acquires as: its acquisitions re-enter each other's.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let lock = client.reentrant_mutex("cache:rebuild")?;
    /// println!("acquiring as {}", lock.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &OwnerId {
        self.as_async().owner()
    }

    /// This handle acquiring as `owner` (see
    /// [`ReentrantMutex::with_owner`](crate::ReentrantMutex::with_owner)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use redis_locks::OwnerId;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let lock = client.reentrant_mutex("cache:rebuild")?.with_owner(OwnerId::new("worker-7")?);
    /// assert_eq!(lock.owner().as_str(), "worker-7");
    /// # Ok(()) }
    /// ```
    pub fn with_owner(self, owner: OwnerId) -> ReentrantMutex {
        self.map_lock(|lock| lock.with_owner(owner))
    }
}

impl FencedKey {
    /// The Redis key of the value.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.fenced_key("reports:latest")?.key(), "reports:latest");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        self.as_async().key()
    }

    /// Writes `value` if `token` is at least the highest token seen.
    ///
    /// # Errors
    /// [`Error::StaleToken`](crate::Error::StaleToken) for an older token (nothing written);
    /// as the async `set()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("reports")?;
    /// let report = client.fenced_key("reports:latest")?;
    /// let old = mutex.lock()?.fencing_token();
    /// let new = mutex.lock()?.fencing_token();
    /// report.set(new, "done")?;
    /// assert!(report.set(old, "stale").is_err());
    /// # Ok(()) }
    /// ```
    pub fn set(&self, token: FencingToken, value: &str) -> Result<()> {
        self.run("FencedKey::set", self.as_async().set(token, value))
    }

    /// The value, if one was written.
    ///
    /// # Errors
    /// As the async `get()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.fenced_key("reports:latest")?.get()?, None);
    /// # Ok(()) }
    /// ```
    pub fn get(&self) -> Result<Option<String>> {
        self.run("FencedKey::get", self.as_async().get())
    }

    /// The highest token a write carried, if any.
    ///
    /// # Errors
    /// As the async `highest_token()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let token = client.mutex("reports")?.lock()?.fencing_token();
    /// let report = client.fenced_key("reports:latest")?;
    /// report.set(token, "done")?;
    /// assert_eq!(report.highest_token()?, Some(token));
    /// # Ok(()) }
    /// ```
    pub fn highest_token(&self) -> Result<Option<FencingToken>> {
        self.run("FencedKey::highest_token", self.as_async().highest_token())
    }
}
