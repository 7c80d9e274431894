//! `Semaphore`: at most N holders at once, each permit leased and fenced by the server.
//!
//! Its keys (`permits.lua` says what each holds): the semaphore's name is a hash of N, the
//! permits in use and every holder with the server time its lease ends and the permits it
//! has, the fencing counter gives every grant a token of its own, and the line of waiters is
//! the one every queued primitive uses. Expired permits are reclaimed
//! inside the scripts, by the server's clock only: a crashed holder's permits come back when
//! its lease ends — never before, never for ever — and no client clock takes part.
//!
//! While nobody holds the semaphore or waits for it, a single permit may be kept as a plain
//! key, `'<owner> <N>'`, instead of the hash, taken by a first attempt that costs the server
//! no script ([`first`](crate::engine::first)); every script reads that form and turns it
//! into the hash before it writes.
//!
//! The primitive is its scripts, a [`Hold`] (release, extend), an [`Asker`] per acquisition
//! (how many permits, with the acquire loop's [`Placed`] contender: first come, first served,
//! woken by a release) and its guard.

mod guard;
mod state;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::first::{self, First, Numbering, Plain};
use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Hold, HoldFuture, Lease, OwedRelease, Released, lease_millis, owner_reply};
use crate::node::{LockScript, Node, Registered, Replication, ScriptCall};
use crate::options::LockOptions;
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{
    Answer, Asker, LOCK_LUA, Placed, QUEUE_LUA, acquire, answer_in_time, tombstone, try_once,
};

pub use guard::SemaphoreGuard;
pub use state::{PermitHolder, SemaphoreState};

/// The semaphore's own prelude: reclaiming expired permits, counting, TTLs.
const PERMITS_LUA: &str = include_str!("permits.lua");

/// Take permits, first come, first served: `{1, token}`, `{0, ms}` or `{0, -2}`; the common
/// case (nobody in line, room counted) by the fast path before the preludes.
pub(crate) static ACQUIRE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("acquire_first.lua"),
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        PERMITS_LUA,
        include_str!("acquire.lua"),
    ])
});
inventory::submit!(Registered(|| &ACQUIRE));

/// Give permits back (or a place up), waking the first waiter: `1` or `0`; the common case
/// (a live holder, nobody in line) by the fast path before the preludes.
pub(crate) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("release_first.lua"),
        LOCK_LUA,
        QUEUE_LUA,
        PERMITS_LUA,
        include_str!("release.lua"),
    ])
});
inventory::submit!(Registered(|| &RELEASE));

/// Renew a holder's lease: `1` or `0`.
pub(crate) static EXTEND: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, include_str!("extend.lua")]));
inventory::submit!(Registered(|| &EXTEND));

/// Read N, the counter, the line and the holders.
pub(crate) static INSPECT: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        FENCE_LUA,
        LOCK_LUA,
        PERMITS_LUA,
        include_str!("inspect.lua"),
    ])
});
inventory::submit!(Registered(|| &INSPECT));

/// Change N: the N it replaced, or `0`.
pub(crate) static RESIZE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[LOCK_LUA, QUEUE_LUA, PERMITS_LUA, include_str!("resize.lua")])
});
inventory::submit!(Registered(|| &RESIZE));

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000_000;
/// How a semaphore's permits are released and extended, by owner token.
struct SemaphoreHold {
    node: Node,
    keys: Arc<LockKeys>,
    /// Until when the handle's first attempts go straight to the script.
    busy: first::Busy,
}

impl SemaphoreHold {
    /// The keys and args of an extension by `owner` to `lease`.
    fn extend_request(&self, lease: Duration) -> Result<([&str; 1], String)> {
        let keys = [self.keys.lock()];
        Ok((keys, lease_millis(lease)?.to_string()))
    }
}

impl Hold for SemaphoreHold {
    fn keys_on(&self) -> Option<(&crate::node::Node, &crate::key::LockKeys)> {
        Some((&self.node, &self.keys))
    }

    fn held_once(&self) -> bool {
        true
    }

    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Semaphore
    }

    fn name(&self) -> &str {
        self.keys.name()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let id = owner.as_str();
            let tombstone = tombstone(&self.node, &self.keys, id);
            let line = self.keys.line();
            let all = [
                self.keys.lock(),
                line.queue(),
                line.places(),
                line.tickets(),
                tombstone.as_deref().unwrap_or_default(),
            ];
            let keys = &all[..if tombstone.is_some() { 5 } else { 4 }];
            let args = [id, self.keys.wake_channel()];
            let reply = self
                .node
                .run_script(Phase::Release, &RELEASE, keys, &args)
                .await?;
            owner_reply(self.name(), Phase::Release, reply).map(|()| Released::Freed)
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let (keys, lease) = self.extend_request(lease)?;
            let args = [owner.as_str(), &lease];
            let reply = self
                .node
                .run_script(Phase::Extend, &EXTEND, &keys, &args)
                .await?;
            owner_reply(self.name(), Phase::Extend, reply)
        })
    }

    fn extend_on(&self) -> Option<(&Node, &str)> {
        Some((&self.node, self.keys.lock()))
    }

    fn extend_call(&self, owner: &OwnerToken, lease: Duration) -> Result<ScriptCall<'_>> {
        let (keys, lease) = self.extend_request(lease)?;
        Ok(ScriptCall {
            script: &EXTEND,
            keys: keys.into(),
            args: vec![owner.as_str().to_string(), lease],
        })
    }

    fn extend_replicated<'a>(
        &'a self,
        owner: &'a OwnerToken,
        lease: Duration,
        replication: &'a Replication,
    ) -> HoldFuture<'a, u32> {
        Box::pin(async move {
            let (keys, lease) = self.extend_request(lease)?;
            let args = [owner.as_str(), &lease];
            let (reply, acked) = self
                .node
                .run_script_replicated(Phase::Extend, &EXTEND, &keys, &args, replication)
                .await?;
            owner_reply(self.name(), Phase::Extend, reply)?;
            replication.enough(self.name(), acked)
        })
    }
}

/// At most N holders at once, across every process: a distributed counting semaphore whose
/// permits are leased and fenced.
///
/// Every acquisition takes one permit ([`acquire`](Semaphore::acquire)) or several
/// ([`acquire_many`](Semaphore::acquire_many)) and gets a [`SemaphoreGuard`] with a fencing
/// token of its own (every grant's token is greater than every earlier grant's) and a lease
/// kept by the server's clock: the watchdog renews it while the guard lives,
/// [`lost`](SemaphoreGuard::lost) fires the moment it is lost, and dropping the guard gives
/// the permits back. A holder that crashed frees its permits when its lease ends, never
/// before; a client clock that jumps changes nothing, as only the server's clock times
/// leases.
///
/// Waiters are served first come, first served in one line across processes (the line a
/// [`FairMutex`](crate::FairMutex) uses): the first waiter takes its permits as soon as
/// enough are free, and nobody behind it goes first, so `acquire_many(5)` is not starved by
/// a stream of single permits. A release wakes the first waiter (no polling); a grant that
/// leaves permits free wakes the next.
///
/// N is part of the semaphore: every process must open it with the same N while anybody
/// holds or waits ([`Error::PermitsMismatch`] otherwise); change it on purpose with
/// [`set_permits`](Semaphore::set_permits). A semaphore nobody holds or waits for keeps
/// nothing on the server but its fencing counter (and, for an hour after a script numbered a
/// first attempt's grant, the counter's epochs), so the next acquirer's N counts.
///
/// A single permit asked while nobody holds the semaphore or waits costs what a
/// [`Mutex`](crate::Mutex)'s acquisition costs: one pipeline, no script (the permit is then a
/// plain key with its lease as TTL, until a second holder or a waiter comes).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let api = client.semaphore("partner-api", 3)?; // at most 3 calls at once
/// let a = api.acquire().await?;
/// let b = api.acquire_many(2).await?;
/// assert_eq!(api.available().await?, 0);
/// assert!(api.try_acquire().await.unwrap_err().is_held());
/// assert!(b.fencing_token() > a.fencing_token());
/// a.release().await?;
/// assert_eq!(api.available().await?, 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    keys: Arc<LockKeys>,
    hold: Arc<SemaphoreHold>,
    options: LockOptions,
    permits: u32,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .field("permits", &self.permits)
            .field("options", &self.options)
            .finish()
    }
}

impl Client {
    /// A [`Semaphore`] handle for the name `name` with `permits` permits, with default
    /// options (a 30 s lease renewed by the watchdog, 2 s place leases).
    ///
    /// # Errors
    /// [`Error::InvalidPermits`] for 0 permits or more than [`MAX_PERMITS`]; as
    /// [`Client::mutex`] for the name.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        self.semaphore_with(name, permits, LockOptions::default())
    }

    /// A [`Semaphore`] handle with the given options.
    ///
    /// # Errors
    /// As [`Client::semaphore`]; as [`Client::mutex_with`] for the options.
    pub fn semaphore_with(
        &self,
        name: &str,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        Semaphore::new(self.clone(), self.keys(name)?, permits, options)
    }
}

impl Semaphore {
    fn new(
        client: Client,
        keys: LockKeys,
        permits: u32,
        options: LockOptions,
    ) -> Result<Semaphore> {
        options.check_on(client.options())?;
        check_permits(keys.name(), permits, "permits")?;
        let keys = Arc::new(keys);
        Ok(Semaphore {
            hold: Arc::new(SemaphoreHold {
                node: client.node().clone(),
                keys: keys.clone(),
                busy: first::Busy::default(),
            }),
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
            client,
            keys,
            options,
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// N, the number of permits this handle opened the semaphore with.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes one permit, waiting in line as long as it takes.
    ///
    /// # Errors
    /// [`Error::PermitsMismatch`] when the semaphore is in use with another N;
    /// [`Error::WrongType`] when its keys hold something else (a `Mutex` of the same name);
    /// [`Error::Connection`] when Redis is unreachable.
    ///
    /// # Cancel safety
    /// Dropping the future at any point gives up the place in line and gives back permits
    /// the caller never saw, in the background.
    pub async fn acquire(&self) -> Result<SemaphoreGuard> {
        self.acquire_many_until(1, None).await
    }

    /// Takes one permit only if one is free and nobody waits; never joins the line.
    ///
    /// # Errors
    /// [`Error::Held`] when no permit is free (`retry_after`: when the earliest holder's
    /// lease ends) or others wait first (`retry_after` is `None`); otherwise as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self) -> Result<SemaphoreGuard> {
        self.try_acquire_many(1).await
    }

    /// Takes one permit, waiting at most `wait`; on timeout the place in line is given up.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when no permit came within `wait`; otherwise as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_timeout(&self, wait: Duration) -> Result<SemaphoreGuard> {
        self.acquire_many_until(1, Instant::now().checked_add(wait))
            .await
    }

    /// Takes `permits` permits at once (all or none), waiting in line as long as it takes.
    /// Nobody behind this caller in line is served first, so it is not starved by callers
    /// of fewer permits.
    ///
    /// # Errors
    /// [`Error::InvalidPermits`] for 0 or more than N permits; otherwise as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_many(&self, permits: u32) -> Result<SemaphoreGuard> {
        self.acquire_many_until(permits, None).await
    }

    /// Takes `permits` permits at once only if enough are free and nobody waits.
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire`] and [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire_many(&self, permits: u32) -> Result<SemaphoreGuard> {
        let asking = self.asking(permits)?;
        let owed = OwedRelease::addressed(self.hold.clone(), self.client.node().address());
        let lease = try_once(&asking, owed).await?;
        Ok(SemaphoreGuard::new(lease, permits))
    }

    /// Takes `permits` permits at once, waiting at most `wait`.
    ///
    /// # Errors
    /// As [`Semaphore::acquire_timeout`] and [`Semaphore::acquire_many`].
    ///
    /// # Cancel safety
    /// As [`Semaphore::acquire`].
    pub async fn acquire_many_timeout(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<SemaphoreGuard> {
        self.acquire_many_until(permits, Instant::now().checked_add(wait))
            .await
    }

    /// How many permits are free right now (N less those held by holders whose lease has not
    /// ended). Waiters in line may take them before this caller could.
    ///
    /// # Errors
    /// As [`Semaphore::state`].
    pub async fn available(&self) -> Result<u32> {
        Ok(self.state().await?.available(self.permits))
    }

    /// N as the server keeps it, the holders with their remaining leases, the waiters and
    /// the fencing counter, read in one step.
    ///
    /// # Errors
    /// [`Error::WrongType`] when a key holds something else; [`Error::Connection`].
    pub async fn state(&self) -> Result<SemaphoreState> {
        let line = self.keys.line();
        let keys = [self.keys.lock(), self.keys.fence(), line.places()];
        let reply: Vec<redis::Value> = self
            .client
            .node()
            .run_script(Phase::Inspect, &INSPECT, &keys, &[])
            .await?;
        SemaphoreState::from_reply(reply)
    }

    /// Changes N to `permits` for everyone, on purpose, and makes this handle use it; says
    /// which N it replaced (`None` when nobody held or waited: nothing is kept then, and the
    /// next acquirer's N counts). Holders keep their permits when N shrinks below what they
    /// hold; nobody is granted more until enough are released. When N grows, the first
    /// waiter is woken. Other handles opened with the old N get
    /// [`Error::PermitsMismatch`] from then on.
    ///
    /// # Errors
    /// [`Error::InvalidPermits`] as [`Client::semaphore`]; as [`Semaphore::state`].
    pub async fn set_permits(&mut self, permits: u32) -> Result<Option<u32>> {
        check_permits(self.name(), permits, "permits")?;
        let line = self.keys.line();
        let keys = [
            self.keys.lock(),
            line.queue(),
            line.places(),
            line.tickets(),
        ];
        let limit = permits.to_string();
        let before: u32 = self
            .client
            .node()
            .run_script(
                Phase::Acquire,
                &RESIZE,
                &keys,
                &[&limit, self.keys.wake_channel()],
            )
            .await?;
        self.permits = permits;
        Ok((before > 0).then_some(before))
    }

    /// What a first attempt at a single permit needs ([`first`](crate::engine::first)).
    fn plain(&self) -> Plain<'_> {
        Plain {
            node: self.client.node(),
            keys: &self.keys,
            hold: &*self.hold,
            lease_ms: &self.lease_ms,
            lease: self.options.get_lease_options(),
            busy: &self.hold.busy,
        }
    }

    /// An acquisition of `permits` permits, checked against N.
    fn asking(&self, permits: u32) -> Result<Asking<'_>> {
        check_permits(self.name(), permits, "permits asked for")?;
        if permits > self.permits {
            return Err(Error::InvalidPermits {
                name: self.name().to_string(),
                value: permits,
                reason: format!("more than the semaphore's {} permits", self.permits),
            });
        }
        Ok(Asking {
            semaphore: self,
            count: permits.to_string(),
            limit: self.permits.to_string(),
            // One permit, where a first attempt may be made ([`Plain::may_try`]).
            first: AtomicBool::new(permits == 1 && self.plain().may_try()),
        })
    }

    async fn acquire_many_until(
        &self,
        permits: u32,
        deadline: Option<Instant>,
    ) -> Result<SemaphoreGuard> {
        let asking = self.asking(permits)?;
        // One owner token for the whole wait: this caller's place in line, then the name of
        // its permits.
        let owed = OwedRelease::addressed(self.hold.clone(), self.client.node().address());
        let address = owed.owner().as_str().to_string();
        let on = self.client.wait_on(self.options.get_wait_options());
        let lease = acquire(on, Placed::new(&asking, owed, address), deadline).await?;
        Ok(SemaphoreGuard::new(lease, permits))
    }
}

/// N, or a number of permits asked for, checked.
fn check_permits(name: &str, permits: u32, what: &'static str) -> Result<()> {
    let reason = match permits {
        0 => format!("{what} must be at least 1"),
        permits if permits > MAX_PERMITS => format!("{what} must be at most {MAX_PERMITS}"),
        _ => return Ok(()),
    };
    Err(Error::InvalidPermits {
        name: name.to_string(),
        value: permits,
        reason,
    })
}

/// One acquisition of a number of permits: the acquire loop's [`Asker`].
struct Asking<'a> {
    semaphore: &'a Semaphore,
    /// `permits`, as the script takes it.
    count: String,
    /// N, as the script takes it.
    limit: String,
    /// The first attempt is still to be made outside the script ([`first`]).
    first: AtomicBool,
}

impl Asking<'_> {
    /// The acquire script's `PERMITS <n>` refusal as [`Error::PermitsMismatch`].
    fn mismatch(&self, err: Error) -> Error {
        let stored = match &err {
            Error::Redis { source, .. } if source.code() == Some("PERMITS") => source
                .detail()
                .and_then(|detail| detail.trim().parse::<u32>().ok()),
            _ => None,
        };
        match stored {
            Some(permits) => Error::PermitsMismatch {
                name: self.semaphore.name().to_string(),
                permits,
                asked: self.semaphore.permits,
            },
            None => err,
        }
    }
}

impl Asker for Asking<'_> {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Semaphore
    }

    fn name(&self) -> &str {
        self.semaphore.name()
    }

    fn channel(&self) -> &str {
        self.semaphore.keys.wake_channel()
    }

    fn place_lease(&self) -> Duration {
        self.semaphore.options.get_place_lease()
    }

    fn lease(&self, owed: OwedRelease, token: FencingToken, sent_at: Instant) -> Lease {
        let semaphore = self.semaphore;
        let options = semaphore.options.get_lease_options();
        Lease::new(owed, token, sent_at, options, semaphore.client.renewals())
    }

    /// One attempt: the first one of a single permit outside the script where it may be
    /// ([`first`]), else the script (see [`answer_in_time`] for late grants).
    async fn ask(
        &self,
        owed: &OwedRelease,
        place_lease: Duration,
        deadline: Option<Instant>,
        _nonce: u64,
    ) -> Result<Answer> {
        let semaphore = self.semaphore;
        // With a permit the first attempt took and left the script to number.
        let value = || format!("{} {}", owed.owner().as_str(), self.limit);
        let taken = match first::once(&self.first, &semaphore.plain(), owed, value).await? {
            First::Won(answer) => return Ok(answer),
            First::Number(epoch) => Some(epoch),
            First::Script => None,
        };
        let keys = &semaphore.keys;
        let line = keys.line();
        let key_list = [
            keys.lock(),
            keys.fence(),
            line.queue(),
            line.places(),
            line.tickets(),
            keys.epoch(),
        ];
        let place = place_lease.as_millis().to_string();
        let numbering = Numbering::new(taken);
        let args = [
            owed.owner().as_str(),
            &self.count,
            &self.limit,
            &semaphore.lease_ms,
            &place,
            keys.wake_channel(),
            numbering.name(),
        ];
        let mut calls = 0;
        let answer = answer_in_time(semaphore.options.get_lease_options(), deadline, || {
            calls += 1;
            let (naming, sent_keys, sent_args) = numbering.call(calls, key_list.len(), args.len());
            let (keys, args) = (&key_list[..sent_keys], &args[..sent_args]);
            async move {
                semaphore
                    .client
                    .node()
                    .run_script_naming(Phase::Acquire, naming, &ACQUIRE, keys, args)
                    .await
                    .map_err(|err| self.mismatch(err))
            }
        })
        .await;
        numbering.settled(&semaphore.plain(), owed, answer).await
    }
}

#[cfg(test)]
mod tests {
    use crate::node::assert_carries_preludes;
    use crate::wait::PRELUDES;

    #[test]
    fn every_script_carries_the_preludes_it_calls() {
        let preludes = [PRELUDES.as_slice(), &[super::PERMITS_LUA]].concat();
        let scripts = [
            ("acquire", &*super::ACQUIRE),
            ("release", &*super::RELEASE),
            ("extend", &*super::EXTEND),
            ("inspect", &*super::INSPECT),
            ("resize", &*super::RESIZE),
        ];
        assert_carries_preludes(&scripts, &preludes);
    }
}
