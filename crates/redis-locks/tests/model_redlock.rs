//! A model of the `Redlock` protocol, checked exhaustively with `stateright`: three nodes, two
//! clients, three acquisitions between them, a lease of 2 ticks, at most one node restart.
//!
//! Modelled: each node runs each client's request as its own step, in any order and at any
//! time (a node may also never answer: the client then decides without it); a grant sets the
//! key with the lease counted on the node and numbers it in one of the library's two ways
//! (one client each): the script's `max(counter + 1, proposal)` (a waiting attempt), or the
//! first attempt's pipeline, which increments it whether or not the key was granted and has
//! the script number a grant again where the node does not vouch for the counter on that
//! client's connection (its first grant there, or after the node lost its data); the
//! proposal is the client's clock when it sent the attempt. The client decides once a
//! majority granted (or refused), takes the greatest token of the grants and raises the
//! counter on each granting node behind it, owner-checked, node by node; it holds only if a
//! majority has the token and the validity (`sent + lease`) has not passed, and otherwise
//! releases on every node. A holder acts until `sent + lease`; releases are owner-checked.
//!
//! Checked: never two clients acting at once, and a holder's token greater than every earlier
//! holder's. Broken variants must be caught: no raise (tokens), and nodes that restart without
//! their data at once (mutual exclusion, as the crate docs warn). A node that restarts without
//! its data only once its keys would have expired (a delayed restart) keeps mutual exclusion.

mod models;

use stateright::{Checker, Model, Property};

const LEASE: u8 = 2;
const END: u8 = 3;
const NODES: usize = 3;
const MAJORITY: usize = 2;
const CLIENTS: usize = 2;
/// Acquisitions of each client: three in all (a failed attempt counts as one).
const ROUNDS: [u8; CLIENTS] = [2, 1];
/// Whether each client's attempts are first attempts (the pipeline) or waiting ones (the
/// script): one of each, so that both numberings meet (a choice per attempt multiplies the
/// states past what the suite can afford).
const FIRST: [bool; CLIENTS] = [true, false];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Ours,
    /// Hands out the greatest token without raising the others' counters.
    NoRaise,
    /// A node may lose its data (key and counter) at any time and serve again at once.
    ImmediateRestart,
    /// A node may lose its data only when it holds no live key (it came back after a lease).
    DelayedRestart,
}

/// One node's answer to an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Answer {
    Pending,
    Granted(u8),
    Held,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Client {
    Idle {
        left: u8,
    },
    Asking {
        sent: u8,
        left: u8,
        answers: [Answer; NODES],
    },
    /// Raising `token` on the nodes in `behind` not yet asked; `raised` have it.
    Raising {
        sent: u8,
        left: u8,
        token: u8,
        behind: [bool; NODES],
        raised: usize,
    },
    Holding {
        token: u8,
        deadline: u8,
        left: u8,
    },
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Node {
    key: Option<(usize, u8)>,
    counter: u8,
    /// Whether the node vouches for its counter on each client's connection (a script
    /// numbered a grant of that client there since the node last lost its data).
    vouched: [bool; CLIENTS],
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    nodes: [Node; NODES],
    clients: [Client; CLIENTS],
    last_token: u8,
    token_regressed: bool,
    /// A node lost its data once already (one restart per run keeps the model small).
    wiped: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    Acquire(usize, usize),
    Decide(usize),
    Raise(usize, usize),
    Release(usize),
    Wipe(usize),
}

struct RedlockModel {
    variant: Variant,
}

impl RedlockModel {
    fn acting(state: &State) -> usize {
        state
            .clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { deadline, .. } if state.now < *deadline))
            .count()
    }

    /// Owner-checked release on every node.
    fn release_all(state: &mut State, client: usize) {
        for node in &mut state.nodes {
            if matches!(node.key, Some((owner, _)) if owner == client) {
                node.key = None;
            }
        }
    }

    fn after(left: u8) -> Client {
        match left {
            0 => Client::Gone,
            left => Client::Idle { left },
        }
    }

    /// The client holds with `token`, or gives its grants back when the validity is gone.
    fn hold_or_give_back(state: &mut State, c: usize, sent: u8, left: u8, token: u8) {
        if state.now >= sent + LEASE {
            Self::release_all(state, c);
            state.clients[c] = Self::after(left - 1);
            return;
        }
        if token <= state.last_token {
            state.token_regressed = true;
        }
        state.last_token = state.last_token.max(token);
        state.clients[c] = Client::Holding {
            token,
            deadline: sent + LEASE,
            left: left - 1,
        };
    }
}

impl Model for RedlockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            nodes: std::array::from_fn(|_| Node {
                key: None,
                counter: 0,
                vouched: [false; CLIENTS],
            }),
            clients: std::array::from_fn(|c| Client::Idle { left: ROUNDS[c] }),
            last_token: 0,
            token_regressed: false,
            wiped: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < END {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                Client::Idle { .. } => actions.push(Action::Send(c)),
                Client::Asking { answers, .. } => {
                    for (n, answer) in answers.iter().enumerate() {
                        if *answer == Answer::Pending {
                            actions.push(Action::Acquire(c, n));
                        }
                    }
                    let granted = answers
                        .iter()
                        .filter(|a| matches!(a, Answer::Granted(_)))
                        .count();
                    let held = answers.iter().filter(|a| **a == Answer::Held).count();
                    // Decided by a majority either way; or a node never answers (timeout).
                    if granted >= MAJORITY || held >= MAJORITY || state.now >= END {
                        actions.push(Action::Decide(c));
                    }
                }
                Client::Raising { behind, .. } => {
                    for (n, pending) in behind.iter().enumerate() {
                        if *pending {
                            actions.push(Action::Raise(c, n));
                        }
                    }
                    actions.push(Action::Decide(c));
                }
                Client::Holding { .. } => actions.push(Action::Release(c)),
                Client::Gone => {}
            }
        }
        for (n, node) in state.nodes.iter().enumerate() {
            let may_wipe = match self.variant {
                Variant::ImmediateRestart => true,
                // Back only after its keys would have expired: it held none that was live.
                Variant::DelayedRestart => node.key.is_none(),
                _ => false,
            };
            if may_wipe && !state.wiped && (node.key.is_some() || node.counter > 0) {
                actions.push(Action::Wipe(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                for node in &mut state.nodes {
                    if matches!(node.key, Some((_, expiry)) if expiry <= state.now) {
                        node.key = None;
                    }
                }
            }
            Action::Send(c) => {
                let Client::Idle { left } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = Client::Asking {
                    sent: state.now,
                    left,
                    answers: [Answer::Pending; NODES],
                };
            }
            Action::Acquire(c, n) => {
                let Client::Asking {
                    sent,
                    ref mut answers,
                    ..
                } = state.clients[c]
                else {
                    return None;
                };
                let node = &mut state.nodes[n];
                let free = node.key.is_none();
                if free {
                    node.key = Some((c, state.now + LEASE));
                }
                // The proposal is the client's clock when it sent the attempt.
                if FIRST[c] {
                    // SET NX PX and INCR; a grant on a connection the node does not vouch
                    // for is numbered again by the script, which vouches from then on.
                    node.counter += 1;
                    if free && !node.vouched[c] {
                        node.counter = (node.counter + 1).max(sent);
                        node.vouched[c] = true;
                    }
                } else if free {
                    node.counter = (node.counter + 1).max(sent);
                }
                answers[n] = if free {
                    Answer::Granted(node.counter)
                } else {
                    Answer::Held
                };
            }
            Action::Decide(c) => match state.clients[c].clone() {
                Client::Asking {
                    sent,
                    left,
                    answers,
                    ..
                } => {
                    let grants: Vec<(usize, u8)> = answers
                        .iter()
                        .enumerate()
                        .filter_map(|(n, a)| match a {
                            Answer::Granted(t) => Some((n, *t)),
                            _ => None,
                        })
                        .collect();
                    if grants.len() < MAJORITY {
                        // Failed: release everywhere (a pending request may still land later
                        // and is released too, as the library's release follows it; the model
                        // drops it).
                        Self::release_all(&mut state, c);
                        state.clients[c] = Self::after(left - 1);
                        return Some(state);
                    }
                    let token = grants.iter().map(|(_, t)| *t).max().unwrap_or(0);
                    let mut behind = [false; NODES];
                    let mut raised = 0;
                    for (n, t) in &grants {
                        if *t < token && self.variant != Variant::NoRaise {
                            behind[*n] = true;
                        } else {
                            raised += 1;
                        }
                    }
                    if self.variant == Variant::NoRaise {
                        raised = grants.len();
                    }
                    state.clients[c] = Client::Raising {
                        sent,
                        left,
                        token,
                        behind,
                        raised,
                    };
                }
                Client::Raising {
                    sent,
                    left,
                    token,
                    raised,
                    ..
                } => {
                    if raised >= MAJORITY {
                        Self::hold_or_give_back(&mut state, c, sent, left, token);
                    } else {
                        Self::release_all(&mut state, c);
                        state.clients[c] = Self::after(left - 1);
                    }
                }
                _ => return None,
            },
            Action::Raise(c, n) => {
                let Client::Raising {
                    token,
                    ref mut behind,
                    ref mut raised,
                    ..
                } = state.clients[c]
                else {
                    return None;
                };
                behind[n] = false;
                let node = &mut state.nodes[n];
                if matches!(node.key, Some((owner, _)) if owner == c) {
                    node.counter = node.counter.max(token);
                    *raised += 1;
                }
            }
            Action::Release(c) => {
                let Client::Holding { left, .. } = state.clients[c] else {
                    return None;
                };
                Self::release_all(&mut state, c);
                state.clients[c] = Self::after(left);
            }
            Action::Wipe(n) => {
                state.nodes[n] = Node {
                    key: None,
                    counter: 0,
                    vouched: [false; CLIENTS],
                };
                state.wiped = true;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                RedlockModel::acting(state) <= 1
            }),
            Property::always("tokens increase", |_, state: &State| !state.token_regressed),
            Property::sometimes("both clients held", |_, state: &State| {
                state.last_token >= 2
                    && state
                        .clients
                        .iter()
                        .all(|c| matches!(c, Client::Holding { .. } | Client::Gone))
                    && RedlockModel::acting(state) == 1
            }),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<RedlockModel> {
    models::explore(RedlockModel { variant })
}

#[test]
fn the_protocol_keeps_exclusion_and_token_order_in_every_reachable_state() {
    models::assert_holds(
        RedlockModel {
            variant: Variant::Ours,
        },
        1_000,
    );
}

#[test]
fn without_the_raise_tokens_can_go_back() {
    let checker = check(Variant::NoRaise);
    checker.assert_any_discovery("tokens increase");
}

#[test]
fn a_node_restarting_without_its_data_at_once_lets_two_holders_act() {
    let checker = check(Variant::ImmediateRestart);
    checker.assert_any_discovery("mutual exclusion");
}

#[test]
fn a_delayed_restart_keeps_mutual_exclusion() {
    let checker = check(Variant::DelayedRestart);
    checker.assert_no_discovery("mutual exclusion");
}
