//! Every handle, guard and future of the public API is `Send` (and the handles and guards
//! `Sync + 'static`), async and blocking: a compile-time check, as tokio's `bounds()` test.
//! A type or future that loses a bound fails to compile here.
#![allow(dead_code)]
// The `impl Future + Send` return types are the point: an `async fn` would not state them.
#![allow(clippy::manual_async_fn)]

use std::future::Future;
use std::time::Duration;

use redis_locks::{LostReason, Result};

fn send_sync<T: Send + Sync + 'static>() {}

/// The acquire futures of each handle type with `lock`, `try_lock` and `lock_timeout`.
macro_rules! lock_futures_are_send {
    ($($name:ident: $lock:ty),* $(,)?) => {$(
        mod $name {
            use super::*;
            fn lock(lock: &$lock) -> impl Future<Output = impl Sized> + Send + '_ {
                lock.lock()
            }
            fn try_lock(lock: &$lock) -> impl Future<Output = impl Sized> + Send + '_ {
                lock.try_lock()
            }
            fn lock_timeout(lock: &$lock) -> impl Future<Output = impl Sized> + Send + '_ {
                lock.lock_timeout(Duration::ZERO)
            }
        }
    )*};
}

lock_futures_are_send!(
    mutex: redis_locks::Mutex,
    fair: redis_locks::FairMutex,
    reentrant: redis_locks::ReentrantMutex,
    redlock: redis_locks::Redlock,
    multilock: redis_locks::MultiLock,
);

/// The futures of each guard type: `release`, `extend`, and `lost` (which borrows nothing).
macro_rules! guard_futures_are_send {
    ($($name:ident: $guard:ty),* $(,)?) => {$(
        mod $name {
            use super::*;
            fn release(guard: $guard) -> impl Future<Output = impl Sized> + Send {
                guard.release()
            }
            fn extend(guard: &$guard) -> impl Future<Output = Result<()>> + Send + '_ {
                guard.extend(Duration::ZERO)
            }
            fn lost(guard: &$guard) -> impl Future<Output = LostReason> + Send + 'static {
                guard.lost()
            }
        }
    )*};
}

guard_futures_are_send!(
    mutex_guard: redis_locks::MutexGuard,
    reentrant_guard: redis_locks::ReentrantMutexGuard,
    read_guard: redis_locks::RwLockReadGuard,
    write_guard: redis_locks::RwLockWriteGuard,
    redlock_guard: redis_locks::RedlockGuard,
    semaphore_guard: redis_locks::SemaphoreGuard,
    multilock_guard: redis_locks::MultiLockGuard,
);

fn rwlock_read(lock: &redis_locks::RwLock) -> impl Future<Output = impl Sized> + Send + '_ {
    lock.read()
}
fn rwlock_write(lock: &redis_locks::RwLock) -> impl Future<Output = impl Sized> + Send + '_ {
    lock.write()
}
fn rwlock_try(lock: &redis_locks::RwLock) -> impl Future<Output = impl Sized> + Send + '_ {
    async move { (lock.try_read().await, lock.try_write().await) }
}
fn rwlock_timeouts(lock: &redis_locks::RwLock) -> impl Future<Output = impl Sized> + Send + '_ {
    async move {
        (
            lock.read_timeout(Duration::ZERO).await,
            lock.write_timeout(Duration::ZERO).await,
        )
    }
}
fn downgrade(guard: redis_locks::RwLockWriteGuard) -> impl Future<Output = impl Sized> + Send {
    guard.downgrade()
}
fn semaphore_acquire(
    semaphore: &redis_locks::Semaphore,
) -> impl Future<Output = impl Sized> + Send + '_ {
    async move {
        (
            semaphore.acquire().await,
            semaphore.try_acquire().await,
            semaphore.acquire_timeout(Duration::ZERO).await,
            semaphore.acquire_many(2).await,
            semaphore.try_acquire_many(2).await,
            semaphore.acquire_many_timeout(2, Duration::ZERO).await,
        )
    }
}
fn connect(url: &str) -> impl Future<Output = impl Sized> + Send + '_ {
    redis_locks::Client::connect(url)
}
fn connect_nodes(urls: &[String]) -> impl Future<Output = impl Sized> + Send + '_ {
    redis_locks::Redlock::connect_nodes(urls)
}
fn fenced_set(key: &redis_locks::FencedKey) -> impl Future<Output = impl Sized> + Send + '_ {
    async move { key.set(redis_locks::FencingToken::new(1), "v").await }
}

#[test]
fn async_handles_and_guards_are_send_sync_static() {
    send_sync::<redis_locks::Client>();
    send_sync::<redis_locks::Mutex>();
    send_sync::<redis_locks::FairMutex>();
    send_sync::<redis_locks::ReentrantMutex>();
    send_sync::<redis_locks::RwLock>();
    send_sync::<redis_locks::Redlock>();
    send_sync::<redis_locks::Semaphore>();
    send_sync::<redis_locks::MultiLock>();
    send_sync::<redis_locks::FencedKey>();
    send_sync::<redis_locks::MutexGuard>();
    send_sync::<redis_locks::ReentrantMutexGuard>();
    send_sync::<redis_locks::RwLockReadGuard>();
    send_sync::<redis_locks::RwLockWriteGuard>();
    send_sync::<redis_locks::RedlockGuard>();
    send_sync::<redis_locks::SemaphoreGuard>();
    send_sync::<redis_locks::MultiLockGuard>();
    send_sync::<redis_locks::Error>();
}

#[test]
fn blocking_handles_and_guards_are_send_sync_static() {
    use redis_locks::blocking;
    send_sync::<blocking::Client>();
    send_sync::<blocking::Mutex>();
    send_sync::<blocking::FairMutex>();
    send_sync::<blocking::ReentrantMutex>();
    send_sync::<blocking::RwLock>();
    send_sync::<blocking::Redlock>();
    send_sync::<blocking::Semaphore>();
    send_sync::<blocking::MultiLock>();
    send_sync::<blocking::FencedKey>();
    send_sync::<blocking::MutexGuard>();
    send_sync::<blocking::ReentrantMutexGuard>();
    send_sync::<blocking::RwLockReadGuard>();
    send_sync::<blocking::RwLockWriteGuard>();
    send_sync::<blocking::RedlockGuard>();
    send_sync::<blocking::SemaphoreGuard>();
    send_sync::<blocking::MultiLockGuard>();
    send_sync::<blocking::RedlockNodes>();
    // `lost()`'s channel may move to another thread (a receiver is never `Sync`).
    fn send<T: Send + 'static>() {}
    send::<std::sync::mpsc::Receiver<LostReason>>();
}
