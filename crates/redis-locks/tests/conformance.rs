//! Model conformance (faults.md row 2): random sequences of acquire, re-enter, release and
//! downgrade by two owners, run against a real server, each outcome compared with a model of
//! the primitive kept in memory — `ReentrantMutex` (a count per owner) and `RwLock` (read and
//! write holds per owner). Any divergence fails, with the sequence that showed it.

mod common;

use common::{client, server};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_locks::{
    Client, Error, ReentrantMutexGuard, Released, RwLockReadGuard, RwLockWriteGuard,
};
use tokio::runtime::Runtime;

/// Cases per primitive, each a sequence of up to 24 steps.
const CASES: u32 = 48;

#[derive(Debug, Clone, Copy)]
enum Step {
    /// Owner `0` or `1` tries to take the lock (for an `RwLock`: to write).
    Take(usize),
    /// The owner tries to read (`RwLock` only).
    Read(usize),
    /// The owner releases its latest hold (for an `RwLock`: of the mode given).
    Release(usize, bool),
    /// The owner downgrades its latest write hold (`RwLock` only).
    Downgrade(usize),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        (0..2usize).prop_map(Step::Take),
        (0..2usize).prop_map(Step::Read),
        (0..2usize, any::<bool>()).prop_map(|(o, w)| Step::Release(o, w)),
        (0..2usize).prop_map(Step::Downgrade),
    ];
    prop::collection::vec(step, 1..24)
}

/// Runs `case` for [`CASES`] random step sequences, each with its number (for a fresh lock
/// name), against one private server and one client.
fn cases(case: impl Fn(&Runtime, &Client, usize, Vec<Step>) -> Result<(), TestCaseError>) {
    let server = server();
    let rt = runtime();
    let client = rt.block_on(client(&server));
    let count = AtomicUsize::new(0);
    TestRunner::new(Config::with_cases(CASES))
        .run(&steps(), |steps| {
            case(&rt, &client, count.fetch_add(1, Ordering::Relaxed), steps)
        })
        .unwrap();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn reentrant_mutex_conforms_to_a_count_per_owner() {
    cases(|rt, client, case, steps| {
        rt.block_on(async {
            let name = format!("reentrant-{case}");
            let owners = [
                client.reentrant_mutex(&name).unwrap(),
                client.reentrant_mutex(&name).unwrap(),
            ];
            // The model: every owner's live guards.
            let mut guards: [Vec<ReentrantMutexGuard>; 2] = [Vec::new(), Vec::new()];
            for step in steps {
                match step {
                    Step::Take(o) | Step::Read(o) => {
                        let other_holds = !guards[1 - o].is_empty();
                        match owners[o].try_lock().await {
                            Ok(guard) => {
                                prop_assert!(!other_holds, "{step:?}: both owners hold");
                                guards[o].push(guard);
                            }
                            Err(err) if err.is_held() => {
                                prop_assert!(other_holds, "{step:?}: refused a free lock");
                            }
                            Err(err) => return Err(TestCaseError::fail(err.to_string())),
                        }
                    }
                    Step::Release(o, _) | Step::Downgrade(o) => {
                        let Some(guard) = guards[o].pop() else {
                            continue;
                        };
                        let left = guards[o].len() as u64;
                        let released = guard.release().await.map_err(fail)?;
                        prop_assert_eq!(released, leaving(left), "{:?}", step);
                    }
                }
                let state = owners[0].state().await.map_err(fail)?;
                let holds = guards[0].len() + guards[1].len();
                prop_assert_eq!(state.hold_count(), holds, "after {:?}", step);
            }
            for guard in guards.into_iter().flatten() {
                guard.release().await.map_err(fail)?;
            }
            prop_assert_eq!(owners[0].state().await.map_err(fail)?.hold_count(), 0);
            Ok(())
        })
    });
}

/// What an owner holds of an `RwLock`, in the model.
#[derive(Default)]
struct Holds {
    reads: Vec<RwLockReadGuard>,
    writes: Vec<RwLockWriteGuard>,
}

#[test]
fn rwlock_conforms_to_read_and_write_holds_per_owner() {
    cases(|rt, client, case, steps| {
        rt.block_on(async {
            let name = format!("rwlock-{case}");
            let owners = [client.rwlock(&name).unwrap(), client.rwlock(&name).unwrap()];
            let mut holds: [Holds; 2] = [Holds::default(), Holds::default()];
            for step in steps {
                match step {
                    Step::Take(o) => {
                        let mine = &holds[o];
                        let theirs = &holds[1 - o];
                        let others = !theirs.reads.is_empty() || !theirs.writes.is_empty();
                        let upgrade = mine.writes.is_empty() && !mine.reads.is_empty();
                        match owners[o].try_write().await {
                            Ok(guard) => {
                                prop_assert!(!others && !upgrade, "{step:?}: write granted");
                                holds[o].writes.push(guard);
                            }
                            Err(Error::Upgrade { .. }) => {
                                prop_assert!(upgrade, "{step:?}: upgrade error without reads");
                            }
                            Err(err) if err.is_held() => {
                                prop_assert!(others && !upgrade, "{step:?}: refused");
                            }
                            Err(err) => return Err(TestCaseError::fail(err.to_string())),
                        }
                    }
                    Step::Read(o) => {
                        let writer = !holds[1 - o].writes.is_empty();
                        match owners[o].try_read().await {
                            Ok(guard) => {
                                prop_assert!(!writer, "{step:?}: read beside a writer");
                                holds[o].reads.push(guard);
                            }
                            Err(err) if err.is_held() => {
                                prop_assert!(writer, "{step:?}: read refused");
                            }
                            Err(err) => return Err(TestCaseError::fail(err.to_string())),
                        }
                    }
                    Step::Release(o, write) => {
                        let released = if write {
                            let Some(guard) = holds[o].writes.pop() else {
                                continue;
                            };
                            let left = holds[o].writes.len() as u64;
                            (guard.release().await.map_err(fail)?, left)
                        } else {
                            let Some(guard) = holds[o].reads.pop() else {
                                continue;
                            };
                            let left = holds[o].reads.len() as u64;
                            (guard.release().await.map_err(fail)?, left)
                        };
                        prop_assert_eq!(released.0, leaving(released.1), "{:?}", step);
                    }
                    Step::Downgrade(o) => {
                        let Some(guard) = holds[o].writes.pop() else {
                            continue;
                        };
                        let read = guard.downgrade().await.map_err(fail)?;
                        holds[o].reads.push(read);
                    }
                }
                let state = owners[0].state().await.map_err(fail)?;
                let count: usize = holds.iter().map(|h| h.reads.len() + h.writes.len()).sum();
                prop_assert_eq!(state.hold_count(), count, "after {:?}", step);
                let writing = holds.iter().any(|h| !h.writes.is_empty());
                prop_assert_eq!(state.writer().is_some(), writing, "after {:?}", step);
            }
            for h in holds {
                for guard in h.writes {
                    guard.release().await.map_err(fail)?;
                }
                for guard in h.reads {
                    guard.release().await.map_err(fail)?;
                }
            }
            prop_assert_eq!(owners[0].state().await.map_err(fail)?.hold_count(), 0);
            Ok(())
        })
    });
}

/// A release that leaves `left` holds of the owner (of that mode).
fn leaving(left: u64) -> Released {
    match left {
        0 => Released::Freed,
        holds => Released::StillHeld { holds },
    }
}

fn fail(err: Error) -> TestCaseError {
    TestCaseError::fail(err.to_string())
}
