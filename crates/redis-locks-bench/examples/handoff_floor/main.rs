//! The floor under issue 11's last target: how much of the hold-0 throughput a lock loses on
//! this machine when its contenders each have a connection of their own instead of sharing
//! one, with the least protocol that hands the lock from one contender to the next (so the
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
//! calls per acquisition and one message per acquisition handed over, as the library's
//! contended `Mutex` sends with a client each. The two layouts run the same protocol with the
//! same scripts and differ only in the connections:
//!
//! - *shared*: every worker's requests on one multiplexed connection, and one subscriber
//!   connection for all their channels, its messages passed to the worker they name. (The
//!   library does less for the waiters of one `Client`: they take turns in the process and
//!   keep one place in the queue on the server. This is the other layout's protocol over one
//!   pair of connections.)
//! - *a client each*: each worker a request connection and a subscriber connection of its
//!   own, as contenders in separate processes have (here in one process, the case most
//!   favourable to them: no process switches).
//!
//! The two run in 10 alternating slices each (which goes first alternates too), and the
//! report gives acquisitions per second, the share of them handed over by a release (the
//! rest found the lock free), and the ratio. Every key and channel carries a random run id;
//! the run's keys are deleted at the end, whether or not the run got through.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cli_support::connection;
use cli_support::redis_target::RedisTarget;
use futures_util::StreamExt;
use redis::Script;
use redis::aio::{ConnectionManager, PubSubSink, PubSubStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Options.
#[derive(Parser)]
pub struct Args {
    /// The Redis to use; without it a private redis-server is started.
    #[arg(long)]
    pub redis: Option<String>,
    /// Workers contending for the lock.
    #[arg(long, default_value_t = 8)]
    pub workers: u16,
    /// How long each layout runs in all, in 10 alternating slices.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
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

/// The keys and channels of one layout's lock.
struct Lock {
    key: String,
    queue: String,
    channels: String,
}

impl Lock {
    fn new(run: &str, layout: &str) -> Lock {
        Lock {
            key: format!("handoff-floor:{run}:{{{layout}}}"),
            queue: format!("handoff-floor:{run}:{{{layout}}}:queue"),
            channels: format!("handoff-floor:{run}:{layout}:wake:"),
        }
    }

    /// The channel on which the waiter `id` is handed the lock (as `release.lua` names it).
    fn channel(&self, id: &str) -> String {
        format!("{}{id}", self.channels)
    }
}

/// What the workers of one layout did.
#[derive(Default, Clone, Copy)]
pub struct Tally {
    /// Times a worker held the lock.
    pub held: u64,
    /// Of those, times a release had handed it over (the rest found it free).
    pub handed: u64,
    /// How long the layout's slices took, from their start until every worker was done.
    pub took: Duration,
}

/// The workers of the shared layout: one request connection, one subscriber connection.
async fn shared(
    url: &str,
    lock: &Lock,
    workers: u16,
) -> Result<Vec<Worker>, Box<dyn std::error::Error>> {
    let conn = connection(url).await.map_err(|err| err.to_string())?;
    let (mut sink, mut stream) = redis::Client::open(url)?.get_async_pubsub().await?.split();
    let mut routes = HashMap::new();
    let mut out = Vec::new();
    for worker in 0..workers {
        let id = format!("w{worker}");
        sink.subscribe(lock.channel(&id)).await?;
        let (send, receive) = mpsc::unbounded_channel();
        routes.insert(lock.channel(&id), send);
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
    url: &str,
    lock: &Lock,
    workers: u16,
) -> Result<Vec<Worker>, Box<dyn std::error::Error>> {
    let client = redis::Client::open(url)?;
    let mut out = Vec::new();
    for worker in 0..workers {
        let id = format!("w{worker}");
        let conn = connection(url).await.map_err(|err| err.to_string())?;
        let (mut sink, stream) = client.get_async_pubsub().await?.split();
        sink.subscribe(lock.channel(&id)).await?;
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

/// Takes and releases the lock until `deadline`; returns the worker, how many times it held
/// the lock and how many of those it was handed. A worker in line when the deadline passes
/// still gets the lock (every release hands it on) and releases it.
async fn contend(
    mut worker: Worker,
    lock: Arc<Lock>,
    scripts: Arc<Scripts>,
    deadline: Instant,
) -> Result<(Worker, u64, u64), String> {
    let (mut held, mut handed) = (0, 0);
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
                Ok(true) => handed += 1,
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
    Ok((worker, held, handed))
}

/// One slice of one layout: every worker contends until `length` has passed.
async fn slice(
    workers: Vec<Worker>,
    lock: &Arc<Lock>,
    scripts: &Arc<Scripts>,
    length: Duration,
) -> Result<(Vec<Worker>, Tally), String> {
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
    let (mut back, mut tally) = (Vec::new(), Tally::default());
    for task in tasks {
        let (worker, held, handed) = task.await.map_err(|err| err.to_string())??;
        back.push(worker);
        tally.held += held;
        tally.handed += handed;
    }
    tally.took = start.elapsed();
    Ok((back, tally))
}

/// Runs the two layouts in alternating slices (a short first round, not counted, warms up);
/// returns each one's tally.
async fn measure(
    layouts: &mut [Option<Vec<Worker>>; 2],
    locks: &[Arc<Lock>; 2],
    scripts: &Arc<Scripts>,
    duration: Duration,
) -> Result<[Tally; 2], String> {
    let mut totals = [Tally::default(); 2];
    for round in 0..11 {
        let length = if round == 0 {
            Duration::from_millis(200)
        } else {
            duration / 10
        };
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let workers = layouts[i].take().expect("the workers are back");
            let (back, tally) = slice(workers, &locks[i], scripts, length).await?;
            layouts[i] = Some(back);
            if round > 0 {
                totals[i].held += tally.held;
                totals[i].handed += tally.handed;
                totals[i].took += tally.took;
            }
        }
    }
    Ok(totals)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(&Args::parse()).await.map(|_| ())
}

/// Measures, prints the table, and returns the two layouts' tallies (shared first).
pub async fn run(args: &Args) -> Result<[Tally; 2], Box<dyn std::error::Error>> {
    let target = RedisTarget::resolve(args.redis.clone()).map_err(|err| err.to_string())?;
    let scripts = Arc::new(Scripts {
        acquire: Script::new(include_str!("acquire.lua")),
        release: Script::new(include_str!("release.lua")),
    });
    let run = format!("{:08x}", rand::random::<u32>());
    let locks = [
        Arc::new(Lock::new(&run, "shared")),
        Arc::new(Lock::new(&run, "each")),
    ];
    let mut layouts = [
        Some(shared(&target.url, &locks[0], args.workers).await?),
        Some(each(&target.url, &locks[1], args.workers).await?),
    ];
    println!(
        "handoff_floor: {} workers, hold 0, think 0, {:?} per layout in 10 alternating slices, on {}",
        args.workers,
        args.duration,
        target.describe()
    );
    let measured = measure(&mut layouts, &locks, &scripts, args.duration).await;
    // The run's keys go, whether or not it got through; the run's own error comes first.
    let mut conn = connection(&target.url)
        .await
        .map_err(|err| err.to_string())?;
    let mut cleaned = Ok(());
    for lock in &locks {
        let deleted: redis::RedisResult<i64> = redis::cmd("DEL")
            .arg(&lock.key)
            .arg(&lock.queue)
            .query_async(&mut conn)
            .await;
        cleaned = cleaned.and(deleted.map(drop));
    }
    let totals = measured?;
    cleaned?;
    let rate = |tally: &Tally| tally.held as f64 / tally.took.as_secs_f64();
    let names = [
        "shared: one connection + one subscriber".to_string(),
        format!("a client each: {0} + {0} connections", args.workers),
    ];
    println!(
        "  {:44} {:>14} {:>12}",
        "layout", "acquisitions/s", "handed over"
    );
    for (name, tally) in names.iter().zip(&totals) {
        println!(
            "  {name:44} {:>14.0} {:>11.1}%",
            rate(tally),
            100.0 * tally.handed as f64 / tally.held.max(1) as f64
        );
    }
    println!(
        "  a client each / shared: {:.2}",
        rate(&totals[1]) / rate(&totals[0])
    );
    Ok(totals)
}
