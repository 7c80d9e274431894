//! What `check` tells a worker process (a [`Plan`]) and what the worker reports back, one
//! JSON [`Event`] per line on its stdout.

use serde::{Deserialize, Serialize};

/// The lock algorithm a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// This library (the primitive chosen by `--primitive`).
    Ours,
    /// Seed 000's first lock: `SETNX`, then `EXPIRE`; release with `DEL`.
    SetnxExpire,
    /// Seed 000's "recommended" lock: `SETNX` of an expiry timestamp, `GETSET` to take over
    /// an expired one; release with `DEL` if the holder's own clock says it has not expired.
    SetnxGetset,
    /// `SET NX PX` (a lease, done right) but released with a plain `DEL`, owner unchecked.
    NaiveDel,
    /// A semaphore of `--permits` N as a bare counter (`INCR`, `DECR`; Redisson's
    /// `RSemaphore`): no lease, so a crashed holder's permit leaks for ever.
    CounterSemaphore,
    /// A MultiLock built by hand (Redisson's `RedissonMultiLock`): the library's `Mutex` of
    /// each name, taken one by one in the order the caller named them, with no deadline over
    /// them all. Two callers that name overlapping names in other orders each hold what the
    /// other waits for: a deadlock, until something gives up.
    CallerOrderMultilock,
}

impl Algorithm {
    /// The name tables show.
    pub fn label(self) -> &'static str {
        match self {
            Algorithm::Ours => "ours",
            Algorithm::SetnxExpire => "setnx-expire",
            Algorithm::SetnxGetset => "setnx-getset",
            Algorithm::NaiveDel => "naive-del",
            Algorithm::CounterSemaphore => "counter-semaphore",
            Algorithm::CallerOrderMultilock => "caller-order-multilock",
        }
    }

    /// Whether the algorithm gives fencing tokens and tells its holder when the lease ends
    /// (the hand-made MultiLock does: it is made of the library's `Mutex`es).
    pub fn fenced(self) -> bool {
        matches!(self, Algorithm::Ours | Algorithm::CallerOrderMultilock)
    }

    /// Whether it is a seed-000-style algorithm of raw Redis commands (no library client).
    pub fn raw(self) -> bool {
        !matches!(self, Algorithm::Ours | Algorithm::CallerOrderMultilock)
    }
}

/// Which of the library's primitives `--algorithm ours` checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum CheckPrimitive {
    /// `Mutex`.
    Mutex,
    /// `FairMutex`.
    Fair,
    /// `ReentrantMutex` (each task an owner of its own).
    Reentrant,
    /// `RwLock`: even tasks write (read-modify-write), odd tasks read.
    Rwlock,
    /// `Redlock` over 5 nodes (private servers, or the `--redis` list).
    Redlock,
    /// `Semaphore` with `--permits` N: each task takes one permit; at most N holders at
    /// once, every grant a token of its own.
    Semaphore,
    /// `MultiLock`: each acquisition takes a random 2 to `--names` N of a pool of 2N names,
    /// named in a random order; no name held by two at once, none stuck.
    Multilock,
}

impl CheckPrimitive {
    /// The name tables show.
    pub fn label(self) -> &'static str {
        match self {
            CheckPrimitive::Mutex => "Mutex",
            CheckPrimitive::Fair => "FairMutex",
            CheckPrimitive::Reentrant => "ReentrantMutex",
            CheckPrimitive::Rwlock => "RwLock",
            CheckPrimitive::Redlock => "Redlock",
            CheckPrimitive::Semaphore => "Semaphore",
            CheckPrimitive::Multilock => "MultiLock",
        }
    }
}

/// What a worker does to itself at one acquisition: the holder-side faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// SIGKILL: in the middle of taking the lock when the algorithm takes it in steps (after
    /// `SETNX`, before `EXPIRE`), else just after it acquired.
    Die,
    /// SIGSTOP after reading the resource and checking the lease, before writing; `check`
    /// sends SIGCONT once the lease has run out.
    Pause,
    /// Hold for twice the lease (the watchdog renewing it), and say so: `check` strikes its
    /// server-side faults while such a holder depends on its renewals.
    Linger,
    /// As [`Action::Linger`], working on the resource all through the hold (an increment
    /// every eighth of the lease, at most 50 ms apart) until it is told of a loss or the resource refuses it: a
    /// holder that a failover lets a second one in beside (`cluster-kill`) meets the
    /// newer holder's token there.
    LingerWriting,
}

impl Action {
    /// A long hold, during which `check` strikes a server-side fault.
    pub fn lingers(self) -> bool {
        matches!(self, Action::Linger | Action::LingerWriting)
    }
}

/// One holder-side fault: task `task` of the worker does `action` at its acquisition `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    /// The task of the worker process.
    pub task: usize,
    /// The acquisition (counted from 0) at which it strikes.
    pub at: usize,
    /// What happens.
    pub action: Action,
}

/// Everything a worker process needs, passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// The lock servers (several for a Redlock), a cluster, or a Sentinel-watched master.
    pub endpoint: cli_support::endpoint::Endpoint,
    /// The server of the checked resource (never faulted).
    pub resource_url: String,
    /// The lock's name.
    pub lock: String,
    /// The resource's key prefix.
    pub resource: String,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The primitive, for [`Algorithm::Ours`].
    pub primitive: CheckPrimitive,
    /// N, for [`CheckPrimitive::Semaphore`].
    #[serde(default = "one")]
    pub permits: u32,
    /// The most names of one acquisition, for [`CheckPrimitive::Multilock`]: each takes 2
    /// to N of the pool ([`multilock_pool`], 2N names).
    #[serde(default = "one")]
    pub names: u32,
    /// How long an acquisition may take before it counts as stuck (ms; 0: no limit): it is
    /// then given up (what it took released) and tried again.
    #[serde(default)]
    pub stuck_ms: u64,
    /// This worker's number.
    pub process: usize,
    /// Tasks in this worker.
    pub tasks: usize,
    /// Acquisitions per task.
    pub count: usize,
    /// The lease (TTL) every acquisition asks for, in milliseconds.
    pub lease_ms: u64,
    /// How long a holder works between its read and its write, in microseconds.
    pub hold_us: u64,
    /// When to begin (the monotonic clock of [`clock`](super::clock), ns), so every worker
    /// begins together.
    pub start_at: u64,
    /// The holder-side faults of this worker.
    pub triggers: Vec<Trigger>,
    /// Whether the worker forwards the library's metrics ([`Event::Metrics`]): `check`
    /// serves them (`--metrics-addr`).
    #[serde(default)]
    pub metrics: bool,
}

fn one() -> u32 {
    1
}

/// The names a MultiLock check takes its acquisitions from: 2 × `names`, the first the lock's
/// own name (where the faults that strike one key or slot strike), the others `LOCK:m1`...
pub fn multilock_pool(lock: &str, names: u32) -> Vec<String> {
    (0..2 * names.max(1))
        .map(|i| {
            if i == 0 {
                lock.to_string()
            } else {
                format!("{lock}:m{i}")
            }
        })
        .collect()
}

/// A MultiLock check's name as tables show it: `m0` for the lock's own, `m1`...
pub fn short_name<'a>(lock_name: &'a str, lock: &str) -> std::borrow::Cow<'a, str> {
    match lock_name.strip_prefix(lock) {
        Some("") => "m0".into(),
        Some(rest) => rest.trim_start_matches(':').into(),
        None => lock_name.into(),
    }
}

/// How one access of the resource went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// The resource took it.
    Accepted,
    /// The resource refused a stale fencing token.
    Refused,
    /// The holder did not try: it knew its lease had ended (or it is a reader: no write).
    Skipped,
    /// The request failed.
    Failed,
}

/// How a release went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Release {
    /// The lock was ours and is released.
    Released,
    /// The release found the lock gone or another's, and said so.
    NotHeld,
    /// The release request failed (the lease still bounds the hold).
    Failed,
    /// The algorithm released without knowing (a blind `DEL`).
    Unchecked,
}

/// One holding of the lock, as its holder saw it. Times are nanoseconds of the system's monotonic clock ([`clock`](super::clock)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holding {
    /// `p<process>t<task>`.
    pub worker: String,
    /// The acquisition's number within its task.
    pub seq: usize,
    /// A shared hold (an `RwLock` reader).
    pub shared: bool,
    /// The fencing token, for an algorithm that has them (a MultiLock's: the greatest).
    pub token: Option<u64>,
    /// A MultiLock's names, each with its fencing token (empty for the other primitives).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<(String, u64)>,
    /// When acquire returned.
    pub acquired_at: u64,
    /// When the holder's lease ends by its own clock (the guard's deadline), for an algorithm
    /// that tells its holder; the holder may not act after it.
    pub lease_end: Option<u64>,
    /// When the holder stopped: just before its release was sent.
    pub end: u64,
    /// When the guard's `lost()` fired, if it did before the release.
    pub lost_at: Option<u64>,
    /// The holder was stopped (SIGSTOP) during this holding: nothing in it could run.
    pub paused: bool,
    /// A long hold ([`Action::Linger`]), during which a server-side fault struck.
    pub lingered: bool,
    /// The largest step of its wall clock against the monotonic clock that a long holder saw
    /// (ms): an hour under `client-clock-step`, about 0 otherwise.
    #[serde(default)]
    pub wall_step_ms: i64,
    /// When the resource refused this holder's access (monotonic ns): its token was below
    /// one a newer holder had shown it.
    #[serde(default)]
    pub refused_at: Option<u64>,
    /// Increments the resource took from this holder during a long hold of
    /// [`Action::LingerWriting`] (its last write not counted).
    #[serde(default)]
    pub increments: u32,
    /// The read of the resource.
    pub read: Access,
    /// The write of the resource.
    pub write: Access,
    /// The release.
    pub release: Release,
}

/// A line of a worker's stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The worker process has connected to the lock servers and waits for the common
    /// start.
    Connected {
        /// The worker's number.
        process: usize,
    },
    /// What the library recorded in the worker since its last such line (with `metrics` in
    /// its plan): `check` adds it to the metrics it serves.
    Metrics {
        /// Each metric's increase or new values.
        samples: Vec<super::metrics::Sample>,
    },
    /// A task acquired (sent at once, so a holder killed before it finishes is known).
    Acquired {
        /// `p<process>t<task>`.
        worker: String,
        /// The acquisition's number within its task.
        seq: usize,
        /// The fencing token, if any.
        token: Option<u64>,
        /// A MultiLock's names with their tokens.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tokens: Vec<(String, u64)>,
        /// When acquire returned (monotonic ns).
        at: u64,
        /// When the lease ends (monotonic ns): the guard's deadline, or for an algorithm without
        /// one the expiry it asked for.
        lease_end: u64,
    },
    /// A long holder's lease was renewed: its lease now ends at `lease_end` (monotonic ns).
    Renewed {
        /// `p<process>t<task>`.
        worker: String,
        /// When the renewed lease ends.
        lease_end: u64,
    },
    /// A holder is done with the resource and about to release (sent before the release
    /// goes out: a process killed before its [`Event::Held`] line, once the release let the
    /// next holder in, is known to have held only until `at`).
    Releasing {
        /// `p<process>t<task>`.
        worker: String,
        /// When its use of the resource ended (monotonic ns).
        at: u64,
        /// When its lease ended, as its guard said then (monotonic ns; none for an algorithm
        /// without one), as in [`Holding::lease_end`].
        lease_end: Option<u64>,
        /// When `lost()` fired, if it did by `at` (monotonic ns), as in [`Holding::lost_at`].
        lost_at: Option<u64>,
    },
    /// A holding finished.
    Held(Holding),
    /// The worker is about to stop itself (SIGSTOP); `check` resumes it after the lease.
    Pausing {
        /// `p<process>t<task>`.
        worker: String,
    },
    /// A request failed and the task retries (a fault at work).
    Retry {
        /// `p<process>t<task>`.
        worker: String,
        /// The error.
        message: String,
    },
    /// A holder began a long hold ([`Action::Linger`]): the moment for a server-side fault.
    Lingering {
        /// `p<process>t<task>`.
        worker: String,
    },
    /// An acquisition did not finish within its deadline ([`Plan::stuck_ms`]): given up
    /// (whatever it took released) and tried again.
    Stuck {
        /// `p<process>t<task>`.
        worker: String,
        /// The names it was taking, in the order it named them.
        names: Vec<String>,
        /// How long it waited (ms).
        waited_ms: u64,
    },
    /// A task gave up: an error it cannot retry.
    Failed {
        /// `p<process>t<task>`.
        worker: String,
        /// The error.
        message: String,
    },
    /// A task finished all its acquisitions.
    Done {
        /// `p<process>t<task>`.
        worker: String,
    },
}
