//! `redis-locks run NAME -- COMMAND`: the distributed `flock(1)`. Acquires the lock (the
//! `Mutex` NAME, with `--shared` / `--exclusive` the read or write side of the `RwLock`
//! NAME, or with `--permits N` one permit of the `Semaphore` NAME: at most N such commands
//! at once; with several names, the `MultiLock` over all of them: each the `Mutex` of that
//! name, taken together or not at all), runs the command with the lease renewed in the
//! background, releases when it exits; stops the command if the lock is lost.

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use std::io::IsTerminal;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp, tcgetpgrp};
use redis_locks::{
    Client, FencingToken, HoldsState, LeaseOptions, LockOptions, LockState, LostReason, MultiLock,
    MultiLockGuard, Mutex, MutexGuard, Redlock, RedlockGuard, RedlockOptions, RedlockState, RwLock,
    RwLockReadGuard, RwLockWriteGuard, Semaphore, SemaphoreGuard, SemaphoreState,
};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;

use crate::status::{Found, inspect};

/// Options of `redis-locks run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The lock's name; several names take them all together (a MultiLock: each the Mutex of
    /// that name, taken all or none in one global order, so two runs over the same names in
    /// any order never deadlock).
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// Take the read side of the RwLock NAME (like flock -s): any number of `run --shared`
    /// hold it at once, each with its own lease and fencing token; none while a
    /// `run --exclusive` holds it, and none that comes after a waiting `--exclusive` (writers
    /// are never starved).
    #[arg(long, short = 's', conflicts_with = "exclusive")]
    pub shared: bool,
    /// Take the write side of the RwLock NAME (like flock -x): alone, while no `--shared`
    /// or other `--exclusive` run holds it. Without --shared or --exclusive, `run` takes the
    /// Mutex NAME; a name is one kind of lock at a time, and taking it as another fails
    /// (exit 65) while it is held.
    #[arg(long, short = 'x')]
    pub exclusive: bool,
    /// Take one permit of the Semaphore NAME with N permits: at most N `run --permits N
    /// NAME` commands at once, across every machine (like GNU `sem -j N`), each with its own
    /// lease and fencing token. Every run must give the same N while any of them holds or
    /// waits (another N: exit 65); N is 1 or more.
    #[arg(long, value_name = "N", conflicts_with_all = ["shared", "exclusive"],
          value_parser = clap::value_parser!(u32).range(1..=i64::from(redis_locks::MAX_PERMITS)))]
    pub permits: Option<u32>,
    /// The lease; a watchdog renews it every third while the command runs, so it bounds how
    /// long the lock outlives a crash of this process.
    #[arg(long, default_value = "30s", value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How long to wait for the lock; 0 tries once. Without it: wait as long as it takes.
    #[arg(long, value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    /// After SIGTERM (the lock was lost), how long the command and every process of its
    /// process group have before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub grace: Duration,
    /// Keep the command in this process's process group, as flock(1) does, so it can read
    /// the terminal and take Ctrl-C / Ctrl-Z from it like any foreground job; a lost lock or
    /// a forwarded signal then reaches the command itself only, not the processes it
    /// started. The default when `run` is the foreground job of a terminal; otherwise (cron,
    /// systemd, a job started with `&`, no terminal at all) the command runs in a process
    /// group of its own, and a lost lock stops every process of that group.
    #[arg(long)]
    pub foreground: bool,
    /// Say nothing while waiting (without it, a wait longer than a second says once who
    /// holds the lock and how long its lease still runs).
    #[arg(long, short)]
    pub quiet: bool,
    /// Serve the lock's metrics (`redis_locks_...`: acquisitions, wait and hold time,
    /// renewals, losses...) for Prometheus at http://ADDR/ while the run lasts, e.g.
    /// 127.0.0.1:9187.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl RunArgs {
    /// The lock's name (the first, when several are given).
    fn name(&self) -> &str {
        &self.names[0]
    }

    /// Whether several names are given (a MultiLock).
    fn several(&self) -> bool {
        self.names.len() > 1
    }
}

/// Refuses what several names cannot go with, and names given twice or too many, as the
/// library would (its message), before anything connects.
fn check_names(endpoint: &Endpoint, args: &RunArgs) -> Result<(), CliError> {
    for name in &args.names {
        endpoint.keys(name)?;
    }
    if !args.several() {
        return Ok(());
    }
    if args.permits.is_some() {
        return Err(CliError::Usage(
            "--permits takes one name: several names take the Mutex of each together (a \
             MultiLock), which has no permits"
                .into(),
        ));
    }
    if args.shared || args.exclusive {
        return Err(CliError::Usage(
            "--shared and --exclusive take one name: several names take the Mutex of each \
             together (a MultiLock), which has no read side"
                .into(),
        ));
    }
    if endpoint.is_redlock() {
        return Err(CliError::Usage(
            "several names take one Redis: several --redis make a Redlock, which takes one name"
                .into(),
        ));
    }
    // The library's own words (it says the same once connected).
    if args.names.len() > redis_locks::MAX_MULTILOCK_NAMES {
        return Err(CliError::Usage(format!(
            "invalid MultiLock names: more than {} names",
            redis_locks::MAX_MULTILOCK_NAMES
        )));
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = args.names.iter().find(|name| !seen.insert(name.as_str())) {
        return Err(CliError::Usage(format!(
            "invalid MultiLock names: {twice:?} is given twice"
        )));
    }
    Ok(())
}

/// Runs the command under the lock and returns the exit code to leave with.
pub async fn run(endpoint: &Endpoint, args: &RunArgs) -> Result<u8, CliError> {
    // Bad input is bad usage, whether or not Redis can be reached.
    check_names(endpoint, args)?;
    if let Some(addr) = args.metrics_addr {
        cli_support::serve_metrics(addr)?;
    }
    let lease = endpoint
        .settings()
        .lease_options(LeaseOptions::default().lease(args.ttl).watchdog(true));
    lease.check()?;
    if endpoint.is_redlock() && (args.shared || args.exclusive) {
        return Err(CliError::Usage(
            "--shared and --exclusive take one Redis: several --redis make a Redlock, which \
             has no read side"
                .into(),
        ));
    }
    if endpoint.is_redlock() && args.permits.is_some() {
        return Err(CliError::Usage(
            "--permits takes one Redis: several --redis make a Redlock, which has no permits"
                .into(),
        ));
    }
    if endpoint.is_redlock() && endpoint.settings().replicas().is_some() {
        return Err(CliError::Usage(
            "--replicas waits for a master's replicas: several --redis make a Redlock over \
             independent masters, whose majority is its own answer to a lost server"
                .into(),
        ));
    }
    let clients = crate::nodes::connect_all(endpoint).await?;
    let lock = Lock::new(&clients, args, lease)?;
    let outcome = run_under(&lock, &clients[0], args).await;
    // A Redlock's release returns at the majority; the other nodes' releases must be sent
    // before this process exits, or those nodes keep the key until its lease ends.
    if let Lock::Redlock(lock) = &lock {
        lock.settle().await;
    }
    outcome
}

/// Takes `lock`, runs the command under it and releases it.
async fn run_under(lock: &Lock, client: &Client, args: &RunArgs) -> Result<u8, CliError> {
    let guard = match acquire(lock, client, args).await {
        Ok(guard) => guard,
        Err(err @ redis_locks::Error::WrongType { .. }) => {
            return Err(lock.refusal(client, err).await);
        }
        Err(err) => return Err(err.into()),
    };
    // Listen for signals before the command exists, so none sent once it runs is missed
    // (with the default action, a Ctrl-C would kill this process and orphan the command).
    let signals = match Signals::listen() {
        Ok(signals) => signals,
        Err(err) => {
            release_after_failure(guard).await;
            return Err(err);
        }
    };
    let mut command = Command::new(&args.command[0]);
    command.args(&args.command[1..]).stdin(Stdio::inherit());
    let tokens = guard.fencing_tokens();
    if let [(name, token)] = tokens.as_slice() {
        command
            .env("REDIS_LOCKS_TOKEN", token.to_string())
            .env("REDIS_LOCKS_NAME", name)
            .env_remove("REDIS_LOCKS_NAMES");
    } else {
        // Several names: no one token or name; each name's in REDIS_LOCKS_TOKENS.
        command
            .env_remove("REDIS_LOCKS_TOKEN")
            .env_remove("REDIS_LOCKS_NAME");
        let names: Vec<&str> = tokens.iter().map(|(name, _)| name.as_str()).collect();
        command.env("REDIS_LOCKS_NAMES", names.join(" "));
    }
    // Every name with its token, `name=token` separated by spaces, in the order taken.
    let pairs: Vec<String> = tokens
        .iter()
        .map(|(name, token)| format!("{name}={token}"))
        .collect();
    command.env("REDIS_LOCKS_TOKENS", pairs.join(" "));
    if let Some(permits) = args.permits {
        // The semaphore's N, for a command that wants to know how many run beside it.
        command.env("REDIS_LOCKS_PERMITS", permits.to_string());
    } else {
        // Not one of an outer `run --permits` either.
        command.env_remove("REDIS_LOCKS_PERMITS");
    }
    if let Some(acked) = guard.replicas() {
        // How many replicas acknowledged the grant (--replicas).
        command.env("REDIS_LOCKS_REPLICAS_ACKED", acked.to_string());
    }
    let terminal = interactive();
    let group = !args.foreground && !terminal;
    if group {
        // A process group of its own: a lost lock stops everything the command started
        // (that stayed in the group), not only the command.
        command.process_group(0);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            release_after_failure(guard).await;
            return Err(CliError::CannotRun(format!(
                "cannot run {:?}: {err}",
                args.command[0]
            )));
        }
    };
    let Some(pid) = child.id() else {
        // Reaped already: it ran and ended before we looked.
        let code = exit_code(child.wait().await);
        return finish(guard, code).await;
    };
    let target = Target {
        pid: Pid::from_raw(pid as i32),
        group,
        terminal: terminal && !group,
    };
    supervise(&mut child, target, guard, args.grace, signals).await
}

/// Whether `run` is the foreground job of a terminal: it has a controlling terminal
/// (`/dev/tty`, whatever its stdin is: `producer | redis-locks run ...` too) whose foreground
/// process group is `run`'s own. Its command then stays in that group, so it can read the
/// terminal and take Ctrl-C and Ctrl-Z from it.
fn interactive() -> bool {
    let Ok(tty) = std::fs::File::open("/dev/tty") else {
        return false;
    };
    tty.is_terminal() && tcgetpgrp(&tty).is_ok_and(|foreground| foreground == getpgrp())
}

/// How long `run` waits in silence before it says who holds the lock.
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// The lock `run` takes: the `Mutex` NAME, a side of the `RwLock` NAME, a permit of the
/// `Semaphore` NAME, or the `MultiLock` over several names.
enum Lock {
    Mutex(Mutex),
    Redlock(Redlock),
    Read(RwLock),
    Write(RwLock),
    Semaphore(Semaphore),
    Multi(MultiLock),
}

/// The guard of a [`Lock`]: what `run` holds while the command runs.
enum Guard {
    Mutex(MutexGuard),
    Redlock(RedlockGuard),
    Read(RwLockReadGuard),
    Write(RwLockWriteGuard),
    Semaphore(SemaphoreGuard),
    Multi(MultiLockGuard),
}

/// Takes a lock with the methods `forever`, `once` and `within` (`lock`, `try_lock`,
/// `lock_timeout` for a `Mutex`) as `--wait` says: no `--wait` waits as long as it takes,
/// `--wait 0` tries once.
macro_rules! take {
    ($lock:expr, $wait:expr, $forever:ident, $once:ident, $within:ident) => {
        match $wait {
            None => $lock.$forever().await,
            Some(wait) if wait.is_zero() => $lock.$once().await,
            Some(wait) => $lock.$within(wait).await,
        }
    };
}

impl Lock {
    /// The lock `args` ask for, with `lease` for its hold.
    fn new(clients: &[Client], args: &RunArgs, lease: LeaseOptions) -> Result<Lock, CliError> {
        let name = args.name();
        if args.several() {
            // `check_names` refused a Redlock, permits and the sides of an RwLock.
            let options = LockOptions::default().lease_options(lease);
            return Ok(Lock::Multi(
                clients[0].multi_lock_with(&args.names, options)?,
            ));
        }
        if clients.len() > 1 {
            let options = RedlockOptions::default()
                .lock_options(redis_locks::LockOptions::default().lease_options(lease));
            return Ok(Lock::Redlock(Redlock::with_options(
                clients, name, options,
            )?));
        }
        let client = &clients[0];
        let rwlock = |lease| client.rwlock_with(name, LockOptions::default().lease_options(lease));
        Ok(if let Some(permits) = args.permits {
            Lock::Semaphore(client.semaphore_with(
                name,
                permits,
                LockOptions::default().lease_options(lease),
            )?)
        } else if args.shared {
            Lock::Read(rwlock(lease)?)
        } else if args.exclusive {
            Lock::Write(rwlock(lease)?)
        } else {
            Lock::Mutex(client.mutex_with(name, LockOptions::default().lease_options(lease))?)
        })
    }

    /// The names, in the order they are taken (one but for a MultiLock).
    fn names(&self) -> Vec<&str> {
        match self {
            Lock::Mutex(lock) => vec![lock.name()],
            Lock::Redlock(lock) => vec![lock.name()],
            Lock::Read(lock) | Lock::Write(lock) => vec![lock.name()],
            Lock::Semaphore(lock) => vec![lock.name()],
            Lock::Multi(lock) => lock.names().collect(),
        }
    }

    /// Takes the lock: as long as it takes without `wait`, once with a zero `wait`.
    async fn take(&self, wait: Option<Duration>) -> Result<Guard, redis_locks::Error> {
        match self {
            Lock::Mutex(lock) => take!(lock, wait, lock, try_lock, lock_timeout).map(Guard::Mutex),
            Lock::Redlock(lock) => {
                take!(lock, wait, lock, try_lock, lock_timeout).map(Guard::Redlock)
            }
            Lock::Read(lock) => take!(lock, wait, read, try_read, read_timeout).map(Guard::Read),
            Lock::Write(lock) => {
                take!(lock, wait, write, try_write, write_timeout).map(Guard::Write)
            }
            Lock::Semaphore(lock) => {
                take!(lock, wait, acquire, try_acquire, acquire_timeout).map(Guard::Semaphore)
            }
            Lock::Multi(lock) => take!(lock, wait, lock, try_lock, lock_timeout).map(Guard::Multi),
        }
    }

    /// What this lock is, as the user asked for it.
    fn kind(&self) -> Kind {
        match self {
            Lock::Mutex(_) | Lock::Redlock(_) | Lock::Multi(_) => Kind::Mutex,
            Lock::Read(_) | Lock::Write(_) => Kind::RwLock,
            Lock::Semaphore(_) => Kind::Semaphore,
        }
    }

    /// The error of an acquisition refused with `WrongType` (exit 65): when the name is in
    /// use as another kind of lock, it says which, since the server's message names only the
    /// key's Redis type ("holds a hash, not a lock"); else `err` as it is (a fencing counter
    /// that is not a number, a key of another Redis type).
    async fn refusal(&self, client: &Client, err: redis_locks::Error) -> CliError {
        if let Lock::Redlock(_) = self {
            return err.into();
        }
        // A MultiLock's names each: the first held as another kind is the one to name.
        for name in self.names() {
            let found = inspect(client, name).await;
            match found.as_ref().ok().and_then(Kind::held) {
                Some(held) if held != self.kind() => {
                    return CliError::Data(format!(
                        "lock {name:?} is in use as {}, so it cannot be taken as {} until its \
                         holders release it ({err})",
                        held.describe(),
                        self.describe()
                    ));
                }
                _ => {}
            }
        }
        err.into()
    }

    /// What this lock is, for messages.
    fn describe(&self) -> &'static str {
        match self {
            Lock::Multi(_) => "a Mutex (part of a MultiLock: `run NAME1 NAME2 ...`)",
            _ => self.kind().describe(),
        }
    }
}

/// The kinds of lock a name can be held as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Mutex,
    RwLock,
    Reentrant,
    Semaphore,
}

impl Kind {
    /// What the name whose state is `found` is held as; `None` when it is free.
    fn held(found: &Found) -> Option<Kind> {
        match found {
            Found::Mutex(state) => state.holder.is_some().then_some(Kind::Mutex),
            Found::Holds(state) => match state.kind.as_deref()? {
                "rwlock" => Some(Kind::RwLock),
                "reentrant" => Some(Kind::Reentrant),
                _ => None,
            },
            Found::Semaphore(state) => {
                (!state.holders.is_empty() || state.permits.is_some()).then_some(Kind::Semaphore)
            }
        }
    }

    /// The kind as `run`'s messages name it.
    fn describe(self) -> &'static str {
        match self {
            Kind::Mutex => "a Mutex (plain `run`)",
            Kind::RwLock => "an RwLock (`run --shared` / `run --exclusive`)",
            Kind::Reentrant => "a ReentrantMutex (a program's: run does not take one)",
            Kind::Semaphore => "a Semaphore (`run --permits N`)",
        }
    }
}

/// Runs `$body` with `$bound` bound to the guard inside the [`Guard`] `$guard`, whichever
/// kind: the guards have the same lease methods, each on its own type.
macro_rules! each_guard {
    ($guard:expr, $bound:ident => $body:expr) => {
        match $guard {
            Guard::Mutex($bound) => $body,
            Guard::Redlock($bound) => $body,
            Guard::Read($bound) => $body,
            Guard::Write($bound) => $body,
            Guard::Semaphore($bound) => $body,
            Guard::Multi($bound) => $body,
        }
    };
}

impl Guard {
    /// The lock's name, or a MultiLock's names separated by spaces, for messages.
    fn name(&self) -> String {
        match self {
            Guard::Multi(guard) => guard.names().collect::<Vec<_>>().join(" "),
            Guard::Mutex(guard) => guard.name().to_string(),
            Guard::Redlock(guard) => guard.name().to_string(),
            Guard::Read(guard) => guard.name().to_string(),
            Guard::Write(guard) => guard.name().to_string(),
            Guard::Semaphore(guard) => guard.name().to_string(),
        }
    }

    /// Each name held with its fencing token (one for every lock but a MultiLock's).
    fn fencing_tokens(&self) -> Vec<(String, FencingToken)> {
        match self {
            Guard::Multi(guard) => guard
                .fencing_tokens()
                .map(|(name, token)| (name.to_string(), token))
                .collect(),
            Guard::Mutex(guard) => vec![(guard.name().to_string(), guard.fencing_token())],
            Guard::Redlock(guard) => vec![(guard.name().to_string(), guard.fencing_token())],
            Guard::Read(guard) => vec![(guard.name().to_string(), guard.fencing_token())],
            Guard::Write(guard) => vec![(guard.name().to_string(), guard.fencing_token())],
            Guard::Semaphore(guard) => vec![(guard.name().to_string(), guard.fencing_token())],
        }
    }

    /// How many replicas acknowledged the grant, with `--replicas`.
    fn replicas(&self) -> Option<u32> {
        each_guard!(self, guard => guard.replicas())
    }

    fn lost(&self) -> Pin<Box<dyn Future<Output = LostReason> + Send>> {
        each_guard!(self, guard => Box::pin(guard.lost()))
    }

    fn lost_reason(&self) -> Option<LostReason> {
        each_guard!(self, guard => guard.lost_reason())
    }

    /// Releases the lock. (What an `RwLock` release leaves of its owner's holds does not
    /// matter here: each `run` is an owner of its own, with one hold.)
    async fn release(self) -> Result<(), redis_locks::Error> {
        each_guard!(self, guard => guard.release().await.map(|_| ()))
    }
}

/// Takes the lock as `--wait` says; a wait longer than [`QUIET_WAIT`] says once, on stderr,
/// who holds the lock and how long its lease still runs (unless `--quiet`).
async fn acquire(
    lock: &Lock,
    client: &Client,
    args: &RunArgs,
) -> Result<Guard, redis_locks::Error> {
    let take = lock.take(args.wait);
    tokio::pin!(take);
    if args.quiet {
        return take.await;
    }
    tokio::select! {
        outcome = &mut take => return outcome,
        () = tokio::time::sleep(QUIET_WAIT) => {}
    }
    if let Lock::Redlock(lock) = lock {
        let state = match lock.state().await {
            Ok(state) => format!(": {}", redlock_holder(&state)),
            Err(err) => format!(" (its state: {err})"),
        };
        eprintln!("redis-locks: waiting for lock {:?}{state}", args.name());
        return take.await;
    }
    if let Lock::Multi(lock) = lock {
        // Each name held now, with its holder; the names free now are not said.
        let mut held = Vec::new();
        for name in lock.names() {
            match inspect(client, name).await {
                Ok(Found::Mutex(state)) if state.holder.is_none() => {}
                Ok(Found::Mutex(state)) => held.push(format!("{name:?} {}", mutex_holder(&state))),
                Ok(Found::Holds(state)) => held.push(format!("{name:?} {}", holds_holders(&state))),
                Ok(Found::Semaphore(state)) => {
                    held.push(format!("{name:?}: {}", permit_holders(&state)));
                }
                Err(err) => held.push(format!("{name:?} (its state: {err})")),
            }
        }
        let state = if held.is_empty() {
            "they were just freed".to_string()
        } else {
            held.join("; ")
        };
        eprintln!(
            "redis-locks: waiting for locks {}: {state}",
            args.names.join(" ")
        );
        return take.await;
    }
    let state = match inspect(client, args.name()).await {
        Ok(Found::Mutex(state)) => format!(": {}", mutex_holder(&state)),
        Ok(Found::Holds(state)) => format!(": {}", holds_holders(&state)),
        Ok(Found::Semaphore(state)) => format!(": {}", permit_holders(&state)),
        Err(err) => format!(" (its state: {err})"),
    };
    eprintln!("redis-locks: waiting for lock {:?}{state}", args.name());
    take.await
}

/// Who holds a Redlock, for the waiting notice.
fn redlock_holder(state: &RedlockState) -> String {
    let answered = state.nodes.iter().filter(|node| node.state.is_ok()).count();
    let total = state.nodes.len();
    match state.holder() {
        Some(owner) => format!(
            "held by owner {owner} on a majority of its {total} nodes ({answered} answered)"
        ),
        None => format!(
            "no owner holds a majority of its {total} nodes now ({answered} answered): \
             contenders' votes split, or nodes are down"
        ),
    }
}

/// Who holds a `Mutex`, for the waiting notice.
fn mutex_holder(state: &LockState) -> String {
    match &state.holder {
        Some(holder) => match holder.lease_remaining {
            Some(left) => format!(
                "held by owner {}, whose lease ends in {} unless its holder renews it",
                holder.owner,
                millis(left)
            ),
            None => "its key has no expiry, so it was not set by redis-locks and will never be \
                     freed unless someone deletes it"
                .to_string(),
        },
        None => "it was just freed".to_string(),
    }
}

/// Who holds an `RwLock` (or a `ReentrantMutex`) and who waits in line, for the waiting
/// notice.
fn holds_holders(state: &HoldsState) -> String {
    let Some(last) = state.holds.iter().map(|hold| hold.lease_remaining).max() else {
        return "it was just freed".to_string();
    };
    let held = match state.writer() {
        Some(writer) => format!("held for writing by owner {writer}"),
        None => match state.holds.len() {
            1 => format!("held for reading by owner {}", state.holds[0].owner),
            n => format!("held for reading by {n} holds"),
        },
    };
    format!(
        "{held}, whose last lease ends in {} unless renewed; in line: {} reader(s), {} \
         writer(s)",
        millis(last),
        state.waiting_readers,
        state.waiting_writers
    )
}

/// Who holds a `Semaphore`'s permits and how many wait, for the waiting notice.
fn permit_holders(state: &SemaphoreState) -> String {
    let Some(first) = state.holders.iter().map(|h| h.lease_remaining).min() else {
        return "its permits were just freed".to_string();
    };
    let limit = state
        .permits
        .map_or_else(|| "?".to_string(), |n| n.to_string());
    format!(
        "{} of its {limit} permits held by {} holder(s), the first lease ends in {} unless \
         renewed; {} waiting in line",
        state.in_use(),
        state.holders.len(),
        millis(first),
        state.waiting
    )
}

/// A duration to the millisecond, as people read it.
fn millis(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_millis(duration.as_millis() as u64))
}

/// Releases the lock of a command that has finished with `code`, and says if it had been lost.
async fn finish(guard: Guard, code: u8) -> Result<u8, CliError> {
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(err) if err.is_not_held() => Err(CliError::Lost(format!(
            "the command finished, but the lock had been lost meanwhile: {err}"
        ))),
        Err(err) => {
            eprintln!(
                "redis-locks: the command finished; releasing the lock failed ({err}); its lease will end it"
            );
            Ok(code)
        }
    }
}

/// Whom `run`'s signals reach: the command's process group, or (`--foreground`, or at a
/// terminal) the command.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Pid,
    group: bool,
    /// The command shares `run`'s place as a terminal's foreground job: the terminal sends
    /// Ctrl-C, Ctrl-\ and Ctrl-Z to both, so `run` does not send them again.
    terminal: bool,
}

impl Target {
    /// Sends `signal`, one that ends a process, then SIGCONT, so that a stopped process (one
    /// that read the terminal from the background, say) acts on it.
    fn signal(self, signal: Signal) {
        self.send(signal);
        self.send(Signal::SIGCONT);
    }

    /// Passes on a signal that a terminal sends to its whole foreground job (SIGINT,
    /// SIGQUIT) unless the command is part of that job and has had it already.
    fn pass_on(self, signal: Signal) {
        if !self.terminal {
            self.signal(signal);
        }
    }

    /// Whether the command has exited (a zombie not yet reaped counts; `run` reaps it last,
    /// so its process group id cannot be reused while `run` still signals the group).
    fn exited(self) -> bool {
        matches!(state(self.pid), None | Some('Z'))
    }

    /// Whether the command is stopped (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU).
    fn stopped(self) -> bool {
        state(self.pid) == Some('T')
    }

    /// Sends `signal` as it is.
    fn send(self, signal: Signal) {
        if self.group {
            let _ = killpg(self.pid, signal);
        } else {
            let _ = kill(self.pid, signal);
        }
    }

    /// Whether any live process is left in the group (zombies do not count: an orphan that
    /// died waits for init to reap it, which some containers never do).
    fn group_alive(self) -> bool {
        self.group && group_members(self.pid) > 0
    }
}

/// Releases the lock of a run that failed before its command ran; the failure is what the
/// user hears about, and a release that went wrong is said beside it.
async fn release_after_failure(guard: Guard) {
    let name = guard.name();
    if let Err(err) = guard.release().await {
        eprintln!("redis-locks: releasing {name:?}: {err}");
    }
}

/// How long `run` tries to release a lost lock before it exits without: a loss often means
/// Redis cannot be reached, and the release would then wait out the reconnect attempts.
const LOST_RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Releases a lock that was lost: whatever of it may still stand (a Redlock node that kept
/// the key while the majority lost it) goes now rather than at its lease's end, before `run`
/// exits; within [`LOST_RELEASE_WAIT`]. That the lock is gone
/// ([`Error::NotHeld`](redis_locks::Error::NotHeld)) is what a loss means; any other failure
/// is said.
async fn release_lost(guard: Guard) {
    let name = guard.name();
    match tokio::time::timeout(LOST_RELEASE_WAIT, guard.release()).await {
        Ok(Err(err)) if !err.is_not_held() => {
            eprintln!("redis-locks: releasing the lost lock {name:?}: {err}");
        }
        Err(_) => eprintln!(
            "redis-locks: releasing the lost lock {name:?}: no answer within {LOST_RELEASE_WAIT:?}; \
             its lease ends what is left of it"
        ),
        Ok(_) => {}
    }
}

/// The signals `run` passes on to the command.
struct Signals {
    interrupts: tokio::signal::unix::Signal,
    terminates: tokio::signal::unix::Signal,
    hangups: tokio::signal::unix::Signal,
    quits: tokio::signal::unix::Signal,
    /// Ctrl-Z: stop the command, then `run` itself, as a shell's job would stop.
    stops: tokio::signal::unix::Signal,
    /// `fg` / `bg`: continue the command too.
    continues: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Signals, CliError> {
        let failed = |err: std::io::Error| CliError::CannotRun(format!("signal handling: {err}"));
        let on = |signal_number: Signal| signal(SignalKind::from_raw(signal_number as i32));
        Ok(Signals {
            interrupts: signal(SignalKind::interrupt()).map_err(failed)?,
            terminates: signal(SignalKind::terminate()).map_err(failed)?,
            hangups: signal(SignalKind::hangup()).map_err(failed)?,
            quits: signal(SignalKind::quit()).map_err(failed)?,
            stops: on(Signal::SIGTSTP).map_err(failed)?,
            continues: on(Signal::SIGCONT).map_err(failed)?,
        })
    }
}

/// The state letter (`R`, `S`, `T` stopped, `Z` zombie...) and the process group of process
/// `pid`, from `/proc/PID/stat`; `None` when it is gone or `/proc` cannot be read.
fn stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// The state letter of process `pid`, as [`stat`] reads it.
fn state(pid: Pid) -> Option<char> {
    stat(pid.as_raw()).map(|(state, _)| state)
}

/// How many processes of process group `group` are alive (zombies do not count), as `/proc`
/// shows them.
fn group_members(group: Pid) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|&(state, member_of)| state != 'Z' && member_of == group.as_raw())
        .count()
}

/// Waits for the command while watching the lock and this process's signals.
async fn supervise(
    child: &mut Child,
    target: Target,
    guard: Guard,
    grace: Duration,
    mut signals: Signals,
) -> Result<u8, CliError> {
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut check = tokio::time::interval(Duration::from_secs(1));
    let mut stopped_checks = 0;
    loop {
        tokio::select! {
            // A loss first: a command that ended as the lock was lost is reported as lost.
            biased;
            reason = &mut lost => {
                eprintln!("redis-locks: lock {:?} lost ({reason}); stopping the command", guard.name());
                stop(child, target, grace).await;
                let lost = CliError::Lost(format!("lock {:?} was lost while the command ran: {reason}", guard.name()));
                release_lost(guard).await;
                return Err(lost);
            }
            status = child.wait() => return finish(guard, exit_code(status)).await,
            _ = signals.interrupts.recv() => target.pass_on(Signal::SIGINT),
            _ = signals.quits.recv() => target.pass_on(Signal::SIGQUIT),
            _ = signals.terminates.recv() => target.signal(Signal::SIGTERM),
            _ = signals.hangups.recv() => target.signal(Signal::SIGHUP),
            _ = signals.stops.recv() => {
                // Ctrl-Z: stop the command, then this process, so the shell gets its job
                // back; both go on together at `fg`. A command that ignores SIGTSTP is
                // stopped anyway: it must not run on while nobody renews the lease.
                if !target.terminal {
                    target.send(Signal::SIGTSTP);
                }
                let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
                while !target.stopped() && !target.exited() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if !target.stopped() {
                    target.send(Signal::SIGSTOP);
                }
                let _ = kill(Pid::this(), Signal::SIGSTOP);
            }
            _ = signals.continues.recv() => {
                // Continued after a stop: if the lease ran out meanwhile, the loss branch
                // stops the command for good (it resumes only to get SIGTERM).
                if guard.lost_reason().is_none() {
                    target.send(Signal::SIGCONT);
                }
            }
            _ = check.tick() => {
                // A command that stopped by itself (reading the terminal from the background,
                // say) holds the lock as long as it stays stopped: say so once.
                stopped_checks = if target.stopped() { stopped_checks + 1 } else { 0 };
                if stopped_checks == 2 {
                    eprintln!(
                        "redis-locks: the command is stopped (waiting to use the terminal from the \
                         background?) and keeps lock {:?} while it is; continue it (fg), or run \
                         it with --foreground", guard.name()
                    );
                }
            }
        }
    }
}

/// SIGTERM to the command (and its process group), then SIGKILL to whatever is left of them
/// once `grace` has passed. The command is reaped last: until then its zombie keeps the
/// group id from being reused, so no other group can be signalled by mistake.
async fn stop(child: &mut Child, target: Target, grace: Duration) {
    target.signal(Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    if state(Pid::this()).is_none() {
        // No /proc to watch: wait for the command itself, and then signal what is left.
        let exited = tokio::time::timeout_at(deadline, child.wait())
            .await
            .is_ok();
        if !exited {
            eprintln!("redis-locks: the command ignored SIGTERM for {grace:?}; sending SIGKILL");
        }
        if target.group && killpg(target.pid, None).is_ok() {
            let _ = killpg(target.pid, Signal::SIGKILL);
        }
        let _ = child.kill().await;
        return;
    }
    while (!target.exited() || target.group_alive()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !target.exited() || target.group_alive() {
        eprintln!(
            "redis-locks: the command{} ignored SIGTERM for {grace:?}; sending SIGKILL",
            if target.group {
                " or its process group"
            } else {
                ""
            }
        );
    }
    // Whatever the group still holds gets SIGKILL: live processes that `/proc` did not show
    // (hidepid) too, and zombies (harmless). The command's zombie pins the group id.
    if target.group {
        let _ = killpg(target.pid, Signal::SIGKILL);
    } else if !target.exited() {
        let _ = kill(target.pid, Signal::SIGKILL);
    }
    let _ = child.wait().await;
}

/// The shell's convention: the exit code, or 128 + the signal that ended the command.
fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128u8.saturating_add(signal as u8),
            (None, None) => 1,
        },
        Err(_) => 1,
    }
}
