//! `bench hold-many`: one `Client` takes N `Mutex`es, holds them with the watchdog for a
//! while (at least two leases), and releases them: what a held lock costs the client and the
//! server, with the watchdog's batched renewals and, with `--compare`, one request per
//! renewal beside them in the same run.

use std::time::Duration;

use cli_support::endpoint::{Endpoint, Place, SideConnection};
use cli_support::exit::CliError;
use futures_util::StreamExt;
use redis_locks::{ClientOptions, DEFAULT_RENEWAL_BATCH, LockOptions, MutexGuard};
use serde::Serialize;
use tokio::time::Instant;

use crate::stats::print_table;

/// How many acquisitions and releases are under way at once.
const AT_ONCE: usize = 256;

/// `bench hold-many`'s options.
#[derive(Debug, Clone, clap::Args)]
pub struct HoldManyArgs {
    /// How many locks the one client holds at once.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub locks: u32,
    /// Each lock's lease, renewed by the watchdog every third of it.
    #[arg(long, default_value = "30s", value_parser = super::parse_run_length)]
    pub lease: Duration,
    /// How long the locks are held once all are taken: at least two leases (default: two
    /// and a half).
    #[arg(long, value_parser = super::parse_run_length)]
    pub hold: Option<Duration>,
    /// The most renewals sent in one round trip (`ClientOptions::renewal_batch`).
    #[arg(long, default_value_t = DEFAULT_RENEWAL_BATCH as u32, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub batch: u32,
    /// Also run with one request per renewal (`renewal_batch(1)`), after the batched run:
    /// the before, in the same run.
    #[arg(long)]
    pub compare: bool,
}

impl HoldManyArgs {
    /// How long the locks are held.
    fn hold(&self) -> Duration {
        self.hold.unwrap_or(self.lease * 5 / 2)
    }

    /// Refuses a hold shorter than two leases, and a place that is not one server.
    pub fn check(&self, topology: Option<&str>) -> Result<(), CliError> {
        if self.hold() < self.lease * 2 {
            return Err(CliError::Usage(format!(
                "--hold {} is shorter than two leases of {}: the locks must be renewed",
                humantime::format_duration(self.hold()),
                humantime::format_duration(self.lease)
            )));
        }
        if let Some(topology) = topology {
            return Err(CliError::Usage(format!(
                "hold-many measures one server (its INFO), not {topology}"
            )));
        }
        Ok(())
    }
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct HoldManyReport {
    /// Locks held at once.
    pub locks: u32,
    /// The most renewals in one round trip (1: one request per renewal).
    pub batch: usize,
    /// The lease, in seconds.
    pub lease_s: f64,
    /// How long all were held, in seconds.
    pub hold_s: f64,
    /// Locks whose guard reported them lost before the release (must be 0).
    pub lost: u32,
    /// The time to take them all, in seconds (256 at once).
    pub acquire_s: f64,
    /// The time to release them all, in seconds (256 at once).
    pub release_s: f64,
    /// The client's round trips per second while holding (all of them renewals).
    pub renewal_round_trips_per_s: f64,
    /// Script calls per second on the server while holding (`INFO commandstats`: `EVALSHA`,
    /// `EVAL`, `FCALL`).
    pub script_calls_per_s: f64,
    /// Server time of those script calls per held lock, in microseconds per second of hold
    /// (`INFO commandstats` usec).
    pub redis_script_us_per_lock_s: f64,
    /// The server's CPU (user + system, `INFO cpu`) per held lock, in microseconds per
    /// second of hold.
    pub redis_cpu_us_per_lock_s: f64,
    /// The server's `used_memory` growth while the locks were taken, per lock.
    pub redis_bytes_per_lock: f64,
    /// The client process's resident memory growth while the locks were taken, per lock.
    pub client_bytes_per_lock: f64,
}

/// The server's counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct ServerStats {
    script_calls: u64,
    script_usec: u64,
    cpu_s: f64,
    used_memory: u64,
}

/// Runs `bench hold-many` on `endpoint`.
pub async fn run(endpoint: &Endpoint, args: &HoldManyArgs, json: bool) -> Result<(), CliError> {
    if !matches!(endpoint.place(), Place::Servers(urls) if urls.len() == 1) {
        return Err(CliError::Usage(
            "hold-many measures one server (its INFO): give one --redis".into(),
        ));
    }
    let mut side = endpoint.side().await?;
    let batched = hold_once(endpoint, &mut side, args, args.batch as usize).await?;
    let before = if args.compare {
        Some(hold_once(endpoint, &mut side, args, 1).await?)
    } else {
        None
    };
    if json {
        let mut object = serde_json::to_value(&batched).expect("a report serializes");
        if let Some(before) = &before {
            object["one_per_lock"] = serde_json::to_value(before).expect("a report serializes");
        }
        println!("{object}");
    } else {
        print_report(&batched, before.as_ref());
    }
    let lost = batched.lost + before.as_ref().map_or(0, |before| before.lost);
    if lost > 0 {
        return Err(CliError::CheckFailed(format!(
            "{lost} held locks were lost"
        )));
    }
    Ok(())
}

/// One run: take, hold, release, with renewals of at most `batch` a round trip.
async fn hold_once(
    endpoint: &Endpoint,
    side: &mut SideConnection,
    args: &HoldManyArgs,
    batch: usize,
) -> Result<HoldManyReport, CliError> {
    let options: ClientOptions = endpoint.client_options()?.renewal_batch(batch);
    let client = endpoint.connect_with(options).await?;
    let lock_options = LockOptions::default().lease(args.lease).watchdog(true);
    let names: Vec<String> = (0..args.locks)
        .map(|i| format!("bench:hold-many:{i}"))
        .collect();

    let (server_before, rss_before) = (server_stats(side).await?, rss_bytes());
    let started = Instant::now();
    let mut taken = Vec::with_capacity(names.len());
    let mut acquisitions = futures_util::stream::iter(&names)
        .map(|name| {
            let (client, lock_options) = (&client, lock_options.clone());
            async move { client.mutex_with(name, lock_options)?.lock().await }
        })
        .buffer_unordered(AT_ONCE);
    while let Some(taken_one) = acquisitions.next().await {
        taken.push(taken_one);
    }
    drop(acquisitions);
    let acquire = started.elapsed();
    // Sized once: a Vec grown by doubling would count up to half its size again as the
    // client's memory.
    let mut guards = Vec::with_capacity(taken.len());
    for guard in taken {
        guards.push(guard?);
    }
    let (server_held, rss_held) = (server_stats(side).await?, rss_bytes());

    let requests_before = client.stats().requests;
    let holding = Instant::now();
    tokio::time::sleep(args.hold()).await;
    let held = holding.elapsed().as_secs_f64();
    let renewals = client.stats().requests - requests_before;
    let server_after = server_stats(side).await?;
    let lost = guards
        .iter()
        .filter(|guard| guard.lost_reason().is_some())
        .count() as u32;

    let releasing = Instant::now();
    let released: Vec<_> = futures_util::stream::iter(guards)
        .map(MutexGuard::release)
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let release = releasing.elapsed();
    delete_counters(endpoint, side, &names).await?;
    // A lock found gone at its release was lost too (its guard may not have known yet).
    let lost = lost.max(released.iter().filter(|outcome| outcome.is_err()).count() as u32);

    let n = f64::from(args.locks);
    let per_lock_s = |value: f64| value / n / held;
    Ok(HoldManyReport {
        locks: args.locks,
        batch,
        lease_s: args.lease.as_secs_f64(),
        hold_s: held,
        lost,
        acquire_s: acquire.as_secs_f64(),
        release_s: release.as_secs_f64(),
        renewal_round_trips_per_s: renewals as f64 / held,
        script_calls_per_s: (server_after.script_calls - server_held.script_calls) as f64 / held,
        redis_script_us_per_lock_s: per_lock_s(
            (server_after.script_usec - server_held.script_usec) as f64,
        ),
        redis_cpu_us_per_lock_s: per_lock_s((server_after.cpu_s - server_held.cpu_s) * 1e6),
        redis_bytes_per_lock: (server_held.used_memory as f64 - server_before.used_memory as f64)
            / n,
        client_bytes_per_lock: (rss_held as f64 - rss_before as f64) / n,
    })
}

/// Deletes the locks' fencing counters (they never expire), a thousand a round trip.
async fn delete_counters(
    endpoint: &Endpoint,
    side: &mut SideConnection,
    names: &[String],
) -> Result<(), CliError> {
    for chunk in names.chunks(1000) {
        let mut pipe = redis::pipe();
        for name in chunk {
            let keys = endpoint.keys(name)?;
            pipe.cmd("DEL").arg(keys.fence()).arg(keys.epoch()).ignore();
        }
        pipe.query_async::<()>(side)
            .await
            .map_err(|err| CliError::Unavailable(format!("deleting fencing counters: {err}")))?;
    }
    Ok(())
}

/// The server's script calls and their time (`INFO commandstats`), CPU (`INFO cpu`) and
/// memory (`INFO memory`).
async fn server_stats(side: &mut SideConnection) -> Result<ServerStats, CliError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .arg("memory")
        .query_async(side)
        .await
        .map_err(|err| CliError::Unavailable(format!("INFO: {err}")))?;
    Ok(parse_info(&info))
}

/// Reads [`ServerStats`] out of an `INFO` reply.
fn parse_info(info: &str) -> ServerStats {
    let mut stats = ServerStats::default();
    for line in info.lines() {
        let Some((field, value)) = line.trim().split_once(':') else {
            continue;
        };
        match field {
            "cmdstat_evalsha" | "cmdstat_eval" | "cmdstat_fcall" => {
                for pair in value.split(',') {
                    match pair.split_once('=') {
                        Some(("calls", calls)) => stats.script_calls += calls.parse().unwrap_or(0),
                        Some(("usec", usec)) => stats.script_usec += usec.parse().unwrap_or(0),
                        _ => {}
                    }
                }
            }
            "used_cpu_sys" | "used_cpu_user" => stats.cpu_s += value.parse().unwrap_or(0.0),
            "used_memory" => stats.used_memory = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    stats
}

/// This process's resident memory, in bytes (`VmRSS` of /proc/self/status; 0 where there is
/// none).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                let kb = line.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?;
                kb.trim().parse::<u64>().ok()
            })
        })
        .map_or(0, |kb| kb * 1024)
}

fn print_report(batched: &HoldManyReport, before: Option<&HoldManyReport>) {
    println!(
        "hold-many: {} Mutexes on one Client, lease {:?}, held {:.1} s\n",
        batched.locks,
        Duration::from_secs_f64(batched.lease_s),
        batched.hold_s
    );
    let mut rows = vec![vec![
        "renewals".into(),
        "lost".into(),
        "acquire s".into(),
        "release s".into(),
        "round trips/s".into(),
        "script calls/s".into(),
        "script µs/lock/s".into(),
        "CPU µs/lock/s".into(),
        "Redis B/lock".into(),
        "client B/lock".into(),
    ]];
    for report in std::iter::once(batched).chain(before) {
        let mode = if report.batch > 1 {
            format!("batches of {}", report.batch)
        } else {
            "one per lock".into()
        };
        rows.push(vec![
            mode,
            report.lost.to_string(),
            format!("{:.2}", report.acquire_s),
            format!("{:.2}", report.release_s),
            format!("{:.1}", report.renewal_round_trips_per_s),
            format!("{:.0}", report.script_calls_per_s),
            format!("{:.3}", report.redis_script_us_per_lock_s),
            format!("{:.3}", report.redis_cpu_us_per_lock_s),
            format!("{:.0}", report.redis_bytes_per_lock),
            format!("{:.0}", report.client_bytes_per_lock),
        ]);
    }
    print_table(&rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,\
                    rejected_calls=0,failed_calls=0\r\ncmdstat_eval:calls=2,usec=8,usec_per_call=4\r\n\
                    cmdstat_get:calls=7,usec=1\r\n# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:0.25\r\n\
                    # Memory\r\nused_memory:1024\r\nused_memory_human:1K\r\n";
        let stats = parse_info(info);
        assert_eq!(stats.script_calls, 12);
        assert_eq!(stats.script_usec, 58);
        assert!((stats.cpu_s - 1.75).abs() < 1e-9);
        assert_eq!(stats.used_memory, 1024);
    }
}
