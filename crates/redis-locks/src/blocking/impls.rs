//! The async guards and handles that the blocking [`Guard`](super::Guard) and
//! [`Handle`](super::Handle) wrap: each forwards to its own inherent methods.

use std::future::Future;
use std::time::Duration;

use super::guard::{AsyncGuard, AsyncLeaseGuard, Sealed};
use super::handle::{AsyncInspect, AsyncLock};
use crate::error::{LostReason, Result};
use crate::token::{FencingToken, OwnerToken};

/// Implements [`AsyncGuard`] on `$guard`.
macro_rules! async_guard {
    ($($guard:ty),* $(,)?) => {$(
        impl Sealed for $guard {}

        impl AsyncGuard for $guard {
            fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
                <$guard>::lost(self)
            }
            fn lost_reason(&self) -> Option<LostReason> {
                <$guard>::lost_reason(self)
            }
            fn lease_deadline(&self) -> tokio::time::Instant {
                <$guard>::lease_deadline(self)
            }
            fn lease_remaining(&self) -> Duration {
                <$guard>::lease_remaining(self)
            }
            fn replicas(&self) -> Option<u32> {
                <$guard>::replicas(self)
            }
            fn is_renewed(&self) -> bool {
                <$guard>::is_renewed(self)
            }
            fn extend(&self, lease: Duration) -> impl Future<Output = Result<()>> {
                <$guard>::extend(self, lease)
            }
            fn release(self) -> impl Future<Output = Result<crate::Released>> {
                <$guard>::release(self)
            }
        }
    )*};
}

async_guard!(
    crate::MutexGuard,
    crate::ReentrantMutexGuard,
    crate::RwLockReadGuard,
    crate::RwLockWriteGuard,
    crate::RedlockGuard,
    crate::SemaphoreGuard,
    crate::MultiLockGuard,
);

/// Implements [`AsyncLeaseGuard`] on each guard of one lock.
macro_rules! async_lease_guard {
    ($($guard:ty),* $(,)?) => {$(
        impl AsyncLeaseGuard for $guard {
            fn name(&self) -> &str {
                <$guard>::name(self)
            }
            fn fencing_token(&self) -> FencingToken {
                <$guard>::fencing_token(self)
            }
            fn owner_token(&self) -> &OwnerToken {
                <$guard>::owner_token(self)
            }
        }
    )*};
}

async_lease_guard!(
    crate::MutexGuard,
    crate::ReentrantMutexGuard,
    crate::RwLockReadGuard,
    crate::RwLockWriteGuard,
    crate::RedlockGuard,
    crate::SemaphoreGuard,
);

/// Implements [`AsyncLock`] on each handle with `try_lock`, `lock` and `lock_timeout`.
macro_rules! async_lock {
    ($($lock:ty => $guard:ty),* $(,)?) => {$(
        impl Sealed for $lock {}

        impl AsyncLock for $lock {
            type Guard = $guard;
            fn try_lock(&self) -> impl Future<Output = Result<$guard>> {
                <$lock>::try_lock(self)
            }
            fn lock(&self) -> impl Future<Output = Result<$guard>> {
                <$lock>::lock(self)
            }
            fn lock_timeout(&self, wait: Duration) -> impl Future<Output = Result<$guard>> {
                <$lock>::lock_timeout(self, wait)
            }
        }
    )*};
}

async_lock!(
    crate::Mutex => crate::MutexGuard,
    crate::FairMutex => crate::MutexGuard,
    crate::ReentrantMutex => crate::ReentrantMutexGuard,
    crate::Redlock => crate::RedlockGuard,
    crate::MultiLock => crate::MultiLockGuard,
);

impl Sealed for crate::RwLock {}
impl Sealed for crate::Semaphore {}

/// Implements [`AsyncInspect`] on each named handle.
macro_rules! async_inspect {
    ($($lock:ty => $state:ty),* $(,)?) => {$(
        impl AsyncInspect for $lock {
            type State = $state;
            fn name(&self) -> &str {
                <$lock>::name(self)
            }
            fn state(&self) -> impl Future<Output = Result<$state>> {
                <$lock>::state(self)
            }
        }
    )*};
}

async_inspect!(
    crate::Mutex => crate::LockState,
    crate::FairMutex => crate::LockState,
    crate::ReentrantMutex => crate::HoldsState,
    crate::RwLock => crate::HoldsState,
    crate::Redlock => crate::RedlockState,
    crate::Semaphore => crate::SemaphoreState,
);
