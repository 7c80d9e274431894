//! The guard an acquisition returns, and the release a dropped guard still owes.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, LostReason, Result};
use crate::key::LockKeys;
use crate::lease::{lease_deadline, lease_millis};
use crate::lease_state::LeaseState;
use crate::mutex::MutexOptions;
use crate::scripts::{FAIR_RELEASE, MUTEX_EXTEND, MUTEX_RELEASE};
use crate::token::{FencingToken, OwnerToken};
use crate::wait::{LocalHolder, LocalQueue};
use crate::watchdog::{Watchdog, Watched};

/// A release this process owes the server: made before an acquire request goes out, and paid
/// either by an explicit release or, when dropped while still armed, by a background task.
/// This is what makes a cancelled `lock()` and a dropped guard leave nothing behind beyond the
/// time the release takes.
pub(crate) struct OwedRelease {
    client: Client,
    keys: Arc<LockKeys>,
    owner: OwnerToken,
    kind: LockKind,
    armed: bool,
}

/// Which primitive a guard belongs to: it decides how a release is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockKind {
    /// Delete the key and, if a waiter marked it, wake every waiter.
    Mutex,
    /// Delete the key (or give up the queue place) and wake only the next waiter.
    Fair,
}

impl OwedRelease {
    pub(crate) fn new(
        client: Client,
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        kind: LockKind,
    ) -> OwedRelease {
        OwedRelease {
            client,
            keys,
            owner,
            kind,
            armed: true,
        }
    }

    pub(crate) fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Nothing is owed any more (the server said the lock was not granted).
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases now and says whether the lock was still ours. If this future is dropped before
    /// the reply, the release is still paid in the background.
    pub(crate) async fn pay(mut self) -> Result<()> {
        let outcome = release(&self.client, &self.keys, &self.owner, self.kind).await;
        // A connection error leaves the outcome unknown; the background release would meet
        // the same broken connection, and the lease bounds the lock anyway.
        self.armed = false;
        outcome
    }
}

impl Drop for OwedRelease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (client, keys, owner, kind) = (
            self.client.clone(),
            self.keys.clone(),
            self.owner.clone(),
            self.kind,
        );
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    match release(&client, &keys, &owner, kind).await {
                        Ok(()) => tracing::debug!(lock = keys.name(), "released in background"),
                        Err(err) => tracing::debug!(lock = keys.name(), %err, "background release"),
                    }
                });
            }
            Err(_) => tracing::warn!(
                lock = keys.name(),
                "lock dropped outside a Tokio runtime; its lease will end it"
            ),
        }
    }
}

/// The owner-checked release, as one script call.
async fn release(
    client: &Client,
    keys: &LockKeys,
    owner: &OwnerToken,
    kind: LockKind,
) -> Result<()> {
    let channel = keys.wake_channel();
    let reply: i64 = match kind {
        LockKind::Mutex => {
            client
                .run_script(
                    "release",
                    &MUTEX_RELEASE,
                    &[keys.lock()],
                    &[owner.as_str(), channel],
                )
                .await?
        }
        LockKind::Fair => {
            let (queue, places, tickets) = crate::fair::queue_keys(keys);
            client
                .run_script(
                    "release",
                    &FAIR_RELEASE,
                    &[keys.lock(), &queue, &places, &tickets],
                    &[owner.as_str(), channel],
                )
                .await?
        }
    };
    owner_reply(keys, "release", reply)
}

/// Maps the `1 / 0 / -1` reply of the owner-checked scripts.
fn owner_reply(keys: &LockKeys, phase: &'static str, reply: i64) -> Result<()> {
    match reply {
        1 => Ok(()),
        0 => Err(Error::NotHeld {
            name: keys.name().to_string(),
            reason: LostReason::Expired,
        }),
        -1 => Err(Error::NotHeld {
            name: keys.name().to_string(),
            reason: LostReason::Taken,
        }),
        other => Err(Error::UnexpectedReply {
            phase,
            detail: format!("{other}"),
        }),
    }
}

/// The owner-checked extension, as one script call: the new lease deadline when granted.
pub(crate) async fn extend_lease(
    client: &Client,
    keys: &LockKeys,
    owner: &OwnerToken,
    lease: Duration,
) -> Result<Instant> {
    let millis = lease_millis(lease)?.to_string();
    let sent_at = Instant::now();
    let reply: i64 = client
        .run_script(
            "extend",
            &MUTEX_EXTEND,
            &[keys.lock()],
            &[owner.as_str(), &millis],
        )
        .await?;
    owner_reply(keys, "extend", reply)?;
    Ok(lease_deadline(sent_at, lease))
}

/// Proof that this process holds a [`Mutex`](crate::Mutex) or a
/// [`FairMutex`](crate::FairMutex): its fencing token and its lease.
///
/// The lock is held until [`release`](MutexGuard::release) or until the lease runs out,
/// whichever comes first. With the watchdog on (the default when no lease was set), the lease
/// is renewed in the background while the guard lives. Either way, [`lost`](MutexGuard::lost)
/// tells the holder the moment the lock is lost or can no longer be proven held: stop acting
/// then. Pass [`fencing_token`](MutexGuard::fencing_token) along with every write, so the
/// resource can refuse a holder that did not stop in time.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use std::time::Duration;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let guard = client.mutex("report")?.lock().await?;
/// assert!(guard.lease_remaining() > Duration::from_secs(25));
/// tokio::select! {
///     reason = guard.lost() => println!("stop: the lock was lost ({reason})"),
///     () = tokio::time::sleep(Duration::from_millis(50)) => println!("work done"),
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
///
/// # Drop behaviour
/// Dropping a guard without calling [`release`](MutexGuard::release) stops its watchdog and
/// releases the lock in a background task on the current Tokio runtime: the drop never
/// blocks. Outside a runtime nothing can be sent, and the lease ends the lock. Prefer
/// `release().await`, which reports whether the lock was still held.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MutexGuard {
    /// Stopped before the release is sent, so no renewal can follow a release.
    watchdog: Option<Watchdog>,
    owed: Option<OwedRelease>,
    state: Arc<LeaseState>,
    token: FencingToken,
    /// Set when waiters of this process queue behind this guard; cleared before the release
    /// is sent.
    local: Option<LocalHolder>,
}

impl std::fmt::Debug for MutexGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.token)
            .field("lease_remaining", &self.lease_remaining())
            .field("watchdog", &self.watchdog.is_some())
            .finish()
    }
}

impl MutexGuard {
    pub(crate) fn new(
        owed: OwedRelease,
        token: FencingToken,
        sent_at: Instant,
        options: &MutexOptions,
    ) -> MutexGuard {
        let state = LeaseState::new(lease_deadline(sent_at, options.get_lease()));
        let watchdog = options.renewal().map(|renewal| {
            owed.client().renewals().watch(Watched {
                client: owed.client().clone(),
                keys: owed.keys.clone(),
                owner: owed.owner.clone(),
                state: state.clone(),
                renewal,
                acquired_at: sent_at,
            })
        });
        MutexGuard {
            watchdog,
            owed: Some(owed),
            state,
            token,
            local: None,
        }
    }

    /// Tells the waiters of this process queued behind this guard that it holds the lock
    /// with its key marked, so its release will wake them without their asking Redis.
    pub(crate) fn hold_for_local_waiters(&mut self, queue: &Arc<LocalQueue>) {
        self.local = Some(LocalHolder::new(queue, self.state.clone()));
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.owed().keys.name()
    }

    /// This acquisition's fencing token: greater than that of every earlier holder of the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The random owner token stored in the lock key while this guard holds it.
    pub fn owner_token(&self) -> &OwnerToken {
        &self.owed().owner
    }

    /// The instant (local monotonic clock) until which the lock is certainly held: the lease
    /// counted from when the last acquire, extend or renewal request was *sent*, less a drift
    /// allowance.
    pub fn lease_deadline(&self) -> Instant {
        self.state.status().deadline
    }

    /// How much of the lease is certainly left; zero once it may have run out.
    pub fn lease_remaining(&self) -> Duration {
        self.lease_deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Resolves the moment the lock is known lost — a renewal or extension found it gone or
    /// taken — or can no longer be proven held: the lease deadline passed without a confirmed
    /// renewal (no watchdog, Redis unreachable, or the renewal cap reached). Use it in
    /// `tokio::select!` beside the work the lock protects. The future does not borrow the
    /// guard; once the guard is released or dropped it resolves with
    /// [`LostReason::Released`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future changes nothing.
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        self.state.lost()
    }

    /// Why the lock is not held any more, if that is known now (a passed lease deadline
    /// counts); `None` while it is held.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.state.loss()
    }

    /// Whether the watchdog renews this guard's lease.
    pub fn is_renewed(&self) -> bool {
        self.watchdog.is_some()
    }

    /// Sets the lease to `lease` from now, if the lock is still this guard's.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a lease under 3 ms or over 100 years;
    /// [`Error::NotHeld`] when the lock is gone or another owner's (nothing was changed, and
    /// [`lost`](MutexGuard::lost) resolves); [`Error::Connection`] when the outcome is unknown
    /// (the old lease still bounds it).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have changed the lease; the guard counts on the
    /// earlier of the old and the new deadline, never later than the truth.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        lease_millis(lease)?;
        let _gate = self.state.gate.lock().await;
        // A shorter lease applies on the server as soon as the request lands: count on no
        // more than it from now on, whatever happens to the reply.
        self.state.at_most(lease_deadline(Instant::now(), lease));
        let owed = self.owed();
        match extend_lease(&owed.client, &owed.keys, &owed.owner, lease).await {
            Ok(deadline) => {
                self.state.extended(deadline);
                Ok(())
            }
            Err(err) => {
                if let Error::NotHeld { reason, .. } = &err {
                    self.state.lose(*reason);
                }
                Err(err)
            }
        }
    }

    /// Releases the lock and says whether it was still this guard's. A renewal under way is
    /// let finish and the watchdog stopped before the release is sent, so no renewal ever
    /// follows the release.
    ///
    /// # Errors
    /// [`Error::NotHeld`] with [`LostReason::Expired`] when the lease had run out,
    /// [`LostReason::Taken`] when another owner holds the lock now (it is left untouched);
    /// [`Error::Connection`] when the outcome is unknown: the lease then ends the lock.
    ///
    /// # Cancel safety
    /// Dropping the future before the reply still releases the lock, in the background.
    pub async fn release(mut self) -> Result<()> {
        let state = self.state.clone();
        // Wait for a renewal under way, and stop the watchdog before the release is sent.
        let _gate = state.gate.lock().await;
        self.watchdog.take();
        self.local.take();
        let owed = self
            .owed
            .take()
            .expect("a guard owes its release until released");
        let outcome = owed.pay().await;
        if let Err(Error::NotHeld { reason, .. }) = &outcome {
            self.state.lose(*reason);
        }
        outcome
    }

    /// The release this guard owes: there from acquisition until `release` or drop.
    fn owed(&self) -> &OwedRelease {
        self.owed
            .as_ref()
            .expect("a guard owes its release until released")
    }
}

impl Drop for MutexGuard {
    fn drop(&mut self) {
        self.watchdog.take();
        self.local.take();
        self.state.end();
        let Some(owed) = self.owed.take() else {
            return;
        };
        // Release in the background, after any renewal already under way (see
        // `LeaseState::gate`). Without a runtime, `owed` says so as it drops.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let state = self.state.clone();
            runtime.spawn(async move {
                let _gate = state.gate.lock().await;
                if let Err(err) = owed.pay().await {
                    tracing::debug!(%err, "background release of a dropped guard");
                }
            });
        }
    }
}
