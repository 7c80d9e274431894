//! `FairMutex`: one holder at a time, granted first come, first served across processes.
//!
//! This module is the worked example of "how to add a primitive" (see the lease core's module
//! docs): its scripts (`acquire.lua`, `release.lua`, after the shared preludes), a [`Hold`]
//! (release by owner; extend as a `Mutex` does), an [`Asker`] (one attempt that joins or
//! renews a place in the server's queue, which [`Placed`] turns into the acquire loop's
//! contender: a wake-up addressed to this waiter, a place lease to renew, the place given up
//! on timeout), the common [`LockOptions`] under its own name, and [`MutexGuard`]s around the
//! core's leases.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::string_lock::{MutexGuard, StringHold, inspect};
use crate::error::{Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Hold, HoldFuture, Lease, OwedRelease, Released, lease_millis, owner_reply};
use crate::node::{LockScript, Node, Registered, ScriptCall};
use crate::options::LockOptions;
use crate::state::LockState;
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{
    Answer, Asker, LOCK_LUA, Placed, QUEUE_LUA, acquire, answer_in_time, run_handing_over, try_once,
};

/// FIFO acquire with a server-side ticket queue: `{1, token}` or `{0, pttl | -2}`.
pub(crate) static ACQUIRE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, include_str!("acquire.lua")])
});
inventory::submit!(Registered(|| &ACQUIRE));

/// Leave a FairMutex (release and/or give up a place), waking only the next waiter.
pub(crate) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, include_str!("release.lua")])
});
inventory::submit!(Registered(|| &RELEASE));
/// How a `FairMutex` is released (leaving the queue, waking only the next waiter) and
/// extended (as a `Mutex` is: the lock key is the same kind of string key, so the `Mutex`'s
/// owner-checked extend serves both).
struct FairHold {
    keys: Arc<LockKeys>,
    /// The lock key on its node, as a `Mutex` holds it.
    lock: StringHold,
}

impl Hold for FairHold {
    fn keys_on(&self) -> Option<(&crate::node::Node, &crate::key::LockKeys)> {
        Some((&self.lock.node, &self.keys))
    }

    fn held_once(&self) -> bool {
        true
    }

    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::FairMutex
    }

    fn name(&self) -> &str {
        self.keys.name()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let (node, owner) = (&self.lock.node, owner.as_str());
            let reply =
                run_handing_over(node, Phase::Release, &RELEASE, &self.keys, owner, None).await?;
            owner_reply(self.name(), Phase::Release, reply).map(|()| Released::Freed)
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        self.lock.extend(owner, lease)
    }

    fn extend_on(&self) -> Option<(&Node, &str)> {
        self.lock.extend_on()
    }

    fn extend_call(&self, owner: &OwnerToken, lease: Duration) -> Result<ScriptCall<'_>> {
        self.lock.extend_call(owner, lease)
    }

    fn extend_many(&self) -> Option<&'static LockScript> {
        self.lock.extend_many()
    }

    fn extend_reply(&self, reply: i64) -> Result<()> {
        self.lock.extend_reply(reply)
    }

    fn extend_replicated<'a>(
        &'a self,
        owner: &'a OwnerToken,
        lease: Duration,
        replication: &'a crate::node::Replication,
    ) -> HoldFuture<'a, u32> {
        self.lock.extend_replicated(owner, lease, replication)
    }
}

/// A distributed lock granted in first-come, first-served order, across every process.
///
/// Waiters queue on the server, ordered by a ticket the server hands out (not by client
/// clocks). Only the head of the queue may take the lock; a release hands it straight to the
/// next waiter (writing the lock key with that waiter's owner token and publishing the grant,
/// so the waiter holds it without asking again; see the crate README, "Waiting"), so there is
/// no thundering herd and no barging: a holder that releases and asks again goes to the back
/// of the queue. Each waiter renews a short place lease
/// ([`LockOptions::place_lease`]), so a waiter that crashed is skipped once its place
/// lease runs out. Guards are [`MutexGuard`]s: fencing token, lease, `extend`, `release`.
///
/// A `Mutex` and a `FairMutex` of one name share the lock key and the queue of waiters (a
/// `Mutex`'s waiting process takes one place in it, shared by its waiters), so they exclude
/// each other; a `FairMutex` then also waits behind `Mutex` waiters in line.
///
/// # When not to use it
/// Fairness costs a little: each attempt also maintains the queue, and a handoff always
/// goes to the head waiter even if another is quicker. When throughput matters more than
/// order, use [`Mutex`](crate::Mutex).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let lock = client.fair_mutex("printer")?;
/// let guard = lock.lock().await?;
/// assert_eq!(lock.waiting().await?, 0);
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairMutex {
    client: Client,
    keys: Arc<LockKeys>,
    hold: Arc<FairHold>,
    options: LockOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
}

impl std::fmt::Debug for FairMutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairMutex")
            .field("name", &self.name())
            .field("options", &self.options)
            .finish()
    }
}

impl Client {
    /// A [`FairMutex`] handle for the lock `name`, with default options (a 30 s lease, 2 s
    /// place leases).
    ///
    /// # Errors
    /// As [`Client::mutex`].
    pub fn fair_mutex(&self, name: &str) -> Result<FairMutex> {
        self.fair_mutex_with(name, LockOptions::default())
    }

    /// A [`FairMutex`] handle for the lock `name` with the given options.
    ///
    /// # Errors
    /// As [`Client::mutex_with`]; also [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a place lease under
    /// 3 ms or over an hour.
    pub fn fair_mutex_with(&self, name: &str, options: LockOptions) -> Result<FairMutex> {
        FairMutex::new(self.clone(), self.keys(name)?, options)
    }
}

impl FairMutex {
    fn new(client: Client, keys: LockKeys, options: LockOptions) -> Result<FairMutex> {
        options.check_on(client.options())?;
        let keys = Arc::new(keys);
        let lock = StringHold {
            node: client.node().clone(),
            keys: keys.clone(),
            // Its own release script passes the lock on in ticket order.
            hands_over: false,
            proposes: false,
        };
        Ok(FairMutex {
            hold: Arc::new(FairHold {
                keys: keys.clone(),
                lock,
            }),
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
            client,
            keys,
            options,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Takes the lock only if it is free and nobody waits for it; never joins the queue.
    ///
    /// # Errors
    /// [`Error::Held`](crate::Error::Held) when it is held (with the holder's remaining lease) or others wait
    /// (`retry_after` is then `None`); [`Error::WrongType`](crate::Error::WrongType), [`Error::Connection`](crate::Error::Connection) as for
    /// [`Mutex::try_lock`](crate::Mutex::try_lock).
    ///
    /// # Cancel safety
    /// If the future is dropped after the request went out, a grant is released by owner
    /// token in the background.
    pub async fn try_lock(&self) -> Result<MutexGuard> {
        let owed = OwedRelease::addressed(self.hold.clone(), self.client.node().address());
        try_once(self, owed).await.map(MutexGuard::new)
    }

    /// Joins the queue and waits as long as it takes for this caller's turn.
    ///
    /// # Errors
    /// As [`FairMutex::try_lock`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// Dropping the future at any point gives up the place in the queue and releases a grant
    /// the caller never saw, in the background.
    pub async fn lock(&self) -> Result<MutexGuard> {
        self.acquire_until(None).await
    }

    /// Joins the queue and waits at most `wait` for this caller's turn; on timeout the place
    /// is given up (the next waiter is woken if it is now first).
    ///
    /// # Errors
    /// [`Error::WaitTimeout`](crate::Error::WaitTimeout) when the turn did not come within `wait`; otherwise as
    /// [`FairMutex::lock`].
    ///
    /// # Cancel safety
    /// As [`FairMutex::lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<MutexGuard> {
        // A wait too long for the clock to represent is a wait as long as it takes.
        self.acquire_until(Instant::now().checked_add(wait)).await
    }

    /// Who holds the lock, for how long, and the fencing counter, read in one step.
    ///
    /// # Errors
    /// As [`Mutex::state`](crate::Mutex::state).
    pub async fn state(&self) -> Result<LockState> {
        inspect(self.client.node(), &self.keys).await
    }

    /// How many waiters are queued (including any whose place lease ran out but who were
    /// not yet removed).
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType) when the queue key holds another type; [`Error::Connection`](crate::Error::Connection).
    pub async fn waiting(&self) -> Result<u64> {
        let line = self.keys.line();
        let queue = line.queue();
        let command = redis::cmd("ZCARD").arg(queue).to_owned();
        self.client
            .node()
            .query(Phase::Waiting, &command, &[queue])
            .await
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<MutexGuard> {
        // One owner token for the whole wait: it is this caller's place in the queue, and it
        // becomes the lock's owner token when the turn comes. Until then, dropping it gives
        // the place up in the background.
        let owed = OwedRelease::addressed(self.hold.clone(), self.client.node().address());
        let address = owed.owner().as_str().to_string();
        let on = self.client.wait_on(self.options.get_wait_options());
        let lease = acquire(on, Placed::new(self, owed, address), deadline).await?;
        Ok(MutexGuard::new(lease))
    }
}

impl Asker for FairMutex {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::FairMutex
    }

    fn name(&self) -> &str {
        self.keys.name()
    }

    fn channel(&self) -> &str {
        self.keys.wake_channel()
    }

    fn place_lease(&self) -> Duration {
        self.options.get_place_lease()
    }

    fn lease(&self, owed: OwedRelease, token: FencingToken, sent_at: Instant) -> Lease {
        let options = self.options.get_lease_options();
        Lease::new(owed, token, sent_at, options, self.client.renewals())
    }

    /// A grant handed over by a release: taken, as a `Mutex`'s, only with at least a third of
    /// the place lease left (else asked for again, which renews it in full).
    fn handed(
        &self,
        owed: OwedRelease,
        token: FencingToken,
        (placed_at, place_lease): (Instant, Duration),
    ) -> std::result::Result<Lease, OwedRelease> {
        let options = self.options.get_lease_options();
        if !options.takes_handover(placed_at, place_lease) {
            return Err(owed);
        }
        let renewals = self.client.renewals();
        let placed = (placed_at, place_lease);
        Ok(Lease::handed_over(owed, token, placed, options, renewals))
    }

    /// One attempt (see [`answer_in_time`] for late grants).
    async fn ask(
        &self,
        owed: &OwedRelease,
        place_lease: Duration,
        deadline: Option<Instant>,
        nonce: u64,
    ) -> Result<Answer> {
        let place = place_lease.as_millis().to_string();
        let nonce = nonce.to_string();
        let keys = &self.keys;
        let line = keys.line();
        let key_list = [
            keys.lock(),
            keys.fence(),
            line.queue(),
            line.places(),
            line.tickets(),
            line.handover(),
        ];
        let args = [
            owed.owner().as_str(),
            &self.lease_ms,
            &place,
            keys.wake_channel(),
            &nonce,
        ];
        answer_in_time(self.options.get_lease_options(), deadline, || {
            self.client
                .node()
                .run_script(Phase::Acquire, &ACQUIRE, &key_list, &args)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use crate::node::undefined_calls;
    use crate::wait::PRELUDES;

    #[test]
    fn every_script_carries_the_preludes_it_calls() {
        for (name, script) in [("acquire", &*super::ACQUIRE), ("release", &*super::RELEASE)] {
            assert_eq!(
                undefined_calls(script, &PRELUDES, &[]),
                Vec::<String>::new(),
                "{name}"
            );
        }
    }
}
