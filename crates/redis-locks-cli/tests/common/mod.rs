//! Shared helpers of the CLI tests: the real `redis-locks` binary, run against private servers.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The variables that name a Redis: removed, so that no test reaches a server it did not
/// start.
pub const REDIS_VARIABLES: [&str; 4] = [
    "REDIS_URL",
    "REDIS_CLUSTER",
    "REDIS_SENTINEL",
    "REDIS_MASTER",
];

/// The binary, with the `REDIS_*` variables removed so that no test reaches a server it did
/// not start.
pub fn command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-locks"));
    for variable in REDIS_VARIABLES {
        cmd.env_remove(variable);
    }
    cmd
}

/// Runs the binary with `args` to the end.
pub fn redis_locks(args: &[&str]) -> Output {
    command().args(args).output().expect("run redis-locks")
}

/// What it printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What it printed on stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
