//! `redis-locks list [PATTERN]`: every lock on a server (a cluster's every master, a Sentinel's
//! master), each with its kind, holders, shortest remaining lease, waiters and fencing counter.
//!
//! Locks are found by their companion keys, with `SCAN` (never `KEYS`): every lock that was
//! ever granted keeps its fencing counter (`…:fence`), and one that is only waited for has its
//! line (`…:queue`). So a lock whose holder released it, or whose lease ran out, is listed as
//! `free` with its counter. Each lock is then read as `status` reads it, several at once.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis_locks::{Client, LockKeys};
use serde::Serialize;

use crate::status::{Found, inspect};
use cli_support::endpoint::{Endpoint, SideConnection};
use cli_support::exit::CliError;
use cli_support::redis_target::RedisTarget;
use cli_support::settings::SettingsArgs;
use cli_support::topology::TopologyArgs;

/// How many locks are read at once.
const AT_ONCE: usize = 64;

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u64 = 1000;

/// The companions that show a lock is there: its fencing counter and its line of waiters.
const MARKS: [&str; 2] = [":fence", ":queue"];

/// The Redis a command that takes no lock acts on (`list`, `top`, `status`, `break`).
#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    topology: TopologyArgs,
    #[command(flatten)]
    settings: SettingsArgs,
    /// Redis to use [default: redis://127.0.0.1:6379]. Several (or a comma list in
    /// REDIS_URL): a Redlock's servers (status shows each node's view and whether a majority
    /// agrees on the holder; break breaks it on each; list and top read one server).
    #[arg(long, env = "REDIS_URL", value_delimiter = ',')]
    redis: Vec<String>,
}

impl ServiceArgs {
    /// The Redis these arguments name.
    ///
    /// # Errors
    /// [`CliError::Usage`] for flags that do not go together.
    pub fn target(&self) -> Result<RedisTarget, CliError> {
        RedisTarget::local_or(
            self.topology.wanted(self.redis.clone())?,
            self.settings.settings()?,
        )
    }
}

/// Which lock service `list` and `top` read, and which of its locks.
#[derive(Debug, clap::Args)]
pub struct ListedArgs {
    /// Only the locks whose names match this glob (`*`, `?`, `[...]`).
    pub pattern: Option<String>,
    #[command(flatten)]
    pub service: ServiceArgs,
}

/// One lock, as `list --json` prints it.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The lock's name (without the namespace).
    pub name: String,
    /// `mutex` (a `Mutex` or `FairMutex`), `rwlock`, `reentrant`, `semaphore`, or `free` (a
    /// string or hash lock nobody holds: released, expired, or between a release and the next
    /// grant; its fencing counter is kept). A `Semaphore` stays `semaphore` while anyone waits.
    pub kind: &'static str,
    /// Who holds it: one holder per `Mutex`, one per hold of an `RwLock` or `ReentrantMutex`,
    /// one per permit holder of a `Semaphore`.
    pub holders: Vec<Holder>,
    /// The shortest lease left among the holders, in ms (`None` when nobody holds, or the key
    /// has no expiry).
    pub lease_remaining_ms: Option<u64>,
    /// Waiters: readers and writers in line (`RwLock`, `ReentrantMutex`), waiters in line
    /// (`Semaphore`), processes listening for the release (`Mutex`, `FairMutex`).
    pub waiting: u64,
    /// With a `Semaphore`: its N.
    pub permits: Option<u32>,
    /// The latest fencing token handed out.
    pub fencing_counter: Option<u64>,
}

/// One holder of a listed lock.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// Its owner token (a `Mutex`'s) or owner id (a hold's).
    pub owner: String,
    /// `read` or `write` for a hold of an `RwLock` or `ReentrantMutex`.
    mode: Option<String>,
    /// With a `Semaphore`: the permits it holds.
    permits: Option<u32>,
    /// Its lease left by the server's clock.
    lease_remaining_ms: Option<u64>,
}

impl Row {
    /// A semaphore's permits in use (0 for the other kinds).
    pub fn permits_in_use(&self) -> u32 {
        self.holders
            .iter()
            .filter_map(|holder| holder.permits)
            .sum()
    }
}

/// Lists the locks whose names match `pattern` (a glob: `*`, `?`, `[…]`; every lock without
/// one), as a table or one JSON object with `json`.
///
/// # Errors
/// As [`Lister::open`] and [`Lister::rows`].
pub async fn run(endpoint: &Endpoint, pattern: Option<&str>, json: bool) -> Result<(), CliError> {
    let rows = Lister::open(endpoint, pattern).await?.rows().await?;
    if json {
        #[derive(Serialize)]
        struct Listing<'a> {
            count: usize,
            locks: &'a [Row],
        }
        let listing = Listing {
            count: rows.len(),
            locks: &rows,
        };
        println!("{}", serde_json::to_string(&listing).expect("plain data"));
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// Reads the locks of one lock service again and again over the same connections (`list`
/// once, `top` every refresh).
pub struct Lister {
    client: Client,
    side: SideConnection,
    namespace: String,
    pattern: Option<glob::Pattern>,
}

impl Lister {
    /// Connects to `endpoint`, for the locks whose names match `pattern`.
    ///
    /// # Errors
    /// [`CliError::Usage`] for a bad pattern or several `--redis` nodes (a Redlock's nodes
    /// are listed one `--redis` at a time); what connecting says.
    pub async fn open(endpoint: &Endpoint, pattern: Option<&str>) -> Result<Lister, CliError> {
        let pattern = pattern
            .map(glob::Pattern::new)
            .transpose()
            .map_err(|err| CliError::Usage(format!("bad PATTERN: {err}")))?;
        if endpoint.is_redlock() {
            return Err(CliError::Usage(
                "one lock service is read (a server, a cluster, a Sentinel master): give one \
                 --redis, and read a Redlock's nodes one at a time"
                    .into(),
            ));
        }
        Ok(Lister {
            client: endpoint.connect().await?,
            side: endpoint.side().await?,
            namespace: endpoint.settings().namespace().to_string(),
            pattern,
        })
    }

    /// Every lock now, sorted by name.
    ///
    /// # Errors
    /// What scanning and reading the server says.
    pub async fn rows(&mut self) -> Result<Vec<Row>, CliError> {
        let keys = scan(&mut self.side).await?;
        let names: BTreeSet<String> = keys
            .iter()
            .filter_map(|key| name_of(&self.namespace, key))
            .filter(|name| self.pattern.as_ref().is_none_or(|p| p.matches(name)))
            .collect();
        let rows: Vec<Option<Row>> = stream::iter(names)
            .map(|name| row(&self.client, name))
            .buffered(AT_ONCE)
            .try_collect()
            .await?;
        Ok(rows.into_iter().flatten().collect())
    }
}

/// Every key that marks a lock ([`MARKS`]), from every master: `SCAN` on one server, on each
/// master of a cluster.
async fn scan(side: &mut SideConnection) -> Result<BTreeSet<String>, CliError> {
    let unreachable = |err: redis::RedisError| CliError::Unavailable(format!("SCAN: {err}"));
    let mut found = BTreeSet::new();
    match side {
        SideConnection::Server(connection) => {
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = scan_step(cursor)
                    .query_async(connection)
                    .await
                    .map_err(unreachable)?;
                keep_marks(&mut found, keys);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        SideConnection::Cluster(connection) => {
            for (host, port) in masters(connection).await.map_err(unreachable)? {
                let mut cursor = 0u64;
                loop {
                    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    let reply = connection
                        .route_command(scan_step(cursor), routing)
                        .await
                        .map_err(unreachable)?;
                    let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
                        .map_err(|err| CliError::Unavailable(format!("SCAN: {err}")))?;
                    keep_marks(&mut found, keys);
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
            }
        }
    }
    Ok(found)
}

/// One `SCAN` step from `cursor`.
fn scan_step(cursor: u64) -> redis::Cmd {
    redis::cmd("SCAN")
        .arg(cursor)
        .arg("COUNT")
        .arg(SCAN_COUNT)
        .clone()
}

/// Adds the keys of `keys` that end in a mark to `found`.
fn keep_marks(found: &mut BTreeSet<String>, keys: Vec<String>) {
    found.extend(
        keys.into_iter()
            .filter(|key| MARKS.iter().any(|mark| key.ends_with(mark))),
    );
}

/// The `host:port` of each master of the cluster (`CLUSTER SLOTS`).
async fn masters(
    connection: &mut redis::cluster_async::ClusterConnection,
) -> redis::RedisResult<BTreeSet<(String, u16)>> {
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(connection)
        .await?;
    let mut masters = BTreeSet::new();
    for range in slots {
        // [start, end, [host, port, id, ...] (the master), replicas...]
        if let Some(master) = range.get(2) {
            let (host, port): (String, u16) = match master {
                redis::Value::Array(fields) if fields.len() >= 2 => (
                    redis::from_redis_value(fields[0].clone())?,
                    redis::from_redis_value(fields[1].clone())?,
                ),
                _ => continue,
            };
            masters.insert((host, port));
        }
    }
    Ok(masters)
}

/// The lock name a marking companion `key` belongs to under `namespace`, if any: the key
/// without its mark, without the braces the layout adds around a name without a hash tag, and
/// without the namespace — checked by laying the name out again. A key `{x}:fence` is laid out
/// by both `x` and `{x}` (the two names share their companions); it is listed as `x`.
fn name_of(namespace: &str, key: &str) -> Option<String> {
    let (mark, base) = MARKS
        .iter()
        .find_map(|mark| key.strip_suffix(mark).map(|base| (*mark, base)))?;
    let unbraced = base
        .strip_prefix('{')
        .and_then(|inner| inner.strip_suffix('}'));
    [unbraced, Some(base)]
        .into_iter()
        .flatten()
        .find_map(|lock_key| {
            let name = if namespace.is_empty() {
                lock_key
            } else {
                lock_key.strip_prefix(namespace)?.strip_prefix(':')?
            };
            let laid = LockKeys::with_namespace(namespace, name).ok()?;
            let companion = if mark == ":fence" {
                laid.fence()
            } else {
                laid.queue()
            };
            (companion == key).then(|| name.to_string())
        })
}

/// Reads one lock: `None` when its key holds something that is no lock's.
async fn row(client: &Client, name: String) -> Result<Option<Row>, CliError> {
    let found = match inspect(client, &name).await {
        Ok(found) => found,
        Err(redis_locks::Error::WrongType { .. }) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let ms = |duration: Duration| duration.as_millis() as u64;
    let holder = |owner: &str, mode: Option<String>, permits, lease: Option<Duration>| Holder {
        owner: owner.to_string(),
        mode,
        permits,
        lease_remaining_ms: lease.map(ms),
    };
    // (kind, holders, waiting, N, counter)
    let (kind, holders, waiting, permits, counter) = match found {
        Found::Mutex(state) => (
            if state.holder.is_some() {
                "mutex"
            } else {
                "free"
            },
            state
                .holder
                .iter()
                .map(|h| holder(&h.owner, None, None, h.lease_remaining))
                .collect::<Vec<_>>(),
            state.listeners,
            None,
            state.fencing_counter,
        ),
        Found::Holds(state) => (
            match state.kind.as_deref() {
                Some("reentrant") => "reentrant",
                Some(_) => "rwlock",
                None => "free",
            },
            state
                .holds
                .iter()
                .map(|h| {
                    holder(
                        &h.owner,
                        Some(h.mode.to_string()),
                        None,
                        Some(h.lease_remaining),
                    )
                })
                .collect(),
            state.waiting_readers + state.waiting_writers,
            None,
            state.fencing_counter,
        ),
        Found::Semaphore(state) => (
            "semaphore",
            state
                .holders
                .iter()
                .map(|h| holder(&h.owner, None, Some(h.permits), Some(h.lease_remaining)))
                .collect(),
            state.waiting,
            state.permits,
            state.fencing_counter,
        ),
    };
    Ok(Some(Row {
        name,
        kind,
        lease_remaining_ms: holders.iter().filter_map(|h| h.lease_remaining_ms).min(),
        holders,
        waiting,
        permits,
        fencing_counter: counter.map(|token| token.get()),
    }))
}

/// The rows as a table, one lock per line.
fn print_table(rows: &[Row]) {
    if rows.is_empty() {
        println!("no locks");
        return;
    }
    let width = rows
        .iter()
        .map(|row| row.name.chars().count())
        .max()
        .unwrap_or(0)
        .max("NAME".len());
    println!(
        "{:<width$}  {:<9}  {:>7}  {:>10}  {:>7}  FENCING COUNTER",
        "NAME", "KIND", "HOLDERS", "LEASE", "WAITING"
    );
    for row in rows {
        let holders = match row.permits {
            Some(n) => format!("{}/{n}", row.permits_in_use()),
            None => row.holders.len().to_string(),
        };
        let lease = row
            .lease_remaining_ms
            .map(|left| humantime::format_duration(Duration::from_millis(left)).to_string())
            .unwrap_or_else(|| "-".into());
        let counter = row
            .fencing_counter
            .map(|counter| counter.to_string())
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<width$}  {:<9}  {:>7}  {:>10}  {:>7}  {counter}",
            row.name, row.kind, holders, lease, row.waiting
        );
    }
    println!("{} locks", rows.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_of(names: &[&str], namespace: &str) -> BTreeSet<String> {
        names
            .iter()
            .flat_map(|name| {
                let laid = LockKeys::with_namespace(namespace, name).unwrap();
                [laid.fence().to_string(), laid.queue().to_string()]
            })
            .collect()
    }

    #[test]
    fn every_companion_leads_back_to_its_lock() {
        for namespace in ["", "app"] {
            let names = ["jobs:nightly", "{tenant-7}:cart", "a.b", "x"];
            let keys = keys_of(&names, namespace);
            for key in &keys {
                let name = name_of(namespace, key).unwrap();
                assert!(names.contains(&name.as_str()), "{key} -> {name}");
            }
        }
    }

    #[test]
    fn keys_that_are_no_locks_companions_lead_nowhere() {
        assert_eq!(name_of("", "user:42"), None);
        // Not laid out as a lock's: the braces are missing.
        assert_eq!(name_of("", "plain:fence"), None);
        // Another namespace's lock, or none.
        assert_eq!(name_of("app", "{other:x}:fence"), None);
        assert_eq!(name_of("app", "{x}:queue"), None);
        // A name that is all hash tag shares its companions with the name inside.
        assert_eq!(name_of("", "{x}:fence").as_deref(), Some("x"));
    }
}
