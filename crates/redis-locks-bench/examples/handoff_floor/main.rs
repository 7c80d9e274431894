//! The floor under issue 11's last target: how much of the hold-0 throughput a lock loses on
//! this machine when its contenders each have a connection of their own instead of sharing
//! one, with the least protocol that hands the lock from one process to the next (so the
//! loss belongs to the layout of connections, not to a lock's bookkeeping).
//!
//! ```sh
//! cargo run --release -p redis-locks-bench --example handoff_floor            # a private server
//! cargo run --release -p redis-locks-bench --example handoff_floor -- --redis redis://127.0.0.1:7000
//! ```
//!
//! W workers (8, as in `bench handoff`) contend for one lock with no hold and no think time:
//! take it or get in line (`acquire.lua`), and when it is theirs release it, which hands it to
//! the first in line and publishes on that waiter's own channel (`release.lua`): two script
//! calls and one message per acquisition, as the library's contended `Mutex` sends. The two
//! layouts send exactly the same commands and messages and differ only in the connections:
//!
//! - *shared*: every worker's requests on one multiplexed connection, and one subscriber
//!   connection for all their channels, its messages passed to the worker they name (what
//!   the library does for the waiters of one `Client`);
//! - *a client each*: each worker a request connection and a subscriber connection of its
//!   own, as contenders in separate processes have (here in one process, the case most
//!   favourable to them: no process switches).
//!
//! The two run in 10 alternating slices each, and the report gives acquisitions per second
//! and their ratio.

use std::collections::HashMap;
use std::time::Duration;

use clap::Parser;
use cli_support::redis_target::RedisTarget;
use futures_util::StreamExt;
use redis::Script;
use redis::aio::{ConnectionManager, PubSubSink, PubSubStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Options.
#[derive(Parser)]
struct Args {
    /// The Redis to use; without it a private redis-server is started.
    #[arg(long)]
    redis: Option<String>,
    /// Workers contending for the lock.
    #[arg(long, default_value_t = 8)]
    workers: u16,
    /// How long each layout runs in all, in 10 alternating slices.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
}

/// The lease of the lock and of its queue: far longer than a run, so that only releases end
/// a holding.
const LEASE_MS: u64 = 30_000;

/// How long a worker in line waits for its message before the run is called broken.
const WAKE_BOUND: Duration = Duration::from_secs(5);

/// How a worker hears that the lock was handed to it.
enum Wake {
    /// From the shared subscriber connection, through the task that reads it.
    Shared(mpsc::UnboundedReceiver<()>),
    /// From its own subscriber connection (the sink kept so that the connection stays).
    Own {
        stream: PubSubStream,
        _sink: PubSubSink,
    },
}

impl Wake {
    async fn next(&mut self) -> bool {
        match self {
            Wake::Shared(messages) => messages.recv().await.is_some(),
            Wake::Own { stream, .. } => stream.next().await.is_some(),
        }
    }
}

/// One contender.
struct Worker {
    id: String,
    conn: ConnectionManager,
    wake: Wake,
}

/// The keys of one layout's lock.
#[derive(Clone)]
struct Lock {
    key: String,
    queue: String,
    channels: String,
}

impl Lock {
    fn new(layout: &str) -> Lock {
        Lock {
            key: format!("handoff-floor:{{{layout}}}"),
            queue: format!("handoff-floor:{{{layout}}}:queue"),
            channels: format!("handoff-floor:{layout}:wake:"),
        }
    }
}

/// The workers of the shared layout: one request connection, one subscriber connection.
async fn shared(
    client: &redis::Client,
    lock: &Lock,
    workers: u16,
) -> redis::RedisResult<Vec<Worker>> {
    let conn = ConnectionManager::new(client.clone()).await?;
    let (mut sink, mut stream) = client.get_async_pubsub().await?.split();
    let mut routes = HashMap::new();
    let mut out = Vec::new();
    for worker in 0..workers {
        let id = format!("w{worker}");
        sink.subscribe(format!("{}{id}", lock.channels)).await?;
        let (send, receive) = mpsc::unbounded_channel();
        routes.insert(format!("{}{id}", lock.channels), send);
        out.push(Worker {
            id,
            conn: conn.clone(),
            wake: Wake::Shared(receive),
        });
    }
    tokio::spawn(async move {
        let _sink = sink;
        while let Some(message) = stream.next().await {
            if let Some(route) = routes.get(message.get_channel_name()) {
                let _ = route.send(());
            }
        }
    });
    Ok(out)
}

/// The workers of the layout with a client each.
async fn each(
    client: &redis::Client,
    lock: &Lock,
    workers: u16,
) -> redis::RedisResult<Vec<Worker>> {
    let mut out = Vec::new();
    for worker in 0..workers {
        let id = format!("w{worker}");
        let conn = ConnectionManager::new(client.clone()).await?;
        let (mut sink, stream) = client.get_async_pubsub().await?.split();
        sink.subscribe(format!("{}{id}", lock.channels)).await?;
        out.push(Worker {
            id,
            conn,
            wake: Wake::Own {
                stream,
                _sink: sink,
            },
        });
    }
    Ok(out)
}

/// The two scripts, loaded once.
struct Scripts {
    acquire: Script,
    release: Script,
}

/// Takes and releases the lock until `deadline`; returns the worker and how many times it
/// held the lock. A worker in line when the deadline passes still gets the lock (every
/// release hands it on) and releases it.
async fn contend(
    mut worker: Worker,
    lock: Lock,
    scripts: std::sync::Arc<Scripts>,
    deadline: Instant,
) -> Result<(Worker, u64), String> {
    let mut held = 0;
    while Instant::now() < deadline {
        let taken: i64 = scripts
            .acquire
            .key(&lock.key)
            .key(&lock.queue)
            .arg(&worker.id)
            .arg(LEASE_MS)
            .invoke_async(&mut worker.conn)
            .await
            .map_err(|err| err.to_string())?;
        if taken == 0 {
            match tokio::time::timeout(WAKE_BOUND, worker.wake.next()).await {
                Ok(true) => {}
                _ => return Err(format!("{} was never handed the lock", worker.id)),
            }
        }
        held += 1;
        let released: i64 = scripts
            .release
            .key(&lock.key)
            .key(&lock.queue)
            .arg(&worker.id)
            .arg(LEASE_MS)
            .arg(&lock.channels)
            .invoke_async(&mut worker.conn)
            .await
            .map_err(|err| err.to_string())?;
        if released == 0 {
            return Err(format!(
                "{} held the lock, but its release found it gone",
                worker.id
            ));
        }
    }
    Ok((worker, held))
}

/// One slice of one layout: every worker contends until `length` has passed.
async fn slice(
    workers: Vec<Worker>,
    lock: &Lock,
    scripts: &std::sync::Arc<Scripts>,
    length: Duration,
) -> Result<(Vec<Worker>, u64, Duration), String> {
    let start = Instant::now();
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|worker| {
            tokio::spawn(contend(
                worker,
                lock.clone(),
                scripts.clone(),
                start + length,
            ))
        })
        .collect();
    let (mut back, mut held) = (Vec::new(), 0);
    for task in tasks {
        let (worker, count) = task.await.map_err(|err| err.to_string())??;
        back.push(worker);
        held += count;
    }
    Ok((back, held, start.elapsed()))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let target = RedisTarget::resolve(args.redis.clone()).map_err(|err| err.to_string())?;
    let client = redis::Client::open(target.url.as_str())?;
    let scripts = std::sync::Arc::new(Scripts {
        acquire: Script::new(include_str!("acquire.lua")),
        release: Script::new(include_str!("release.lua")),
    });
    let locks = [Lock::new("shared"), Lock::new("each")];
    let mut layouts = [
        Some(shared(&client, &locks[0], args.workers).await?),
        Some(each(&client, &locks[1], args.workers).await?),
    ];
    println!(
        "handoff_floor: {} workers, hold 0, think 0, {:?} per layout in 10 alternating slices, on {}",
        args.workers,
        args.duration,
        target.describe()
    );
    let mut totals = [(0u64, Duration::ZERO); 2];
    // The first round warms up (scripts loaded, connections busy) and is not counted.
    for round in 0..11 {
        let length = if round == 0 {
            Duration::from_millis(200)
        } else {
            args.duration / 10
        };
        for (i, workers) in layouts.iter_mut().enumerate() {
            let (back, held, took) = slice(
                workers.take().expect("workers are back"),
                &locks[i],
                &scripts,
                length,
            )
            .await?;
            *workers = Some(back);
            if round > 0 {
                totals[i].0 += held;
                totals[i].1 += took;
            }
        }
    }
    let rate = |(held, took): (u64, Duration)| held as f64 / took.as_secs_f64();
    println!("  {:44} {:>14}", "layout", "acquisitions/s");
    println!(
        "  {:44} {:>14.0}",
        "shared: one connection + one subscriber",
        rate(totals[0])
    );
    println!(
        "  {:44} {:>14.0}",
        "a client each: 8 + 8 connections",
        rate(totals[1])
    );
    println!(
        "  a client each / shared: {:.2}",
        rate(totals[1]) / rate(totals[0])
    );
    Ok(())
}
