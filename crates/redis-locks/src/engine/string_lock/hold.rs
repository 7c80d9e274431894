//! How a [`Mutex`](crate::Mutex) is released and extended by its owner: the lease core's
//! [`Hold`].

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::lease::{Hold, HoldFuture, Released, extend_replicated_by, lease_millis, owner_reply};
use crate::node::{LockScript, Node, Registered, Replication, ScriptCall};
use crate::token::{FENCE_LUA, OwnerToken};
use crate::wait::{LOCK_LUA, QUEUE_LUA, run_handing_over, run_on_line};

use super::clock_proposal;

/// Owner-checked delete that hands the lock to the next waiter, or wakes it, if one marked
/// the lock: `1` released, `0` gone, `-1` another owner's.
pub(super) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("release_first.lua"),
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("release.lua"),
    ])
});
inventory::submit!(Registered(|| &RELEASE));

/// Owner-checked `PEXPIRE`: `1` extended, `0` gone (or `2` restored, when asked), `-1`
/// another owner's.
pub(super) static EXTEND: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, include_str!("extend.lua")]));
inventory::submit!(Registered(|| &EXTEND));

/// Many owner-checked `PEXPIRE`s in one call, the watchdog's batch: for each lock, what
/// [`EXTEND`] would reply, `-2` where it would answer `WRONGTYPE`.
pub(super) static EXTEND_MANY: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[LOCK_LUA, include_str!("extend_many.lua")]));
inventory::submit!(Registered(|| &EXTEND_MANY));

/// A `Mutex`'s lock key on its node.
pub(crate) struct StringHold {
    pub(crate) node: Node,
    pub(crate) keys: Arc<LockKeys>,
    /// Whether a release hands the lock straight to the first waiter in line (a `Mutex`, a
    /// Redlock's node), or only wakes it.
    pub(crate) hands_over: bool,
    /// Whether a handover's fencing token is seeded from this client's clock
    /// ([`clock_proposal`], a Redlock's node: its nodes then hand over under one token)
    /// rather than the server's.
    pub(crate) proposes: bool,
}

impl StringHold {
    /// As [`Hold::extend`], and a key that is gone is restored to `owner` with the lease
    /// (`extend.lua`, `ARGV[3]`): a Redlock's renewal. `Ok(true)` extended, `Ok(false)`
    /// restored (no proof that `owner` held the lock on this node meanwhile).
    ///
    /// # Errors
    /// As [`Hold::extend`]: [`Error::NotHeld`] (`Taken`) when another
    /// owner's token is there.
    pub(crate) async fn extend_or_restore(
        &self,
        owner: &OwnerToken,
        lease: Duration,
    ) -> Result<bool> {
        match self.run_extend(owner, lease, true).await? {
            2 => Ok(false),
            reply => owner_reply(self.name(), Phase::Extend, reply).map(|()| true),
        }
    }

    /// As [`Hold::release`], a handover numbered from `proposal` when given (`release.lua`,
    /// `ARGV[3]`: the nodes of one Redlock release are given one, so that they hand over
    /// under one token).
    ///
    /// # Errors
    /// As [`Hold::release`].
    pub(crate) async fn release_proposing(
        &self,
        owner: &OwnerToken,
        proposal: Option<&str>,
    ) -> Result<Released> {
        let (node, keys, owner) = (&self.node, &self.keys, owner.as_str());
        let reply = if self.hands_over {
            run_handing_over(node, Phase::Release, &RELEASE, keys, owner, proposal).await?
        } else {
            run_on_line(node, Phase::Release, &RELEASE, keys, owner).await?
        };
        owner_reply(self.name(), Phase::Release, reply).map(|()| Released::Freed)
    }

    /// `extend.lua`'s reply for `owner` and `lease`, restoring a gone key with `restore`.
    async fn run_extend(&self, owner: &OwnerToken, lease: Duration, restore: bool) -> Result<i64> {
        let args = extend_args(owner, lease, restore)?;
        let args = args.each_ref().map(String::as_str);
        self.node
            .run_script(Phase::Extend, &EXTEND, &[self.keys.lock()], &args)
            .await
    }
}

/// `extend.lua`'s ARGV: `owner`'s token, `lease` in milliseconds, and whether a gone key is
/// restored.
fn extend_args(owner: &OwnerToken, lease: Duration, restore: bool) -> Result<[String; 3]> {
    let restore = if restore { "1" } else { "" };
    Ok([
        owner.as_str().to_string(),
        lease_millis(lease)?.to_string(),
        restore.to_string(),
    ])
}

impl Hold for StringHold {
    fn keys_on(&self) -> Option<(&crate::node::Node, &crate::key::LockKeys)> {
        Some((&self.node, &self.keys))
    }

    fn held_once(&self) -> bool {
        true
    }

    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Mutex
    }

    fn name(&self) -> &str {
        self.keys.name()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let proposal = self.proposes.then(|| clock_proposal().to_string());
            self.release_proposing(owner, proposal.as_deref()).await
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let reply = self.run_extend(owner, lease, false).await?;
            owner_reply(self.name(), Phase::Extend, reply)
        })
    }

    fn extend_on(&self) -> Option<(&Node, &str)> {
        Some((&self.node, self.keys.lock()))
    }

    fn extend_call(&self, owner: &OwnerToken, lease: Duration) -> Result<ScriptCall<'_>> {
        Ok(ScriptCall {
            script: &EXTEND,
            keys: vec![self.keys.lock()],
            args: extend_args(owner, lease, false)?.into(),
        })
    }

    fn extend_many(&self) -> Option<&'static LockScript> {
        Some(&EXTEND_MANY)
    }

    fn extend_reply(&self, reply: i64) -> Result<()> {
        match reply {
            -2 => Err(Error::WrongType {
                key: self.keys.lock().to_string(),
                detail: "the lock key is not a string".into(),
            }),
            reply => owner_reply(self.name(), Phase::Extend, reply),
        }
    }

    fn extend_replicated<'a>(
        &'a self,
        owner: &'a OwnerToken,
        lease: Duration,
        replication: &'a Replication,
    ) -> HoldFuture<'a, u32> {
        Box::pin(async move {
            let args = extend_args(owner, lease, false)?;
            let args = args.each_ref().map(String::as_str);
            extend_replicated_by(
                &self.node,
                &EXTEND,
                self.keys.lock(),
                &args,
                replication,
                self.name(),
                |reply| owner_reply(self.name(), Phase::Extend, reply),
            )
            .await
        })
    }
}
