//! How a [`Redlock`](crate::Redlock) is released and extended by its owner: the lease core's
//! [`Hold`], one owner-checked `Mutex` request per node, sent to all nodes at once, and a
//! majority needed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::string_lock::{StringHold, clock_proposal};
use crate::error::{Error, LostReason, Phase, Result, Vote};
use crate::lease::{Hold, HoldFuture, Released};
use crate::node::quorum::{Answer, Answers, Quorum, Running, count, unreachable};
use crate::token::OwnerToken;
use crate::wait::leave_queue;

/// A Redlock's key on every node.
pub(crate) struct RedlockHold {
    pub(crate) quorum: Arc<Quorum>,
    /// The `Mutex` key of the lock on each node, in the nodes' order.
    pub(crate) nodes: Vec<Arc<StringHold>>,
    /// How many renewals' restores are still under way: a release waits for none, so that a
    /// restore held up by a reconnect cannot land after the release.
    pub(crate) restoring: watch::Sender<usize>,
}

/// One node's answer to an owner-checked request: done, or not this owner's any more (and
/// why).
type Owned = std::result::Result<(), LostReason>;

impl RedlockHold {
    fn name_of(&self) -> &str {
        self.nodes[0].keys.name()
    }

    /// Sends an owner-checked request (release or extend) to every node at once; done when a
    /// majority did it, not held when a majority no longer can have it. Also says which nodes
    /// answered that the key was gone.
    async fn on_all<F>(&self, phase: Phase, request: F) -> (Result<()>, Vec<usize>)
    where
        F: Fn(usize, Arc<StringHold>) -> HoldFuture<'static, ()>,
    {
        let needed = self.quorum.needed();
        let total = self.nodes.len();
        let (answers, late): (Answers<Owned>, _) = self
            .quorum
            .ask_keeping(
                0..total,
                |index, _node| {
                    let request = request(index, self.nodes[index].clone());
                    async move {
                        match request.await {
                            Ok(()) => Ok(Ok(())),
                            Err(Error::NotHeld { reason, .. }) => Ok(Err(reason)),
                            Err(err) => Err(err),
                        }
                    }
                },
                |answers| {
                    let done = count(answers, Result::is_ok);
                    let refused = count(answers, Result::is_err);
                    done >= needed || total - refused - unreachable(answers) < needed
                },
            )
            .await;
        if phase == Phase::Release {
            // Done at the majority, as an attempt is; the other nodes' releases are seen
            // through in the background (a key left behind would hold that node until its
            // lease ends; a process that exits at once may leave some unwritten, unless it
            // awaits `Redlock::settle`, which waits for this background task). Each was
            // queued on its node's connection when the outcome was decided (`take_ready`) and
            // stays awaited, so this client's next attempt usually finds no key of this one;
            // where it does (a release still waiting for a reconnect, or re-sent after
            // `NOSCRIPT`), that node only refuses for a moment: availability, not safety.
            late.finish_in_background();
        }
        let gone = (0..total)
            .filter(|&index| {
                matches!(
                    answers[index],
                    Some(Answer::Replied(Err(LostReason::Expired)))
                )
            })
            .collect();
        (self.outcome(phase, answers), gone)
    }

    /// What the answers of [`on_all`](Self::on_all) make of the request.
    fn outcome(&self, phase: Phase, answers: Answers<Owned>) -> Result<()> {
        let (needed, total) = (self.quorum.needed(), self.nodes.len());
        let done = count(&answers, Result::is_ok);
        let refused = count(&answers, Result::is_err);
        if done >= needed {
            return Ok(());
        }
        if refused > total - needed {
            let taken = count(&answers, |reply| *reply == Err(LostReason::Taken));
            return Err(Error::NotHeld {
                name: self.name_of().to_string(),
                reason: if taken > 0 {
                    LostReason::Taken
                } else {
                    LostReason::Expired
                },
            });
        }
        Err(Error::NoQuorum {
            name: self.name_of().to_string(),
            phase,
            needed,
            votes: self.quorum.votes(answers, |reply| match reply {
                Ok(()) => Vote::Granted,
                Err(_) => Vote::Held { retry_after: None },
            }),
        })
    }
}

impl RedlockHold {
    /// Releases `owner`'s key on every node at once, each handing the lock to its first
    /// waiter under one token (this client's clock, [`clock_proposal`]); done at the majority
    /// (the rest in the background). With `places`, the waiter ids under which the line that
    /// took the lock with `owner` may still have a place on a node, with `owner` registered
    /// for a handover: a node that says the key is not `owner`'s is asked to take that place
    /// out (`leave.lua`, releasing a key handed to `owner` meanwhile), so that no later
    /// release there hands it to a holding that is over.
    async fn release_leaving(
        &self,
        owner: &OwnerToken,
        places: Option<&Arc<[Arc<str>]>>,
    ) -> Result<Released> {
        // A restore still under way (each is bounded by the node timeout) goes first.
        let _ = self
            .restoring
            .subscribe()
            .wait_for(|restoring| *restoring == 0)
            .await;
        let proposal: Arc<str> = clock_proposal().to_string().into();
        let owner = owner.clone();
        self.on_all(Phase::Release, |index, node| {
            let (owner, proposal) = (owner.clone(), proposal.clone());
            let place = places.map(|ids| ids[index].clone());
            Box::pin(async move {
                let released = node.release_proposing(&owner, Some(&proposal)).await;
                if let (Err(Error::NotHeld { .. }), Some(place)) = (&released, place) {
                    leave_queue(&node.node, &node.keys, &place, Some(&owner)).await;
                }
                released.map(drop)
            })
        })
        .await
        .0
        .map(|()| Released::Freed)
    }
}

/// A Redlock holding taken by a waiter's line (by a waiting attempt, or handed over), whose
/// places on the nodes that did not grant it may still be registered for a handover to its
/// owner token: its release takes them out where the key is not its own (see
/// [`RedlockHold::release_leaving`]); all else is the Redlock's.
pub(crate) struct LineHold {
    pub(crate) hold: Arc<RedlockHold>,
    /// The line's waiter id on each node, in the nodes' order.
    pub(crate) places: Arc<[Arc<str>]>,
}

impl Hold for LineHold {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Redlock
    }

    fn name(&self) -> &str {
        self.hold.name_of()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(self.hold.release_leaving(owner, Some(&self.places)))
    }

    fn background(&self) -> Option<Box<dyn Send>> {
        self.hold.background()
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        self.hold.extend(owner, lease)
    }
}

impl Hold for RedlockHold {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Redlock
    }

    fn name(&self) -> &str {
        self.name_of()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            // A restore still under way (each is bounded by the node timeout) goes first.
            let _ = self
                .restoring
                .subscribe()
                .wait_for(|restoring| *restoring == 0)
                .await;
            self.release_leaving(owner, None).await
        })
    }

    fn background(&self) -> Option<Box<dyn Send>> {
        Some(self.quorum.running())
    }

    /// Extends on every node, done when a majority extended (only nodes where the key was
    /// still there count). Then each node that said the key was gone gets it back, restored
    /// to this owner with the lease, in the background: the restore only writes a key that
    /// is absent, so it never displaces another owner's, and no other owner's majority can
    /// contain a restored key (the argument is in the crate README, "Renewals put the key
    /// back where it is gone"). So a node that lost the key (a restart without its data) or
    /// never got it (down, or too slow, when the lock was taken) holds it again from a later
    /// renewal on. A renewal that fails restores nothing.
    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let extend_owner = owner.clone();
            let (outcome, gone) = self
                .on_all(Phase::Extend, |_, node| {
                    let owner = extend_owner.clone();
                    Box::pin(async move { node.extend(&owner, lease).await })
                })
                .await;
            if outcome.is_ok() && !gone.is_empty() {
                let nodes = self.nodes.clone();
                let owner = owner.clone();
                let restoring = Running::new(self.restoring.clone());
                self.quorum.send(
                    gone,
                    move |index, _node| {
                        let (node, owner) = (nodes[index].clone(), owner.clone());
                        async move { node.extend_or_restore(&owner, lease).await }
                    },
                    Some(restoring),
                );
            }
            outcome
        })
    }
}
