//! Reading a lock's state on the server in one step (`inspect.lua`; the same layout for
//! `Mutex` and `FairMutex`).

use std::sync::LazyLock;
use std::time::Duration;

use crate::error::{Phase, Result};
use crate::key::LockKeys;
use crate::node::{LockScript, Node, Registered};
use crate::state::{Holder, LockState};
use crate::token::{FENCE_LUA, FencingToken};
use crate::wait::LOCK_LUA;

/// Read-only state: `{owner or '', pttl, counter, marked, listeners}`.
pub(super) static INSPECT: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[FENCE_LUA, LOCK_LUA, include_str!("inspect.lua")]));
inventory::submit!(Registered(|| &INSPECT));

/// Reads a lock's state in one script call (the same layout for `Mutex` and `FairMutex`).
pub(crate) async fn inspect(node: &Node, keys: &LockKeys) -> Result<LockState> {
    let (owner, pttl, counter, marked, listeners): (String, i64, u64, i64, u64) = node
        .run_script(
            Phase::Inspect,
            &INSPECT,
            &[keys.lock(), keys.fence()],
            &[keys.wake_channel()],
        )
        .await?;
    let fencing_counter = (counter > 0).then_some(FencingToken::new(counter));
    let holder = (!owner.is_empty()).then(|| Holder {
        owner,
        lease_remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
        waited_for: marked == 1,
    });
    Ok(LockState {
        holder,
        fencing_counter,
        listeners,
    })
}
