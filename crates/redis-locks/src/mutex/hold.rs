//! How a [`Mutex`](crate::Mutex) is released and extended by its owner: the lease core's
//! [`Hold`].

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use crate::error::Phase;
use crate::key::LockKeys;
use crate::lease::{Hold, HoldFuture, Released, lease_millis, owner_reply};
use crate::node::{LockScript, Node};
use crate::token::{FENCE_LUA, OwnerToken};
use crate::wait::{WAITERS_LUA, run_handing_over, run_on_line};

/// Owner-checked delete that hands the lock to the next waiter, or wakes it, if one marked
/// the lock: `1` released, `0` gone, `-1` another owner's.
pub(super) static RELEASE: LazyLock<LockScript> = LazyLock::new(|| {
    LockScript::new(&[
        include_str!("release_first.lua"),
        FENCE_LUA,
        WAITERS_LUA,
        include_str!("release.lua"),
    ])
});

/// Owner-checked `PEXPIRE`: `1` extended, `0` gone, `-1` another owner's.
pub(super) static EXTEND: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[WAITERS_LUA, include_str!("extend.lua")]));

/// A `Mutex`'s lock key on its node.
pub(crate) struct MutexHold {
    pub(crate) node: Node,
    pub(crate) keys: Arc<LockKeys>,
    /// Whether a release hands the lock straight to the first waiter in line (a `Mutex`), or
    /// only wakes it (a Redlock's node: a majority of nodes must grant it).
    pub(crate) hands_over: bool,
}

impl Hold for MutexHold {
    fn name(&self) -> &str {
        self.keys.name()
    }

    fn release<'a>(&'a self, owner: &'a OwnerToken) -> HoldFuture<'a, Released> {
        Box::pin(async move {
            let (node, keys, owner) = (&self.node, &self.keys, owner.as_str());
            let reply = if self.hands_over {
                run_handing_over(node, Phase::Release, &RELEASE, keys, owner, None).await?
            } else {
                run_on_line(node, Phase::Release, &RELEASE, keys, owner).await?
            };
            owner_reply(self.name(), Phase::Release, reply).map(|()| Released::Freed)
        })
    }

    fn extend<'a>(&'a self, owner: &'a OwnerToken, lease: Duration) -> HoldFuture<'a, ()> {
        Box::pin(async move {
            let millis = lease_millis(lease)?.to_string();
            let reply = self
                .node
                .run_script(
                    Phase::Extend,
                    &EXTEND,
                    &[self.keys.lock()],
                    &[owner.as_str(), &millis],
                )
                .await?;
            owner_reply(self.name(), Phase::Extend, reply)
        })
    }
}
