//! The blocking API against the async one, in the same run: uncontended `lock()` +
//! `release()` of one `Mutex`, one caller, on one Redis.
//!
//! Run: `cargo run --release -p redis-locks --example blocking_bench [ROUNDS] [PER_ROUND]`
//! (a private redis-server is started; set REDIS_URL to use yours). The async API runs on a
//! multi-thread runtime, once from `block_on` (as `#[tokio::main]` runs `main`) and once from a
//! spawned task. The three take turns, round after round, so that a change in the machine's
//! load weighs on all; the figure is each one's median round.
//!
//! Beside them, two floors of the same shape with no library code: the two round trips of an
//! uncontended lock and release (`SET key token NX PX 30000`, then `DEL key`) sent bare over a
//! multiplexed connection, once as the blocking design runs a call (from a plain thread,
//! `block_on` of a private one-worker runtime that drives the connection: two thread wake-ups
//! per round trip) and once from a task of the multi-thread runtime (none). Their ratio is what
//! that design costs any library that takes it.

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

    // The floors: one connection driven by a private one-worker runtime (as a blocking client's
    // are), another on the application's runtime.
    let private = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let open = |runtime: &tokio::runtime::Runtime| {
        runtime.block_on(async {
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await
        })
    };
    let (blocking_floor_con, task_floor_con) = (open(&private)?, open(&runtime)?);

    let mut async_rounds = Vec::new();
    let mut task_rounds = Vec::new();
    let mut blocking_rounds = Vec::new();
    let mut blocking_floor_rounds = Vec::new();
    let mut task_floor_rounds = Vec::new();
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
        let mut con = blocking_floor_con.clone();
        let started = Instant::now();
        for _ in 0..per_round {
            private.block_on(bare_lock_release(&mut con, "bench:blocking:floor"))?;
        }
        blocking_floor_rounds.push(started.elapsed());
        let mut con = task_floor_con.clone();
        let started = Instant::now();
        runtime.block_on(runtime.spawn(async move {
            for _ in 0..per_round {
                bare_lock_release(&mut con, "bench:blocking:floor-task").await?;
            }
            Ok::<_, redis::RedisError>(())
        }))??;
        task_floor_rounds.push(started.elapsed());
    }
    let rate = |rounds: &mut Vec<Duration>| {
        rounds.sort();
        f64::from(per_round) / rounds[rounds.len() / 2].as_secs_f64()
    };
    let async_rate = rate(&mut async_rounds);
    let task_rate = rate(&mut task_rounds);
    let blocking_rate = rate(&mut blocking_rounds);
    let blocking_floor = rate(&mut blocking_floor_rounds);
    let task_floor = rate(&mut task_floor_rounds);
    println!("uncontended lock + release, {rounds} rounds of {per_round}, median round:");
    println!("  async, in block_on:     {async_rate:>8.0} /s");
    println!("  async, in a task:       {task_rate:>8.0} /s");
    println!("  blocking:               {blocking_rate:>8.0} /s");
    println!(
        "  blocking / async: {:.2}x (block_on), {:.2}x (task)",
        blocking_rate / async_rate,
        blocking_rate / task_rate
    );
    println!("  floor, blocking design: {blocking_floor:>8.0} /s  (bare SET NX PX + DEL)");
    println!("  floor, in a task:       {task_floor:>8.0} /s");
    println!(
        "  floor blocking / task: {:.2}x; blocking / its floor: {:.2}x; async task / its floor: {:.2}x",
        blocking_floor / task_floor,
        blocking_rate / blocking_floor,
        task_rate / task_floor
    );
    Ok(())
}

/// The two round trips of an uncontended lock and release, sent bare.
async fn bare_lock_release(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> redis::RedisResult<()> {
    let _: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg("token")
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(con)
        .await?;
    let _: i64 = redis::cmd("DEL").arg(key).query_async(con).await?;
    Ok(())
}
