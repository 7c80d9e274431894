//! `bench multilock`: many tasks take MultiLocks over random overlapping subsets of a few
//! names, for a while: none may be stuck (every acquisition within its total deadline), no
//! name held by two at once; the wait is reported as percentiles.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;
use cli_support::leftovers::delete_counters;
use rand::Rng;
use rand::seq::IndexedRandom;
use redis_locks::{Error, LockOptions};
use serde::Serialize;
use test_support::history::{History, Interval, now_nanos};
use tokio::time::Instant;

use crate::stats::{Latencies, Summary, print_table};

/// `bench multilock`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct MultiLockArgs {
    /// Tasks taking MultiLocks at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(2..=4096))]
    pub tasks: u16,
    /// How many names the subsets are drawn from.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(2..=10_000))]
    pub names: u16,
    /// The fewest names one MultiLock takes.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub min_names: u16,
    /// The most names one MultiLock takes.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_names: u16,
    /// `Client`s the tasks share (task i uses client i mod this), as processes would.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub clients: u16,
    /// How long each holder holds its locks, e.g. 1ms.
    #[arg(long, default_value = "1ms", value_parser = cli_support::parse_duration)]
    pub hold: Duration,
    /// Each acquisition's total wait budget (one deadline for all its names); an
    /// acquisition that runs out of it counts as stuck.
    #[arg(long, default_value = "10s", value_parser = super::parse_run_length)]
    pub deadline: Duration,
    /// How long the benchmark runs, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = super::parse_run_length)]
    pub duration: Duration,
}

impl MultiLockArgs {
    /// Refuses a subset range that cannot be drawn.
    pub fn check(&self) -> Result<(), CliError> {
        if self.min_names > self.max_names || self.max_names > self.names {
            return Err(CliError::Usage(format!(
                "--min-names {} --max-names {} --names {}: need min-names <= max-names <= names",
                self.min_names, self.max_names, self.names
            )));
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Serialize)]
pub struct MultiLockReport {
    /// Tasks taking MultiLocks at once, as asked.
    pub tasks: u16,
    /// How many names the subsets were drawn from.
    pub names: u16,
    /// Acquisitions made.
    pub acquisitions: u64,
    /// Acquisitions per second.
    pub per_second: f64,
    /// Acquisitions that ran out of their total deadline: stuck (any other error ends the
    /// run).
    pub stuck: u64,
    /// Acquisitions that returned later than their deadline plus a 100 ms grace.
    pub past_deadline: u64,
    /// The wait of each acquisition (from the call to the guard).
    pub wait: Summary,
    /// Names held by two holders at once, or with a token that went back (must be 0).
    pub violations: usize,
    /// Cluster slots (script calls) per acquisition, on average.
    pub slots_per_acquisition: f64,
}

/// Runs `bench multilock` on `endpoint`.
pub async fn run(endpoint: &Endpoint, args: &MultiLockArgs, json: bool) -> Result<(), CliError> {
    args.check()?;
    let mut clients = Vec::with_capacity(usize::from(args.clients));
    for _ in 0..args.clients {
        clients.push(endpoint.connect().await?);
    }
    let names: Arc<Vec<String>> = Arc::new(
        (0..args.names)
            .map(|i| format!("bench:multi:{i}"))
            .collect(),
    );
    let histories: Arc<HashMap<String, History>> = Arc::new(
        names
            .iter()
            .map(|name| (name.clone(), History::default()))
            .collect(),
    );
    let stuck = Arc::new(AtomicU64::new(0));
    let past_deadline = Arc::new(AtomicU64::new(0));
    let slots = Arc::new(AtomicU64::new(0));
    let options = LockOptions::default().lease(Duration::from_secs(30));
    let started = Instant::now();
    let end = started + args.duration;
    let mut tasks = Vec::with_capacity(usize::from(args.tasks));
    for task in 0..args.tasks {
        let client = clients[usize::from(task) % clients.len()].clone();
        let (names, histories) = (names.clone(), histories.clone());
        let (stuck, past_deadline, slots) = (stuck.clone(), past_deadline.clone(), slots.clone());
        let (options, args) = (options.clone(), args.clone());
        tasks.push(tokio::spawn(async move {
            let mut waits = Latencies::default();
            while Instant::now() < end {
                // The thread's generator is not Send: drawn before any await.
                let subset: Vec<&String> = {
                    let mut rng = rand::rng();
                    let count = rng.random_range(args.min_names..=args.max_names);
                    names
                        .choose_multiple(&mut rng, usize::from(count))
                        .collect()
                };
                let lock = client.multi_lock_with(&subset, options.clone())?;
                let asked = Instant::now();
                match lock.lock_timeout(args.deadline).await {
                    Ok(guard) => {
                        let waited = asked.elapsed();
                        waits.record(waited);
                        if waited > args.deadline + Duration::from_millis(100) {
                            past_deadline.fetch_add(1, Ordering::Relaxed);
                        }
                        slots.fetch_add(lock.slots() as u64, Ordering::Relaxed);
                        let start = now_nanos();
                        tokio::time::sleep(args.hold).await;
                        let stop = now_nanos();
                        for (name, token) in guard.fencing_tokens() {
                            histories[name].record(Interval {
                                worker: format!("task-{task}"),
                                token: token.get(),
                                start,
                                end: stop,
                            });
                        }
                        guard.release().await?;
                    }
                    Err(Error::WaitTimeout { .. }) => {
                        stuck.fetch_add(1, Ordering::Relaxed);
                        if asked.elapsed() > args.deadline + Duration::from_millis(100) {
                            past_deadline.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(err) => return Err(err),
                }
            }
            Ok::<_, Error>(waits)
        }));
    }
    let mut waits = Latencies::default();
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok(task_waits)) => waits.add(&task_waits),
            Ok(Err(err)) => failed = Some(CliError::from(err)),
            Err(err) => failed = Some(CliError::CheckFailed(format!("a task panicked: {err}"))),
        }
    }
    let elapsed = started.elapsed();
    // The names' fencing counters go, whether or not the run got through.
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let cleaned = delete_counters(endpoint, &all).await;
    if let Some(err) = failed {
        return Err(err);
    }
    cleaned?;
    let violations: usize = histories
        .values()
        .map(|history| {
            let report = history.check();
            report.overlaps.len() + report.token_regressions.len()
        })
        .sum();
    let held = waits.count();
    let report = MultiLockReport {
        tasks: args.tasks,
        names: args.names,
        acquisitions: held,
        per_second: held as f64 / elapsed.as_secs_f64(),
        stuck: stuck.load(Ordering::Relaxed),
        past_deadline: past_deadline.load(Ordering::Relaxed),
        wait: waits.summary(),
        violations,
        slots_per_acquisition: slots.load(Ordering::Relaxed) as f64 / held.max(1) as f64,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
    } else {
        print_report(&report, args);
    }
    if report.violations > 0 || report.stuck > 0 || report.past_deadline > 0 {
        return Err(CliError::CheckFailed(format!(
            "{} violations, {} stuck, {} past their deadline",
            report.violations, report.stuck, report.past_deadline
        )));
    }
    Ok(())
}

fn print_report(report: &MultiLockReport, args: &MultiLockArgs) {
    println!(
        "MultiLock: {} tasks on random {}-{} name subsets of {} names, hold {:?}, deadline {:?}, {:?}\n",
        args.tasks,
        args.min_names,
        args.max_names,
        args.names,
        args.hold,
        args.deadline,
        args.duration
    );
    let ms = |v: f64| format!("{v:.2}");
    print_table(&[
        vec![
            "acquisitions".into(),
            "per s".into(),
            "stuck".into(),
            "past deadline".into(),
            "wait p50 ms".into(),
            "p99 ms".into(),
            "max ms".into(),
            "slots/acq".into(),
            "violations".into(),
        ],
        vec![
            report.acquisitions.to_string(),
            format!("{:.0}", report.per_second),
            report.stuck.to_string(),
            report.past_deadline.to_string(),
            ms(report.wait.p50_ms),
            ms(report.wait.p99_ms),
            ms(report.wait.max_ms),
            format!("{:.2}", report.slots_per_acquisition),
            report.violations.to_string(),
        ],
    ]);
}
