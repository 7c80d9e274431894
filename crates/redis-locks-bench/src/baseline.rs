//! What the benchmarks measure the library against: the bare minimum a lock needs
//! (`SET NX PX` + compare-and-delete), the same with a fencing counter (`SET NX PX`, `INCR`,
//! and reads of the counter's epoch and the connection's name: the library's own commands
//! sent bare), the least a leased, fenced permit of a semaphore counted by a script sends (one
//! script and a `ZREM`), and the polling loop most peers use to wait.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cli_support::endpoint::SideConnection;
use redis::Script;

/// The bare owner-checked release: delete the key if it still holds the caller's token.
static BARE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("bare_release.lua")));

/// The bare permit: reclaim expired holders by the server clock, count, add, fence.
static BARE_SEMAPHORE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("floors/semaphore_acquire.lua")));

/// The floor of the hash-based locks: a hold as a field of one hash (`floors/hold_*.lua`).
static HOLD_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("floors/hold_acquire.lua")));
static HOLD_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("floors/hold_release.lua")));

/// The floor of a `Mutex`'s release: the library's own release fast path with the keys and
/// arguments the library sends (`floors/mutex_release.lua`).
static MUTEX_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}\n{}\nreturn 0",
        include_str!("floors/mutex_release.lua"),
        include_str!("../../redis-locks/src/engine/string_lock/release_first.lua")
    ))
});

/// The floor of a first-come-first-served lock (`floors/fair_acquire.lua`).
static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("floors/fair_acquire.lua")));

/// A bare lock on one connection, counting the requests it sends.
#[derive(Clone)]
pub struct BareLock {
    connection: SideConnection,
    lease_ms: u64,
    requests: std::sync::Arc<AtomicU64>,
}

impl BareLock {
    /// A bare lock with the given lease, over `connection` (to a server, or a cluster
    /// connection that sends each key's commands to the master of its slot).
    pub fn new(connection: SideConnection, lease: Duration) -> BareLock {
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

    /// `SET NX PX` + `INCR` of a fencing counter + `ZSCORE` of the connection's name in its
    /// epochs + `CLIENT GETNAME`, in one round trip (what the library's fast attempt sends),
    /// without the library around it: true when taken.
    pub async fn try_acquire_fenced(
        &self,
        key: &str,
        fence: &str,
        epoch: &str,
        token: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        type Replies = (Option<String>, i64, Option<f64>, Option<String>);
        let (taken, _token, _epoch, _name): Replies = redis::pipe()
            .cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms)
            .cmd("INCR")
            .arg(fence)
            .cmd("ZSCORE")
            .arg(epoch)
            .arg("redis-locks:bench")
            .cmd("CLIENT")
            .arg("GETNAME")
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(taken.is_some())
    }

    /// One permit of `permits` in the sorted set `holders` for `owner`, leased by the server
    /// clock, with a token from `fence`: one script call (`floors/semaphore_acquire.lua`).
    /// The token when taken, `None` when `permits` unexpired holders are there already.
    pub async fn try_acquire_permit(
        &self,
        holders: &str,
        fence: &str,
        owner: &str,
        permits: u32,
    ) -> redis::RedisResult<Option<i64>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let token: i64 = BARE_SEMAPHORE_ACQUIRE
            .key(holders)
            .key(fence)
            .arg(owner)
            .arg(permits)
            .arg(self.lease_ms)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok((token > 0).then_some(token))
    }

    /// The bare permit's release: the plain `ZREM holders owner` (owner-checked by nature: it
    /// removes only that owner's entry), no script. True when the permit was `owner`'s.
    pub async fn release_permit(&self, holders: &str, owner: &str) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let removed: i64 = redis::cmd("ZREM")
            .arg(holders)
            .arg(owner)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(removed == 1)
    }

    /// A hold of `owner` as the field `field` of the hash `hash`, with a token from `fence`,
    /// unless `blocker` or `queue` exists: one script call (`floors/hold_acquire.lua`). True
    /// when taken.
    pub async fn try_acquire_hold(
        &self,
        [hash, fence, blocker, queue]: [&str; 4],
        field: &str,
        owner: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let token: i64 = HOLD_ACQUIRE
            .key(hash)
            .key(fence)
            .key(blocker)
            .key(queue)
            .arg(field)
            .arg(owner)
            .arg(self.lease_ms)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(token > 0)
    }

    /// The hold's release: `HDEL` of its field and a look at the queue, in one script call
    /// (`floors/hold_release.lua`). True when the field was there.
    pub async fn release_hold(
        &self,
        hash: &str,
        queue: &str,
        field: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let (deleted, _waiting): (i64, i64) = HOLD_RELEASE
            .key(hash)
            .key(queue)
            .arg(field)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(deleted == 1)
    }

    /// `key` for `token` with a token from `fence`, unless somebody waits in `queue` (or the
    /// key is held): one script call (`floors/fair_acquire.lua`). True when taken; its
    /// release is [`BareLock::release`].
    pub async fn try_acquire_fair(
        &self,
        [key, fence, queue]: [&str; 3],
        token: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let token: i64 = FAIR_ACQUIRE
            .key(key)
            .key(fence)
            .key(queue)
            .arg(token)
            .arg(self.lease_ms)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(token > 0)
    }

    /// The `Mutex`'s floor release: its own release fast path, sent bare with the keys and
    /// arguments the library's release sends (`keys`: the lock, the line, the places, the
    /// tickets, the handover hash, the fencing counter; `owner`, the wake-up `channel`). True
    /// when the key held exactly `owner` and is deleted.
    pub async fn release_as_mutex(
        &self,
        keys: [&str; 6],
        owner: &str,
        channel: &str,
    ) -> redis::RedisResult<bool> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut invocation = MUTEX_RELEASE.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        let released: i64 = invocation
            .arg(owner)
            .arg(channel)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(released == 1)
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

/// The bare minimum of a Redlock: a [`BareLock`] on each of N nodes, asked all at once, done
/// when a majority agreed; the rest of the requests are seen through in the background (as
/// the library does with a release), so no node keeps a key.
#[derive(Clone)]
pub struct BareQuorum {
    nodes: Vec<BareLock>,
}

/// One bare request to one node.
type BareRequest = futures_util::future::BoxFuture<'static, redis::RedisResult<bool>>;

impl BareQuorum {
    /// One bare lock per node.
    pub fn new(nodes: Vec<BareLock>) -> BareQuorum {
        BareQuorum { nodes }
    }

    /// `SET key token NX PX lease` on every node at once: true when a majority took it.
    pub async fn try_acquire(&self, key: &str, token: &str) -> redis::RedisResult<bool> {
        self.majority(key, token, |node, key, token| {
            Box::pin(async move { node.try_acquire(&key, &token).await })
        })
        .await
    }

    /// The fenced first attempt ([`BareLock::try_acquire_fenced`]: `SET NX PX` + `INCR` +
    /// the epoch checks in one pipeline) on every node at once: true when a majority took
    /// it. What the library's `Redlock` sends at the least, the floor it is measured against.
    pub async fn try_acquire_fenced(
        &self,
        [key, fence, epoch]: [&str; 3],
        token: &str,
    ) -> redis::RedisResult<bool> {
        let (fence, epoch) = (fence.to_string(), epoch.to_string());
        self.majority(key, token, move |node, key, token| {
            let (fence, epoch) = (fence.clone(), epoch.clone());
            Box::pin(async move { node.try_acquire_fenced(&key, &fence, &epoch, &token).await })
        })
        .await
    }

    /// The compare-and-delete on every node at once: true when a majority deleted it.
    pub async fn release(&self, key: &str, token: &str) -> redis::RedisResult<bool> {
        self.majority(key, token, |node, key, token| {
            Box::pin(async move { node.release(&key, &token).await })
        })
        .await
    }

    async fn majority(
        &self,
        key: &str,
        token: &str,
        request: impl Fn(BareLock, String, String) -> BareRequest,
    ) -> redis::RedisResult<bool> {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let needed = self.nodes.len() / 2 + 1;
        let mut pending: FuturesUnordered<BareRequest> = self
            .nodes
            .iter()
            .map(|node| request(node.clone(), key.to_string(), token.to_string()))
            .collect();
        let (mut yes, mut no) = (0, 0);
        while let Some(reply) = pending.next().await {
            if reply? {
                yes += 1;
            } else {
                no += 1;
            }
            if yes >= needed || no > self.nodes.len() - needed {
                break;
            }
        }
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
        Ok(yes >= needed)
    }

    /// Requests sent so far, over all nodes.
    pub fn requests(&self) -> u64 {
        self.nodes.iter().map(BareLock::requests).sum()
    }
}
