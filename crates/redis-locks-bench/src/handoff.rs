//! `bench handoff`: W workers contend for ONE lock — acquire, hold H, release, think T — so a
//! waiting worker must take over. Measures how fast and how fairly the lock changes hands,
//! for `Mutex`, `FairMutex`, and the fixed-delay polling loop most peers use; with
//! `--kind rwlock`, R readers and W writers sharing one `RwLock`; and with `--kind semaphore`,
//! W workers sharing the N permits (`--permits`) of one `Semaphore`: how much of the time
//! the permits are in use, how long a worker waits for one, and what it costs.
//!
//! While the workers run, each process counts the holders it has right now ([`Occupancy`]):
//! a holder that enters beside an exclusive one (a writer, any holder of a mutex) fails the
//! run at once; afterwards the recorded intervals of all processes are checked again.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_locks::{Client, OwnerToken};
use serde::Serialize;
use test_support::history::{Interval, check_modes, check_permits, now_nanos};

use super::baseline::BareLock;
use super::stats::{Latencies, Summary, Ticker, print_table, progress};
use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;
use cli_support::leftovers::delete_counters;
use cli_support::primitive::{Handle, Primitive};

/// Options of `bench handoff`.
#[derive(Debug, Clone, clap::Args)]
pub struct HandoffArgs {
    /// Run this variant only: mutex, fair-mutex, polling, rwlock (--readers and --writers
    /// on one RwLock), redlock (one Redlock over every --redis node, or --nodes private
    /// servers), or semaphore (--workers on the --permits of one Semaphore). By default mutex, fair-mutex and polling, one after another (and redlock
    /// too when several nodes are given), all on the first node but redlock.
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// Workers contending for the one lock [default: 8] (not with --kind rwlock).
    #[arg(long, value_parser = clap::value_parser!(u16).range(2..=1024))]
    pub workers: Option<u16>,
    /// With --kind rwlock: workers that read [default: 8].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub readers: Option<u16>,
    /// With --kind rwlock: workers that write [default: 2].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub writers: Option<u16>,
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
    /// Before the run, take and release the lock once with each client (each worker's, with
    /// --client-per-worker), unmeasured: the run then starts after every client's first
    /// contact with the servers (connections, the function library), so the waits are the
    /// hand-over's alone.
    #[arg(long)]
    pub warm_up: bool,
    /// Spread the workers over this many OS processes (this program started again for each
    /// share), each with its own clients; requests are counted over all of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub processes: u16,
    /// Run the variant (mutex or fair-mutex; mutex by default) in three layouts of its
    /// workers: one shared `Client`, a `Client` per worker, and a `Client` per worker spread
    /// over --processes processes (8 if not given), in 10 alternating slices of a tenth of
    /// --duration each; report each layout beside the shared one. The ratios then come from
    /// one run: the machine's drift between runs minutes apart does not enter them.
    #[arg(long, conflicts_with = "client_per_worker")]
    pub compare_layouts: bool,
    /// With --kind semaphore: N, the permits of the one Semaphore the workers share
    /// [default: 4]; each acquisition takes one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub permits: Option<u32>,
}

/// One process's share of a `--processes` run (started by `handoff`; not for direct use).
#[derive(Debug, Clone, clap::Args)]
pub struct HandoffWorkerArgs {
    /// The variant (its `--kind`) and its settings.
    #[command(flatten)]
    handoff: HandoffArgs,
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

/// A variant of `bench handoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Mutex,
    FairMutex,
    Polling,
    Rwlock,
    Redlock,
    Semaphore,
}

impl Kind {
    /// The name `--kind` takes.
    fn cli_name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::FairMutex => "fair-mutex",
            Kind::Polling => "polling",
            Kind::Rwlock => "rwlock",
            Kind::Redlock => "redlock",
            Kind::Semaphore => "semaphore",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "Mutex",
            Kind::FairMutex => "FairMutex",
            Kind::Polling => "polling",
            Kind::Rwlock => "RwLock",
            Kind::Redlock => "Redlock",
            Kind::Semaphore => "Semaphore",
        }
    }
}

impl HandoffArgs {
    /// Refuses the options that do not go with the variant asked for, or with `topology`
    /// (`--cluster` or `--sentinel`, when given).
    pub(crate) fn check(&self, topology: Option<&str>) -> Result<(), CliError> {
        if let (Some(flag), Some(Kind::Redlock)) = (topology, self.kind) {
            return Err(CliError::Usage(format!(
                "--kind redlock takes independent servers (--redis), not {flag}"
            )));
        }
        if self.compare_layouts && !matches!(self.kind, None | Some(Kind::Mutex | Kind::FairMutex))
        {
            return Err(CliError::Usage(
                "--compare-layouts compares a mutex or a fair-mutex".into(),
            ));
        }
        let rwlock = self.kind == Some(Kind::Rwlock);
        if rwlock && self.workers.is_some() {
            return Err(CliError::Usage(
                "--kind rwlock takes --readers and --writers, not --workers".into(),
            ));
        }
        if !rwlock && (self.readers.is_some() || self.writers.is_some()) {
            return Err(CliError::Usage(
                "--readers and --writers go with --kind rwlock".into(),
            ));
        }
        if self.permits.is_some() && self.kind != Some(Kind::Semaphore) {
            return Err(CliError::Usage(
                "--permits goes with --kind semaphore".into(),
            ));
        }
        Ok(())
    }

    /// The variants to run, in order, on a Redlock's servers or not.
    fn kinds(&self, redlock: bool) -> Vec<Kind> {
        match self.kind {
            Some(kind) => vec![kind],
            None if redlock => vec![Kind::Mutex, Kind::FairMutex, Kind::Polling, Kind::Redlock],
            None => vec![Kind::Mutex, Kind::FairMutex, Kind::Polling],
        }
    }

    /// How many workers read (the first ones) with `--kind rwlock`.
    fn readers(&self) -> u16 {
        self.readers.unwrap_or(8)
    }

    /// How many workers write (those after the readers) with `--kind rwlock`.
    fn writers(&self) -> u16 {
        self.writers.unwrap_or(2)
    }

    /// N, with `--kind semaphore`.
    fn permits(&self) -> u32 {
        self.permits.unwrap_or(4)
    }

    /// How many workers run `kind`.
    fn workers(&self, kind: Kind) -> u16 {
        match kind {
            Kind::Rwlock => self.readers() + self.writers(),
            _ => self.workers.unwrap_or(8),
        }
    }

    /// What worker `worker` takes under `kind`; `None` for the polling loop.
    fn primitive(&self, kind: Kind, worker: usize) -> Option<Primitive> {
        match kind {
            Kind::Mutex => Some(Primitive::Mutex),
            Kind::Redlock => Some(Primitive::Redlock),
            Kind::FairMutex => Some(Primitive::FairMutex),
            Kind::Polling => None,
            Kind::Rwlock if worker < self.readers() as usize => Some(Primitive::Read),
            Kind::Rwlock => Some(Primitive::Write),
            Kind::Semaphore => Some(Primitive::Semaphore),
        }
    }
}

/// The holders this process's workers have right now: readers in the low 32 bits, exclusive
/// holders (writers, mutex holders) above. A worker enters after its acquire call returned
/// and leaves before its release is sent, inside the time the server counts it a holder, so
/// a clash here is a real one.
#[derive(Debug, Default)]
struct Occupancy(AtomicU64);

/// One exclusive holder in an [`Occupancy`].
const EXCLUSIVE: u64 = 1 << 32;

impl Occupancy {
    /// Counts a holder in; fails when it enters beside an exclusive holder, as an exclusive
    /// holder beside anyone, or as a shared one beside `limit` others (a semaphore's N).
    fn enter(&self, shared: bool, limit: Option<u32>, lock: &str) -> Result<(), CliError> {
        let before = self
            .0
            .fetch_add(if shared { 1 } else { EXCLUSIVE }, Ordering::SeqCst);
        if let Some(limit) = limit
            && before >= u64::from(limit)
        {
            return Err(CliError::CheckFailed(format!(
                "{lock}: a holder entered while this process's workers held all {limit} permits ({before} holders)"
            )));
        }
        if before >= EXCLUSIVE || (!shared && before != 0) {
            return Err(CliError::CheckFailed(format!(
                "{lock}: {} entered while this process held it: {} reader(s), {} exclusive holder(s) (writer or mutex holder)",
                if shared {
                    "a reader"
                } else {
                    "an exclusive holder"
                },
                before % EXCLUSIVE,
                before / EXCLUSIVE
            )));
        }
        Ok(())
    }

    /// Counts a holder out.
    fn leave(&self, shared: bool) {
        self.0
            .fetch_sub(if shared { 1 } else { EXCLUSIVE }, Ordering::SeqCst);
    }
}

/// One acquisition as its worker saw it (times since the start of the variant, on the wall
/// clock, so that the records of several processes on one machine compare).
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize)]
struct Record {
    worker: usize,
    /// A reader's: it may overlap other readers.
    shared: bool,
    token: u64,
    asked: Duration,
    acquired: Duration,
    release_start: Duration,
    released: Duration,
    /// The round trips of the acquisition alone (not its release), when the worker has a
    /// client of its own (`--client-per-worker`) and so a request counter of its own.
    #[serde(default)]
    acquire_requests: Option<u64>,
}

/// How a variant ran, as `--json` prints it at the head of its object.
#[derive(Debug, Clone, Serialize)]
struct Setup {
    bench: &'static str,
    /// Where the lock lives: `server`, `redlock`, `cluster` or `sentinel`.
    topology: &'static str,
    variant: Kind,
    workers: u16,
    client_per_worker: bool,
    /// `--warm-up`: each client took the lock once before the run.
    warm_up: bool,
    processes: u16,
    hold_ms: f64,
    think_ms: f64,
    seconds: f64,
}

/// The acquisitions of a group of workers: all of a variant's, or one side of an `RwLock`.
#[derive(Debug, Clone, Serialize)]
struct Group {
    acquisitions: usize,
    per_second: f64,
    /// From asking to holding.
    wait: Summary,
    /// The fewest acquisitions of one worker of the group.
    per_worker_min: usize,
    per_worker_max: usize,
}

impl Group {
    /// The acquisitions of `records` by `workers` in a run of `seconds`.
    fn of<'a>(
        records: impl Iterator<Item = &'a Record>,
        workers: Range<usize>,
        seconds: f64,
    ) -> Group {
        let mut waits = Latencies::default();
        let mut per_worker: HashMap<usize, usize> = workers.clone().map(|w| (w, 0)).collect();
        let mut acquisitions = 0;
        for record in records {
            acquisitions += 1;
            waits.record(record.acquired - record.asked);
            *per_worker.entry(record.worker).or_default() += 1;
        }
        Group {
            acquisitions,
            per_second: acquisitions as f64 / seconds,
            wait: waits.summary(),
            per_worker_min: per_worker.values().copied().min().unwrap_or(0),
            per_worker_max: per_worker.values().copied().max().unwrap_or(0),
        }
    }

    /// The per-worker spread as the tables show it: `min/max (max ÷ min)`.
    fn spread(&self) -> String {
        format!(
            "{}/{} ({:.2})",
            self.per_worker_min,
            self.per_worker_max,
            self.per_worker_max as f64 / self.per_worker_min.max(1) as f64
        )
    }
}

/// One mutex variant's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    #[serde(flatten)]
    setup: Setup,
    #[serde(flatten)]
    all: Group,
    idle_gap: Summary,
    utilisation: f64,
    real_hold_mean_ms: f64,
    retakes_share: f64,
    longest_waiter_share: f64,
    requests_per_acquisition: f64,
    overlaps: usize,
    token_regressions: usize,
}

/// The `RwLock` variant's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct RwLockReport {
    #[serde(flatten)]
    setup: Setup,
    readers: u16,
    writers: u16,
    reads: Group,
    writes: Group,
    requests_per_acquisition: f64,
    /// The most read holds recorded at one moment (more than 1: readers really shared).
    max_concurrent_readers: usize,
    /// Recorded holds that overlap a write hold.
    overlaps: usize,
    token_regressions: usize,
}

/// The `Semaphore` variant's figures, as `--json` prints them.
#[derive(Debug, Clone, Serialize)]
pub struct SemaphoreReport {
    #[serde(flatten)]
    setup: Setup,
    /// N.
    permits: u32,
    #[serde(flatten)]
    all: Group,
    /// The mean share of the N permits in use over the run (from the first acquisition to
    /// the last release): 1.0 is every permit held all the time.
    utilisation: f64,
    /// The share of the run during which all N permits were in use.
    all_in_use_share: f64,
    /// The most holders recorded at one moment (at most N).
    most_at_once: u32,
    /// The share of acquisitions that found all N permits held when they asked.
    contended_share: f64,
    /// Every round trip of the run per acquisition (its release included).
    requests_per_acquisition: f64,
    /// With a client per worker: the share of acquisitions whose first attempt was refused
    /// (more than one round trip to acquire).
    refused_first_share: Option<f64>,
    /// With a client per worker: the round trips of an acquisition whose first attempt was
    /// refused, its release not counted (the wake-up subscription, the attempts, the place
    /// renewals while it waited), on average.
    requests_per_contended_acquisition: Option<f64>,
    /// With a client per worker: the most round trips one acquisition took.
    max_requests_per_acquisition: Option<u64>,
    /// Times more than N were recorded holding at once.
    over_limit: usize,
    /// Pairs of grants with one token.
    repeated_tokens: usize,
    /// One worker's later grant with a token not above its earlier one's.
    token_regressions: usize,
}

/// A variant's report.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Report {
    Mutex(VariantReport),
    RwLock(RwLockReport),
    Semaphore(SemaphoreReport),
}

/// Runs the variants one after another and prints a table, or one JSON object per variant
/// with `json`. A recorded overlap or token regression fails the run once the figures are
/// out.
pub async fn run(endpoint: &Endpoint, args: &HandoffArgs, json: bool) -> Result<(), CliError> {
    if args.compare_layouts {
        return compare_layouts(&endpoint.first(), args, json).await;
    }
    let run_id = format!("{:08x}", rand::random::<u32>());
    let mut reports = Vec::new();
    for kind in args.kinds(endpoint.is_redlock()) {
        // Every variant but the Redlock runs on the first node (or the cluster, or the
        // Sentinel master).
        let endpoint = match kind {
            Kind::Redlock => endpoint.clone(),
            _ => endpoint.first(),
        };
        let lock = format!("bench:handoff:{run_id}:{}", kind.label());
        let bar = progress(kind.label(), args.duration, json);
        let ticker = Ticker::start(bar);
        let measured = if args.processes > 1 {
            processes(&endpoint, kind, &lock, args, RUN_LEAD).await
        } else {
            let start_ns = now_nanos();
            workers(
                &endpoint,
                kind,
                &lock,
                0..args.workers(kind) as usize,
                args,
                start_ns,
            )
            .await
        };
        drop(ticker);
        // The lock's fencing counter goes, whether or not the variant got through.
        let cleaned = delete_counters(&endpoint, &[&lock]).await;
        let (records, requests) = measured?;
        cleaned?;
        let report = analyse(kind, args, endpoint.kind(), &records, requests);
        if json {
            println!("{}", serde_json::to_string(&report).expect("plain data"));
        }
        reports.push(report);
    }
    if !json {
        print_reports(args, &reports);
    }
    for report in &reports {
        let (setup, overlaps, regressions) = match report {
            Report::Mutex(r) => (&r.setup, r.overlaps, r.token_regressions),
            Report::RwLock(r) => (&r.setup, r.overlaps, r.token_regressions),
            Report::Semaphore(r) => (
                &r.setup,
                r.over_limit,
                r.token_regressions + r.repeated_tokens,
            ),
        };
        if overlaps + regressions > 0 {
            return Err(CliError::CheckFailed(format!(
                "{}: {overlaps} overlaps and {regressions} token regressions",
                setup.variant.label()
            )));
        }
    }
    Ok(())
}

/// One layout of `--compare-layouts`: how its workers are spread, and what they did in all
/// its slices.
#[derive(Debug, Clone, Default)]
struct Layout {
    name: String,
    client_per_worker: bool,
    processes: u16,
    acquisitions: usize,
    requests: u64,
    /// The longest wait of any slice.
    max_wait_ms: f64,
    overlaps: usize,
    token_regressions: usize,
}

/// A layout's line in the report: its figures, and its throughput beside the shared one's.
#[derive(Debug, Serialize)]
struct LayoutRow {
    layout: String,
    client_per_worker: bool,
    processes: u16,
    acquisitions: usize,
    per_second: f64,
    requests_per_acquisition: f64,
    max_wait_ms: f64,
    /// This layout's acquisitions per second over the shared client's.
    ratio_to_shared: f64,
    overlaps: usize,
    token_regressions: usize,
}

/// What `--compare-layouts --json` prints: one object.
#[derive(Debug, Serialize)]
struct LayoutsReport {
    bench: &'static str,
    variant: Kind,
    workers: u16,
    hold_ms: f64,
    think_ms: f64,
    slices: u32,
    slice_seconds: f64,
    layouts: Vec<LayoutRow>,
}

/// How long before a run's common start its processes are started: time to start and connect.
const RUN_LEAD: Duration = Duration::from_millis(1500);

/// `--compare-layouts`: the variant in three layouts, in 10 alternating slices (which layout
/// goes first turns round), on the first node.
async fn compare_layouts(
    endpoint: &Endpoint,
    args: &HandoffArgs,
    json: bool,
) -> Result<(), CliError> {
    const SLICES: u32 = 10;
    // Time for a slice's processes to start and connect (they start again for every slice).
    const SLICE_LEAD: Duration = Duration::from_millis(500);
    let kind = args.kind.unwrap_or(Kind::Mutex);
    let processes = if args.processes > 1 {
        args.processes
    } else {
        8
    };
    let mut layouts = [
        ("one shared Client".to_string(), false, 1),
        ("a Client per worker, one process".to_string(), true, 1),
        (
            format!("a Client per worker, {processes} processes"),
            true,
            processes,
        ),
    ]
    .map(|(name, client_per_worker, processes)| Layout {
        name,
        client_per_worker,
        processes,
        ..Layout::default()
    });
    let run_id = format!("{:08x}", rand::random::<u32>());
    let locks: Vec<String> = (0..layouts.len())
        .map(|i| format!("bench:handoff:{run_id}:{}:layout{i}", kind.label()))
        .collect();
    let slice_args = |layout: &Layout| HandoffArgs {
        kind: Some(kind),
        client_per_worker: layout.client_per_worker,
        processes: layout.processes,
        duration: args.duration / SLICES,
        compare_layouts: false,
        ..args.clone()
    };
    let bar = progress(kind.label(), args.duration * layouts.len() as u32, json);
    let ticker = Ticker::start(bar);
    let mut measured = Ok(());
    'slices: for slice in 0..SLICES {
        let mut order: Vec<usize> = (0..layouts.len()).collect();
        order.rotate_left(slice as usize % layouts.len());
        for i in order {
            let layout = &mut layouts[i];
            let slice_args = slice_args(layout);
            let ran = if layout.processes > 1 {
                self::processes(endpoint, kind, &locks[i], &slice_args, SLICE_LEAD).await
            } else {
                let ids = 0..slice_args.workers(kind) as usize;
                workers(endpoint, kind, &locks[i], ids, &slice_args, now_nanos()).await
            };
            let (records, requests) = match ran {
                Ok(ran) => ran,
                Err(err) => {
                    measured = Err(err);
                    break 'slices;
                }
            };
            let Report::Mutex(report) =
                analyse(kind, &slice_args, endpoint.kind(), &records, requests)
            else {
                unreachable!("a mutex variant");
            };
            layout.acquisitions += report.all.acquisitions;
            layout.requests += requests;
            layout.max_wait_ms = layout.max_wait_ms.max(report.all.wait.max_ms);
            layout.overlaps += report.overlaps;
            layout.token_regressions += report.token_regressions;
        }
    }
    drop(ticker);
    // The locks' fencing counters go, whether or not the run got through.
    let names: Vec<&str> = locks.iter().map(String::as_str).collect();
    let cleaned = delete_counters(endpoint, &names).await;
    measured?;
    cleaned?;
    let seconds = (args.duration / SLICES * SLICES).as_secs_f64();
    let rate = |layout: &Layout| layout.acquisitions as f64 / seconds.max(f64::MIN_POSITIVE);
    let shared = rate(&layouts[0]).max(f64::MIN_POSITIVE);
    let rows = layouts
        .into_iter()
        .map(|layout| LayoutRow {
            per_second: rate(&layout),
            requests_per_acquisition: layout.requests as f64 / layout.acquisitions.max(1) as f64,
            ratio_to_shared: rate(&layout) / shared,
            layout: layout.name,
            client_per_worker: layout.client_per_worker,
            processes: layout.processes,
            acquisitions: layout.acquisitions,
            max_wait_ms: layout.max_wait_ms,
            overlaps: layout.overlaps,
            token_regressions: layout.token_regressions,
        })
        .collect();
    let report = LayoutsReport {
        bench: "handoff-layouts",
        variant: kind,
        workers: args.workers(kind),
        hold_ms: args.hold.as_secs_f64() * 1000.0,
        think_ms: args.think.as_secs_f64() * 1000.0,
        slices: SLICES,
        slice_seconds: (args.duration / SLICES).as_secs_f64(),
        layouts: rows,
    };
    if json {
        println!("{}", serde_json::to_string(&report).expect("plain data"));
    } else {
        println!(
            "bench handoff --compare-layouts: {}, {} workers, one lock; each loop: acquire, hold {:?}, release, think {:?}; {} alternating slices of {:.2} s per layout\n",
            kind.label(),
            report.workers,
            args.hold,
            args.think,
            SLICES,
            report.slice_seconds
        );
        let mut rows = vec![
            [
                "layout",
                "acquisitions/s",
                "requests/acq",
                "max wait",
                "/ shared",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for layout in &report.layouts {
            rows.push(vec![
                layout.layout.clone(),
                format!("{:.0}", layout.per_second),
                format!("{:.2}", layout.requests_per_acquisition),
                format!("{:.1} ms", layout.max_wait_ms),
                format!("{:.2}", layout.ratio_to_shared),
            ]);
        }
        print_table(&rows);
    }
    let broken: Vec<String> = report
        .layouts
        .iter()
        .filter(|l| l.overlaps + l.token_regressions > 0)
        .map(|l| {
            format!(
                "{}: {} overlaps and {} token regressions",
                l.layout, l.overlaps, l.token_regressions
            )
        })
        .collect();
    if !broken.is_empty() {
        return Err(CliError::CheckFailed(format!(
            "{}: {}",
            kind.label(),
            broken.join("; ")
        )));
    }
    Ok(())
}

/// The workers `ids` of one variant, in this process, from `start_ns` (wall clock) for the
/// run's duration: fresh clients (one, or one per worker), so their requests are this run's;
/// the polling baseline goes over a connection of its own.
async fn workers(
    endpoint: &Endpoint,
    kind: Kind,
    lock: &str,
    ids: std::ops::Range<usize>,
    args: &HandoffArgs,
    start_ns: u64,
) -> Result<(Vec<Record>, u64), CliError> {
    let lease = Duration::from_secs(10);
    // One client per node (a Redlock's nodes), once, or once per worker.
    let sets = if args.client_per_worker {
        ids.len().max(1)
    } else {
        1
    };
    let mut clients: Vec<Vec<Client>> = Vec::with_capacity(sets);
    for _ in 0..sets {
        clients.push(endpoint.connect_each().await?);
    }
    let bare = BareLock::new(endpoint.side().await?, lease);
    let occupancy = Arc::new(Occupancy::default());
    if args.warm_up
        && let Some(primitive) = args.primitive(kind, ids.start)
    {
        // Each client's first contact, before the common start and unmeasured.
        for set in &clients {
            let handle = Handle::with_permits(set, lock, primitive, Some(lease), args.permits())?;
            handle.acquire().await?.release().await?;
        }
    }
    let since_start = move || Duration::from_nanos(now_nanos().saturating_sub(start_ns));
    let deadline = args.duration;
    // Wait for the common start (other processes' shares start at the same moment).
    tokio::time::sleep(Duration::from_nanos(start_ns.saturating_sub(now_nanos()))).await;
    let requests_before: u64 = clients.iter().flatten().map(super::requests).sum();
    let mut tasks = Vec::new();
    for (n, worker) in ids.enumerate() {
        // Each worker has a handle of its own: an owner id of its own.
        let primitive = args.primitive(kind, worker);
        let handle = primitive
            .map(|primitive| {
                Handle::with_permits(
                    &clients[n % clients.len()],
                    lock,
                    primitive,
                    Some(lease),
                    args.permits(),
                )
            })
            .transpose()?;
        let shared = primitive.is_some_and(Primitive::shared);
        let limit = (kind == Kind::Semaphore).then(|| args.permits());
        // The worker's own clients, when it has some: their counter is its requests alone.
        let own = args
            .client_per_worker
            .then(|| clients[n % clients.len()].clone());
        let (bare, lock, occupancy) = (bare.clone(), lock.to_string(), occupancy.clone());
        let (hold, think, poll) = (args.hold, args.think, args.poll);
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            let mut polled = 0u64;
            while since_start() < deadline {
                let asked = since_start();
                // A guard, or the polling loop's bare lock taken for `owner`.
                let owner = OwnerToken::random();
                let count = || {
                    own.as_ref()
                        .map(|own| own.iter().map(super::requests).sum::<u64>())
                };
                let before = count();
                let guard = match &handle {
                    Some(handle) => Some(handle.acquire().await?),
                    None => {
                        bare.acquire_polling(&lock, owner.as_str(), poll)
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        None
                    }
                };
                let acquired = since_start();
                let acquire_requests = count().zip(before).map(|(after, before)| after - before);
                occupancy.enter(shared, limit, &lock)?;
                // A zero hold or think time is no sleep at all: Tokio's timer would round
                // it up to its next millisecond tick.
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                occupancy.leave(shared);
                let release_start = since_start();
                let token = match guard {
                    Some(guard) => {
                        let token = guard.fencing_token();
                        guard.release().await?;
                        token
                    }
                    None => {
                        bare.release(&lock, owner.as_str())
                            .await
                            .map_err(|err| CliError::Unavailable(err.to_string()))?;
                        polled += 1;
                        // Polling has no fencing token: number this worker's holds instead
                        // (unique across workers, so the overlap check still works).
                        ((worker as u64) << 40) | polled
                    }
                };
                records.push(Record {
                    worker,
                    shared,
                    token,
                    asked,
                    acquired,
                    release_start,
                    released: since_start(),
                    acquire_requests,
                });
                if !think.is_zero() {
                    tokio::time::sleep(think).await;
                }
            }
            Ok::<_, CliError>(records)
        }));
    }
    let mut records = Vec::new();
    for task in tasks {
        records.extend(task.await.expect("bench worker does not panic")?);
    }
    let requests_after: u64 = clients.iter().flatten().map(super::requests).sum();
    Ok((records, requests_after - requests_before + bare.requests()))
}

/// What one process's share prints: its records, then its requests.
#[derive(Debug, Serialize, serde::Deserialize)]
enum ShareLine {
    Record(Record),
    Requests(u64),
}

/// Runs the workers of one variant spread over `args.processes` processes (this program,
/// started again with the hidden `handoff-worker`), all starting `lead` from now, and gathers
/// their records and requests.
async fn processes(
    endpoint: &Endpoint,
    kind: Kind,
    lock: &str,
    args: &HandoffArgs,
    lead: Duration,
) -> Result<(Vec<Record>, u64), CliError> {
    let program = std::env::current_exe().map_err(|err| {
        CliError::CannotRun(format!("finding this program to start again: {err}"))
    })?;
    let shares = args.processes as usize;
    let total = args.workers(kind) as usize;
    // Time for every process to start and connect before the common start.
    let start_ns = now_nanos() + lead.as_nanos() as u64;
    let mut children = Vec::new();
    let mut first = 0;
    for share in 0..shares {
        let count = total / shares + usize::from(share < total % shares);
        let mut command = tokio::process::Command::new(&program);
        command.arg("--json").args(endpoint.args());
        command
            .arg("handoff-worker")
            .args(["--kind", kind.cli_name(), "--lock", lock])
            .args(["--first", &first.to_string(), "--count", &count.to_string()])
            .args(["--start-ns", &start_ns.to_string()])
            .args(["--hold", &format!("{}ns", args.hold.as_nanos())])
            .args(["--think", &format!("{}ns", args.think.as_nanos())])
            .args(["--duration", &format!("{}ns", args.duration.as_nanos())])
            .args(["--poll", &format!("{}ns", args.poll.as_nanos())])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if kind == Kind::Semaphore {
            command.args(["--permits", &args.permits().to_string()]);
        }
        if kind == Kind::Rwlock {
            command.args(["--readers", &args.readers().to_string()]);
            command.args(["--writers", &args.writers().to_string()]);
        } else {
            command.args(["--workers", &total.to_string()]);
        }
        if args.client_per_worker {
            command.arg("--client-per-worker");
        }
        if args.warm_up {
            command.arg("--warm-up");
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
            let message = format!(
                "a worker process failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
            // A failed check stays a failed check.
            return Err(match output.status.code() {
                Some(code) if code == i32::from(cli_support::exit::CHECK_FAILED) => {
                    CliError::CheckFailed(message)
                }
                _ => CliError::Unavailable(message),
            });
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
pub async fn worker_process(endpoint: &Endpoint, args: &HandoffWorkerArgs) -> Result<(), CliError> {
    let ids = args.first..args.first + args.count;
    let kind = args.handoff.kind.ok_or_else(|| {
        CliError::Usage("handoff-worker runs the one variant --kind names".into())
    })?;
    let (records, requests) = workers(
        endpoint,
        kind,
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

/// The figures of one variant from its workers' records and the requests of their clients.
fn analyse(
    kind: Kind,
    args: &HandoffArgs,
    topology: &'static str,
    records: &[Record],
    requests: u64,
) -> Report {
    let seconds = args.duration.as_secs_f64();
    let workers = args.workers(kind);
    let setup = Setup {
        bench: "handoff",
        topology,
        variant: kind,
        workers,
        client_per_worker: args.client_per_worker,
        warm_up: args.warm_up,
        processes: args.processes,
        hold_ms: args.hold.as_secs_f64() * 1000.0,
        think_ms: args.think.as_secs_f64() * 1000.0,
        seconds,
    };
    // The held intervals of all processes: an exclusive one overlaps none, a shared one no
    // exclusive one; of two apart, the later has the greater token.
    let interval = |r: &Record| Interval {
        worker: r.worker.to_string(),
        token: r.token,
        start: r.acquired.as_nanos() as u64,
        end: r.release_start.as_nanos() as u64,
    };
    if kind == Kind::Semaphore {
        return Report::Semaphore(analyse_semaphore(setup, args, records, requests));
    }
    let (shared, exclusive): (Vec<&Record>, Vec<&Record>) = records.iter().partition(|r| r.shared);
    let history = check_modes(
        exclusive.iter().copied().map(interval).collect(),
        shared.iter().copied().map(interval).collect(),
    );
    let overlaps = history.overlaps.len();
    // Polling has no fencing tokens.
    let token_regressions = match kind {
        Kind::Polling => 0,
        _ => history.token_regressions.len(),
    };
    let requests_per_acquisition = requests as f64 / records.len().max(1) as f64;
    if kind == Kind::Rwlock {
        let readers = args.readers() as usize;
        return Report::RwLock(RwLockReport {
            setup,
            readers: args.readers(),
            writers: args.writers(),
            reads: Group::of(shared.iter().copied(), 0..readers, seconds),
            writes: Group::of(
                exclusive.iter().copied(),
                readers..workers as usize,
                seconds,
            ),
            requests_per_acquisition,
            max_concurrent_readers: most_at_once(&shared),
            overlaps,
            token_regressions,
        });
    }
    let mut sorted = records.to_vec();
    sorted.sort_by_key(|r| r.acquired);
    let n = sorted.len();
    let (mut gaps, mut hold_total) = (Latencies::default(), Duration::ZERO);
    let (mut retakes, mut handoffs_with_waiters, mut to_longest) = (0usize, 0usize, 0usize);
    let mut held = Duration::ZERO;
    for (i, record) in sorted.iter().enumerate() {
        hold_total += record.release_start - record.acquired;
        held += record.released.saturating_sub(record.acquired);
        let Some(previous) = i.checked_sub(1).map(|p| sorted[p]) else {
            continue;
        };
        gaps.record(record.acquired.saturating_sub(previous.released));
        // Who was waiting when the previous holder let go (sent its release)? Not when the
        // release returned: a release that hands the lock over gives it to the next holder
        // before its own reply is back.
        let waiting: Vec<&Record> = sorted
            .iter()
            .filter(|r| r.asked < previous.release_start && r.acquired >= previous.release_start)
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
    let share = |part: usize, whole: usize| part as f64 / whole.max(1) as f64;
    Report::Mutex(VariantReport {
        setup,
        all: Group::of(sorted.iter(), 0..workers as usize, seconds),
        idle_gap: gaps.summary(),
        utilisation: held.as_secs_f64() / span.as_secs_f64().max(f64::MIN_POSITIVE),
        real_hold_mean_ms: hold_total.as_secs_f64() * 1000.0 / n.max(1) as f64,
        retakes_share: share(retakes, handoffs_with_waiters),
        longest_waiter_share: share(to_longest, handoffs_with_waiters),
        requests_per_acquisition,
        overlaps,
        token_regressions,
    })
}

/// The semaphore variant's figures: the permits' use over time from the intervals from each
/// acquisition to its release returning (as the mutex's utilisation counts a hold), capped
/// at N (a release's reply may come back after the next grant); the checks of
/// [`check_permits`] over the intervals from acquisition to the release being sent.
fn analyse_semaphore(
    setup: Setup,
    args: &HandoffArgs,
    records: &[Record],
    requests: u64,
) -> SemaphoreReport {
    let permits = args.permits();
    let seconds = args.duration.as_secs_f64();
    let held: Vec<(Interval, u32)> = records
        .iter()
        .map(|r| {
            (
                Interval {
                    worker: r.worker.to_string(),
                    token: r.token,
                    start: r.acquired.as_nanos() as u64,
                    end: r.release_start.as_nanos() as u64,
                },
                1,
            )
        })
        .collect();
    let report = check_permits(held, permits);
    // The permits in use over time: edges of acquisition to release returned.
    let mut edges: Vec<(Duration, i64)> = records
        .iter()
        .flat_map(|r| [(r.acquired, 1), (r.released, -1)])
        .collect();
    edges.sort();
    let (mut in_use, mut area, mut full) = (0i64, 0f64, 0f64);
    let mut last = edges.first().map_or(Duration::ZERO, |e| e.0);
    let first = last;
    for &(at, step) in &edges {
        let span = (at - last).as_secs_f64();
        let used = in_use.min(i64::from(permits));
        area += used as f64 * span;
        if used >= i64::from(permits) {
            full += span;
        }
        in_use += step;
        last = at;
    }
    let span = (last - first).as_secs_f64().max(f64::MIN_POSITIVE);
    // An acquisition was contended when all N permits were held as it asked.
    // Holding at `t`: acquired by `t`, release not sent by `t` (every release_start comes
    // after its acquisition, so the two counts subtract).
    let mut acquired: Vec<Duration> = records.iter().map(|r| r.acquired).collect();
    let mut releasing: Vec<Duration> = records.iter().map(|r| r.release_start).collect();
    acquired.sort_unstable();
    releasing.sort_unstable();
    let holding = |t: Duration| {
        acquired.partition_point(|&a| a <= t) - releasing.partition_point(|&r| r <= t)
    };
    let contended = records
        .iter()
        .filter(|asking| holding(asking.asked) >= permits as usize)
        .count();
    let counted: Vec<u64> = records.iter().filter_map(|r| r.acquire_requests).collect();
    let refused: Vec<u64> = counted.iter().copied().filter(|&n| n > 1).collect();
    let whole = !counted.is_empty() && counted.len() == records.len();
    SemaphoreReport {
        refused_first_share: whole.then(|| refused.len() as f64 / counted.len() as f64),
        requests_per_contended_acquisition: (whole && !refused.is_empty())
            .then(|| refused.iter().sum::<u64>() as f64 / refused.len() as f64),
        max_requests_per_acquisition: whole.then(|| counted.iter().copied().max().unwrap_or(0)),
        permits,
        all: Group::of(records.iter(), 0..setup.workers as usize, seconds),
        utilisation: area / (f64::from(permits) * span),
        all_in_use_share: full / span,
        most_at_once: report.most_at_once,
        contended_share: contended as f64 / records.len().max(1) as f64,
        requests_per_acquisition: requests as f64 / records.len().max(1) as f64,
        over_limit: report.over_limit.len(),
        repeated_tokens: report.repeated_tokens.len(),
        token_regressions: report.token_regressions.len(),
        setup,
    }
}

/// The most of `holds` recorded at one moment (one ending as another begins is not two).
fn most_at_once(holds: &[&Record]) -> usize {
    let mut edges: Vec<(Duration, i64)> = holds
        .iter()
        .flat_map(|r| [(r.acquired, 1), (r.release_start, -1)])
        .collect();
    // At one instant the ends come first.
    edges.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

fn print_reports(args: &HandoffArgs, reports: &[Report]) {
    let clients = match (args.client_per_worker, args.processes) {
        (true, _) => "a client per worker".to_string(),
        (false, 1) => "one shared client".to_string(),
        (false, _) => "a client per process".to_string(),
    };
    let processes = match args.processes {
        1 => "one process".to_string(),
        n => format!("{n} processes"),
    };
    let setting = format!(
        "{processes}, {clients}; each loop: acquire, hold {:?}, release, think {:?}; {:.1} s per variant",
        args.hold,
        args.think,
        args.duration.as_secs_f64(),
    );
    let mutexes: Vec<&VariantReport> = reports
        .iter()
        .filter_map(|r| match r {
            Report::Mutex(r) => Some(r),
            Report::RwLock(_) | Report::Semaphore(_) => None,
        })
        .collect();
    if let Some(first) = mutexes.first() {
        println!(
            "bench handoff: {} workers, one lock, {setting}; polling retries every {:?}\n",
            first.setup.workers, args.poll
        );
        print_mutexes(&mutexes);
    }
    for report in reports {
        if let Report::RwLock(report) = report {
            let some = |n: u16, what: &str| match n {
                1 => format!("1 {what}"),
                n => format!("{n} {what}s"),
            };
            println!(
                "bench handoff: {} and {}, one RwLock, a handle (owner) each, {setting}\n",
                some(report.readers, "reader"),
                some(report.writers, "writer")
            );
            print_rwlock(report);
        }
        if let Report::Semaphore(report) = report {
            println!(
                "bench handoff: {} workers, one Semaphore of {} permits (one per acquisition), a handle (owner) each, {setting}\n",
                report.setup.workers, report.permits
            );
            print_semaphore(report);
        }
    }
}

fn print_semaphore(report: &SemaphoreReport) {
    let rows = [
        ("acquisitions/s", format!("{:.0}", report.all.per_second)),
        (
            "permits in use (mean share of N)",
            format!("{:.3}", report.utilisation),
        ),
        (
            "all N in use (share of the time)",
            format!("{:.3}", report.all_in_use_share),
        ),
        (
            "most holders at once",
            format!("{} of {}", report.most_at_once, report.permits),
        ),
        ("wait p50", format!("{:.2} ms", report.all.wait.p50_ms)),
        ("wait p99", format!("{:.2} ms", report.all.wait.p99_ms)),
        ("wait max", format!("{:.2} ms", report.all.wait.max_ms)),
        ("per worker min/max", report.all.spread()),
        (
            "contended acquisitions",
            format!("{:.1}%", report.contended_share * 100.0),
        ),
        (
            "requests/acq",
            format!("{:.3}", report.requests_per_acquisition),
        ),
        (
            "first attempt refused",
            report
                .refused_first_share
                .map_or("–".into(), |share| format!("{:.1}%", share * 100.0)),
        ),
        (
            "requests per contended acquire",
            report
                .requests_per_contended_acquisition
                .map_or("–".into(), |n| format!("{n:.3}")),
        ),
        (
            "most requests of one acquire",
            report
                .max_requests_per_acquisition
                .map_or("–".into(), |n| n.to_string()),
        ),
        ("over N at once", report.over_limit.to_string()),
        (
            "repeated tokens / token regressions",
            format!("{} / {}", report.repeated_tokens, report.token_regressions),
        ),
    ];
    let mut table = vec![vec![
        String::new(),
        report.setup.variant.label().to_string(),
    ]];
    table.extend(
        rows.into_iter()
            .map(|(name, cell)| vec![name.to_string(), cell]),
    );
    print_table(&table);
    println!(
        "\n  permits in use: the permits held (from an acquisition returning to its release returning, at most N) over N, averaged over the run;\n  contended: all N were held when the worker asked;\n  requests/acq: every round trip of the run (the acquire, the release, the wake-up subscription) per acquisition;\n  requests per contended acquire (with --client-per-worker): the round trips of an acquire whose first attempt was refused, to the grant (its release not counted)."
    );
}

/// A row of a table with a column per item: its name and how an item's cell is written.
type Row<'a, T> = (&'a str, &'a dyn Fn(&T) -> String);

/// Prints a table with a column per item of `items`, headed `header`.
fn print_columns<T>(header: &[&str], items: &[T], rows: &[Row<'_, T>]) {
    let mut table = vec![
        std::iter::once("")
            .chain(header.iter().copied())
            .map(str::to_string)
            .collect::<Vec<_>>(),
    ];
    for (name, cell) in rows {
        table.push(
            std::iter::once(name.to_string())
                .chain(items.iter().map(cell))
                .collect(),
        );
    }
    print_table(&table);
}

fn print_mutexes(reports: &[&VariantReport]) {
    let header: Vec<&str> = reports.iter().map(|r| r.setup.variant.label()).collect();
    print_columns(
        &header,
        reports,
        &[
            ("acquisitions/s", &|r| format!("{:.0}", r.all.per_second)),
            ("idle gap p50", &|r| format!("{:.3} ms", r.idle_gap.p50_ms)),
            ("idle gap p99", &|r| format!("{:.3} ms", r.idle_gap.p99_ms)),
            ("utilisation", &|r| format!("{:.2}", r.utilisation)),
            ("wait p50", &|r| format!("{:.2} ms", r.all.wait.p50_ms)),
            ("wait p99", &|r| format!("{:.2} ms", r.all.wait.p99_ms)),
            ("wait max", &|r| format!("{:.2} ms", r.all.wait.max_ms)),
            ("real hold (mean)", &|r| {
                format!("{:.3} ms", r.real_hold_mean_ms)
            }),
            ("per worker min/max", &|r| r.all.spread()),
            ("releaser re-took", &|r| {
                format!("{:.1}%", r.retakes_share * 100.0)
            }),
            ("to longest waiter", &|r| {
                format!("{:.1}%", r.longest_waiter_share * 100.0)
            }),
            ("requests/acq", &|r| {
                format!("{:.3}", r.requests_per_acquisition)
            }),
            ("overlaps", &|r| r.overlaps.to_string()),
        ],
    );
    println!(
        "\n  idle gap: from a release returning to the next acquisition returning; utilisation: share of the run the lock was held;\n  re-took / longest waiter: of the handoffs that had someone waiting;\n  requests/acq: every round trip of the run (the workers' arrival and the wake-up subscription too) per acquisition."
    );
}

fn print_rwlock(report: &RwLockReport) {
    print_columns(
        &["reads", "writes"],
        &[&report.reads, &report.writes],
        &[
            ("acquisitions/s", &|g| format!("{:.0}", g.per_second)),
            ("wait p50", &|g| format!("{:.2} ms", g.wait.p50_ms)),
            ("wait p99", &|g| format!("{:.2} ms", g.wait.p99_ms)),
            ("wait max", &|g| format!("{:.2} ms", g.wait.max_ms)),
            ("per worker min/max", &|g| g.spread()),
        ],
    );
    println!(
        "\n  requests/acq: {:.3} (every round trip of the run, the workers' arrival and the wake-up subscription too, per read or write)\n  max concurrent readers: {}\n  overlaps (a hold beside a write hold): {}; token regressions: {}",
        report.requests_per_acquisition,
        report.max_concurrent_readers,
        report.overlaps,
        report.token_regressions
    );
}
