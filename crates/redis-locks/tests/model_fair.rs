//! A model of the `FairMutex` protocol, checked exhaustively with `stateright`: three clients,
//! one acquisition each, a lease and a place lease of 2 ticks.
//!
//! Modelled (`fair/acquire.lua`, `fair/release.lua`): an attempt is one script, an atomic
//! server step, sent at one tick and run at a later one; it purges the places whose lease ran
//! out, grants a free lock only to the head of the queue (or to anyone when nobody queues), and
//! otherwise gives the caller a place (a ticket, kept across its attempts) or renews it. The
//! reply may be delayed; a client acts until `sent + lease` and gives a late grant back. A
//! client may stop asking at any time (as a crashed one does): its place then lapses.
//!
//! Checked: mutual exclusion; first come, first served (a grant never goes to a client while
//! another client with an earlier ticket still holds a live place); and the model is not
//! vacuous (all three clients get the lock in one run). A broken variant that grants a free
//! lock to whoever asks (as a `Mutex`'s fast path may) must break first come, first served.

mod models;

use stateright::{Checker, Model, Property};

const LEASE: u8 = 2;
const PLACE: u8 = 2;
const END: u8 = 4;
const CLIENTS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Ours,
    /// A free lock goes to whoever asks, queue or not.
    FreeForAll,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Client {
    Idle,
    Sent { sent: u8 },
    Reply { sent: u8, granted: bool },
    Holding { deadline: u8 },
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// The lock key: its holder and when it expires.
    key: Option<(usize, u8)>,
    /// The queue: each client's ticket and place deadline, if it has a place.
    places: [Option<(u8, u8)>; CLIENTS],
    tickets: u8,
    clients: [Client; CLIENTS],
    /// A grant went to a client while one with an earlier ticket held a live place.
    overtaken: bool,
    /// Clients that got the lock.
    served: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    Exec(usize),
    Deliver(usize),
    Release(usize),
}

struct FairModel {
    variant: Variant,
}

impl FairModel {
    fn acting(state: &State) -> usize {
        state
            .clients
            .iter()
            .filter(|c| matches!(c, Client::Holding { deadline } if state.now < *deadline))
            .count()
    }

    /// The live place with the earliest ticket.
    fn head(state: &State) -> Option<usize> {
        (0..CLIENTS)
            .filter_map(|c| state.places[c].map(|(ticket, _)| (ticket, c)))
            .min()
            .map(|(_, c)| c)
    }
}

impl Model for FairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            key: None,
            places: [None; CLIENTS],
            tickets: 0,
            clients: std::array::from_fn(|_| Client::Idle),
            overtaken: false,
            served: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < END {
            actions.push(Action::Tick);
        }
        for (c, client) in state.clients.iter().enumerate() {
            match client {
                // A refused waiter attempts again (renewing its place) until it is served.
                Client::Idle => actions.push(Action::Send(c)),
                Client::Sent { .. } => actions.push(Action::Exec(c)),
                Client::Reply { .. } => actions.push(Action::Deliver(c)),
                Client::Holding { .. } => actions.push(Action::Release(c)),
                Client::Done => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                if matches!(state.key, Some((_, expiry)) if expiry <= state.now) {
                    state.key = None;
                }
            }
            Action::Send(c) => state.clients[c] = Client::Sent { sent: state.now },
            Action::Exec(c) => {
                let Client::Sent { sent } = state.clients[c] else {
                    return None;
                };
                let now = state.now;
                // Places whose lease ran out are gone.
                for place in &mut state.places {
                    if matches!(place, Some((_, until)) if *until <= now) {
                        *place = None;
                    }
                }
                let head = Self::head(&state);
                let may = match self.variant {
                    Variant::Ours => head.is_none() || head == Some(c),
                    Variant::FreeForAll => true,
                };
                let granted = state.key.is_none() && may;
                if granted {
                    // First come, first served: nobody with an earlier ticket waits.
                    let mine = state.places[c].map(|(ticket, _)| ticket);
                    let earlier = (0..CLIENTS).any(|other| {
                        other != c
                            && state.places[other]
                                .is_some_and(|(ticket, _)| mine.is_none_or(|mine| ticket < mine))
                    });
                    if earlier {
                        state.overtaken = true;
                    }
                    state.places[c] = None;
                    state.key = Some((c, now + LEASE));
                } else {
                    let ticket = match state.places[c] {
                        Some((ticket, _)) => ticket,
                        None => {
                            state.tickets += 1;
                            state.tickets
                        }
                    };
                    state.places[c] = Some((ticket, now + PLACE));
                }
                state.clients[c] = Client::Reply { sent, granted };
            }
            Action::Deliver(c) => {
                let Client::Reply { sent, granted } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = if !granted {
                    Client::Idle
                } else if state.now >= sent + LEASE {
                    // Late: given back by owner token; this client asks again.
                    if matches!(state.key, Some((owner, _)) if owner == c) {
                        state.key = None;
                    }
                    Client::Idle
                } else {
                    state.served += 1;
                    Client::Holding {
                        deadline: sent + LEASE,
                    }
                };
            }
            Action::Release(c) => {
                if matches!(state.key, Some((owner, _)) if owner == c) {
                    state.key = None;
                }
                state.clients[c] = Client::Done;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, state: &State| {
                FairModel::acting(state) <= 1
            }),
            Property::always("first come, first served", |_, state: &State| {
                !state.overtaken
            }),
            Property::sometimes("all three served", |_, state: &State| {
                state.served == CLIENTS as u8
            }),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<FairModel> {
    models::explore(FairModel { variant })
}

#[test]
fn the_protocol_serves_in_order_and_one_at_a_time() {
    models::assert_holds(
        FairModel {
            variant: Variant::Ours,
        },
        1_000,
    );
}

#[test]
fn a_free_lock_for_whoever_asks_breaks_the_order() {
    let checker = check(Variant::FreeForAll);
    checker.assert_any_discovery("first come, first served");
    checker.assert_no_discovery("mutual exclusion");
}
