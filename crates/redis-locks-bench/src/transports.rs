//! `bench transports`: what TLS and replicated acquisition cost an uncontended lock, each
//! beside its plain form in the same run.
//!
//! Private servers only (they are made for the run): a plaintext server, a TLS one (with a
//! CA made for the run), and a master with one replica. One worker per mode takes and
//! releases its own `Mutex` over and over; the modes take turns in short rounds, so the
//! machine's noise falls on all of them alike.

use std::time::{Duration, Instant};

use clap::Args;
use redis_locks::{Client, ClientOptions, LockOptions, Replication};
use serde::Serialize;
use test_support::{RedisServer, TlsFiles, TlsServerOptions};

use crate::baseline::BareLock;
use crate::stats::{Latencies, Summary, print_table};
use cli_support::endpoint::SideConnection;
use cli_support::exit::CliError;

/// `bench transports` options.
#[derive(Debug, Clone, Args)]
pub struct TransportsArgs {
    /// How long each mode runs in each round.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How many rounds (the modes take turns within each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The `WAIT` timeout of replicated acquisition.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub replicas_timeout: Duration,
}

/// One mode's figures.
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    /// What was measured.
    pub mode: &'static str,
    /// Acquire+release cycles per second.
    pub ops_per_s: f64,
    /// Latency of one acquire+release.
    pub latency: Summary,
    /// Round trips per cycle.
    pub requests_per_op: f64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct TransportsResult {
    /// Each mode, in the order measured.
    pub modes: Vec<ModeResult>,
    /// TLS throughput over plaintext throughput (the library).
    pub tls_ratio: f64,
    /// The same for the bare floor: what TLS costs any lock on this machine.
    pub tls_floor_ratio: f64,
    /// What TLS adds to one request, in microseconds (from the cycle times).
    pub tls_cost_per_request_us: f64,
    /// Replicated acquisition's p50 minus the plain p50 on the same master, in ms.
    pub replicated_added_p50_ms: f64,
}

struct Mode {
    name: &'static str,
    taker: Taker,
    latencies: Latencies,
    ops: u64,
    busy: Duration,
    requests: u64,
}

/// What takes the lock: the library, or the bare floor (`SET NX PX` + compare-and-delete on
/// a redis-rs connection: what any lock on this transport costs at least).
enum Taker {
    Library(Client, LockOptions),
    Bare(BareLock),
}

impl Mode {
    async fn new(
        name: &'static str,
        url: &str,
        client_options: ClientOptions,
        options: LockOptions,
    ) -> Result<Mode, CliError> {
        let client = Client::connect_with(url, client_options).await?;
        Ok(Mode::of(name, Taker::Library(client, options)))
    }

    /// The bare floor over `client`'s connection.
    async fn bare(name: &'static str, client: redis::Client) -> Result<Mode, CliError> {
        let connection = redis::aio::ConnectionManager::new(client)
            .await
            .map_err(|err| CliError::Unavailable(format!("{name}: {err}")))?;
        let lock = BareLock::new(SideConnection::Server(connection), Duration::from_secs(10));
        Ok(Mode::of(name, Taker::Bare(lock)))
    }

    fn of(name: &'static str, taker: Taker) -> Mode {
        Mode {
            name,
            taker,
            latencies: Latencies::default(),
            ops: 0,
            busy: Duration::ZERO,
            requests: 0,
        }
    }

    /// Takes and releases the mode's lock for `duration`.
    async fn round(&mut self, duration: Duration) -> Result<(), CliError> {
        let name = format!("bench:transports:{}", self.name);
        match &self.taker {
            Taker::Library(client, options) => {
                let mutex = client.mutex_with(&name, options.clone())?;
                // One warm-up cycle (the first grant on a connection seeds the fencing
                // counter).
                mutex.try_lock().await?.release().await?;
                let before = client.stats().requests;
                let started = Instant::now();
                while started.elapsed() < duration {
                    let cycle = Instant::now();
                    let guard = mutex.try_lock().await?;
                    guard.release().await?;
                    self.latencies.record(cycle.elapsed());
                    self.ops += 1;
                }
                self.busy += started.elapsed();
                self.requests += client.stats().requests - before;
            }
            Taker::Bare(lock) => {
                let failed = |err: redis::RedisError| CliError::Unavailable(err.to_string());
                let before = lock.requests();
                let started = Instant::now();
                while started.elapsed() < duration {
                    let cycle = Instant::now();
                    if !lock.try_acquire(&name, "bench").await.map_err(failed)?
                        || !lock.release(&name, "bench").await.map_err(failed)?
                    {
                        return Err(CliError::CheckFailed(format!(
                            "{}: an uncontended bare lock was refused",
                            self.name
                        )));
                    }
                    self.latencies.record(cycle.elapsed());
                    self.ops += 1;
                }
                self.busy += started.elapsed();
                self.requests += lock.requests() - before;
            }
        }
        Ok(())
    }

    fn result(&self) -> ModeResult {
        let ops = self.ops.max(1) as f64;
        ModeResult {
            mode: self.name,
            ops_per_s: self.ops as f64 / self.busy.as_secs_f64().max(f64::EPSILON),
            latency: self.latencies.summary(),
            requests_per_op: self.requests as f64 / ops,
        }
    }
}

/// Starts the servers, runs the rounds, prints the table (or JSON).
///
/// # Errors
/// [`CliError::Unavailable`] when a private server cannot start; a lock error as such.
pub async fn run(args: &TransportsArgs, json: bool) -> Result<u8, CliError> {
    let unavailable = |what: &str, err: test_support::SpawnError| {
        CliError::Unavailable(format!("could not start {what}: {err}"))
    };
    let files = TlsFiles::get().map_err(|err| unavailable("the TLS certificates", err))?;
    let plain = RedisServer::start().map_err(|err| unavailable("a redis-server", err))?;
    let tls = RedisServer::start_tls(TlsServerOptions::new())
        .map_err(|err| unavailable("a TLS redis-server", err))?;
    let (master, _replica) = RedisServer::start_master_and_replica(&[])
        .map_err(|err| unavailable("a master and its replica", err))?;

    let client_options = ClientOptions::default().response_timeout(Duration::from_secs(2));
    let fixed = LockOptions::default().lease(Duration::from_secs(10));
    let replicated = fixed.clone().replication(Replication::Wait {
        replicas: 1,
        timeout: args.replicas_timeout,
    });
    let bare_tls = redis::Client::build_with_tls(tls.url(), files.certificates(false))
        .map_err(|err| CliError::Unavailable(err.to_string()))?;
    let mut modes = vec![
        Mode::bare("bare plaintext", plain.client()).await?,
        Mode::bare("bare TLS", bare_tls).await?,
        Mode::new(
            "plaintext",
            &plain.url(),
            client_options.clone(),
            fixed.clone(),
        )
        .await?,
        Mode::new(
            "TLS",
            &tls.url(),
            client_options.clone().tls_ca(files.ca_pem().to_vec()),
            fixed.clone(),
        )
        .await?,
        Mode::new(
            "master+replica",
            &master.url(),
            client_options.clone(),
            fixed.clone(),
        )
        .await?,
        Mode::new(
            "master+replica, WAIT 1",
            &master.url(),
            client_options,
            replicated,
        )
        .await?,
    ];
    for _ in 0..args.rounds {
        for mode in &mut modes {
            mode.round(args.duration).await?;
        }
    }
    let results: Vec<ModeResult> = modes.iter().map(Mode::result).collect();
    let (bare_plain, bare_tls) = (&results[0], &results[1]);
    let (plain, tls, master, waited) = (&results[2], &results[3], &results[4], &results[5]);
    let cycle_us = |mode: &ModeResult| 1e6 / mode.ops_per_s.max(f64::EPSILON);
    let report = TransportsResult {
        tls_ratio: tls.ops_per_s / plain.ops_per_s.max(f64::EPSILON),
        tls_floor_ratio: bare_tls.ops_per_s / bare_plain.ops_per_s.max(f64::EPSILON),
        tls_cost_per_request_us: (cycle_us(tls) - cycle_us(plain))
            / tls.requests_per_op.max(f64::EPSILON),
        replicated_added_p50_ms: waited.latency.p50_ms - master.latency.p50_ms,
        modes: results.clone(),
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|err| CliError::Unavailable(err.to_string()))?
        );
        return Ok(0);
    }
    let mut rows = vec![vec![
        "mode".to_string(),
        "ops/s".into(),
        "p50 ms".into(),
        "p99 ms".into(),
        "requests/op".into(),
    ]];
    for mode in &results {
        rows.push(vec![
            mode.mode.to_string(),
            format!("{:.0}", mode.ops_per_s),
            format!("{:.3}", mode.latency.p50_ms),
            format!("{:.3}", mode.latency.p99_ms),
            format!("{:.2}", mode.requests_per_op),
        ]);
    }
    print_table(&rows);
    println!(
        "TLS / plaintext throughput: {:.2}x for the library, {:.2}x for the bare floor \
         ({:.1} µs more per request); WAIT 1 adds {:.3} ms at p50",
        report.tls_ratio,
        report.tls_floor_ratio,
        report.tls_cost_per_request_us,
        report.replicated_added_p50_ms
    );
    Ok(0)
}
