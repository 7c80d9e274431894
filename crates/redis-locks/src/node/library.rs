//! The crate's scripts as one Redis function library (`FUNCTION LOAD`, `FCALL`).
//!
//! A script sent with `EVALSHA` defines its preludes again at every call. In the library
//! each prelude is defined once, when the library loads, and each script is a function
//! that runs only its own body. The library's text is made from the same `.lua` files:
//!
//! ```text
//! #!lua name=redis_locks_<version>
//! local KEYS, ARGV
//! <each prelude, once, in the order the scripts give them>
//! redis.register_function{function_name = 'redis_locks_<version>_<n>', flags = {...},
//!   callback = function(keys, args)
//!   KEYS, ARGV = keys, args
//!   <the script's fast paths, then its body>
//! end}
//! ```
//!
//! A release, an extension and a waiter leaving its place carry the `allow-oom` flag: a
//! server past `maxmemory` refuses a function without it whole, and a refused release would
//! leave the lock held until its lease ends (see [`FREEING`]). An inspection carries
//! `no-writes` ([`READING`]), so it reads where writes are refused.
//!
//! A function gets its keys and arguments as parameters, and a library may not assign
//! globals; the bodies and preludes read `KEYS` and `ARGV`, so each function sets the two
//! locals the preludes see before it runs. Functions run one at a time, so sharing them is
//! safe.
//!
//! The version is the first 12 hex digits of the SHA-1 of the library's text, and both the
//! library and every function carry it: two builds of the crate on one server never call
//! each other's code. The library exists in the two forms of [`LockScript`] (the cluster's
//! one with `SPUBLISH`, `RETRIED` true and no fast paths); a node loads the form its
//! backend runs.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::LockScript;
use super::script::cluster_form;

/// The library in both forms, made from every script of the crate.
pub(super) static LIBRARY: LazyLock<Library> =
    LazyLock::new(|| Library::new(&super::script::all()));

/// The library's name and its functions' names start with this.
const PREFIX: &str = "redis_locks_";

/// Stands for the version in the text until the version is known.
const VERSION_MARK: &str = "@VERSION@";

/// The crate's scripts as a function library, in the two forms.
pub(super) struct Library {
    plain: Form,
    cluster: Form,
}

/// One form of the library.
pub(super) struct Form {
    /// `redis_locks_<version>`.
    name: String,
    /// The text `FUNCTION LOAD` takes.
    text: String,
    /// The function of each script, by the script's SHA-1 in this form.
    functions: HashMap<String, String>,
}

impl Library {
    /// The library of `scripts` (a script given twice is one function).
    ///
    /// # Panics
    /// When two scripts give their preludes in different orders: a prelude may call only
    /// the ones before it, so one order must suit all.
    pub(super) fn new(scripts: &[&LockScript]) -> Library {
        Library {
            plain: Form::new(scripts, false),
            cluster: Form::new(scripts, true),
        }
    }

    /// The form a backend runs: the cluster's when `cluster`.
    pub(super) fn form(&self, cluster: bool) -> &Form {
        if cluster { &self.cluster } else { &self.plain }
    }
}

/// The bodies whose functions run on a server out of memory (`allow-oom`): the ones that
/// give something back or keep what is there — a release, an extension, a waiter leaving
/// its place. A function without flags is refused whole on a server past `maxmemory` (a
/// script sent with `EVALSHA` would only fail at a write that needs memory), and a release
/// refused there would leave the lock held until its lease ends. Taking a lock is refused.
const FREEING: [&str; 4] = ["release.lua", "extend.lua", "extend_many.lua", "leave.lua"];

/// The bodies that write nothing (`no-writes`): they run where writes are refused (past
/// `maxmemory`, without the replicas `min-replicas-to-write` asks for), as with `EVALSHA`.
const READING: [&str; 1] = ["inspect.lua"];

/// The file a script's own `.lua` (`body`) is, as its header's first line names it (`--
/// release.lua: ...`).
fn file_of(body: &str) -> Option<&str> {
    body.lines()
        .next()
        .and_then(|line| line.strip_prefix("-- "))
        .and_then(|line| line.split_once(':'))
        .map(|(file, _)| file)
}

/// The flags of `body`'s function, as the library's text gives them.
fn flags(body: &str) -> &'static str {
    match file_of(body) {
        Some(file) if FREEING.contains(&file) => "'allow-oom'",
        Some(file) if READING.contains(&file) => "'no-writes'",
        _ => "",
    }
}

impl Form {
    fn new(scripts: &[&LockScript], cluster: bool) -> Form {
        let preludes = prelude_order(scripts);
        let mut text = format!("#!lua name={PREFIX}{VERSION_MARK}\nlocal KEYS, ARGV\n");
        for prelude in &preludes {
            text.push_str(prelude);
            text.push('\n');
        }
        let mut names: Vec<(String, String)> = Vec::new();
        for script in scripts {
            let hash = script.variant(cluster).get_hash().to_string();
            if names.iter().any(|(known, _)| *known == hash) {
                continue;
            }
            let name = format!("{PREFIX}{VERSION_MARK}_{}", names.len());
            let parts = script.parts();
            text.push_str(&format!(
                "redis.register_function{{function_name = '{name}', flags = {{{}}}, callback = function(keys, args)\nKEYS, ARGV = keys, args\n",
                flags(parts.body)
            ));
            if !cluster {
                for fast in &parts.fast {
                    text.push_str(fast);
                    text.push('\n');
                }
            }
            text.push_str(parts.body);
            text.push_str("\nend}\n");
            names.push((hash, name));
        }
        if cluster {
            text = cluster_form(&text);
        }
        let version = redis::Script::new(&text).get_hash()[..12].to_string();
        let version = version.as_str();
        Form {
            name: format!("{PREFIX}{version}"),
            text: text.replace(VERSION_MARK, version),
            functions: names
                .into_iter()
                .map(|(hash, name)| (hash, name.replace(VERSION_MARK, version)))
                .collect(),
        }
    }

    /// The library's name: `redis_locks_<version>`.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The text `FUNCTION LOAD` takes.
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    /// The function that runs the script whose SHA-1 (in this form) is `hash`, if the
    /// library has it.
    pub(super) fn function(&self, hash: &str) -> Option<&str> {
        self.functions.get(hash).map(String::as_str)
    }
}

/// Every prelude the scripts give, each once, in an order that keeps each script's own: a
/// topological order of the "comes before" pairs the scripts give, the prelude first given
/// first where several may come next (so the order is the same for the same scripts).
///
/// # Panics
/// When no order keeps every script's (two scripts give two preludes in opposite orders).
fn prelude_order(scripts: &[&LockScript]) -> Vec<&'static str> {
    let mut preludes: Vec<&'static str> = Vec::new();
    let mut before: Vec<(usize, usize)> = Vec::new();
    for script in scripts {
        let mut last = None;
        for prelude in &script.parts().preludes {
            let index = match preludes.iter().position(|known| known == prelude) {
                Some(index) => index,
                None => {
                    preludes.push(prelude);
                    preludes.len() - 1
                }
            };
            if let Some(last) = last {
                before.push((last, index));
            }
            last = Some(index);
        }
    }
    let mut placed = vec![false; preludes.len()];
    let mut order = Vec::with_capacity(preludes.len());
    while order.len() < preludes.len() {
        let next = (0..preludes.len())
            .find(|&i| !placed[i] && before.iter().all(|&(a, b)| b != i || placed[a]))
            .expect("two scripts give their preludes in different orders");
        placed[next] = true;
        order.push(preludes[next]);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_prelude_is_defined_once_and_every_script_is_a_function() {
        let scripts = super::super::script::all();
        for cluster in [false, true] {
            let form = LIBRARY.form(cluster);
            assert!(
                form.text()
                    .starts_with(&format!("#!lua name={}\n", form.name()))
            );
            for prelude in [
                crate::token::FENCE_LUA,
                crate::wait::LOCK_LUA,
                crate::wait::QUEUE_LUA,
            ] {
                let prelude = if cluster {
                    cluster_form(prelude)
                } else {
                    prelude.to_string()
                };
                assert_eq!(form.text().matches(&prelude).count(), 1);
            }
            for script in &scripts {
                let name = form
                    .function(script.variant(cluster).get_hash())
                    .expect("every script is a function");
                assert!(name.starts_with(form.name()));
                assert!(form.text().contains(&format!("'{name}'")));
            }
            assert!(!form.text().contains(VERSION_MARK));
        }
        let (plain, cluster) = (LIBRARY.form(false), LIBRARY.form(true));
        assert_ne!(
            plain.name(),
            cluster.name(),
            "each form has its own version"
        );
        assert!(!cluster.text().contains("_first.lua:"), "no fast path");
        assert!(plain.text().contains("_first.lua:"));
    }

    #[test]
    fn releases_extensions_and_leaving_run_out_of_memory_and_taking_does_not() {
        let oom = "'allow-oom'";
        assert_eq!(
            flags(include_str!("../engine/string_lock/release.lua")),
            oom
        );
        assert_eq!(flags(include_str!("../engine/holds/extend.lua")), oom);
        assert_eq!(flags(include_str!("../wait/leave.lua")), oom);
        assert_eq!(
            flags(include_str!("../engine/string_lock/extend_many.lua")),
            oom
        );
        assert_eq!(
            flags(include_str!("../semaphore/inspect.lua")),
            "'no-writes'"
        );
        assert_eq!(flags(include_str!("../engine/string_lock/acquire.lua")), "");
        assert_eq!(flags(include_str!("../semaphore/resize.lua")), "");
        for cluster in [false, true] {
            let text = LIBRARY.form(cluster).text();
            // Every release, extension and leave script of the crate: 5 releases (string
            // lock, holds, fair, semaphore, MultiLock), 4 extensions, 1 leave.
            assert!(
                text.matches("flags = {'allow-oom'}").count() >= 11,
                "{cluster}"
            );
            // The three inspections (string lock, holds, semaphore) write nothing.
            assert_eq!(
                text.matches("flags = {'no-writes'}").count(),
                3,
                "{cluster}"
            );
            assert_eq!(
                text.matches("flags = {").count(),
                text.matches("redis.register_function{").count()
            );
        }
    }

    #[test]
    fn no_two_preludes_define_the_same_name() {
        let mut seen = std::collections::HashSet::new();
        for prelude in prelude_order(&super::super::script::all()) {
            for line in prelude.lines().filter(|line| line.starts_with("local ")) {
                let name = line["local ".len()..]
                    .trim_start_matches("function ")
                    .split(['(', ' ', '='])
                    .next()
                    .unwrap_or_default();
                assert!(seen.insert(name.to_string()), "{name} is defined twice");
            }
        }
    }

    #[test]
    fn preludes_are_ordered_by_what_every_script_asks_not_by_first_come() {
        let (a, b, c) = ("-- a.lua", "-- b.lua", "-- c.lua");
        let scripts = [
            LockScript::new(&[a, b, "return 1"]),
            LockScript::new(&[c, b, "return 2"]),
            LockScript::new(&[a, c, "return 3"]),
        ];
        let scripts: Vec<&LockScript> = scripts.iter().collect();
        assert_eq!(prelude_order(&scripts), [a, c, b]);
    }

    #[test]
    #[should_panic(expected = "different orders")]
    fn preludes_in_different_orders_are_refused() {
        let one = LockScript::new(&["-- a.lua\nlocal function a() end", "-- b.lua", "return 1"]);
        let two = LockScript::new(&["-- b.lua", "-- a.lua\nlocal function a() end", "return 2"]);
        Library::new(&[&one, &two]);
    }
}
