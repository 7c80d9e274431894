//! The market of "Redis in Action" 6.2 and its two operations, in each strategy.
//!
//! Keys (all under a per-run prefix): ZSET `market:` of `<item>.<seller>` scored by price,
//! HASH `users:<id>` with `funds`, SET `inventory:<id>`. Locks: `lock:market:` (coarse) and
//! `lock:<item>.<seller>` (fine-grained).

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redis_locks::{Client, LockOptions, MutexGuard};

use cli_support::exit::CliError;

/// What buyers start with: enough never to run out in any run.
pub const BUYER_FUNDS: i64 = 1_000_000_000_000;
/// How many of the cheapest listings a buyer chooses from (at random).
pub const CHOICES: isize = 20;
/// The lease of every market lock (no watchdog: an operation takes milliseconds).
const LOCK_LEASE: Duration = Duration::from_secs(10);

/// How purchases (and listings) are kept consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Optimistic WATCH/MULTI/EXEC, retried when the watched keys changed.
    Watch,
    /// One Mutex over the whole market.
    Coarse,
    /// One Mutex per item.
    Fine,
    /// One FairMutex per item.
    Fair,
}

impl Strategy {
    /// The column label.
    pub fn label(self) -> &'static str {
        match self {
            Strategy::Watch => "WATCH",
            Strategy::Coarse => "coarse lock",
            Strategy::Fine => "fine-grained",
            Strategy::Fair => "fine-grained fair",
        }
    }
}

/// The keys of one run.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: String) -> Keys {
        Keys { prefix }
    }

    /// The prefix every key of the run starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The market ZSET.
    pub fn market(&self) -> String {
        format!("{}market:", self.prefix)
    }

    /// A user's HASH.
    pub fn user(&self, id: &str) -> String {
        format!("{}users:{id}", self.prefix)
    }

    /// A user's inventory SET.
    pub fn inventory(&self, id: &str) -> String {
        format!("{}inventory:{id}", self.prefix)
    }

    /// The lock name guarding `itemid` in this strategy.
    fn lock(&self, strategy: Strategy, itemid: &str) -> String {
        match strategy {
            Strategy::Coarse => format!("{}lock:market:", self.prefix),
            _ => format!("{}lock:{itemid}", self.prefix),
        }
    }
}

/// The fixed price of a seller's n-th item: 10 to 99, spread evenly.
pub fn price_of(seller: usize, n: u64) -> i64 {
    10 + ((n * 37 + seller as u64 * 11) % 90) as i64
}

/// The seller of `<item>.<seller>`.
pub fn seller_of(itemid: &str) -> &str {
    itemid.rsplit_once('.').map_or("", |(_, seller)| seller)
}

/// A worker's connections: its own data connection, and its own lock client.
pub struct Worker {
    pub data: MultiplexedConnection,
    pub locks: Client,
    pub keys: Keys,
    pub strategy: Strategy,
}

/// A Redis failure of the market's own commands, as the CLI reports it.
pub(super) fn redis_failed(err: redis::RedisError) -> CliError {
    CliError::Unavailable(format!("market: {err}"))
}

impl Worker {
    async fn lock(&self, itemid: &str) -> Result<MutexGuard, CliError> {
        let name = self.keys.lock(self.strategy, itemid);
        let options = LockOptions::default().lease(LOCK_LEASE);
        Ok(match self.strategy {
            Strategy::Fair => {
                let options =
                    LockOptions::default().lease_options(options.get_lease_options().clone());
                self.locks.fair_mutex_with(&name, options)?.lock().await?
            }
            _ => self.locks.mutex_with(&name, options)?.lock().await?,
        })
    }

    /// Moves `item` from the seller's inventory to the market at `price`; the number of
    /// retries (WATCH only) is returned.
    pub async fn list(&mut self, seller: &str, item: &str, price: i64) -> Result<u64, CliError> {
        let (market, inventory) = (self.keys.market(), self.keys.inventory(seller));
        let itemid = format!("{item}.{seller}");
        if self.strategy == Strategy::Watch {
            let mut retries = 0;
            loop {
                redis::cmd("WATCH")
                    .arg(&inventory)
                    .exec_async(&mut self.data)
                    .await
                    .map_err(redis_failed)?;
                let present: bool = self
                    .data
                    .sismember(&inventory, item)
                    .await
                    .map_err(redis_failed)?;
                if !present {
                    redis::cmd("UNWATCH")
                        .exec_async(&mut self.data)
                        .await
                        .map_err(redis_failed)?;
                    return Err(CliError::CheckFailed(format!(
                        "{item} left {seller}'s inventory"
                    )));
                }
                let done: Option<()> = redis::pipe()
                    .atomic()
                    .zadd(&market, &itemid, price)
                    .ignore()
                    .srem(&inventory, item)
                    .ignore()
                    .query_async(&mut self.data)
                    .await
                    .map_err(redis_failed)?;
                if done.is_some() {
                    return Ok(retries);
                }
                retries += 1;
            }
        }
        // The coarse lock covers the whole market, listings included. With per-item locks a
        // listing needs none: the item is in nobody's hands but its seller's until it is
        // listed, and MULTI moves it atomically.
        let guard = match self.strategy {
            Strategy::Coarse => Some(self.lock(&itemid).await?),
            _ => None,
        };
        redis::pipe()
            .atomic()
            .zadd(&market, &itemid, price)
            .ignore()
            .srem(&inventory, item)
            .ignore()
            .exec_async(&mut self.data)
            .await
            .map_err(redis_failed)?;
        if let Some(guard) = guard {
            guard.release().await?;
        }
        Ok(0)
    }

    /// Buys `itemid` for `buyer` if it is still listed: `Some(price)` when bought, `None`
    /// when somebody else bought it first; plus the number of retries (WATCH only).
    pub async fn purchase(
        &mut self,
        buyer: &str,
        itemid: &str,
    ) -> Result<(Option<i64>, u64), CliError> {
        let (market, buyer_key) = (self.keys.market(), self.keys.user(buyer));
        let seller_key = self.keys.user(seller_of(itemid));
        let inventory = self.keys.inventory(buyer);
        let item = itemid.rsplit_once('.').map_or(itemid, |(item, _)| item);
        let buy = |price: i64| {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .hincr(&seller_key, "funds", price)
                .ignore()
                .hincr(&buyer_key, "funds", -price)
                .ignore()
                .sadd(&inventory, item)
                .ignore()
                .zrem(&market, itemid)
                .ignore();
            pipe
        };
        if self.strategy == Strategy::Watch {
            let mut retries = 0;
            loop {
                redis::cmd("WATCH")
                    .arg(&market)
                    .arg(&buyer_key)
                    .exec_async(&mut self.data)
                    .await
                    .map_err(redis_failed)?;
                let (price, funds) = self.price_and_funds(&market, itemid, &buyer_key).await?;
                let Some(price) = price.filter(|p| funds >= *p) else {
                    redis::cmd("UNWATCH")
                        .exec_async(&mut self.data)
                        .await
                        .map_err(redis_failed)?;
                    return Ok((None, retries));
                };
                let done: Option<()> = buy(price)
                    .query_async(&mut self.data)
                    .await
                    .map_err(redis_failed)?;
                if done.is_some() {
                    return Ok((Some(price), retries));
                }
                retries += 1;
            }
        }
        let guard = self.lock(itemid).await?;
        let (price, funds) = self.price_and_funds(&market, itemid, &buyer_key).await?;
        let bought = match price.filter(|p| funds >= *p) {
            Some(price) => {
                buy(price)
                    .exec_async(&mut self.data)
                    .await
                    .map_err(redis_failed)?;
                Some(price)
            }
            None => None,
        };
        guard.release().await?;
        Ok((bought, 0))
    }

    async fn price_and_funds(
        &mut self,
        market: &str,
        itemid: &str,
        buyer_key: &str,
    ) -> Result<(Option<i64>, i64), CliError> {
        let (price, funds): (Option<f64>, Option<i64>) = redis::pipe()
            .zscore(market, itemid)
            .hget(buyer_key, "funds")
            .query_async(&mut self.data)
            .await
            .map_err(redis_failed)?;
        Ok((price.map(|p| p as i64), funds.unwrap_or(0)))
    }

    /// Up to [`CHOICES`] of the cheapest listings.
    pub async fn cheapest(&mut self) -> Result<Vec<String>, CliError> {
        self.data
            .zrange(self.keys.market(), 0, CHOICES - 1)
            .await
            .map_err(redis_failed)
    }
}
