//! One acquire attempt of a [`Mutex`], asked in one of two ways: the fast way, a pipelined
//! `SET NX PX` + the few lines of Lua that take the next fencing token, or the acquire
//! script, which waiters use because it also marks a held lock so that its release wakes
//! them.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::Mutex;
use crate::error::{Error, Result};
use crate::guard::{LockKind, MutexGuard, OwedRelease};
use crate::lease::{MAX_LATE_GRANTS, is_late, too_slow};
use crate::scripts::{FENCE_NEXT, MUTEX_ACQUIRE};
use crate::token::{FencingToken, OwnerToken};

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
    /// Asks Redis once for the lock, with a fresh owner token. `deadline` is the caller's
    /// wait budget: a grant that comes back after its lease is asked again (by owner token)
    /// only within it, and at most [`MAX_LATE_GRANTS`] times.
    pub(super) async fn attempt(&self, ask: Ask, deadline: Option<Instant>) -> Result<Attempt> {
        let owed = OwedRelease::new(
            self.client.clone(),
            self.keys.clone(),
            OwnerToken::random(),
            LockKind::Mutex,
        );
        match ask {
            Ask::Fast { pttl } => self.ask_fast(owed, pttl, deadline).await,
            Ask::Waiting { mark } => {
                let script = Script {
                    granted: false,
                    mark,
                    late: 0,
                };
                self.ask_script(owed, script, deadline).await
            }
        }
    }

    /// `SET NX PX` + the next fencing token (`fence_next.lua`, a few lines of Lua) in one
    /// round trip.
    ///
    /// The two commands are not one atomic step, yet the token is as good as the acquire
    /// script's: a grant is kept only if its reply came back within the lease, and then the
    /// token was taken while the lock key still held this owner (the key could not have
    /// expired, and only this owner deletes it) — so nobody else took the lock and a token in
    /// between. The token is `max(counter + 1, server clock in µs)`, so a counter that came
    /// back old is never reused. A late grant is numbered by the acquire script instead. A
    /// refused attempt takes a token too; tokens only need to grow from one holder to the
    /// next.
    async fn ask_fast(
        &self,
        owed: OwedRelease,
        with_pttl: bool,
        deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let (lock, fence) = (self.keys.lock(), self.keys.fence());
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("SET")
            .arg(lock)
            .arg(owed.owner().as_str())
            .arg("NX")
            .arg("PX")
            .arg(&*self.lease_ms)
            .invoke_script(&FENCE_NEXT.key(fence));
        if with_pttl {
            pipe.cmd("PTTL").arg(lock);
        }
        let sent_at = Instant::now();
        // A connection error leaves the outcome open: `owed` drops armed and releases by
        // owner token in the background.
        let keys = [lock, fence];
        let replies = self.client.run_pipeline("acquire", &pipe, &keys).await?;
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
        // The server lost its scripts (a restart, SCRIPT FLUSH): load the token script for
        // the next attempts, and let the acquire script (which loads itself) decide this one.
        let no_script = matches!(counter, Value::ServerError(err) if err.code() == "NOSCRIPT");
        if no_script {
            self.client
                .load_script("acquire", &FENCE_NEXT, &keys)
                .await?;
        }
        let script = |granted| Script {
            granted,
            mark: false,
            late: 0,
        };
        match (set, counter) {
            (Value::Okay, _) if no_script => self.ask_script(owed, script(true), deadline).await,
            (Value::Okay, Value::Int(token)) => {
                if is_late(sent_at, self.options.get_lease()) {
                    let late = Script {
                        late: 1,
                        ..script(true)
                    };
                    return self.ask_script(owed, late, deadline).await;
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
                let err = Error::from_redis("acquire", &keys, err.clone().into());
                give_back(owed).await;
                Err(err)
            }
            // A key without expiry was not written by this library (perhaps not even a
            // string): the script says what it is, as the waiting path would.
            (Value::Nil, _) if no_script || matches!(pttl, Some(Value::Int(-1))) => {
                self.ask_script(owed, script(false), deadline).await
            }
            (Value::Nil, Value::ServerError(err)) => {
                // Refused, and the counter is broken too: the next holder could not be
                // numbered, so say so now rather than "held".
                owed.disarm();
                Err(Error::from_redis("acquire", &keys, err.clone().into()))
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
                // The SET was refused (a read-only replica, no permission, a key of another
                // type): nothing written.
                owed.disarm();
                Err(Error::from_redis("acquire", &[lock], err.clone().into()))
            }
            _ => Err(unexpected(&replies)),
        }
    }

    /// The acquire script: grants a free lock (or re-grants one this owner already holds),
    /// or marks the holder's key so that its release wakes the waiters. A grant that comes
    /// back after its lease is asked again, by owner token, within `deadline` and at most
    /// [`MAX_LATE_GRANTS`] times in all; then it is given back and the call fails: a guard
    /// is never handed out already lost.
    async fn ask_script(
        &self,
        owed: OwedRelease,
        mut script: Script,
        deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let keys = [self.keys.lock(), self.keys.fence()];
        let mark = if script.mark { "1" } else { "0" };
        loop {
            let sent_at = Instant::now();
            let reply = self
                .client
                .run_script::<(i64, i64)>(
                    "acquire",
                    &MUTEX_ACQUIRE,
                    &keys,
                    &[owed.owner().as_str(), &self.lease_ms, mark],
                )
                .await;
            match reply {
                Ok((1, token)) => {
                    if !is_late(sent_at, self.options.get_lease()) {
                        return Ok(Attempt::Acquired(MutexGuard::new(
                            owed,
                            FencingToken::new(token as u64),
                            sent_at,
                            &self.options,
                        )));
                    }
                    // Granted, but the reply came after the lease: ask again by owner token
                    // (the script sets the lease anew), or give the grant back.
                    script.late += 1;
                    script.granted = true;
                    let over = deadline.is_some_and(|d| Instant::now() >= d);
                    if script.late >= MAX_LATE_GRANTS || over {
                        give_back(owed).await;
                        return Err(too_slow(self.options.get_lease(), script.late));
                    }
                }
                Ok((0, pttl)) => {
                    owed.disarm();
                    return Ok(Attempt::Held(
                        u64::try_from(pttl).ok().map(Duration::from_millis),
                    ));
                }
                // A reply the script never gives: keep `owed` armed, just in case.
                Ok((granted, value)) => {
                    return Err(Error::UnexpectedReply {
                        phase: "acquire",
                        detail: format!("[{granted}, {value}]"),
                    });
                }
                // An error reply from the server: the script takes back what it wrote when
                // the counter is broken, but a command refused midway (NOPERM, OOM) may leave
                // a grant behind, and an earlier attempt may have taken the lock: release by
                // owner token either way (a release that finds nothing changes nothing).
                // Anything else (a broken connection, an unreadable reply) leaves the outcome
                // open: `owed` is dropped armed and releases by owner token in the background.
                Err(err @ (Error::WrongType { .. } | Error::Redis { .. } | Error::Auth { .. })) => {
                    give_back(owed).await;
                    return Err(err);
                }
                Err(err) => return Err(err),
            }
        }
    }
}

/// One call of the acquire script, and what came before it.
struct Script {
    /// An earlier attempt already took the lock with this owner token.
    granted: bool,
    /// Mark a grant at once, for waiters of this process queued behind this one.
    mark: bool,
    /// How many grants of this acquisition came back after their lease.
    late: u32,
}

/// Releases a grant the caller will not get, because the acquisition failed after it; the
/// acquisition's error is what the caller hears about, so this one is only logged (the lease
/// ends the lock anyway).
async fn give_back(owed: OwedRelease) {
    if let Err(err) = owed.pay().await {
        tracing::debug!(%err, "giving back a grant after a failed acquisition");
    }
}
