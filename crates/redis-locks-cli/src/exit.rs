//! Exit codes (sysexits-style) and the error type the commands return.

use std::process::ExitCode;

/// A check failed: the demo found an overlap, a token that did not grow, or two winners; a
/// benchmark found an overlap or a broken market invariant; a chart could not be written.
pub const CHECK_FAILED: u8 = 1;
/// Bad usage: unknown flag, malformed duration, empty lock name.
pub const USAGE: u8 = 64;
/// Redis cannot be reached (or a private server could not be started).
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran, or another lock error.
pub const LOST: u8 = 70;
/// The lock was not acquired within `--wait`.
pub const NOT_ACQUIRED: u8 = 75;
/// The command to run could not be started.
pub const CANNOT_RUN: u8 = 127;

/// Why a command failed, with the exit code that says so.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or an argument is wrong.
    #[error("{0}")]
    Usage(String),
    /// Redis is out of reach, or no private server could be started.
    #[error("{0}")]
    Unavailable(String),
    /// A check of the results failed.
    #[error("{0}")]
    CheckFailed(String),
    /// The lock was not acquired in time.
    #[error("{0}")]
    NotAcquired(String),
    /// The lock was lost while it was needed.
    #[error("{0}")]
    Lost(String),
    /// The command to run could not be started.
    #[error("{0}")]
    CannotRun(String),
    /// A lock operation failed in a way none of the above covers.
    #[error(transparent)]
    Lock(redis_locks::Error),
}

impl From<redis_locks::Error> for CliError {
    fn from(err: redis_locks::Error) -> Self {
        match err {
            err if err.is_connection() => CliError::Unavailable(err.to_string()),
            err if err.is_held() => CliError::NotAcquired(err.to_string()),
            err if err.is_not_held() => CliError::Lost(err.to_string()),
            err @ (redis_locks::Error::InvalidName { .. }
            | redis_locks::Error::InvalidDuration { .. }
            | redis_locks::Error::InvalidUrl { .. }) => CliError::Usage(err.to_string()),
            err => CliError::Lock(err),
        }
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::Usage(_) => USAGE,
            CliError::Unavailable(_) => UNAVAILABLE,
            CliError::CheckFailed(_) => CHECK_FAILED,
            CliError::NotAcquired(_) => NOT_ACQUIRED,
            CliError::Lost(_) | CliError::Lock(_) => LOST,
            CliError::CannotRun(_) => CANNOT_RUN,
        })
    }
}
