//! `redis-locks status NAME`: who holds a lock, its lease, whether anyone waits, the
//! fencing counter. A `Mutex` or `FairMutex` (a string key) shows its holder; an `RwLock` or
//! `ReentrantMutex` (a hash of holds) shows every hold and the waiters in line; a `Semaphore`
//! (a hash of holders with N) shows N, the permits in use and every holder with its lease.

use std::time::Duration;

use redis_locks::{Client, HoldsState, LockState, Redlock, RedlockState, SemaphoreState};
use serde::Serialize;

use cli_support::endpoint::{Endpoint, Place, user_of};
use cli_support::exit::CliError;
use cli_support::settings::is_tls;

/// A lock's state, whichever kind of lock the name is in use as.
pub enum Found {
    /// A `Mutex` or `FairMutex`, or a free name.
    Mutex(LockState),
    /// An `RwLock` or a `ReentrantMutex`, held.
    Holds(HoldsState),
    /// A `Semaphore` that somebody holds or waits for.
    Semaphore(SemaphoreState),
}

/// Reads the state of the lock `name`: as a `Mutex` first; when its key is a hash
/// (`WrongType`), as a lock of holds; when it is no lock of holds, as a `Semaphore` (whose
/// hash lasts while anyone holds or waits). A key that is no lock's (a foreign key, or one
/// freed in between) is asked about as a `Mutex` again, which then says what it is.
///
/// # Errors
/// As `Mutex::state`, `RwLock::state` and `Semaphore::state`: `WrongType` for a key that is
/// no lock's.
pub async fn inspect(client: &Client, name: &str) -> Result<Found, redis_locks::Error> {
    let mutex = client.mutex(name)?;
    // The handle's N matters to acquisitions only; the state says the server's.
    let semaphore = client.semaphore(name, 1)?;
    match mutex.state().await {
        Err(redis_locks::Error::WrongType { .. }) => {}
        state => return state.map(Found::Mutex),
    }
    match client.rwlock(name)?.state().await {
        Ok(holds) if holds.kind.is_some() => return Ok(Found::Holds(holds)),
        Ok(_) | Err(redis_locks::Error::WrongType { .. }) => {}
        Err(err) => return Err(err),
    }
    match semaphore.state().await {
        Ok(state) if !state.holders.is_empty() || state.permits.is_some() => {
            return Ok(Found::Semaphore(state));
        }
        Ok(_) | Err(redis_locks::Error::WrongType { .. }) => {}
        Err(err) => return Err(err),
    }
    mutex.state().await.map(Found::Mutex)
}

/// What `status --json` prints for a `Mutex` or `FairMutex` (or a free name).
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    /// Always `"mutex"`: a `Mutex` or a `FairMutex` (or a free name).
    kind: &'static str,
    held: bool,
    holder_owner: Option<&'a str>,
    /// A waiter marked the lock during this holder's tenure (it may have gone since).
    waited_for: bool,
    /// Processes waiting for the lock right now (subscribers of its wake channel).
    waiting_processes: u64,
    fencing_counter: Option<u64>,
    lease_remaining_ms: Option<u64>,
    #[serde(flatten)]
    served: &'a Served,
}

/// Where the lock is served and how this connection reaches it, in `status --json` of one
/// lock service.
#[derive(Debug, Serialize)]
pub struct Served {
    /// `"server"`, `"cluster"` or `"sentinel"`.
    topology: &'static str,
    /// `host:port` of the master of the lock's hash slot (a cluster), of the current master
    /// (Sentinel), or the server's URL (its password hidden).
    served_by: String,
    #[serde(flatten)]
    access: Access,
}

/// How the connection reaches the lock: TLS or not, as which user, under which namespace.
#[derive(Debug, Serialize)]
struct Access {
    /// Whether the connection is TLS (`rediss://`).
    tls: bool,
    /// The user the connection logged in as: the URL's user name, or `default`.
    user: String,
    /// The key namespace; `None` when there is none.
    namespace: Option<String>,
    /// The lock key: the name, under the namespace if there is one.
    key: String,
}

impl Access {
    fn of(endpoint: &Endpoint, name: &str) -> Result<Access, CliError> {
        let namespace = endpoint.settings().namespace();
        Ok(Access {
            tls: endpoint.is_tls(),
            user: endpoint.user(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            key: endpoint.keys(name)?.lock().to_string(),
        })
    }

    /// The lines of the text output.
    fn print(&self) {
        println!("key             {}", self.key);
        match &self.namespace {
            Some(namespace) => println!("namespace       {namespace}"),
            None => println!("namespace       none (the lock key is the name itself)"),
        }
        println!(
            "connection      {} as user {}",
            if self.tls {
                "TLS (rediss://)"
            } else {
                "plaintext (redis://)"
            },
            self.user
        );
    }
}

impl Served {
    /// The line of the text output, with what the node is.
    fn line(&self) -> String {
        match self.topology {
            "cluster" => format!("{} (the master of the lock's hash slot)", self.served_by),
            "sentinel" => format!("{} (the master the sentinels name now)", self.served_by),
            _ => self.served_by.clone(),
        }
    }
}

/// What `status --json` prints for an `RwLock` or a `ReentrantMutex`.
#[derive(Debug, Serialize)]
struct HoldsStatus<'a> {
    name: &'a str,
    /// `"rwlock"` or `"reentrant"`.
    kind: Option<&'a str>,
    held: bool,
    /// Every live hold, writers first, then by fencing token.
    holds: Vec<Hold<'a>>,
    hold_count: usize,
    waiting_readers: u64,
    waiting_writers: u64,
    fencing_counter: Option<u64>,
    #[serde(flatten)]
    served: &'a Served,
}

/// One hold in [`HoldsStatus`].
#[derive(Debug, Serialize)]
struct Hold<'a> {
    /// `"read"` or `"write"`.
    mode: redis_locks::HoldMode,
    owner: &'a str,
    lease_remaining_ms: u64,
    /// `null` for a lone read hold taken without a script (its guard has its token).
    fencing_token: Option<u64>,
}

/// What `status --json` prints for a `Semaphore`.
#[derive(Debug, Serialize)]
struct SemaphoreStatus<'a> {
    name: &'a str,
    /// Always `"semaphore"`.
    kind: &'static str,
    held: bool,
    /// N as the server keeps it (`None` once nobody holds or waits).
    permits: Option<u32>,
    /// The permits the holders hold.
    permits_in_use: u32,
    /// N less the permits in use (0 when N shrank below them).
    permits_available: Option<u32>,
    /// Every holder whose lease has not ended, the earliest to end first.
    holders: Vec<PermitHolderStatus<'a>>,
    /// Waiters in line (their place lease still runs).
    waiting: u64,
    fencing_counter: Option<u64>,
    #[serde(flatten)]
    served: &'a Served,
}

/// One holder in [`SemaphoreStatus`].
#[derive(Debug, Serialize)]
struct PermitHolderStatus<'a> {
    owner: &'a str,
    permits: u32,
    lease_remaining_ms: u64,
}

/// What `status --json` prints for a Redlock (several `--redis`).
#[derive(Debug, Serialize)]
struct RedlockStatus<'a> {
    name: &'a str,
    /// Always `"redlock"`.
    kind: &'static str,
    /// The key namespace; `None` when there is none.
    namespace: Option<&'a str>,
    /// The lock key on every node.
    key: &'a str,
    /// How many nodes must agree.
    quorum: usize,
    /// The owner a majority of nodes agree holds the lock, if any.
    majority_holder: Option<&'a str>,
    /// The greatest fencing counter among the nodes that answered.
    fencing_counter: Option<u64>,
    nodes: Vec<NodeStatus<'a>>,
}

/// One node in [`RedlockStatus`].
#[derive(Debug, Serialize)]
struct NodeStatus<'a> {
    /// The node's URL, its password hidden.
    url: String,
    /// Whether the connection to the node is TLS (`rediss://`).
    tls: bool,
    /// The user the connection logged in as: the URL's user name, or `default`.
    user: String,
    held: bool,
    holder_owner: Option<&'a str>,
    lease_remaining_ms: Option<u64>,
    fencing_counter: Option<u64>,
    /// Why the node's state could not be read, if it could not.
    error: Option<String>,
}

/// Prints the lock's state as a few lines, or one JSON object with `json`.
pub async fn run(endpoint: &Endpoint, name: &str, json: bool) -> Result<(), CliError> {
    // A bad name is bad usage, whether or not Redis can be reached.
    let access = Access::of(endpoint, name)?;
    if endpoint.is_redlock() {
        let clients = crate::nodes::connect_all(endpoint).await?;
        let state = Redlock::new(&clients, name)?.state().await?;
        let urls = match endpoint.place() {
            Place::Servers(urls) => urls.as_slice(),
            _ => &[],
        };
        show_redlock(name, &access, urls, &state, json);
        return Ok(());
    }
    let client = endpoint.connect().await?;
    let found = inspect(&client, name).await?;
    let served = Served {
        topology: endpoint.kind(),
        // Hidden by the library already; once more for what it may not know (a unix://
        // URL's pass= query).
        served_by: cli_support::redact(&client.serving(name).await?),
        access,
    };
    match found {
        Found::Mutex(state) => show_mutex(name, &state, &served, json),
        Found::Holds(state) => show_holds(name, &state, &served, json),
        Found::Semaphore(state) => show_semaphore(name, &state, &served, json),
    }
    Ok(())
}

fn print_json(value: &impl Serialize) {
    println!("{}", serde_json::to_string(value).expect("plain data"));
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis() as u64
}

fn show_mutex(name: &str, state: &LockState, served: &Served, json: bool) {
    let holder = state.holder.as_ref();
    if json {
        return print_json(&Status {
            name,
            kind: "mutex",
            held: holder.is_some(),
            holder_owner: holder.map(|h| h.owner.as_str()),
            waited_for: holder.is_some_and(|h| h.waited_for),
            waiting_processes: state.listeners,
            fencing_counter: state.fencing_counter.map(|t| t.get()),
            lease_remaining_ms: holder.and_then(|h| h.lease_remaining).map(ms),
            served,
        });
    }
    println!("lock            {name}");
    println!("served by       {}", served.line());
    served.access.print();
    match holder {
        Some(holder) => {
            println!("state           held");
            println!("holder owner    {}", holder.owner);
            match holder.lease_remaining {
                Some(left) => println!("lease remaining {}", humantime::format_duration(left)),
                None => {
                    println!("lease remaining none: the key has no expiry (not set by redis-locks)")
                }
            }
            if holder.waited_for {
                println!(
                    "marked          yes: a waiter asked during this tenure (it may have gone \
                     since); the release will publish a wake-up"
                );
            }
        }
        None => println!("state           free"),
    }
    match state.listeners {
        0 => println!("waiting         none"),
        1 => println!("waiting         1 process listens for the release"),
        n => println!("waiting         {n} processes listen for the release"),
    }
    print_counter(
        state.fencing_counter.map(|t| t.get()),
        holder.is_some(),
        "the holder's token is at most this",
    );
}

fn show_holds(name: &str, state: &HoldsState, served: &Served, json: bool) {
    if json {
        return print_json(&HoldsStatus {
            name,
            kind: state.kind.as_deref(),
            held: !state.holds.is_empty(),
            holds: state
                .holds
                .iter()
                .map(|hold| Hold {
                    mode: hold.mode,
                    owner: &hold.owner,
                    lease_remaining_ms: ms(hold.lease_remaining),
                    fencing_token: hold.fencing_token.map(|token| token.get()),
                })
                .collect(),
            hold_count: state.hold_count(),
            waiting_readers: state.waiting_readers,
            waiting_writers: state.waiting_writers,
            fencing_counter: state.fencing_counter.map(|t| t.get()),
            served,
        });
    }
    println!("lock            {name}");
    println!("served by       {}", served.line());
    served.access.print();
    let kind = state.kind.as_deref().unwrap_or("none");
    match kind {
        "rwlock" => println!("kind            rwlock (read-write lock)"),
        "reentrant" => println!("kind            reentrant (reentrant mutex)"),
        other => println!("kind            {other}"),
    }
    let state_line = match (state.writer(), state.hold_count()) {
        (_, 0) => "free".to_string(),
        (Some(writer), _) => format!("held for writing by owner {writer}"),
        (None, 1) => "held for reading by 1 hold".to_string(),
        (None, n) => format!("held for reading by {n} holds"),
    };
    println!("state           {state_line}");
    for hold in &state.holds {
        println!(
            "hold            {:<5} owner {}  lease remaining {}  fencing token {}",
            hold.mode.to_string(),
            hold.owner,
            humantime::format_duration(hold.lease_remaining),
            hold.fencing_token.map_or_else(
                || "not kept by the server (the holder's guard has it)".to_string(),
                |token| token.to_string()
            )
        );
    }
    println!("holds           {}", state.hold_count());
    println!(
        "waiting         {} reader(s) and {} writer(s) in line",
        state.waiting_readers, state.waiting_writers
    );
    print_counter(
        state.fencing_counter.map(|t| t.get()),
        !state.holds.is_empty(),
        "every hold's token is at most this",
    );
}

fn show_semaphore(name: &str, state: &SemaphoreState, served: &Served, json: bool) {
    let in_use = state.in_use();
    if json {
        return print_json(&SemaphoreStatus {
            name,
            kind: "semaphore",
            held: !state.holders.is_empty(),
            permits: state.permits,
            permits_in_use: in_use,
            permits_available: state.permits.map(|n| n.saturating_sub(in_use)),
            holders: state
                .holders
                .iter()
                .map(|holder| PermitHolderStatus {
                    owner: &holder.owner,
                    permits: holder.permits,
                    lease_remaining_ms: ms(holder.lease_remaining),
                })
                .collect(),
            waiting: state.waiting,
            fencing_counter: state.fencing_counter.map(|t| t.get()),
            served,
        });
    }
    println!("lock            {name}");
    println!("served by       {}", served.line());
    served.access.print();
    println!("kind            semaphore");
    match state.permits {
        Some(n) => println!(
            "permits         {in_use} of {n} in use, {} free",
            n.saturating_sub(in_use)
        ),
        None => println!("permits         {in_use} in use (N not kept: nobody holds or waits)"),
    }
    for holder in &state.holders {
        println!(
            "holder          owner {}  {} permit(s)  lease remaining {}",
            holder.owner,
            holder.permits,
            humantime::format_duration(holder.lease_remaining)
        );
    }
    println!("holders         {}", state.holders.len());
    println!("waiting         {} in line", state.waiting);
    print_counter(
        state.fencing_counter.map(|t| t.get()),
        !state.holders.is_empty(),
        "every holder's token is at most this",
    );
}

/// The Redlock's state; `urls` are its nodes' URLs in the order of `state.nodes`.
fn show_redlock(name: &str, access: &Access, urls: &[String], state: &RedlockState, json: bool) {
    let url_of = |index: usize| urls.get(index).map_or("", String::as_str);
    if json {
        return print_json(&RedlockStatus {
            name,
            kind: "redlock",
            namespace: access.namespace.as_deref(),
            key: &access.key,
            quorum: state.quorum,
            majority_holder: state.holder(),
            fencing_counter: state.fencing_counter().map(|t| t.get()),
            nodes: state
                .nodes
                .iter()
                .enumerate()
                .map(|(index, node)| {
                    let holder = node.state.as_ref().ok().and_then(|s| s.holder.as_ref());
                    NodeStatus {
                        url: cli_support::redact(&node.url),
                        tls: is_tls(url_of(index)),
                        user: user_of(url_of(index)),
                        held: holder.is_some(),
                        holder_owner: holder.map(|h| h.owner.as_str()),
                        lease_remaining_ms: holder.and_then(|h| h.lease_remaining).map(ms),
                        fencing_counter: node
                            .state
                            .as_ref()
                            .ok()
                            .and_then(|s| s.fencing_counter)
                            .map(|t| t.get()),
                        error: node
                            .state
                            .as_ref()
                            .err()
                            .map(|err| cli_support::redact(&err.to_string())),
                    }
                })
                .collect(),
        });
    }
    println!("lock            {name}");
    println!("key             {}", access.key);
    match &access.namespace {
        Some(namespace) => println!("namespace       {namespace}"),
        None => println!("namespace       none (the lock key is the name itself)"),
    }
    println!(
        "kind            redlock over {} nodes (a majority is {})",
        state.nodes.len(),
        state.quorum
    );
    match state.holder() {
        Some(owner) => println!("state           held: a majority agrees on owner {owner}"),
        None => println!("state           free: no owner holds a majority"),
    }
    for (index, node) in state.nodes.iter().enumerate() {
        let view = match &node.state {
            Err(err) => format!("unreachable ({})", cli_support::redact(&err.to_string())),
            Ok(LockState {
                holder: Some(holder),
                ..
            }) => match holder.lease_remaining {
                Some(left) => format!(
                    "held by {} for {}",
                    holder.owner,
                    humantime::format_duration(left)
                ),
                None => format!(
                    "held by {} with no expiry (not set by redis-locks)",
                    holder.owner
                ),
            },
            Ok(_) => "free".to_string(),
        };
        println!(
            "node            {}  ({}, user {})  {view}",
            cli_support::redact(&node.url),
            if is_tls(url_of(index)) {
                "TLS"
            } else {
                "plaintext"
            },
            user_of(url_of(index))
        );
    }
    print_counter(
        state.fencing_counter().map(|t| t.get()),
        state.holder().is_some(),
        "the greatest of the nodes' counters; the next holder's token is greater",
    );
}

fn print_counter(counter: Option<u64>, held: bool, note: &str) {
    match counter {
        Some(counter) if held => println!("fencing counter {counter} ({note})"),
        Some(counter) => println!("fencing counter {counter}"),
        None => println!("fencing counter none (never taken)"),
    }
}
