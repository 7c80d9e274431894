//! [`Handle`]: one blocking handle over every async lock handle.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::guard::{AsyncGuard, Guard, Sealed};
use super::runtime::Runtime;
use crate::error::Result;

/// An async lock handle of this crate that a blocking [`Handle`] wraps with `try_lock`,
/// `lock` and `lock_timeout`: [`Mutex`](crate::Mutex), [`FairMutex`](crate::FairMutex),
/// [`ReentrantMutex`](crate::ReentrantMutex), [`Redlock`](crate::Redlock) and
/// [`MultiLock`](crate::MultiLock). Sealed: implemented by those only.
pub trait AsyncLock: Sealed + Send + Sync + 'static {
    /// The guard an acquisition returns.
    type Guard: AsyncGuard;
    /// The async handle's `try_lock()`.
    fn try_lock(&self) -> impl Future<Output = Result<Self::Guard>>;
    /// The async handle's `lock()`.
    fn lock(&self) -> impl Future<Output = Result<Self::Guard>>;
    /// The async handle's `lock_timeout()`.
    fn lock_timeout(&self, wait: Duration) -> impl Future<Output = Result<Self::Guard>>;
}

/// An async handle of this crate with a name and a `state()` that a blocking [`Handle`]
/// wraps: every primitive but [`MultiLock`](crate::MultiLock). Sealed.
pub trait AsyncInspect: Sealed + Send + Sync + 'static {
    /// What `state()` answers.
    type State;
    /// The async handle's `name()`.
    fn name(&self) -> &str;
    /// The async handle's `state()`.
    fn state(&self) -> impl Future<Output = Result<Self::State>>;
}

/// A lock handle for code without an async runtime: the async handle `H`, whose every wait
/// runs to its end on the client's private runtime. Made by a [`Client`](super::Client);
/// cheap to clone. Its names per primitive are [`Mutex`](super::Mutex),
/// [`FairMutex`](super::FairMutex), [`ReentrantMutex`](super::ReentrantMutex),
/// [`RwLock`](super::RwLock), [`Redlock`](super::Redlock), [`Semaphore`](super::Semaphore),
/// [`MultiLock`](super::MultiLock) and [`FencedKey`](super::FencedKey); what each does, and
/// when not to use it, is written on the async type.
///
/// # Examples
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use std::time::Duration;
/// use redis_locks::blocking::Client;
///
/// let client = Client::connect(&server.url())?;
/// let mutex = client.mutex("jobs:nightly")?;
/// let guard = mutex.lock_timeout(Duration::from_secs(5))?;
/// assert!(mutex.try_lock().unwrap_err().is_held());
/// guard.release()?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// Every call made inside a tokio runtime is refused with
/// [`Error::InsideRuntime`](crate::Error::InsideRuntime), nothing sent; otherwise each call
/// fails as the async call of its name.
pub struct Handle<H> {
    lock: H,
    runtime: Arc<Runtime>,
}

impl<H: Clone> Clone for Handle<H> {
    fn clone(&self) -> Self {
        Handle {
            lock: self.lock.clone(),
            runtime: self.runtime.clone(),
        }
    }
}

impl<H: std::fmt::Debug> std::fmt::Debug for Handle<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Handle").field(&self.lock).finish()
    }
}

impl<H> Handle<H> {
    pub(super) fn wrap(lock: H, runtime: Arc<Runtime>) -> Handle<H> {
        Handle { lock, runtime }
    }

    /// The async handle inside, for what this type does not wrap (its keys, say).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// assert_eq!(mutex.as_async().keys().lock(), "jobs:nightly");
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &H {
        &self.lock
    }

    /// Runs `future` (the async call `call`) on the runtime, its guard made blocking.
    pub(super) fn guarded<G: AsyncGuard>(
        &self,
        call: &'static str,
        future: impl Future<Output = Result<G>>,
    ) -> Result<Guard<G>> {
        let guard = self.runtime.run(call, future)?;
        Ok(Guard::new(guard, self.runtime.clone()))
    }

    /// Runs `future` (the async call `call`) on the runtime.
    pub(super) fn run<T>(
        &self,
        call: &'static str,
        future: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.runtime.run(call, future)
    }

    pub(super) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    pub(super) fn as_async_mut(&mut self) -> &mut H {
        &mut self.lock
    }

    /// This handle with its async handle replaced by `f` of it.
    pub(super) fn map_lock(self, f: impl FnOnce(H) -> H) -> Handle<H> {
        Handle {
            lock: f(self.lock),
            runtime: self.runtime,
        }
    }
}

impl<H: AsyncLock> Handle<H> {
    /// Takes the lock if it is free now, without waiting.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when another owner holds it; as the async
    /// `try_lock()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let guard = mutex.try_lock()?;
    /// let busy = mutex.try_lock().unwrap_err();
    /// assert!(busy.is_held() && busy.retry_after().is_some());
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self) -> Result<Guard<H::Guard>> {
        self.guarded("try_lock", self.lock.try_lock())
    }

    /// Takes the lock, waiting as long as it takes (woken by the release, as the async
    /// `lock()`).
    ///
    /// # Errors
    /// As the async `lock()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let guard = mutex.lock()?;
    /// let waiter = {
    ///     let mutex = mutex.clone();
    ///     std::thread::spawn(move || mutex.lock().map(|guard| guard.fencing_token()))
    /// };
    /// let first = guard.fencing_token();
    /// guard.release()?;
    /// assert!(waiter.join().unwrap()? > first);
    /// # Ok(()) }
    /// ```
    pub fn lock(&self) -> Result<Guard<H::Guard>> {
        self.guarded("lock", self.lock.lock())
    }

    /// Takes the lock, waiting at most `wait`.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when still held after `wait`; as the
    /// async `lock_timeout()` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let _guard = mutex.lock()?;
    /// let late = mutex.lock_timeout(Duration::from_millis(50)).unwrap_err();
    /// assert!(late.is_held());
    /// # Ok(()) }
    /// ```
    pub fn lock_timeout(&self, wait: Duration) -> Result<Guard<H::Guard>> {
        self.guarded("lock_timeout", self.lock.lock_timeout(wait))
    }
}

impl<H: AsyncInspect> Handle<H> {
    /// The lock's name.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// assert_eq!(client.mutex("jobs:nightly")?.name(), "jobs:nightly");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// What Redis holds for the lock now: its holder(s), their leases, the fencing counter
    /// (as the async `state()`).
    ///
    /// # Errors
    /// As the async `state()`.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let guard = mutex.lock()?;
    /// assert!(mutex.state()?.holder.is_some());
    /// # Ok(()) }
    /// ```
    pub fn state(&self) -> Result<H::State> {
        self.run("state", self.lock.state())
    }
}
