//! What the benchmarks measure the library against: the bare minimum a lock needs
//! (`SET NX PX` + compare-and-delete), and the polling loop most peers use to wait.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionManager;

/// The library's own acquire script (`SET NX PX` + fencing counter), run bare: it separates
/// the cost of fencing from the cost of the library around it.
static FENCED_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(include_str!(
        "../../../redis-locks/src/scripts/mutex_acquire.lua"
    ))
});

/// The compare-and-delete release.
static BARE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("bare_release.lua")));

/// A bare lock on one connection, counting the requests it sends.
#[derive(Clone)]
pub struct BareLock {
    connection: ConnectionManager,
    lease_ms: u64,
    requests: std::sync::Arc<AtomicU64>,
}

impl BareLock {
    /// A bare lock with the given lease, over `connection`.
    pub fn new(connection: ConnectionManager, lease: Duration) -> BareLock {
        BareLock {
            connection,
            lease_ms: lease.as_millis() as u64,
            requests: Default::default(),
        }
    }

    /// One `SET key token NX PX lease`: true when taken.
    pub async fn try_acquire(&self, key: &str, token: &str) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let reply: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(reply.is_some())
    }

    /// The library's acquire script, called directly: true when taken.
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence: &str,
        token: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (granted, _token): (i64, i64) = FENCED_ACQUIRE
            .key(key)
            .key(fence)
            .arg(token)
            .arg(self.lease_ms)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(granted == 1)
    }

    /// Polls every `retry` (fixed, as the peers' defaults do) until the lock is taken.
    pub async fn acquire_polling(
        &self,
        key: &str,
        token: &str,
        retry: Duration,
    ) -> redis::RedisResult<()> {
        while !self.try_acquire(key, token).await? {
            tokio::time::sleep(retry).await;
        }
        Ok(())
    }

    /// The compare-and-delete release: true when the key was ours and is deleted.
    pub async fn release(&self, key: &str, token: &str) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let deleted: i64 = BARE_RELEASE
            .key(key)
            .arg(token)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(deleted == 1)
    }

    /// Requests sent so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}
