//! A model of the `Redlock` handover across clients (issue 31), checked exhaustively with
//! `stateright`: three nodes, a release on each node hands that node to the process waiting in
//! line there, and the waiter holds once a majority of nodes handed it the lock under the
//! nonce of its latest attempt, without asking again.
//!
//! Modelled (`redlock/mod.rs`, the nodes' `acquire.lua` and `release.lua`, `wait/queue.lua`'s
//! `hand_over`):
//! - `H` holds the lock on every node from tick 0 (its keys expire at `LEASE`) and may stop at
//!   any time and release, each node's release running as a step of its own, in any order, or
//!   never (a crash);
//! - `Q` makes one first attempt, in one step (a smaller model; `P`'s nodes and `H`'s run
//!   apart): on every node `SET NX` takes a free key (line or no line); `Q` holds if a
//!   majority granted (the greatest token, the granting nodes' counters raised to it), else
//!   gives back what it got;
//! - `P` is a waiting process: each attempt asks every node with the line's token and a new
//!   nonce; a node refuses (renewing `P`'s place there until its exec time + `PLACE`, with the
//!   nonce registered) or grants a free key or one already `P`'s (a full lease, a new token);
//!   once every node ran it (a refused waiting attempt hears every node out), a majority in
//!   time holds, else the grants are given back (handed on, before `P` waits);
//! - a release whose key holds the caller's token hands the node to `P`'s token if `P`'s place
//!   there is live and registered (the key then expires when the place would have, the node's
//!   counter is taken past, and the grant is published with the registered nonce), else
//!   deletes the key. Each node's grants arrive in the order it published them (one channel
//!   per node), the nodes' in any order, late, or never (a grant heard after a newer attempt
//!   is as good as lost);
//! - `P` takes grants only under the nonce of its latest attempt, and holds once a majority of
//!   nodes has handed it the lock: with the greatest of their tokens (those nodes' counters
//!   raised to it, owner-checked), until its attempt's sending + `PLACE`;
//! - keys expire at the server's time (no handover then); a holder acts until its deadline.
//!
//! Not modelled, and tested on real servers instead (`tests/redlock.rs`): the ticket order of
//! several waiting processes, several waiters of one process, the nudge, cancellation, the
//! extension of a handed lease, nodes that lose their data.
//!
//! Checked in every reachable state: never two acting holders, and a holder's fencing token
//! greater than every earlier holder's; and `P` does get the lock by a handover in some run.
//! Two broken variants must be caught: holding on one node's handover (the `Mutex`'s rule), and
//! counting a handed lease from when the grant arrived.

mod models;

use stateright::{Checker, Model, Property};

const NODES: usize = 3;
const MAJORITY: usize = 2;
/// Ticks a lock lease lasts.
const LEASE: u8 = 2;
/// Ticks a place lease lasts.
const PLACE: u8 = 3;
/// The last tick.
const END: u8 = 3;
/// P's attempts at most.
const ATTEMPTS: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Ours,
    /// Holds on the first handover heard, as a `Mutex`'s waiter does.
    OneNode,
    /// Counts a handed lease from when the last grant it needed arrived.
    FromArrival,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Who {
    H,
    Q,
    /// P's line token.
    P,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Idle,
    /// An attempt sent at `sent` (P: with `nonce`); each node's answer once it ran it.
    Asking {
        sent: u8,
        nonce: u8,
        answers: [Option<Option<u8>>; NODES],
    },
    /// P only: refused; its places were renewed by the attempt sent at `sent` with `nonce`;
    /// the tokens handed to it under that nonce, by node, as heard so far.
    Waiting {
        sent: u8,
        nonce: u8,
        heard: [Option<u8>; NODES],
    },
    Holding {
        deadline: u8,
        token: u8,
    },
    /// Stopped acting; its release still to run on the nodes marked.
    Releasing([bool; NODES]),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// Each node's lock key: whose token, and when it expires.
    keys: [Option<(Who, u8)>; NODES],
    /// Each node's fencing counter.
    counters: [u8; NODES],
    /// P's place on each node: until when, and the nonce registered with it.
    places: [Option<(u8, u8)>; NODES],
    /// Grants published to P by each node and not yet heard, in order: (nonce, token).
    inbox: [Vec<(u8, u8)>; NODES],
    h: Side,
    q: Side,
    p: Side,
    /// P's next nonce.
    nonce: u8,
    last_token: u8,
    token_went_back: bool,
    handed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    /// A holder stops acting and sends its release to every node.
    Stop(Who),
    /// A release runs on a node.
    Release(Who, usize),
    /// Q's whole attempt.
    QAttempt,
    PSend,
    /// An attempt runs on a node.
    Exec(Who, usize),
    /// Every node answered the attempt: it is decided.
    Decide(Who),
    /// P hears the next grant a node published.
    PHear(usize),
}

struct RedlockHandover {
    variant: Variant,
}

fn side(state: &mut State, who: Who) -> &mut Side {
    match who {
        Who::H => &mut state.h,
        Who::Q => &mut state.q,
        Who::P => &mut state.p,
    }
}

impl RedlockHandover {
    fn acting(state: &State) -> usize {
        [state.h, state.q, state.p]
            .iter()
            .filter(|side| matches!(side, Side::Holding { deadline, .. } if state.now < *deadline))
            .count()
    }

    fn start(state: &mut State, token: u8) {
        if token <= state.last_token {
            state.token_went_back = true;
        }
        state.last_token = state.last_token.max(token);
    }

    /// `who`'s release runs on `node`: owner-checked; hands the node to P's token when P's
    /// place there is live and registered, else deletes the key.
    fn release(state: &mut State, who: Who, node: usize) {
        if !matches!(state.keys[node], Some((owner, _)) if owner == who) {
            return;
        }
        match state.places[node] {
            Some((until, nonce)) if until > state.now => {
                state.counters[node] += 1;
                state.keys[node] = Some((Who::P, until));
                state.places[node] = None;
                state.inbox[node].push((nonce, state.counters[node]));
            }
            _ => state.keys[node] = None,
        }
    }

    /// `who` takes the greatest of `tokens` (by node) and raises the counters of those nodes
    /// that still hold its key (owner-checked); the token if a majority then has it.
    fn raise(state: &mut State, who: Who, tokens: &[Option<u8>; NODES]) -> Option<u8> {
        let token = tokens.iter().flatten().copied().max()?;
        let mut at_token = 0;
        for (node, granted) in tokens.iter().enumerate() {
            if granted.is_some() && matches!(state.keys[node], Some((owner, _)) if owner == who) {
                state.counters[node] = state.counters[node].max(token);
                at_token += 1;
            }
        }
        (at_token >= MAJORITY).then_some(token)
    }
}

impl Model for RedlockHandover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            keys: [Some((Who::H, LEASE)); NODES],
            counters: [1; NODES],
            places: [None; NODES],
            inbox: Default::default(),
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
            match side {
                Side::Holding { .. } => actions.push(Action::Stop(who)),
                Side::Releasing(pending) => {
                    for node in (0..NODES).filter(|node| pending[*node]) {
                        actions.push(Action::Release(who, node));
                    }
                }
                Side::Asking { answers, .. } if who == Who::P => {
                    for node in (0..NODES).filter(|node| answers[*node].is_none()) {
                        actions.push(Action::Exec(who, node));
                    }
                    if answers.iter().all(Option::is_some) {
                        actions.push(Action::Decide(who));
                    }
                }
                _ => {}
            }
        }
        if state.q == Side::Idle {
            actions.push(Action::QAttempt);
        }
        if matches!(state.p, Side::Idle | Side::Waiting { .. }) && state.nonce < ATTEMPTS {
            actions.push(Action::PSend);
        }
        if let Side::Waiting { .. } = state.p {
            for node in (0..NODES).filter(|node| !state.inbox[*node].is_empty()) {
                actions.push(Action::PHear(node));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Tick => {
                state.now += 1;
                for key in &mut state.keys {
                    if matches!(key, Some((_, expiry)) if *expiry <= state.now) {
                        *key = None;
                    }
                }
            }
            Action::Stop(who) => *side(&mut state, who) = Side::Releasing([true; NODES]),
            Action::Release(who, node) => {
                Self::release(&mut state, who, node);
                if let Side::Releasing(pending) = side(&mut state, who) {
                    pending[node] = false;
                }
            }
            Action::QAttempt => {
                state.q = Side::Asking {
                    sent: now,
                    nonce: 0,
                    answers: [None; NODES],
                };
                for node in 0..NODES {
                    state = self.next_state(&state, Action::Exec(Who::Q, node))?;
                }
                state = self.next_state(&state, Action::Decide(Who::Q))?;
            }
            Action::PSend => {
                state.p = Side::Asking {
                    sent: now,
                    nonce: state.nonce,
                    answers: [None; NODES],
                };
                state.nonce += 1;
            }
            Action::Exec(who, node) => {
                let Side::Asking { nonce, .. } = *side(&mut state, who) else {
                    return None;
                };
                if matches!(state.places[node], Some((until, _)) if until <= now) {
                    state.places[node] = None;
                }
                let grant = match (who, state.keys[node]) {
                    // Q's SET NX: a free key only. P's script: a free key, or its own.
                    (_, None) | (Who::P, Some((Who::P, _))) => {
                        state.counters[node] += 1;
                        state.keys[node] = Some((who, now + LEASE));
                        if who == Who::P {
                            state.places[node] = None;
                        }
                        Some(state.counters[node])
                    }
                    (Who::P, Some(_)) => {
                        state.places[node] = Some((now + PLACE, nonce));
                        None
                    }
                    _ => None,
                };
                if let Side::Asking { answers, .. } = side(&mut state, who) {
                    answers[node] = Some(grant);
                }
            }
            Action::Decide(who) => {
                let Side::Asking {
                    sent,
                    nonce,
                    answers,
                } = *side(&mut state, who)
                else {
                    return None;
                };
                let tokens = answers.map(Option::flatten);
                let granted = tokens.iter().flatten().count();
                let won = if granted >= MAJORITY && now < sent + LEASE {
                    Self::raise(&mut state, who, &tokens)
                } else {
                    None
                };
                *side(&mut state, who) = match won {
                    Some(token) => {
                        Self::start(&mut state, token);
                        Side::Holding {
                            deadline: sent + LEASE,
                            token,
                        }
                    }
                    None => {
                        // Given back on every node that granted, before it goes on.
                        for node in (0..NODES).filter(|node| tokens[*node].is_some()) {
                            Self::release(&mut state, who, node);
                        }
                        match who {
                            Who::P => Side::Waiting {
                                sent,
                                nonce,
                                heard: [None; NODES],
                            },
                            _ => Side::Releasing([false; NODES]),
                        }
                    }
                };
            }
            Action::PHear(node) => {
                let Side::Waiting {
                    sent,
                    nonce,
                    mut heard,
                } = state.p
                else {
                    return None;
                };
                let (grant_nonce, token) = state.inbox[node].remove(0);
                if grant_nonce == nonce {
                    heard[node] = Some(token);
                }
                let (needed, from) = match self.variant {
                    Variant::Ours => (MAJORITY, sent),
                    Variant::OneNode => (1, sent),
                    Variant::FromArrival => (MAJORITY, now),
                };
                let held = if heard.iter().flatten().count() >= needed && now < from + PLACE {
                    match self.variant {
                        Variant::OneNode => heard.iter().flatten().copied().max(),
                        _ => Self::raise(&mut state, Who::P, &heard),
                    }
                } else {
                    None
                };
                state.p = match held {
                    Some(token) => {
                        Self::start(&mut state, token);
                        state.handed = true;
                        Side::Holding {
                            deadline: from + PLACE,
                            token,
                        }
                    }
                    // Otherwise P goes on waiting (and may ask again).
                    None => Side::Waiting { sent, nonce, heard },
                };
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                RedlockHandover::acting(state) <= 1
            }),
            Property::always("tokens grow", |_, state: &State| !state.token_went_back),
            Property::sometimes("a handover is taken", |_, state: &State| state.handed),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<RedlockHandover> {
    models::explore(RedlockHandover { variant })
}

#[test]
fn the_redlock_handover_keeps_exclusion_and_token_order_in_every_reachable_state() {
    models::assert_holds(
        RedlockHandover {
            variant: Variant::Ours,
        },
        10_000,
    );
}

#[test]
fn holding_on_one_nodes_handover_lets_two_holders_act() {
    check(Variant::OneNode).assert_any_discovery("mutual exclusion");
}

#[test]
fn counting_a_handed_lease_from_its_arrival_lets_two_holders_act() {
    check(Variant::FromArrival).assert_any_discovery("mutual exclusion");
}
