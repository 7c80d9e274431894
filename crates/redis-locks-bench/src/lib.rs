//! The redis-locks benchmarks: `throughput` (what a lock costs against the bare minimum),
//! `handoff` (one contended lock changing hands) and `market` (the "Redis in Action" market
//! simulation), printed as tables (or JSON lines). The `redis-locks-bench` binary runs them,
//! and `redis-locks bench ...` runs that binary.
//!
//! A crate of its own, so that the `redis-locks` binary users install carries neither the
//! benchmarks nor what they pull in (hdrhistogram, indicatif, plotters).

mod baseline;
mod handoff;
mod market;
mod stats;
mod throughput;

use std::time::Duration;

use cli_support::exit::CliError;
use cli_support::parse_duration;
use cli_support::redis_target::RedisTarget;

pub use baseline::BareLock;
pub use handoff::{HandoffArgs, HandoffWorkerArgs};
pub use market::MarketArgs;
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
    /// One process's share of `handoff --processes N` (started by `handoff`).
    #[command(hide = true)]
    HandoffWorker(HandoffWorkerArgs),
}

impl Bench {
    /// Refuses options that do not go together (before any server is started for the run).
    pub fn check(&self) -> Result<(), CliError> {
        match self {
            Bench::Handoff(args) => args.check(),
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
        Bench::Throughput(args) => throughput::run(&target.urls(), args, json).await,
        Bench::Handoff(args) => handoff::run(&target.urls(), args, json).await,
        Bench::Market(args) => market::run(&target.url, args, json).await,
        Bench::HandoffWorker(args) => handoff::worker_process(&target.urls(), args).await,
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
