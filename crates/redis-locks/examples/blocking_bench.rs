//! The blocking API against the async one, in the same run: uncontended `lock()` +
//! `release()` of one `Mutex`, one caller, on one Redis.
//!
//! Run: `cargo run --release -p redis-locks --example blocking_bench [ROUNDS] [PER_ROUND]`
//! (a private redis-server is started; set REDIS_URL to use yours). The async API runs on a
//! multi-thread runtime, once from `block_on` (as `#[tokio::main]` runs `main`) and once from a
//! spawned task. The three take turns, round after round, so that a change in the machine's
//! load weighs on all; the figure is each one's median round.

use std::time::{Duration, Instant};

use redis_locks::{Client, blocking};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _private_server) = test_support::url_or_private_server()?;
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(7);
    let per_round: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2_000);

    // The async API as an application runs it: a multi-thread runtime, the caller in
    // `block_on` (as `#[tokio::main]` does).
    let runtime = tokio::runtime::Runtime::new()?;
    let async_mutex = runtime.block_on(async {
        let client = Client::connect(&url).await?;
        client.mutex("bench:blocking:async")
    })?;
    let blocking_mutex = blocking::Client::connect(&url)?.mutex("bench:blocking:blocking")?;

    // Warm up both (connections, script loading).
    runtime.block_on(async {
        for _ in 0..200 {
            async_mutex.lock().await?.release().await?;
        }
        Ok::<_, redis_locks::Error>(())
    })?;
    for _ in 0..200 {
        blocking_mutex.lock()?.release()?;
    }

    let mut async_rounds = Vec::new();
    let mut task_rounds = Vec::new();
    let mut blocking_rounds = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        runtime.block_on(async {
            for _ in 0..per_round {
                async_mutex.lock().await?.release().await?;
            }
            Ok::<_, redis_locks::Error>(())
        })?;
        async_rounds.push(started.elapsed());
        // The same from a task on a worker thread, beside the connection's own task.
        let mutex = async_mutex.clone();
        let started = Instant::now();
        runtime.block_on(runtime.spawn(async move {
            for _ in 0..per_round {
                mutex.lock().await?.release().await?;
            }
            Ok::<_, redis_locks::Error>(())
        }))??;
        task_rounds.push(started.elapsed());
        let started = Instant::now();
        for _ in 0..per_round {
            blocking_mutex.lock()?.release()?;
        }
        blocking_rounds.push(started.elapsed());
    }
    let rate = |rounds: &mut Vec<Duration>| {
        rounds.sort();
        f64::from(per_round) / rounds[rounds.len() / 2].as_secs_f64()
    };
    let async_rate = rate(&mut async_rounds);
    let task_rate = rate(&mut task_rounds);
    let blocking_rate = rate(&mut blocking_rounds);
    println!("uncontended lock + release, {rounds} rounds of {per_round}, median round:");
    println!("  async, in block_on:     {async_rate:>8.0} /s");
    println!("  async, in a task:       {task_rate:>8.0} /s");
    println!("  blocking:               {blocking_rate:>8.0} /s");
    println!(
        "  blocking / async: {:.2}x (block_on), {:.2}x (task)",
        blocking_rate / async_rate,
        blocking_rate / task_rate
    );
    Ok(())
}
