//! `redis-locks status NAME`: who holds a lock, its lease, whether anyone waits, the
//! fencing counter. A `Mutex` or `FairMutex` (a string key) shows its holder; an `RwLock` or
//! `ReentrantMutex` (a hash of holds) shows every hold and the waiters in line.

use std::time::Duration;

use redis_locks::{Client, ClientOptions, HoldsState, LockKeys, LockState, Redlock, RedlockState};
use serde::Serialize;

use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;

/// A lock's state, whichever kind of lock the name is in use as.
pub enum Found {
    /// A `Mutex` or `FairMutex`, or a free name.
    Mutex(LockState),
    /// An `RwLock` or a `ReentrantMutex`, held.
    Holds(HoldsState),
}

/// Reads the state of the lock `name`: as a `Mutex` first; when its key is a hash
/// (`WrongType`), as a lock of holds. A hash that is no lock of holds (a foreign key, or one
/// freed in between) is asked about as a `Mutex` again, which then says what it is.
///
/// # Errors
/// As `Mutex::state` and `RwLock::state`: `WrongType` for a key that is no lock's.
pub async fn inspect(client: &Client, name: &str) -> Result<Found, redis_locks::Error> {
    let mutex = client.mutex(name)?;
    match mutex.state().await {
        Err(redis_locks::Error::WrongType { .. }) => {}
        state => return state.map(Found::Mutex),
    }
    let holds = client.rwlock(name)?.state().await?;
    if holds.kind.is_some() {
        return Ok(Found::Holds(holds));
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

/// Where the lock is served, in `status --json` of one lock service.
#[derive(Debug, Serialize)]
pub struct Served {
    /// `"server"`, `"cluster"` or `"sentinel"`.
    topology: &'static str,
    /// `host:port` of the master of the lock's hash slot (a cluster), of the current master
    /// (Sentinel), or the server's URL (its password hidden).
    served_by: String,
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
    fencing_token: u64,
}

/// What `status --json` prints for a Redlock (several `--redis`).
#[derive(Debug, Serialize)]
struct RedlockStatus<'a> {
    name: &'a str,
    /// Always `"redlock"`.
    kind: &'static str,
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
    url: &'a str,
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
    LockKeys::new(name)?;
    if endpoint.is_redlock() {
        let clients = crate::nodes::connect_all(endpoint).await?;
        let state = Redlock::new(&clients, name)?.state().await?;
        show_redlock(name, &state, json);
        return Ok(());
    }
    let client = endpoint.connect(ClientOptions::default()).await?;
    let found = inspect(&client, name).await?;
    let served = Served {
        topology: endpoint.kind(),
        served_by: client.serving(name).await?,
    };
    match found {
        Found::Mutex(state) => show_mutex(name, &state, &served, json),
        Found::Holds(state) => show_holds(name, &state, &served, json),
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
                    fencing_token: hold.fencing_token.get(),
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
            hold.fencing_token
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

fn show_redlock(name: &str, state: &RedlockState, json: bool) {
    if json {
        return print_json(&RedlockStatus {
            name,
            kind: "redlock",
            quorum: state.quorum,
            majority_holder: state.holder(),
            fencing_counter: state.fencing_counter().map(|t| t.get()),
            nodes: state
                .nodes
                .iter()
                .map(|node| {
                    let holder = node.state.as_ref().ok().and_then(|s| s.holder.as_ref());
                    NodeStatus {
                        url: &node.url,
                        held: holder.is_some(),
                        holder_owner: holder.map(|h| h.owner.as_str()),
                        lease_remaining_ms: holder.and_then(|h| h.lease_remaining).map(ms),
                        fencing_counter: node
                            .state
                            .as_ref()
                            .ok()
                            .and_then(|s| s.fencing_counter)
                            .map(|t| t.get()),
                        error: node.state.as_ref().err().map(ToString::to_string),
                    }
                })
                .collect(),
        });
    }
    println!("lock            {name}");
    println!(
        "kind            redlock over {} nodes (a majority is {})",
        state.nodes.len(),
        state.quorum
    );
    match state.holder() {
        Some(owner) => println!("state           held: a majority agrees on owner {owner}"),
        None => println!("state           free: no owner holds a majority"),
    }
    for node in &state.nodes {
        let view = match &node.state {
            Err(err) => format!("unreachable ({err})"),
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
        println!("node            {}  {view}", node.url);
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
