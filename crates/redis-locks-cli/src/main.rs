//! `redis-locks`: the command-line tool of the redis-locks library.
//!
//! `redis-locks demo` shows the library working on a private redis-server (or the one named
//! by `--redis` / `REDIS_URL`, or a Redis Cluster or Sentinel master: `--cluster`,
//! `--sentinel`, private ones when bare); `run` is a distributed `flock(1)`; `status` shows a lock;
//! `bench` measures, by running the benchmarks program `redis-locks-bench` (a crate of its
//! own); `check` runs the safety checker and fault suite. Exit codes are listed in `--help`.

mod bench;
mod breaker;
mod check;
mod contend;
mod demo;
mod list;
mod nodes;
mod run;
mod status;
mod top;
mod worker;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli_support::exit::CliError;
use cli_support::redis_target::RedisTarget;
use cli_support::settings::{ReplicationArgs, SettingsArgs};
use cli_support::topology::TopologyArgs;

/// Distributed locks on Redis: owner tokens, leases, fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "redis-locks", version, about, after_help = SUMMARY, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
    /// Log the locks' work on stderr (-v, -vv; RUST_LOG wins)
    #[arg(long, short, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// The end of `redis-locks --help`: the exit codes in short (the whole screen fits 80×24).
const SUMMARY: &str = "\
Exit codes: 0 success (run: the command's own); 1 a check failed; 64 bad usage;
65 not a lock's key; 69 Redis unreachable; 70 lock lost; 75 not acquired;
77 access refused; 127 not started. More: COMMAND --help; docs/cli.md.";

/// The Redis flags and every exit code with its causes: in each command's `--help`, before
/// its examples.
macro_rules! redis_and_exit_codes {
    () => {
        "Redis: --redis URL (REDIS_URL; several: a Redlock's servers), \
--cluster URL... (REDIS_CLUSTER: a Redis Cluster's seed nodes) or --sentinel URL... --master NAME \
(REDIS_SENTINEL, REDIS_MASTER: a master watched by Redis Sentinels), one of the three; the command \
line wins over the environment. A bare --cluster or --sentinel starts a private cluster of 3 \
masters or a private master with 2 replicas and 3 sentinels for demo, bench and check, and means \
redis://127.0.0.1:6379 or redis://127.0.0.1:26379 for run and status. A rediss:// URL connects \
with TLS: --tls-ca FILE (REDIS_TLS_CA), --tls-cert FILE and --tls-key FILE (REDIS_TLS_CERT, \
REDIS_TLS_KEY: mutual TLS), --tls-insecure (REDIS_TLS_INSECURE: no certificate check, needed for \
a #insecure URL). redis://USER:PASSWORD@host logs in as an ACL user; passwords are never printed. \
--namespace NS (REDIS_LOCKS_NAMESPACE; default none) keeps the locks' keys under NS:. --replicas N \
[--replicas-timeout 100ms] (REDIS_LOCKS_REPLICAS, REDIS_LOCKS_REPLICAS_TIMEOUT; run, demo, check) \
counts a grant only once N replicas have it.

Exit codes: 0 success (run: the command's own code, or 128+N if a \
signal N ended it); 1 a check failed (demo, bench, check) or a chart could not be written; 64 bad \
usage (among others: --cluster with --redis or --sentinel, a Redlock with either, --sentinel \
without --master, --master without --sentinel, a URL that is not one, --tls-cert without \
--tls-key, a CA or certificate that is not PEM, TLS files with a redis:// URL, a #insecure URL \
without --tls-insecure, a bad namespace, --replicas with a Redlock, a name given twice to run, \
several names with --permits, --shared, --exclusive or a Redlock); 65 a key of the lock holds \
something that is not this lock's (another type, a fencing counter that is not a number), or the \
name is held as another kind of lock (run --shared on a Mutex, run on an RwLock, run on a \
Semaphore), or run --permits N on a semaphore in use with another N; 66 a --tls-ca, \
--tls-cert or --tls-key file cannot be read; 69 Redis unreachable, not Redis, a plaintext server \
behind rediss://, too slow, or refusing the command (read-only replica, out of memory), fewer \
replicas than --replicas acknowledged in time, or no private server, or (bench) no \
redis-locks-bench program to run (cargo build --release -p redis-locks-bench builds it); 70 \
the lock was lost during the run (or Redis gave a reply the lock never expects); 69 also when no \
majority of the --redis servers of a Redlock answers; 75 the lock was not acquired within --wait; \
77 Redis refused access (NOAUTH, WRONGPASS, NOPERM) or a TLS certificate (the server's not \
trusted: another CA, another host name, expired; or this client's refused or missing); 127 the \
command could not be started."
    };
}

/// A lock by name, and the Redis it lives on (`status`, `break`).
#[derive(Debug, clap::Args)]
struct NamedLock {
    /// The lock's name.
    name: String,
    #[command(flatten)]
    service: list::ServiceArgs,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// Run a command while holding a lock (a distributed flock)
    ///
    /// Acquires the lock, runs the command with the lease renewed in the background, and
    /// releases when it exits. The lock is the Mutex NAME,
    /// or with --shared / --exclusive the read / write side of the RwLock NAME (flock -s /
    /// -x: many shared runs at once, or one exclusive), or with --permits N a permit of the
    /// Semaphore NAME (at most N such runs at once); several names take the Mutex of each
    /// together, all or none (a MultiLock: any order, never a deadlock). The command gets the
    /// fencing token in REDIS_LOCKS_TOKEN and the lock name in REDIS_LOCKS_NAME (several names:
    /// REDIS_LOCKS_NAMES, in the order taken), every name with its token in
    /// REDIS_LOCKS_TOKENS="name1=token1 name2=token2", and with --permits N in
    /// REDIS_LOCKS_PERMITS; it runs in a process group of
    /// its own, and if the lock is lost the whole group gets SIGTERM, then SIGKILL after
    /// --grace. Ctrl-C / SIGTERM / SIGHUP are passed on to the group.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  # The nightly job on one machine at a time; the others wait up to 10 s
  redis-locks run jobs:nightly --redis redis://10.0.0.5:6379 --wait 10s -- ./nightly.sh
  # At most 4 downloads at once
  redis-locks run downloads --permits 4 -- curl -O https://example.com/big.iso
  # Readers together, a writer alone (flock -s / -x)
  redis-locks run report --shared -- ./read-report.sh
  redis-locks run report --exclusive -- ./write-report.sh
  # Two accounts, all or none, whatever the order given
  redis-locks run account:42 account:7 -- ./transfer.sh 42 7
  # A Redlock over three independent servers
  redis-locks run jobs:nightly --redis redis://a:6379,redis://b:6379,redis://c:6379 -- ./nightly.sh"))]
    Run {
        #[command(flatten)]
        topology: TopologyArgs,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        replication: ReplicationArgs,
        /// Redis to use [default: redis://127.0.0.1:6379]. Give it several times (or a comma
        /// list in REDIS_URL), an odd number of independent servers, to take a Redlock: the
        /// lock is held while a majority grants it (plain runs only, not --shared/--exclusive;
        /// a minority of them may be down when run starts).
        #[arg(long, env = "REDIS_URL", value_delimiter = ',')]
        redis: Vec<String>,
        #[command(flatten)]
        args: run::RunArgs,
    },
    /// List every lock of a server: kind, holders, lease, waiters
    ///
    /// Lists every lock on the server (on a cluster, on every master; under Sentinel, on the
    /// master): its kind, holders, shortest lease left, waiters and fencing counter, found
    /// with SCAN (never KEYS). A lock released or expired shows as free with its counter.
    /// PATTERN is a glob on the names.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks list
  redis-locks list 'jobs:*' --json | jq '.locks[] | select(.waiting > 0)'
  redis-locks list --cluster redis://10.0.0.1:7000"))]
    List {
        #[command(flatten)]
        listed: list::ListedArgs,
        /// Print one JSON object: {"count": N, "locks": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Show the locks live in the terminal, the most waited-for first
    ///
    /// Shows the locks of `list` live in the terminal: read again every --interval, the most
    /// waited-for first, each lease counting down. q, Esc or Ctrl-C quits. Needs a terminal
    /// (exits 64 without one: use `list --json` in scripts).
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks top
  redis-locks top 'jobs:*' --interval 500ms"))]
    Top {
        #[command(flatten)]
        listed: list::ListedArgs,
        /// How often the locks are read again, e.g. 1s, 500ms.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        interval: std::time::Duration,
    },
    /// Free a lock on purpose: its holder told, its waiters woken
    ///
    /// Breaks the lock NAME, whatever its kind, for a holder that died without releasing or
    /// hangs: first its fencing counter goes past every token handed out (so a holder that
    /// was not dead after all has its fenced writes refused once the next holder writes),
    /// then the lock is deleted and its waiters woken; the holder's lost() fires with Broken
    /// at its next renewal (run's command gets SIGTERM). Says who held it. Asks first on a
    /// terminal; --yes skips the question (needed off a terminal, else exit 64); answering
    /// anything but y exits 1 with nothing done. A free lock: nothing to break, exit 0. With
    /// several --redis, every node of the Redlock is broken.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks break jobs:nightly
  redis-locks break jobs:nightly --yes --json
  redis-locks break jobs:nightly --redis redis://a:6379,redis://b:6379,redis://c:6379 --yes"))]
    Break {
        #[command(flatten)]
        lock: NamedLock,
        /// Do not ask: break at once.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Show a lock: its holder, lease, waiters and fencing counter
    ///
    /// Shows a lock: held or free, the holder, its lease, how many processes wait for it now,
    /// the fencing counter, and which node serves it (on a cluster: the master of its hash
    /// slot; under Sentinel: the current master). For an RwLock (or a ReentrantMutex): its kind, every hold with
    /// its mode, owner, lease and fencing token, and the readers and writers waiting in line.
    /// For a Semaphore: N, the permits in use, every holder with its permits and lease, and
    /// how many wait.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks status jobs:nightly
  redis-locks status jobs:nightly --json | jq .holder
  redis-locks status jobs:nightly --cluster redis://10.0.0.1:7000
  redis-locks status jobs:nightly --redis redis://a:6379,redis://b:6379,redis://c:6379"))]
    Status {
        #[command(flatten)]
        lock: NamedLock,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check that locks stay safe under faults (seed 000's for contrast)
    ///
    /// Worker processes contend for one lock, each
    /// holder doing a read-modify-write of a fenced resource, while faults are injected
    /// (holders killed or stopped, the server frozen, restarted, cut off...). Every holding is
    /// recorded and checked: no two holders at once unless the earlier was told it lost the
    /// lock, fencing tokens increasing, no lost update, no stale write, no lock key without a
    /// TTL, nothing hung; for --primitive semaphore (--permits N), never more than N holders
    /// at once, a token of its own per grant, no leaked permit; for --primitive multilock
    /// (--names N), no name held by two at once and no acquisition stuck. Seed 000's algorithms
    /// (--algorithm setnx-expire|setnx-getset|naive-del, counter-semaphore beside the
    /// semaphore, caller-order-multilock beside the MultiLock) run through the same checks to
    /// show what they catch. Exit 0 when every check
    /// holds, 1 when one fails or the run is interrupted. With --cluster or --sentinel (bare:
    /// private ones, started once for the whole check) the faults are none, holder-kill,
    /// holder-pause and client-clock-step, the primitives all but redlock, the algorithm ours.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks check                              # the default faults, private server
  redis-locks check --fault server-pause+holder-kill --algorithm ours --algorithm setnx-expire
  redis-locks check --primitive semaphore --permits 3
  redis-locks check --long --chart check.svg     # every fault, with a timeline"))]
    Check {
        #[command(flatten)]
        args: check::CheckArgs,
    },
    /// Show the locks at work on a private redis-server
    ///
    /// Shows the locks at work: the lottery (exactly one instance draws), then a contention
    /// round checked for overlaps and fencing-token order.
    #[command(after_long_help = concat!(redis_and_exit_codes!(), "

Examples:
  redis-locks demo                              # on a private redis-server
  redis-locks demo --redis redis://127.0.0.1:7000
  redis-locks demo --cluster                    # on a private Redis Cluster"))]
    Demo {
        #[command(flatten)]
        topology: TopologyArgs,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        replication: ReplicationArgs,
        /// Redis to use; without it a private redis-server is started (and installed from
        /// Debian's packages when missing).
        #[arg(long, env = "REDIS_URL")]
        redis: Option<String>,
        #[command(flatten)]
        args: demo::DemoArgs,
    },
    /// Measure performance: throughput, handoff, market
    ///
    /// Measures performance: `throughput` (lock cost), `handoff` (one contended lock) and
    /// `market` (the "Redis in Action" market simulation).
    ///
    /// The benchmarks are a program of their own, `redis-locks-bench`, looked for beside this
    /// one and then on PATH: `redis-locks bench ARGS...` runs `redis-locks-bench ARGS...` and
    /// ends as it does (`redis-locks bench --help` lists the benchmarks and their options). If
    /// it is not found, exit 69; `cargo build --release -p redis-locks-bench` builds it.
    #[command(disable_help_flag = true)]
    Bench {
        /// The benchmark and its options (`--redis URL`, `--json`, ...), passed on as they are.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell)
    ///
    /// Prints the completion script of SHELL for redis-locks on stdout.
    #[command(after_long_help = "Examples:
  redis-locks completions bash > /etc/bash_completion.d/redis-locks
  redis-locks completions zsh > ~/.zfunc/_redis-locks
  redis-locks completions fish > ~/.config/fish/completions/redis-locks.fish")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff)
    ///
    /// Prints the man page of redis-locks, in roff, on stdout.
    #[command(after_long_help = "Examples:
  redis-locks man > /usr/local/share/man/man1/redis-locks.1
  redis-locks man | man -l -")]
    Man,
    /// One worker process of `check` (started by `check`).
    #[command(hide = true)]
    CheckWorker {
        /// The worker's plan, as JSON.
        plan: String,
    },
    /// One worker process of the demo (started by `demo`).
    #[command(hide = true)]
    DemoWorker {
        role: worker::Role,
        #[command(flatten)]
        topology: TopologyArgs,
        #[command(flatten)]
        settings: SettingsArgs,
        #[command(flatten)]
        replication: ReplicationArgs,
        #[arg(long)]
        redis: Vec<String>,
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
    match cli_support::parse::<Cli>() {
        Ok(cli) => cli_support::block_on_logged(
            "redis-locks",
            cli_support::Flavor::MultiThread,
            cli.verbose,
            run(cli.command),
        ),
        Err(code) => code,
    }
}

async fn run(command: Commands) -> Result<u8, CliError> {
    match command {
        Commands::Demo {
            redis,
            topology,
            settings,
            replication,
            args,
        } => {
            let wanted = topology.wanted(redis.into_iter().collect())?;
            let settings = settings.settings()?.with_replication(&replication);
            let target = RedisTarget::private_or(wanted, 1, settings)?;
            demo::run(&target, &args).await.map(|()| 0)
        }
        Commands::Run {
            redis,
            topology,
            settings,
            replication,
            args,
        } => {
            let settings = settings.settings()?.with_replication(&replication);
            let target = RedisTarget::local_or(topology.wanted(redis)?, settings)?;
            run::run(target.endpoint(), &args).await
        }
        Commands::List { listed, json } => {
            let target = listed.service.target()?;
            list::run(target.endpoint(), listed.pattern.as_deref(), json)
                .await
                .map(|()| 0)
        }
        Commands::Top { listed, interval } => {
            if interval.is_zero() {
                return Err(CliError::Usage("--interval must be more than 0".into()));
            }
            let target = listed.service.target()?;
            top::run(target.endpoint(), listed.pattern.as_deref(), interval)
                .await
                .map(|()| 0)
        }
        Commands::Break { lock, yes, json } => {
            let target = lock.service.target()?;
            breaker::run(target.endpoint(), &lock.name, yes, json)
                .await
                .map(|()| 0)
        }
        Commands::Status { lock, json } => {
            let target = lock.service.target()?;
            status::run(target.endpoint(), &lock.name, json)
                .await
                .map(|()| 0)
        }
        Commands::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "redis-locks", &mut std::io::stdout());
            Ok(0)
        }
        Commands::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .map_err(|err| CliError::CannotRun(format!("writing the man page: {err}")))?;
            Ok(0)
        }
        Commands::Check { args } => check::run(&args).await.map(|()| 0),
        Commands::CheckWorker { plan } => check::worker::run(&plan).await.map(|()| 0),
        // This process becomes redis-locks-bench; back here only if it could not.
        Commands::Bench { args } => Err(bench::exec(args)),
        Commands::DemoWorker {
            role,
            redis,
            topology,
            settings,
            replication,
            lock,
            worker,
            start_at_ms,
            count,
        } => {
            let settings = settings.settings()?.with_replication(&replication);
            let target = RedisTarget::local_or(topology.wanted(redis)?, settings)?;
            worker::run(target.endpoint(), &lock, worker, role, start_at_ms, count)
                .await
                .map(|()| 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use proptest::prelude::*;

    use super::Cli;

    /// Words of the command line, right and wrong.
    fn word() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "run",
                "status",
                "demo",
                "bench",
                "--redis",
                "--cluster",
                "--sentinel",
                "--master",
                "--tls-ca",
                "--tls-cert",
                "--tls-key",
                "--tls-insecure",
                "--namespace",
                "--replicas",
                "--replicas-timeout",
                "rediss://127.0.0.1:1#insecure",
                "--ttl",
                "--wait",
                "--grace",
                "--shared",
                "--exclusive",
                "--permits",
                "-s",
                "-x",
                "--json",
                "--quiet",
                "--foreground",
                "--",
                "30s",
                "-5s",
                "0",
                "1ms",
                "redis://127.0.0.1:1",
                "",
                "name",
                "--help",
            ])
            .prop_map(String::from),
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        /// Whatever the arguments, clap parses them or says why: never a panic (clap's own
        /// debug assertions on the command's definition run here too).
        #[test]
        fn any_command_line_parses_or_is_refused(words in prop::collection::vec(word(), 0..8)) {
            let args = std::iter::once("redis-locks".to_string()).chain(words);
            match Cli::try_parse_from(args) {
                Ok(_) => {}
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
        }
    }
}
