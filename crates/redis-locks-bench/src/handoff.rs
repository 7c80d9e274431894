//! `bench handoff`: W workers contend for ONE lock — acquire, hold H, release, think T — so a
//! waiting worker must take over. Measures how fast and how fairly the lock changes hands,
//! for `Mutex`, `FairMutex`, and the fixed-delay polling loop most peers use.

use std::collections::HashMap;
use std::time::Duration;

use redis_locks::history::{Interval, check};
use redis_locks::{Client, FairMutexOptions, MutexOptions, OwnerToken};
use serde::Serialize;
use tokio::time::Instant;

use super::baseline::BareLock;
use super::stats::{Latencies, Summary, Ticker, print_table, progress};
use cli_support::exit::CliError;
use cli_support::leftovers::delete_counters;

/// Options of `bench handoff`.
#[derive(Debug, Clone, clap::Args)]
pub struct HandoffArgs {
    /// Workers contending for the one lock.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=1024))]
    pub workers: u16,
    /// How long each holder holds the lock, e.g. 1ms.
    #[arg(long, default_value = "1ms", value_parser = super::parse_duration)]
    pub hold: Duration,
    /// How long a worker thinks after releasing before it asks again, e.g. 1ms.
    #[arg(long, default_value = "1ms", value_parser = super::parse_duration)]
    pub think: Duration,
    /// How long each variant runs, e.g. 5s.
    #[arg(long, default_value = "5s", value_parser = super::parse_run_length)]
    pub duration: Duration,
    /// The polling baseline's fixed retry delay (about the peers' defaults).
    #[arg(long, default_value = "50ms", value_parser = super::parse_duration)]
    pub poll: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Mutex,
    FairMutex,
    Polling,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "Mutex",
            Kind::FairMutex => "FairMutex",
            Kind::Polling => "polling",
        }
    }
}

/// One acquisition as its worker saw it (times since the start of the variant).
#[derive(Debug, Clone, Copy)]
struct Record {
    worker: usize,
    token: u64,
    asked: Duration,
    acquired: Duration,
    release_start: Duration,
    released: Duration,
}

/// One variant's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    bench: &'static str,
    variant: Kind,
    workers: u16,
    hold_ms: f64,
    think_ms: f64,
    seconds: f64,
    acquisitions: usize,
    per_second: f64,
    idle_gap: Summary,
    utilisation: f64,
    wait: Summary,
    real_hold_mean_ms: f64,
    per_worker_min: usize,
    per_worker_max: usize,
    retakes_share: f64,
    longest_waiter_share: f64,
    requests_per_acquisition: f64,
    overlaps: usize,
    token_regressions: usize,
}

/// Runs the three variants one after another and prints a table, or one JSON object per
/// variant with `json`.
pub async fn run(url: &str, args: &HandoffArgs, json: bool) -> Result<(), CliError> {
    let run_id = format!("{:08x}", rand::random::<u32>());
    let mut reports = Vec::new();
    for kind in [Kind::Mutex, Kind::FairMutex, Kind::Polling] {
        // A fresh client per variant: its own connections and request counter.
        let client = Client::connect(url).await?;
        let lock = format!("bench:handoff:{run_id}:{}", kind.label());
        let bar = progress(kind.label(), args.duration, json);
        let ticker = Ticker::start(bar);
        let measured = variant(&client, url, kind, &lock, args).await;
        drop(ticker);
        // The lock's fencing counter goes, whether or not the variant got through.
        let cleaned = delete_counters(url, &[&lock]).await;
        let (records, requests) = measured?;
        cleaned?;
        let report = analyse(kind, args, &records, requests);
        if json {
            println!("{}", serde_json::to_string(&report).expect("plain data"));
        }
        reports.push(report);
    }
    if !json {
        print_reports(args, &reports);
    }
    Ok(())
}

/// One variant's run; the polling baseline goes over a connection of its own to `url`.
async fn variant(
    client: &Client,
    url: &str,
    kind: Kind,
    lock: &str,
    args: &HandoffArgs,
) -> Result<(Vec<Record>, u64), CliError> {
    let lease = Duration::from_secs(10);
    let bare = BareLock::new(cli_support::connection(url).await?, lease);
    let mutex = client.mutex_with(lock, MutexOptions::default().lease(lease))?;
    let fair = client.fair_mutex_with(lock, FairMutexOptions::default().lease(lease))?;
    let start = Instant::now();
    let deadline = start + args.duration;
    let requests_before = super::requests(client);
    let mut tasks = Vec::new();
    for worker in 0..args.workers as usize {
        let (mutex, fair, bare, lock) =
            (mutex.clone(), fair.clone(), bare.clone(), lock.to_string());
        let (hold, think, poll) = (args.hold, args.think, args.poll);
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            let mut polled = 0u64;
            while Instant::now() < deadline {
                let asked = start.elapsed();
                let (token, acquired, release_start) = match kind {
                    Kind::Mutex | Kind::FairMutex => {
                        let guard = if kind == Kind::Mutex {
                            mutex.lock().await?
                        } else {
                            fair.lock().await?
                        };
                        let acquired = start.elapsed();
                        tokio::time::sleep(hold).await;
                        let release_start = start.elapsed();
                        let token = guard.fencing_token().get();
                        guard.release().await?;
                        (token, acquired, release_start)
                    }
                    Kind::Polling => {
                        let owner = OwnerToken::random();
                        bare.acquire_polling(&lock, owner.as_str(), poll)
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        let acquired = start.elapsed();
                        tokio::time::sleep(hold).await;
                        let release_start = start.elapsed();
                        bare.release(&lock, owner.as_str())
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        polled += 1;
                        (polled, acquired, release_start)
                    }
                };
                records.push(Record {
                    worker,
                    token,
                    asked,
                    acquired,
                    release_start,
                    released: start.elapsed(),
                });
                tokio::time::sleep(think).await;
            }
            Ok::<_, CliError>(records)
        }));
    }
    let mut records = Vec::new();
    for task in tasks {
        records.extend(task.await.expect("bench worker does not panic")?);
    }
    let requests = super::requests(client) - requests_before + bare.requests();
    Ok((records, requests))
}

fn analyse(kind: Kind, args: &HandoffArgs, records: &[Record], requests: u64) -> VariantReport {
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|r| r.acquired);
    let n = sorted.len();
    let (mut gaps, mut waits, mut hold_total) =
        (Latencies::default(), Latencies::default(), Duration::ZERO);
    let (mut retakes, mut handoffs_with_waiters, mut to_longest) = (0usize, 0usize, 0usize);
    let mut held = Duration::ZERO;
    for (i, record) in sorted.iter().enumerate() {
        waits.record(record.acquired - record.asked);
        hold_total += record.release_start - record.acquired;
        held += record.released.saturating_sub(record.acquired);
        let Some(previous) = i.checked_sub(1).map(|p| sorted[p]) else {
            continue;
        };
        gaps.record(record.acquired.saturating_sub(previous.released));
        // Who was waiting when the previous holder let go?
        let waiting: Vec<&Record> = sorted
            .iter()
            .filter(|r| r.asked < previous.released && r.acquired >= previous.released)
            .collect();
        if waiting.is_empty() {
            continue;
        }
        handoffs_with_waiters += 1;
        if record.worker == previous.worker {
            retakes += 1;
        }
        let longest = waiting.iter().min_by_key(|r| r.asked).expect("not empty");
        if longest.worker == record.worker && longest.acquired == record.acquired {
            to_longest += 1;
        }
    }
    let span = match (sorted.first(), sorted.last()) {
        (Some(first), Some(last)) => last.released.saturating_sub(first.acquired),
        _ => Duration::ZERO,
    };
    let mut per_worker: HashMap<usize, usize> = HashMap::new();
    for record in &sorted {
        *per_worker.entry(record.worker).or_default() += 1;
    }
    let intervals = sorted
        .iter()
        .map(|r| Interval {
            worker: r.worker.to_string(),
            token: r.token,
            start: r.acquired.as_nanos() as u64,
            end: r.release_start.as_nanos() as u64,
        })
        .collect();
    let history = check(intervals);
    let share = |part: usize, whole: usize| part as f64 / whole.max(1) as f64;
    VariantReport {
        bench: "handoff",
        variant: kind,
        workers: args.workers,
        hold_ms: args.hold.as_secs_f64() * 1000.0,
        think_ms: args.think.as_secs_f64() * 1000.0,
        seconds: args.duration.as_secs_f64(),
        acquisitions: n,
        per_second: n as f64 / args.duration.as_secs_f64(),
        idle_gap: gaps.summary(),
        utilisation: held.as_secs_f64() / span.as_secs_f64().max(f64::MIN_POSITIVE),
        wait: waits.summary(),
        real_hold_mean_ms: hold_total.as_secs_f64() * 1000.0 / n.max(1) as f64,
        per_worker_min: (0..args.workers as usize)
            .map(|w| per_worker.get(&w).copied().unwrap_or(0))
            .min()
            .unwrap_or(0),
        per_worker_max: per_worker.values().copied().max().unwrap_or(0),
        retakes_share: share(retakes, handoffs_with_waiters),
        longest_waiter_share: share(to_longest, handoffs_with_waiters),
        requests_per_acquisition: requests as f64 / n.max(1) as f64,
        overlaps: history.overlaps.len(),
        token_regressions: if kind == Kind::Polling {
            0
        } else {
            history.token_regressions.len()
        },
    }
}

fn print_reports(args: &HandoffArgs, reports: &[VariantReport]) {
    println!(
        "bench handoff: {} workers, one lock; each loop: acquire, hold {:?}, release, think {:?}; {:.1} s per variant; polling retries every {:?}\n",
        args.workers,
        args.hold,
        args.think,
        args.duration.as_secs_f64(),
        args.poll
    );
    let mut rows = vec![
        std::iter::once("".to_string())
            .chain(reports.iter().map(|r| r.variant_label().to_string()))
            .collect::<Vec<_>>(),
    ];
    let mut row = |name: &str, f: &dyn Fn(&VariantReport) -> String| {
        rows.push(
            std::iter::once(name.to_string())
                .chain(reports.iter().map(f))
                .collect(),
        );
    };
    row("acquisitions/s", &|r| format!("{:.0}", r.per_second));
    row("idle gap p50", &|r| format!("{:.3} ms", r.idle_gap.p50_ms));
    row("idle gap p99", &|r| format!("{:.3} ms", r.idle_gap.p99_ms));
    row("utilisation", &|r| format!("{:.2}", r.utilisation));
    row("wait p50", &|r| format!("{:.2} ms", r.wait.p50_ms));
    row("wait p99", &|r| format!("{:.2} ms", r.wait.p99_ms));
    row("wait max", &|r| format!("{:.2} ms", r.wait.max_ms));
    row("real hold (mean)", &|r| {
        format!("{:.3} ms", r.real_hold_mean_ms)
    });
    row("per worker min/max", &|r| {
        format!(
            "{}/{} ({:.2})",
            r.per_worker_min,
            r.per_worker_max,
            r.per_worker_max as f64 / r.per_worker_min.max(1) as f64
        )
    });
    row("releaser re-took", &|r| {
        format!("{:.1}%", r.retakes_share * 100.0)
    });
    row("to longest waiter", &|r| {
        format!("{:.1}%", r.longest_waiter_share * 100.0)
    });
    row("requests/acq", &|r| {
        format!("{:.3}", r.requests_per_acquisition)
    });
    row("overlaps", &|r| r.overlaps.to_string());
    print_table(&rows);
    println!(
        "\n  idle gap: from a release returning to the next acquisition returning; utilisation: share of the run the lock was held;\n  re-took / longest waiter: of the handoffs that had someone waiting;\n  requests/acq: every round trip of the run (the workers' arrival and the wake-up subscription too) per acquisition."
    );
}

impl VariantReport {
    fn variant_label(&self) -> &'static str {
        self.variant.label()
    }
}
