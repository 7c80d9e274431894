//! `bench handoff`: W workers contend for ONE lock — acquire, hold H, release, think T — so a
//! waiting worker must take over. Measures how fast and how fairly the lock changes hands,
//! for `Mutex`, `FairMutex`, and the fixed-delay polling loop most peers use.

use std::collections::HashMap;
use std::time::Duration;

use redis_locks::history::{Interval, check, now_nanos};
use redis_locks::{Client, FairMutexOptions, MutexOptions, OwnerToken};
use serde::Serialize;

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
    /// Give every worker a `Client` of its own (its own connections), as contenders in
    /// separate processes have; by default the workers of a process share one.
    #[arg(long)]
    pub client_per_worker: bool,
    /// Spread the workers over this many OS processes (this program started again for each
    /// share), each with its own clients; requests are counted over all of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub processes: u16,
}

/// One process's share of a `--processes` run (started by `handoff`; not for direct use).
#[derive(Debug, Clone, clap::Args)]
pub struct HandoffWorkerArgs {
    #[command(flatten)]
    handoff: HandoffArgs,
    /// The variant: mutex, fair-mutex or polling.
    #[arg(long)]
    kind: Kind,
    /// The lock all workers contend for.
    #[arg(long)]
    lock: String,
    /// The first worker number of this share.
    #[arg(long)]
    first: usize,
    /// How many workers this share runs.
    #[arg(long)]
    count: usize,
    /// When the variant starts, in nanoseconds of the wall clock (the same for every share).
    #[arg(long)]
    start_ns: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Mutex,
    FairMutex,
    Polling,
}

impl Kind {
    /// The name `--kind` takes.
    fn cli_name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::FairMutex => "fair-mutex",
            Kind::Polling => "polling",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "Mutex",
            Kind::FairMutex => "FairMutex",
            Kind::Polling => "polling",
        }
    }
}

/// One acquisition as its worker saw it (times since the start of the variant, on the wall
/// clock, so that the records of several processes on one machine compare).
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
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
    client_per_worker: bool,
    processes: u16,
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
        let lock = format!("bench:handoff:{run_id}:{}", kind.label());
        let bar = progress(kind.label(), args.duration, json);
        let ticker = Ticker::start(bar);
        let measured = if args.processes > 1 {
            processes(url, kind, &lock, args).await
        } else {
            let start_ns = now_nanos();
            workers(url, kind, &lock, 0..args.workers as usize, args, start_ns).await
        };
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

/// The workers `ids` of one variant, in this process, from `start_ns` (wall clock) for the
/// run's duration: fresh clients (one, or one per worker), so their requests are this run's;
/// the polling baseline goes over a connection of its own.
async fn workers(
    url: &str,
    kind: Kind,
    lock: &str,
    ids: std::ops::Range<usize>,
    args: &HandoffArgs,
    start_ns: u64,
) -> Result<(Vec<Record>, u64), CliError> {
    let lease = Duration::from_secs(10);
    let mut clients = vec![Client::connect(url).await?];
    if args.client_per_worker {
        for _ in 1..ids.len() {
            clients.push(Client::connect(url).await?);
        }
    }
    let bare = BareLock::new(cli_support::connection(url).await?, lease);
    let since_start = move || Duration::from_nanos(now_nanos().saturating_sub(start_ns));
    let deadline = args.duration;
    // Wait for the common start (other processes' shares start at the same moment).
    tokio::time::sleep(Duration::from_nanos(start_ns.saturating_sub(now_nanos()))).await;
    let requests_before: u64 = clients.iter().map(super::requests).sum();
    let mut tasks = Vec::new();
    for (n, worker) in ids.enumerate() {
        let client = &clients[n % clients.len()];
        let mutex = client.mutex_with(lock, MutexOptions::default().lease(lease))?;
        let fair = client.fair_mutex_with(lock, FairMutexOptions::default().lease(lease))?;
        let (bare, lock) = (bare.clone(), lock.to_string());
        let (hold, think, poll) = (args.hold, args.think, args.poll);
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            let mut polled = 0u64;
            while since_start() < deadline {
                let asked = since_start();
                let (token, acquired, release_start) = match kind {
                    Kind::Mutex | Kind::FairMutex => {
                        let guard = if kind == Kind::Mutex {
                            mutex.lock().await?
                        } else {
                            fair.lock().await?
                        };
                        let acquired = since_start();
                        tokio::time::sleep(hold).await;
                        let release_start = since_start();
                        let token = guard.fencing_token().get();
                        guard.release().await?;
                        (token, acquired, release_start)
                    }
                    Kind::Polling => {
                        let owner = OwnerToken::random();
                        bare.acquire_polling(&lock, owner.as_str(), poll)
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        let acquired = since_start();
                        tokio::time::sleep(hold).await;
                        let release_start = since_start();
                        bare.release(&lock, owner.as_str())
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        polled += 1;
                        // Polling has no fencing token: number this worker's holds instead
                        // (unique across workers, so the overlap check still works).
                        (((worker as u64) << 40) | polled, acquired, release_start)
                    }
                };
                records.push(Record {
                    worker,
                    token,
                    asked,
                    acquired,
                    release_start,
                    released: since_start(),
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
    let requests_after: u64 = clients.iter().map(super::requests).sum();
    Ok((records, requests_after - requests_before + bare.requests()))
}

/// What one process's share prints: its records, then its requests.
#[derive(Debug, Serialize, serde::Deserialize)]
enum ShareLine {
    Record(Record),
    Requests(u64),
}

/// Runs the workers of one variant spread over `args.processes` processes (this program,
/// started again with the hidden `handoff-worker`), and gathers their records and requests.
async fn processes(
    url: &str,
    kind: Kind,
    lock: &str,
    args: &HandoffArgs,
) -> Result<(Vec<Record>, u64), CliError> {
    let program = std::env::current_exe().map_err(|err| {
        CliError::CannotRun(format!("finding this program to start again: {err}"))
    })?;
    let shares = args.processes as usize;
    let total = args.workers as usize;
    // Time for every process to start and connect before the common start.
    let start_ns = now_nanos() + 1_500_000_000;
    let mut children = Vec::new();
    let mut first = 0;
    for share in 0..shares {
        let count = total / shares + usize::from(share < total % shares);
        let mut command = tokio::process::Command::new(&program);
        command
            .arg("--json")
            .arg("--redis")
            .arg(url)
            .arg("handoff-worker")
            .args(["--kind", kind.cli_name(), "--lock", lock])
            .args(["--first", &first.to_string(), "--count", &count.to_string()])
            .args(["--start-ns", &start_ns.to_string()])
            .args(["--workers", &args.workers.to_string()])
            .args(["--hold", &format!("{}ns", args.hold.as_nanos())])
            .args(["--think", &format!("{}ns", args.think.as_nanos())])
            .args(["--duration", &format!("{}ns", args.duration.as_nanos())])
            .args(["--poll", &format!("{}ns", args.poll.as_nanos())])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if args.client_per_worker {
            command.arg("--client-per-worker");
        }
        children.push(command.output());
        first += count;
    }
    let mut records = Vec::new();
    let mut requests = 0;
    for output in futures_util::future::join_all(children).await {
        let output = output
            .map_err(|err| CliError::CannotRun(format!("starting a worker process: {err}")))?;
        if !output.status.success() {
            return Err(CliError::Unavailable(format!(
                "a worker process failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            match serde_json::from_str(line) {
                Ok(ShareLine::Record(record)) => records.push(record),
                Ok(ShareLine::Requests(n)) => requests += n,
                Err(err) => {
                    return Err(CliError::Unavailable(format!(
                        "a worker process printed {line:?}: {err}"
                    )));
                }
            }
        }
    }
    Ok((records, requests))
}

/// One process's share of a `--processes` run: runs its workers and prints their records and
/// requests as JSON lines for the parent.
pub async fn worker_process(url: &str, args: &HandoffWorkerArgs) -> Result<(), CliError> {
    let ids = args.first..args.first + args.count;
    let (records, requests) = workers(
        url,
        args.kind,
        &args.lock,
        ids,
        &args.handoff,
        args.start_ns,
    )
    .await?;
    let mut out = String::new();
    for record in records {
        out.push_str(&serde_json::to_string(&ShareLine::Record(record)).expect("plain data"));
        out.push('\n');
    }
    out.push_str(&serde_json::to_string(&ShareLine::Requests(requests)).expect("plain data"));
    println!("{out}");
    Ok(())
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
        client_per_worker: args.client_per_worker,
        processes: args.processes,
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
    let clients = match (args.client_per_worker, args.processes) {
        (true, _) => "a client per worker".to_string(),
        (false, 1) => "one shared client".to_string(),
        (false, _) => "a client per process".to_string(),
    };
    let processes = match args.processes {
        1 => "one process".to_string(),
        n => format!("{n} processes"),
    };
    println!(
        "bench handoff: {} workers, one lock, {processes}, {clients}; each loop: acquire, hold {:?}, release, think {:?}; {:.1} s per variant; polling retries every {:?}\n",
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
