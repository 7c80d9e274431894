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
//! - *a process each* (with `--processes N`, 8 by default; 0 leaves it out): the same, with
//!   the workers spread over N processes (this program started again for each slice, the
//!   processes starting the slice at one agreed moment), as `bench handoff --processes N`
//!   spreads the library's: every handover is then a switch to another process.
//!
//! The layouts run in 10 alternating slices each (which goes first turns round too), and the
//! report gives acquisitions per second, the share of them handed over by a release (the
//! rest found the lock free), and each layout's ratio to the shared one. Every key and
//! channel carries a random run id; the run's keys are deleted at the end, whether or not the
//! run got through.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// Also run the workers spread over this many processes (0: leave that layout out).
    #[arg(long, default_value_t = 8)]
    pub processes: u16,
    /// The program the processes run (this one by default; a test names the built example).
    #[arg(skip)]
    pub program: Option<PathBuf>,
    /// Run as one process of a slice (started by this program, not for direct use).
    #[command(flatten)]
    pub child: Child,
}

/// One process's share of a slice of the processes layout: its workers, the run, and the
/// slice's agreed start (ns since the Unix epoch) and length.
#[derive(clap::Args, Default, Clone)]
pub struct Child {
    /// The run id (its lock is the run's `procs` lock): given, this process is a share.
    #[arg(long, hide = true)]
    pub child_run: Option<String>,
    /// The first of this share's worker ids.
    #[arg(long, hide = true, default_value_t = 0)]
    pub child_first: u16,
    /// How many workers this share runs.
    #[arg(long, hide = true, default_value_t = 0)]
    pub child_count: u16,
    /// When the slice starts, in ns since the Unix epoch.
    #[arg(long, hide = true, default_value_t = 0)]
    pub child_start_ns: u128,
    /// How long the slice lasts, in ns.
    #[arg(long, hide = true, default_value_t = 0)]
    pub child_length_ns: u64,
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

/// The workers `ids` of the layout with a client each (of all of them, or of one process's
/// share of the processes layout).
async fn each(
    url: &str,
    lock: &Lock,
    ids: Range<u16>,
) -> Result<Vec<Worker>, Box<dyn std::error::Error>> {
    let client = redis::Client::open(url)?;
    let mut out = Vec::new();
    for worker in ids {
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

/// The two scripts, loaded once (per process).
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

/// A layout's workers: in this process (taken out for a slice and put back), or spread
/// over processes started for each slice.
enum Layout {
    Here(Option<Vec<Worker>>),
    Processes,
}

/// How long before a slice's agreed start its processes are started: time to start and
/// connect.
const START_LEAD: Duration = Duration::from_millis(500);

/// The layout name in the lock of the processes layout, which each process makes from the run
/// id it is given.
const PROCS: &str = "procs";

/// Nanoseconds since the Unix epoch: the clock the processes of a slice agree on.
fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// One slice of the processes layout: `args.workers` workers spread over `args.processes`
/// processes (this program again, or `args.program`), all starting at one agreed moment
/// and contending until `length` has passed.
async fn processes_slice(
    args: &Args,
    url: &str,
    run: &str,
    length: Duration,
) -> Result<Tally, String> {
    let program = match &args.program {
        Some(program) => program.clone(),
        None => std::env::current_exe().map_err(|err| err.to_string())?,
    };
    let start_ns = now_ns() + START_LEAD.as_nanos();
    let (shares, mut first) = (args.processes.min(args.workers), 0);
    let mut children = Vec::new();
    for share in 0..shares {
        let count = args.workers / shares + u16::from(share < args.workers % shares);
        let mut command = tokio::process::Command::new(&program);
        command
            .args(["--redis", url, "--child-run", run])
            .args(["--child-first", &first.to_string()])
            .args(["--child-count", &count.to_string()])
            .args(["--child-start-ns", &start_ns.to_string()])
            .args(["--child-length-ns", &length.as_nanos().to_string()])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        children.push(command.output());
        first += count;
    }
    let mut tally = Tally::default();
    for output in futures_util::future::join_all(children).await {
        let output = output.map_err(|err| format!("starting a process: {err}"))?;
        let printed = String::from_utf8_lossy(&output.stdout);
        let numbers: Vec<u64> = printed
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        let (true, &[held, handed, took_ns]) = (output.status.success(), &numbers[..]) else {
            return Err(format!(
                "a process failed ({}): {} {}",
                output.status,
                printed.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        };
        tally.held += held;
        tally.handed += handed;
        tally.took = tally.took.max(Duration::from_nanos(took_ns));
    }
    Ok(tally)
}

/// One process's share of a slice of the processes layout: connects its workers, waits for
/// the agreed start, contends, and prints `<held> <handed> <took ns>`.
async fn child(url: &str, run: &str, child: &Child) -> Result<(), Box<dyn std::error::Error>> {
    let lock = Arc::new(Lock::new(run, PROCS));
    let ids = child.child_first..child.child_first + child.child_count;
    let workers = each(url, &lock, ids).await?;
    let wait = child.child_start_ns.saturating_sub(now_ns());
    tokio::time::sleep(Duration::from_nanos(u64::try_from(wait)?)).await;
    let length = Duration::from_nanos(child.child_length_ns);
    let (_, tally) = slice(workers, &lock, &Arc::new(Scripts::new()), length).await?;
    println!("{} {} {}", tally.held, tally.handed, tally.took.as_nanos());
    Ok(())
}

/// Runs the layouts in alternating slices (a short first round, not counted, warms up; the
/// order turns round every round); returns each one's tally.
async fn measure(
    args: &Args,
    url: &str,
    run: &str,
    layouts: &mut [Layout],
    locks: &[Arc<Lock>],
    scripts: &Arc<Scripts>,
) -> Result<Vec<Tally>, String> {
    let mut totals = vec![Tally::default(); layouts.len()];
    for round in 0..11 {
        let length = if round == 0 {
            Duration::from_millis(200)
        } else {
            args.duration / 10
        };
        let mut order: Vec<usize> = (0..layouts.len()).collect();
        order.rotate_left(round % layouts.len());
        for i in order {
            let tally = match &mut layouts[i] {
                Layout::Here(workers) => {
                    let taken = workers.take().expect("the workers are back");
                    let (back, tally) = slice(taken, &locks[i], scripts, length).await?;
                    *workers = Some(back);
                    tally
                }
                Layout::Processes => processes_slice(args, url, run, length).await?,
            };
            if round > 0 {
                totals[i].held += tally.held;
                totals[i].handed += tally.handed;
                totals[i].took += tally.took;
            }
        }
    }
    Ok(totals)
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            acquire: Script::new(include_str!("acquire.lua")),
            release: Script::new(include_str!("release.lua")),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if let Some(run) = &args.child.child_run {
        let url = args.redis.as_deref().ok_or("a process is given --redis")?;
        return child(url, run, &args.child).await;
    }
    run(&args).await.map(|_| ())
}

/// Measures, prints the table, and returns the layouts' tallies: shared, a client each, and
/// (with `args.processes` > 0) a process each.
pub async fn run(args: &Args) -> Result<Vec<Tally>, Box<dyn std::error::Error>> {
    let target = RedisTarget::resolve(args.redis.clone()).map_err(|err| err.to_string())?;
    let scripts = Arc::new(Scripts::new());
    let run = format!("{:08x}", rand::random::<u32>());
    let mut locks = vec![
        Arc::new(Lock::new(&run, "shared")),
        Arc::new(Lock::new(&run, "each")),
    ];
    let mut layouts = vec![
        Layout::Here(Some(shared(target.url(), &locks[0], args.workers).await?)),
        Layout::Here(Some(each(target.url(), &locks[1], 0..args.workers).await?)),
    ];
    let mut names = vec![
        "shared: one connection + one subscriber".to_string(),
        format!("a client each: {0} + {0} connections", args.workers),
    ];
    if args.processes > 0 {
        // The processes name their lock after the run (see `child`).
        locks.push(Arc::new(Lock::new(&run, PROCS)));
        layouts.push(Layout::Processes);
        names.push(format!(
            "a client each in {} processes",
            args.processes.min(args.workers)
        ));
    }
    println!(
        "handoff_floor: {} workers, hold 0, think 0, {:?} per layout in 10 alternating slices, on {}",
        args.workers,
        args.duration,
        target.describe()
    );
    let measured = measure(args, target.url(), &run, &mut layouts, &locks, &scripts).await;
    // The run's keys go, whether or not it got through; the run's own error comes first.
    let mut conn = connection(target.url())
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
    println!(
        "  {:44} {:>14} {:>12} {:>10}",
        "layout", "acquisitions/s", "handed over", "/ shared"
    );
    for (name, tally) in names.iter().zip(&totals) {
        println!(
            "  {name:44} {:>14.0} {:>11.1}% {:>10.2}",
            rate(tally),
            100.0 * tally.handed as f64 / tally.held.max(1) as f64,
            rate(tally) / rate(&totals[0])
        );
    }
    Ok(totals)
}
