//! Which server program the private servers run: `redis-server` by default, or the one
//! `REDIS_LOCKS_SERVER` names (Valkey's `valkey-server`, say).

use std::path::{Path, PathBuf};

/// The environment variable that names the server program every private server, cluster node
/// and sentinel runs: a path (absolute, or relative to the current directory or to the
/// workspace root) or a program name looked up on `PATH`. Unset or empty: `redis-server`.
///
/// ```
/// assert_eq!(test_support::SERVER_ENV, "REDIS_LOCKS_SERVER");
/// ```
pub const SERVER_ENV: &str = "REDIS_LOCKS_SERVER";

/// The server program used when [`SERVER_ENV`] is unset or empty.
///
/// ```
/// assert_eq!(test_support::DEFAULT_SERVER, "redis-server");
/// ```
pub const DEFAULT_SERVER: &str = "redis-server";

/// The server program every private server runs: what [`SERVER_ENV`] names, else
/// [`DEFAULT_SERVER`]. A relative path that does not exist from the current directory (a test
/// runs in its crate's directory) is taken from the workspace root, so
/// `REDIS_LOCKS_SERVER=target/valkey/valkey-server` works from there.
///
/// ```
/// let program = test_support::server_program();
/// assert!(!program.as_os_str().is_empty());
/// ```
pub fn server_program() -> PathBuf {
    let named = std::env::var_os(SERVER_ENV)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let Some(named) = named else {
        return PathBuf::from(DEFAULT_SERVER);
    };
    // A bare name is looked up on PATH, as `Command` does.
    if named.is_absolute() || named.components().count() < 2 || named.exists() {
        return named;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let from_root = workspace.join(&named);
    if from_root.exists() {
        from_root.canonicalize().unwrap_or(from_root)
    } else {
        named
    }
}

/// The server program, for messages: its path or name as [`server_program`] gives it.
pub(crate) fn server_name() -> String {
    server_program().display().to_string()
}
