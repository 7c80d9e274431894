//! `redis-locks`: the command-line tool of the redis-locks library.
//!
//! `redis-locks demo` shows the library working on a private redis-server (or the one named
//! by `--redis` / `REDIS_URL`); `run` is a distributed `flock(1)`; `status` shows a lock;
//! `bench` measures. Exit codes are listed in `--help`.

mod bench;
mod contend;
mod demo;
mod exit;
mod leftovers;
mod redis_target;
mod run;
mod status;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::exit::CliError;

/// Distributed locks on Redis: owner tokens, leases, fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "redis-locks", version, about, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

const EXIT_CODES: &str = "Exit codes: 0 success (run: the command's own code, or 128+N if a \
signal N ended it); 1 a check failed (demo, bench) or a chart could not be written; 64 bad \
usage; 65 a key of the lock holds something that is not this lock's (another type, a \
fencing counter that is not a number); 69 Redis unreachable, not Redis, too slow, or \
refusing the command (read-only replica, out of memory), or no private server; 70 the lock \
was lost during the run (or Redis gave a reply the lock never expects); 75 the lock was not \
acquired within --wait; 77 Redis refused access (NOAUTH, WRONGPASS, NOPERM); 127 the \
command could not be started.";

/// Where `run` and `status` look for Redis without `--redis` / `REDIS_URL`.
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

#[derive(Debug, Subcommand)]
enum Commands {
    /// Show the locks at work: the lottery (exactly one instance draws), then a contention
    /// round checked for overlaps and fencing-token order.
    Demo {
        /// Redis to use; without it a private redis-server is started (and installed from
        /// Debian's packages when missing).
        #[arg(long, env = "REDIS_URL")]
        redis: Option<String>,
        #[command(flatten)]
        args: demo::DemoArgs,
    },
    /// Run a command while holding a lock (a distributed flock): acquire, run it with the
    /// lease renewed in the background, release when it exits. The command gets the fencing
    /// token in REDIS_LOCKS_TOKEN and the lock name in REDIS_LOCKS_NAME; it runs in a process
    /// group of its own, and if the lock is lost the whole group gets SIGTERM, then SIGKILL
    /// after --grace. Ctrl-C / SIGTERM / SIGHUP are passed on to the group.
    Run {
        /// Redis to use [default: redis://127.0.0.1:6379].
        #[arg(long, env = "REDIS_URL")]
        redis: Option<String>,
        #[command(flatten)]
        args: run::RunArgs,
    },
    /// Show a lock: held or free, the holder, its lease, how many processes wait for it now,
    /// the fencing counter.
    Status {
        /// The lock's name.
        name: String,
        /// Redis to use [default: redis://127.0.0.1:6379].
        #[arg(long, env = "REDIS_URL")]
        redis: Option<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Measure performance: `throughput` (lock cost), `handoff` (one contended lock) and
    /// `market` (the "Redis in Action" market simulation).
    Bench {
        /// Redis to use; without it a private redis-server is started.
        #[arg(long, env = "REDIS_URL", global = true)]
        redis: Option<String>,
        /// Print one JSON object per run instead of tables.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        bench: bench::Bench,
    },
    /// One worker process of the demo (started by `demo`).
    #[command(hide = true)]
    DemoWorker {
        role: worker::Role,
        #[arg(long)]
        redis: String,
        #[arg(long)]
        lock: String,
        #[arg(long)]
        worker: String,
        #[arg(long)]
        start_at_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { exit::USAGE } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("redis-locks: cannot start the async runtime: {err}");
            return ExitCode::from(exit::LOST);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("redis-locks: {err}");
            err.exit_code()
        }
    }
}

async fn run(command: Commands) -> Result<u8, CliError> {
    match command {
        Commands::Demo { redis, args } => {
            let target = redis_target::RedisTarget::resolve(redis)?;
            demo::run(&target, &args).await.map(|()| 0)
        }
        Commands::Run { redis, args } => {
            run::run(redis.as_deref().unwrap_or(DEFAULT_URL), &args).await
        }
        Commands::Status { name, redis, json } => {
            status::run(redis.as_deref().unwrap_or(DEFAULT_URL), &name, json)
                .await
                .map(|()| 0)
        }
        Commands::Bench { redis, json, bench } => {
            let target = redis_target::RedisTarget::resolve(redis)?;
            bench::run(&target, &bench, json).await.map(|()| 0)
        }
        Commands::DemoWorker {
            role,
            redis,
            lock,
            worker,
            start_at_ms,
            count,
        } => worker::run(&redis, &lock, worker, role, start_at_ms, count)
            .await
            .map(|()| 0),
    }
}
