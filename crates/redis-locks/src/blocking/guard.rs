//! [`Guard`]: one blocking guard over every async guard.

use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::runtime::{Runtime, inside_runtime};
use crate::error::{LostReason, Result};
use crate::token::{FencingToken, OwnerToken};

mod sealed {
    /// Only this crate's guards and handles may be wrapped.
    pub trait Sealed {}
}
pub(super) use sealed::Sealed;

/// An async guard of this crate that a blocking [`Guard`] wraps: [`MutexGuard`](crate::MutexGuard),
/// [`ReentrantMutexGuard`](crate::ReentrantMutexGuard), [`RwLockReadGuard`](crate::RwLockReadGuard),
/// [`RwLockWriteGuard`](crate::RwLockWriteGuard), [`RedlockGuard`](crate::RedlockGuard),
/// [`SemaphoreGuard`](crate::SemaphoreGuard) and [`MultiLockGuard`](crate::MultiLockGuard).
/// Sealed: implemented by those only. Its methods are the guards' own, which the blocking
/// [`Guard`] runs to their end.
pub trait AsyncGuard: Sealed + Send + Sized + 'static {
    /// The async guard's `lost()`.
    fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static;
    /// The async guard's `lost_reason()`.
    fn lost_reason(&self) -> Option<LostReason>;
    /// The async guard's `lease_deadline()`.
    fn lease_deadline(&self) -> tokio::time::Instant;
    /// The async guard's `lease_remaining()`.
    fn lease_remaining(&self) -> Duration;
    /// The async guard's `replicas()`.
    fn replicas(&self) -> Option<u32>;
    /// The async guard's `is_renewed()`.
    fn is_renewed(&self) -> bool;
    /// The async guard's `extend()`.
    fn extend(&self, lease: Duration) -> impl Future<Output = Result<()>>;
    /// The async guard's `release()`.
    fn release(self) -> impl Future<Output = Result<crate::Released>>;
}

/// An [`AsyncGuard`] of one lock (all but [`MultiLockGuard`](crate::MultiLockGuard)): one
/// name, one fencing token, one owner token.
pub trait AsyncLeaseGuard: AsyncGuard {
    /// The async guard's `name()`.
    fn name(&self) -> &str;
    /// The async guard's `fencing_token()`.
    fn fencing_token(&self) -> FencingToken;
    /// The async guard's `owner_token()`.
    fn owner_token(&self) -> &OwnerToken;
}

/// A held lock, from a blocking handle: the async guard `G`, with every wait run to its end
/// on the client's private runtime. The same guarantees as `G`: the watchdog renews the lease
/// in the background while the guard lives, [`lost`](Guard::lost) tells the moment the lock
/// is lost, and dropping the guard releases the lock.
///
/// Its names per primitive are [`MutexGuard`](super::MutexGuard),
/// [`ReentrantMutexGuard`](super::ReentrantMutexGuard), [`RwLockReadGuard`](super::RwLockReadGuard),
/// [`RwLockWriteGuard`](super::RwLockWriteGuard), [`RedlockGuard`](super::RedlockGuard),
/// [`SemaphoreGuard`](super::SemaphoreGuard) and [`MultiLockGuard`](super::MultiLockGuard).
///
/// # Examples
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use redis_locks::blocking::Client;
///
/// let client = Client::connect(&server.url())?;
/// let guard = client.mutex("jobs:nightly")?.lock()?;
/// println!("write with token {}", guard.fencing_token());
/// guard.release()?;
/// # Ok(()) }
/// ```
///
/// # Drop behaviour
/// Dropping the guard releases the lock before `drop` returns: it waits for the reply
/// (bounded by the response timeout; a [`Redlock`](super::Redlock)'s by its node timeout). A
/// failed release is logged (`tracing`, debug), not returned: call [`release`](Guard::release)
/// to see it. Dropped inside a tokio runtime, where it must not wait, it releases in the
/// background on the client's runtime, as the async guard does.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct Guard<G: AsyncGuard> {
    /// `Some` until released or dropped.
    guard: Option<G>,
    runtime: Arc<Runtime>,
}

impl<G: AsyncGuard + std::fmt::Debug> std::fmt::Debug for Guard<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Guard").field(self.as_async()).finish()
    }
}

impl<G: AsyncGuard> Guard<G> {
    pub(super) fn new(guard: G, runtime: Arc<Runtime>) -> Guard<G> {
        Guard {
            guard: Some(guard),
            runtime,
        }
    }

    /// The async guard inside, for what this type does not wrap (a
    /// [`MultiLockGuard`](crate::MultiLockGuard)'s names, say).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.multi_lock(["account:42", "account:7"])?.lock()?;
    /// let names: Vec<&str> = guard.as_async().names().collect();
    /// assert_eq!(names.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn as_async(&self) -> &G {
        self.guard
            .as_ref()
            .expect("a guard holds its async guard until released or dropped")
    }

    /// A channel that receives why the lock was lost, the moment it is known lost or can no
    /// longer be proven held (see the async guard's `lost()`); [`LostReason::Released`] once
    /// the guard is released or dropped. Wait on it with `recv_timeout` beside the work, or
    /// check it with `try_recv`. Each call makes a new channel.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// let lost = guard.lost();
    /// // Work in steps, stopping as soon as the lock is lost.
    /// for _step in 0..3 {
    ///     if lost.try_recv().is_ok() {
    ///         return Ok(()); // stop acting as the holder
    ///     }
    /// }
    /// assert!(lost.recv_timeout(Duration::from_millis(10)).is_err()); // still held
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> mpsc::Receiver<LostReason> {
        let (tell, told) = mpsc::sync_channel(1);
        let lost = self.as_async().lost();
        self.runtime.spawn(async move {
            // The receiver may be gone: nobody wants to know any more.
            tell.send(lost.await).ok();
        });
        told
    }

    /// Why the lock is not held any more, if that is known now (a passed lease deadline
    /// counts); `None` while it is held: the check, where [`lost`](Guard::lost) is the
    /// channel.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert_eq!(guard.lost_reason(), None);
    /// # Ok(()) }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.as_async().lost_reason()
    }

    /// The instant until which the lock is certainly held (see the async guard's
    /// `lease_deadline()`).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert!(guard.lease_deadline() > std::time::Instant::now());
    /// # Ok(()) }
    /// ```
    pub fn lease_deadline(&self) -> Instant {
        self.as_async().lease_deadline().into_std()
    }

    /// How much of the lease is certainly left; zero once it may have run out.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert!(guard.lease_remaining() > std::time::Duration::from_secs(20)); // of 30 s
    /// # Ok(()) }
    /// ```
    pub fn lease_remaining(&self) -> Duration {
        self.as_async().lease_remaining()
    }

    /// How many replicas acknowledged the last confirmed grant or renewal, when the options
    /// ask for replicated acquisition; `None` otherwise.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert_eq!(guard.replicas(), None);
    /// # Ok(()) }
    /// ```
    pub fn replicas(&self) -> Option<u32> {
        self.as_async().replicas()
    }

    /// Whether the watchdog renews this guard's lease.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert!(guard.is_renewed()); // the watchdog is on by default
    /// # Ok(()) }
    /// ```
    pub fn is_renewed(&self) -> bool {
        self.as_async().is_renewed()
    }

    /// Sets the lease to `lease` from now, if the lock is still this guard's.
    ///
    /// # Errors
    /// As the async guard's `extend()`; [`Error::InsideRuntime`](crate::Error::InsideRuntime)
    /// inside a tokio runtime (nothing sent).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use std::time::Duration;
    ///
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// guard.extend(Duration::from_secs(60))?;
    /// assert!(guard.lease_remaining() > Duration::from_secs(50));
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.runtime
            .run("Guard::extend", self.as_async().extend(lease))
    }

    /// Releases the lock and says whether it was still this guard's (as the async guard's
    /// `release()`).
    ///
    /// # Errors
    /// As the async guard's `release()`: [`Error::NotHeld`](crate::Error::NotHeld) when the
    /// lease had run out or another owner holds the lock; [`Error::Connection`](crate::Error::Connection)
    /// when the outcome is unknown. [`Error::InsideRuntime`](crate::Error::InsideRuntime)
    /// inside a tokio runtime: the guard is then dropped, which releases in the background.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// mutex.lock()?.release()?;
    /// assert!(!mutex.is_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn release(self) -> Result<crate::Released> {
        let (guard, runtime) = self.into_async("Guard::release")?;
        runtime.run("Guard::release", guard.release())
    }
}

impl<G: AsyncGuard> Guard<G> {
    /// Turns this guard into another by `f`, an async call (`call`) that takes the async
    /// guard (a downgrade, say). Inside a tokio runtime, refused: the guard drops, and
    /// releases in the background.
    pub(super) fn map<H, F>(self, call: &'static str, f: impl FnOnce(G) -> F) -> Result<Guard<H>>
    where
        H: AsyncGuard,
        F: Future<Output = Result<H>>,
    {
        let (guard, runtime) = self.into_async(call)?;
        let mapped = runtime.run(call, f(guard))?;
        Ok(Guard::new(mapped, runtime))
    }

    /// The async guard and the runtime, taken out for a blocking `call` that consumes the
    /// guard. Inside a tokio runtime, refused: the guard drops, releasing in the background.
    fn into_async(mut self, call: &'static str) -> Result<(G, Arc<Runtime>)> {
        if inside_runtime() {
            return Err(crate::Error::InsideRuntime { call });
        }
        let guard = self
            .guard
            .take()
            .expect("a guard holds its async guard until released or dropped");
        Ok((guard, self.runtime.clone()))
    }
}

impl<G: AsyncLeaseGuard> Guard<G> {
    /// The lock's name.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let guard = client.mutex("jobs:nightly")?.lock()?;
    /// assert_eq!(guard.name(), "jobs:nightly");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.as_async().name()
    }

    /// This acquisition's fencing token: greater than that of every earlier holder of the
    /// lock of another owner. Send it with every write the lock protects.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let first = mutex.lock()?.fencing_token();
    /// let second = mutex.lock()?.fencing_token();
    /// assert!(second > first);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> FencingToken {
        self.as_async().fencing_token()
    }

    /// The random token of this acquisition: only a request that carries it may release or
    /// extend this hold.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// let client = redis_locks::blocking::Client::connect(&server.url())?;
    /// let mutex = client.mutex("jobs:nightly")?;
    /// let first = mutex.lock()?.owner_token().clone();
    /// assert_ne!(&first, mutex.lock()?.owner_token());
    /// # Ok(()) }
    /// ```
    pub fn owner_token(&self) -> &OwnerToken {
        self.as_async().owner_token()
    }
}

impl<G: AsyncGuard> Drop for Guard<G> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        if inside_runtime() {
            // The async guard's drop releases in the background on the current runtime.
            let _entered = self.runtime.enter();
            drop(guard);
            return;
        }
        let released = self.runtime.run("Guard::drop", guard.release());
        if let Err(err) = released {
            tracing::debug!(%err, "release of a dropped blocking guard");
        }
    }
}
