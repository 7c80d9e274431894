//! The crate's Lua scripts as the node runs them: a script is its `.lua` file (kept beside
//! the module of the primitive that uses it, with a header stating KEYS, ARGV and every
//! reply), put after the shared preludes it calls (`token/fence.lua`, `wait/waiters.lua`),
//! loaded once into a [`redis::Script`] so calls use `EVALSHA` with a `NOSCRIPT` fallback.
//!
//! How a wake-up is published is the backend's business, not the script's: the waiters'
//! prelude names its publish command once (`local PUBLISH = 'PUBLISH'`), and each script
//! exists in two forms, that one and one with `SPUBLISH` (sharded pub/sub, on the shard of
//! the lock's slot) for a cluster. The node picks the form its backend needs.

use redis::Script;

/// The line of `wait/waiters.lua` that names the publish command.
const PUBLISH_LINE: &str = "local PUBLISH = 'PUBLISH'";
/// The same line in a cluster's form of a script.
const SPUBLISH_LINE: &str = "local PUBLISH = 'SPUBLISH'";

/// One of the crate's scripts: its whole source (preludes first) and its loaded form, in the
/// two forms of publishing.
///
/// Made once per script, in a `static` `LazyLock` beside the module that uses it:
/// `LockScript::new(&[FENCE_LUA, WAITERS_LUA, include_str!("acquire.lua")])`.
pub(crate) struct LockScript {
    plain: (String, Script),
    sharded: (String, Script),
}

impl LockScript {
    /// The script made of `parts`, in order: the preludes it calls, then its own body.
    pub(crate) fn new(parts: &[&str]) -> LockScript {
        let source = parts.join("\n");
        let sharded = source.replace(PUBLISH_LINE, SPUBLISH_LINE);
        LockScript {
            plain: (source.clone(), Script::new(&source)),
            sharded: (sharded.clone(), Script::new(&sharded)),
        }
    }

    /// The whole source, publishing with `SPUBLISH` when `sharded`.
    pub(crate) fn source(&self, sharded: bool) -> &str {
        if sharded {
            &self.sharded.0
        } else {
            &self.plain.0
        }
    }

    /// The loaded script (`EVALSHA`, `NOSCRIPT` fallback), publishing with `SPUBLISH` when
    /// `sharded`.
    pub(crate) fn variant(&self, sharded: bool) -> &Script {
        if sharded {
            &self.sharded.1
        } else {
            &self.plain.1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_form_publishes_sharded_and_only_that_differs() {
        let script = LockScript::new(&[crate::wait::WAITERS_LUA, "return 1"]);
        assert!(script.source(false).contains(PUBLISH_LINE));
        assert!(script.source(true).contains(SPUBLISH_LINE));
        assert!(!script.source(true).contains(PUBLISH_LINE));
        assert_eq!(
            script.source(true).replace(SPUBLISH_LINE, PUBLISH_LINE),
            script.source(false)
        );
        // No other publish is left to a literal command name.
        for source in [script.source(false), script.source(true)] {
            assert!(!source.contains("redis.call('PUBLISH'"));
            assert!(!source.contains("redis.call('SPUBLISH'"));
        }
    }
}
