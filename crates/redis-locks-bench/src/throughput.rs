//! `bench throughput`: C workers acquire and release their own distinct locks as fast as they
//! can — the library's cost per lock (of the primitive `--kind` names) against the bare
//! minimum, each on one connection.

use std::time::Duration;

use redis_locks::{Client, LockKeys, OwnerToken};
use serde::Serialize;
use tokio::time::Instant;

use super::baseline::{BareLock, BareQuorum};
use super::stats::{Latencies, Summary, Ticker, print_table, progress};
use cli_support::endpoint::{Endpoint, Place, SideConnection};
use cli_support::exit::CliError;
use cli_support::leftovers::delete_counters;
use cli_support::primitive::{Handle, Primitive};
use cli_support::redis_target::RedisTarget;
use cli_support::topology::Wanted;

/// Options of `bench throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct ThroughputArgs {
    /// Concurrent workers, each with its own lock.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub workers: u16,
    /// How long each variant runs in all (in alternating slices), e.g. 5s, 500ms.
    #[arg(long, default_value = "5s", value_parser = super::parse_run_length)]
    pub duration: Duration,
    /// Give each lock this explicit lease (no watchdog) instead of the library's default
    /// (a 30 s lease renewed by the client's watchdog).
    #[arg(long, value_parser = super::parse_duration)]
    pub lease: Option<Duration>,
    /// The primitive measured: mutex, fair-mutex, reentrant (ReentrantMutex), read or write
    /// (the two sides of an RwLock), redlock (over every --redis node, or --nodes private
    /// servers; measured beside a Mutex on the first node), or semaphore (a permit of a
    /// Semaphore of --permits permits per worker; measured beside a Mutex per worker).
    #[arg(long, value_enum, default_value_t = Primitive::Mutex)]
    pub kind: Primitive,
    /// With --kind semaphore: N, the permits of each worker's Semaphore [default: 4] (each
    /// worker takes one of its own semaphore's: uncontended).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub permits: Option<u32>,
    /// With --cluster or --sentinel: also run the same workload on one private
    /// redis-server in the same run (in alternating slices), and print both rows and their
    /// ratio. The default with a bare --cluster or --sentinel (private ones).
    #[arg(long)]
    pub compare_single: bool,
}

impl ThroughputArgs {
    /// Refuses the options that do not go together, or with `topology` (`--cluster` or
    /// `--sentinel`, when given).
    pub(crate) fn check(&self, topology: Option<&str>) -> Result<(), CliError> {
        match topology {
            Some(flag) if self.kind == Primitive::Redlock => Err(CliError::Usage(format!(
                "--kind redlock takes independent servers (--redis), not {flag}"
            ))),
            None if self.compare_single => Err(CliError::Usage(
                "--compare-single compares a --cluster or --sentinel run with one server".into(),
            )),
            _ if self.permits.is_some() && self.kind != Primitive::Semaphore => Err(
                CliError::Usage("--permits goes with --kind semaphore".into()),
            ),
            _ => Ok(()),
        }
    }
}

/// One variant's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Variant {
    name: String,
    acquisitions: u64,
    per_second: f64,
    acquire: Summary,
    /// Acquire and release, one after the other.
    cycle: Summary,
    requests_per_acquisition: f64,
}

/// What `MEMORY USAGE` says a lock costs.
#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    held_lock_key_bytes: i64,
    fencing_counter_bytes: i64,
    counter_epoch_bytes: i64,
}

/// The whole run, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    bench: &'static str,
    kind: Primitive,
    workers: u16,
    seconds_per_variant: f64,
    lease_ms: Option<u64>,
    ours: Variant,
    bare: Variant,
    bare_fenced: Variant,
    ratio_ours_to_bare: f64,
    ratio_ours_to_bare_fenced: f64,
    /// With `--kind redlock`: how many nodes, and a `Mutex` on the first node alone, measured
    /// in the same run; with `--kind semaphore`, a `Mutex` per worker on the same server,
    /// measured in the same run.
    nodes: usize,
    one_node: Option<Variant>,
    /// With `--kind semaphore`: N of each worker's semaphore.
    permits: Option<u32>,
    /// With `--kind semaphore`: its acquisitions per second over the `Mutex`'s in the same
    /// run (`one_node`).
    ratio_ours_to_mutex: Option<f64>,
    /// The primitive's floor, the least its design must send, with no library code, each
    /// worker its own, in the same run ([`floor_name`]).
    floor: Option<Variant>,
    /// The acquisitions per second over the floor's.
    ratio_ours_to_floor: f64,
    /// With `--kind semaphore`: the floor's acquisitions per second over the `Mutex`'s.
    ratio_floor_to_mutex: Option<f64>,
    /// With `--kind redlock`: the bare Redlock (`SET NX PX` and compare-and-delete on every
    /// node at once, a majority) in the same run.
    bare_quorum: Option<Variant>,
    /// With `--kind redlock`: the Redlock's acquire+release p50 over the bare Redlock's.
    ratio_cycle_p50_to_bare_quorum: Option<f64>,
    /// With `--kind redlock`: the Redlock's acquire+release p50 over the one-node `Mutex`'s.
    ratio_cycle_p50_to_one_node: Option<f64>,
    /// `None` where the server refuses `MEMORY USAGE`.
    memory: Option<Memory>,
    /// Where the locks live: `server`, `redlock`, `cluster` or `sentinel`.
    topology: &'static str,
    /// With `--compare-single` (or a private cluster or Sentinel set-up): the same workload
    /// on one private redis-server, in the same run.
    single_node: Option<Variant>,
    /// With `single_node`: this run's acquisitions per second over the single node's.
    ratio_ours_to_single_node: Option<f64>,
    /// With `single_node`: this run's acquire+release p50 over the single node's.
    ratio_cycle_p50_to_single_node: Option<f64>,
}

/// How many alternating slices each variant runs in.
const SLICES: u32 = 10;

/// What one slice measures.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    Ours,
    Bare,
    BareFenced,
    /// A `Mutex` on the first node, beside a Redlock.
    OneNode,
    /// The bare Redlock: `SET NX PX` and compare-and-delete on every node at once.
    BareQuorum,
    /// The same primitive on one private server, beside a cluster or Sentinel.
    Single,
    /// The primitive's floor ([`floor_name`]).
    Floor,
}

/// Runs the benchmark against `target` and prints a table, or one JSON object with `json`.
pub async fn run(target: &RedisTarget, args: &ThroughputArgs, json: bool) -> Result<(), CliError> {
    let endpoint = match args.kind {
        Primitive::Redlock => target.endpoint().clone(),
        _ => target.endpoint().first(),
    };
    let clients = endpoint.connect_each().await?;
    // One private server beside a cluster or Sentinel, asked for or by default with private
    // ones (plaintext: the namespace only of the settings).
    let topology = matches!(endpoint.place(), Place::Cluster(_) | Place::Sentinel { .. });
    let single = if topology && (args.compare_single || target.is_private()) {
        let single = RedisTarget::private_or(
            Wanted::Servers(Vec::new()),
            1,
            endpoint.settings().plaintext(),
        )?;
        if !json {
            println!("Beside it: {}\n", single.describe());
        }
        Some(single)
    } else {
        None
    };
    let single_client = match &single {
        Some(single) => Some(single.connect().await?),
        None => None,
    };
    let run_id = format!("{:08x}", rand::random::<u32>());
    let measured = measure(
        &clients,
        single_client.as_ref(),
        &endpoint,
        args,
        &run_id,
        json,
    )
    .await;
    // The run's fencing counters go, whether or not it got through.
    let mut locks: Vec<String> = (0..args.workers).map(|w| worker_key(&run_id, w)).collect();
    if matches!(args.kind, Primitive::Redlock | Primitive::Semaphore) {
        for worker in 0..args.workers {
            let key = worker_key(&run_id, worker);
            locks.push(side_key(&key, Side::OneNode, args.kind));
            locks.push(side_key(&key, Side::BareFenced, args.kind));
        }
    }
    // The floor's keys: its fencing counter goes with the others, its keys here (a run cut
    // short may leave a hold).
    let floors: Vec<String> = match floor_name(args.kind) {
        Some(_) => (0..args.workers)
            .map(|w| side_key(&worker_key(&run_id, w), Side::Floor, args.kind))
            .collect(),
        None => Vec::new(),
    };
    locks.extend(floors.iter().cloned());
    locks.push(memory_key(&run_id));
    let locks: Vec<&str> = locks.iter().map(String::as_str).collect();
    let cleaned = delete_counters(&endpoint, &locks).await;
    let cleaned = cleaned.and(delete_holders(&endpoint, &floors).await);
    let report = measured?;
    cleaned?;
    if json {
        println!("{}", serde_json::to_string(&report).expect("plain data"));
    } else {
        print_report(&report);
    }
    Ok(())
}

/// Deletes the lock keys of the floor's locks (`names`, under the endpoint's namespace), over
/// a connection of its own: released locks leave none, a run cut short may.
async fn delete_holders(endpoint: &Endpoint, names: &[String]) -> Result<(), CliError> {
    if names.is_empty() {
        return Ok(());
    }
    let mut connection = endpoint.side().await?;
    for name in names {
        let keys = endpoint.keys(name)?;
        redis::cmd("DEL")
            .arg(keys.lock())
            .query_async::<i64>(&mut connection)
            .await
            .map_err(|err| {
                CliError::Unavailable(format!("deleting the floor's {}: {err}", keys.lock()))
            })?;
    }
    Ok(())
}

/// Warms up, runs every variant in alternating slices, and measures what a lock costs in
/// memory. The bare variants and `MEMORY USAGE` go over connections of their own
/// ([`Endpoint::side`]); with `single`, the same primitive runs on that one server too.
async fn measure(
    clients: &[Client],
    single: Option<&Client>,
    endpoint: &Endpoint,
    args: &ThroughputArgs,
    run_id: &str,
    json: bool,
) -> Result<Report, CliError> {
    let connection = endpoint.side().await?;
    let bare = BareLock::new(connection.clone(), Duration::from_secs(30));
    let mut bare_nodes = Vec::with_capacity(clients.len());
    for node in endpoint.sides().await? {
        bare_nodes.push(BareLock::new(node, Duration::from_secs(30)));
    }
    let quorum = BareQuorum::new(bare_nodes);
    let single = single.map(std::slice::from_ref);
    // Before anything is measured: take every worker's lock once, so its fencing counter is
    // seeded (a first acquisition costs one more round trip) and the release script loaded.
    let redlock = args.kind == Primitive::Redlock;
    // Beside a semaphore, a Mutex per worker on the same server, in the same run.
    let semaphore = args.kind == Primitive::Semaphore;
    let beside_mutex = redlock || semaphore;
    let permits = args.permits.unwrap_or(4);
    for worker in 0..args.workers {
        let key = worker_key(run_id, worker);
        let handle = handle_of(clients, &key, args.kind, args)?;
        handle.acquire().await?.release().await?;
        if beside_mutex {
            let one = side_key(&key, Side::OneNode, args.kind);
            let one = Handle::new(clients, &one, Primitive::Mutex, args.lease)?;
            one.acquire().await?.release().await?;
        }
        if floor_name(args.kind).is_some() {
            // The floor's script loaded, its counter made.
            let floor = clients[0].keys(&side_key(&key, Side::Floor, args.kind))?;
            floor_cycle(args.kind, (&bare, &quorum), &floor, permits).await?;
        }
        if let Some(single) = single {
            let handle = handle_of(single, &key, args.kind, args)?;
            handle.acquire().await?.release().await?;
        }
    }
    let sides: &[Side] = if redlock {
        &[
            Side::Ours,
            Side::OneNode,
            Side::BareQuorum,
            Side::Bare,
            Side::BareFenced,
        ]
    } else if beside_mutex && single.is_some() {
        &[
            Side::Ours,
            Side::OneNode,
            Side::Single,
            Side::Bare,
            Side::BareFenced,
        ]
    } else if beside_mutex {
        &[Side::Ours, Side::OneNode, Side::Bare, Side::BareFenced]
    } else if single.is_some() {
        &[Side::Ours, Side::Single, Side::Bare, Side::BareFenced]
    } else {
        &[Side::Ours, Side::Bare, Side::BareFenced]
    };
    let mut sides = sides.to_vec();
    if floor_name(args.kind).is_some() {
        // Its floor, right after the primitive (and the Mutex beside it).
        sides.insert(if beside_mutex { 2 } else { 1 }, Side::Floor);
    }
    let requests = || -> u64 {
        clients
            .iter()
            .chain(single.into_iter().flatten())
            .map(super::requests)
            .sum()
    };
    let slice = args.duration / SLICES;
    let mut totals: [(u64, Latencies, Latencies, u64); 7] = Default::default();
    // Alternate the variants in short slices, so a noisy moment of the machine hits both alike.
    for round in 0..SLICES {
        for &side in &sides {
            let label = match side {
                Side::Ours => format!("redis-locks, slice {}/{SLICES}", round + 1),
                Side::OneNode if redlock => format!("one node, slice {}/{SLICES}", round + 1),
                Side::OneNode => format!("Mutex, slice {}/{SLICES}", round + 1),
                Side::BareQuorum => format!("bare Redlock, slice {}/{SLICES}", round + 1),
                Side::Bare => format!("bare, slice {}/{SLICES}", round + 1),
                Side::BareFenced => format!("bare fenced, slice {}/{SLICES}", round + 1),
                Side::Single => format!("one server, slice {}/{SLICES}", round + 1),
                Side::Floor => format!("floor, slice {}/{SLICES}", round + 1),
            };
            let bar = progress(&label, slice, json);
            let requests_before = requests() + bare.requests() + quorum.requests();
            let ticker = Ticker::start(bar);
            let on = match side {
                Side::Single => single.unwrap_or(clients),
                _ => clients,
            };
            let (count, latencies, cycles) =
                phase(on, (&bare, &quorum), side, args, slice, run_id).await?;
            drop(ticker);
            let slot = &mut totals[side as usize];
            slot.0 += count;
            slot.1.add(&latencies);
            slot.2.add(&cycles);
            slot.3 += requests() + bare.requests() + quorum.requests() - requests_before;
        }
    }
    let seconds = args.duration.as_secs_f64();
    let variant =
        |name: String, (count, latencies, cycles, requests): &(u64, Latencies, Latencies, u64)| {
            Variant {
                name,
                acquisitions: *count,
                per_second: *count as f64 / seconds,
                acquire: latencies.summary(),
                cycle: cycles.summary(),
                requests_per_acquisition: *requests as f64 / (*count).max(1) as f64,
            }
        };
    let place = match endpoint.place() {
        Place::Cluster(_) => " on the Redis Cluster",
        Place::Sentinel { .. } => " on the Sentinel master",
        Place::Servers(_) => "",
    };
    let ours = variant(
        format!("redis-locks {}{place}", args.kind.label()),
        &totals[Side::Ours as usize],
    );
    let bare_v = variant(
        format!("bare SET NX PX + compare-and-delete{place}"),
        &totals[Side::Bare as usize],
    );
    let fenced = variant(
        format!("bare fenced: SET NX PX + INCR + c-a-d{place}"),
        &totals[Side::BareFenced as usize],
    );
    let ratio = |other: &Variant| ours.per_second / other.per_second.max(f64::MIN_POSITIVE);
    let one_node = beside_mutex.then(|| {
        variant(
            if redlock {
                "redis-locks Mutex, first node alone".into()
            } else {
                format!("redis-locks Mutex{place}")
            },
            &totals[Side::OneNode as usize],
        )
    });
    let ratio_ours_to_mutex = one_node.as_ref().filter(|_| semaphore).map(ratio);
    let floor = floor_name(args.kind)
        .map(|name| variant(format!("{name}{place}"), &totals[Side::Floor as usize]));
    let ratio_ours_to_floor = ratio(floor.as_ref().unwrap_or(&fenced));
    let ratio_floor_to_mutex = floor
        .as_ref()
        .filter(|_| semaphore)
        .zip(one_node.as_ref())
        .map(|(floor, mutex)| floor.per_second / mutex.per_second.max(f64::MIN_POSITIVE));
    let bare_quorum = redlock.then(|| {
        variant(
            "bare Redlock: SET NX PX + c-a-d on all nodes".into(),
            &totals[Side::BareQuorum as usize],
        )
    });
    let single_node = single.map(|_| {
        variant(
            format!("redis-locks {} on one private server", args.kind.label()),
            &totals[Side::Single as usize],
        )
    });
    let cycle_ratio =
        |other: &Variant| ours.cycle.p50_ms / other.cycle.p50_ms.max(f64::MIN_POSITIVE);
    let ratio_cycle_p50_to_one_node = one_node.as_ref().map(cycle_ratio);
    let ratio_cycle_p50_to_bare_quorum = bare_quorum.as_ref().map(cycle_ratio);
    Ok(Report {
        bench: "throughput",
        kind: args.kind,
        workers: args.workers,
        seconds_per_variant: seconds,
        lease_ms: args.lease.map(|lease| lease.as_millis() as u64),
        ratio_ours_to_bare: ratio(&bare_v),
        ratio_ours_to_bare_fenced: ratio(&fenced),
        nodes: clients.len(),
        permits: semaphore.then_some(permits),
        ratio_ours_to_mutex,
        floor,
        ratio_ours_to_floor,
        ratio_floor_to_mutex,
        one_node,
        ratio_cycle_p50_to_one_node,
        bare_quorum,
        ratio_cycle_p50_to_bare_quorum,
        topology: endpoint.kind(),
        ratio_ours_to_single_node: single_node.as_ref().map(ratio),
        ratio_cycle_p50_to_single_node: single_node.as_ref().map(cycle_ratio),
        single_node,
        ours,
        bare: bare_v,
        bare_fenced: fenced,
        memory: memory(clients, &connection, args.kind, run_id).await?,
    })
}

async fn phase(
    clients: &[Client],
    (bare, quorum): (&BareLock, &BareQuorum),
    side: Side,
    args: &ThroughputArgs,
    duration: Duration,
    run_id: &str,
) -> Result<(u64, Latencies, Latencies), CliError> {
    let deadline = Instant::now() + duration;
    let permits = args.permits.unwrap_or(4);
    let mut tasks = Vec::new();
    for worker in 0..args.workers {
        let key = side_key(&worker_key(run_id, worker), side, args.kind);
        let handle = match side {
            Side::OneNode => Handle::new(clients, &key, Primitive::Mutex, args.lease)?,
            _ => handle_of(clients, &key, args.kind, args)?,
        };
        // The keys our locks use (under the namespace): the bare lock takes the same.
        let keys = clients[0].keys(&key)?;
        let (bare, quorum) = (bare.clone(), quorum.clone());
        let kind = args.kind;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Latencies::default();
            let mut cycles = Latencies::default();
            let mut count = 0u64;
            while Instant::now() < deadline {
                let started = Instant::now();
                match side {
                    Side::Ours | Side::OneNode | Side::Single => {
                        let guard = handle.acquire().await?;
                        latencies.record(started.elapsed());
                        guard.release().await?;
                    }
                    Side::Floor => {
                        let owner = OwnerToken::random();
                        let owner = owner.as_str();
                        let taken = floor_acquire(kind, (&bare, &quorum), &keys, owner, permits);
                        let taken = taken.await;
                        latencies.record(started.elapsed());
                        let released = floor_release(kind, (&bare, &quorum), &keys, owner).await;
                        floor_checked(&keys, taken, released)?;
                    }
                    Side::Bare | Side::BareFenced | Side::BareQuorum => {
                        let token = OwnerToken::random();
                        let taken = match side {
                            Side::Bare => bare.try_acquire(&key, token.as_str()).await,
                            Side::BareQuorum => quorum.try_acquire(&key, token.as_str()).await,
                            _ => {
                                bare.try_acquire_fenced(
                                    &key,
                                    keys.fence(),
                                    keys.epoch(),
                                    token.as_str(),
                                )
                                .await
                            }
                        };
                        latencies.record(started.elapsed());
                        let released = match side {
                            Side::BareQuorum => quorum.release(&key, token.as_str()).await,
                            _ => bare.release(&key, token.as_str()).await,
                        };
                        if !matches!((taken, released), (Ok(true), Ok(true))) {
                            return Err(CliError::CheckFailed(format!(
                                "the bare lock on {key} failed"
                            )));
                        }
                    }
                }
                cycles.record(started.elapsed());
                count += 1;
            }
            Ok::<_, CliError>((count, latencies, cycles))
        }));
    }
    let mut total = 0;
    let mut all = Latencies::default();
    let mut all_cycles = Latencies::default();
    for task in tasks {
        let (count, latencies, cycles) = task.await.expect("bench worker does not panic")?;
        total += count;
        all.add(&latencies);
        all_cycles.add(&cycles);
    }
    Ok((total, all, all_cycles))
}

/// What the floor of `kind` is, as its row names it: the least the primitive's design must
/// send, with no library code (its scripts in `src/floors/`); for a `Mutex`, its own commands
/// sent bare (the first attempt's pipeline, and its release's fast path with the keys and
/// arguments the library sends). `None` for a `MultiLock` (see `bench multilock`).
fn floor_name(kind: Primitive) -> Option<&'static str> {
    match kind {
        Primitive::MultiLock => None,
        Primitive::Mutex => {
            Some("floor: its own commands sent bare (fenced pipeline + release fast path)")
        }
        Primitive::FairMutex => Some("floor: script (line, SET NX PX, INCR) + c-a-d"),
        Primitive::Reentrant | Primitive::Write => {
            Some("floor: hash hold, two scripts (EXISTS, INCR, HSET, PEXPIRE / HDEL)")
        }
        Primitive::Read => {
            Some("floor: read hold, two scripts (EXISTS, INCR, HSET, PEXPIRE / HDEL)")
        }
        Primitive::Redlock => Some("floor: fenced SET NX PX pipeline + c-a-d on all nodes"),
        Primitive::Semaphore => Some("floor: 1 script (reclaim, count, add, INCR) + ZREM"),
    }
}

/// The floor's acquire of `kind` for `owner` on `keys` (see [`floor_name`]): true when taken.
async fn floor_acquire(
    kind: Primitive,
    (bare, quorum): (&BareLock, &BareQuorum),
    keys: &LockKeys,
    owner: &str,
    permits: u32,
) -> redis::RedisResult<bool> {
    let (lock, fence, queue) = (keys.lock(), keys.fence(), keys.queue());
    match kind {
        Primitive::Semaphore => Ok(bare
            .try_acquire_permit(lock, fence, owner, permits)
            .await?
            .is_some()),
        // A reader is kept out by a writer's key (a design of its own, `read_floor`), a writer
        // or a reentrant holder by any hold at all.
        Primitive::Read => {
            let writer = keys.companion("writer");
            bare.try_acquire_hold([lock, fence, &writer, queue], owner, owner)
                .await
        }
        Primitive::Write | Primitive::Reentrant => {
            bare.try_acquire_hold([lock, fence, lock, queue], owner, owner)
                .await
        }
        Primitive::FairMutex => bare.try_acquire_fair([lock, fence, queue], owner).await,
        Primitive::Redlock => {
            quorum
                .try_acquire_fenced([lock, fence, keys.epoch()], owner)
                .await
        }
        Primitive::Mutex | Primitive::MultiLock => {
            bare.try_acquire_fenced(lock, fence, keys.epoch(), owner)
                .await
        }
    }
}

/// The floor's release of `kind` for `owner` on `keys`: true when it was `owner`'s.
async fn floor_release(
    kind: Primitive,
    (bare, quorum): (&BareLock, &BareQuorum),
    keys: &LockKeys,
    owner: &str,
) -> redis::RedisResult<bool> {
    match kind {
        Primitive::Semaphore => bare.release_permit(keys.lock(), owner).await,
        Primitive::Read | Primitive::Write | Primitive::Reentrant => {
            bare.release_hold(keys.lock(), keys.queue(), owner).await
        }
        Primitive::Redlock => quorum.release(keys.lock(), owner).await,
        Primitive::Mutex => {
            let all = [
                keys.lock(),
                keys.queue(),
                keys.places(),
                keys.tickets(),
                keys.handover(),
                keys.fence(),
            ];
            bare.release_as_mutex(all, owner, keys.wake_channel()).await
        }
        Primitive::FairMutex | Primitive::MultiLock => bare.release(keys.lock(), owner).await,
    }
}

/// One acquire and release of the floor of `kind` on `keys`, checked (see [`floor_checked`]).
async fn floor_cycle(
    kind: Primitive,
    sides: (&BareLock, &BareQuorum),
    keys: &LockKeys,
    permits: u32,
) -> Result<(), CliError> {
    let owner = OwnerToken::random();
    let taken = floor_acquire(kind, sides, keys, owner.as_str(), permits).await;
    let released = floor_release(kind, sides, keys, owner.as_str()).await;
    floor_checked(keys, taken, released)
}

/// Whether a floor's acquire and release both did their work: an uncontended floor that
/// refuses or finds its hold gone is a broken measurement, not a figure.
fn floor_checked(
    keys: &LockKeys,
    taken: redis::RedisResult<bool>,
    released: redis::RedisResult<bool>,
) -> Result<(), CliError> {
    match (taken, released) {
        (Ok(true), Ok(true)) => Ok(()),
        (taken, released) => Err(CliError::CheckFailed(format!(
            "the floor on {} failed (acquire {taken:?}, release {released:?})",
            keys.lock()
        ))),
    }
}

/// A handle of `kind` on `key` with the run's lease (and, for a semaphore, its N).
fn handle_of(
    clients: &[Client],
    key: &str,
    kind: Primitive,
    args: &ThroughputArgs,
) -> Result<Handle, CliError> {
    Ok(Handle::with_permits(
        clients,
        key,
        kind,
        args.lease,
        args.permits.unwrap_or(4),
    )?)
}

/// The lock of one worker.
fn worker_key(run_id: &str, worker: u16) -> String {
    format!("bench:throughput:{run_id}:{worker}")
}

/// The lock a worker takes in `side`: its own lock; beside a Redlock, one name per kind of
/// variant (a release seen through in the background after a majority answered may still
/// be on its way to a node when the next slice begins).
fn side_key(key: &str, side: Side, kind: Primitive) -> String {
    match (kind, side) {
        (Primitive::Redlock, Side::OneNode) => format!("{key}:one-node"),
        (Primitive::Redlock, Side::BareQuorum) => format!("{key}:bare-quorum"),
        (Primitive::Redlock, Side::Bare | Side::BareFenced) => format!("{key}:bare"),
        // A semaphore's key is a sorted set: the Mutex and the bare locks take names of their
        // own.
        (Primitive::Semaphore, Side::OneNode) => format!("{key}:mutex"),
        (Primitive::Semaphore, Side::Bare | Side::BareFenced) => format!("{key}:bare"),
        (_, Side::Floor) => format!("{key}:floor"),
        _ => key.to_string(),
    }
}

/// The lock whose keys `MEMORY USAGE` measures.
fn memory_key(run_id: &str) -> String {
    format!("bench:memory:{run_id}")
}

/// What a held lock of `kind` costs in memory, asked over `connection`; `None` (with a word
/// on stderr) where the server refuses `MEMORY USAGE`, as some managed services do.
async fn memory(
    clients: &[Client],
    connection: &SideConnection,
    kind: Primitive,
    run_id: &str,
) -> Result<Option<Memory>, CliError> {
    let name = memory_key(run_id);
    let keys = clients[0].keys(&name)?;
    let guard = Handle::new(clients, &name, kind, None)?.acquire().await?;
    let usage = |key: String| {
        let mut connection = connection.clone();
        async move {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .query_async::<Option<i64>>(&mut connection)
                .await
                .map(Option::unwrap_or_default)
        }
    };
    let held = usage(keys.lock().to_string()).await;
    let counter = usage(keys.fence().to_string()).await;
    let epoch = usage(keys.epoch().to_string()).await;
    guard.release().await?;
    match (held, counter, epoch) {
        (Ok(held), Ok(counter), Ok(epoch)) => Ok(Some(Memory {
            held_lock_key_bytes: held,
            fencing_counter_bytes: counter,
            counter_epoch_bytes: epoch,
        })),
        (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
            eprintln!("redis-locks: memory not measured: MEMORY USAGE failed: {err}");
            Ok(None)
        }
    }
}

fn print_report(report: &Report) {
    println!(
        "bench throughput: {} workers, each acquiring and releasing its own lock ({}); {:.1} s per variant in 10 alternating slices, {}; {}\n",
        report.workers,
        report.kind.label(),
        report.seconds_per_variant,
        match report.topology {
            "cluster" => "one connection per shard",
            _ => "one connection",
        },
        match report.lease_ms {
            Some(ms) => format!("explicit {ms} ms lease, no watchdog"),
            None => "default options (30 s lease renewed by a watchdog)".to_string(),
        }
    );
    let mut rows = vec![vec![
        "variant".to_string(),
        "acquisitions/s".into(),
        "acquire p50".into(),
        "acquire p99".into(),
        "acquire max".into(),
        "acquire+release p50".into(),
        "requests/acq".into(),
    ]];
    let variants = std::iter::once(&report.ours)
        .chain(report.single_node.as_ref())
        .chain(report.one_node.as_ref())
        .chain(report.bare_quorum.as_ref())
        .chain(report.floor.as_ref())
        .chain([&report.bare, &report.bare_fenced]);
    for v in variants {
        rows.push(vec![
            v.name.to_string(),
            format!("{:.0}", v.per_second),
            format!("{:.3} ms", v.acquire.p50_ms),
            format!("{:.3} ms", v.acquire.p99_ms),
            format!("{:.3} ms", v.acquire.max_ms),
            format!("{:.3} ms", v.cycle.p50_ms),
            format!("{:.2}", v.requests_per_acquisition),
        ]);
    }
    print_table(&rows);
    println!();
    if let (Some(per_second), Some(cycle)) = (
        report.ratio_ours_to_single_node,
        report.ratio_cycle_p50_to_single_node,
    ) {
        println!(
            "  ratio {}/one server: {per_second:.2} acquisitions/s, {cycle:.2} acquire+release p50   (the same workload on one private redis-server, in the same run)",
            report.topology
        );
    }
    println!(
        "  ratio ours/bare: {:.2}   (what fencing tokens, leases, owner checks and wake-ups cost in all)",
        report.ratio_ours_to_bare
    );
    println!(
        "  ratio ours/bare fenced: {:.2}   (the library's own overhead: the same commands, sent bare)",
        report.ratio_ours_to_bare_fenced
    );
    if let Some(ratio) = report.ratio_ours_to_mutex {
        println!(
            "  ratio Semaphore/Mutex: {ratio:.2} acquisitions/s, {:.2} acquire+release p50   (a permit of a semaphore of {} beside a Mutex, each worker its own, in the same run)",
            report.ratio_cycle_p50_to_one_node.unwrap_or_default(),
            report.permits.unwrap_or_default()
        );
        if let Some(floor) = report.ratio_floor_to_mutex {
            println!(
                "  floor/Mutex: {floor:.2}   (the least a leased, fenced permit counted by a script must send, beside the Mutex)"
            );
        }
    } else if let Some(ratio) = report.ratio_cycle_p50_to_one_node {
        println!(
            "  Redlock over {} nodes / Mutex on one node, acquire+release p50: {ratio:.2}   (the bare single-node variants run on the first node)",
            report.nodes
        );
    }
    if let Some(ratio) = report.ratio_cycle_p50_to_bare_quorum {
        println!(
            "  Redlock / bare Redlock, acquire+release p50: {ratio:.2}   (what tokens, owner checks and validity cost over the bare fan-out)"
        );
    }
    println!(
        "  ratio ours/floor: {:.2}   (the least the {} design must send, with no library code{})",
        report.ratio_ours_to_floor,
        report.kind.label(),
        report
            .floor
            .as_ref()
            .map_or(String::new(), |floor| format!(": {}", floor.name))
    );
    println!(
        "  requests/acq: round trips to Redis per acquire + release (SET NX PX + INCR + the epoch checks go as one pipeline)"
    );
    match &report.memory {
        Some(m) => println!(
            "  memory (MEMORY USAGE): a held lock {} B (lock key {} B + fencing counter {} B + its epoch {} B); an idle lock name {} B (its counter; the epoch expires an hour after its last script grant)",
            m.held_lock_key_bytes + m.fencing_counter_bytes + m.counter_epoch_bytes,
            m.held_lock_key_bytes,
            m.fencing_counter_bytes,
            m.counter_epoch_bytes,
            m.fencing_counter_bytes
        ),
        None => println!("  memory: not measured (the server refused MEMORY USAGE)"),
    }
}
