//! One acquire attempt of a [`Mutex`], asked in one of two ways: the fast way, a pipelined
//! `SET NX PX` + `INCR` that costs Redis no script, or the acquire script, which waiters use
//! because it also marks a held lock so that its release wakes them.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::Mutex;
use crate::error::{Error, Result};
use crate::guard::{LockKind, MutexGuard, OwedRelease};
use crate::lease::lease_deadline;
use crate::scripts::MUTEX_ACQUIRE;
use crate::token::{FencingToken, OwnerToken};

/// Counters below this were never seeded from the server clock (see `mutex_acquire.lua`).
const SEEDED: i64 = 1_000_000_000_000_000;

/// How an attempt asks Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// The pipeline `SET NX PX` + `INCR` (+ `PTTL` with `pttl`, to say how long a refusal
    /// lasts). Used by the first attempt of a `lock` and by every try-once call.
    Fast { pttl: bool },
    /// The acquire script, which marks a held lock so that its release publishes a wake-up.
    /// Used by waiters, after they listen on the wake channel. With `mark`, a granted lock
    /// is marked at once, for the waiters of this process queued behind this one.
    Waiting { mark: bool },
}

/// What one acquire attempt found.
pub(super) enum Attempt {
    Acquired(MutexGuard),
    /// Held by another owner; for how much longer, if known.
    Held(Option<Duration>),
}

impl Mutex {
    /// Asks Redis once for the lock, with a fresh owner token.
    pub(super) async fn attempt(&self, ask: Ask) -> Result<Attempt> {
        let owed = OwedRelease::new(
            self.client.clone(),
            self.keys.clone(),
            OwnerToken::random(),
            LockKind::Mutex,
        );
        match ask {
            Ask::Fast { pttl } => self.ask_fast(owed, pttl).await,
            Ask::Waiting { mark } => self.ask_script(owed, false, mark).await,
        }
    }

    /// `SET NX PX` + `INCR` of the fencing counter in one round trip, without a script.
    ///
    /// The two commands are not one atomic step, yet the token is as good as the script's:
    /// a grant is kept only if its reply came back within the lease, and then the `INCR`
    /// ran while the lock key still held this owner (the key could not have expired, and
    /// only this owner deletes it) — so nobody else took the lock and a token in between.
    /// A late grant, or a counter that still needs its clock seed, is numbered by the
    /// script instead. A refused attempt advances the counter too; tokens only need to
    /// grow from one holder to the next.
    async fn ask_fast(&self, owed: OwedRelease, with_pttl: bool) -> Result<Attempt> {
        let (lock, fence) = (self.keys.lock(), self.keys.fence());
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("SET")
            .arg(lock)
            .arg(owed.owner().as_str())
            .arg("NX")
            .arg("PX")
            .arg(&*self.lease_ms)
            .cmd("INCR")
            .arg(fence);
        if with_pttl {
            pipe.cmd("PTTL").arg(lock);
        }
        let sent_at = Instant::now();
        // A connection error leaves the outcome open: `owed` drops armed and releases by
        // owner token in the background.
        let replies = self.client.run_pipeline("acquire", &pipe, lock).await?;
        let unexpected = |replies: &[Value]| Error::UnexpectedReply {
            phase: "acquire",
            detail: format!("{replies:?}"),
        };
        let (set, counter, pttl) = match replies.as_slice() {
            [set, counter] => (set, counter, None),
            [set, counter, pttl] => (set, counter, Some(pttl)),
            // Keep `owed` armed: whatever happened is released by owner token.
            _ => return Err(unexpected(&replies)),
        };
        match (set, counter) {
            (Value::Okay, Value::Int(token)) => {
                let late = Instant::now() >= lease_deadline(sent_at, self.options.get_lease());
                if late || *token < SEEDED {
                    return self.ask_script(owed, true, false).await;
                }
                Ok(Attempt::Acquired(MutexGuard::new(
                    owed,
                    FencingToken::new(*token as u64),
                    sent_at,
                    &self.options,
                )))
            }
            (Value::Okay, Value::ServerError(err)) => {
                // Taken, but the counter is broken: give the lock back before saying so.
                let err = Error::from_redis("acquire", fence, err.clone().into());
                give_back(owed).await;
                Err(err)
            }
            // A key without expiry was not written by this library (perhaps not even a
            // string): the script says what it is, as the waiting path would.
            (Value::Nil, _) if matches!(pttl, Some(Value::Int(-1))) => {
                self.ask_script(owed, false, false).await
            }
            (Value::Nil, Value::ServerError(err)) => {
                // Refused, and the counter is broken too: the next holder could not be
                // numbered, so say so now rather than "held".
                owed.disarm();
                Err(Error::from_redis("acquire", fence, err.clone().into()))
            }
            (Value::Nil, _) => {
                owed.disarm();
                let retry_after = match pttl {
                    Some(Value::Int(ms)) => u64::try_from(*ms).ok().map(Duration::from_millis),
                    _ => None,
                };
                Ok(Attempt::Held(retry_after))
            }
            (Value::ServerError(err), _) => {
                // The SET was refused (a read-only replica, no permission): nothing written.
                owed.disarm();
                Err(Error::from_redis("acquire", lock, err.clone().into()))
            }
            _ => Err(unexpected(&replies)),
        }
    }

    /// The acquire script: grants a free lock (or re-grants one this owner already holds),
    /// or marks the holder's key so that its release wakes the waiters. `granted` says the
    /// fast attempt already took the lock with this owner token; `mark` marks a grant.
    async fn ask_script(&self, owed: OwedRelease, granted: bool, mark: bool) -> Result<Attempt> {
        let sent_at = Instant::now();
        let mark = if mark { "1" } else { "0" };
        let reply = self
            .client
            .run_script::<(i64, i64)>(
                "acquire",
                &MUTEX_ACQUIRE,
                &[self.keys.lock(), self.keys.fence()],
                &[owed.owner().as_str(), &self.lease_ms, mark],
            )
            .await;
        match reply {
            Ok((1, token)) => Ok(Attempt::Acquired(MutexGuard::new(
                owed,
                FencingToken::new(token as u64),
                sent_at,
                &self.options,
            ))),
            Ok((0, pttl)) => {
                owed.disarm();
                Ok(Attempt::Held(
                    u64::try_from(pttl).ok().map(Duration::from_millis),
                ))
            }
            // A reply the script never gives: keep `owed` armed, just in case.
            Ok((granted, value)) => Err(Error::UnexpectedReply {
                phase: "acquire",
                detail: format!("[{granted}, {value}]"),
            }),
            // An error reply from the server means the script wrote nothing: give back what
            // the fast attempt took, if anything. Anything else (a broken connection, an
            // unreadable reply) leaves the outcome open: `owed` is dropped armed and releases
            // by owner token in the background.
            Err(err @ (Error::WrongType { .. } | Error::Redis { .. })) => {
                if granted {
                    give_back(owed).await;
                } else {
                    owed.disarm();
                }
                Err(err)
            }
            Err(err) => Err(err),
        }
    }
}

/// Releases a grant the caller will not get, because the acquisition failed after it; the
/// acquisition's error is what the caller hears about, so this one is only logged (the lease
/// ends the lock anyway).
async fn give_back(owed: OwedRelease) {
    if let Err(err) = owed.pay().await {
        tracing::debug!(%err, "giving back a grant after a failed acquisition");
    }
}
