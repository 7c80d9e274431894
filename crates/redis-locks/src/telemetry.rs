//! Metrics through the [`metrics`] facade: what the locks of this process do, for whatever
//! recorder the application installs (the crate installs none, so without one every call
//! here costs an atomic load). Every metric is named `redis_locks_…` and labelled by
//! `primitive` ([`Kind`]'s names); none carries an owner token or a URL, and a lock name only
//! when [`metric_lock_names`] asks for it (a bounded number of them).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `redis_locks_acquisitions_total` | counter | `primitive`, `outcome` (`acquired`, `timeout`, `error`) | acquire calls that ended |
//! | `redis_locks_wait_seconds` | histogram | `primitive`, `outcome` | how long each took |
//! | `redis_locks_attempts_total` | counter | `primitive` | requests that asked for a lock (over acquisitions: attempts per acquisition) |
//! | `redis_locks_hold_seconds` | histogram | `primitive` | from grant to release |
//! | `redis_locks_releases_total` | counter | `primitive`, `outcome` (`released`, `not_held`, `error`) | releases |
//! | `redis_locks_renewals_total` | counter | `primitive` | renewals the server confirmed |
//! | `redis_locks_renewal_failures_total` | counter | `primitive` | renewals that failed (unreachable, slow, refused) |
//! | `redis_locks_losses_total` | counter | `primitive`, `reason` (`expired`, `taken`, `lease_ended`, `renewal_cap_reached`, `broken`) | locks lost while held |
//! | `redis_locks_wakeups_total` | counter | | wake-up messages this process received |
//! | `redis_locks_requests_total` | counter | | requests sent to Redis (over acquisitions: requests per acquisition) |
//!
//! ```
//! // With any recorder installed (metrics-exporter-prometheus, say), a lock's work shows up
//! // under these names; the list is also what `describe` registers.
//! assert!(redis_locks::METRIC_NAMES.contains(&"redis_locks_acquisitions_total"));
//! ```

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use metrics::{Key, Label, Metadata};

use crate::error::{Error, LostReason, Result};

/// Every metric the crate records, by name.
pub const METRIC_NAMES: [&str; 10] = [
    ACQUISITIONS,
    WAIT,
    ATTEMPTS,
    HOLD,
    RELEASES,
    RENEWALS,
    RENEWAL_FAILURES,
    LOSSES,
    WAKEUPS,
    REQUESTS,
];

const ACQUISITIONS: &str = "redis_locks_acquisitions_total";
const WAIT: &str = "redis_locks_wait_seconds";
const ATTEMPTS: &str = "redis_locks_attempts_total";
const HOLD: &str = "redis_locks_hold_seconds";
const RELEASES: &str = "redis_locks_releases_total";
const RENEWALS: &str = "redis_locks_renewals_total";
const RENEWAL_FAILURES: &str = "redis_locks_renewal_failures_total";
const LOSSES: &str = "redis_locks_losses_total";
const WAKEUPS: &str = "redis_locks_wakeups_total";
const REQUESTS: &str = "redis_locks_requests_total";

/// The primitive a metric is about: its `primitive` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex = 0,
    FairMutex,
    ReentrantMutex,
    RwLock,
    Semaphore,
    Redlock,
    MultiLock,
}

impl Kind {
    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::FairMutex => "fair_mutex",
            Kind::ReentrantMutex => "reentrant_mutex",
            Kind::RwLock => "rwlock",
            Kind::Semaphore => "semaphore",
            Kind::Redlock => "redlock",
            Kind::MultiLock => "multilock",
        }
    }
}

/// Registers a description and unit of every metric with the recorder installed now (call it
/// after installing one; recording works without it).
///
/// ```
/// redis_locks::describe_metrics();
/// ```
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(ACQUISITIONS, "Acquire calls that ended, by outcome");
    describe_histogram!(WAIT, Unit::Seconds, "How long acquire calls took");
    describe_counter!(ATTEMPTS, "Requests that asked Redis for a lock");
    describe_histogram!(HOLD, Unit::Seconds, "How long locks were held");
    describe_counter!(RELEASES, "Releases, by outcome");
    describe_counter!(RENEWALS, "Renewals the server confirmed");
    describe_counter!(RENEWAL_FAILURES, "Renewals that failed");
    describe_counter!(LOSSES, "Locks lost while held, by reason");
    describe_counter!(WAKEUPS, "Wake-up messages received");
    describe_counter!(REQUESTS, "Requests sent to Redis");
}

/// Every key a record uses, made once: a record then allocates nothing (with no recorder
/// installed it costs an atomic load; label values that are not literals would otherwise be
/// copied into a new key by every call).
struct Keys {
    /// By kind, then outcome (acquired, timeout, error).
    acquisitions: Vec<[Key; 3]>,
    wait: Vec<[Key; 3]>,
    attempts: Vec<Key>,
    hold: Vec<Key>,
    /// By kind, then outcome (released, not_held, error).
    releases: Vec<[Key; 3]>,
    renewals: Vec<Key>,
    renewal_failures: Vec<Key>,
    /// By kind, then reason (expired, taken, lease_ended, renewal_cap_reached, broken).
    losses: Vec<[Key; 5]>,
    wakeups: Key,
    requests: Key,
}

const KINDS: [Kind; 7] = [
    Kind::Mutex,
    Kind::FairMutex,
    Kind::ReentrantMutex,
    Kind::RwLock,
    Kind::Semaphore,
    Kind::Redlock,
    Kind::MultiLock,
];
const ACQUIRE_OUTCOMES: [&str; 3] = ["acquired", "timeout", "error"];
const RELEASE_OUTCOMES: [&str; 3] = ["released", "not_held", "error"];
const LOSS_REASONS: [&str; 5] = [
    "expired",
    "taken",
    "lease_ended",
    "renewal_cap_reached",
    "broken",
];

static KEYS: LazyLock<Keys> = LazyLock::new(|| {
    let by_kind = |name: &'static str| -> Vec<Key> {
        KINDS
            .iter()
            .map(|kind| Key::from_parts(name, vec![Label::new("primitive", kind.label())]))
            .collect()
    };
    fn by_kind_and<const N: usize>(
        name: &'static str,
        label: &'static str,
        values: [&'static str; N],
    ) -> Vec<[Key; N]> {
        KINDS
            .iter()
            .map(|kind| {
                values.map(|value| {
                    Key::from_parts(
                        name,
                        vec![
                            Label::new("primitive", kind.label()),
                            Label::new(label, value),
                        ],
                    )
                })
            })
            .collect()
    }
    Keys {
        acquisitions: by_kind_and(ACQUISITIONS, "outcome", ACQUIRE_OUTCOMES),
        wait: by_kind_and(WAIT, "outcome", ACQUIRE_OUTCOMES),
        attempts: by_kind(ATTEMPTS),
        hold: by_kind(HOLD),
        releases: by_kind_and(RELEASES, "outcome", RELEASE_OUTCOMES),
        renewals: by_kind(RENEWALS),
        renewal_failures: by_kind(RENEWAL_FAILURES),
        losses: by_kind_and(LOSSES, "reason", LOSS_REASONS),
        wakeups: Key::from_static_name(WAKEUPS),
        requests: Key::from_static_name(REQUESTS),
    }
});

/// What every record says of where it comes from.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// How many lock names get a `lock` label of their own: 0 (none, the default) until
/// [`metric_lock_names`] sets it.
static NAMES_LIMIT: AtomicUsize = AtomicUsize::new(0);

/// The names that have a label of their own, at most [`NAMES_LIMIT`]; the others share
/// `lock="other"`.
static NAMES: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);

/// Labels the per-lock metrics (acquisitions, wait, attempts, hold time, releases, renewals,
/// losses) with `lock="<name>"` too, for the first `limit` lock names this process records
/// (each later name counts under `lock="other"`): opt-in, since every name is a time series of
/// its own in the recorder. 0 (the default) labels none. Call it before the locks work.
///
/// ```
/// redis_locks::metric_lock_names(100);
/// # redis_locks::metric_lock_names(0);
/// ```
pub fn metric_lock_names(limit: usize) {
    NAMES_LIMIT.store(limit, Ordering::Relaxed);
}

/// Whether lock names are labelled ([`metric_lock_names`]): a caller that would copy a name
/// only for the metrics asks first.
pub(crate) fn names_labelled() -> bool {
    NAMES_LIMIT.load(Ordering::Relaxed) > 0
}

/// `key` with the `lock` label of `name` when names are labelled, else `key` itself.
fn named<'a>(key: &'a Key, name: &str) -> std::borrow::Cow<'a, Key> {
    let limit = NAMES_LIMIT.load(Ordering::Relaxed);
    if limit == 0 {
        return std::borrow::Cow::Borrowed(key);
    }
    let label = {
        let mut names = NAMES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if names.contains(name) || (names.len() < limit && names.insert(name.to_string())) {
            name.to_string()
        } else {
            "other".to_string()
        }
    };
    let mut labels: Vec<Label> = key.labels().cloned().collect();
    labels.push(Label::new("lock", label));
    std::borrow::Cow::Owned(Key::from_parts(key.name().to_string(), labels))
}

fn count(key: &Key, name: Option<&str>) {
    let key = match name {
        Some(name) => named(key, name),
        None => std::borrow::Cow::Borrowed(key),
    };
    metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA).increment(1));
}

fn sample(key: &Key, name: &str, value: Duration) {
    let key = named(key, name);
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(&key, &METADATA)
            .record(value.as_secs_f64())
    });
}

/// An acquire call of `kind` for the lock `name` ended after `waited` with `outcome`.
pub(crate) fn acquired<T>(kind: Kind, name: &str, waited: Duration, outcome: &Result<T>) {
    let at = match outcome {
        Ok(_) => 0,
        Err(Error::WaitTimeout { .. }) => 1,
        Err(_) => 2,
    };
    count(&KEYS.acquisitions[kind as usize][at], Some(name));
    sample(&KEYS.wait[kind as usize][at], name, waited);
}

/// A request of `kind` asked for the lock `name`.
pub(crate) fn attempted(kind: Kind, name: &str) {
    count(&KEYS.attempts[kind as usize], Some(name));
}

/// The lock `name` of `kind` held for `held` was released with `outcome`.
pub(crate) fn released<T>(kind: Kind, name: &str, held: Duration, outcome: &Result<T>) {
    let at = match outcome {
        Ok(_) => 0,
        Err(Error::NotHeld { .. }) => 1,
        Err(_) => 2,
    };
    count(&KEYS.releases[kind as usize][at], Some(name));
    sample(&KEYS.hold[kind as usize], name, held);
}

/// A renewal of the lock `name` of `kind` was confirmed (`true`) or failed.
pub(crate) fn renewed(kind: Kind, name: &str, confirmed: bool) {
    if confirmed {
        count(&KEYS.renewals[kind as usize], Some(name));
    } else {
        count(&KEYS.renewal_failures[kind as usize], Some(name));
    }
}

/// The lock `name` of `kind` was lost for `reason` (a release is not a loss, and is not
/// counted).
pub(crate) fn lost(kind: Kind, name: &str, reason: LostReason) {
    let at = match reason {
        LostReason::Expired => 0,
        LostReason::Taken => 1,
        LostReason::LeaseEnded => 2,
        LostReason::RenewalCapReached => 3,
        LostReason::Broken => 4,
        LostReason::Released => return,
    };
    count(&KEYS.losses[kind as usize][at], Some(name));
}

/// A wake-up message reached this process.
pub(crate) fn woken() {
    count(&KEYS.wakeups, None);
}

/// A request went to Redis.
pub(crate) fn requested() {
    count(&KEYS.requests, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_finds_its_own_keys() {
        for (at, kind) in KINDS.iter().enumerate() {
            assert_eq!(*kind as usize, at);
            let labels: Vec<_> = KEYS.attempts[at].labels().map(|l| l.value()).collect();
            assert_eq!(labels, [kind.label()]);
        }
    }
}
