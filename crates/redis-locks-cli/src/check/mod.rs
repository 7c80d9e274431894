//! `redis-locks check`: the safety checker and fault suite, as a tool anyone can run.
//!
//! A run is P worker processes × T tasks × N acquisitions of one lock; every holder does a
//! read-modify-write of a resource on a server of its own (fenced by the holder's token, as a
//! store that checks fencing tokens would), while faults are injected: holders killed or
//! stopped, the lock server frozen, put to sleep, paused, restarted, cut off, its connections
//! killed, Redlock nodes lost. Every holding is recorded and [`verdict`] checks the record.
//! Seed 000's algorithms ([`legacy`]) run through the same workload to show what the checks
//! catch. Each scenario (algorithm × primitive × fault) is one row of the table.

mod chart;
mod clock;
mod failover;
mod fault;
mod legacy;
pub mod metrics;
pub mod plan;
mod progress;
mod proxy;
mod resource;
mod scenario;
mod verdict;
pub mod worker;

use std::path::PathBuf;
use std::time::Duration;

use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;
use cli_support::redis_target::RedisTarget;
use cli_support::settings::{ReplicationArgs, SettingsArgs};
use cli_support::topology::{TopologyArgs, Wanted};
use serde::Serialize;

use fault::{Fault, TopologyKind};
use plan::{Algorithm, CheckPrimitive};
use scenario::{REDLOCK_NODES, Scenario};
use verdict::Verdict;

/// The options of `redis-locks check`.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The lock algorithm; give it several times for a side-by-side table. `ours` is this
    /// library; the others are broken on purpose, kept to be caught: seed 000's locks, and a
    /// counter semaphore and a caller-order MultiLock as peers build them.
    #[arg(long, value_enum, default_values_t = [Algorithm::Ours])]
    pub algorithm: Vec<Algorithm>,
    /// The primitive of `--algorithm ours` (`counter-semaphore` and `caller-order-multilock`
    /// are a semaphore's and a MultiLock's); several for several rows.
    #[arg(long, value_enum, default_values_t = [CheckPrimitive::Mutex])]
    pub primitive: Vec<CheckPrimitive>,
    /// N, the permits of `--primitive semaphore` and of `counter-semaphore` (1 to 64): never
    /// more than N holders at once is the check.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub permits: u32,
    /// N, the most names of one acquisition of `--primitive multilock` and of
    /// `caller-order-multilock` (2 to 16): each takes
    /// a random 2 to N of a pool of 2N names, named in a random order; no name may be held by
    /// two at once, and no acquisition may be stuck.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub names: u32,
    /// A fault to inject, one row each; join faults with `+` to inject them in one run
    /// (`server-pause+holder-kill`). Without it: none, holder-kill, holder-pause. Faults:
    /// none, holder-kill, holder-pause, server-pause, server-sleep, client-pause, client-kill,
    /// server-restart, server-restart-aof, partition, server-clock-jump, client-clock-step,
    /// latency, latency-high, packet-burst, packet-loss, busy-script, redlock-minority,
    /// redlock-majority; with a bare --cluster: cluster-failover, slot-migration,
    /// cluster-kill; with a bare --sentinel: sentinel-failover, sentinel-kill (README: what
    /// each does).
    #[arg(long, value_parser = parse_faults)]
    pub fault: Vec<Vec<Fault>>,
    /// Worker processes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(2..=64))]
    pub processes: u16,
    /// Tasks in each worker process.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub tasks: u16,
    /// Acquisitions per task.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub count: u32,
    /// The lease every acquisition asks for (50ms to 60s).
    #[arg(long, default_value = "1s", value_parser = cli_support::parse_duration)]
    pub lease: Duration,
    /// How long a holder works between its read and its write (up to 10s).
    #[arg(long, default_value = "1ms", value_parser = cli_support::parse_duration)]
    pub hold: Duration,
    /// How many times each fault strikes in a run (1 to 10).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=10))]
    pub injections: u16,
    /// How long one run may take before it counts as hung.
    #[arg(long, default_value = "60s", value_parser = cli_support::parse_duration)]
    pub timeout: Duration,
    /// The long form: every primitive over 8 processes × 4 tasks × 3,125 acquisitions
    /// (100,000 each; no work between a holder's read and write) without faults, then every
    /// fault that applies (partition only as root) at the usual sizes.
    #[arg(long)]
    pub long: bool,
    // `--cluster` / `--sentinel`: a Redis Cluster or a Sentinel-watched master (bare: private
    // ones, started once for the whole check). Declared before `--redis`: it asks whether
    // `--redis` came from the environment, and clap hands each field its values in turn.
    #[command(flatten)]
    pub topology: TopologyArgs,
    /// Lock servers to check against (several: a Redlock's nodes) instead of private ones;
    /// faults that need the server process (server-pause, server-restart*, redlock-*) are
    /// refused then. The resource always lives on a private server.
    #[arg(long, env = "REDIS_URL", value_delimiter = ',')]
    pub redis: Vec<String>,
    /// TLS (for lock servers named by URL) and the key namespace.
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Replicated acquisition (a lock server with replicas: a bare --sentinel, or yours).
    #[command(flatten)]
    pub replication: ReplicationArgs,
    /// Print one JSON object (the scenarios and their verdicts) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write a timeline of every holding and fault as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<PathBuf>,
    /// Serve the library's metrics of every worker process (`redis_locks_...`) for
    /// Prometheus at http://ADDR/ while the check runs, e.g. 127.0.0.1:9187.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// Parses `holder-kill` or `server-pause+holder-kill`.
fn parse_faults(text: &str) -> Result<Vec<Fault>, String> {
    text.split('+')
        .map(|name| {
            <Fault as clap::ValueEnum>::from_str(name.trim(), false).map_err(|_| {
                let names: Vec<&str> = <Fault as clap::ValueEnum>::value_variants()
                    .iter()
                    .map(|f| f.label())
                    .collect();
                format!("unknown fault {name:?}; faults: {}", names.join(", "))
            })
        })
        .collect()
}

/// The JSON output.
#[derive(Serialize)]
struct Output<'a> {
    passed: bool,
    runs: Vec<Run<'a>>,
}

#[derive(Serialize)]
struct Run<'a> {
    scenario: &'a Scenario,
    verdict: &'a Verdict,
    /// The faults as they struck (monotonic ns, see `clock`).
    injections: &'a [scenario::Injection],
    /// The holdings a fault struck in: long holds, stopped holders, killed holders.
    struck: Vec<&'a plan::Holding>,
    /// Holders killed while holding.
    crashed: &'a [scenario::Crashed],
}

/// Runs every scenario, prints the table (or JSON), writes the chart; fails (exit 1) when a
/// check failed.
pub async fn run(args: &CheckArgs) -> Result<(), CliError> {
    let wanted = args.topology.wanted(args.redis.clone())?;
    let settings = args
        .settings
        .settings()?
        .with_replication(&args.replication);
    settings.check_files()?;
    let scenarios = scenarios(args, &wanted)?;
    if let Some(addr) = args.metrics_addr {
        metrics::serve(addr)?;
    }
    if settings.replicas().is_some() {
        if scenarios.iter().any(Scenario::redlock) {
            return Err(CliError::Usage(
                "--replicas: a Redlock's nodes are independent masters with no replicas to \
                 wait for; check another --primitive"
                    .into(),
            ));
        }
        if let Some(algorithm) = args.algorithm.iter().find(|a| **a != Algorithm::Ours) {
            return Err(CliError::Usage(format!(
                "--replicas is this library's replicated acquisition: --algorithm {} has none",
                algorithm.label()
            )));
        }
    }
    let private = match &wanted {
        Wanted::Servers(urls) | Wanted::Cluster(urls) => urls.is_empty(),
        Wanted::Sentinel { sentinels, .. } => sentinels.is_empty(),
    };
    if settings.has_tls_files() && private {
        return Err(CliError::Usage(
            "--tls-ca, --tls-cert and --tls-key are for rediss:// lock servers named with \
             --redis, --cluster or --sentinel; the private servers check starts are plaintext"
                .into(),
        ));
    }
    if let Some(path) = &args.chart {
        // Say the chart cannot be written before the runs, not after.
        chart::can_write(path)?;
    }
    // Listening from the start: a signal that comes while servers start is not lost either.
    let mut signals = Signals::new()?;
    // The lock servers every scenario uses, unless each starts its own (the runs of a
    // topology fault start a private cluster or Sentinel set-up each).
    let shared = scenarios
        .iter()
        .any(|s| s.faults.iter().all(|f| f.topology().is_none()));
    let target = match wanted {
        Wanted::Servers(urls) if urls.is_empty() => None,
        Wanted::Servers(urls) => Some(RedisTarget::at(Endpoint::servers(urls, settings.clone()))),
        _ if !shared => None,
        other => Some(RedisTarget::private_or(other, 1, settings.clone())?),
    };
    let given = target.as_ref().map(RedisTarget::endpoint);
    if let Some(target) = &target {
        if !args.json {
            eprintln!("check: lock servers: {}", target.describe());
        }
        preflight(target.endpoint()).await?;
    }
    let progress = progress::Progress::new(scenarios.len(), args.json);
    let mut done = Vec::new();
    for scenario in scenarios {
        progress.start(&scenario.label());
        let lock = scenario::lock_name();
        // Interrupted, the run is dropped: its workers are killed, its servers stopped, its
        // faults undone (a stopped server resumed, an iptables rule removed).
        let record = tokio::select! {
            record = scenario::run(&scenario, given, &settings, &lock) => record,
            signal = signals.next() => Err(CliError::CheckFailed(format!(
                "interrupted by {signal}: nothing is proven; servers and workers stopped"
            ))),
        };
        // What the run left on the user's servers goes, whatever happened.
        let own = scenario.faults.iter().any(|f| f.topology().is_some());
        if let Some(given) = given
            && !own
        {
            scenario::cleanup(given, &lock).await;
        }
        let record = record?;
        if let Some(servers) = &record.servers {
            progress.note(&format!(
                "check:   on {servers}, started for this run and stopped at its end"
            ));
        }
        let verdict = verdict::judge(&scenario, &record);
        done.push((scenario, record, verdict));
        progress.done();
    }
    // Cleared before the table, so the table starts on a clean line.
    drop(progress);
    let passed = done.iter().all(|(_, _, v)| v.passed);
    if args.json {
        let output = Output {
            passed,
            runs: done
                .iter()
                .map(|(scenario, record, verdict)| Run {
                    scenario,
                    verdict,
                    injections: &record.injections,
                    struck: record
                        .holdings
                        .iter()
                        .filter(|h| h.lingered || h.paused)
                        .collect(),
                    crashed: &record.crashed,
                })
                .collect(),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&output).expect("plain data serializes")
        );
    } else {
        print_table(&done.iter().map(|(_, _, v)| v).collect::<Vec<_>>());
    }
    if let Some(path) = &args.chart {
        let runs: Vec<_> = done.iter().map(|(s, r, v)| (s, r, v)).collect();
        chart::draw(path, &runs)?;
    }
    if passed {
        Ok(())
    } else {
        Err(CliError::CheckFailed(
            "a check failed: see the table (violations are listed under it)".into(),
        ))
    }
}

/// The runs the arguments ask for.
fn scenarios(args: &CheckArgs, wanted: &Wanted) -> Result<Vec<Scenario>, CliError> {
    // Lock servers given (or a cluster or Sentinel set-up started once for the check).
    let given = !matches!(wanted, Wanted::Servers(urls) if urls.is_empty());
    // Servers this check did not start: named by a URL.
    let users = match wanted {
        Wanted::Servers(urls) | Wanted::Cluster(urls) => !urls.is_empty(),
        Wanted::Sentinel { sentinels, .. } => !sentinels.is_empty(),
    };
    let kind = match wanted {
        Wanted::Servers(_) => None,
        Wanted::Cluster(_) => Some(TopologyKind::Cluster),
        Wanted::Sentinel { .. } => Some(TopologyKind::Sentinel),
    };
    let topology = kind.map(TopologyKind::flag);
    let default_faults = vec![
        vec![Fault::None],
        vec![Fault::HolderKill],
        vec![Fault::HolderPause],
    ];
    let all_faults: Vec<Vec<Fault>> = <Fault as clap::ValueEnum>::value_variants()
        .iter()
        .filter(|f| !f.needs_iptables() || running_as_root())
        .filter(|f| f.runs_on(kind))
        .filter(|f| !(users && f.needs_private_servers()))
        .map(|f| vec![*f])
        .collect();
    let fault_sets = if !args.fault.is_empty() {
        args.fault.clone()
    } else if args.long {
        all_faults
    } else {
        default_faults
    };
    if args.hold > Duration::from_secs(10) {
        return Err(CliError::Usage("--hold: at most 10s".into()));
    }
    if args.lease < Duration::from_millis(50) || args.lease > Duration::from_secs(60) {
        return Err(CliError::Usage("--lease: from 50ms to 60s".into()));
    }
    if args.timeout.is_zero() {
        return Err(CliError::Usage("--timeout: must be more than 0".into()));
    }
    if let Some(fault) = fault_sets.iter().flatten().find(|f| !f.runs_on(kind)) {
        return Err(CliError::Usage(match (fault.topology(), topology) {
            (Some(needed), None) => format!(
                "--fault {} runs on a private {} that check starts: add a bare {}",
                fault.label(),
                needed.describe(),
                needed.flag()
            ),
            (Some(needed), Some(flag)) => format!(
                "--fault {} runs on a private {} that check starts (a bare {}), not with \
                 {flag}",
                fault.label(),
                needed.describe(),
                needed.flag()
            ),
            (None, Some(flag)) => format!(
                "--fault {} needs a hand on one lock server: with {flag} the faults are none, \
                 holder-kill, holder-pause and client-clock-step, and on a private {} (a bare \
                 {flag}) {}",
                fault.label(),
                kind.map(TopologyKind::describe).unwrap_or_default(),
                own_faults(kind)
            ),
            (None, None) => format!("--fault {} cannot run here", fault.label()),
        }));
    }
    if let Some(flag) = topology {
        if args.primitive.contains(&CheckPrimitive::Redlock) {
            return Err(CliError::Usage(format!(
                "--primitive redlock takes independent servers (--redis), not {flag}"
            )));
        }
        if let Some(algorithm) = args.algorithm.iter().find(|a| **a != Algorithm::Ours) {
            return Err(CliError::Usage(format!(
                "--algorithm {} runs on one server: with {flag} only ours is checked",
                algorithm.label()
            )));
        }
    }
    if let Some(fault) = fault_sets
        .iter()
        .flatten()
        .find(|f| f.topology().is_some() && users)
    {
        return Err(CliError::Usage(format!(
            "--fault {} kills, freezes or reconfigures the nodes of a {}: it runs only on a \
             private one that check starts (a bare {}, without a URL), never on servers it \
             did not start",
            fault.label(),
            kind.map(TopologyKind::describe).unwrap_or_default(),
            topology.unwrap_or_default()
        )));
    }
    if given
        && let Some(fault) = fault_sets
            .iter()
            .flatten()
            .find(|f| f.needs_private_servers() && f.topology().is_none())
    {
        return Err(CliError::Usage(format!(
            "--fault {} needs the lock servers' processes: leave out --redis, --cluster and \
             --sentinel to check against private ones",
            fault.label()
        )));
    }
    for faults in &fault_sets {
        let topological: Vec<&Fault> = faults.iter().filter(|f| f.topology().is_some()).collect();
        if topological.len() > 1
            && let Some(kill) = topological.iter().find(|f| f.max_strikes().is_some())
        {
            return Err(CliError::Usage(format!(
                "--fault {} leaves the lock's shard without a replica to promote: give it a \
                 run of its own, not joined with another failover",
                kill.label()
            )));
        }
    }
    let primitives = if args.long {
        let mut all = vec![
            CheckPrimitive::Mutex,
            CheckPrimitive::Fair,
            CheckPrimitive::Reentrant,
            CheckPrimitive::Rwlock,
            CheckPrimitive::Redlock,
        ];
        if topology.is_some() {
            all.retain(|p| *p != CheckPrimitive::Redlock);
        }
        all.push(CheckPrimitive::Semaphore);
        all.push(CheckPrimitive::Multilock);
        all
    } else {
        args.primitive.clone()
    };
    if primitives.contains(&CheckPrimitive::Redlock)
        && args.algorithm.contains(&Algorithm::Ours)
        && matches!(wanted, Wanted::Servers(urls)
            if !urls.is_empty() && (urls.len() < 3 || urls.len().is_multiple_of(2)))
    {
        return Err(CliError::Usage(format!(
            "--primitive redlock needs an odd number (3 or more) of --redis servers, or none for {REDLOCK_NODES} private ones"
        )));
    }
    let base = |algorithm, primitive: CheckPrimitive, faults: Vec<Fault>| Scenario {
        algorithm,
        primitive,
        permits: if primitive == CheckPrimitive::Semaphore {
            args.permits
        } else {
            1
        },
        names: if primitive == CheckPrimitive::Multilock {
            args.names
        } else {
            1
        },
        faults,
        processes: args.processes as usize,
        tasks: args.tasks as usize,
        count: args.count as usize,
        lease: args.lease,
        hold: args.hold,
        injections: args.injections as usize,
        timeout: args.timeout,
    };
    let mut scenarios = Vec::new();
    for &algorithm in &args.algorithm {
        let primitives = match algorithm {
            Algorithm::Ours => primitives.clone(),
            // A legacy algorithm is one kind of lock.
            Algorithm::CounterSemaphore => vec![CheckPrimitive::Semaphore],
            Algorithm::CallerOrderMultilock => vec![CheckPrimitive::Multilock],
            _ => vec![CheckPrimitive::Mutex],
        };
        for &primitive in &primitives {
            if args.long && algorithm == Algorithm::Ours {
                let mut long = base(algorithm, primitive, vec![Fault::None]);
                long.processes = 8;
                long.tasks = 4;
                long.count = 3125;
                long.hold = Duration::ZERO;
                long.timeout = Duration::from_secs(1200);
                scenarios.push(long);
            }
            for faults in &fault_sets {
                let redlock = algorithm == Algorithm::Ours && primitive == CheckPrimitive::Redlock;
                if faults.iter().any(|f| f.redlock_only()) && !redlock {
                    continue;
                }
                if args.long && faults == &[Fault::None] && algorithm == Algorithm::Ours {
                    continue;
                }
                scenarios.push(base(algorithm, primitive, faults.clone()));
            }
        }
    }
    if scenarios.is_empty() {
        return Err(CliError::Usage(
            "nothing to run: the redlock-* faults apply to --primitive redlock only".into(),
        ));
    }
    Ok(scenarios)
}

/// SIGINT, SIGTERM and SIGHUP, caught for the whole of `check`.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals, CliError> {
        use tokio::signal::unix::{SignalKind, signal};
        let catch = |kind| {
            signal(kind).map_err(|err| CliError::CannotRun(format!("cannot catch signals: {err}")))
        };
        Ok(Signals {
            int: catch(SignalKind::interrupt())?,
            term: catch(SignalKind::terminate())?,
            hup: catch(SignalKind::hangup())?,
        })
    }

    /// Resolves at the next signal, naming it.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Refuses lock servers that cannot be reached, are not Redis, refuse this client or its
/// TLS, before any worker: a lock client of every `--redis` server, of the cluster or of the
/// Sentinel master, with the settings the workers use.
async fn preflight(endpoint: &Endpoint) -> Result<(), CliError> {
    for node in endpoint.nodes() {
        node.connect().await?;
    }
    Ok(())
}

/// The faults of a cluster or Sentinel set-up of its own, for a message.
fn own_faults(kind: Option<TopologyKind>) -> String {
    let names: Vec<&str> = <Fault as clap::ValueEnum>::value_variants()
        .iter()
        .filter(|f| kind.is_some() && f.topology() == kind)
        .map(|f| f.label())
        .collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The side-by-side table, then the violations of every failed run.
fn print_table(verdicts: &[&Verdict]) {
    let header = [
        "run",
        "acquisitions",
        "overlaps",
        "token regressions",
        "lost updates",
        "stale writes",
        "fenced refusals",
        "keys without TTL",
        "hung",
        "loss signals: lead on lease end / next holder",
        "verdict",
    ];
    println!("| {} |", header.join(" | "));
    println!("|{}", "---|".repeat(header.len()));
    for v in verdicts {
        let mut overlaps = if v.excused_overlaps > 0 {
            format!("{} (+{} excused)", v.overlaps, v.excused_overlaps)
        } else {
            v.overlaps.to_string()
        };
        if let (Some(most), Some(permits)) = (v.most_at_once, v.permits) {
            // A semaphore's "overlaps" are the times over N.
            overlaps = format!("{overlaps} over N (at most {most} of {permits} at once)");
        }
        let ms = |ms: Option<f64>| ms.map_or("–".to_string(), |ms| format!("{ms:+.1} ms"));
        let margin = match v.loss_signals {
            0 => "0".to_string(),
            n => format!("{n}: {} / {}", ms(v.loss_lead_ms), ms(v.loss_margin_ms)),
        };
        let cells = [
            v.label.clone(),
            format!("{} ({} killed)", v.acquisitions, v.crashed),
            overlaps,
            v.token_regressions
                .map_or("n/a".to_string(), |n| n.to_string()),
            v.lost_updates.to_string(),
            v.stale_writes.to_string(),
            v.fenced_refusals.to_string(),
            v.keys_without_ttl.to_string(),
            match (v.hung, v.stuck) {
                (hung, Some(stuck)) if stuck > 0 => {
                    format!("{} ({stuck} stuck)", if hung { "yes" } else { "no" })
                }
                (true, _) => "yes".to_string(),
                (false, _) => "no".to_string(),
            },
            margin,
            if v.passed { "pass" } else { "FAIL" }.to_string(),
        ];
        println!("| {} |", cells.join(" | "));
    }
    for v in verdicts
        .iter()
        .filter(|v| !v.examples.is_empty() || !v.notes.is_empty())
    {
        println!("\n{}:", v.label);
        for example in &v.examples {
            println!("  - {example}");
        }
        for note in &v.notes {
            println!("  - note: {note}");
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, ValueEnum};

    use super::fault::Fault;
    use super::parse_faults;

    #[test]
    fn the_help_names_every_fault_and_each_name_parses() {
        let command = crate::Cli::command();
        let check = command.find_subcommand("check").unwrap();
        let fault = check
            .get_arguments()
            .find(|arg| arg.get_id() == "fault")
            .unwrap();
        let help = fault
            .get_long_help()
            .or(fault.get_help())
            .unwrap()
            .to_string();
        for f in Fault::value_variants() {
            assert!(
                help.contains(f.label()),
                "{} missing from: {help}",
                f.label()
            );
            assert_eq!(parse_faults(f.label()), Ok(vec![*f]));
        }
        assert_eq!(
            parse_faults("server-pause+holder-kill"),
            Ok(vec![Fault::ServerPause, Fault::HolderKill])
        );
        assert!(
            parse_faults("server-pause+")
                .unwrap_err()
                .contains("unknown fault")
        );
    }
}
