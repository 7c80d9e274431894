//! A model of the `Semaphore` protocol (`semaphore/acquire.lua`, `extend.lua`, `release.lua`),
//! checked exhaustively with `stateright`: a limit of 2 permits, three clients wanting 1, 1
//! and 2 permits (the last one `acquire_many`), one acquisition each, a lease and a place
//! lease of 2 ticks.
//!
//! Modelled: the server keeps the holders (owner → lease deadline on the server's clock, each
//! with its weight), a FIFO queue of waiters (server-assigned tickets, each with a place lease)
//! and a fencing counter. An acquire is one script, an atomic server step, sent at one tick and
//! run at the same or a later one:
//! 1. reclaim: holders whose deadline is ≤ now are removed (their permits come back), waiters
//!    whose place lease ended leave the queue;
//! 2. a caller that already holds is granted again (new deadline, new token);
//! 3. a caller is granted when the queue is empty or it is the head, and the weights of the
//!    remaining holders plus its own fit in the limit: token = counter + 1, deadline = now +
//!    lease, it leaves the queue;
//! 4. otherwise it takes (or keeps, renewing its lease) a place at the back of the queue.
//!
//! An extend moves a holder's deadline to now + lease, only while it is still a live holder
//! (its request may be delayed; its reply is taken to come back at once); a release removes
//! the caller's holder entry and its place. Acquire replies may be delayed. A client
//! counts its lease from when it *sent* the request: it believes it holds until
//! `sent + lease - drift` and acts only until then. A lost reply, or a grant that comes back
//! after that, is asked for again under the same owner (a re-grant with a new token, as the
//! library does); once in a run, to keep the model finite: a second late grant fails and is
//! given back. A client may crash at any point and stops for good (its holder entry and its
//! place lapse). The model has one clock, so `DRIFT` is 0: a margin only shortens what clients
//! believe, so 0 is the strictest check.
//!
//! Time is kept relative to now (deadlines and leases as ticks left, requests as ticks since
//! sent, capped where more makes no difference) and tickets as ranks, so the state space is
//! finite without a last tick: time runs on for ever.
//!
//! Checked in every reachable state: at most 2 permits in use (by the weights of the clients
//! acting, and of the server's live holders); every grant's token is above every earlier
//! grant's; first come, first served (no grant while a waiter that arrived earlier still has a
//! live place: a weight-2 head is not overtaken by weight-1 callers). Not vacuous: both
//! permits are in use at once, the weight-2 client is served, and a crashed holder's permits
//! come back to another client. Each broken variant must be caught on the property it breaks.

mod models;

use std::collections::BTreeSet;

use stateright::{Checker, HasDiscoveries, Model, Property};

/// The semaphore's limit.
const N: u8 = 2;
const CLIENTS: usize = 3;
/// Permits each client asks for.
const WEIGHTS: [u8; CLIENTS] = [1, 1, 2];
/// The client that asks for 2 permits.
const HEAVY: usize = 2;
/// Ticks a lease lasts.
const LEASE: u8 = 2;
/// The margin a client takes off its lease for clock drift.
const DRIFT: u8 = 0;
/// Ticks a place in the queue lasts without being renewed.
const PLACE: u8 = 2;

/// The protocol, or a broken variant of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// The library's protocol.
    Ours,
    /// Counts holders, not the permits they hold.
    CountHolders,
    /// Reclaims a holder a tick before its deadline.
    EarlyReclaim,
    /// Grants whoever asks when enough permits are free, queue or not.
    AnyCaller,
    /// The client counts its lease from when the reply arrived.
    LeaseFromReply,
}

/// A holder's extend in flight; `age`: ticks since it was sent (at most `LEASE`: older is
/// the same, too late).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Extend {
    None,
    Sent { age: u8 },
}

/// A client. Times are relative to now (the state carries no clock): `age` is the ticks since
/// the request was sent, capped at `LEASE` (a grant that old is late anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Client {
    /// Wants its permits: sends an acquire (the first one, or again after a refusal or a lost
    /// reply).
    Want,
    /// The acquire is on its way; the script has not run yet.
    Sent { age: u8 },
    /// The script ran: granted or refused (queued); the reply is on its way.
    Reply { age: u8, granted: bool },
    /// Holding: acting for `left` more ticks (its belief; 0: it has stopped acting).
    Holding { left: u8, extend: Extend },
    /// Released (or gave a late grant back): its one acquisition is over.
    Done,
    /// Stopped for good; `held`: while it believed it held.
    Crashed { held: bool },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    /// Each client's holder entry: ticks to its deadline (0: passed, not yet reclaimed).
    holders: [Option<u8>; CLIENTS],
    /// Each client's place in the queue: its ticket and the ticks its place lease has left.
    /// Tickets are kept as ranks 1, 2, … (only their order matters).
    places: [Option<(u8, u8)>; CLIENTS],
    /// The fencing counter.
    counter: u8,
    clients: [Client; CLIENTS],
    /// A client asked again after a lost reply or a late grant (once in a run, to keep the
    /// model finite; the library gives up after a few late grants).
    retried: bool,
    /// A grant's token was not above every earlier grant's.
    token_regressed: bool,
    /// A grant went to a client while a waiter with an earlier ticket held a live place.
    overtaken: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    Exec(usize),
    Deliver(usize),
    LoseReply(usize),
    SendExtend(usize),
    ExecExtend(usize),
    Release(usize),
    Crash(usize),
}

struct SemaphoreModel {
    variant: Variant,
}

impl SemaphoreModel {
    /// Ticks a client believes it holds for, for a request sent `age` ticks ago (replied to
    /// now).
    fn belief(&self, age: u8) -> u8 {
        match self.variant {
            Variant::LeaseFromReply => LEASE.saturating_sub(DRIFT),
            _ => LEASE.saturating_sub(DRIFT).saturating_sub(age),
        }
    }

    /// Permits in use by the clients acting as holders.
    fn acting(state: &State) -> u8 {
        (0..CLIENTS)
            .filter(|&c| matches!(state.clients[c], Client::Holding { left, .. } if left > 0))
            .map(|c| WEIGHTS[c])
            .sum()
    }

    /// Permits held on the server by holders whose deadline has not passed.
    fn held(state: &State) -> u8 {
        (0..CLIENTS)
            .filter(|&c| state.holders[c].is_some_and(|deadline| deadline > 0))
            .map(|c| WEIGHTS[c])
            .sum()
    }

    /// Whether the reclaim step removes a holder whose deadline is `deadline` ticks away.
    fn expired(&self, deadline: u8) -> bool {
        match self.variant {
            Variant::EarlyReclaim => deadline <= 1,
            _ => deadline == 0,
        }
    }

    /// The waiter with the earliest ticket.
    fn head(state: &State) -> Option<usize> {
        (0..CLIENTS)
            .filter_map(|c| state.places[c].map(|(ticket, _)| (ticket, c)))
            .min()
            .map(|(_, c)| c)
    }

    /// Renumbers the tickets 1, 2, … in their order.
    fn rank_tickets(state: &mut State) {
        let old = state.places;
        for place in state.places.iter_mut().flatten() {
            place.0 = 1 + old
                .iter()
                .flatten()
                .filter(|(ticket, _)| *ticket < place.0)
                .count() as u8;
        }
    }

    /// The release script: the caller's holder entry and its place go.
    fn release(state: &mut State, client: usize) {
        state.holders[client] = None;
        state.places[client] = None;
        Self::rank_tickets(state);
    }

    /// Hands out the next token (stored as the counter).
    fn grant(state: &mut State, client: usize) {
        let token = state.counter + 1;
        if token <= state.counter {
            state.token_regressed = true;
        }
        state.counter = token;
        state.holders[client] = Some(LEASE);
        state.places[client] = None;
    }

    /// The acquire script, run for `client`: whether it is granted (or queued).
    fn acquire(&self, state: &mut State, client: usize) -> bool {
        // 1. Reclaim.
        for c in 0..CLIENTS {
            if state.holders[c].is_some_and(|deadline| self.expired(deadline)) {
                state.holders[c] = None;
            }
            if state.places[c].is_some_and(|(_, left)| left == 0) {
                state.places[c] = None;
            }
        }
        // 2. A holder is granted again.
        if state.holders[client].is_some() {
            Self::grant(state, client);
            return true;
        }
        // 3. The head (or anyone, with nobody queued) is granted if its permits fit.
        let used: u8 = match self.variant {
            Variant::CountHolders => state.holders.iter().flatten().count() as u8,
            _ => (0..CLIENTS)
                .filter(|&c| state.holders[c].is_some())
                .map(|c| WEIGHTS[c])
                .sum(),
        };
        let head = Self::head(state);
        let may = match self.variant {
            Variant::AnyCaller => true,
            _ => head.is_none() || head == Some(client),
        };
        if may && used + WEIGHTS[client] <= N {
            let mine = state.places[client].map(|(ticket, _)| ticket);
            let earlier = (0..CLIENTS).any(|other| {
                other != client
                    && state.places[other]
                        .is_some_and(|(ticket, _)| mine.is_none_or(|mine| ticket < mine))
            });
            if earlier {
                state.overtaken = true;
            }
            Self::grant(state, client);
            return true;
        }
        // 4. Otherwise a place at the back (or the same place, renewed).
        let ticket = match state.places[client] {
            Some((ticket, _)) => ticket,
            // A new ticket, after every other (ranked after the script).
            None => u8::MAX,
        };
        state.places[client] = Some((ticket, PLACE));
        false
    }
}

impl Model for SemaphoreModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            holders: [None; CLIENTS],
            places: [None; CLIENTS],
            counter: 0,
            clients: [Client::Want; CLIENTS],
            retried: false,
            token_regressed: false,
            overtaken: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        actions.push(Action::Tick);
        for (c, client) in state.clients.iter().enumerate() {
            match *client {
                Client::Want => actions.push(Action::Send(c)),
                Client::Sent { .. } => actions.push(Action::Exec(c)),
                Client::Reply { .. } => {
                    actions.push(Action::Deliver(c));
                    if !state.retried {
                        actions.push(Action::LoseReply(c));
                    }
                }
                Client::Holding { left, extend } => match extend {
                    Extend::None => {
                        actions.push(Action::Release(c));
                        if left > 0 {
                            actions.push(Action::SendExtend(c));
                        }
                    }
                    Extend::Sent { .. } => actions.push(Action::ExecExtend(c)),
                },
                Client::Done | Client::Crashed { .. } => continue,
            }
            actions.push(Action::Crash(c));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let older = |age: u8| (age + 1).min(LEASE);
        match action {
            Action::Tick => {
                for deadline in state.holders.iter_mut().flatten() {
                    *deadline = deadline.saturating_sub(1);
                }
                for (_, left) in state.places.iter_mut().flatten() {
                    *left = left.saturating_sub(1);
                }
                for client in &mut state.clients {
                    *client = match *client {
                        Client::Sent { age } => Client::Sent { age: older(age) },
                        Client::Reply { age, granted } => Client::Reply {
                            age: older(age),
                            granted,
                        },
                        Client::Holding { left, extend } => Client::Holding {
                            left: left.saturating_sub(1),
                            extend: match extend {
                                Extend::None => Extend::None,
                                Extend::Sent { age } => Extend::Sent { age: older(age) },
                            },
                        },
                        other => other,
                    };
                }
            }
            Action::Send(c) => state.clients[c] = Client::Sent { age: 0 },
            Action::Exec(c) => {
                let Client::Sent { age } = state.clients[c] else {
                    return None;
                };
                let granted = self.acquire(&mut state, c);
                Self::rank_tickets(&mut state);
                state.clients[c] = Client::Reply { age, granted };
            }
            Action::Deliver(c) => {
                let Client::Reply { age, granted } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = if !granted {
                    Client::Want
                } else {
                    match self.belief(age) {
                        // Late: asked for again (granted again, with a new token).
                        0 if !state.retried => {
                            state.retried = true;
                            Client::Want
                        }
                        // Late again: the acquisition fails, the permits are given back.
                        0 => {
                            Self::release(&mut state, c);
                            Client::Done
                        }
                        left => Client::Holding {
                            left,
                            extend: Extend::None,
                        },
                    }
                };
            }
            Action::LoseReply(c) => {
                // The outcome is unknown: the client asks again, under the same owner.
                state.retried = true;
                state.clients[c] = Client::Want;
            }
            Action::SendExtend(c) => {
                let Client::Holding { left, .. } = state.clients[c] else {
                    return None;
                };
                state.clients[c] = Client::Holding {
                    left,
                    extend: Extend::Sent { age: 0 },
                };
            }
            Action::ExecExtend(c) => {
                let Client::Holding {
                    left,
                    extend: Extend::Sent { age },
                } = state.clients[c]
                else {
                    return None;
                };
                let ok = state.holders[c].is_some_and(|deadline| !self.expired(deadline));
                if ok {
                    state.holders[c] = Some(LEASE);
                }
                // The reply (modelled as arriving at once; an acquire's reply is the one
                // delayed): once its belief has ended a client has stopped acting, and a
                // refused extend ends it.
                let left = if left > 0 && ok { self.belief(age) } else { 0 };
                state.clients[c] = Client::Holding {
                    left,
                    extend: Extend::None,
                };
            }
            Action::Release(c) => {
                Self::release(&mut state, c);
                state.clients[c] = Client::Done;
            }
            Action::Crash(c) => {
                let held = matches!(state.clients[c], Client::Holding { left, .. } if left > 0);
                state.clients[c] = Client::Crashed { held };
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most N permits in use", |_, state: &State| {
                SemaphoreModel::acting(state) <= N && SemaphoreModel::held(state) <= N
            }),
            Property::always("tokens grow per permit", |_, state: &State| {
                !state.token_regressed
            }),
            Property::always("first come, first served", |_, state: &State| {
                !state.overtaken
            }),
            Property::sometimes("all N in use", |_, state: &State| {
                SemaphoreModel::acting(state) == N
            }),
            Property::sometimes(
                "the weight-2 client served",
                |_, state: &State| matches!(state.clients[HEAVY], Client::Holding { left, .. } if left > 0),
            ),
            // Its permits are in use by others: more than N, with its own.
            Property::sometimes("a crashed holder's permit came back", |_, state: &State| {
                (0..CLIENTS).any(|c| {
                    state.clients[c] == Client::Crashed { held: true }
                        && WEIGHTS[c] + SemaphoreModel::acting(state) > N
                })
            }),
        ]
    }
}

/// Checks `variant` until `property` is found broken, and asserts it is: a broken variant is
/// explored only as far as its counterexample (breadth first, so a shortest one).
fn refute(variant: Variant, property: &'static str) {
    let checker = SemaphoreModel { variant }
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    checker.assert_any_discovery(property);
}

#[test]
fn the_protocol_keeps_every_property_in_every_reachable_state() {
    models::assert_holds(
        SemaphoreModel {
            variant: Variant::Ours,
        },
        100_000,
    );
}

/// The weight-2 client is granted, then a weight-1 one: 2 holders, 3 permits.
#[test]
fn counting_holders_instead_of_permits_lets_more_than_n_be_used() {
    refute(Variant::CountHolders, "at most N permits in use");
}

/// A weight-1 holder is reclaimed a tick before its deadline, with a tick of its belief left,
/// and the weight-2 client is granted: 3 permits acting.
#[test]
fn reclaiming_a_holder_before_its_deadline_lets_more_than_n_be_used() {
    refute(Variant::EarlyReclaim, "at most N permits in use");
}

/// A weight-1 client holds; the weight-2 client queues (1 permit free, 2 wanted); a weight-1
/// caller is granted the free permit over it.
#[test]
fn granting_any_caller_with_free_permits_breaks_the_order() {
    refute(Variant::AnyCaller, "first come, first served");
}

/// A weight-1 grant's reply comes a tick late, so its client believes a tick past the server's
/// deadline; the weight-2 client is granted at that deadline: 3 permits acting.
#[test]
fn counting_the_lease_from_the_reply_lets_more_than_n_be_used() {
    refute(Variant::LeaseFromReply, "at most N permits in use");
}
