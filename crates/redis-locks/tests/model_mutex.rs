//! A model of the `Mutex` protocol, checked exhaustively with `stateright` over a small
//! configuration: two clients, two acquisitions each, a lease of 2 ticks, 7 ticks of time.
//!
//! What is modelled is what the safety argument rests on:
//! - the fast first attempt is a *pipeline*, not a script: `SET K owner NX PX lease` and
//!   `INCR {K}:fence` are two server steps, and other clients' commands may run between them;
//! - the server expires the key at its own time (the lease counted from when it ran the SET);
//! - replies may be delayed (time passes while they are in flight) or lost (the client then
//!   releases by owner token, as its owed release does);
//! - a client counts on the lock until `sent + lease` (when it *sent* the request), and gives a
//!   grant that comes back after that back instead of acting on it;
//! - release is owner-checked; a client may crash at any point.
//!
//! Checked in every reachable state: never two clients acting as holder at once (a client
//! acts while it holds a guard and its lease deadline has not passed), a holder's token is
//! greater than every earlier holder's, and no lock key is ever left without an expiry. Each
//! deliberately broken variant below must be caught by the checker, so the model can fail.

mod models;

use stateright::{Checker, Model, Property};

/// Ticks a lease lasts.
const LEASE: u8 = 2;
/// The last tick of the model.
const END: u8 = 6;
/// Clients.
const CLIENTS: usize = 2;
/// Acquisitions each client makes.
const ROUNDS: u8 = 2;

/// The protocol, or a broken variant of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The library's protocol.
    Ours,
    /// Counts the lease from when the reply arrived, not from when the request was sent.
    LeaseFromReply,
    /// Acts on a grant whose reply came back after its lease.
    TrustLateGrants,
    /// Releases with a plain `DEL`, not owner-checked.
    UncheckedRelease,
    /// Seed 000's `SETNX` then `EXPIRE`: two steps, a crash between them leaves no expiry.
    SetnxThenExpire,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Client {
    /// Not holding; `left` acquisitions to go.
    Idle { left: u8 },
    /// The pipeline was sent at `sent`; its `SET` has not run yet.
    SetSent { sent: u8, left: u8 },
    /// The `SET` ran (`taken`); for `SetnxThenExpire`, the `EXPIRE` is still to come.
    ExpirePending { sent: u8, left: u8 },
    /// The `SET` ran (`taken`); the `INCR` has not run yet.
    IncrPending { sent: u8, left: u8, taken: bool },
    /// Both ran; the reply is on its way.
    Reply {
        sent: u8,
        left: u8,
        taken: bool,
        token: u8,
    },
    /// Holding a guard: acting until `deadline`.
    Holding { token: u8, deadline: u8, left: u8 },
    /// Crashed, or done.
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// The lock key: its owner, and when the server expires it (`None`: no expiry).
    key: Option<(usize, Option<u8>)>,
    /// The fencing counter.
    counter: u8,
    clients: [Client; CLIENTS],
    /// The greatest token a client has started holding with.
    last_token: u8,
    /// A client started holding with a token not above `last_token`.
    token_regressed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    ExecSet(usize),
    ExecExpire(usize),
    ExecIncr(usize),
    Deliver(usize),
    LoseReply(usize),
    Release(usize),
    Crash(usize),
}

struct MutexModel {
    variant: Variant,
}

impl MutexModel {
    /// Clients acting as holder in `state`.
    fn acting(state: &State) -> usize {
        state
            .clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { deadline, .. } if state.now < *deadline))
            .count()
    }

    /// A release by `client` (its guard's, or the owed release of a lost reply).
    fn release(&self, state: &mut State, client: usize) {
        let owned = matches!(state.key, Some((owner, _)) if owner == client);
        if owned || self.variant == Variant::UncheckedRelease {
            state.key = None;
        }
    }

    fn after(left: u8) -> Client {
        match left {
            0 => Client::Gone,
            left => Client::Idle { left },
        }
    }
}

impl Model for MutexModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            key: None,
            counter: 0,
            clients: std::array::from_fn(|_| Client::Idle { left: ROUNDS }),
            last_token: 0,
            token_regressed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < END {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle { .. } => actions.push(Action::Send(c)),
                Client::SetSent { .. } => actions.push(Action::ExecSet(c)),
                Client::ExpirePending { .. } => actions.push(Action::ExecExpire(c)),
                Client::IncrPending { .. } => actions.push(Action::ExecIncr(c)),
                Client::Reply { .. } => {
                    actions.push(Action::Deliver(c));
                    actions.push(Action::LoseReply(c));
                }
                Client::Holding { .. } => actions.push(Action::Release(c)),
                Client::Gone => continue,
            }
            actions.push(Action::Crash(c));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                if let Some((_, Some(expiry))) = state.key
                    && expiry <= state.now
                {
                    state.key = None;
                }
            }
            Action::Send(c) => {
                let Client::Idle { left } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = Client::SetSent {
                    sent: state.now,
                    left,
                };
            }
            Action::ExecSet(c) => {
                let Client::SetSent { sent, left } = state.clients[c] else {
                    return None;
                };
                let taken = state.key.is_none();
                if self.variant == Variant::SetnxThenExpire {
                    if taken {
                        state.key = Some((c, None));
                        state.clients[c] = Client::ExpirePending { sent, left };
                    } else {
                        state.clients[c] = Client::IncrPending {
                            sent,
                            left,
                            taken: false,
                        };
                    }
                    return Some(state);
                }
                if taken {
                    state.key = Some((c, Some(state.now + LEASE)));
                }
                state.clients[c] = Client::IncrPending { sent, left, taken };
            }
            Action::ExecExpire(c) => {
                let Client::ExpirePending { sent, left } = state.clients[c] else {
                    return None;
                };
                if let Some((owner, expiry @ None)) = &mut state.key
                    && *owner == c
                {
                    *expiry = Some(state.now + LEASE);
                }
                state.clients[c] = Client::IncrPending {
                    sent,
                    left,
                    taken: true,
                };
            }
            Action::ExecIncr(c) => {
                let Client::IncrPending { sent, left, taken } = state.clients[c] else {
                    return None;
                };
                state.counter += 1;
                state.clients[c] = Client::Reply {
                    sent,
                    left,
                    taken,
                    token: state.counter,
                };
            }
            Action::Deliver(c) => {
                let Client::Reply {
                    sent,
                    left,
                    taken,
                    token,
                } = state.clients[c]
                else {
                    return None;
                };
                let left = left - 1;
                let late = state.now >= sent + LEASE;
                if !taken {
                    state.clients[c] = Self::after(left);
                } else if late && self.variant != Variant::TrustLateGrants {
                    // Given back: released by owner token.
                    self.release(&mut state, c);
                    state.clients[c] = Self::after(left);
                } else {
                    if token <= state.last_token {
                        state.token_regressed = true;
                    }
                    state.last_token = state.last_token.max(token);
                    let deadline = match self.variant {
                        Variant::LeaseFromReply => state.now + LEASE,
                        _ => sent + LEASE,
                    };
                    state.clients[c] = Client::Holding {
                        token,
                        deadline,
                        left,
                    };
                }
            }
            Action::LoseReply(c) => {
                let Client::Reply { left, .. } = state.clients[c] else {
                    return None;
                };
                // The outcome is unknown: the owed release goes out by owner token.
                self.release(&mut state, c);
                state.clients[c] = Self::after(left - 1);
            }
            Action::Release(c) => {
                let Client::Holding { left, .. } = state.clients[c] else {
                    return None;
                };
                self.release(&mut state, c);
                state.clients[c] = Self::after(left);
            }
            Action::Crash(c) => state.clients[c] = Client::Gone,
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                MutexModel::acting(state) <= 1
            }),
            Property::always("tokens increase", |_, state: &State| !state.token_regressed),
            Property::always("every key expires", |_, state: &State| {
                // A key without expiry is fine only while its owner is about to set one.
                match state.key {
                    Some((owner, None)) => {
                        matches!(state.clients[owner], Client::ExpirePending { .. })
                    }
                    _ => true,
                }
            }),
            // The model is not vacuous: both clients do hold, one after the other.
            Property::sometimes("both clients held", |_, state: &State| {
                state.last_token >= 2
                    && state
                        .clients
                        .iter()
                        .all(|c| matches!(c, Client::Holding { .. } | Client::Gone))
                    && MutexModel::acting(state) == 1
            }),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<MutexModel> {
    models::explore(MutexModel { variant })
}

#[test]
fn the_protocol_keeps_every_property_in_every_reachable_state() {
    models::assert_holds(
        MutexModel {
            variant: Variant::Ours,
        },
        1_000,
    );
}

#[test]
fn counting_the_lease_from_the_reply_lets_two_holders_act() {
    let checker = check(Variant::LeaseFromReply);
    checker.assert_any_discovery("mutual exclusion");
}

#[test]
fn acting_on_a_late_grant_breaks_token_order() {
    let checker = check(Variant::TrustLateGrants);
    checker.assert_any_discovery("tokens increase");
    checker.assert_no_discovery("mutual exclusion");
}

#[test]
fn a_release_that_is_not_owner_checked_lets_two_holders_act() {
    let checker = check(Variant::UncheckedRelease);
    checker.assert_any_discovery("mutual exclusion");
}

#[test]
fn setnx_then_expire_can_leave_a_key_that_never_expires() {
    let checker = check(Variant::SetnxThenExpire);
    checker.assert_any_discovery("every key expires");
}
