//! `redis-locks demo`: the lottery of the source articles (many instances, exactly one draws),
//! then a contention round checked for overlaps and fencing-token order.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::Client;
use test_support::ChildProcess;
use test_support::history::{History, Interval, now_nanos};

use crate::contend::{LotteryOutcome, contend, lottery, wait_until};
use crate::worker::Role;
use cli_support::exit::CliError;
use cli_support::leftovers::delete_counters;
use cli_support::redis_target::RedisTarget;

/// How the demo is sized.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Worker processes in each round (separate OS processes of this binary).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub processes: u16,
    /// Tasks inside this process that contend in the second round.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub tasks: u16,
    /// Acquisitions per worker in the second round.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub per_worker: u32,
}

/// Lottery instances that run as tasks inside the demo process (beside the worker processes).
const LOTTERY_TASKS: usize = 3;
/// Time for worker processes to start and connect before the common start instant.
const START_DELAY_MS: u64 = 800;
/// How long worker processes may take before the demo gives up on them.
const WORKER_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs both rounds and prints the report; fails when a check fails.
pub async fn run(target: &RedisTarget, args: &DemoArgs) -> Result<(), CliError> {
    println!("redis-locks demo: distributed locks on Redis\n");
    println!("Redis: {}\n", target.describe());
    let client = target.connect().await?;
    let run_id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
    let lottery_lock = format!("redis-locks-demo:{run_id}:lottery");
    let contended_lock = format!("redis-locks-demo:{run_id}:counter");

    let rounds = async {
        let lottery_ok = lottery_round(&client, target, &lottery_lock, args).await?;
        let contention_ok = contention_round(&client, target, &contended_lock, args).await?;
        Ok::<_, CliError>((lottery_ok, contention_ok))
    }
    .await;
    // The demo's fencing counters go, whether or not the rounds got through.
    let cleaned = delete_counters(target.endpoint(), &[&lottery_lock, &contended_lock]).await;
    let (lottery_ok, contention_ok) = rounds?;
    cleaned?;

    if lottery_ok && contention_ok {
        println!("All checks passed.");
        Ok(())
    } else {
        Err(CliError::CheckFailed(
            "a check failed: see the report above".into(),
        ))
    }
}

async fn lottery_round(
    client: &Client,
    target: &RedisTarget,
    lock: &str,
    args: &DemoArgs,
) -> Result<bool, CliError> {
    let instances = args.processes as usize + LOTTERY_TASKS;
    println!(
        "1. The lottery: {instances} instances ({} processes, {LOTTERY_TASKS} tasks) try to run the daily draw at the same instant.",
        args.processes
    );
    println!(
        "   Each makes one attempt (try_lock); the winner draws, holding the lock for 1.5 s.\n"
    );
    let start_at = now_ms() + START_DELAY_MS;
    let children = spawn_workers(target, lock, Role::Lottery, args.processes, start_at, 1)?;
    let tasks: Vec<_> = (0..LOTTERY_TASKS)
        .map(|i| {
            let (client, lock) = (client.clone(), lock.to_string());
            let settings = target.endpoint().settings().clone();
            tokio::spawn(async move {
                wait_until(start_at).await;
                lottery(&client, &lock, format!("task-{}", i + 1), &settings).await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("lottery task does not panic")?);
    }
    for lines in collect_lines(children, "lottery ").await? {
        for line in lines {
            outcomes.push(parse::<LotteryOutcome>(&line)?);
        }
    }
    outcomes.sort_by(|a, b| a.worker.cmp(&b.worker));
    println!("   {:<14} result", "instance");
    for outcome in &outcomes {
        let result = match (outcome.token, outcome.number) {
            (Some(token), Some(number)) => {
                format!("WON the lock (fencing token {token}) and drew number {number}")
            }
            _ => match outcome.retry_after_ms {
                Some(ms) => format!("saw it held by another (its lease ends in {ms} ms): skipped"),
                None => "saw it held by another: skipped".to_string(),
            },
        };
        println!("   {:<14} {result}", outcome.worker);
    }
    let winners = outcomes.iter().filter(|o| o.token.is_some()).count();
    let ok = winners == 1 && outcomes.len() == instances;
    if ok {
        println!("   => exactly one of {instances} instances performed the draw. OK\n");
    } else {
        println!(
            "   => FAILED: {winners} instances performed the draw, {} reported (expected 1 and {instances})\n",
            outcomes.len()
        );
    }
    Ok(ok)
}

async fn contention_round(
    client: &Client,
    target: &RedisTarget,
    lock: &str,
    args: &DemoArgs,
) -> Result<bool, CliError> {
    let per_worker = args.per_worker as usize;
    let workers = args.tasks as usize + args.processes as usize;
    println!(
        "2. Contention: {} tasks and {} processes take the same lock {per_worker} times each ({} in all).",
        args.tasks,
        args.processes,
        workers * per_worker
    );
    println!(
        "   Each holder records when it started and stopped acting as the holder, with its fencing token.\n"
    );
    let history = Arc::new(History::default());
    let start_at = now_ms() + START_DELAY_MS;
    let children = spawn_workers(
        target,
        lock,
        Role::Contend,
        args.processes,
        start_at,
        per_worker,
    )?;
    let tasks: Vec<_> = (0..args.tasks)
        .map(|i| {
            let (client, lock, history) = (client.clone(), lock.to_string(), history.clone());
            let settings = target.endpoint().settings().clone();
            tokio::spawn(async move {
                wait_until(start_at).await;
                contend(
                    &client,
                    &lock,
                    &format!("task-{}", i + 1),
                    per_worker,
                    &history,
                    &settings,
                )
                .await
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("contention task does not panic")?;
    }
    let finished_ms = now_ms();
    for lines in collect_lines(children, "interval ").await? {
        for line in lines {
            history.record(parse::<Interval>(&line)?);
        }
    }
    let elapsed = Duration::from_millis(finished_ms.saturating_sub(start_at));
    let report = history.check();
    let intervals = history.intervals();
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for interval in &intervals {
        *per.entry(interval.worker.as_str()).or_default() += 1;
    }
    let min_tok = intervals.iter().map(|i| i.token).min().unwrap_or(0);
    let max_tok = intervals.iter().map(|i| i.token).max().unwrap_or(0);
    let expected = workers * per_worker;
    println!("   acquisitions      {}", report.acquisitions);
    println!(
        "   overlaps          {}   (two holders at the same time)",
        report.overlaps.len()
    );
    println!(
        "   fencing tokens    {}   ({} regressions; first {min_tok}, last {max_tok})",
        if report.token_regressions.is_empty() {
            "strictly increasing"
        } else {
            "NOT increasing"
        },
        report.token_regressions.len()
    );
    println!(
        "   per worker        min {}, max {} acquisitions ({} workers)",
        per.values().min().unwrap_or(&0),
        per.values().max().unwrap_or(&0),
        per.len()
    );
    println!(
        "   elapsed           {:.2} s ({:.0} acquisitions/s; waiters are woken by the releases)",
        elapsed.as_secs_f64(),
        report.acquisitions as f64 / elapsed.as_secs_f64()
    );
    let ok = report.is_ok() && report.acquisitions == expected;
    if ok {
        println!("   => mutual exclusion held: no overlap, tokens in order. OK\n");
    } else {
        println!("   => FAILED: {report} (expected {expected} acquisitions)\n");
    }
    Ok(ok)
}

/// Starts `count` worker processes of this binary, all to begin at `start_at` (Unix ms).
fn spawn_workers(
    target: &RedisTarget,
    lock: &str,
    role: Role,
    count: u16,
    start_at: u64,
    per_worker: usize,
) -> Result<Vec<ChildProcess>, CliError> {
    let exe = std::env::current_exe()
        .map_err(|err| CliError::Unavailable(format!("cannot find this program: {err}")))?;
    let role = match role {
        Role::Lottery => "lottery",
        Role::Contend => "contend",
    };
    (0..count)
        .map(|i| {
            let mut cmd = Command::new(&exe);
            cmd.args(["demo-worker", role])
                .args(target.endpoint().args())
                .args(["--lock", lock])
                .args(["--worker", &format!("process-{}", i + 1)])
                .args(["--start-at-ms", &start_at.to_string()])
                .args(["--count", &per_worker.to_string()]);
            ChildProcess::spawn(cmd).map_err(|err| {
                CliError::Unavailable(format!("cannot start a worker process: {err}"))
            })
        })
        .collect()
}

/// Waits for every worker's `done` and returns, per worker, its lines with `marker`
/// (the marker cut off).
async fn collect_lines(
    children: Vec<ChildProcess>,
    marker: &'static str,
) -> Result<Vec<Vec<String>>, CliError> {
    tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|mut child| {
                if child.wait_for_line("done", WORKER_TIMEOUT).is_none() {
                    return Err(CliError::CheckFailed(format!(
                        "worker process {} did not finish (see its messages above)",
                        child.pid()
                    )));
                }
                Ok(child
                    .take_lines(marker)
                    .into_iter()
                    .map(|line| line[marker.len()..].to_string())
                    .collect())
            })
            .collect()
    })
    .await
    .expect("collecting worker output does not panic")
}

fn parse<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, CliError> {
    serde_json::from_str(json)
        .map_err(|err| CliError::CheckFailed(format!("unreadable worker line {json:?}: {err}")))
}

fn now_ms() -> u64 {
    now_nanos() / 1_000_000
}
