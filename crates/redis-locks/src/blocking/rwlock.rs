//! What a blocking [`RwLock`] adds to every handle: the read and the write side.

use std::time::Duration;

use super::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use crate::error::Result;
use crate::owner::OwnerId;

impl RwLock {
    /// The owner this handle acquires as (see [`RwLock::owner`](crate::RwLock::owner)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let rw = client.rwlock("reports:daily")?;
    /// println!("acquiring as {}", rw.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &OwnerId {
        self.as_async().owner()
    }

    /// This handle acquiring as `owner` (see
    /// [`RwLock::with_owner`](crate::RwLock::with_owner)).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use redis_locks::OwnerId;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let rw = client.rwlock("reports:daily")?.with_owner(OwnerId::new("worker-7")?);
    /// assert_eq!(rw.owner().as_str(), "worker-7");
    /// # Ok(()) }
    /// ```
    pub fn with_owner(self, owner: OwnerId) -> RwLock {
        self.map_lock(|lock| lock.with_owner(owner))
    }

    /// Takes a read hold if no writer holds or waits, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when a writer holds or waits; as the async
    /// `try_read()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let (a, b) = (client.rwlock("reports:daily")?, client.rwlock("reports:daily")?);
    /// let one = a.try_read()?;
    /// let two = b.try_read()?; // readers together
    /// let writer = client.rwlock("reports:daily")?;
    /// assert!(writer.try_write().unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn try_read(&self) -> Result<RwLockReadGuard> {
        self.guarded("RwLock::try_read", self.as_async().try_read())
    }

    /// Takes a read hold, waiting as long as it takes.
    ///
    /// # Errors
    /// As the async `read()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let read = client.rwlock("reports:daily")?.read()?;
    /// read.release()?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Result<RwLockReadGuard> {
        self.guarded("RwLock::read", self.as_async().read())
    }

    /// Takes a read hold, waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when a writer still holds or waits
    /// after `wait`; as the async `read_timeout()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let (a, b) = (client.rwlock("reports:daily")?, client.rwlock("reports:daily")?);
    /// let write = a.write()?;
    /// assert!(b.read_timeout(Duration::from_millis(50)).unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn read_timeout(&self, wait: Duration) -> Result<RwLockReadGuard> {
        self.guarded("RwLock::read_timeout", self.as_async().read_timeout(wait))
    }

    /// Takes the write hold if nobody else holds the lock, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when another owner holds it; as the async
    /// `try_write()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let write = client.rwlock("reports:daily")?.try_write()?;
    /// # Ok(()) }
    /// ```
    pub fn try_write(&self) -> Result<RwLockWriteGuard> {
        self.guarded("RwLock::try_write", self.as_async().try_write())
    }

    /// Takes the write hold, waiting as long as it takes (a waiting writer goes before
    /// later readers).
    ///
    /// # Errors
    /// As the async `write()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let write = client.rwlock("reports:daily")?.write()?;
    /// write.downgrade()?.release()?; // write, then read, then free
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> Result<RwLockWriteGuard> {
        self.guarded("RwLock::write", self.as_async().write())
    }

    /// Takes the write hold, waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when still held after `wait`; as
    /// the async `write_timeout()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let (a, b) = (client.rwlock("reports:daily")?, client.rwlock("reports:daily")?);
    /// let read = a.read()?;
    /// assert!(b.write_timeout(Duration::from_millis(50)).unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn write_timeout(&self, wait: Duration) -> Result<RwLockWriteGuard> {
        self.guarded("RwLock::write_timeout", self.as_async().write_timeout(wait))
    }
}

impl RwLockWriteGuard {
    /// Turns the write hold into a read hold, atomically: no other writer gets in between.
    ///
    /// # Errors
    /// As [`RwLockWriteGuard::downgrade`](crate::RwLockWriteGuard::downgrade);
    /// [`Error::InsideRuntime`](crate::Error::InsideRuntime) inside a tokio runtime (the
    /// guard is then dropped, which releases in the background).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let rw = client.rwlock("reports:daily")?;
    /// let read = rw.write()?.downgrade()?;
    /// assert!(read.release()?.is_freed());
    /// # Ok(()) }
    /// ```
    pub fn downgrade(self) -> Result<RwLockReadGuard> {
        self.map(
            "RwLockWriteGuard::downgrade",
            crate::RwLockWriteGuard::downgrade,
        )
    }
}
