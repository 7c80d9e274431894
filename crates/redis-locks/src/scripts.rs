//! The Lua scripts, one `.lua` file each (their headers state KEYS, ARGV and every reply),
//! loaded once into [`redis::Script`] so calls use `EVALSHA` with a `NOSCRIPT` fallback.

use std::sync::LazyLock;

use redis::Script;

/// The prelude of every script that hands out fencing tokens: `next_token(counter)`.
const FENCE: &str = include_str!("scripts/fence.lua");

/// A script's source with the [`FENCE`] prelude in front of it.
fn with_prelude(body: &str) -> String {
    format!("{FENCE}\n{body}")
}

/// The source of [`MUTEX_ACQUIRE`], for the one call that sends it with `EVAL` in a pipeline.
pub(crate) static MUTEX_ACQUIRE_SOURCE: LazyLock<String> =
    LazyLock::new(|| with_prelude(include_str!("scripts/mutex_acquire.lua")));

/// `SET NX PX` plus the fencing counter: `{1, token}` or `{0, pttl}`.
pub(crate) static MUTEX_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&MUTEX_ACQUIRE_SOURCE));

/// Owner-checked delete: `1` released, `0` gone, `-1` another owner's.
pub(crate) static MUTEX_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/mutex_release.lua")));

/// Owner-checked `PEXPIRE`: `1` extended, `0` gone, `-1` another owner's.
pub(crate) static MUTEX_EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/mutex_extend.lua")));

/// Read-only state: `{owner or '', pttl, counter, marked}`.
pub(crate) static MUTEX_INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/mutex_inspect.lua")));

/// FIFO acquire with a server-side ticket queue: `{1, token}` or `{0, pttl | -2}`.
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&with_prelude(include_str!("scripts/fair_acquire.lua"))));

/// Leave a FairMutex (release and/or give up a place), waking only the next waiter.
pub(crate) static FAIR_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fair_release.lua")));

/// A write applied only for a fencing token ≥ the highest seen: `{1, previous}` or `{0, highest}`.
pub(crate) static FENCED_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fenced_set.lua")));
