//! The lottery of the source articles: many instances start at once, exactly one draws.
//!
//! Run: `cargo run -p redis-locks --example lottery` (a private redis-server is started; set
//! REDIS_URL to use yours). `redis-locks demo` shows the same with separate OS processes.

use std::time::Duration;

use redis_locks::{Client, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private_server) = test_support::url_or_private_server()?;
    run(&url).await
}

/// The example against the Redis at `url` (the tests call this with a server of their own).
pub async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let mut instances = Vec::new();
    for instance in 1..=8 {
        // Each instance has its own connection, as separate services would.
        let client = Client::connect(url).await?;
        instances.push(tokio::spawn(async move {
            let lock = client.mutex_with(
                "example:lottery:draw",
                LockOptions::default().lease(Duration::from_secs(10)),
            )?;
            match lock.try_lock().await {
                Ok(guard) => {
                    let number = rand::random::<u32>() % 49 + 1;
                    println!(
                        "instance {instance}: won the lock (token {}), drew {number}",
                        guard.fencing_token()
                    );
                    // The draw takes a while; everyone else tries meanwhile.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    guard.release().await?;
                    Ok::<bool, redis_locks::Error>(true)
                }
                Err(err) if err.is_held() => {
                    println!("instance {instance}: the draw is being done elsewhere ({err})");
                    Ok(false)
                }
                Err(err) => Err(err),
            }
        }));
    }
    let mut winners = 0;
    for instance in instances {
        if instance.await?? {
            winners += 1;
        }
    }
    println!("{winners} instance(s) performed the draw");
    assert_eq!(winners, 1);
    Ok(())
}
