//! What the `model_*` tests share: exhaustive breadth-first checking of a `stateright` model.
#![allow(dead_code)]

use std::hash::Hash;

use stateright::{Checker, Model};

/// Checks `model` over every reachable state (breadth first), to the end.
pub fn explore<M>(model: M) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    model.checker().spawn_bfs().join()
}

/// Checks `model` and asserts every property: each `always` holds in every reachable state,
/// each `sometimes` is met in one (the model is not vacuous); and more than `min_states`
/// states were explored.
pub fn assert_holds<M>(model: M, min_states: usize)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + std::fmt::Debug + 'static,
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    let checker = explore(model);
    checker.assert_properties();
    assert!(
        checker.unique_state_count() > min_states,
        "explored only {} states",
        checker.unique_state_count()
    );
}
