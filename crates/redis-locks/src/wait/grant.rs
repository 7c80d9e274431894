//! What an acquire attempt found, read once for every primitive: [`Try`] (granted, or held
//! by another owner), the acquire scripts' `{1, token} | {0, pttl}` reply ([`grant_reply`]),
//! and the late-grant rule ([`in_time`]): a grant whose reply came back after its lease is
//! asked again, or given back.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Phase, Result};
use crate::lease::{Lease, LeaseOptions, MAX_LATE_GRANTS, too_slow};

/// What one attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Try<T = Lease, H = Option<Duration>> {
    /// Granted: the lease the attempt took (or, before it is one, what the grant is made of:
    /// a node's fencing token, say).
    Won(T),
    /// Held by another owner (or others queue first); how long the holder's lease still
    /// runs, when known (or what else the refusal says).
    Held(H),
}

impl<T, H> Try<T, H> {
    /// The grant made into another.
    pub(crate) fn map<U>(self, grant: impl FnOnce(T) -> U) -> Try<U, H> {
        match self {
            Try::Won(won) => Try::Won(grant(won)),
            Try::Held(held) => Try::Held(held),
        }
    }
}

/// Reads an acquire script's reply: `{1, token}` granted with that fencing token, `{0, ms}`
/// held with `ms` of the holder's lease left, `{0, negative}` refused with no lease to wait
/// for (a key without expiry, others queue first).
///
/// # Errors
/// [`Error::UnexpectedReply`] for any other reply.
pub(crate) fn grant_reply((granted, value): (i64, i64)) -> Result<Try<u64>> {
    match (granted, value) {
        (1, token) if token > 0 => Ok(Try::Won(token.unsigned_abs())),
        (0, pttl) => Ok(Try::Held(
            u64::try_from(pttl).ok().map(Duration::from_millis),
        )),
        (granted, value) => Err(Error::UnexpectedReply {
            phase: Phase::Acquire,
            detail: format!("[{granted}, {value}]"),
        }),
    }
}

/// Runs `attempt` until its grant comes back within its lease (`lease`, less its drift
/// allowance), and says when the granted request was sent.
///
/// `attempt` is given how many of its grants came back late so far (`late_before` grants of
/// the same acquisition came back late before this call, and count too). A late grant is passed to
/// `late` with `false` and asked again (the scripts re-grant to the same owner token with a
/// fresh lease; an attempt with a fresh token gives the late one back there) within
/// `deadline` and at most [`MAX_LATE_GRANTS`] times in all; then it is passed to `late` with
/// `true`, to give it back, and the call fails: a guard is never handed out already lost.
///
/// # Errors
/// A grant late too often ([`too_slow`]); the attempt's.
pub(crate) async fn in_time<T, H, F, Fut, L, LFut>(
    lease: &LeaseOptions,
    deadline: Option<Instant>,
    late_before: u32,
    mut attempt: F,
    mut late: L,
) -> Result<Try<(T, Instant), H>>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<Try<T, H>>>,
    L: FnMut(T, bool) -> LFut,
    LFut: Future<Output = ()>,
{
    let mut count = late_before;
    loop {
        // Before the request goes out: the lease counts from no later.
        let sent_at = Instant::now();
        match attempt(count - late_before).await? {
            Try::Won(grant) if !lease.is_late(sent_at) => return Ok(Try::Won((grant, sent_at))),
            Try::Won(grant) => {
                count += 1;
                let over = deadline.is_some_and(|d| Instant::now() >= d);
                let give_up = count >= MAX_LATE_GRANTS || over;
                late(grant, give_up).await;
                if give_up {
                    return Err(too_slow(lease.get_lease(), count));
                }
            }
            Try::Held(held) => return Ok(Try::Held(held)),
        }
    }
}

/// A late grant that needs nothing done: asked again with the same owner token, or given
/// back by the caller's owed release.
pub(crate) async fn nothing_owed<T>(_grant: T, _give_up: bool) {}
