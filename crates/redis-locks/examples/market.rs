//! The purchase of "Redis in Action" 6.2 with a fine-grained lock per item.
//!
//! Run: `cargo run -p redis-locks --example market` (a private redis-server is started; set
//! REDIS_URL to use yours). `redis-locks bench market` measures this against WATCH and a
//! coarse lock.
//!
//! Lock only what is contended: the one item being bought. Under its lock, check the listing
//! and the buyer's funds, then move money and item in one MULTI/EXEC. No WATCH, no retries:
//! two buyers of the same item queue on its lock, and the second finds it sold.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use redis_locks::{Client, LockOptions};

/// Buys `itemid` (`<item>.<seller>`) for `buyer`; `Ok(false)` if it was sold meanwhile or the
/// buyer cannot pay.
async fn purchase(
    locks: &Client,
    con: &mut ConnectionManager,
    buyer: &str,
    itemid: &str,
) -> Result<bool, Box<dyn std::error::Error>> {
    let (item, seller) = itemid.rsplit_once('.').ok_or("itemid is <item>.<seller>")?;
    let lock = locks.mutex_with(
        &format!("lock:{itemid}"),
        LockOptions::default().lease(Duration::from_secs(10)),
    )?;
    let guard = lock.lock_timeout(Duration::from_secs(5)).await?;
    let (price, funds): (Option<f64>, Option<i64>) = redis::pipe()
        .zscore("market:", itemid)
        .hget(format!("users:{buyer}"), "funds")
        .query_async(con)
        .await?;
    let bought = match price.map(|p| p as i64) {
        Some(price) if funds.unwrap_or(0) >= price => {
            redis::pipe()
                .atomic()
                .hincr(format!("users:{seller}"), "funds", price)
                .hincr(format!("users:{buyer}"), "funds", -price)
                .sadd(format!("inventory:{buyer}"), item)
                .zrem("market:", itemid)
                .exec_async(con)
                .await?;
            true
        }
        _ => false,
    };
    // Err(NotHeld) here would mean the 10 s lease ran out mid-purchase: worth knowing.
    guard.release().await?;
    Ok(bought)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private_server) = test_support::url_or_private_server()?;
    run(&url).await
}

/// The example against the Redis at `url` (the tests call this with a server of their own).
pub async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let locks = Client::connect(url).await?;
    // The application's data goes over a connection of its own; the locks keep theirs.
    let mut con = redis::Client::open(url)?.get_connection_manager().await?;
    let _: () = con.hset("users:alice", "funds", 0).await?;
    let _: () = con.hset("users:bob", "funds", 100).await?;
    let _: () = con.hset("users:carol", "funds", 100).await?;
    let _: () = con.zadd("market:", "sword.alice", 60).await?;

    // Bob and Carol both try to buy the one sword at the same time.
    let (mut bob_con, mut carol_con) = (con.clone(), con.clone());
    let (bob, carol) = tokio::join!(
        purchase(&locks, &mut bob_con, "bob", "sword.alice"),
        purchase(&locks, &mut carol_con, "carol", "sword.alice"),
    );
    let (bob, carol) = (bob?, carol?);
    println!("bob bought it: {bob}; carol bought it: {carol}");
    assert!(bob ^ carol, "exactly one buyer gets the sword");
    let funds: Vec<i64> = redis::pipe()
        .hget("users:alice", "funds")
        .hget("users:bob", "funds")
        .hget("users:carol", "funds")
        .query_async(&mut con)
        .await?;
    println!(
        "funds: alice {}, bob {}, carol {}",
        funds[0], funds[1], funds[2]
    );
    assert_eq!(funds.iter().sum::<i64>(), 200, "money is conserved");
    Ok(())
}
