//! One acquire attempt of a [`Mutex`], asked in one of two ways: the fast way, a pipelined
//! `SET NX PX` + `INCR` that costs Redis no script, or the acquire script, which waiters use
//! because it also marks a held lock so that its release wakes them.

use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::Mutex;
use crate::client::NamingTurn;
use crate::error::{Error, Result};
use crate::guard::{LockKind, MutexGuard, OwedRelease};
use crate::lease::{MAX_LATE_GRANTS, is_late, too_slow};
use crate::scripts::{MUTEX_ACQUIRE, MUTEX_ACQUIRE_SOURCE};
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

/// What the script writes as the fencing counter's epoch on a grant (`mutex_acquire.lua`,
/// KEYS[3] and ARGV[4]).
enum Epoch {
    /// Nothing: the waiting path, or a grant asked again after it came back late.
    Keep,
    /// The name the connection had in the fast attempt's reply.
    Named(std::sync::Arc<str>),
    /// The connection had no name (it is new): give it a fresh one in the same pipeline,
    /// in this client's one naming turn.
    Fresh(NamingTurn),
}

/// How every connection name this crate gives starts; the rest is 128 random bits.
const NAME_PREFIX: &str = "redis-locks:";

/// The name of the connection a fast attempt ran on, as `CLIENT GETNAME` said.
enum Name<'a> {
    /// None: a new connection.
    None,
    /// One this crate gave it.
    Ours(&'a [u8]),
    /// One the application gave it (through `Client::connection`).
    Foreign,
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
            Ask::Waiting { mark } => self.ask_script(owed, Script::new(mark), deadline).await,
        }
    }

    /// `SET NX PX` + `INCR` of the fencing counter in one round trip, without a script, with
    /// the counter's epochs and the connection's name to vouch for the counter.
    ///
    /// The two commands are not one atomic step, yet the token is as good as the script's:
    /// a grant is kept only if its reply came back within the lease, and then the `INCR`
    /// ran while the lock key still held this owner (the key could not have expired, and
    /// only this owner deletes it) — so nobody else took the lock and a token in between.
    /// And the counter is trusted only when the connection the pipeline ran on is named
    /// among its epochs (`{K}:epoch`): the script brought the counter up to the server clock
    /// on this very connection, so this server process has held it since, and it did not
    /// come back old from a snapshot, an AOF or a replica (a connection name survives none
    /// of those). A late grant, or a counter not vouched for, is numbered by the script
    /// instead. A refused attempt advances the counter too; tokens only need to grow from
    /// one holder to the next.
    async fn ask_fast(
        &self,
        owed: OwedRelease,
        with_pttl: bool,
        deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let (lock, fence) = (self.keys.lock(), self.keys.fence());
        // The name this client believes its connection has; `CLIENT GETNAME` checks it.
        let believed = self.client.connection_name();
        // The vouching is read first, so it is settled before the INCR whatever happens to
        // the lease in between.
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .cmd("ZSCORE")
            .arg(self.keys.epoch())
            .arg(believed.as_deref().unwrap_or_default())
            .cmd("CLIENT")
            .arg("GETNAME")
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
        let keys = [lock, fence, self.keys.epoch()];
        let replies = self.client.run_pipeline("acquire", &pipe, &keys).await?;
        let unexpected = |replies: &[Value]| Error::UnexpectedReply {
            phase: "acquire",
            detail: format!("{replies:?}"),
        };
        let (epoch, name, set, counter, pttl) = match replies.as_slice() {
            [epoch, name, set, counter] => (epoch, name, set, counter, None),
            [epoch, name, set, counter, pttl] => (epoch, name, set, counter, Some(pttl)),
            // Keep `owed` armed: whatever happened is released by owner token.
            _ => return Err(unexpected(&replies)),
        };
        match (set, counter) {
            (Value::Okay, Value::Int(token)) => {
                // Only a name this crate gave the connection vouches for anything: one the
                // application chose may be shared by other connections and servers.
                let name = match name {
                    Value::Nil => Name::None,
                    Value::BulkString(name) if name.is_empty() => Name::None,
                    Value::BulkString(name) if name.starts_with(NAME_PREFIX.as_bytes()) => {
                        Name::Ours(name)
                    }
                    _ => Name::Foreign,
                };
                let vouched = !matches!(epoch, Value::Nil | Value::ServerError(_))
                    && matches!((&name, &believed), (Name::Ours(name), Some(believed)) if *name == believed.as_bytes());
                let late = is_late(sent_at, self.options.get_lease());
                if late || !vouched || *token < SEEDED {
                    let epoch = match name {
                        _ if vouched => Epoch::Keep,
                        Name::Ours(name) => {
                            let name: std::sync::Arc<str> = String::from_utf8_lossy(name).into();
                            self.client.set_connection_name(name.clone());
                            Epoch::Named(name)
                        }
                        // One naming at a time per client (the others would only rename the
                        // connection under each other), and none where names do not stick.
                        Name::None => match self.client.naming_turn() {
                            Some(turn) => Epoch::Fresh(turn),
                            None => Epoch::Keep,
                        },
                        // Leave the application's name alone; the script numbers every grant.
                        Name::Foreign => Epoch::Keep,
                    };
                    let script = Script {
                        epoch,
                        late: u32::from(late),
                        ..Script::new(false)
                    };
                    return self.ask_script(owed, script, deadline).await;
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
                let err = counter_error(fence, err);
                give_back(owed).await;
                Err(err)
            }
            // A key without expiry was not written by this library (perhaps not even a
            // string): the script says what it is, as the waiting path would.
            (Value::Nil, _) if matches!(pttl, Some(Value::Int(-1))) => {
                self.ask_script(owed, Script::new(false), deadline).await
            }
            (Value::Nil, Value::ServerError(err)) => {
                // Refused, and the counter is broken too: the next holder could not be
                // numbered, so say so now rather than "held".
                owed.disarm();
                Err(counter_error(fence, err))
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
        let keys = [self.keys.lock(), self.keys.fence(), self.keys.epoch()];
        let mark = if script.mark { "1" } else { "0" };
        loop {
            let sent_at = Instant::now();
            let owner = owed.owner().as_str();
            let reply = match &script.epoch {
                Epoch::Fresh(_turn) => {
                    let name = format!("{NAME_PREFIX}{}", OwnerToken::random().as_str());
                    self.client
                        .run_script_naming::<(i64, i64)>(
                            "acquire",
                            &name,
                            MUTEX_ACQUIRE_SOURCE.as_str(),
                            &keys,
                            &[owner, &self.lease_ms, mark, &name],
                        )
                        .await
                }
                epoch => {
                    let name = match epoch {
                        Epoch::Named(name) => name,
                        _ => "",
                    };
                    self.client
                        .run_script::<(i64, i64)>(
                            "acquire",
                            &MUTEX_ACQUIRE,
                            &keys,
                            &[owner, &self.lease_ms, mark, name],
                        )
                        .await
                }
            };
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
                    script.epoch = Epoch::Keep;
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
    /// Mark a grant at once, for waiters of this process queued behind this one.
    mark: bool,
    /// What to write as the counter's epoch.
    epoch: Epoch,
    /// How many grants of this acquisition came back after their lease.
    late: u32,
}

impl Script {
    /// A first call, writing no epoch.
    fn new(mark: bool) -> Script {
        Script {
            mark,
            epoch: Epoch::Keep,
            late: 0,
        }
    }
}

/// The error of an `INCR` of the fencing counter: a plain `ERR` means its value is not an
/// integer (or would overflow), which is data this lock did not write.
fn counter_error(fence: &str, err: &redis::ServerError) -> Error {
    let err: redis::RedisError = err.clone().into();
    if err.code() == Some("ERR") {
        return Error::WrongType {
            key: fence.to_string(),
            detail: err.to_string(),
        };
    }
    Error::from_redis("acquire", &[fence], err)
}

/// Releases a grant the caller will not get, because the acquisition failed after it; the
/// acquisition's error is what the caller hears about, so this one is only logged (the lease
/// ends the lock anyway).
async fn give_back(owed: OwedRelease) {
    if let Err(err) = owed.pay().await {
        tracing::debug!(%err, "giving back a grant after a failed acquisition");
    }
}
