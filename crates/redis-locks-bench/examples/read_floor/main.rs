//! The floor under an uncontended read lock on this machine and server: how fast the least
//! that a read lock of each design measured here must send to Redis runs, against the bare
//! `SET NX PX` + compare-and-delete that `bench throughput` compares with.
//!
//! ```sh
//! cargo run --release -p redis-locks-bench --example read_floor            # a private server
//! cargo run --release -p redis-locks-bench --example read_floor -- --redis redis://127.0.0.1:7000
//! ```
//!
//! W workers (16, as in `bench throughput --kind read`) each acquire and release a lock of
//! their own on one connection (made as the bench's bare variants make theirs,
//! `cli_support::connection`; the bare variant is the bench's own `BareLock`), every variant
//! in 10 alternating slices, each lock's keys laid out by the library's `LockKeys`. No variant is a lock;
//! each sends only commands a read lock of its design cannot do without, given the project's
//! choices (each reader a lease of its own, given per call; each reader a fencing token of its
//! own from a counter that must be vouched for), so its rate is an upper bound for locks of
//! that design, before any library code runs:
//!
//! - *hash, two scripts*: a read hold as a field of the lock's hash (seed 004's layout, and
//!   today's `RwLock`): a conditional write of several things at once, which Redis 7.0 does
//!   in one round trip only in a script (`src/floors/hold_acquire.lua`, `hold_release.lua`, which
//!   `bench throughput` uses as the floor of the hash-based locks too);
//! - *hash, script + pipeline*: the same, with the release as plain commands (`HDEL` and a
//!   look at the queue, which a release must wake);
//! - *key per reader*: no script at all — each read hold a key of its own with `PX` (its own
//!   lease), in an index a writer's script reads, with the index's TTL kept (`PEXPIRE NX`,
//!   then `PEXPIRE GT`: no key without a TTL, none shortened), the fencing counter and the two
//!   commands that vouch for it as a `Mutex`'s fast attempt does (`ZSCORE` of the
//!   connection's name in the counter's epochs, `CLIENT GETNAME`), and a look at the writer's
//!   key and the queue after the write (a writer's script looks at the index after its own);
//!   the release deletes the key, leaves the index and looks at the queue (8 commands / 3);
//! - *key per reader, unsafe*: the same without the index's TTL and the vouching (4 commands
//!   / 3), for scale: a lock that sends only this leaves an index without expiry and trusts a
//!   counter that may have come back old from a snapshot.
//!
//! Every key of a run carries a random run id, and the run's keys are deleted at the end,
//! whether or not the run got through.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use cli_support::connection;
use cli_support::redis_target::RedisTarget;
use redis::Script;
use redis::aio::ConnectionManager;
use redis_locks::LockKeys;
use redis_locks_bench::BareLock;
use tokio::time::Instant;

/// Options.
#[derive(Parser)]
pub struct Args {
    /// The Redis to use; without it a private redis-server is started.
    #[arg(long)]
    pub redis: Option<String>,
    /// Concurrent workers, each with a lock of its own.
    #[arg(long, default_value_t = 16)]
    pub workers: u16,
    /// How long each variant runs in all, in 10 alternating slices.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
}

/// What one slice measures.
#[derive(Clone, Copy)]
enum Variant {
    Bare,
    HashScripts,
    HashScriptThenPipeline,
    KeyPerReader,
    KeyPerReaderUnsafe,
}

const VARIANTS: [(Variant, &str); 5] = [
    (Variant::Bare, "bare SET NX PX + compare-and-delete"),
    (Variant::HashScripts, "hash, two scripts"),
    (Variant::HashScriptThenPipeline, "hash, script + pipeline"),
    (Variant::KeyPerReader, "key per reader (8 commands / 3)"),
    (
        Variant::KeyPerReaderUnsafe,
        "key per reader, unsafe (4 / 3: no index TTL, no vouching)",
    ),
];

/// What the variants send with: the bench's bare lock, and the hash design's scripts,
/// loaded once.
struct Senders {
    bare: BareLock,
    acquire: Script,
    release: Script,
}

/// The keys of one worker's lock in one run: the library's layout of a lock's keys (the
/// lock key, its fencing counter, the counter's epochs, the queue), and two more in its slot
/// for the designs here (a writer's key, the readers' index).
struct Keys {
    lock: LockKeys,
    writer: String,
    index: String,
}

impl Keys {
    fn new(run: &str, worker: u16) -> Keys {
        let lock = LockKeys::new(&format!("read-floor:{run}:{worker}")).expect("a valid name");
        Keys {
            writer: lock.companion("writer"),
            index: lock.companion("readers"),
            lock,
        }
    }

    /// Every key of the lock but the readers' own (each deleted by its release).
    fn all(&self) -> [&str; 6] {
        let lock = &self.lock;
        [
            lock.lock(),
            lock.fence(),
            lock.epoch(),
            lock.queue(),
            &self.writer,
            &self.index,
        ]
    }
}

/// One acquire and release of a worker's lock (its `n`th), by `variant`.
async fn cycle(
    variant: Variant,
    senders: &Senders,
    conn: &mut ConnectionManager,
    keys: &Keys,
    n: u64,
) -> redis::RedisResult<()> {
    let token = format!("{n:032x}");
    let (lock, counter, epochs, queue) = (
        keys.lock.lock(),
        keys.lock.fence(),
        keys.lock.epoch(),
        keys.lock.queue(),
    );
    let (writer, index) = (&keys.writer, &keys.index);
    let granted = match variant {
        Variant::Bare => {
            senders.bare.try_acquire(lock, &token).await?
                && senders.bare.release(lock, &token).await?
        }
        Variant::HashScripts | Variant::HashScriptThenPipeline => {
            let fence: i64 = senders
                .acquire
                .key(lock)
                .key(counter)
                .key(writer)
                .key(queue)
                .arg(&token)
                .arg("owner")
                .arg(30_000)
                .invoke_async(conn)
                .await?;
            let (deleted, _waiting): (i64, i64) = if matches!(variant, Variant::HashScripts) {
                senders
                    .release
                    .key(lock)
                    .key(queue)
                    .arg(&token)
                    .invoke_async(conn)
                    .await?
            } else {
                redis::pipe()
                    .cmd("HDEL")
                    .arg(lock)
                    .arg(&token)
                    .cmd("EXISTS")
                    .arg(queue)
                    .query_async(conn)
                    .await?
            };
            fence > 0 && deleted == 1
        }
        Variant::KeyPerReader | Variant::KeyPerReaderUnsafe => {
            let hold = format!("{lock}:r:{token}");
            let mut acquire = redis::pipe();
            acquire
                .cmd("SET")
                .arg(&hold)
                .arg("owner")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .cmd("SADD")
                .arg(index)
                .arg(&token)
                .ignore();
            if matches!(variant, Variant::KeyPerReader) {
                acquire
                    .cmd("PEXPIRE")
                    .arg(index)
                    .arg(30_000)
                    .arg("NX")
                    .ignore()
                    .cmd("PEXPIRE")
                    .arg(index)
                    .arg(30_000)
                    .arg("GT")
                    .ignore()
                    .cmd("ZSCORE")
                    .arg(epochs)
                    .arg("name")
                    .ignore()
                    .cmd("CLIENT")
                    .arg("GETNAME")
                    .ignore();
            }
            acquire
                .cmd("INCR")
                .arg(counter)
                .cmd("EXISTS")
                .arg(writer)
                .arg(queue);
            let (set, fence, kept_out): (Option<String>, i64, i64) =
                acquire.query_async(conn).await?;
            let (deleted, _left, _waiting): (i64, i64, i64) = redis::pipe()
                .cmd("DEL")
                .arg(&hold)
                .cmd("SREM")
                .arg(index)
                .arg(&token)
                .cmd("EXISTS")
                .arg(queue)
                .query_async(conn)
                .await?;
            set.is_some() && fence > 0 && kept_out == 0 && deleted == 1
        }
    };
    if !granted {
        return Err(redis::RedisError::from(std::io::Error::other(
            "a cycle was refused: is another client using these keys?",
        )));
    }
    Ok(())
}

/// Runs every worker (one lock's `keys` each) through `variant` until `deadline`; returns
/// the cycles done.
async fn slice(
    variant: Variant,
    senders: &Arc<Senders>,
    conn: &ConnectionManager,
    keys: &[Arc<Keys>],
    deadline: Instant,
) -> redis::RedisResult<u64> {
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for keys in keys {
        let (senders, mut conn, keys, done) =
            (senders.clone(), conn.clone(), keys.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < deadline {
                cycle(variant, &senders, &mut conn, &keys, n).await?;
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), redis::RedisError>(())
        }));
    }
    for task in tasks {
        task.await.expect("a worker panicked")?;
    }
    Ok(done.load(Ordering::Relaxed))
}

/// Warms up, then runs the variants in alternating slices; returns each one's cycles per
/// second, in the order of [`VARIANTS`].
async fn measure(
    senders: &Arc<Senders>,
    conn: &ConnectionManager,
    keys: &[Arc<Keys>],
    duration: Duration,
) -> redis::RedisResult<Vec<f64>> {
    // The scripts loaded, the connection busy.
    for (variant, _) in VARIANTS {
        let deadline = Instant::now() + Duration::from_millis(100);
        slice(variant, senders, conn, keys, deadline).await?;
    }
    let mut totals = [(0u64, Duration::ZERO); VARIANTS.len()];
    for _ in 0..10 {
        for (i, (variant, _)) in VARIANTS.iter().enumerate() {
            let start = Instant::now();
            totals[i].0 += slice(*variant, senders, conn, keys, start + duration / 10).await?;
            totals[i].1 += start.elapsed();
        }
    }
    Ok(totals
        .iter()
        .map(|(cycles, took)| *cycles as f64 / took.as_secs_f64())
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run(&Args::parse()).await.map(|_| ())
}

/// Measures, prints the table, and returns each variant's name and acquire + release cycles
/// per second, in the order of the table (the bare one first).
pub async fn run(args: &Args) -> Result<Vec<(&'static str, f64)>, Box<dyn std::error::Error>> {
    let target = RedisTarget::resolve(args.redis.clone()).map_err(|err| err.to_string())?;
    let mut conn = connection(target.url())
        .await
        .map_err(|err| err.to_string())?;
    let senders = Arc::new(Senders {
        bare: BareLock::new(
            cli_support::endpoint::SideConnection::Server(conn.clone()),
            Duration::from_secs(30),
        ),
        acquire: Script::new(include_str!("../../src/floors/hold_acquire.lua")),
        release: Script::new(include_str!("../../src/floors/hold_release.lua")),
    });
    let run = format!("{:08x}", rand::random::<u32>());
    let keys: Vec<Arc<Keys>> = (0..args.workers)
        .map(|worker| Arc::new(Keys::new(&run, worker)))
        .collect();
    println!(
        "read_floor: {} workers on one connection, {:?} per variant in 10 alternating slices, on {}",
        args.workers,
        args.duration,
        target.describe()
    );
    let measured = measure(&senders, &conn, &keys, args.duration).await;
    // The run's keys go, whether or not it got through (a reader's own key is deleted by its
    // release, or ends with its lease); the run's own error comes first.
    let mut cleaned = Ok(());
    for keys in &keys {
        let deleted: redis::RedisResult<i64> = redis::cmd("DEL")
            .arg(&keys.all()[..])
            .query_async(&mut conn)
            .await;
        cleaned = cleaned.and(deleted.map(drop));
    }
    let rates = measured?;
    cleaned?;
    println!("  {:60} {:>12} {:>8}", "variant", "acq+rel/s", "/ bare");
    for ((_, name), rate) in VARIANTS.iter().zip(&rates) {
        println!("  {name:60} {rate:>12.0} {:>8.2}", rate / rates[0]);
    }
    Ok(VARIANTS.iter().map(|(_, name)| *name).zip(rates).collect())
}
