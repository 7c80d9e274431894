//! The crate's Lua scripts as the node runs them: a script is its `.lua` file (kept beside
//! the module of the primitive or engine that uses it, with a header stating KEYS, ARGV and
//! every reply), put after the shared preludes it calls (`token/fence.lua`, the lock prelude
//! `wait/lock.lua`, the queue prelude `wait/queue.lua`, the holds prelude
//! `engine/holds/holds.lua`). Every script is also a function of the crate's function
//! library ([`library`](super::library)); a node calls it there with `FCALL`, or sends it
//! with `EVALSHA` where the server refuses functions (see `call.rs`).
//!
//! Two things about a script belong to the backend, not to the script, and the lock
//! prelude names each once: how a wake-up is published (`local PUBLISH = 'PUBLISH'`), and
//! whether the client may run a script twice (`local RETRIED = false`: a cluster client
//! retries a request after a broken connection, so a release leaves a tombstone that a
//! second run finds). Each script exists in two forms: that one, and the cluster's, with
//! `SPUBLISH` (sharded pub/sub, on the shard of the lock's slot) and `RETRIED` true. The
//! cluster's form also leaves out the fast paths put before the preludes (the
//! `*_first.lua` files): they run before `RETRIED` is known, so they could leave no
//! tombstone. The node picks the form its backend needs.

use redis::Script;

/// The lines of the lock prelude (`wait/lock.lua`) that the cluster's form changes, and what
/// into.
const CLUSTER_LINES: [(&str, &str); 2] = [
    ("local PUBLISH = 'PUBLISH'", "local PUBLISH = 'SPUBLISH'"),
    ("local RETRIED = false", "local RETRIED = true"),
];

/// Whether `part` is a fast path: a `*_first.lua` file, whose header's first line names it
/// (`-- release_first.lua: ...`).
fn is_fast_path(part: &str) -> bool {
    part.lines()
        .next()
        .and_then(|line| line.strip_prefix("-- "))
        .and_then(|line| line.split_once(':'))
        .is_some_and(|(file, _)| file.ends_with("_first.lua"))
}

/// One of the crate's scripts: its whole source (preludes first) and its loaded form, in the
/// two forms (one server or Sentinel, and cluster).
///
/// Made once per script, in a `static` `LazyLock` beside the module that uses it:
/// `LockScript::new(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, include_str!("acquire.lua")])`.
pub(crate) struct LockScript {
    plain: (String, Script),
    cluster: (String, Script),
    /// The fast paths (`*_first.lua`), the preludes and the body, as given.
    parts: Parts,
}

/// A script's parts, as the function library (see [`super::library`]) takes them apart.
pub(super) struct Parts {
    /// The `*_first.lua` fast paths, run first (the plain form only).
    pub(super) fast: Vec<&'static str>,
    /// The preludes, in order.
    pub(super) preludes: Vec<&'static str>,
    /// The script's own body: its last part.
    pub(super) body: &'static str,
}

impl LockScript {
    /// The script made of `parts`, in order: the preludes it calls, then its own body; a
    /// fast path for its common case may come before the preludes.
    pub(crate) fn new(parts: &[&'static str]) -> LockScript {
        let source = parts.join("\n");
        let kept: Vec<&str> = parts
            .iter()
            .copied()
            .filter(|part| !is_fast_path(part))
            .collect();
        let cluster = cluster_form(&kept.join("\n"));
        let (body, rest) = parts.split_last().map_or(("", &[][..]), |(b, r)| (*b, r));
        let (fast, preludes) = rest.iter().copied().partition(|part| is_fast_path(part));
        LockScript {
            plain: (source.clone(), Script::new(&source)),
            cluster: (cluster.clone(), Script::new(&cluster)),
            parts: Parts {
                fast,
                preludes,
                body,
            },
        }
    }

    /// The whole source, in the cluster's form when `cluster`.
    pub(crate) fn source(&self, cluster: bool) -> &str {
        if cluster {
            &self.cluster.0
        } else {
            &self.plain.0
        }
    }

    /// The loaded script (`EVALSHA`, `NOSCRIPT` fallback), in the cluster's form when
    /// `cluster`.
    pub(crate) fn variant(&self, cluster: bool) -> &Script {
        if cluster {
            &self.cluster.1
        } else {
            &self.plain.1
        }
    }

    /// The parts the script was made of.
    pub(super) fn parts(&self) -> &Parts {
        &self.parts
    }
}

/// `text` in the cluster's form: the lock prelude's `PUBLISH` and `RETRIED` lines changed.
pub(super) fn cluster_form(text: &str) -> String {
    let mut cluster = text.to_string();
    for (plain, clustered) in CLUSTER_LINES {
        cluster = cluster.replace(plain, clustered);
    }
    cluster
}

/// One of the crate's scripts, registered beside the `static` that makes it
/// (`inventory::submit!(Registered(|| &ACQUIRE));`), so that the function library (see
/// [`super::library`]) is made of every script of the crate with no module of `node`
/// naming the modules that use it (they use `node`).
pub(crate) struct Registered(pub(crate) fn() -> &'static LockScript);

inventory::collect!(Registered);

/// Every registered script, each once, in the order of their SHA-1 (a build's library text,
/// and so its version, does not depend on the order the linker put them in).
pub(crate) fn all() -> Vec<&'static LockScript> {
    let mut scripts: Vec<&'static LockScript> = inventory::iter::<Registered>
        .into_iter()
        .map(|registered| (registered.0)())
        .collect();
    scripts.sort_by(|a, b| a.variant(false).get_hash().cmp(b.variant(false).get_hash()));
    scripts.dedup_by(|a, b| a.variant(false).get_hash() == b.variant(false).get_hash());
    scripts
}

/// Asserts that each of the named `scripts` carries every prelude function it calls (see
/// [`undefined_calls`], with no exceptions): the one test every module with scripts runs.
#[cfg(test)]
pub(crate) fn assert_carries_preludes(scripts: &[(&str, &LockScript)], preludes: &[&str]) {
    for (name, script) in scripts {
        assert_eq!(
            undefined_calls(script, preludes, &[]),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

/// The prelude functions `script` calls, from its own body and, in turn, from the prelude
/// functions it calls, that none of its parts defines: a script must carry every prelude it
/// calls (a call of an undefined function fails only when it runs). `preludes` are every
/// prelude there is; `never` names functions whose calls the script's own input never reaches
/// (say, a prelude function's branch for KEYS the script is not given).
#[cfg(test)]
pub(crate) fn undefined_calls(
    script: &LockScript,
    preludes: &[&str],
    never: &[&str],
) -> Vec<String> {
    /// Each `local function NAME(...) ... end` of `source`, by name, with its body.
    fn functions(source: &str) -> Vec<(&str, &str)> {
        let mut found = Vec::new();
        let mut rest = source;
        while let Some(start) = rest.find("local function ") {
            let after = &rest[start + "local function ".len()..];
            let name_len = after.find('(').unwrap_or(0);
            let end = after.find("\nend\n").map_or(after.len(), |end| end + 5);
            found.push((&after[..name_len], &after[..end]));
            rest = &after[end..];
        }
        found
    }
    /// Whether `code` calls `name` (not as part of a longer name, not its definition).
    fn calls(code: &str, name: &str) -> bool {
        let pattern = format!("{name}(");
        code.match_indices(&pattern).any(|(at, _)| {
            let before = &code[..at];
            let joined = before
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.' || c == ':');
            !joined && !before.ends_with("function ")
        })
    }
    let source = script.source(false);
    let defined: Vec<&str> = functions(source)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let known: Vec<(&str, &str)> = preludes
        .iter()
        .flat_map(|prelude| functions(prelude))
        .collect();
    // The script's own body: what follows its last prelude function.
    let body = functions(source)
        .last()
        .and_then(|(_, last)| source.rfind(last).map(|at| &source[at + last.len()..]))
        .unwrap_or(source);
    let mut missing = Vec::new();
    let mut reached: Vec<&str> = Vec::new();
    let mut todo = vec![body];
    while let Some(code) = todo.pop() {
        for (name, function) in &known {
            if reached.contains(name) || never.contains(name) || !calls(code, name) {
                continue;
            }
            reached.push(name);
            if defined.contains(name) {
                todo.push(function);
            } else {
                missing.push((*name).to_string());
            }
        }
    }
    // A fast path before the preludes runs before any of their functions is defined: it may
    // call none of them (the code before the first definition, comments left out).
    let first = source.find("local function ").unwrap_or(source.len());
    let before: String = source[..first]
        .lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    for (name, _) in &known {
        if calls(&before, name) {
            missing.push(format!("{name} (called before it is defined)"));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every script is registered (tests/functions.rs counts the crate's `LockScript::new`s
    /// against the functions a server gets), each once, in a stable order.
    #[test]
    fn the_registered_scripts_come_in_a_stable_order_each_once() {
        let hashes: Vec<&str> = all().iter().map(|s| s.variant(false).get_hash()).collect();
        assert!(hashes.len() > 20, "{}", hashes.len());
        assert!(hashes.is_sorted(), "a stable order");
        assert!(
            hashes.windows(2).all(|pair| pair[0] != pair[1]),
            "each once"
        );
    }

    #[test]
    fn the_cluster_form_publishes_sharded_may_retry_and_has_no_fast_path() {
        let fast = "-- release_first.lua: a fast path\nif false then return 1 end";
        let prelude = "-- fence.lua: a prelude before the waiters' one";
        let script = LockScript::new(&[fast, prelude, crate::wait::LOCK_LUA, "return 1"]);
        let (plain, cluster) = (script.source(false), script.source(true));
        assert!(plain.starts_with(fast));
        assert!(!cluster.contains(fast));
        assert!(cluster.starts_with(prelude), "preludes are kept");
        for (line, clustered) in CLUSTER_LINES {
            assert!(plain.contains(line) && !plain.contains(clustered));
            assert!(cluster.contains(clustered) && !cluster.contains(line));
        }
        let mut back = cluster.to_string();
        for (line, clustered) in CLUSTER_LINES {
            back = back.replace(clustered, line);
        }
        assert_eq!(format!("{fast}\n{back}"), plain, "only those lines differ");
        // No publish is left to a literal command name.
        for source in [plain, cluster] {
            assert!(!source.contains("redis.call('PUBLISH'"));
            assert!(!source.contains("redis.call('SPUBLISH'"));
        }
    }

    #[test]
    fn a_fast_path_that_calls_a_prelude_function_is_reported() {
        let fast = "-- x_first.lua: a fast path\nif server_ms() > 0 then return 1 end";
        let script = LockScript::new(&[fast, crate::wait::LOCK_LUA, "return 0"]);
        assert_eq!(
            undefined_calls(&script, &[crate::wait::LOCK_LUA], &[]),
            ["server_ms (called before it is defined)"]
        );
        let fine = "-- x_first.lua: a fast path\nif redis.call('TIME') then return 1 end";
        let script = LockScript::new(&[fine, crate::wait::LOCK_LUA, "return 0"]);
        assert!(undefined_calls(&script, &[crate::wait::LOCK_LUA], &[]).is_empty());
    }

    #[test]
    fn a_script_without_the_lock_prelude_is_the_same_in_both_forms() {
        let script = LockScript::new(&["return 1"]);
        assert_eq!(script.source(false), script.source(true));
    }
}
