//! `MultiLock`: several locks taken together, all or none, in one global order.
//!
//! Each name is a lock key as a [`Mutex`](crate::Mutex)'s (so the two exclude each other),
//! with its own fencing counter. The names are sorted into one global order — by cluster
//! slot, then by name — and split into groups of one slot (on one server, or behind
//! Sentinel, every name is in one group): one script call takes a group all or none
//! (`acquire.lua`). Groups are taken one after another in that order, each through the one
//! acquire loop, waiting while holding the groups before it; as every MultiLock takes its
//! names in the same order, no two can wait for each other in a circle. The wait budget is
//! one deadline for all; a failure releases everything taken at once.

mod guard;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, LostReason, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Hold, HoldFuture, Lease, OwedRelease, Released, lease_millis};
use crate::node::{LockScript, Node, Registered, Replication};
use crate::options::LockOptions;
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{
    Contender, LOCK_LUA, Line, QUEUE_LUA, Try, acquire, in_time, nothing_owed, tombstone,
};

pub use guard::MultiLockGuard;
use guard::Part;

/// The MultiLock's prelude: its KEYS, its place in its locks' lines.
const LINES_LUA: &str = include_str!("lines.lua");

/// Take a group's locks, all or none: `{1, tokens...}` or `{0, i, pttl}`.
pub(crate) static ACQUIRE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        LINES_LUA,
        include_str!("acquire.lua"),
    ])
});
inventory::submit!(Registered(|| &ACQUIRE));

/// Release a group's locks by owner (and leave their lines), waking their waiters:
/// `{r_1, ..., r_n}`.
pub(crate) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[LOCK_LUA, QUEUE_LUA, LINES_LUA, include_str!("release.lua")])
});
inventory::submit!(Registered(|| &RELEASE));

/// Renew a group's locks by owner, all or none: `{1}`, `{0, i}` or `{-1, i}`.
pub(crate) static EXTEND: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, LINES_LUA, include_str!("extend.lua")]));
inventory::submit!(Registered(|| &EXTEND));

/// The most names one [`MultiLock`] takes.
pub const MAX_MULTILOCK_NAMES: usize = 1000;
/// The locks of one cluster slot (or all of them, on one server): one script call takes,
/// extends or releases them together.
struct Group {
    /// The locks' keys, in the global order.
    locks: Vec<LockKeys>,
    /// The scripts' KEYS: per lock its key, its fencing counter and its line (queue, places,
    /// tickets).
    script_keys: Vec<String>,
    /// The names, comma-separated, for messages.
    label: String,
}

impl Group {
    fn new(locks: Vec<LockKeys>) -> Group {
        let script_keys = locks
            .iter()
            .flat_map(|keys| {
                let line = keys.line();
                [
                    keys.lock(),
                    keys.fence(),
                    line.queue(),
                    line.places(),
                    line.tickets(),
                ]
                .map(str::to_string)
            })
            .collect();
        let label = locks
            .iter()
            .map(LockKeys::name)
            .collect::<Vec<_>>()
            .join(", ");
        Group {
            locks,
            script_keys,
            label,
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.script_keys.iter().map(String::as_str).collect()
    }

    /// The error for the `index`-th (1-based) lock found `gone` (`0`) or another owner's
    /// (`-1`), or an unexpected reply.
    fn lost(&self, phase: Phase, state: i64, index: i64) -> Error {
        let name = usize::try_from(index)
            .ok()
            .and_then(|index| self.locks.get(index.checked_sub(1)?));
        match (state, name) {
            (0, Some(keys)) => Error::NotHeld {
                name: keys.name().to_string(),
                reason: LostReason::Expired,
            },
            (-1, Some(keys)) => Error::NotHeld {
                name: keys.name().to_string(),
                reason: LostReason::Taken,
            },
            _ => Error::UnexpectedReply {
                phase,
                detail: format!("[{state}, {index}]"),
            },
        }
    }

    /// An extension's reply: `{1}`, or `{0 | -1, i}`.
    fn extended(&self, reply: &[i64]) -> Result<()> {
        match reply {
            [1] => Ok(()),
            [state, index] => Err(self.lost(Phase::Extend, *state, *index)),
            other => Err(Error::UnexpectedReply {
                phase: Phase::Extend,
                detail: format!("{other:?}"),
            }),
        }
    }
}

/// How a group is released and extended by owner token: the lease core's [`Hold`].
struct GroupHold {
    node: Node,
    group: Group,
}

impl Hold for GroupHold {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::MultiLock
    }

    fn name(&self) -> &str {
        &self.group.label
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let id = owner.as_str();
            let mut keys = self.group.keys();
            // Where a script may run twice, the tombstone in the group's slot, last.
            let tombstone = tombstone(&self.node, &self.group.locks[0], id);
            keys.extend(tombstone.as_deref());
            let mut args = vec![id];
            args.extend(self.group.locks.iter().map(LockKeys::wake_channel));
            let reply: Vec<i64> = self
                .node
                .run_script(Phase::Release, &RELEASE, &keys, &args)
                .await?;
            if reply.len() != self.group.locks.len() {
                return Err(Error::UnexpectedReply {
                    phase: Phase::Release,
                    detail: format!("{reply:?}"),
                });
            }
            // Every lock still ours was released; the first that was not says so.
            match reply.iter().zip(1..).find(|(state, _)| **state != 1) {
                None => Ok(Released::Freed),
                Some((state, index)) => Err(self.group.lost(Phase::Release, *state, index)),
            }
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let lease = lease_millis(lease)?.to_string();
            let reply: Vec<i64> = self
                .node
                .run_script(
                    Phase::Extend,
                    &EXTEND,
                    &self.group.keys(),
                    &[owner.as_str(), &lease],
                )
                .await?;
            self.group.extended(&reply)
        })
    }

    fn extend_replicated<'a>(
        &'a self,
        owner: &'a OwnerToken,
        lease: Duration,
        replication: &'a Replication,
    ) -> HoldFuture<'a, u32> {
        Box::pin(async move {
            let lease = lease_millis(lease)?.to_string();
            let (reply, acked): (Vec<i64>, _) = self
                .node
                .run_script_replicated(
                    Phase::Extend,
                    &EXTEND,
                    &self.group.keys(),
                    &[owner.as_str(), &lease],
                    replication,
                )
                .await?;
            self.group.extended(&reply)?;
            replication.enough(self.name(), acked)
        })
    }
}

/// Several locks taken together, all or none, and never in a deadlock.
///
/// The names are taken in one global order (by Redis Cluster slot, then by name), whatever
/// order the caller gave them in, so two `MultiLock`s over overlapping names can never wait
/// for each other in a circle. Names in one slot — every name on one server or behind
/// Sentinel, or names that share a hash tag (`{acct}:a`, `{acct}:b`) on a cluster — are
/// taken by one script call, all or none. Names across slots are taken one slot after
/// another in that order, waiting (while holding the ones before) for a slot whose locks are
/// held; the wait budget is one deadline for them all, and a failure releases everything
/// taken at once.
///
/// Each name is a lock as a [`Mutex`](crate::Mutex)'s of the same name (they exclude each
/// other), with its own fencing token: the guard carries one per name. Its lease is renewed
/// by the watchdog (one script call per slot), and [`lost`](MultiLockGuard::lost) fires when
/// any part is lost. A waiting `MultiLock` stands in the line of the lock that refused it and
/// is woken by its release: a slot's single lock is served first come, first served; several
/// locks of one slot are taken whenever all are free at once.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// // A transfer between two accounts: both or neither, whichever order they are named in.
/// let both = client.multi_lock(["account:7", "account:3"])?;
/// let guard = both.lock().await?;
/// assert_eq!(guard.names().collect::<Vec<_>>(), ["account:3", "account:7"]);
/// assert!(client.mutex("account:3")?.try_lock().await.unwrap_err().is_held());
/// let token = guard.fencing_token("account:7").unwrap(); // pass it with each write
/// # let _ = token;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    client: Client,
    /// The groups, in the global order.
    groups: Arc<[Arc<GroupHold>]>,
    options: LockOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names().collect::<Vec<_>>())
            .field("options", &self.options)
            .finish()
    }
}

impl Client {
    /// A [`MultiLock`] over `names` (in any order), with default options (a 30 s lease
    /// renewed by the watchdog).
    ///
    /// # Errors
    /// [`Error::InvalidNames`] for no names, more than [`MAX_MULTILOCK_NAMES`], or a name
    /// given twice; as [`Client::mutex`] for each name.
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.multi_lock_with(names, LockOptions::default())
    }

    /// A [`MultiLock`] over `names` with the given options.
    ///
    /// # Errors
    /// As [`Client::multi_lock`]; as [`Client::mutex_with`] for the options.
    pub fn multi_lock_with<I, S>(&self, names: I, options: LockOptions) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        options.check_on(self.options())?;
        let mut locks = Vec::new();
        for name in names {
            if locks.len() == MAX_MULTILOCK_NAMES {
                return Err(Error::InvalidNames {
                    reason: format!("more than {MAX_MULTILOCK_NAMES} names"),
                });
            }
            locks.push(self.keys(name.as_ref())?);
        }
        MultiLock::new(self.clone(), locks, options)
    }
}

impl MultiLock {
    fn new(client: Client, locks: Vec<LockKeys>, options: LockOptions) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(Error::InvalidNames {
                reason: "no names given".to_string(),
            });
        }
        let cluster = client.node().is_cluster();
        // On one server every name is in one group, and they are ordered by name alone.
        let mut ordered: Vec<(u16, LockKeys)> = locks
            .into_iter()
            .map(|keys| (if cluster { slot(&keys) } else { 0 }, keys))
            .collect();
        ordered.sort_by(|(a, x), (b, y)| (a, x.name()).cmp(&(b, y.name())));
        if let Some(pair) = ordered.windows(2).find(|w| w[0].1.name() == w[1].1.name()) {
            return Err(Error::InvalidNames {
                reason: format!("{:?} is given twice", pair[0].1.name()),
            });
        }
        // One group per slot on a cluster; one group for all on one server.
        let mut groups: Vec<(u16, Vec<LockKeys>)> = Vec::new();
        for (slot, keys) in ordered {
            match groups.last_mut() {
                Some((last, group)) if *last == slot || !cluster => group.push(keys),
                _ => groups.push((slot, vec![keys])),
            }
        }
        let node = client.node();
        let groups = groups
            .into_iter()
            .map(|(_, locks)| {
                Arc::new(GroupHold {
                    node: node.clone(),
                    group: Group::new(locks),
                })
            })
            .collect();
        Ok(MultiLock {
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
            client,
            groups,
            options,
        })
    }

    /// The names, in the order they are taken: by cluster slot, then by name (on one server,
    /// by name).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.groups
            .iter()
            .flat_map(|hold| hold.group.locks.iter().map(LockKeys::name))
    }

    /// How many script calls (one per cluster slot) take the locks: 1 on one server.
    pub fn slots(&self) -> usize {
        self.groups.len()
    }

    /// Takes every lock, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a lock key holds something else; [`Error::Connection`]
    /// when Redis is unreachable. Whatever was taken is released.
    ///
    /// # Cancel safety
    /// Dropping the future at any point releases whatever was taken, in the background.
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire_until(None).await
    }

    /// Takes every lock, waiting at most `wait` in all (one deadline, not one per lock); on
    /// timeout whatever was taken is released.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] naming the lock that refused the last attempt when `wait` ran
    /// out; otherwise as [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<MultiLockGuard> {
        self.acquire_until(Instant::now().checked_add(wait)).await
    }

    /// Takes every lock only if all are free now; never waits (nor joins a line).
    ///
    /// # Errors
    /// [`Error::Held`] naming a lock held by another owner (with its remaining lease), or a
    /// slot's single lock that is free but has a waiter first in its line (`retry_after` is
    /// then `None`); otherwise as [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock(&self) -> Result<MultiLockGuard> {
        let mut parts = Vec::with_capacity(self.groups.len());
        for hold in self.groups.iter() {
            let mut attempt = GroupAttempt::new(self, hold);
            match attempt.ask(Duration::ZERO, Some(Instant::now())).await {
                Ok(Asked::Granted { lease, tokens }) => {
                    parts.push(Part::new(lease, &hold.group.locks, tokens));
                }
                Ok(Asked::Held { index, retry_after }) => {
                    attempt.nothing_owed();
                    release_parts(parts).await;
                    return Err(Error::Held {
                        name: hold.group.locks[index].name().to_string(),
                        retry_after,
                    });
                }
                Err(err) => {
                    release_parts(parts).await;
                    return Err(err);
                }
            }
        }
        Ok(MultiLockGuard::new(parts))
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<MultiLockGuard> {
        let mut parts = Vec::with_capacity(self.groups.len());
        for hold in self.groups.iter() {
            // Boxed: the acquire loop's future is deep, and a caller may spawn this one.
            let part: HoldFuture<'_, Part> = Box::pin(self.acquire_group(hold, deadline));
            match part.await {
                Ok(part) => parts.push(part),
                Err(err) => {
                    release_parts(parts).await;
                    return Err(err);
                }
            }
        }
        Ok(MultiLockGuard::new(parts))
    }

    /// One group, through the acquire loop, within `deadline`.
    async fn acquire_group(
        &self,
        hold: &Arc<GroupHold>,
        deadline: Option<Instant>,
    ) -> Result<Part> {
        let mut attempt = GroupAttempt::new(self, hold);
        let on = self.client.wait_on(self.options.get_wait_options());
        let lease = match acquire(on, &mut attempt, deadline).await {
            Ok(lease) => lease,
            // The wait ran out: name the lock that refused the last attempt, not the group.
            Err(Error::WaitTimeout {
                waited,
                retry_after,
                ..
            }) => {
                return Err(Error::WaitTimeout {
                    name: hold.group.locks[attempt.blocked].name().to_string(),
                    waited,
                    retry_after,
                });
            }
            Err(err) => return Err(err),
        };
        let tokens = std::mem::take(&mut attempt.tokens);
        Ok(Part::new(lease, &hold.group.locks, tokens))
    }
}

/// The cluster slot of a lock (CRC16 of its hash tag, or of its whole key, mod 16384).
fn slot(keys: &LockKeys) -> u16 {
    crate::key::slot(keys.lock())
}

/// Releases every part at once (a failed or cancelled acquisition's); each failure is only
/// logged, its lease ends it.
async fn release_parts(parts: Vec<Part>) {
    for outcome in join_all(parts.into_iter().map(Part::release)).await {
        if let Err(err) = outcome {
            tracing::debug!(%err, "releasing a MultiLock's part after a failed acquisition");
        }
    }
}

/// What one attempt on a group found: granted (the lease, and each lock's token in the
/// group's order), or refused by its `index`-th lock (0-based), for `retry_after` when known.
enum Asked {
    Granted {
        lease: Lease,
        tokens: Vec<FencingToken>,
    },
    Held {
        index: usize,
        retry_after: Option<Duration>,
    },
}

/// One group's acquisition: the acquire loop's [`Contender`]. A waiting attempt stands in the
/// line of the lock that refused it (first come, first served there), under its owner token,
/// which is addressed to this client so that a release wakes it alone.
struct GroupAttempt<'a> {
    lock: &'a MultiLock,
    hold: &'a Arc<GroupHold>,
    /// The release this acquisition owes (its grant, and its place in a line) from its first
    /// request on; `None` once granted.
    owed: Option<OwedRelease>,
    /// `owed`'s owner token: the payload of a wake-up for this waiter.
    owner: String,
    /// The lock (index in the group) that refused the latest attempt: its channel is where
    /// the wake-up comes from.
    blocked: usize,
    /// Whether any attempt was granted (a late grant asked again): then a refusal may
    /// still leave some of the group's locks ours until released.
    granted_once: bool,
    /// The granted tokens, each lock's in the group's order (read once the loop is done).
    tokens: Vec<FencingToken>,
}

impl<'a> GroupAttempt<'a> {
    fn new(lock: &'a MultiLock, hold: &'a Arc<GroupHold>) -> GroupAttempt<'a> {
        let dyn_hold: Arc<dyn Hold> = hold.clone();
        let owed = OwedRelease::addressed(dyn_hold, lock.client.node().address());
        GroupAttempt {
            lock,
            hold,
            owner: owed.owner().as_str().to_string(),
            owed: Some(owed),
            blocked: 0,
            granted_once: false,
            tokens: Vec::new(),
        }
    }

    /// A refused attempt that never joined a line and was never granted took nothing:
    /// nothing is owed.
    fn nothing_owed(&mut self) {
        if let Some(owed) = self.owed.take().filter(|_| !self.granted_once) {
            owed.disarm();
        }
    }

    /// One attempt, keeping a place in the refusing lock's line for `place_lease` (zero: try
    /// once, never join a line); a grant that comes back after its lease is asked again
    /// within `deadline` ([`in_time`]).
    async fn ask(&mut self, place_lease: Duration, deadline: Option<Instant>) -> Result<Asked> {
        let lock = self.lock;
        let options = lock.options.get_lease_options();
        let group = &self.hold.group;
        let keys = group.keys();
        let place = place_lease.as_millis().to_string();
        let mut args = vec![self.owner.as_str(), &lock.lease_ms, &place];
        args.extend(group.locks.iter().map(LockKeys::wake_channel));
        let granted_once = &mut self.granted_once;
        let outcome = in_time(
            options,
            deadline,
            0,
            |_| {
                let (keys, args) = (&keys, &args);
                async move {
                    let reply: Vec<i64> = lock
                        .client
                        .node()
                        .run_script(Phase::Acquire, &ACQUIRE, keys, args)
                        .await?;
                    group.acquired(&reply)
                }
            },
            // A late grant is asked again by the same owner token (a re-grant), or given
            // back by the owed release.
            |tokens, _| {
                *granted_once = true;
                nothing_owed(tokens, false)
            },
        )
        .await?;
        match outcome {
            Try::Won((tokens, sent_at)) => {
                let owed = self
                    .owed
                    .take()
                    .expect("an attempt owes its release until granted");
                let highest = tokens.iter().copied().max().unwrap_or(FencingToken::new(0));
                let lease = Lease::new(owed, highest, sent_at, options, lock.client.renewals());
                Ok(Asked::Granted { lease, tokens })
            }
            Try::Held((index, retry_after)) => Ok(Asked::Held { index, retry_after }),
        }
    }
}

/// Which lock of a group refused an attempt (its index, 0-based) and for how long its
/// holder's lease still runs, when known.
type Refusal = (usize, Option<Duration>);

impl Group {
    /// The acquire script's reply: `{1, tokens...}` granted, `{0, i, pttl}` refused by lock
    /// `i` (1-based).
    fn acquired(&self, reply: &[i64]) -> Result<Try<Vec<FencingToken>, Refusal>> {
        let unexpected = || Error::UnexpectedReply {
            phase: Phase::Acquire,
            detail: format!("{reply:?}"),
        };
        match reply {
            [1, tokens @ ..] if tokens.len() == self.locks.len() => tokens
                .iter()
                .map(|token| {
                    u64::try_from(*token)
                        .ok()
                        .filter(|token| *token > 0)
                        .map(FencingToken::new)
                        .ok_or_else(unexpected)
                })
                .collect::<Result<_>>()
                .map(Try::Won),
            [0, index, pttl] => {
                let index = usize::try_from(*index)
                    .ok()
                    .and_then(|index| index.checked_sub(1))
                    .filter(|index| *index < self.locks.len())
                    .ok_or_else(unexpected)?;
                let retry_after = u64::try_from(*pttl).ok().map(Duration::from_millis);
                Ok(Try::Held((index, retry_after)))
            }
            _ => Err(unexpected()),
        }
    }
}

impl Contender for &mut GroupAttempt<'_> {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::MultiLock
    }

    fn name(&self) -> &str {
        &self.hold.group.label
    }

    fn channel(&self) -> &str {
        self.hold.group.locks[self.blocked].wake_channel()
    }

    async fn attempt(&mut self, _line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        let place_lease = self.lock.options.get_place_lease();
        match self.ask(place_lease, deadline).await? {
            Asked::Granted { lease, tokens } => {
                self.tokens = tokens;
                Ok(Try::Won(lease))
            }
            Asked::Held { index, .. } if index != self.blocked => {
                // Another lock refused this time: listen on its channel before asking again
                // (at once).
                self.blocked = index;
                Ok(Try::Held(Some(Duration::ZERO)))
            }
            Asked::Held { retry_after, .. } => Ok(Try::Held(retry_after)),
        }
    }

    fn address(&self) -> Option<&str> {
        self.owed.as_ref().map(|_| self.owner.as_str())
    }

    fn refresh(&self) -> Option<Duration> {
        Some(self.lock.options.get_place_lease() / 3)
    }

    async fn give_up(self) {
        // Leave the line (and give back what a late grant left ours): a release by owner
        // token, whose reply says "not held".
        if let Some(owed) = self.owed.take() {
            match owed.pay().await {
                Ok(_) | Err(Error::NotHeld { .. }) => {}
                Err(err) => tracing::debug!(%err, "giving up a MultiLock's place in line"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::node::assert_carries_preludes;
    use crate::wait::PRELUDES;

    #[test]
    fn every_script_carries_the_preludes_it_calls() {
        let preludes = [PRELUDES.as_slice(), &[super::LINES_LUA]].concat();
        let scripts = [
            ("acquire", &*super::ACQUIRE),
            ("release", &*super::RELEASE),
            ("extend", &*super::EXTEND),
        ];
        assert_carries_preludes(&scripts, &preludes);
    }
}
