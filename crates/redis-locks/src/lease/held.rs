//! A held lease: what every primitive's guard is made of.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, Span};

use super::options::LeaseOptions;
use super::owed::OwedRelease;
use super::state::LeaseState;
use super::time::lease_millis;
use super::watchdog::{First, Renewal, Renewals, Watchdog, Watched};
use super::{HoldFuture, Released, extend_hold};
use crate::error::{Error, LostReason, Result};
use crate::node::Replication;
use crate::token::{FencingToken, OwnerToken};

/// A granted lock: its fencing token, its lease, the watchdog renewing it, and the release it
/// owes. A primitive's public guard wraps one and forwards to it.
///
/// Releasing (or dropping) stops the watchdog first and lets a renewal under way finish, so
/// no renewal ever follows the release; a dropped lease releases in the background.
pub(crate) struct Lease {
    /// Stopped before the release is sent, so no renewal can follow a release.
    watchdog: Option<Watchdog>,
    owed: Option<OwedRelease>,
    state: Arc<LeaseState>,
    token: FencingToken,
    /// Whatever the acquire loop tied to this holding (a note for the waiters of this
    /// process queued behind it): dropped when the holding ends, before the release is sent.
    attached: Option<Box<dyn Send + Sync>>,
    /// What every extension waits for, and the lease an acquisition confirms with, when the
    /// options ask for replicas.
    /// Boxed: most leases have none, and a process may hold 100,000.
    replication: Option<Box<(Replication, Duration)>>,
    /// When the grant's request was sent: the hold time of the metrics counts from it.
    granted_at: Instant,
    /// The `hold` span: open while the lock is held, the parent of its release's span. `None`
    /// while no subscriber wants it (a disabled span is 40 bytes in every lease, this is 8).
    span: Option<Box<Span>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name())
            .field("fencing_token", &self.token)
            .field("lease_remaining", &self.remaining())
            .field("watchdog", &self.is_renewed())
            .finish()
    }
}

impl Lease {
    /// The lease of a grant whose request was sent at `sent_at`, renewed by `renewals` if
    /// `options` turn the watchdog on.
    pub(crate) fn new(
        owed: OwedRelease,
        token: FencingToken,
        sent_at: Instant,
        options: &LeaseOptions,
        renewals: &Renewals,
    ) -> Lease {
        let state = LeaseState::new(sent_at, options.get_lease(), options.get_clock_drift());
        let watchdog = options.renewal().map(|renewal| {
            renewals.watch(
                Watched {
                    hold: owed.hold().clone(),
                    owner: owed.owner().clone(),
                    state: state.clone(),
                    renewal,
                    acquired_at: sent_at,
                    holder: owed.holder().cloned(),
                },
                First::Renew,
            )
        });
        Lease {
            span: hold_span(owed.hold().as_ref(), token),
            watchdog,
            owed: Some(owed),
            state,
            token,
            attached: None,
            replication: options.replicated().map(Box::new),
            granted_at: sent_at,
        }
    }

    /// The lease of a lock that a release handed straight to `owed`'s owner token (a waiter
    /// registered it with its place in the queue; see `queue.lua`, `hand_over`). On the
    /// server it lasts until the waiter's place lease ends, so it counts from `placed_at`,
    /// when the latest attempt that renewed the place (and whose reply came back) was sent,
    /// for `place_lease`. The watchdog extends it in the background — so the waiter holds the
    /// lock the moment the wake-up reaches it — once a third of what is left of it has passed,
    /// as a renewal would be, so a guard released sooner never sends it (at once if the lease
    /// `options` ask for is shorter than what is left): with renewals on, to the lease
    /// `options` ask for, renewed as usual from then; without, to end that lease after the
    /// handover.
    pub(crate) fn handed_over(
        mut owed: OwedRelease,
        token: FencingToken,
        (placed_at, place_lease): (Instant, Duration),
        options: &LeaseOptions,
        renewals: &Renewals,
    ) -> Lease {
        owed.arm();
        let state = LeaseState::new(placed_at, place_lease, options.get_clock_drift());
        let renewal = options.renewal();
        let then_renew = renewal.is_some();
        let watchdog = renewals.watch(
            Watched {
                hold: owed.hold().clone(),
                owner: owed.owner().clone(),
                state: state.clone(),
                // Without the watchdog, only the first extension is made (`then_renew` is
                // false), to end the lease the caller asked for after the handover.
                renewal: renewal.unwrap_or_else(|| {
                    Renewal::handed_over(
                        options.get_lease(),
                        Instant::now(),
                        options.get_replication().copied(),
                    )
                }),
                // The lock may have been handed over any time since: count a hold cap from
                // the earliest it can have been.
                acquired_at: placed_at,
                holder: owed.holder().cloned(),
            },
            First::Extend { then_renew },
        );
        Lease {
            span: hold_span(owed.hold().as_ref(), token),
            watchdog: Some(watchdog),
            owed: Some(owed),
            state,
            token,
            attached: None,
            replication: options.replicated().map(Box::new),
            granted_at: placed_at,
        }
    }

    /// Ties `note` to this holding: it is dropped when the holding ends (release or drop),
    /// before the release is sent.
    pub(crate) fn attach(&mut self, note: Box<dyn Send + Sync>) {
        self.attached = Some(note);
    }

    /// The lease's shared state (deadline, loss), for whoever must know how long it holds.
    pub(crate) fn state(&self) -> &Arc<LeaseState> {
        &self.state
    }

    pub(crate) fn name(&self) -> &str {
        self.owed().hold().name()
    }

    pub(crate) fn fencing_token(&self) -> FencingToken {
        self.token
    }

    pub(crate) fn owner_token(&self) -> &OwnerToken {
        self.owed().owner()
    }

    /// The hold (of a hold count) is held in `mode` from now on: a downgrade. Its renewals
    /// then judge a loss as a hold of that mode (see [`OwedRelease::held_by`]).
    pub(crate) fn held_in(&self, mode: crate::state::HoldMode) {
        if let Some(holder) = self.owed().holder() {
            holder.set_mode(mode);
        }
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.state.status().deadline
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    pub(crate) fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static {
        self.state.lost()
    }

    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.state.loss()
    }

    /// Whether the watchdog renews the lease (a handed-over lease without renewals still has
    /// a watchdog, for its first extension only).
    pub(crate) fn is_renewed(&self) -> bool {
        self.watchdog.as_ref().is_some_and(Watchdog::renews)
    }

    /// Sets the lease to `lease` from now, owner-checked; on a shorter lease the deadline
    /// moves at once, whatever happens to the reply.
    pub(crate) async fn extend(&self, lease: Duration) -> Result<()> {
        lease_millis(lease)?;
        let _gate = self.state.gate().await;
        // A shorter lease applies on the server as soon as the request lands: count on no
        // more than it from now on, whatever happens to the reply.
        let sent_at = Instant::now();
        self.state.at_most(self.state.deadline_for(sent_at, lease));
        let owed = self.owed();
        let replication = self.replication.as_ref().map(|replicated| &replicated.0);
        match extend_hold(owed.hold().as_ref(), owed.owner(), lease, replication).await {
            Ok(replicas) => {
                self.state.extended(self.state.deadline_for(sent_at, lease));
                self.state.acknowledged(replicas);
                // A handed-over lease's first extension is owed no more (without renewals to
                // follow, the watchdog then sends nothing; with them, its next request is a
                // renewal, on the schedule it had).
                self.state.owe_extension(false);
                Ok(())
            }
            Err(err) => {
                if let Error::NotHeld { reason, .. } = &err {
                    self.state.lose(*reason, owed.hold().as_ref());
                }
                Err(err)
            }
        }
    }

    /// This grant, once it is replicated as the options ask (an owner-checked extension to
    /// the full lease with `WAIT` after it, in one round trip); at once without a
    /// replication policy. A grant that is not replicated enough is released.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] when too few replicas acknowledged, [`Error::Unsupported`]
    /// when the server lacks the command; otherwise as [`Lease::extend`]. The grant was
    /// released; a release that failed too (Redis unreachable) leaves the key to its lease,
    /// as every failed release does.
    pub(crate) async fn replicated(self) -> Result<Lease> {
        let Some(lease) = self.replication.as_ref().map(|replicated| replicated.1) else {
            return Ok(self);
        };
        // Boxed as `dyn Future`: the acquire futures that await this one stay shallow enough
        // for the compiler to prove them `Send` (a caller's `tokio::spawn(mutex.lock())`).
        let confirmed: HoldFuture<'static, Lease> = Box::pin(self.confirmed(lease));
        confirmed.await
    }

    /// [`Lease::replicated`]'s work: the extension that waits for the replicas, and the
    /// release of a grant that did not get them.
    async fn confirmed(self, lease: Duration) -> Result<Lease> {
        match self.extend(lease).await {
            Ok(()) => Ok(self),
            Err(err) => {
                if let Err(release) = self.release().await {
                    tracing::debug!(%release, "release of a grant that was not replicated");
                }
                Err(err)
            }
        }
    }

    /// How many replicas acknowledged the last confirmed grant or renewal, when the options
    /// ask for replicas.
    pub(crate) fn replicas(&self) -> Option<u32> {
        self.state.replicas()
    }

    /// Releases the lock and says whether it was still this lease's. A renewal under way is
    /// let finish and the watchdog stopped before the release is sent.
    /// For a hold of a hold count, whose hold it is (see [`OwedRelease::held_by`]) lets a
    /// release asked again after a lost reply say how many holds are left, and one that finds
    /// the hold run out say whether another owner took the lock.
    pub(crate) async fn release(mut self) -> Result<Released> {
        let state = self.state.clone();
        // Wait for a renewal under way, and stop the watchdog before the release is sent.
        let _gate = state.gate().await;
        self.watchdog.take();
        self.attached.take();
        let owed = self
            .owed
            .take()
            .expect("a lease owes its release until released");
        let (hold, owner) = (owed.hold().clone(), owed.owner().clone());
        let holder = owed.holder().map(super::SharedHolder::now);
        let span = release_span(
            self.span.as_deref(),
            hold.as_ref(),
            self.token,
            self.granted_at,
        );
        // Until when a lock found gone can only have been released by this release: the
        // lease's deadline, unless a loss was recorded already (the watchdog found it gone).
        let certain = match self.state.loss() {
            None | Some(LostReason::Released) => self.state.status().deadline,
            Some(_) => Instant::now(),
        };
        let outcome = owed.pay().instrument(span.clone()).await;
        let outcome = match outcome {
            Err(first) if first.is_connection() => {
                let first_run = (certain, self.token, holder.as_ref());
                release_again(hold.as_ref(), &owner, first_run, first)
                    .instrument(span.clone())
                    .await
            }
            outcome => outcome,
        };
        // Gone or taken because a break took it: say so. A hold of a hold count that
        // expired while another owner holds the lock is taken, as a `Mutex`'s would be.
        let outcome = match outcome {
            Err(Error::NotHeld {
                name,
                reason: LostReason::Expired | LostReason::Taken,
            }) if hold.broken(&owner).await.unwrap_or(false) => Err(Error::NotHeld {
                name,
                reason: LostReason::Broken,
            }),
            Err(Error::NotHeld {
                name,
                reason: LostReason::Expired,
            }) if super::taken(hold.as_ref(), holder.as_ref()).await => Err(Error::NotHeld {
                name,
                reason: LostReason::Taken,
            }),
            outcome => outcome,
        };
        released(hold.as_ref(), self.granted_at, &outcome, &span);
        if let Err(Error::NotHeld { reason, .. }) = &outcome {
            self.state.lose(*reason, hold.as_ref());
        }
        outcome
    }

    /// The release this lease owes: there from acquisition until `release` or drop.
    fn owed(&self) -> &OwedRelease {
        self.owed
            .as_ref()
            .expect("a lease owes its release until released")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.watchdog.take();
        self.attached.take();
        self.state.end();
        let Some(owed) = self.owed.take() else {
            return;
        };
        // Release in the background, after any renewal already under way (see
        // `LeaseState::gate`). Without a runtime, `owed` says so as it drops.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let state = self.state.clone();
            let pending = owed.hold().background();
            let (token, granted_at) = (self.token, self.granted_at);
            // The hold span stays open until the background release is done.
            let holding = self.span.take();
            runtime.spawn(async move {
                let _pending = pending;
                let _gate = state.gate().await;
                let hold = owed.hold().clone();
                let span = release_span(holding.as_deref(), hold.as_ref(), token, granted_at);
                let outcome = owed.pay().instrument(span.clone()).await;
                released(hold.as_ref(), granted_at, &outcome, &span);
                if let Err(err) = outcome {
                    tracing::debug!(parent: &span, %err, "background release of a dropped guard");
                }
            });
        }
    }
}

/// The `hold` span of a lease of `hold`'s lock granted with `token`: the lock's name, primitive
/// and fencing token (never the owner token); it closes when the holding ends (after its
/// release), so its lifetime is the hold time. Never entered; while no subscriber wants
/// DEBUG it is `None` (a word in the lease, no allocation).
fn hold_span(hold: &dyn super::Hold, token: FencingToken) -> Option<Box<Span>> {
    // A root that follows from the acquisition, not its child: a parent span stays open
    // while a child lives, so the acquire span (or the caller's) would last the whole hold.
    let span = tracing::debug_span!(
        parent: None,
        "hold",
        lock = hold.name(),
        primitive = hold.kind().label(),
        fencing_token = token.get(),
    );
    if span.is_disabled() {
        return None;
    }
    span.follows_from(Span::current());
    Some(Box::new(span))
}

/// The span of a release (within the `holding` span) of `hold`'s lock granted at `granted_at`
/// with `token`: the lock's name, primitive and fencing token (never the owner token), and,
/// once known, the outcome and how long the lock was held.
fn release_span(
    holding: Option<&Span>,
    hold: &dyn super::Hold,
    token: FencingToken,
    granted_at: Instant,
) -> Span {
    tracing::debug_span!(
        parent: holding.and_then(Span::id),
        "release",
        lock = hold.name(),
        primitive = hold.kind().label(),
        fencing_token = token.get(),
        held_ms = granted_at.elapsed().as_millis() as u64,
        outcome = tracing::field::Empty,
    )
}

/// Records a release's `outcome`: its metrics, and on its `span`.
fn released(hold: &dyn super::Hold, granted_at: Instant, outcome: &Result<Released>, span: &Span) {
    crate::telemetry::released(hold.kind(), hold.name(), granted_at.elapsed(), outcome);
    span.record(
        "outcome",
        match outcome {
            Ok(_) => "released",
            Err(Error::NotHeld { .. }) => "not_held",
            Err(_) => "error",
        },
    );
}

/// A release of `hold` by `owner` whose reply never came (`first`: the connection failed after
/// the request went out, so the server may have run it) is asked once more, over a new
/// connection. Its answer stands, except that a lock found gone or taken while its lease was
/// still certain (before the lease's deadline on this client's clock, which ends before the
/// server's) on a server that kept the grant's data (its fencing counter reaches the grant's
/// `token`: no restart, flush or failover lost it) was released by the first request —
/// nothing else ends a lease early there but a break, which is told apart — so it says what
/// that release left ([`Hold::released_first`](super::Hold::released_first): [`Released::Freed`], or the holds `holder`
/// has left). A second connection failure gives back the first.
async fn release_again(
    hold: &dyn super::Hold,
    owner: &OwnerToken,
    (certain, token, holder): (Instant, FencingToken, Option<&super::Holder>),
    first: Error,
) -> Result<Released> {
    tracing::debug!(lock = hold.name(), %first, "release reply lost; asking again");
    match hold.release(owner).await {
        Err(Error::NotHeld {
            name,
            reason: reason @ (LostReason::Expired | LostReason::Taken),
        }) => {
            let first_run = if Instant::now() < certain {
                hold.released_first(token, holder).await.unwrap_or(None)
            } else {
                None
            };
            // A break mark that cannot be read counts as a break: the safe answer.
            match first_run {
                Some(left) if !hold.broken(owner).await.unwrap_or(true) => Ok(left),
                _ => Err(Error::NotHeld { name, reason }),
            }
        }
        Err(err) if err.is_connection() => Err(first),
        outcome => outcome,
    }
}

#[cfg(test)]
mod tests {
    /// Every guard is a `Lease` and every lease has a `LeaseState` (a process may hold
    /// 100,000): a field added to either is a decision, not an accident. (A disabled tracing
    /// span inline would take 40 bytes of the lease, which is why the hold span is boxed,
    /// and only when enabled; the state leaves the lock's kind and name to its callers.)
    #[test]
    fn a_lease_stays_small() {
        let lease = size_of::<super::Lease>();
        assert!(lease <= 136, "{lease}");
        assert!(size_of::<crate::MutexGuard>() <= 136);
        let state = size_of::<super::super::state::LeaseState>();
        assert!(state <= 72, "{state}");
    }
}
