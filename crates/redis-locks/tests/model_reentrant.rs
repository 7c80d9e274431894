//! A model of the `ReentrantMutex` protocol, checked exhaustively with `stateright`: owner A
//! holds the lock and re-enters it from a second task, whose call may be cancelled at any
//! point; owner B wants the lock meanwhile. Leases: 3 ticks.
//!
//! Modelled (`engine/holds/holds.lua`, the write side): every acquisition is a hold of its own with
//! its own id; a re-entry by the owner is granted beside its live holds; a cancelled call's owed
//! release goes out by that hold's id, after the acquire on the same connection, or alone when
//! the acquire never left the process; the lock is free once no live hold is left; a holder acts
//! until `sent + lease`.
//!
//! Checked: two owners never act at once, and the lock is never free while a guard of its owner
//! still acts. The broken variant is the plain counter of seed 001 (`HINCRBY owner ±1`): the
//! owed release of a cancelled re-entry that never reached the server decrements the outer
//! hold's count, frees the lock under the outer guard, and lets B in beside it.

mod models;

use stateright::{Checker, Model, Property};

const LEASE: u8 = 3;
const END: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// Holds by id.
    Ours,
    /// One counter per owner.
    Counter,
}

/// A task's acquisition.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Task {
    Idle,
    /// Sent at `sent`; not yet run by the server (it may never be).
    Sent {
        sent: u8,
    },
    /// The server granted (hold id = the task's index) or refused.
    Replied {
        sent: u8,
        granted: bool,
    },
    Holding {
        deadline: u8,
    },
    /// Cancelled: its owed release is on its way, after the acquire if that was sent.
    Cancelled {
        acquire_pending: bool,
    },
    Done,
}

/// Tasks: 0 is A's outer acquisition, 1 A's re-entry, 2 is B.
const TASKS: usize = 3;
const OWNER: [u8; TASKS] = [0, 0, 1];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// Ours: live holds by task (its deadline on the server).
    holds: [Option<u8>; TASKS],
    /// Counter: each owner's count and the hash's one deadline.
    counts: [u8; 2],
    expiry: Option<u8>,
    tasks: [Task; TASKS],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Send(usize),
    Exec(usize),
    Deliver(usize),
    Cancel(usize),
    /// The cancelled call's acquire never left the process.
    Unsent(usize),
    PayRelease(usize),
    Release(usize),
}

struct ReentrantModel {
    variant: Variant,
}

impl ReentrantModel {
    /// The owner holding the lock on the server, if any.
    fn holder(&self, state: &State) -> Option<u8> {
        match self.variant {
            Variant::Ours => (0..TASKS)
                .find(|t| state.holds[*t].is_some())
                .map(|t| OWNER[t]),
            Variant::Counter => (0..2).find(|o| state.counts[*o as usize] > 0),
        }
    }

    fn grant(&self, state: &mut State, task: usize) -> bool {
        let owner = OWNER[task];
        if self.holder(state).is_some_and(|holder| holder != owner) {
            return false;
        }
        let deadline = state.now + LEASE;
        match self.variant {
            Variant::Ours => {
                state.holds[task] = Some(deadline);
                // Re-entry renews the owner's other holds.
                for (t, hold) in state.holds.iter_mut().enumerate() {
                    if OWNER[t] == owner && hold.is_some() {
                        *hold = Some(deadline);
                    }
                }
            }
            Variant::Counter => {
                state.counts[owner as usize] += 1;
                state.expiry = Some(deadline);
            }
        }
        true
    }

    fn release(&self, state: &mut State, task: usize) {
        match self.variant {
            Variant::Ours => state.holds[task] = None,
            Variant::Counter => {
                let count = &mut state.counts[OWNER[task] as usize];
                *count = count.saturating_sub(1);
                if state.counts == [0, 0] {
                    state.expiry = None;
                }
            }
        }
    }

    /// Owners with a task acting.
    fn acting(state: &State) -> Vec<u8> {
        let mut owners: Vec<u8> = (0..TASKS)
            .filter(
                |t| matches!(state.tasks[*t], Task::Holding { deadline } if state.now < deadline),
            )
            .map(|t| OWNER[t])
            .collect();
        owners.dedup();
        owners
    }
}

impl Model for ReentrantModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            holds: [None; TASKS],
            counts: [0, 0],
            expiry: None,
            tasks: std::array::from_fn(|_| Task::Idle),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < END {
            actions.push(Action::Tick);
        }
        for (t, task) in state.tasks.iter().enumerate() {
            match task {
                // A re-enters only while its outer guard holds.
                Task::Idle if t == 1 && !matches!(state.tasks[0], Task::Holding { .. }) => {}
                Task::Idle => actions.push(Action::Send(t)),
                Task::Sent { .. } => {
                    actions.push(Action::Exec(t));
                    if t == 1 {
                        actions.push(Action::Cancel(t));
                        actions.push(Action::Unsent(t));
                    }
                }
                Task::Replied { .. } => {
                    actions.push(Action::Deliver(t));
                    if t == 1 {
                        actions.push(Action::Cancel(t));
                    }
                }
                Task::Cancelled { .. } => actions.push(Action::PayRelease(t)),
                Task::Holding { .. } => actions.push(Action::Release(t)),
                Task::Done => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                let now = state.now;
                for hold in &mut state.holds {
                    if matches!(hold, Some(deadline) if *deadline <= now) {
                        *hold = None;
                    }
                }
                if matches!(state.expiry, Some(expiry) if expiry <= now) {
                    state.expiry = None;
                    state.counts = [0, 0];
                }
            }
            Action::Send(t) => state.tasks[t] = Task::Sent { sent: state.now },
            Action::Exec(t) => {
                let Task::Sent { sent } = state.tasks[t] else {
                    return None;
                };
                let granted = self.grant(&mut state, t);
                state.tasks[t] = Task::Replied { sent, granted };
            }
            Action::Deliver(t) => {
                let Task::Replied { sent, granted } = state.tasks[t] else {
                    return None;
                };
                state.tasks[t] = match granted {
                    true if state.now < sent + LEASE => Task::Holding {
                        deadline: sent + LEASE,
                    },
                    true => {
                        self.release(&mut state, t);
                        Task::Done
                    }
                    // B asks again; A's re-entry never fails while A holds.
                    false => Task::Idle,
                };
            }
            Action::Cancel(t) => {
                let acquire_pending = matches!(state.tasks[t], Task::Sent { .. });
                let granted = matches!(state.tasks[t], Task::Replied { granted: true, .. });
                if !acquire_pending && !granted {
                    state.tasks[t] = Task::Done;
                    return Some(state);
                }
                state.tasks[t] = Task::Cancelled { acquire_pending };
            }
            Action::Unsent(t) => {
                state.tasks[t] = Task::Cancelled {
                    acquire_pending: false,
                }
            }
            Action::PayRelease(t) => {
                let Task::Cancelled { acquire_pending } = state.tasks[t] else {
                    return None;
                };
                if acquire_pending {
                    // The acquire runs first on the connection, then the release.
                    self.grant(&mut state, t);
                }
                self.release(&mut state, t);
                state.tasks[t] = Task::Done;
            }
            Action::Release(t) => {
                self.release(&mut state, t);
                state.tasks[t] = Task::Done;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one owner at a time", |_, state: &State| {
                ReentrantModel::acting(state).len() <= 1
            }),
            Property::sometimes("A re-entered", |_, state: &State| {
                matches!(state.tasks[0], Task::Holding { deadline } if state.now < deadline)
                    && matches!(state.tasks[1], Task::Holding { deadline } if state.now < deadline)
            }),
            Property::sometimes(
                "B held",
                |_, state: &State| matches!(state.tasks[2], Task::Holding { deadline } if state.now < deadline),
            ),
        ]
    }
}

fn check(variant: Variant) -> impl Checker<ReentrantModel> {
    models::explore(ReentrantModel { variant })
}

#[test]
fn holds_by_id_keep_one_owner_at_a_time_whatever_is_cancelled() {
    models::assert_holds(
        ReentrantModel {
            variant: Variant::Ours,
        },
        100,
    );
}

#[test]
fn a_shared_counter_is_freed_under_its_owner_by_a_cancelled_reentry() {
    check(Variant::Counter).assert_any_discovery("one owner at a time");
}
