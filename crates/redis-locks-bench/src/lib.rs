//! The redis-locks benchmarks: `throughput` (what a lock costs against the bare minimum),
//! `handoff` (one contended lock changing hands), `hold-many` (what a held lock costs) and
//! `market` (the "Redis in Action" market simulation), printed as tables (or JSON lines). The `redis-locks-bench` binary runs them,
//! and `redis-locks bench ...` runs that binary.
//!
//! A crate of its own, so that the `redis-locks` binary users install carries neither the
//! benchmarks nor what they pull in (hdrhistogram, plotters).

mod baseline;
mod handoff;
mod hold_many;
mod market;
mod multilock;
mod stats;
mod throughput;
pub mod transports;

use std::time::Duration;

use cli_support::endpoint::Place;
use cli_support::exit::CliError;
use cli_support::parse_duration;
use cli_support::redis_target::RedisTarget;
use cli_support::topology::Wanted;

pub use baseline::BareLock;
pub use handoff::{HandoffArgs, HandoffWorkerArgs};
pub use hold_many::HoldManyArgs;
pub use market::MarketArgs;
pub use multilock::MultiLockArgs;
pub use throughput::ThroughputArgs;

/// Which benchmark to run.
#[derive(Debug, clap::Subcommand)]
pub enum Bench {
    /// C workers acquire+release their own locks (--kind: mutex, fair-mutex, reentrant, read,
    /// write): lock cost against bare SET NX PX + compare-and-delete, with and without a
    /// fencing counter.
    Throughput(ThroughputArgs),
    /// W workers contend for one lock: handoff speed, fairness, requests per acquisition,
    /// for Mutex, FairMutex and a 50 ms polling loop; or R readers and W writers on one
    /// RwLock (--kind rwlock).
    Handoff(HandoffArgs),
    /// The market of "Redis in Action" 6.2: WATCH vs a coarse lock vs fine-grained locks,
    /// scenarios 1/1, 5/1, 5/5; table, JSON, an SVG chart, invariants checked.
    Market(MarketArgs),
    /// T tasks take MultiLocks over random subsets of a few names for a while: none stuck
    /// (each within its total deadline), no name held twice at once; wait percentiles.
    Multilock(MultiLockArgs),
    /// One client holds N Mutexes with the watchdog for at least two leases: renewal round
    /// trips and script calls per second, Redis CPU and memory and client memory per held
    /// lock, none lost; --compare adds one request per renewal (the before).
    HoldMany(HoldManyArgs),
    /// What TLS and replicated acquisition (WAIT 1) cost an uncontended Mutex, each beside
    /// its plain form on private servers started for the run (a plaintext and a TLS server,
    /// a master with one replica).
    Transports(transports::TransportsArgs),
    /// One process's share of `handoff --processes N` (started by `handoff`).
    #[command(hide = true)]
    HandoffWorker(HandoffWorkerArgs),
}

impl Bench {
    /// Refuses options that do not go together, with what `wanted` names (before any server
    /// is started for the run).
    pub fn check(&self, wanted: &Wanted) -> Result<(), CliError> {
        let topology = match wanted {
            Wanted::Servers(_) => None,
            Wanted::Cluster(_) => Some("--cluster"),
            Wanted::Sentinel { .. } => Some("--sentinel"),
        };
        match (self, topology) {
            (Bench::Handoff(args), _) => args.check(topology),
            (Bench::Throughput(args), _) => args.check(topology),
            (Bench::Multilock(args), _) => args.check(),
            (Bench::HoldMany(args), _) => args.check(topology),
            (Bench::Market(_), Some("--cluster")) => Err(CliError::Usage(
                "market runs on one server (--redis) or a Sentinel master: its transactions \
                 (WATCH, MULTI) span keys of several hash slots"
                    .into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Runs one benchmark against `target`.
pub async fn run(target: &RedisTarget, bench: &Bench, json: bool) -> Result<(), CliError> {
    if !json && !matches!(bench, Bench::HandoffWorker(_)) {
        println!("Redis: {}\n", target.describe());
    }
    match bench {
        Bench::Throughput(args) => throughput::run(target, args, json).await,
        Bench::Handoff(args) => handoff::run(target.endpoint(), args, json).await,
        Bench::Market(args) => {
            let endpoint = target.endpoint();
            let url = match endpoint.place() {
                // The market's own connections go to the master the sentinels name now.
                Place::Sentinel { .. } => endpoint.master_url().await?,
                _ => endpoint.server_url().unwrap_or_default().to_string(),
            };
            market::run(&url, endpoint.settings(), args, json).await
        }
        Bench::Multilock(args) => multilock::run(target.endpoint(), args, json).await,
        Bench::HoldMany(args) => hold_many::run(target.endpoint(), args, json).await,
        Bench::HandoffWorker(args) => handoff::worker_process(target.endpoint(), args).await,
        Bench::Transports(args) => transports::run(args, json).await.map(drop),
    }
}

/// The longest a benchmark may run.
const MAX_RUN: Duration = Duration::from_secs(24 * 3600);

/// Parses how long a benchmark runs: more than zero (rates per second need some time) and
/// at most a day.
fn parse_run_length(text: &str) -> Result<Duration, String> {
    let length = parse_duration(text)?;
    if length.is_zero() || length > MAX_RUN {
        return Err(format!(
            "a benchmark runs for more than 0s and at most {}",
            humantime::format_duration(MAX_RUN)
        ));
    }
    Ok(length)
}

/// The requests (round trips) `client` has sent to Redis so far: the one place that reads the
/// library's counter.
fn requests(client: &redis_locks::Client) -> u64 {
    client.stats().requests
}
