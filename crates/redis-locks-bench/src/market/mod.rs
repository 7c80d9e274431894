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
use redis_locks::{Client, ClientOptions};
use serde::Serialize;
use tokio::time::Instant;

use self::invariants::Ledger;
use self::model::{BUYER_FUNDS, Keys, Strategy, Worker, price_of, redis_failed};
use super::stats::{Latencies, Ticker, print_table, progress};
use cli_support::exit::CliError;
use cli_support::settings::ClientSettings;

/// Options of `bench market`.
#[derive(Debug, Clone, clap::Args)]
pub struct MarketArgs {
    /// How long each run (one scenario, one strategy) lasts, e.g. 60s, 2s.
    #[arg(long, default_value = "60s", value_parser = super::parse_run_length)]
    pub duration: Duration,
    /// Sellers; given (with or without --buyers, which then defaults to 1), runs only that
    /// scenario instead of 1/1, 5/1 and 5/5.
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
pub async fn run(
    url: &str,
    settings: &ClientSettings,
    args: &MarketArgs,
    json: bool,
) -> Result<(), CliError> {
    let scenarios: Vec<(u16, u16)> = match (args.sellers, args.buyers) {
        (None, None) => vec![(1, 1), (5, 1), (5, 5)],
        (sellers, buyers) => vec![(sellers.unwrap_or(1), buyers.unwrap_or(1))],
    };
    // The data connections and the lock clients both with the settings (TLS, namespace).
    let redis = settings.redis_client(url)?;
    let options = settings.client_options()?;
    // Before a minute of benchmarks, not after it: can the chart be written?
    chart::check_writable(&args.chart)?;
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
            let report = OneRun {
                redis: &redis,
                url,
                options: &options,
                keys: &keys,
                strategy: *strategy,
                sellers,
                buyers,
                duration: args.duration,
            }
            .run()
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

/// One run of the market: one scenario (sellers/buyers), one strategy.
#[derive(Clone, Copy)]
struct OneRun<'a> {
    redis: &'a redis::Client,
    url: &'a str,
    options: &'a ClientOptions,
    keys: &'a Keys,
    strategy: Strategy,
    sellers: u16,
    buyers: u16,
    duration: Duration,
}

impl OneRun<'_> {
    /// Runs the market and reports it; the run's keys are deleted either way.
    async fn run(self) -> Result<RunReport, CliError> {
        // The checks read every listing and inventory at once: give big replies time.
        let mut setup = connect(self.redis, Duration::from_secs(120)).await?;
        let outcome = self.simulate(&mut setup).await;
        let cleaned = cleanup(&mut setup, self.keys).await;
        let report = outcome?;
        cleaned?;
        Ok(report)
    }

    /// Sets the users up, runs the sellers and buyers until the run's time is over, and
    /// checks the market's invariants.
    async fn simulate(
        self,
        setup: &mut redis::aio::MultiplexedConnection,
    ) -> Result<RunReport, CliError> {
        let OneRun {
            redis,
            url,
            options,
            keys,
            strategy,
            sellers,
            buyers,
            duration,
        } = self;
        for seller in 0..sellers {
            let _: () = setup
                .hset(keys.user(&format!("seller{seller}")), "funds", 0)
                .await
                .map_err(redis_failed)?;
        }
        for buyer in 0..buyers {
            let _: () = setup
                .hset(keys.user(&format!("buyer{buyer}")), "funds", BUYER_FUNDS)
                .await
                .map_err(redis_failed)?;
        }
        let start = Instant::now();
        let deadline = start + duration;
        let mut tasks = Vec::new();
        for (role, count) in [("seller", sellers), ("buyer", buyers)] {
            for index in 0..count as usize {
                let worker = Worker {
                    data: connect(redis, Duration::from_secs(10)).await?,
                    locks: Client::connect_with(url, options.clone()).await?,
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
        let violations = invariants::check(setup, keys, &ledger).await?;
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
        .map_err(redis_failed)
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
            .map_err(redis_failed)?;
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
///
/// # Errors
/// [`CliError::Unavailable`] when Redis failed: the user hears that keys were left behind.
async fn cleanup(
    data: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
) -> Result<(), CliError> {
    use futures_util::TryStreamExt;
    for pattern in [
        format!("{}*", keys.prefix()),
        format!("{{{}*", keys.prefix()),
    ] {
        let found: Vec<String> = data
            .scan_match::<_, String>(&pattern)
            .await
            .map_err(redis_failed)?
            .try_collect()
            .await
            .map_err(redis_failed)?;
        for chunk in found.chunks(500) {
            let _: i64 = data.del(chunk).await.map_err(redis_failed)?;
        }
    }
    Ok(())
}

fn print_report(args: &MarketArgs, reports: &[RunReport]) {
    println!(
        "bench market: \"Redis in Action\" 6.2, {} per run; sellers list, buyers buy one of the {} cheapest listings at random\n",
        humantime::format_duration(args.duration),
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
