//! `redis-locks-bench`: the redis-locks benchmarks as a program of their own, also run as
//! `redis-locks bench ...`.
//!
//! `throughput`, `handoff` and `market` measure against the Redis named by `--redis` /
//! `REDIS_URL`, or against a private redis-server started for the run; `--json` prints one
//! JSON object per run. Exit codes are listed in `--help`.

use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use cli_support::Flavor;
use cli_support::exit::CliError;
use cli_support::redis_target::RedisTarget;
use cli_support::settings::SettingsArgs;
use cli_support::topology::TopologyArgs;
use redis_locks_bench::Bench;

/// Measure performance: `throughput` (lock cost), `handoff` (one contended lock) and
/// `market` (the "Redis in Action" market simulation).
#[derive(Debug, Parser)]
#[command(name = "redis-locks-bench", after_help = EXIT_CODES)]
struct Cli {
    // Before `--redis`: it asks whether `--redis` came from the environment, and clap hands
    // each field its values in turn.
    #[command(flatten)]
    topology: TopologyArgs,
    /// Redis to use; without it a private redis-server is started. Several (repeated, or a
    /// comma list in REDIS_URL) are the independent nodes of `--kind redlock`; the other
    /// kinds use the first.
    #[arg(long, env = "REDIS_URL", global = true, value_delimiter = ',')]
    redis: Vec<String>,
    #[command(flatten)]
    settings: SettingsArgs,
    /// Without --redis: how many private redis-servers to start (the nodes of
    /// `--kind redlock`; an odd number).
    #[arg(long, global = true, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=15))]
    nodes: u16,
    /// Print one JSON object per run instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// The Tokio runtime the workers run on: multi-thread (Tokio's default, as most
    /// applications run) or current-thread (every task on one thread: a Redlock's connections
    /// to its nodes then wake no second worker thread).
    #[arg(long, global = true, value_enum, default_value_t = Flavor::MultiThread)]
    runtime: Flavor,
    /// Serve the library's metrics (`redis_locks_...`) for Prometheus at http://ADDR/ while
    /// the benchmark runs (and so measure the locks with a recorder installed), e.g.
    /// 127.0.0.1:9187.
    #[arg(long, global = true, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    #[command(subcommand)]
    bench: Bench,
}

const EXIT_CODES: &str = "Redis: --redis URL (REDIS_URL), --cluster URL... (REDIS_CLUSTER) or \
--sentinel URL... --master NAME (REDIS_SENTINEL, REDIS_MASTER), one of the three (the command line \
wins over the environment); without any, a private redis-server. A bare --cluster starts a private \
cluster of 3 masters, a bare --sentinel a private master with 2 replicas and 3 sentinels; \
`throughput` then also runs on one private server in the same run (--compare-single asks for it \
with URLs) and prints both rows and their ratio. `market` does not run on a cluster. A rediss:// \
URL connects with TLS (--tls-ca, --tls-cert and --tls-key, --tls-insecure: as `redis-locks \
--help` says); --namespace NS (REDIS_LOCKS_NAMESPACE) keeps the locks' keys under NS:.

Exit codes: 0 success; 1 a check failed (an overlap, a broken market \
invariant) or the chart cannot be written; 64 bad usage (--cluster with --redis or --sentinel, \
--sentinel without --master, --master without --sentinel, a Redlock with either, a URL that is \
not one, TLS settings that cannot be used, TLS files with private servers); 66 a TLS file \
cannot be read; 69 Redis unreachable, not Redis, a plaintext server behind rediss://, too \
slow, or refusing the command, or no private server; 77 Redis refused access (NOAUTH, \
WRONGPASS, NOPERM) or a TLS certificate; 65 and 70 as `redis-locks --help` says.

Examples:
  redis-locks bench throughput --workers 16 --duration 10s
  redis-locks bench throughput --kind redlock --nodes 3
  redis-locks bench handoff --kind fair-mutex --workers 8
  redis-locks bench market --duration 60s --chart market.svg
  redis-locks bench throughput --cluster --json";

fn main() -> ExitCode {
    match cli_support::parse::<Cli>() {
        Ok(cli) => cli_support::block_on_with(&program_name(), cli.runtime, run(cli)),
        Err(code) => code,
    }
}

async fn run(cli: Cli) -> Result<u8, CliError> {
    if let Some(addr) = cli.metrics_addr {
        cli_support::serve_metrics(addr)?;
    }
    if let redis_locks_bench::Bench::Transports(args) = &cli.bench {
        // Its own private servers: a plaintext, a TLS one, a master with a replica.
        return redis_locks_bench::transports::run(args, cli.json).await;
    }
    let wanted = cli.topology.wanted(cli.redis)?;
    let settings = cli.settings.settings()?;
    cli.bench.check(&wanted)?;
    let target = RedisTarget::private_or(wanted, usize::from(cli.nodes), settings)?;
    redis_locks_bench::run(&target, &cli.bench, cli.json)
        .await
        .map(|()| 0)
}

/// The name this program was started as, for its messages: `redis-locks bench` when
/// `redis-locks` runs it (clap names it so in usage lines too).
fn program_name() -> String {
    std::env::args_os()
        .next()
        .as_deref()
        .map(Path::new)
        .and_then(Path::file_name)
        .map_or_else(
            || "redis-locks-bench".to_string(),
            |name| name.to_string_lossy().into_owned(),
        )
}
