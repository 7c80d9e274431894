//! A model of the `MultiLock` protocol (one holder of several exclusive locks), checked
//! exhaustively with `stateright`: three resources, three clients wanting overlapping sets
//! given in different caller orders.
//!
//! Modelled: each resource is an exclusive lock (an owner, or free). A client sorts its set
//! into the one global order (in the library: by cluster slot, then name; here: by resource
//! index) and takes the locks one at a time in that order, waiting (and keeping what it has)
//! while the next one is held by another client; once it has them all it works, then releases
//! them all at once. Its total wait has a deadline, which may pass at any point while it is
//! still taking: it then gives up and releases at once everything it took.
//!
//! Checked in every reachable state: no deadlock (no cycle in the wait-for graph: clients
//! still taking, each waiting for a lock held by another one still taking), mutual exclusion
//! (no lock believed held by two clients, and the server's owner is the client that believes
//! it holds it), and no leaked lock (a client that finished or gave up holds nothing). Not
//! vacuous: all clients finish in one run. Broken variants must be caught: taking the locks
//! in the caller's order deadlocks, and giving up by releasing only the last lock taken leaks
//! the others.

mod models;

use stateright::{Checker, Model, Property};

const RESOURCES: usize = 3;
const CLIENTS: usize = 3;
/// Each client's set, in the caller's order: A [R1, R2], B [R2, R1], C [R3, R2, R1].
const WANTS: [&[usize]; CLIENTS] = [&[0, 1], &[1, 0], &[2, 1, 0]];

/// The protocol, or a broken variant of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The library's protocol.
    Ours,
    /// Takes the locks in the caller's order.
    CallerOrder,
    /// Gives up by releasing only the last lock taken.
    ReleaseLastOnGiveUp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Client {
    /// Has taken the first `taken` locks of its order; waits for the next one.
    Taking { taken: usize },
    /// Has them all.
    Working,
    /// Released them all.
    Done,
    /// Its wait deadline passed.
    GaveUp,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// Each lock's owner.
    owners: [Option<usize>; RESOURCES],
    clients: [Client; CLIENTS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    /// The client takes the next lock of its order (only when it is free).
    Take(usize),
    /// The client, working, releases all.
    Finish(usize),
    /// The client's wait deadline passes.
    GiveUp(usize),
}

struct MultiLockModel {
    variant: Variant,
}

impl MultiLockModel {
    /// The order in which `client` takes its locks.
    fn order(&self, client: usize) -> Vec<usize> {
        let mut order = WANTS[client].to_vec();
        if self.variant != Variant::CallerOrder {
            order.sort_unstable();
        }
        order
    }

    /// The locks `client` believes it holds.
    fn believed(&self, state: &State, client: usize) -> Vec<usize> {
        let order = self.order(client);
        match state.clients[client] {
            Client::Taking { taken } => order[..taken].to_vec(),
            Client::Working => order,
            Client::Done | Client::GaveUp => Vec::new(),
        }
    }

    /// The client `client` waits for: the holder of its next lock, if that one is still
    /// taking too (a working holder will finish).
    fn waits_for(&self, state: &State, client: usize) -> Option<usize> {
        let Client::Taking { taken } = state.clients[client] else {
            return None;
        };
        let next = *self.order(client).get(taken)?;
        let holder = state.owners[next].filter(|&holder| holder != client)?;
        matches!(state.clients[holder], Client::Taking { .. }).then_some(holder)
    }

    /// Whether the wait-for graph has a cycle (each client waits for at most one other).
    fn deadlocked(&self, state: &State) -> bool {
        (0..CLIENTS).any(|start| {
            let mut at = start;
            for _ in 0..CLIENTS {
                match self.waits_for(state, at) {
                    Some(next) if next == start => return true,
                    Some(next) => at = next,
                    None => return false,
                }
            }
            false
        })
    }

    fn release(state: &mut State, locks: &[usize]) {
        for &lock in locks {
            state.owners[lock] = None;
        }
    }
}

impl Model for MultiLockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            owners: [None; RESOURCES],
            clients: [Client::Taking { taken: 0 }; CLIENTS],
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (c, client) in state.clients.iter().enumerate() {
            match *client {
                Client::Taking { taken } => {
                    if state.owners[self.order(c)[taken]].is_none() {
                        actions.push(Action::Take(c));
                    }
                    actions.push(Action::GiveUp(c));
                }
                Client::Working => actions.push(Action::Finish(c)),
                Client::Done | Client::GaveUp => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Take(c) => {
                let Client::Taking { taken } = state.clients[c] else {
                    return None;
                };
                let order = self.order(c);
                let lock = order[taken];
                if state.owners[lock].is_some() {
                    return None;
                }
                state.owners[lock] = Some(c);
                state.clients[c] = if taken + 1 == order.len() {
                    Client::Working
                } else {
                    Client::Taking { taken: taken + 1 }
                };
            }
            Action::Finish(c) => {
                Self::release(&mut state, &self.order(c));
                state.clients[c] = Client::Done;
            }
            Action::GiveUp(c) => {
                let Client::Taking { taken } = state.clients[c] else {
                    return None;
                };
                let order = self.order(c);
                let locks = match self.variant {
                    Variant::ReleaseLastOnGiveUp => &order[taken.saturating_sub(1)..taken],
                    _ => &order[..taken],
                };
                Self::release(&mut state, locks);
                state.clients[c] = Client::GaveUp;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no deadlock", |model: &Self, state: &State| {
                !model.deadlocked(state)
            }),
            Property::always("mutual exclusion", |model: &Self, state: &State| {
                let mut seen = [false; RESOURCES];
                (0..CLIENTS).all(|c| {
                    model.believed(state, c).into_iter().all(|lock| {
                        let first = !seen[lock];
                        seen[lock] = true;
                        first && state.owners[lock] == Some(c)
                    })
                })
            }),
            Property::always("no leaked lock", |_, state: &State| {
                state.owners.iter().flatten().all(|&owner| {
                    matches!(
                        state.clients[owner],
                        Client::Taking { .. } | Client::Working
                    )
                })
            }),
            Property::sometimes("all done", |_, state: &State| {
                state.clients.iter().all(|c| *c == Client::Done)
            }),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<MultiLockModel> {
    models::explore(MultiLockModel { variant })
}

#[test]
fn ordered_acquisition_never_deadlocks_and_leaks_nothing() {
    models::assert_holds(
        MultiLockModel {
            variant: Variant::Ours,
        },
        50,
    );
}

#[test]
fn taking_the_locks_in_the_callers_order_deadlocks() {
    let checker = check(Variant::CallerOrder);
    checker.assert_any_discovery("no deadlock");
    checker.assert_no_discovery("mutual exclusion");
    checker.assert_no_discovery("no leaked lock");
}

#[test]
fn giving_up_by_releasing_only_the_last_lock_leaks_the_others() {
    let checker = check(Variant::ReleaseLastOnGiveUp);
    checker.assert_any_discovery("no leaked lock");
    checker.assert_no_discovery("no deadlock");
    checker.assert_no_discovery("mutual exclusion");
}
