//! The crate's Lua scripts as the node runs them: a script is its `.lua` file (kept beside
//! the module of the primitive that uses it, with a header stating KEYS, ARGV and every
//! reply), put after the shared preludes it calls (`token/fence.lua`, `wait/waiters.lua`),
//! loaded once into a [`redis::Script`] so calls use `EVALSHA` with a `NOSCRIPT` fallback.

use redis::Script;

/// One of the crate's scripts: its whole source (preludes first) and its loaded form.
///
/// Made once per script, in a `static` `LazyLock` beside the module that uses it:
/// `LockScript::new(&[FENCE_LUA, WAITERS_LUA, include_str!("acquire.lua")])`.
pub(crate) struct LockScript {
    source: String,
    script: Script,
}

impl LockScript {
    /// The script made of `parts`, in order: the preludes it calls, then its own body.
    pub(crate) fn new(parts: &[&str]) -> LockScript {
        let source = parts.join("\n");
        LockScript {
            script: Script::new(&source),
            source,
        }
    }

    /// The whole source, for the one call that sends it with `EVAL` in a pipeline.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The loaded script (`EVALSHA`, `NOSCRIPT` fallback).
    pub(crate) fn script(&self) -> &Script {
        &self.script
    }
}
