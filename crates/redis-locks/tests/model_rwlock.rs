//! A model of the `RwLock` protocol (and so of `ReentrantMutex`, its write side), checked
//! exhaustively with `stateright`: two readers and a writer, two acquisitions each, a lease of 2
//! ticks.
//!
//! Modelled: the lock is a hash of holds, each with its own deadline on the server's clock; an
//! acquire is one script (an atomic server step) that purges holds past their deadline, then
//! grants a read when no other owner's write hold is live, a write when no other owner's hold
//! is live, each with the next fencing token; replies may be delayed or lost (a lost one is
//! released by hold id); a client acts until `sent + lease` and gives back a grant that comes
//! back later than that; a writer may downgrade its hold to a read hold in one step; releases
//! remove the caller's own hold by hold id.
//!
//! Checked: a writer never acts beside another actor, a writer's token is greater than every
//! token handed out before it, and readers do act together (the model is not vacuous). Broken
//! variants must be caught: counting the lease from the reply, a read that ignores live write
//! holds, and a script that compares the holds' deadlines with a clock a tick ahead of the
//! server's (a client's clock, say, instead of `TIME`).

mod models;

use stateright::{Checker, Model, Property};

const LEASE: u8 = 2;
const END: u8 = 4;
/// Clients 0 and 1 read, client 2 writes (and may downgrade).
const CLIENTS: usize = 3;
const WRITER: usize = 2;
const ROUNDS: u8 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Ours,
    LeaseFromReply,
    ReadIgnoresWriter,
    /// The script compares hold deadlines with a clock a tick ahead of the server's: a write
    /// is granted while a read hold is still live.
    StaleClock,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mode {
    Read,
    Write,
}

/// One hold in the lock's hash: whose, which mode, until when (server clock), its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Hold {
    owner: usize,
    mode: Mode,
    deadline: u8,
    token: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Client {
    Idle {
        left: u8,
    },
    Sent {
        sent: u8,
        left: u8,
    },
    Reply {
        sent: u8,
        left: u8,
        token: Option<u8>,
    },
    Holding {
        mode: Mode,
        deadline: u8,
        left: u8,
    },
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    holds: Vec<Hold>,
    counter: u8,
    clients: [Client; CLIENTS],
    /// A write hold started with a token not above every token handed out before it.
    token_regressed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    Exec(usize),
    Deliver(usize),
    LoseReply(usize),
    Release(usize),
    Downgrade,
}

struct RwLockModel {
    variant: Variant,
}

impl RwLockModel {
    fn mode_of(client: usize) -> Mode {
        if client == WRITER {
            Mode::Write
        } else {
            Mode::Read
        }
    }

    /// Clients acting, with their mode.
    fn actors(state: &State) -> Vec<Mode> {
        state
            .clients
            .iter()
            .filter_map(|c| match c {
                Client::Holding { mode, deadline, .. } if state.now < *deadline => Some(*mode),
                _ => None,
            })
            .collect()
    }

    fn after(left: u8) -> Client {
        match left {
            0 => Client::Gone,
            left => Client::Idle { left },
        }
    }

    fn release(state: &mut State, client: usize) {
        state.holds.retain(|hold| hold.owner != client);
    }
}

impl Model for RwLockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            holds: Vec::new(),
            counter: 0,
            clients: std::array::from_fn(|_| Client::Idle { left: ROUNDS }),
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
                Client::Sent { .. } => actions.push(Action::Exec(c)),
                Client::Reply { .. } => {
                    actions.push(Action::Deliver(c));
                    actions.push(Action::LoseReply(c));
                }
                Client::Holding { mode, .. } => {
                    actions.push(Action::Release(c));
                    if *mode == Mode::Write {
                        actions.push(Action::Downgrade);
                    }
                }
                Client::Gone => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Send(c) => {
                let Client::Idle { left } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = Client::Sent {
                    sent: state.now,
                    left,
                };
            }
            Action::Exec(c) => {
                let Client::Sent { sent, left } = state.clients[c] else {
                    return None;
                };
                // The script's clock: the server's, or a tick ahead (broken).
                let clock = match self.variant {
                    Variant::StaleClock => state.now + 1,
                    _ => state.now,
                };
                state.holds.retain(|hold| hold.deadline > clock);
                let mode = Self::mode_of(c);
                let others = state.holds.iter().filter(|hold| hold.owner != c);
                let free = match mode {
                    Mode::Write => others.count() == 0,
                    Mode::Read => {
                        self.variant == Variant::ReadIgnoresWriter
                            || others.filter(|hold| hold.mode == Mode::Write).count() == 0
                    }
                };
                let token = free.then(|| {
                    state.counter += 1;
                    state.holds.push(Hold {
                        owner: c,
                        mode,
                        deadline: state.now + LEASE,
                        token: state.counter,
                    });
                    state.counter
                });
                state.clients[c] = Client::Reply { sent, left, token };
            }
            Action::Deliver(c) => {
                let Client::Reply { sent, left, token } = state.clients[c] else {
                    return None;
                };
                let left = left - 1;
                match token {
                    None => state.clients[c] = Self::after(left),
                    Some(_) if state.now >= sent + LEASE => {
                        Self::release(&mut state, c);
                        state.clients[c] = Self::after(left);
                    }
                    Some(token) => {
                        let mode = Self::mode_of(c);
                        // A writer's token is above every token handed out before its grant
                        // (the counter then was token - 1): check no other live hold has more.
                        if mode == Mode::Write
                            && state
                                .holds
                                .iter()
                                .any(|hold| hold.owner != c && hold.token > token)
                        {
                            state.token_regressed = true;
                        }
                        let deadline = match self.variant {
                            Variant::LeaseFromReply => state.now + LEASE,
                            _ => sent + LEASE,
                        };
                        state.clients[c] = Client::Holding {
                            mode,
                            deadline,
                            left,
                        };
                    }
                }
            }
            Action::LoseReply(c) => {
                let Client::Reply { left, .. } = state.clients[c] else {
                    return None;
                };
                Self::release(&mut state, c);
                state.clients[c] = Self::after(left - 1);
            }
            Action::Release(c) => {
                let Client::Holding { left, .. } = state.clients[c] else {
                    return None;
                };
                Self::release(&mut state, c);
                state.clients[c] = Self::after(left);
            }
            Action::Downgrade => {
                let Client::Holding {
                    mode: Mode::Write,
                    deadline,
                    left,
                } = state.clients[WRITER]
                else {
                    return None;
                };
                // One script: the writer's hold becomes a read hold, lease and token kept.
                let now = state.now;
                let hold = state
                    .holds
                    .iter_mut()
                    .find(|hold| hold.owner == WRITER && hold.deadline > now)?;
                hold.mode = Mode::Read;
                state.clients[WRITER] = Client::Holding {
                    mode: Mode::Read,
                    deadline,
                    left,
                };
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("a writer acts alone", |_, state: &State| {
                let actors = RwLockModel::actors(state);
                !actors.contains(&Mode::Write) || actors.len() == 1
            }),
            Property::always("writers' tokens increase", |_, state: &State| {
                !state.token_regressed
            }),
            Property::sometimes("readers act together", |_, state: &State| {
                RwLockModel::actors(state)
                    .iter()
                    .filter(|mode| **mode == Mode::Read)
                    .count()
                    == 2
            }),
            Property::sometimes("the writer acts", |_, state: &State| {
                RwLockModel::actors(state).contains(&Mode::Write)
            }),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<RwLockModel> {
    models::explore(RwLockModel { variant })
}

#[test]
fn the_protocol_keeps_writers_alone_in_every_reachable_state() {
    models::assert_holds(
        RwLockModel {
            variant: Variant::Ours,
        },
        1_000,
    );
}

#[test]
fn counting_the_lease_from_the_reply_lets_a_writer_act_beside_a_reader() {
    check(Variant::LeaseFromReply).assert_any_discovery("a writer acts alone");
}

#[test]
fn a_read_that_ignores_the_writer_is_caught() {
    check(Variant::ReadIgnoresWriter).assert_any_discovery("a writer acts alone");
}

#[test]
fn hold_deadlines_compared_with_another_clock_are_caught() {
    check(Variant::StaleClock).assert_any_discovery("a writer acts alone");
}
