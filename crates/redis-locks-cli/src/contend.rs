//! The work of one demo worker, the same whether it runs as a task or as its own process.

use std::time::Duration;

use cli_support::settings::ClientSettings;
use rand::Rng;
use redis_locks::{Client, LeaseOptions, LockOptions};
use serde::{Deserialize, Serialize};
use test_support::history::{History, Interval, now_nanos};

/// The lease every demo lock asks for: long enough that nothing expires mid-demo.
const DEMO_LEASE: Duration = Duration::from_secs(10);
/// How long the lottery winner holds the lock while it draws.
const DRAW_TIME: Duration = Duration::from_millis(1500);

/// What one lottery instance saw.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LotteryOutcome {
    /// The instance's name.
    pub worker: String,
    /// The fencing token, when this instance won the lock.
    pub token: Option<u64>,
    /// The number it drew, when it won.
    pub number: Option<u32>,
    /// How long the winner's lease still ran, when this instance saw the lock held.
    pub retry_after_ms: Option<u64>,
}

/// Sleeps until the wall clock reads `start_at_ms` (Unix ms), so instances start together.
pub async fn wait_until(start_at_ms: u64) {
    let now_ms = now_nanos() / 1_000_000;
    if start_at_ms > now_ms {
        tokio::time::sleep(Duration::from_millis(start_at_ms - now_ms)).await;
    }
}

/// One lottery instance: one attempt at the draw lock; the winner draws and holds it a while.
pub async fn lottery(
    client: &Client,
    lock: &str,
    worker: String,
    settings: &ClientSettings,
) -> Result<LotteryOutcome, redis_locks::Error> {
    let mutex = client.mutex_with(lock, LockOptions::default().lease_options(lease(settings)))?;
    match mutex.try_lock().await {
        Ok(guard) => {
            let number = rand::rng().random_range(1..=49);
            tokio::time::sleep(DRAW_TIME).await;
            let token = guard.fencing_token().get();
            guard.release().await?;
            Ok(LotteryOutcome {
                worker,
                token: Some(token),
                number: Some(number),
                retry_after_ms: None,
            })
        }
        Err(err) if err.is_held() => Ok(LotteryOutcome {
            worker,
            token: None,
            number: None,
            retry_after_ms: err.retry_after().map(|d| d.as_millis() as u64),
        }),
        Err(err) => Err(err),
    }
}

/// One contender: `count` acquisitions of `lock`, each recorded in `history` as the interval
/// in which it acted as the holder.
pub async fn contend(
    client: &Client,
    lock: &str,
    worker: &str,
    count: usize,
    history: &History,
    settings: &ClientSettings,
) -> Result<(), redis_locks::Error> {
    // Waiters mark the lock, so the release wakes them; the short retry delay only matters
    // while the wake-up connection is down.
    let options = LockOptions::default()
        .lease_options(lease(settings))
        .retry_delay(Duration::from_millis(2));
    let mutex = client.mutex_with(lock, options)?;
    for _ in 0..count {
        let guard = mutex.lock().await?;
        let start = now_nanos();
        tokio::task::yield_now().await;
        let end = now_nanos();
        history.record(Interval {
            worker: worker.to_string(),
            token: guard.fencing_token().get(),
            start,
            end,
        });
        guard.release().await?;
    }
    Ok(())
}

/// The demo's lease, with the replicated acquisition of `--replicas` if given.
fn lease(settings: &ClientSettings) -> LeaseOptions {
    settings.lease_options(LeaseOptions::default().lease(DEMO_LEASE))
}
