//! Breaking a lock on purpose ([`Client::break_lock`]): for an operator whose holder died
//! without releasing, or hung. Every kind of lock on one node; a holder that was not dead
//! after all hears of it at its next renewal ([`LostReason::Broken`](crate::LostReason)).

use std::sync::LazyLock;

use redis::Value;

use crate::client::Client;
use crate::error::{Error, Phase, Result};
use crate::lease::BROKEN_MARK;
use crate::node::{LockScript, Registered};
use crate::token::{FENCE_LUA, FencingToken};
use crate::wait::LOCK_LUA;

/// Frees a lock of any kind: `{kind, token, holder...}` or `{'free', counter}`.
pub(crate) static BREAK: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[FENCE_LUA, LOCK_LUA, include_str!("break.lua")]));
inventory::submit!(Registered(|| &BREAK));

/// What [`Client::break_lock`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BrokenLock {
    /// What the name was held as: `mutex` (a `Mutex` or `FairMutex`), `rwlock`, `reentrant`
    /// or `semaphore`; `None` when nobody held it (then nothing was changed).
    pub kind: Option<String>,
    /// Who held it: each holder's owner token (a `Mutex`'s, a semaphore's), or each hold's
    /// mode and owner id (`"r owner-…"`, `"w owner-…"`).
    pub holders: Vec<String>,
    /// The fencing counter now: past every token handed out (when nothing was held, as it
    /// was).
    pub fencing_counter: FencingToken,
}

impl Client {
    /// Frees the lock `name` on purpose, whoever holds it: advances its fencing counter past
    /// every token handed out (so a holder that was not dead after all has its fenced writes
    /// refused once the next holder writes), marks every holder as broken (its `lost()` fires
    /// with [`LostReason::Broken`](crate::LostReason::Broken) at its next renewal), deletes
    /// the lock and wakes its waiters. A free lock is left as it is. A Redlock is broken node
    /// by node: call it on a client of each.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use redis_locks::Client;
    ///
    /// let client = Client::connect(&server.url()).await?;
    /// let guard = client.mutex("jobs:nightly")?.lock().await?;
    /// let broken = client.break_lock("jobs:nightly").await?;
    /// assert_eq!(broken.kind.as_deref(), Some("mutex"));
    /// assert!(broken.fencing_counter > guard.fencing_token());
    /// assert_eq!(client.break_lock("jobs:nightly").await?.kind, None, "free now");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`] as for [`Client::mutex`]; [`Error::WrongType`] when the key is
    /// no lock's or the counter is not one (nothing is changed); [`Error::Connection`].
    pub async fn break_lock(&self, name: &str) -> Result<BrokenLock> {
        let keys = self.keys(name)?;
        let mark = keys.companion(BROKEN_MARK);
        let reply: Vec<Value> = self
            .node()
            .run_script(
                Phase::Break,
                &BREAK,
                &[keys.lock(), keys.fence(), &mark],
                &[keys.wake_channel()],
            )
            .await?;
        decode(reply)
    }
}

/// Reads `break.lua`'s reply.
fn decode(reply: Vec<Value>) -> Result<BrokenLock> {
    let unexpected = |detail: String| Error::UnexpectedReply {
        phase: Phase::Break,
        detail,
    };
    let mut parts = reply.into_iter();
    let (Some(kind), Some(counter)) = (parts.next(), parts.next()) else {
        return Err(unexpected("a reply of fewer than two parts".into()));
    };
    let text = |value: Value| -> Result<String> {
        redis::from_redis_value(value).map_err(|err| unexpected(err.to_string()))
    };
    let kind = text(kind)?;
    let counter: u64 =
        redis::from_redis_value(counter).map_err(|err| unexpected(err.to_string()))?;
    let holders = parts.map(text).collect::<Result<Vec<_>>>()?;
    Ok(BrokenLock {
        kind: (kind != "free").then_some(kind),
        holders,
        fencing_counter: FencingToken::new(counter),
    })
}
