//! What a blocking [`Semaphore`] adds to every handle: permits.

use std::time::Duration;

use super::{Semaphore, SemaphoreGuard};
use crate::error::Result;

impl Semaphore {
    /// How many holders the semaphore admits at once, as this handle knows it.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.semaphore("partner-api", 4)?.permits(), 4);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.as_async().permits()
    }

    /// Takes one permit, waiting as long as it takes (first come, first served).
    ///
    /// # Errors
    /// As the async `acquire()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let permit = client.semaphore("partner-api", 4)?.acquire()?;
    /// assert_eq!(permit.permits(), 1);
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Result<SemaphoreGuard> {
        self.guarded("Semaphore::acquire", self.as_async().acquire())
    }

    /// Takes one permit if one is free now and nobody waits, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when none is free; as the async `try_acquire()`
    /// otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let one = client.semaphore("partner-api", 1)?;
    /// let permit = one.try_acquire()?;
    /// assert!(one.try_acquire().unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self) -> Result<SemaphoreGuard> {
        self.guarded("Semaphore::try_acquire", self.as_async().try_acquire())
    }

    /// Takes one permit, waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when none was free within `wait`;
    /// as the async `acquire_timeout()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let permit = client.semaphore("partner-api", 4)?.acquire_timeout(Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_timeout(&self, wait: Duration) -> Result<SemaphoreGuard> {
        self.guarded(
            "Semaphore::acquire_timeout",
            self.as_async().acquire_timeout(wait),
        )
    }

    /// Takes `permits` permits together, waiting as long as it takes.
    ///
    /// # Errors
    /// As the async `acquire_many()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let three = client.semaphore("partner-api", 4)?.acquire_many(3)?;
    /// assert_eq!(three.permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn acquire_many(&self, permits: u32) -> Result<SemaphoreGuard> {
        self.guarded(
            "Semaphore::acquire_many",
            self.as_async().acquire_many(permits),
        )
    }

    /// Takes `permits` permits together if they are free now, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when too few are free; as the async
    /// `try_acquire_many()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let api = client.semaphore("partner-api", 4)?;
    /// let three = api.try_acquire_many(3)?;
    /// assert!(api.try_acquire_many(2).unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_many(&self, permits: u32) -> Result<SemaphoreGuard> {
        self.guarded(
            "Semaphore::try_acquire_many",
            self.as_async().try_acquire_many(permits),
        )
    }

    /// Takes `permits` permits together, waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when they were not free within
    /// `wait`; as the async `acquire_many_timeout()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let api = client.semaphore("partner-api", 4)?;
    /// let three = api.acquire_many(3)?;
    /// assert!(api.acquire_many_timeout(2, Duration::from_millis(50)).unwrap_err().is_held());
    /// # Ok(()) }
    /// ```
    pub fn acquire_many_timeout(&self, permits: u32, wait: Duration) -> Result<SemaphoreGuard> {
        self.guarded(
            "Semaphore::acquire_many_timeout",
            self.as_async().acquire_many_timeout(permits, wait),
        )
    }

    /// How many permits are free now.
    ///
    /// # Errors
    /// As the async `available()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let api = client.semaphore("partner-api", 4)?;
    /// let permit = api.acquire()?;
    /// assert_eq!(api.available()?, 3);
    /// # Ok(()) }
    /// ```
    pub fn available(&self) -> Result<u32> {
        self.run("Semaphore::available", self.as_async().available())
    }

    /// Changes how many holders the semaphore admits (see
    /// [`Semaphore::set_permits`](crate::Semaphore::set_permits)); the number before, if the
    /// semaphore had one.
    ///
    /// # Errors
    /// As the async `set_permits()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mut api = client.semaphore("partner-api", 4)?;
    /// let permit = api.acquire()?;
    /// assert_eq!(api.set_permits(2)?, Some(4));
    /// # Ok(()) }
    /// ```
    pub fn set_permits(&mut self, permits: u32) -> Result<Option<u32>> {
        let runtime = self.runtime().clone();
        runtime.run(
            "Semaphore::set_permits",
            self.as_async_mut().set_permits(permits),
        )
    }
}

impl SemaphoreGuard {
    /// How many permits this guard holds.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let two = client.semaphore("partner-api", 4)?.acquire_many(2)?;
    /// assert_eq!(two.permits(), 2);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.as_async().permits()
    }
}
