//! Waiters that each keep their own place in the lock's queue, under their acquisition's
//! token: `FairMutex`, `ReentrantMutex` and `RwLock` wait this way (a `Mutex`'s waiters of one
//! process share one place instead, see [`local`](super::local)).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::HandedOver;
use super::{Contender, Line, Try, grant_reply, in_time, nothing_owed};
use crate::error::{Error, Result};
use crate::lease::{Lease, LeaseOptions, OwedRelease};
use crate::token::FencingToken;

/// What one attempt of a placed waiter found: granted (its fencing token, and when the
/// request was sent), or held (how long the blocking holder's lease still runs, if known).
pub(crate) type Answer = Try<(FencingToken, Instant)>;

/// A place in the queue renewed by a refused waiting attempt: when the attempt was sent, the
/// place lease it asked for, and its nonce (registered with the place for a handover). A grant
/// a release handed over under that nonce lasts on the server at least until `at + lease`: the
/// release gives it the rest of the place lease this attempt renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlaceRenewal {
    pub(crate) at: Instant,
    pub(crate) lease: Duration,
    pub(crate) nonce: u64,
}

impl PlaceRenewal {
    /// When and for how long a grant handed over under `nonce` counts, if this renewal is the
    /// one it names (a grant under an older nonce was made before this refusal, which found
    /// the lock not the waiter's: it is void).
    pub(crate) fn counts(&self, nonce: u64) -> Option<(Instant, Duration)> {
        (self.nonce == nonce).then_some((self.at, self.lease))
    }
}

/// A primitive whose waiters keep their own place: how it asks once.
pub(crate) trait Asker: Sync {
    /// The lock's name.
    fn name(&self) -> &str;

    /// The primitive, for metrics.
    fn kind(&self) -> crate::telemetry::Kind;

    /// The lock's wake channel.
    fn channel(&self) -> &str;

    /// How long a place in the queue lasts without renewal.
    fn place_lease(&self) -> Duration;

    /// One attempt by `owed`'s token, keeping a place in the queue for `place_lease` when
    /// refused (zero: ask without a place), registered with `nonce` for a handover if the
    /// primitive's releases hand over. A grant that comes back after its lease is asked again
    /// within `deadline`, or fails.
    fn ask(
        &self,
        owed: &OwedRelease,
        place_lease: Duration,
        deadline: Option<Instant>,
        nonce: u64,
    ) -> impl Future<Output = Result<Answer>> + Send;

    /// The lease of a grant.
    fn lease(&self, owed: OwedRelease, token: FencingToken, sent_at: Instant) -> Lease;

    /// The lease of a grant a release handed to `owed`'s token (see `queue.lua`,
    /// `hand_over`), counted from `placed` (when the refused attempt whose place the grant's
    /// lease ends with was sent, and its place lease), if the primitive's releases hand over
    /// and enough of it is left for its extension to land; otherwise `owed` back, and the
    /// waiter asks again (which finds a grant to its token its own). By default: no handover.
    fn handed(
        &self,
        owed: OwedRelease,
        token: FencingToken,
        placed: (Instant, Duration),
    ) -> std::result::Result<Lease, OwedRelease> {
        let _ = (token, placed);
        Err(owed)
    }
}

/// Runs one acquire script call (`attempt`, replying as [`grant_reply`] reads) until its
/// grant comes back within its lease, as [`in_time`] says: a late grant is asked again (the
/// scripts re-grant to the same token with a fresh lease) or, too often or past `deadline`,
/// the call fails, and the caller's owed release gives the grant back as it drops.
///
/// # Errors
/// [`Error::UnexpectedReply`] for any other reply; a late grant too often; the attempt's.
pub(crate) async fn answer_in_time<F, Fut>(
    lease: &LeaseOptions,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Answer>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(i64, i64)>>,
{
    let ask = |_| {
        let reply = attempt();
        async move { grant_reply(reply.await?) }
    };
    let answer = in_time(lease, deadline, 0, ask, nothing_owed).await?;
    Ok(answer.map(|(token, sent_at)| (FencingToken::new(token), sent_at)))
}

/// Asks once without joining the queue: a `try_lock`.
///
/// # Errors
/// [`Error::Held`] when refused; any error of the attempt.
pub(crate) async fn try_once<A: Asker>(asker: &A, owed: OwedRelease) -> Result<Lease> {
    let answer = match asker
        .ask(&owed, Duration::ZERO, Some(Instant::now()), 0)
        .await
    {
        // A refused upgrade wrote nothing, and without a place there is none to give up.
        Err(err @ Error::Upgrade { .. }) => {
            owed.disarm();
            return Err(err);
        }
        answer => answer?,
    };
    match answer {
        Try::Won((token, sent_at)) => asker.lease(owed, token, sent_at).replicated().await,
        Try::Held(retry_after) => {
            owed.disarm();
            Err(Error::Held {
                name: asker.name().to_string(),
                retry_after,
            })
        }
    }
}

/// A placed waiter's side of the acquire loop: one token (its place in the queue) for the
/// whole wait; each attempt renews the place; only a wake-up addressed to it counts; on
/// timeout or cancellation the place is given up by releasing that token.
pub(crate) struct Placed<'a, A> {
    asker: &'a A,
    /// The place (and then the grant) this wait owes the server; `None` once granted.
    owed: Option<OwedRelease>,
    /// The payload of a wake-up meant for this waiter.
    address: String,
    /// The next attempt's nonce.
    nonce: u64,
    /// The latest refused attempt's renewal of the place.
    placed: Option<PlaceRenewal>,
}

impl<'a, A: Asker> Placed<'a, A> {
    /// A waiter owing `owed` (released if the wait is dropped), woken by `address`.
    pub(crate) fn new(asker: &'a A, owed: OwedRelease, address: String) -> Placed<'a, A> {
        Placed {
            asker,
            owed: Some(owed),
            address,
            nonce: 0,
            placed: None,
        }
    }

    fn owed(&self) -> &OwedRelease {
        self.owed
            .as_ref()
            .expect("a waiter owes its place until granted")
    }
}

impl<A: Asker> Contender for Placed<'_, A> {
    fn kind(&self) -> crate::telemetry::Kind {
        self.asker.kind()
    }

    fn name(&self) -> &str {
        self.asker.name()
    }

    fn channel(&self) -> &str {
        self.asker.channel()
    }

    async fn attempt(&mut self, _line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        let place_lease = self.asker.place_lease();
        let nonce = self.nonce;
        self.nonce += 1;
        // Before the request goes out: the place the server renews counts from no earlier.
        let sent_at = Instant::now();
        match self
            .asker
            .ask(self.owed(), place_lease, deadline, nonce)
            .await?
        {
            Try::Won((token, sent_at)) => {
                let owed = self
                    .owed
                    .take()
                    .expect("a waiter owes its place until granted");
                Ok(Try::Won(self.asker.lease(owed, token, sent_at)))
            }
            Try::Held(retry_after) => {
                self.placed = Some(PlaceRenewal {
                    at: sent_at,
                    lease: place_lease,
                    nonce,
                });
                Ok(Try::Held(retry_after))
            }
        }
    }

    fn handed_over(&mut self, _line: Line<'_>, handed: &HandedOver) -> Option<Lease> {
        let placed = self.placed?.counts(handed.nonce)?;
        if handed.owner != self.owed.as_ref()?.owner().as_str() {
            return None;
        }
        let owed = self.owed.take()?;
        let token = FencingToken::new(handed.token);
        match self.asker.handed(owed, token, placed) {
            Ok(lease) => Some(lease),
            Err(owed) => {
                self.owed = Some(owed);
                None
            }
        }
    }

    fn address(&self) -> Option<&str> {
        self.owed.as_ref().map(|_| self.address.as_str())
    }

    fn refresh(&self) -> Option<Duration> {
        Some(self.asker.place_lease() / 3)
    }

    async fn give_up(mut self) {
        // Give the place up now. The reply is "not held", as expected; anything else (Redis
        // gone, say) leaves the place to run out with its place lease.
        if let Some(owed) = self.owed.take() {
            match owed.pay().await {
                Ok(_) | Err(Error::NotHeld { .. }) => {}
                Err(err) => tracing::debug!(%err, "giving up a place in the queue"),
            }
        }
    }
}
