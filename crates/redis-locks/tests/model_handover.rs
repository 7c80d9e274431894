//! A model of the `Mutex` handover (issue 11), checked exhaustively with `stateright`: a
//! release hands the lock straight to the first process in line, and that process's waiter
//! holds it on the published grant alone.
//!
//! Modelled (`engine/string_lock/acquire.lua` and `release.lua`, `wait/queue.lua`'s `hand_over`):
//! - `H` holds the lock from tick 0 (its key expires at `LEASE`) and may release it at any
//!   time, or never (a crash);
//! - `Q` is a contender on the fast path: its `SET NX` takes the lock whenever the key is free,
//!   line or no line (the pipeline does not look at the queue); it counts its lease from when
//!   it sent the request, gives back a grant that came back late, and releases (handing over,
//!   like any release);
//! - `P` is a waiting process: every attempt asks with the line's owner token and a new nonce;
//!   a refused attempt renews P's place (until its exec time + `PLACE`) and registers the
//!   nonce; a free lock (or one already P's token's: a grant whose wake-up was missed) is
//!   granted to it. A refusal's reply may come back at any later time;
//! - a release whose key holds the caller's token hands the lock to P's token if P's place is
//!   still live and registered: the key then expires when the place would have, a new fencing
//!   token is taken, and the grant is published with the registered nonce. Published grants
//!   may be delayed or lost;
//! - P takes a grant only under the nonce of its latest refused attempt, counting the lease
//!   from when that attempt was sent, for `PLACE` ticks, and only while that still holds;
//!   otherwise it asks again (which finds a grant to its token its own);
//! - keys expire at the server's time; a holder acts until its deadline.
//!
//! Not modelled, and tested against a real server instead (`tests/handover.rs`,
//! `tests/queue_scripts.rs`): several waiters of one process taking turns with the line's
//! token, cancelled attempts, leaving the line, a second waiting process, the extension of a
//! handed lease, and liveness. Grants published before P's latest attempt stay in its inbox
//! (a message already on its way still reaches a new listener): the nonce rule must hold
//! without relying on a fresh listener.
//!
//! Checked in every reachable state: never two acting holders, and a holder's fencing token
//! is greater than every earlier holder's; and P does get the lock by a handover in some run.
//! Two broken variants must be caught: taking a grant under any nonce (an old grant, made
//! before a refusal that found the lock another's), and counting a handed lease from when the
//! grant arrived.

mod models;

use stateright::{Checker, Model, Property};

/// Ticks a lock lease lasts.
const LEASE: u8 = 3;
/// Ticks a place lease lasts.
const PLACE: u8 = 2;
/// The last tick.
const END: u8 = 7;
/// P's attempts at most.
const ATTEMPTS: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Ours,
    /// Takes a grant whatever its nonce.
    AnyNonce,
    /// Counts a handed lease from when the grant arrived.
    FromArrival,
}

/// Who a lock key or a holding belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    H,
    Q,
    /// P's line token.
    P,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    /// Asking nothing (P: between attempts; Q: not yet asked).
    Idle,
    /// A request sent at `sent` (P: with `nonce`), not yet run by the server.
    Sent {
        sent: u8,
        nonce: u8,
    },
    /// Run; the reply (granted with a token, or not) is on its way.
    Reply {
        sent: u8,
        nonce: u8,
        granted: Option<u8>,
    },
    /// P only: refused; its place was renewed by the attempt sent at `sent` with `nonce`.
    Waiting {
        sent: u8,
        nonce: u8,
    },
    /// Holding until `deadline` with fencing token `token`.
    Holding {
        deadline: u8,
        token: u8,
    },
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// The lock key: whose token, and when it expires.
    key: Option<(Who, u8)>,
    /// The fencing counter.
    counter: u8,
    /// P's place: until when, and the nonce registered with it.
    place: Option<(u8, u8)>,
    /// Grants published to P and not yet heard or lost: (nonce, token).
    inbox: Vec<(u8, u8)>,
    h: Side,
    q: Side,
    p: Side,
    /// P's next nonce.
    nonce: u8,
    /// The highest token any holding started with.
    last_token: u8,
    /// A holding started with a token not above an earlier one.
    token_went_back: bool,
    /// P took a handed-over grant.
    handed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Release(Who),
    QSend,
    QExec,
    QDeliver,
    PSend,
    PExec,
    PDeliver,
    /// P's listener hears the grant at this index of its inbox.
    PHear(usize),
    /// The grant at this index is lost.
    PLose(usize),
}

struct HandoverModel {
    variant: Variant,
}

impl HandoverModel {
    fn acting(state: &State) -> usize {
        [state.h, state.q, state.p]
            .iter()
            .filter(|side| matches!(side, Side::Holding { deadline, .. } if state.now < *deadline))
            .count()
    }

    /// A holding starts with `token`.
    fn start(state: &mut State, token: u8) {
        if token <= state.last_token {
            state.token_went_back = true;
        }
        state.last_token = state.last_token.max(token);
    }

    /// A grant (`Some(token)`) or a refusal of a request sent at `sent` comes back to `who`:
    /// a timely grant starts a holding until `sent + LEASE`; a late one is given back by owner
    /// token (then `late` is what `who` does next); a refusal is `refused`.
    fn delivered(
        state: &mut State,
        who: Who,
        sent: u8,
        granted: Option<u8>,
        (late, refused): (Side, Side),
    ) -> Side {
        match granted {
            Some(token) if state.now < sent + LEASE => {
                Self::start(state, token);
                Side::Holding {
                    deadline: sent + LEASE,
                    token,
                }
            }
            Some(_) => {
                Self::release(state, who);
                late
            }
            None => refused,
        }
    }

    /// The server runs a release by `who`'s token (owner-checked): hands the lock to P's token
    /// when P's place is live and registered, else deletes the key.
    fn release(state: &mut State, who: Who) {
        if !matches!(state.key, Some((owner, _)) if owner == who) {
            return;
        }
        match state.place {
            Some((until, nonce)) if until > state.now => {
                state.counter += 1;
                state.key = Some((Who::P, until));
                state.place = None;
                state.inbox.push((nonce, state.counter));
            }
            _ => state.key = None,
        }
    }
}

impl Model for HandoverModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            key: Some((Who::H, LEASE)),
            counter: 1,
            place: None,
            inbox: Vec::new(),
            h: Side::Holding {
                deadline: LEASE,
                token: 1,
            },
            q: Side::Idle,
            p: Side::Idle,
            nonce: 0,
            last_token: 1,
            token_went_back: false,
            handed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < END {
            actions.push(Action::Tick);
        }
        for (who, side) in [(Who::H, state.h), (Who::Q, state.q), (Who::P, state.p)] {
            if let Side::Holding { .. } = side {
                actions.push(Action::Release(who));
            }
        }
        match state.q {
            Side::Idle => actions.push(Action::QSend),
            Side::Sent { .. } => actions.push(Action::QExec),
            Side::Reply { .. } => actions.push(Action::QDeliver),
            _ => {}
        }
        match state.p {
            Side::Idle | Side::Waiting { .. } if state.nonce < ATTEMPTS => {
                actions.push(Action::PSend)
            }
            Side::Sent { .. } => actions.push(Action::PExec),
            Side::Reply { .. } => actions.push(Action::PDeliver),
            _ => {}
        }
        if let Side::Waiting { .. } = state.p {
            for index in 0..state.inbox.len() {
                actions.push(Action::PHear(index));
            }
        }
        for index in 0..state.inbox.len() {
            actions.push(Action::PLose(index));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => {
                state.now += 1;
                if matches!(state.key, Some((_, expiry)) if expiry <= state.now) {
                    state.key = None;
                }
            }
            Action::Release(who) => {
                Self::release(&mut state, who);
                match who {
                    Who::H => state.h = Side::Done,
                    Who::Q => state.q = Side::Done,
                    Who::P => state.p = Side::Done,
                }
            }
            Action::QSend => {
                state.q = Side::Sent {
                    sent: now,
                    nonce: 0,
                }
            }
            Action::QExec => {
                let Side::Sent { sent, nonce } = state.q else {
                    return None;
                };
                // The fast path's SET NX: a free key, line or no line.
                let granted = state.key.is_none().then(|| {
                    state.counter += 1;
                    state.key = Some((Who::Q, now + LEASE));
                    state.counter
                });
                state.q = Side::Reply {
                    sent,
                    nonce,
                    granted,
                };
            }
            Action::QDeliver => {
                let Side::Reply { sent, granted, .. } = state.q else {
                    return None;
                };
                let next = (Side::Done, Side::Done);
                state.q = Self::delivered(&mut state, Who::Q, sent, granted, next);
            }
            Action::PSend => {
                // A new listener; grants published before it may still be on their way to
                // it, so the inbox is kept (the nonce rule must hold without a fresh listener).
                state.p = Side::Sent {
                    sent: now,
                    nonce: state.nonce,
                };
                state.nonce += 1;
            }
            Action::PExec => {
                let Side::Sent { sent, nonce } = state.p else {
                    return None;
                };
                if matches!(state.place, Some((until, _)) if until <= now) {
                    state.place = None;
                }
                let granted = match state.key {
                    // Free (P is the only one in line), or already P's token's (a grant
                    // whose wake-up P did not hear): granted with a full lease and a new token.
                    None | Some((Who::P, _)) => {
                        state.counter += 1;
                        state.key = Some((Who::P, now + LEASE));
                        state.place = None;
                        Some(state.counter)
                    }
                    Some(_) => {
                        state.place = Some((now + PLACE, nonce));
                        None
                    }
                };
                state.p = Side::Reply {
                    sent,
                    nonce,
                    granted,
                };
            }
            Action::PDeliver => {
                let Side::Reply {
                    sent,
                    nonce,
                    granted,
                } = state.p
                else {
                    return None;
                };
                let next = (Side::Idle, Side::Waiting { sent, nonce });
                state.p = Self::delivered(&mut state, Who::P, sent, granted, next);
            }
            Action::PHear(index) => {
                let Side::Waiting { sent, nonce } = state.p else {
                    return None;
                };
                let (heard, token) = state.inbox.remove(index);
                let (from, nonce_ok) = match self.variant {
                    Variant::Ours => (sent, heard == nonce),
                    Variant::AnyNonce => (sent, true),
                    Variant::FromArrival => (now, heard == nonce),
                };
                if nonce_ok && now < from + PLACE {
                    Self::start(&mut state, token);
                    state.handed = true;
                    state.p = Side::Holding {
                        deadline: from + PLACE,
                        token,
                    };
                }
                // Otherwise P stays waiting and asks again.
            }
            Action::PLose(index) => {
                state.inbox.remove(index);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                HandoverModel::acting(state) <= 1
            }),
            Property::always("tokens grow", |_, state: &State| !state.token_went_back),
            Property::sometimes("a handover is taken", |_, state: &State| state.handed),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<HandoverModel> {
    models::explore(HandoverModel { variant })
}

#[test]
fn the_handover_keeps_exclusion_and_token_order_in_every_reachable_state() {
    models::assert_holds(
        HandoverModel {
            variant: Variant::Ours,
        },
        10_000,
    );
}

#[test]
fn taking_a_grant_under_any_nonce_lets_two_holders_act() {
    check(Variant::AnyNonce).assert_any_discovery("mutual exclusion");
}

#[test]
fn counting_a_handed_lease_from_its_arrival_lets_two_holders_act() {
    check(Variant::FromArrival).assert_any_discovery("mutual exclusion");
}
