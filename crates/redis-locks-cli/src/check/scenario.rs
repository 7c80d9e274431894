//! One run of `check`: servers up, worker processes started, faults injected while they
//! work, every event recorded, the lock keys' TTLs watched, and the resource tallied.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cli_support::endpoint::{Endpoint, Place, SideConnection};
use cli_support::exit::CliError;
use cli_support::settings::ClientSettings;
use nix::sys::signal::Signal;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use test_support::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::clock::now as now_nanos;
use super::failover::{self, Cut, Private};
use super::fault::{self, DropRule, FakeClock, Fault};
use super::plan::{Action, Algorithm, CheckPrimitive, Event, Holding, Plan, Trigger};
use super::proxy::Proxy;
use super::resource::{Resource, Tally};

/// Nodes of a Redlock on private servers.
pub const REDLOCK_NODES: usize = 5;
/// How often the lock keys' TTLs are looked at.
const TTL_WATCH: Duration = Duration::from_millis(5);
/// The least time without any acquisition after which a run counts as hung.
const STALL: Duration = Duration::from_secs(5);
/// How often the TTL watch asks the sentinels which master to watch.
const SENTINEL_ASK: Duration = Duration::from_millis(250);
/// Time for worker processes to start and connect before the common start.
const START_DELAY_MS: u64 = 700;
/// The same when `check` has something to do between the workers' connections and the
/// first acquisition (`cluster-kill` cuts a replica off then).
const START_DELAY_CUT_MS: u64 = 2000;

/// What one run does.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The primitive (for ours).
    pub primitive: CheckPrimitive,
    /// N, the permits of a semaphore (1 for the other primitives).
    pub permits: u32,
    /// N, the most names of one MultiLock acquisition (of a pool of 2N; 1 for the other
    /// primitives).
    pub names: u32,
    /// The faults injected.
    pub faults: Vec<Fault>,
    /// Worker processes.
    pub processes: usize,
    /// Tasks per process.
    pub tasks: usize,
    /// Acquisitions per task.
    pub count: usize,
    /// The lease of every acquisition.
    #[serde(serialize_with = "millis")]
    pub lease: Duration,
    /// Work between a holder's read and write.
    #[serde(serialize_with = "millis")]
    pub hold: Duration,
    /// How many times each server-side fault is injected.
    pub injections: usize,
    /// How long the run may take before it counts as hung.
    #[serde(serialize_with = "millis")]
    pub timeout: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Scenario {
    /// `algorithm / primitive / faults`, as the table shows it.
    pub fn label(&self) -> String {
        let faults: Vec<&str> = self.faults.iter().map(|f| f.label()).collect();
        match self.algorithm {
            Algorithm::Ours if self.primitive == CheckPrimitive::Semaphore => format!(
                "{}({}) / {}",
                self.primitive.label(),
                self.permits,
                faults.join("+")
            ),
            Algorithm::Ours | Algorithm::CallerOrderMultilock
                if self.primitive == CheckPrimitive::Multilock =>
            {
                let label = match self.algorithm {
                    Algorithm::Ours => self.primitive.label(),
                    other => other.label(),
                };
                format!(
                    "{label}(2–{} of {}) / {}",
                    self.names,
                    2 * self.names,
                    faults.join("+")
                )
            }
            Algorithm::Ours => format!("{} / {}", self.primitive.label(), faults.join("+")),
            Algorithm::CounterSemaphore => {
                format!(
                    "{}({}) / {}",
                    self.algorithm.label(),
                    self.permits,
                    faults.join("+")
                )
            }
            other => format!("{} / {}", other.label(), faults.join("+")),
        }
    }

    /// Whether it takes MultiLocks (this library's, or the hand-made broken one).
    pub fn multilock(&self) -> bool {
        self.primitive == CheckPrimitive::Multilock
    }

    /// The names whose keys the run watches and its faults strike: a MultiLock's pool, else
    /// the lock's own.
    pub fn watched(&self, lock: &str) -> Vec<String> {
        if self.multilock() {
            super::plan::multilock_pool(lock, self.names)
        } else {
            vec![lock.to_string()]
        }
    }

    /// How long one acquisition may take before it counts as stuck (MultiLocks only: 0
    /// otherwise): three leases and an outage, and at least 2 s — under the stall after
    /// which the whole run counts as hung.
    pub fn stuck_after(&self) -> Duration {
        if !self.multilock() {
            return Duration::ZERO;
        }
        (self.lease * 3 + fault::outage(self.lease)).max(Duration::from_secs(2))
    }

    /// Whether it checks this library's Redlock.
    pub fn redlock(&self) -> bool {
        self.algorithm == Algorithm::Ours && self.primitive == CheckPrimitive::Redlock
    }
}

/// A holder that died holding: it counts as holding until its lease ends, or, if it had begun
/// its release, as its own record would have (see [`Releasing`]).
#[derive(Debug, Clone, Serialize)]
pub struct Crashed {
    /// `p<process>t<task>`.
    pub worker: String,
    /// Its fencing token, if any.
    pub token: Option<u64>,
    /// A MultiLock's names with their tokens.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<(String, u64)>,
    /// When it acquired (monotonic ns, see `clock`).
    pub acquired_at: u64,
    /// When its lease ends (monotonic ns, see `clock`).
    pub lease_end: u64,
    /// How far its holding went if it got as far as its release (its process was killed
    /// before it wrote its `Held` line): judged as that line would have been.
    pub releasing: Option<Releasing>,
}

/// What a holder said as it began its release ([`Event::Releasing`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Releasing {
    /// When its use of the resource ended (monotonic ns).
    pub at: u64,
    /// When its lease ended, as its guard said then (monotonic ns).
    pub lease_end: Option<u64>,
    /// When `lost()` fired, if it did by `at` (monotonic ns).
    pub lost_at: Option<u64>,
}

/// One injected fault, from its start to its end (monotonic ns, see `clock`).
#[derive(Debug, Clone, Serialize)]
pub struct Injection {
    /// Which fault.
    pub fault: Fault,
    /// When it began.
    pub start: u64,
    /// When it was undone.
    pub end: u64,
    /// What it did, when there is more to say (a failover: which node took over, how long
    /// it took, what the zombie master answered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When a master it froze was resumed (monotonic ns): `sentinel-failover`'s zombie.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<u64>,
}

/// Everything one run recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// The lock's name (a MultiLock's pool begins with it).
    pub lock: String,
    /// When the workers began (monotonic ns, see `clock`).
    pub started_at: u64,
    /// When the run ended (monotonic ns, see `clock`).
    pub ended_at: u64,
    /// Every finished holding.
    pub holdings: Vec<Holding>,
    /// Holders killed while holding.
    pub crashed: Vec<Crashed>,
    /// The faults as injected.
    pub injections: Vec<Injection>,
    /// Requests that failed and were retried.
    pub retries: usize,
    /// Tasks that gave up, with why (and what a worker printed on stderr).
    pub failures: Vec<String>,
    /// The run did not finish in time (its workers were killed).
    pub hung: bool,
    /// Times a lock key was seen without a TTL.
    pub keys_without_ttl: u64,
    /// The resource at the end.
    pub tally: Tally,
    /// How many faults the plan could strike (a holder killed before its own pause or long
    /// hold takes those with it).
    pub expected_injections: usize,
    /// The private cluster or Sentinel set-up started for this run, if one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<String>,
    /// A semaphore's permits still held once every worker was done and a lease had passed
    /// (a leaked permit); `None` for the other primitives, or when it could not be read
    /// ([`Record::leak_error`]).
    pub leaked_permits: Option<u32>,
    /// Why the semaphore could not be read at the end.
    pub leak_error: Option<String>,
    /// MultiLock acquisitions that did not finish within their deadline, described.
    pub stuck: Vec<String>,
}

/// The servers of one run.
struct Servers {
    nodes: Vec<Node>,
    /// The cluster or Sentinel-watched master given instead of servers (`nodes` is empty).
    topology: Option<Endpoint>,
    resource: RedisServer,
    /// The latency proxy in front of the first lock server, when a fault needs it.
    proxy: Option<Proxy>,
    /// The workers' fake wall clock, when a fault steps it.
    fake_clock: Option<FakeClock>,
    /// The private cluster or Sentinel set-up of a run of topology faults, and what it is.
    private: Option<(Private, String)>,
    /// How every client reaches the lock servers (TLS, the key namespace).
    settings: ClientSettings,
    _aof_dir: Option<tempfile::TempDir>,
}

/// A private server, shared with the task that injects a fault into it.
type SharedServer = Arc<std::sync::Mutex<RedisServer>>;

struct Node {
    url: String,
    server: Option<SharedServer>,
}

impl Node {
    fn port(&self) -> Option<u16> {
        url::Url::parse(&self.url).ok().and_then(|u| u.port())
    }
}

impl Servers {
    async fn start(
        scenario: &Scenario,
        given: Option<&Endpoint>,
        settings: &ClientSettings,
    ) -> Result<Servers, CliError> {
        cli_support::redis_target::ensure_installed()?;
        let unavailable = |err| CliError::Unavailable(format!("cannot start redis-server: {err}"));
        let resource = RedisServer::start().map_err(unavailable)?;
        // A topology fault: a private set-up of its own for this run.
        if let Some(kind) = scenario.faults.iter().find_map(|f| f.topology()) {
            let (private, endpoint, describe) = Private::start(kind, settings).await?;
            return Ok(Servers {
                nodes: Vec::new(),
                topology: Some(endpoint),
                resource,
                proxy: None,
                fake_clock: None,
                private: Some((private, describe)),
                settings: settings.clone(),
                _aof_dir: None,
            });
        }
        if let Some(given) = given {
            let (nodes, topology) = match given.place() {
                Place::Servers(urls) => (
                    urls.iter()
                        .map(|url| Node {
                            url: url.clone(),
                            server: None,
                        })
                        .collect(),
                    None,
                ),
                _ => (Vec::new(), Some(given.clone())),
            };
            return Ok(Servers {
                nodes,
                topology,
                resource,
                proxy: None,
                fake_clock: None,
                private: None,
                settings: given.settings().clone(),
                _aof_dir: None,
            });
        }
        let count = if scenario.redlock() { REDLOCK_NODES } else { 1 };
        let aof = scenario.faults.contains(&Fault::ServerRestartAof);
        let aof_dir = if aof {
            Some(tempfile::tempdir().map_err(|err| {
                CliError::Unavailable(format!("cannot make a directory for the AOF: {err}"))
            })?)
        } else {
            None
        };
        let mut nodes = Vec::new();
        for n in 0..count {
            let mut args = vec!["--enable-debug-command".to_string(), "local".to_string()];
            if let Some(dir) = &aof_dir {
                let dir = dir.path().join(n.to_string());
                std::fs::create_dir_all(&dir).map_err(|err| {
                    CliError::Unavailable(format!("cannot make a directory for the AOF: {err}"))
                })?;
                args.extend(
                    [
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        "always",
                        "--dir",
                        dir.to_str().unwrap_or("."),
                    ]
                    .map(String::from),
                );
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let server = RedisServer::start_with_args(&args).map_err(unavailable)?;
            nodes.push(Node {
                url: server.url(),
                server: Some(Arc::new(std::sync::Mutex::new(server))),
            });
        }
        Ok(Servers {
            nodes,
            topology: None,
            resource,
            proxy: None,
            fake_clock: None,
            private: None,
            settings: settings.clone(),
            _aof_dir: aof_dir,
        })
    }

    /// Puts the latency proxy in front of the first lock server.
    async fn add_proxy(&mut self) -> Result<(), CliError> {
        let url = url::Url::parse(&self.nodes[0].url)
            .map_err(|err| CliError::Usage(format!("invalid Redis URL: {err}")))?;
        let upstream = format!(
            "{}:{}",
            url.host_str().unwrap_or("127.0.0.1"),
            url.port().unwrap_or(6379)
        );
        let proxy = Proxy::start(upstream).await.map_err(|err| {
            CliError::Unavailable(format!("cannot start the latency proxy: {err}"))
        })?;
        self.proxy = Some(proxy);
        Ok(())
    }

    /// The lock servers as they are (for the TTL watch and the faults).
    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.url.clone()).collect()
    }

    /// The lock servers as they are, or the cluster or Sentinel master.
    fn endpoint(&self) -> Endpoint {
        match &self.topology {
            Some(topology) => topology.clone(),
            None => Endpoint::servers(self.urls(), self.settings.clone()),
        }
    }

    /// The lock servers as the workers reach them: the first through the proxy if there is
    /// one.
    fn worker_endpoint(&self) -> Endpoint {
        let mut urls = self.urls();
        match (&self.topology, &self.proxy) {
            (Some(topology), _) => topology.clone(),
            (None, Some(proxy)) => {
                urls[0] = proxy.url();
                Endpoint::servers(urls, self.settings.clone())
            }
            (None, None) => Endpoint::servers(urls, self.settings.clone()),
        }
    }
}

/// A holder that stopped itself: resumed once its lease has run out and another holder has
/// held the lock since (so its late write meets a newer holder's), or at the latest after
/// half the stall time.
struct Stopped {
    pid: u32,
    worker: String,
    start: u64,
    earliest: tokio::time::Instant,
    latest: tokio::time::Instant,
    overtaken: bool,
}

/// What a worker process sent, or that it ended.
enum Message {
    Event(Event),
    Exited {
        process: usize,
        killed: bool,
        /// It ended with a non-zero exit code.
        failed: bool,
        stderr: String,
        at: u64,
    },
}

/// A fresh lock name for one run (its keys, and the resource's, all begin with it).
pub fn lock_name() -> String {
    format!("redis-locks-check:{:08x}", rand::random::<u32>())
}

/// Runs one scenario on the lock `lock` against `given` (private servers when `None`, their
/// clients with `settings`).
pub async fn run(
    scenario: &Scenario,
    given: Option<&Endpoint>,
    settings: &ClientSettings,
    lock: &str,
) -> Result<Record, CliError> {
    let mut servers = Servers::start(scenario, given, settings).await?;
    if scenario.faults.iter().any(|f| f.needs_proxy()) {
        servers.add_proxy().await?;
    }
    if scenario.faults.contains(&Fault::ClientClockStep) {
        servers.fake_clock = Some(FakeClock::new().map_err(CliError::Unavailable)?);
    }
    let lock = lock.to_string();
    let resource_prefix = format!("{lock}:resource");
    let resource = Resource::new(
        cli_support::connection(&servers.resource.url()).await?,
        &resource_prefix,
    );
    let start_delay = if scenario.faults.contains(&Fault::ClusterKill) {
        START_DELAY_CUT_MS
    } else {
        START_DELAY_MS
    };
    let started_at = now_nanos() + start_delay * 1_000_000;

    // The workers, and how many faults they will let strike.
    let plans = plan_triggers(scenario);
    let expected_injections = expected_injections(scenario, &plans);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut pids = Vec::new();
    for (process, triggers) in plans.into_iter().enumerate() {
        let plan = Plan {
            endpoint: servers.worker_endpoint(),
            resource_url: servers.resource.url(),
            lock: lock.clone(),
            resource: resource_prefix.clone(),
            algorithm: scenario.algorithm,
            primitive: scenario.primitive,
            permits: scenario.permits,
            names: scenario.names,
            stuck_ms: scenario.stuck_after().as_millis() as u64,
            process,
            tasks: scenario.tasks,
            count: scenario.count,
            lease_ms: scenario.lease.as_millis() as u64,
            hold_us: scenario.hold.as_micros() as u64,
            start_at: started_at,
            triggers,
            metrics: super::metrics::forwarded(),
        };
        let env = servers
            .fake_clock
            .as_ref()
            .map(FakeClock::env)
            .unwrap_or_default();
        let child = spawn_worker(&plan, &env)?;
        pids.push(child.id().unwrap_or(0));
        collect(process, child, tx.clone());
    }
    drop(tx);

    // The TTL watch.
    let watching = Arc::new(AtomicBool::new(true));
    let no_ttl = Arc::new(AtomicU64::new(0));
    let watch = tokio::spawn(watch_ttl(
        servers.endpoint(),
        scenario.watched(&lock),
        watching.clone(),
        no_ttl.clone(),
    ));

    // Collect, striking the server-side faults as the run goes.
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(start_delay) + scenario.timeout;
    // No acquisition for this long while a run should be going: it is stuck (a lock that
    // never expires, say), whatever its timeout.
    let stall = STALL.max(scenario.lease * 4 + fault::outage(scenario.lease));
    let mut progress = tokio::time::Instant::now() + Duration::from_millis(start_delay);
    let mut injections = Vec::new();
    let mut open: HashMap<String, Crashed> = HashMap::new();
    let mut holdings = Vec::new();
    let mut crashed = Vec::new();
    let mut failures = Vec::new();
    let mut retries = 0;
    let mut running = scenario.processes;
    let mut exited = vec![false; scenario.processes];
    let mut hung = false;
    // Long holds that came while a fault was still striking: the next strike follows at once.
    let mut waiting_strikes = 0usize;
    // Stopped holders already resumed: SIGCONT again until their holding ends (a SIGCONT
    // that came before the SIGSTOP took effect would be lost).
    let mut resumed: Vec<(u32, String)> = Vec::new();
    let mut stopped: Vec<Stopped> = Vec::new();
    // Every stop of a worker process: (process, from, until; `None` while stopped). The
    // other holders of a stopped process (readers, a semaphore's holders) were stopped too.
    let mut pauses: Vec<(usize, u64, Option<u64>)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let semaphore = scenario.primitive == CheckPrimitive::Semaphore;
    let server_faults: Vec<Fault> = scenario
        .faults
        .iter()
        .copied()
        .filter(|f| *f != Fault::None && !f.holder_side())
        .collect();
    let mut strikes = server_faults
        .iter()
        .flat_map(|f| std::iter::repeat_n(*f, strikes_of(scenario, *f)))
        .collect::<Vec<_>>()
        .into_iter();
    // cluster-kill's first step: the replica of the lock's shard cut off once the workers
    // have connected (a paused node would hold up their connections) and before the long
    // hold, whose grant then reaches the master only.
    let cut = CutSlot::default();
    let mut cut_pending = scenario.faults.contains(&Fault::ClusterKill);
    let mut connected = 0;
    // The run's first acquisition (monotonic ns).
    let mut first_grant: Option<u64> = None;
    let mut stuck = Vec::new();
    let multilock = scenario.multilock();
    let mut striking: Option<tokio::task::JoinHandle<Result<Injection, String>>> = None;

    while running > 0 {
        tokio::select! {
            message = rx.recv() => match message {
                Some(Message::Event(event)) => match event {
                    Event::Connected { .. } => {
                        connected += 1;
                        if connected == scenario.processes && cut_pending {
                            cut_pending = false;
                            cut_off(&servers, &cut, &lock);
                        }
                    }
                    Event::Acquired { worker, token, tokens, at, lease_end, .. } => {
                        progress = tokio::time::Instant::now();
                        first_grant.get_or_insert(at);
                        if cut_pending {
                            // A worker that never said it connected: cut now, late.
                            cut_pending = false;
                            cut_off(&servers, &cut, &lock);
                        }
                        open.insert(worker.clone(), Crashed { worker, token, tokens, acquired_at: at, lease_end, releasing: None });
                    }
                    Event::Renewed { worker, lease_end } => {
                        if let Some(hold) = open.get_mut(&worker) {
                            hold.lease_end = hold.lease_end.max(lease_end);
                        }
                    }
                    Event::Releasing { worker, at, lease_end, lost_at } => {
                        if let Some(hold) = open.get_mut(&worker) {
                            hold.releasing = Some(Releasing { at, lease_end, lost_at });
                        }
                    }
                    Event::Held(mut holding) => {
                        if holding.shared && !holding.paused {
                            // Held while its process was stopped by a sibling's pause: it
                            // could not run (nor renew) either.
                            let process = process_of(&holding.worker);
                            holding.paused = pauses.iter().any(|&(p, from, until)| {
                                p == process
                                    && from <= holding.end
                                    && until.is_none_or(|until| until >= holding.acquired_at)
                            });
                        }
                        for stop in &mut stopped {
                            // A reader raises no token: only a writer's access stops the
                            // stopped holder's late write.
                            // A semaphore's holders write nothing: any later holder
                            // will do, once the stopped one's lease has run out.
                            if stop.worker != holding.worker
                                && (!holding.shared || semaphore || multilock)
                                && holding.acquired_at > stop.start
                            {
                                stop.overtaken = true;
                            }
                        }
                        resumed.retain(|(_, worker)| *worker != holding.worker);
                        open.remove(&holding.worker);
                        holdings.push(holding);
                    }
                    Event::Pausing { worker } => {
                        let process = process_of(&worker);
                        let now = tokio::time::Instant::now();
                        pauses.push((process, now_nanos(), None));
                        stopped.push(Stopped {
                            pid: pids.get(process).copied().unwrap_or(0),
                            worker,
                            start: now_nanos(),
                            earliest: now + fault::outage(scenario.lease),
                            latest: now + stall / 2,
                            overtaken: false,
                        });
                    }
                    Event::Lingering { worker } => {
                        if striking.is_none() {
                            if let Some(fault) = strikes.next() {
                                let holder = open.get(&worker).map(|h| h.acquired_at);
                                striking = Some(strike(fault, &servers, &lock, scenario, &cut, (holder, first_grant)));
                            }
                        } else {
                            waiting_strikes += 1;
                        }
                    }
                    Event::Retry { .. } => retries += 1,
                    Event::Metrics { samples } => super::metrics::apply(&samples),
                    Event::Stuck { worker, names, waited_ms } => {
                        let names: Vec<String> = names
                            .iter()
                            .map(|name| super::plan::short_name(name, &lock).into_owned())
                            .collect();
                        stuck.push(format!(
                            "{worker} waited {waited_ms} ms for {} (named in that order) without \
                             getting them: given up",
                            names.join(" ")
                        ));
                    }
                    Event::Failed { worker, message } => failures.push(format!("{worker}: {message}")),
                    Event::Done { .. } => {}
                },
                Some(Message::Exited { process, killed, failed, stderr, at }) => {
                    running -= 1;
                    if let Some(gone) = exited.get_mut(process) {
                        *gone = true;
                    }
                    let prefix = format!("p{process}t");
                    let dead: Vec<String> = open.keys().filter(|w| w.starts_with(&prefix)).cloned().collect();
                    for worker in dead {
                        if let Some(hold) = open.remove(&worker) {
                            crashed.push(hold);
                        }
                    }
                    if killed {
                        if scenario.faults.contains(&Fault::HolderKill) {
                            injections.push(Injection { fault: Fault::HolderKill, start: at, end: at, detail: None, resumed_at: None });
                        }
                    } else if failed {
                        failures.push(format!("worker p{process} failed: {}", stderr.trim()));
                    }
                }
                None => break,
            },
            _ = tick.tick(), if !stopped.is_empty() || !resumed.is_empty() => {
                let now = tokio::time::Instant::now();
                stopped.retain(|stop| {
                    let due = (stop.overtaken && now >= stop.earliest) || now >= stop.latest;
                    if due {
                        let process = process_of(&stop.worker);
                        for pause in pauses.iter_mut().filter(|p| p.0 == process && p.2.is_none()) {
                            pause.2 = Some(now_nanos());
                        }
                        resumed.push((stop.pid, stop.worker.clone()));
                        injections.push(Injection { fault: Fault::HolderPause, start: stop.start, end: now_nanos(), detail: None, resumed_at: None });
                    }
                    !due
                });
                for (pid, worker) in &resumed {
                    if !exited.get(process_of(worker)).copied().unwrap_or(true) {
                        fault::signal(*pid, Signal::SIGCONT);
                    }
                }
            }
            done = async { striking.as_mut().expect("guarded").await }, if striking.is_some() => {
                striking = None;
                match done {
                    Ok(Ok(injection)) => injections.push(injection),
                    Ok(Err(message)) => failures.push(format!("fault: {message}")),
                    Err(err) => failures.push(format!("fault: {err}")),
                }
                if waiting_strikes > 0
                    && let Some(fault) = strikes.next()
                {
                    waiting_strikes -= 1;
                    striking = Some(strike(fault, &servers, &lock, scenario, &cut, (None, first_grant)));
                }
            }
            _ = tokio::time::sleep_until(deadline.min(progress + stall)) => {
                hung = true;
                // Only workers not reaped yet: a reaped one's pid may be another's now.
                for (process, &pid) in pids.iter().enumerate() {
                    if !exited[process] {
                        fault::signal(pid, Signal::SIGCONT);
                        fault::signal(pid, Signal::SIGKILL);
                    }
                }
                break;
            }
        }
    }
    // A fault still at work is let finish, so nothing is left frozen or cut off.
    if let Some(striking) = striking
        && let Ok(Ok(injection)) = striking.await
    {
        injections.push(injection);
    }
    for stop in stopped {
        if !exited[process_of(&stop.worker)] {
            fault::signal(stop.pid, Signal::SIGCONT);
        }
    }
    // A replica cut off for a kill that never came (its long holder was killed first, say)
    // runs again.
    if let Some((Private::Cluster(cluster), _)) = &servers.private
        && let Some(left) = settled(&cut).await.made()
    {
        failover::undo_cut(cluster.clone(), left).await;
    }
    if hung {
        crashed.extend(open.into_values());
    }
    let ended_at = now_nanos();
    watching.store(false, Ordering::SeqCst);
    let _ = watch.await;
    let tally = resource
        .tally()
        .await
        .map_err(|err| CliError::Unavailable(format!("cannot read the checked resource: {err}")))?;
    injections.sort_by_key(|i| i.start);
    // A semaphore's permits all come back: once every worker is gone, the holders killed
    // holding free theirs when their lease ends.
    let (leaked_permits, leak_error) = if semaphore {
        match permits_left(&servers.endpoint(), &lock, scenario).await {
            Ok(left) => (Some(left), None),
            Err(err) => (None, Some(err)),
        }
    } else {
        (None, None)
    };
    Ok(Record {
        lock: lock.clone(),
        stuck,
        leaked_permits,
        leak_error,
        started_at,
        ended_at,
        holdings,
        crashed,
        injections,
        retries,
        failures,
        hung,
        keys_without_ttl: no_ttl.load(Ordering::SeqCst),
        tally,
        expected_injections,
        servers: servers
            .private
            .as_ref()
            .map(|(_, describe)| describe.clone()),
    })
}

/// Starts `cluster-kill`'s first step, in a task: the replica of the lock's shard cut off.
fn cut_off(servers: &Servers, slot: &CutSlot, lock: &str) {
    let Some((Private::Cluster(cluster), _)) = &servers.private else {
        return;
    };
    *slot.lock().expect("not poisoned") = CutState::Pending;
    let key = lock_key(&servers.settings, lock);
    let (cluster, slot) = (cluster.clone(), slot.clone());
    tokio::spawn(async move {
        let made = failover::cut_replica(cluster, key).await;
        *slot.lock().expect("not poisoned") = match made {
            Ok(made) => CutState::Made(made),
            Err(err) => CutState::Failed(err),
        };
    });
}

/// Where `cluster-kill`'s first step stands.
#[derive(Debug, Default)]
enum CutState {
    /// Not asked for (yet).
    #[default]
    None,
    /// Under way.
    Pending,
    /// Made, the replica paused.
    Made(Cut),
    /// Could not be made.
    Failed(String),
    /// Taken by the strike, which resumes the replica.
    Used,
}

impl CutState {
    fn made(self) -> Option<Cut> {
        match self {
            CutState::Made(cut) => Some(cut),
            _ => None,
        }
    }
}

type CutSlot = Arc<std::sync::Mutex<CutState>>;

/// The cut's state once it is no longer under way (at most 5 s), taken out of `slot`
/// (which says `Used` from then on).
async fn settled(slot: &CutSlot) -> CutState {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        {
            let mut state = slot.lock().expect("not poisoned");
            if !matches!(*state, CutState::Pending) || tokio::time::Instant::now() >= until {
                return std::mem::replace(&mut *state, CutState::Used);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The key of the lock `name` under the namespace of `settings` (which names its slot on a
/// cluster).
fn lock_key(settings: &ClientSettings, name: &str) -> String {
    settings
        .keys(name)
        .map(|keys| keys.lock().to_string())
        .unwrap_or_else(|_| name.to_string())
}

/// How many times `fault` strikes in a run of `scenario`: `--injections`, or fewer for a
/// fault that cannot strike again.
fn strikes_of(scenario: &Scenario, fault: Fault) -> usize {
    fault
        .max_strikes()
        .map_or(scenario.injections, |max| max.min(scenario.injections))
}

/// The faults every worker strikes itself, by process: the k-th holder kill strikes process
/// k, the k-th pause the k-th process from the end, each at its own point of the run; the
/// long holds during which the server-side faults strike go, one per strike, to the
/// processes that no kill strikes (all of them if every one is killed), in turn, by their
/// last task. No two fall on the same acquisition of a task.
fn plan_triggers(scenario: &Scenario) -> Vec<Vec<Trigger>> {
    let p = scenario.processes;
    let mut plans = vec![Vec::new(); p];
    let has = |fault| scenario.faults.contains(&fault);
    for k in 0..scenario.injections {
        let at = scenario.count * (k + 1) / (scenario.injections + 1);
        if has(Fault::HolderKill) {
            push_free(&mut plans[k % p], scenario.count, 0, at, Action::Die);
        }
        if has(Fault::HolderPause) {
            let pause = at.max(1);
            push_free(
                &mut plans[p - 1 - k % p],
                scenario.count,
                0,
                pause,
                Action::Pause,
            );
        }
    }
    let strikes = server_side(scenario);
    // A long holder of a fault that may let a second holder in beside it works on the
    // resource all through its hold.
    let linger = if scenario.faults.iter().any(|f| f.lingers_writing()) {
        Action::LingerWriting
    } else {
        Action::Linger
    };
    let spared: Vec<usize> = (0..p)
        .filter(|&n| !plans[n].iter().any(|t| t.action == Action::Die))
        .collect();
    let hosts = if spared.is_empty() {
        (0..p).collect()
    } else {
        spared
    };
    for k in 0..strikes {
        let at = scenario.count * (k + 1) / (strikes + 1);
        let task = scenario.tasks - 1;
        push_free(
            &mut plans[hosts[k % hosts.len()]],
            scenario.count,
            task,
            at,
            linger,
        );
    }
    plans
}

/// How many strikes of server-side faults a run makes (each `--injections` times, or as
/// often as it can).
fn server_side(scenario: &Scenario) -> usize {
    scenario
        .faults
        .iter()
        .filter(|f| **f != Fault::None && !f.holder_side())
        .map(|f| strikes_of(scenario, *f))
        .sum()
}

/// How many faults can strike as planned: a kill per killed process, every pause and long
/// hold that comes before its process is killed, a server-side strike per long hold.
fn expected_injections(scenario: &Scenario, plans: &[Vec<Trigger>]) -> usize {
    let mut kills = 0;
    let mut pauses = 0;
    let mut lingers = 0;
    for plan in plans {
        let death = plan
            .iter()
            .filter(|t| t.action == Action::Die)
            .map(|t| t.at)
            .min();
        kills += usize::from(death.is_some());
        let lives = |t: &&Trigger| death.is_none_or(|death| t.at < death);
        pauses += plan
            .iter()
            .filter(|t| t.action == Action::Pause)
            .filter(lives)
            .count();
        lingers += plan
            .iter()
            .filter(|t| t.action.lingers())
            .filter(lives)
            .count();
    }
    kills + pauses + lingers.min(server_side(scenario))
}

/// Adds a trigger for `task` at the first acquisition from `at` on that has none yet.
fn push_free(triggers: &mut Vec<Trigger>, count: usize, task: usize, at: usize, action: Action) {
    let taken = |at| {
        triggers
            .iter()
            .any(|t: &Trigger| t.task == task && t.at == at)
    };
    if let Some(at) = (at..count).find(|&at| !taken(at)) {
        triggers.push(Trigger { task, at, action });
    }
}

fn process_of(worker: &str) -> usize {
    worker
        .trim_start_matches('p')
        .split('t')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

fn spawn_worker(plan: &Plan, env: &[(&str, String)]) -> Result<Child, CliError> {
    let exe = std::env::current_exe()
        .map_err(|err| CliError::CannotRun(format!("cannot find this program: {err}")))?;
    let plan = serde_json::to_string(plan).expect("plain data serializes");
    Command::new(exe)
        .arg("check-worker")
        // The library's logs are not the worker's report.
        .env_remove("RUST_LOG")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .arg(plan)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| CliError::CannotRun(format!("cannot start a check worker: {err}")))
}

/// Reads a worker's events until it exits, then reports how it ended.
fn collect(process: usize, mut child: Child, tx: mpsc::UnboundedSender<Message>) {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    tokio::spawn(async move {
        if let Some(stdout) = stdout {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(event) = serde_json::from_str::<Event>(&line) {
                    let _ = tx.send(Message::Event(event));
                }
            }
        }
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text).await;
        }
        let status = child.wait().await.ok();
        let killed = status.is_some_and(|s| {
            std::os::unix::process::ExitStatusExt::signal(&s) == Some(Signal::SIGKILL as i32)
        });
        let failed = !killed && !status.is_some_and(|s| s.success());
        let _ = tx.send(Message::Exited {
            process,
            killed,
            failed,
            stderr: text,
            at: now_nanos(),
        });
    });
}

/// Injects one server-side fault and undoes it, in a task; the task ends when the fault is
/// undone and says when it was at work.
fn strike(
    fault: Fault,
    servers: &Servers,
    lock: &str,
    scenario: &Scenario,
    cut: &CutSlot,
    (holder_acquired_at, first_grant_at): (Option<u64>, Option<u64>),
) -> tokio::task::JoinHandle<Result<Injection, String>> {
    let lease = scenario.lease;
    // A server clock that jumps moves every key: a MultiLock's whole pool.
    let keys: Vec<String> = scenario
        .watched(lock)
        .iter()
        .map(|name| lock_key(&servers.settings, name))
        .collect();
    let outage = fault::outage(lease);
    let private = servers.private.as_ref().map(|(private, _)| private.clone());
    let cut = cut.clone();
    let urls = servers.urls();
    let lock = lock.to_string();
    let settings = servers.settings.clone();
    let latency = servers.proxy.as_ref().map(Proxy::knob);
    let fake_clock = servers.fake_clock.as_ref().map(FakeClock::path);
    let handles: Vec<Option<SharedServer>> =
        servers.nodes.iter().map(|n| n.server.clone()).collect();
    let port = servers.nodes.first().and_then(Node::port);
    tokio::spawn(async move {
        let start = now_nanos();
        let mut detail = None;
        let mut resumed_at = None;
        let private_node = |n: usize| {
            handles
                .get(n)
                .cloned()
                .flatten()
                .ok_or_else(|| format!("{} needs private servers", fault.label()))
        };
        match fault {
            Fault::ServerPause => {
                let server = private_node(0)?;
                server.lock().expect("not poisoned").pause();
                tokio::time::sleep(outage).await;
                server.lock().expect("not poisoned").resume();
            }
            Fault::RedlockMajority => {
                let majority = (0..3).map(private_node).collect::<Result<Vec<_>, _>>()?;
                for server in &majority {
                    server.lock().expect("not poisoned").pause();
                }
                tokio::time::sleep(outage).await;
                for server in &majority {
                    server.lock().expect("not poisoned").resume();
                }
            }
            Fault::ServerRestart | Fault::ServerRestartAof => {
                let server = private_node(0)?;
                restart(server).await?;
            }
            Fault::RedlockMinority => {
                // Killed now, restarted (empty) only after the lease, as a node that lost
                // its data must be.
                let minority = (3..5).map(private_node).collect::<Result<Vec<_>, _>>()?;
                for server in &minority {
                    server.lock().expect("not poisoned").kill();
                }
                tokio::time::sleep(outage).await;
                for server in minority {
                    restart(server).await?;
                }
            }
            Fault::ServerSleep => {
                let mut con = admin(&urls[0], outage).await?;
                let seconds = format!("{:.3}", outage.as_secs_f64());
                // The reply comes when the sleep ends.
                redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(seconds)
                    .query_async::<()>(&mut con)
                    .await
                    .map_err(|err| format!("DEBUG SLEEP refused: {err}"))?;
            }
            Fault::ClientPause => {
                let mut con = admin(&urls[0], outage).await?;
                redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(outage.as_millis() as u64)
                    .arg("WRITE")
                    .query_async::<()>(&mut con)
                    .await
                    .map_err(|err| format!("CLIENT PAUSE refused: {err}"))?;
                tokio::time::sleep(outage).await;
            }
            Fault::ClientKill => {
                let mut con = admin(&urls[0], outage).await?;
                for _ in 0..5 {
                    for kind in ["normal", "pubsub"] {
                        redis::cmd("CLIENT")
                            .arg("KILL")
                            .arg("TYPE")
                            .arg(kind)
                            .query_async::<()>(&mut con)
                            .await
                            .map_err(|err| format!("CLIENT KILL refused: {err}"))?;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            Fault::Partition => {
                let port = port.ok_or("partition: the lock server's URL has no port")?;
                let rule = DropRule::add(port)?;
                tokio::time::sleep(outage).await;
                drop(rule);
            }
            Fault::Latency | Fault::LatencyHigh => {
                let knob = latency.ok_or("the latency faults need the proxy")?;
                let one_way = if fault == Fault::Latency {
                    lease / 8
                } else {
                    lease / 2
                };
                knob.store(one_way.as_micros() as u64, Ordering::SeqCst);
                tokio::time::sleep(outage).await;
                knob.store(0, Ordering::SeqCst);
            }
            Fault::PacketBurst => {
                let port = port.ok_or("packet-burst: the lock server's URL has no port")?;
                let rule = DropRule::add(port)?;
                tokio::time::sleep(lease / 3).await;
                drop(rule);
            }
            Fault::ClientClockStep => {
                let file = fake_clock.ok_or("client-clock-step needs the fake clock")?;
                let step = |offset: &str| {
                    std::fs::write(&file, offset)
                        .map_err(|err| format!("cannot step the workers' clock: {err}"))
                };
                step("+3600s\n")?;
                tokio::time::sleep(outage).await;
                step("+0\n")?;
            }
            Fault::PacketLoss => {
                let port = port.ok_or("packet-loss: the lock server's URL has no port")?;
                let rule = DropRule::add_random(port)?;
                tokio::time::sleep(outage).await;
                drop(rule);
            }
            Fault::BusyScript => {
                let mut con = admin(&urls[0], outage).await?;
                let config = |value: &str| {
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg("busy-reply-threshold")
                        .arg(value)
                        .clone()
                };
                config("100")
                    .query_async::<()>(&mut con)
                    .await
                    .map_err(|err| format!("CONFIG SET refused: {err}"))?;
                // A read-only script that spins for the outage (the server's own clock).
                let spin = redis::Script::new(include_str!("spin.lua"));
                let spun = spin
                    .arg(outage.as_micros() as u64)
                    .invoke_async::<()>(&mut con)
                    .await
                    .map_err(|err| format!("the busy script failed: {err}"));
                config("5000")
                    .query_async::<()>(&mut con)
                    .await
                    .map_err(|err| format!("CONFIG SET refused: {err}"))?;
                spun?;
            }
            Fault::ServerClockJump => {
                let mut con = admin(&urls[0], outage).await?;
                // The key's TTL cut short, as a server clock jumping a lease ahead would; a
                // semaphore's holders (a sorted set of their lease ends on the server's
                // clock, whose TTL every other holder's script sets again) see every lease
                // end passed, as that clock would show them.
                for key in &keys {
                    redis::Script::new(CLOCK_JUMP_LUA)
                        .key(key)
                        .invoke_async::<()>(&mut con)
                        .await
                        .map_err(|err| format!("the clock jump was refused: {err}"))?;
                }
            }
            Fault::ClusterFailover
            | Fault::SlotMigration
            | Fault::ClusterKill
            | Fault::SentinelFailover
            | Fault::SentinelKill => {
                let private =
                    private.ok_or_else(|| format!("{} needs its private set-up", fault.label()))?;
                let cut = if fault == Fault::ClusterKill {
                    match settled(&cut).await {
                        CutState::Made(cut) => Some(cut),
                        CutState::Failed(err) => {
                            return Err(format!(
                                "cluster-kill: the replica was not cut off: {err}"
                            ));
                        }
                        _ => None,
                    }
                } else {
                    None
                };
                let struck = failover::strike(failover::Strike {
                    fault,
                    private,
                    lock: lock.clone(),
                    settings: settings.clone(),
                    lease,
                    cut,
                    holder_acquired_at,
                    first_grant_at,
                })
                .await
                .map_err(|err| format!("{}: {err}", fault.label()))?;
                detail = Some(struck.detail);
                resumed_at = struck.resumed_at;
            }
            Fault::None | Fault::HolderKill | Fault::HolderPause => {}
        }
        Ok(Injection {
            fault,
            start,
            end: now_nanos(),
            detail,
            resumed_at,
        })
    })
}

/// Kills `server` and starts it again on its port (from its AOF if it has one).
async fn restart(server: SharedServer) -> Result<(), String> {
    tokio::task::spawn_blocking(move || server.lock().expect("not poisoned").restart())
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| format!("restart failed: {err}"))
}

/// A connection of the fault injector's own, with a reply timeout past the outage.
async fn admin(url: &str, outage: Duration) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|err| err.to_string())?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(outage + Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|err| format!("cannot connect to inject the fault: {err}"))
}

/// Watches the key of the lock `lock` (under the endpoint's namespace) on every node until
/// told to stop, counting looks that found it without a TTL (`PTTL` = -1). Under Sentinel
/// the master the sentinels name is asked for every quarter of a second, and followed when
/// it changes.
async fn watch_ttl(
    endpoint: Endpoint,
    names: Vec<String>,
    watching: Arc<AtomicBool>,
    no_ttl: Arc<AtomicU64>,
) {
    let mut cons = Vec::new();
    for node in endpoint.nodes() {
        if let Ok(con) = node.side().await {
            cons.push(con);
        }
    }
    // Every key of the lock that must expire: the lock key, its line of waiters (queue,
    // places, tickets, handover); the fencing counter alone never expires, on purpose.
    let keys: Vec<String> = names
        .iter()
        .flat_map(|name| match endpoint.settings().keys(name) {
            Ok(keys) => vec![
                keys.lock().to_string(),
                keys.queue().to_string(),
                keys.places().to_string(),
                keys.tickets().to_string(),
                keys.handover().to_string(),
            ],
            Err(_) => vec![name.clone()],
        })
        .collect();
    let follow = matches!(endpoint.place(), Place::Sentinel { .. });
    let mut master = if follow {
        endpoint.master_url().await.ok()
    } else {
        None
    };
    let mut asked = tokio::time::Instant::now();
    let mut last = false;
    loop {
        if follow && asked.elapsed() >= SENTINEL_ASK {
            asked = tokio::time::Instant::now();
            let named = tokio::time::timeout(Duration::from_millis(300), endpoint.master_url())
                .await
                .ok()
                .and_then(Result::ok);
            if let Some(named) = named.filter(|named| Some(named) != master.as_ref())
                && let Ok(Ok(con)) = tokio::time::timeout(
                    Duration::from_secs(1),
                    cli_support::connection_with(&named, endpoint.settings()),
                )
                .await
            {
                cons = vec![SideConnection::Server(con)];
                master = Some(named);
            }
        }
        for con in &mut cons {
            for key in &keys {
                let pttl: redis::RedisResult<i64> = tokio::time::timeout(
                    Duration::from_millis(200),
                    con.query_at(key, redis::cmd("PTTL").arg(key).clone()),
                )
                .await
                .unwrap_or_else(|_| {
                    Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout")))
                });
                if pttl == Ok(-1) {
                    no_ttl.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        if last {
            return;
        }
        if !watching.load(Ordering::SeqCst) {
            // One more look at the end: a key left without a TTL stays.
            last = true;
            continue;
        }
        tokio::time::sleep(TTL_WATCH).await;
    }
}

/// The permits of the semaphore `lock` still held a lease (and the drift allowance, and a
/// second) after every worker of `scenario` ended: 0 unless a permit leaked.
async fn permits_left(endpoint: &Endpoint, lock: &str, scenario: &Scenario) -> Result<u32, String> {
    let client = endpoint
        .first()
        .connect()
        .await
        .map_err(|err| format!("cannot connect to look for leaked permits: {err}"))?;
    let semaphore = client
        .semaphore(lock, scenario.permits)
        .map_err(|err| err.to_string())?;
    // The legacy counter: its value is the permits held.
    let counter = lock_key(endpoint.settings(), lock);
    let mut side = match scenario.algorithm {
        Algorithm::Ours => None,
        _ => Some(
            cli_support::connection_with(
                endpoint
                    .server_url()
                    .ok_or("the broken semaphore's counter is looked at on one server only")?,
                endpoint.settings(),
            )
            .await
            .map_err(|err| format!("cannot connect to look for leaked permits: {err}"))?,
        ),
    };
    let give_up = tokio::time::Instant::now()
        + scenario.lease
        + scenario.lease / 100
        + Duration::from_secs(1);
    loop {
        let in_use = match &mut side {
            None => semaphore
                .state()
                .await
                .map_err(|err| format!("cannot read the semaphore at the end: {err}"))?
                .in_use(),
            Some(con) => redis::cmd("GET")
                .arg(&counter)
                .query_async::<Option<i64>>(con)
                .await
                .map_err(|err| format!("cannot read the counter at the end: {err}"))?
                .map_or(Ok(0), |held| {
                    u32::try_from(held).map_err(|_| {
                        format!("the counter went below zero ({held}): a permit given back twice")
                    })
                })?,
        };
        if in_use == 0 || tokio::time::Instant::now() >= give_up {
            return Ok(in_use);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `server-clock-jump` on the lock key: a semaphore's holders all made past their lease end
/// (each holder's field `<lease end> <permits>` given lease end 0), any other key's TTL cut
/// to 1 ms.
const CLOCK_JUMP_LUA: &str = r#"
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'limit') then
  local fields = redis.call('HGETALL', KEYS[1])
  for i = 1, #fields, 2 do
    local count = string.match(fields[i + 1], '^%d+ (%d+)$')
    if count then
      redis.call('HSET', KEYS[1], fields[i], '0 ' .. count)
    end
  end
else
  redis.call('PEXPIRE', KEYS[1], 1, 'XX')
end
"#;

/// Deletes what a run left on servers it did not start (the fencing counter and the
/// companions of the lock), found with `SCAN` (never `KEYS` on somebody's server): on each
/// server, or on the master of the lock's slot.
pub async fn cleanup(endpoint: &Endpoint, lock: &str) {
    // The master of the slot of the lock key (under the namespace) holds every key of it.
    let key = lock_key(endpoint.settings(), lock);
    for node in endpoint.nodes() {
        let Ok(mut con) = node.side().await else {
            continue;
        };
        let mut cursor = 0u64;
        loop {
            let scan = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("*{lock}*"))
                .arg("COUNT")
                .arg(1000)
                .clone();
            let Ok((next, keys)) = con.query_at::<(u64, Vec<String>)>(&key, scan).await else {
                break;
            };
            if !keys.is_empty() {
                let _: redis::RedisResult<u64> =
                    redis::cmd("DEL").arg(keys).query_async(&mut con).await;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
}
