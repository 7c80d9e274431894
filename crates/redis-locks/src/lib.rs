#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs, unreachable_pub, missing_debug_implementations)]

// The layers, from the bottom up: error, key, token and state (plain types); node (every
// request to Redis); lease (the held lock: guard core, watchdog, owed release) and wait (the
// one acquire loop); client; then one folder per primitive. A primitive depends on the core,
// never the reverse.
pub mod blocking;
mod breaking;
mod client;
mod engine;
mod error;
mod fair;
mod fenced;
pub mod key;
mod lease;
mod multilock;
mod mutex;
mod node;
mod options;
mod owner;
mod redlock;
mod reentrant;
mod rwlock;
mod semaphore;
mod state;
mod telemetry;
mod token;
mod wait;

pub use breaking::BrokenLock;
pub use client::{Client, ClientStats};
pub use error::{Error, LostReason, NodeVote, Phase, Result, TlsProblem, Vote};
pub use fair::FairMutex;
pub use fenced::FencedKey;
pub use key::LockKeys;
pub use lease::{ClockDrift, DEFAULT_LEASE, LeaseOptions, MAX_LEASE, MIN_LEASE, Released};
pub use multilock::{MAX_MULTILOCK_NAMES, MultiLock, MultiLockGuard};
pub use mutex::{Mutex, MutexGuard};
pub use node::{ClientOptions, DEFAULT_RENEWAL_BATCH, Replication};
pub use options::LockOptions;
pub use owner::OwnerId;
pub use redlock::{
    NODE_GRACE, NodeStart, NodeState, Redlock, RedlockGuard, RedlockNodes, RedlockOptions,
    RedlockState,
};
pub use reentrant::{ReentrantMutex, ReentrantMutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{MAX_PERMITS, PermitHolder, Semaphore, SemaphoreGuard, SemaphoreState};
pub use state::{HoldInfo, HoldMode, Holder, HoldsState, LockState};
pub use telemetry::{METRIC_NAMES, describe_metrics, metric_lock_names};
pub use token::{FencingToken, OwnerToken};
pub use wait::{DEFAULT_PLACE_LEASE, DEFAULT_RETRY_DELAY, WaitOptions};

/// The workspace README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;

/// The examples of `docs/fencing.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/fencing.md")]
struct FencingDoctests;

/// The examples of `docs/redlock.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/redlock.md")]
struct RedlockDoctests;
