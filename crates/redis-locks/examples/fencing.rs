//! A holder paused past its lease cannot overwrite the next holder's write.
//!
//! Run: `cargo run -p redis-locks --example fencing` (a private redis-server is started;
//! set REDIS_URL to use yours).
//!
//! Holder A takes the lock with a short lease and "pauses" (a GC pause, a swapped-out page,
//! SIGSTOP) for longer than the lease. Holder B takes the expired lock and writes the report
//! with its fencing token. A wakes up: `lost()` has fired, and even if A ignores it and
//! writes anyway, the resource refuses A's stale token. The report keeps B's value.

use std::time::Duration;

use redis_locks::{Client, Error, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private_server) = test_support::url_or_private_server()?;
    run(&url).await
}

/// The example against the Redis at `url` (the tests call this with a server of their own).
pub async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::connect(url).await?;
    let short = LockOptions::default().lease(Duration::from_millis(200));
    let lock = client.mutex_with("example:report-lock", short)?;
    let report = client.fenced_key("example:report")?;

    let a = lock.lock().await?;
    println!("A holds the lock with fencing token {}", a.fencing_token());
    let a_lost = a.lost();

    println!("A pauses for 500 ms (longer than its 200 ms lease)...");
    tokio::time::sleep(Duration::from_millis(500)).await;

    let b = lock.lock().await?;
    println!("B holds the lock with fencing token {}", b.fencing_token());
    report.set(b.fencing_token(), "written by B").await?;
    println!("B wrote the report");

    println!("A wakes up; lost() says: {}", a_lost.await);
    match report.set(a.fencing_token(), "written by A").await {
        Err(Error::StaleToken { token, highest, .. }) => {
            println!("A's write was refused: token {token} is older than {highest}")
        }
        other => return Err(format!("A's stale write was not refused: {other:?}").into()),
    }
    let value = report.get().await?;
    println!("the report says: {value:?}");
    assert_eq!(value.as_deref(), Some("written by B"));
    b.release().await?;
    // A's lock is long gone: its release says so instead of pretending.
    println!(
        "A releases: {:?}",
        a.release().await.map_err(|e| e.to_string())
    );
    Ok(())
}
