//! `bench market`: the market simulation of "Redis in Action" 6.2 — optimistic WATCH, one
//! coarse lock, fine-grained locks per item (and fair ones) — with sellers listing and buyers
//! buying concurrently, each worker on its own connections like the book's processes.

mod chart;
mod invariants;
mod model;

use std::path::PathBuf;
use std::time::Duration;

use rand::Rng;
use redis::AsyncCommands;
use redis_locks::Client;
use serde::Serialize;
use tokio::time::Instant;

use self::invariants::Ledger;
use self::model::{BUYER_FUNDS, Keys, Strategy, Worker, price_of};
use super::stats::{Latencies, Ticker, print_table, progress};
use crate::exit::CliError;

/// Options of `bench market`.
#[derive(Debug, Clone, clap::Args)]
pub struct MarketArgs {
    /// How long each run (one scenario, one strategy) lasts, e.g. 60s, 2s.
    #[arg(long, default_value = "60s", value_parser = super::parse_duration)]
    pub duration: Duration,
    /// Sellers; with --buyers, runs only that scenario instead of 1/1, 5/1 and 5/5.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub sellers: Option<u16>,
    /// Buyers; see --sellers.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub buyers: Option<u16>,
    /// The strategies to compare.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "watch,coarse,fine,fair"
    )]
    pub strategies: Vec<Strategy>,
    /// Where to write the SVG chart comparing the strategies.
    #[arg(long, default_value = "market.svg")]
    pub chart: PathBuf,
}

/// One run's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    bench: &'static str,
    scenario: String,
    strategy: Strategy,
    #[serde(skip)]
    strategy_label: &'static str,
    seconds: f64,
    listed: u64,
    bought: u64,
    purchase_retries: u64,
    listing_retries: u64,
    missed: u64,
    purchase_avg_ms: f64,
    purchase_p99_ms: f64,
    ops_per_second: f64,
    invariants_ok: bool,
    violations: Vec<String>,
}

#[derive(Default)]
struct WorkerResult {
    listed: u64,
    bought: u64,
    purchase_retries: u64,
    listing_retries: u64,
    missed: u64,
    latencies: Latencies,
    created: Vec<String>,
    purchases: Vec<(String, i64)>,
}

/// Runs every scenario × strategy, prints the table (or JSON lines), draws the chart, and
/// fails loudly if any run broke an invariant.
pub async fn run(url: &str, args: &MarketArgs, json: bool) -> Result<(), CliError> {
    let scenarios: Vec<(u16, u16)> = match (args.sellers, args.buyers) {
        (None, None) => vec![(1, 1), (5, 1), (5, 5)],
        (sellers, buyers) => vec![(sellers.unwrap_or(1), buyers.unwrap_or(1))],
    };
    let redis = redis::Client::open(url)
        .map_err(|err| CliError::Usage(format!("invalid Redis URL {url:?}: {err}")))?;
    let run_id = format!("{:08x}", rand::random::<u32>());
    let mut reports = Vec::new();
    for (sellers, buyers) in scenarios {
        for strategy in &args.strategies {
            let scenario = format!("{sellers}/{buyers}");
            let keys = Keys::new(format!("bench:market:{run_id}:{scenario}:{strategy:?}:"));
            let bar = progress(
                &format!("{scenario} {}", strategy.label()),
                args.duration,
                json,
            );
            let ticker = Ticker::start(bar);
            let report = one_run(
                &redis,
                url,
                &keys,
                *strategy,
                sellers,
                buyers,
                args.duration,
            )
            .await?;
            drop(ticker);
            if json {
                println!("{}", serde_json::to_string(&report).expect("plain data"));
            }
            reports.push(report);
        }
    }
    if !json {
        print_report(args, &reports);
    }
    chart::draw(&args.chart, &reports)?;
    if !json {
        println!("\n  chart: {}", args.chart.display());
    }
    let broken: Vec<String> = reports
        .iter()
        .filter(|r| !r.invariants_ok)
        .map(|r| {
            format!(
                "{} {}: {}",
                r.scenario,
                r.strategy_label,
                r.violations.join("; ")
            )
        })
        .collect();
    if broken.is_empty() {
        Ok(())
    } else {
        eprintln!("\n  !!! INVARIANTS BROKEN !!!");
        for line in &broken {
            eprintln!("  {line}");
        }
        Err(CliError::CheckFailed(format!(
            "{} market run(s) broke an invariant",
            broken.len()
        )))
    }
}

async fn one_run(
    redis: &redis::Client,
    url: &str,
    keys: &Keys,
    strategy: Strategy,
    sellers: u16,
    buyers: u16,
    duration: Duration,
) -> Result<RunReport, CliError> {
    let failed = |err: redis::RedisError| CliError::Unavailable(format!("market: {err}"));
    // The checks read every listing and inventory at once: give big replies time.
    let mut setup = connect(redis, Duration::from_secs(120)).await?;
    for seller in 0..sellers {
        let _: () = setup
            .hset(keys.user(&format!("seller{seller}")), "funds", 0)
            .await
            .map_err(failed)?;
    }
    for buyer in 0..buyers {
        let _: () = setup
            .hset(keys.user(&format!("buyer{buyer}")), "funds", BUYER_FUNDS)
            .await
            .map_err(failed)?;
    }
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for (role, count) in [("seller", sellers), ("buyer", buyers)] {
        for index in 0..count as usize {
            let worker = Worker {
                data: connect(redis, Duration::from_secs(10)).await?,
                locks: Client::connect(url).await?,
                keys: keys.clone(),
                strategy,
            };
            let id = format!("{role}{index}");
            tasks.push(tokio::spawn(async move {
                let result = if role == "seller" {
                    sell(worker, index, &id, deadline).await
                } else {
                    buy(worker, &id, deadline).await
                };
                result.map(|r| (id, r))
            }));
        }
    }
    let mut total = WorkerResult::default();
    let mut ledger = Ledger::default();
    for task in tasks {
        let (id, result) = task.await.expect("market worker does not panic")?;
        total.listed += result.listed;
        total.bought += result.bought;
        total.purchase_retries += result.purchase_retries;
        total.listing_retries += result.listing_retries;
        total.missed += result.missed;
        total.latencies.add(&result.latencies);
        if id.starts_with("seller") {
            ledger.created.insert(id, result.created);
        } else {
            ledger.purchases.insert(id, result.purchases);
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let violations = invariants::check(&mut setup, keys, &ledger).await?;
    cleanup(&mut setup, keys).await;
    let latency = total.latencies.summary();
    Ok(RunReport {
        bench: "market",
        scenario: format!("{sellers}/{buyers}"),
        strategy,
        strategy_label: strategy.label(),
        seconds: elapsed,
        listed: total.listed,
        bought: total.bought,
        purchase_retries: total.purchase_retries,
        listing_retries: total.listing_retries,
        missed: total.missed,
        purchase_avg_ms: latency.mean_ms,
        purchase_p99_ms: latency.p99_ms,
        ops_per_second: (total.listed + total.bought) as f64 / elapsed,
        invariants_ok: violations.is_empty(),
        violations,
    })
}

/// A data connection whose requests fail only after `response_timeout` (the redis crate's
/// default of 500 ms is too short for a loaded 2-core machine and for the end-of-run reads).
async fn connect(
    redis: &redis::Client,
    response_timeout: Duration,
) -> Result<redis::aio::MultiplexedConnection, CliError> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(response_timeout));
    redis
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|err| CliError::Unavailable(format!("market: {err}")))
}

/// A seller: creates items in its inventory and lists each at its fixed price.
async fn sell(
    mut worker: Worker,
    index: usize,
    id: &str,
    deadline: Instant,
) -> Result<WorkerResult, CliError> {
    let mut result = WorkerResult::default();
    let inventory = worker.keys.inventory(id);
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let item = format!("item{n}s{index}");
        let _: () = worker
            .data
            .sadd(&inventory, &item)
            .await
            .map_err(|err| CliError::Unavailable(format!("market: {err}")))?;
        result.created.push(item.clone());
        result.listing_retries += worker.list(id, &item, price_of(index, n)).await?;
        result.listed += 1;
    }
    Ok(result)
}

/// A buyer: picks one of the cheapest listings at random and buys it, if still there.
async fn buy(mut worker: Worker, id: &str, deadline: Instant) -> Result<WorkerResult, CliError> {
    let mut result = WorkerResult::default();
    while Instant::now() < deadline {
        let choices = worker.cheapest().await?;
        if choices.is_empty() {
            // Nothing listed yet: the sellers are behind.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let itemid = &choices[rand::rng().random_range(0..choices.len())];
        let started = Instant::now();
        let (bought, retries) = worker.purchase(id, itemid).await?;
        result.purchase_retries += retries;
        match bought {
            Some(price) => {
                result.latencies.record(started.elapsed());
                result.bought += 1;
                result.purchases.push((itemid.clone(), price));
            }
            None => result.missed += 1,
        }
    }
    Ok(result)
}

/// Deletes the run's keys (a shared server keeps nothing of it).
async fn cleanup(data: &mut redis::aio::MultiplexedConnection, keys: &Keys) {
    for pattern in [
        format!("{}*", keys.prefix()),
        format!("{{{}*", keys.prefix()),
    ] {
        let found: Vec<String> = match data.scan_match::<_, String>(&pattern).await {
            Ok(iter) => {
                use futures_util::StreamExt;
                iter.filter_map(|key| async move { key.ok() })
                    .collect()
                    .await
            }
            Err(_) => continue,
        };
        for chunk in found.chunks(500) {
            let _: Result<i64, _> = data.del(chunk).await;
        }
    }
}

fn print_report(args: &MarketArgs, reports: &[RunReport]) {
    println!(
        "bench market: \"Redis in Action\" 6.2, {:.0} s per run; sellers list, buyers buy one of the {} cheapest listings at random\n",
        args.duration.as_secs_f64(),
        model::CHOICES
    );
    let mut rows = vec![
        [
            "scenario",
            "strategy",
            "listed",
            "bought",
            "purchase retries",
            "avg wait/purchase",
            "p99 purchase",
            "ops/s",
            "missed",
            "invariants",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for r in reports {
        rows.push(vec![
            r.scenario.clone(),
            r.strategy_label.to_string(),
            r.listed.to_string(),
            r.bought.to_string(),
            r.purchase_retries.to_string(),
            format!("{:.2} ms", r.purchase_avg_ms),
            format!("{:.2} ms", r.purchase_p99_ms),
            format!("{:.0}", r.ops_per_second),
            r.missed.to_string(),
            if r.invariants_ok { "ok" } else { "BROKEN" }.to_string(),
        ]);
    }
    print_table(&rows);
    println!(
        "\n  missed: purchases that found the item already sold (the buyer moves on); retries: WATCH transactions aborted and redone.\n  invariants: money conserved, each item in exactly one place, none bought twice, each purchase debited and credited once."
    );
}
