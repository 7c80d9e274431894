//! Seed 000's lock algorithms, kept here only to be shown failing by `redis-locks check`:
//! the same workload and faults that ours passes catch each of them.
//!
//! - `setnx-expire`: `SETNX lock 1`, then `EXPIRE lock <lease>`; release `DEL lock`. A crash
//!   between the two requests leaves a lock that never expires.
//! - `setnx-getset`: `SETNX lock <expiry timestamp>`; a waiter that reads an expired timestamp
//!   takes over with `GETSET`; release `DEL` if the holder's own clock says its timestamp has
//!   not passed. The key has no TTL at all, and a holder paused past its timestamp deletes
//!   its successor's lock.
//! - `naive-del`: `SET lock 1 NX PX <lease>`, release `DEL lock` without checking the owner: a
//!   holder paused past its lease deletes its successor's lock.
//! - `counter-semaphore`: the semaphore of N permits most peers write (Redisson's
//!   `RSemaphore`): `INCR lock`, given back with `DECR` when over N; release `DECR lock`. Its
//!   permits have no lease, so a holder that crashed keeps its permit for ever (a leaked
//!   permit), and the counter has no TTL.
//!
//! None of them tells its holder that the lease ended, and none gives a fencing token.
//!
//! Beside the MultiLock, one more broken variant, made of this library's own `Mutex`es
//! (so it has leases, renewals and a token per name): `caller-order-multilock`
//! ([`caller_order_multilock`]), a MultiLock built by hand as Redisson's
//! `RedissonMultiLock` is, each name's lock taken in turn in the order the caller named
//! them, each waited for as long as it takes, with no deadline over them all. Two callers
//! that name `a b` and `b a` each take their first and wait for the other's: a deadlock,
//! with every lease renewed by its watchdog, until something gives up.

use std::time::Duration;

use redis::aio::ConnectionManager;
use test_support::history::now_nanos;

use super::clock;

use super::plan::{Algorithm, Release};

/// `caller-order-multilock`: the `Mutex` of each of `names`, taken one after another in the
/// order given (each waited for as long as it takes, its lease renewed by the watchdog),
/// held together. Dropping the future releases what it took so far, in the background.
pub async fn caller_order_multilock(
    client: &redis_locks::Client,
    names: &[String],
    options: redis_locks::LockOptions,
) -> redis_locks::Result<cli_support::primitive::Guard> {
    let mut guards = Vec::with_capacity(names.len());
    for name in names {
        // Waiting here while holding the ones before: the deadlock.
        guards.push(client.mutex_with(name, options.clone())?.lock().await?);
    }
    Ok(cli_support::primitive::Guard::Several(guards))
}

/// How long a legacy waiter sleeps between attempts (the seed's 10 ms).
const RETRY: Duration = Duration::from_millis(10);

/// One task's handle on a legacy lock.
pub struct LegacyLock {
    algorithm: Algorithm,
    con: ConnectionManager,
    key: String,
    lease: Duration,
    /// N, for `counter-semaphore`.
    permits: u32,
}

impl LegacyLock {
    /// The lock `key` taken with `algorithm` (not [`Algorithm::Ours`]).
    pub fn new(
        algorithm: Algorithm,
        con: ConnectionManager,
        key: &str,
        lease: Duration,
        permits: u32,
    ) -> Self {
        LegacyLock {
            algorithm,
            con,
            key: key.to_string(),
            lease,
            permits,
        }
    }

    /// Takes the lock, retrying every 10 ms; `between` runs between the steps of a lock
    /// taken in two requests (where a crash is injected). Returns when the lease ends as the
    /// algorithm set it, on `check`'s clock (the algorithms themselves use the wall clock, as
    /// seed 000 does).
    pub async fn acquire(&self, between: impl Fn()) -> redis::RedisResult<u64> {
        let mut con = self.con.clone();
        let lease_ms = self.lease.as_millis() as u64;
        loop {
            let sent = clock::now();
            let lease_end = sent + lease_ms * 1_000_000;
            let expiry_ms = now_nanos() / 1_000_000 + lease_ms + 1;
            match self.algorithm {
                Algorithm::SetnxExpire => {
                    let won: bool = redis::cmd("SETNX")
                        .arg(&self.key)
                        .arg(1)
                        .query_async(&mut con)
                        .await?;
                    if won {
                        between();
                        let seconds = lease_ms.div_ceil(1000);
                        let _: bool = redis::cmd("EXPIRE")
                            .arg(&self.key)
                            .arg(seconds)
                            .query_async(&mut con)
                            .await?;
                        return Ok(sent + seconds * 1_000_000_000);
                    }
                }
                Algorithm::SetnxGetset => {
                    let won: bool = redis::cmd("SETNX")
                        .arg(&self.key)
                        .arg(expiry_ms)
                        .query_async(&mut con)
                        .await?;
                    if won {
                        return Ok(lease_end);
                    }
                    let current: Option<u64> = redis::cmd("GET")
                        .arg(&self.key)
                        .query_async(&mut con)
                        .await?;
                    if now_nanos() / 1_000_000 > current.unwrap_or(0) {
                        let old: Option<u64> = redis::cmd("GETSET")
                            .arg(&self.key)
                            .arg(expiry_ms)
                            .query_async(&mut con)
                            .await?;
                        if now_nanos() / 1_000_000 > old.unwrap_or(0) {
                            return Ok(lease_end);
                        }
                    }
                }
                Algorithm::NaiveDel => {
                    let won: Option<String> = redis::cmd("SET")
                        .arg(&self.key)
                        .arg(1)
                        .arg("NX")
                        .arg("PX")
                        .arg(lease_ms)
                        .query_async(&mut con)
                        .await?;
                    if won.is_some() {
                        return Ok(lease_end);
                    }
                }
                Algorithm::CounterSemaphore => {
                    let taken: u64 = redis::cmd("INCR")
                        .arg(&self.key)
                        .query_async(&mut con)
                        .await?;
                    if taken <= u64::from(self.permits) {
                        between();
                        // No lease: the permit is held until it is given back, however
                        // long that is (an hour stands for "never" within a run).
                        return Ok(sent + 3_600_000_000_000);
                    }
                    let _: i64 = redis::cmd("DECR")
                        .arg(&self.key)
                        .query_async(&mut con)
                        .await?;
                }
                Algorithm::Ours | Algorithm::CallerOrderMultilock => {
                    unreachable!("not a raw-command algorithm")
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Releases as the algorithm does.
    pub async fn release(&self) -> redis::RedisResult<Release> {
        let mut con = self.con.clone();
        if self.algorithm == Algorithm::CounterSemaphore {
            let _: i64 = redis::cmd("DECR")
                .arg(&self.key)
                .query_async(&mut con)
                .await?;
            return Ok(Release::Unchecked);
        }
        if self.algorithm == Algorithm::SetnxGetset {
            let expiry: Option<u64> = redis::cmd("GET")
                .arg(&self.key)
                .query_async(&mut con)
                .await?;
            if expiry.is_none_or(|expiry| now_nanos() / 1_000_000 >= expiry) {
                return Ok(Release::NotHeld);
            }
        }
        let _: u64 = redis::cmd("DEL")
            .arg(&self.key)
            .query_async(&mut con)
            .await?;
        Ok(Release::Unchecked)
    }
}
