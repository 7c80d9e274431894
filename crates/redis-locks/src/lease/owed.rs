//! The release an acquisition owes the server from the moment its request goes out.

use std::sync::Arc;

use super::{Hold, Holder, Released, SharedHolder};
use crate::error::Result;
use crate::token::OwnerToken;

/// A release this process owes the server: made before an acquire request goes out, and paid
/// either by an explicit release or, when dropped while still armed, by a background task.
/// This is what makes a cancelled `lock()` and a dropped guard leave nothing behind beyond the
/// time the release takes.
pub(crate) struct OwedRelease {
    hold: Arc<dyn Hold>,
    owner: OwnerToken,
    armed: bool,
    /// Whose hold of a hold count this is, where the primitive has them (see
    /// [`held_by`](Self::held_by)); shared with the lease's watchdog, and changed by a
    /// downgrade.
    holder: Option<SharedHolder>,
}

impl OwedRelease {
    /// A release of `hold` by a fresh owner token, owed from now on.
    pub(crate) fn new(hold: Arc<dyn Hold>) -> OwedRelease {
        OwedRelease {
            hold,
            owner: OwnerToken::random(),
            armed: true,
            holder: None,
        }
    }

    /// A release of `hold` by a fresh owner token addressed to the client whose wake-up
    /// address is `address` ([`OwnerToken::addressed`]): for an acquisition whose token is its
    /// place in the lock's queue, so that a release wakes it on its client's own channel.
    pub(crate) fn addressed(hold: Arc<dyn Hold>, address: &str) -> OwedRelease {
        OwedRelease {
            hold,
            owner: OwnerToken::addressed(address),
            armed: true,
            holder: None,
        }
    }

    /// A release of `hold` by `owner`, a token made earlier — a `Mutex`'s waiters in one
    /// process all ask with one token, which they register with their place in line so that
    /// a release can hand the lock to it — **not armed**: until a grant is taken, the release
    /// is owed by the line (its waiters' next attempt finds a grant to the token its own,
    /// and the last of them to go releases it), not by one attempt. [`arm`](Self::arm) it
    /// when a grant is taken.
    pub(crate) fn of_line(hold: Arc<dyn Hold>, owner: OwnerToken) -> OwedRelease {
        OwedRelease {
            hold,
            owner,
            armed: false,
            holder: None,
        }
    }

    /// A grant was taken: the release is owed from now on (a no-op if it was already).
    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    /// The same release, of a hold of a hold count held by `holder` (an `RwLock`'s or a
    /// `ReentrantMutex`'s): its lease's renewals and release can then tell a hold that ran out
    /// while another owner took the lock ([`LostReason::Taken`](crate::LostReason::Taken)) from
    /// one that only ran out.
    pub(crate) fn held_by(mut self, holder: Holder) -> OwedRelease {
        self.holder = Some(SharedHolder::new(holder));
        self
    }

    /// Whose hold this is, if [`held_by`](Self::held_by) said.
    pub(crate) fn holder(&self) -> Option<&SharedHolder> {
        self.holder.as_ref()
    }

    pub(crate) fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    pub(crate) fn hold(&self) -> &Arc<dyn Hold> {
        &self.hold
    }

    /// Nothing is owed any more (the server said the lock was not granted).
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Releases now and says whether the lock was still ours. If this future is dropped before
    /// the reply, the release is still paid in the background.
    pub(crate) async fn pay(mut self) -> Result<Released> {
        let outcome = self.hold.release(&self.owner).await;
        // A connection error leaves the outcome unknown; the background release would meet
        // the same broken connection, and the lease bounds the lock anyway.
        self.armed = false;
        outcome
    }

    /// Gives back a grant the caller will not get, because the acquisition failed after it;
    /// the acquisition's error is what the caller hears about, so this one is only logged
    /// (the lease ends the lock anyway).
    pub(crate) async fn give_back(self) {
        if let Err(err) = self.pay().await {
            tracing::debug!(%err, "giving back a grant after a failed acquisition");
        }
    }
}

impl Drop for OwedRelease {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (hold, owner) = (self.hold.clone(), self.owner.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let pending = hold.background();
                runtime.spawn(async move {
                    let _pending = pending;
                    match hold.release(&owner).await {
                        Ok(_) => tracing::debug!(lock = hold.name(), "released in background"),
                        Err(err) => tracing::debug!(lock = hold.name(), %err, "background release"),
                    }
                });
            }
            Err(_) => tracing::warn!(
                lock = self.hold.name(),
                "lock dropped outside a Tokio runtime; its lease will end it"
            ),
        }
    }
}
