//! Exit codes (sysexits-style) and the error type the commands return.

use std::process::ExitCode;

use redis_locks::TlsProblem;

/// A check failed: the demo found an overlap, a token that did not grow, or two winners; a
/// benchmark found an overlap or a broken market invariant; a chart could not be written.
pub const CHECK_FAILED: u8 = 1;
/// Bad usage: unknown flag, malformed duration, empty lock name, a name given twice to a
/// `MultiLock` (`run NAME1 NAME2 ...`); TLS settings that cannot be
/// used (a CA or certificate that is not PEM, `--tls-cert` without `--tls-key`, TLS files
/// with a `redis://` URL, a `#insecure` URL without `--tls-insecure`).
pub const USAGE: u8 = 64;
/// A key of the lock holds something that is not this lock's: another Redis type, a name in
/// use as another kind of lock (an `RwLock` taken as a `Mutex`, say), a semaphore in use with
/// another number of permits (`run --permits` with another N than its holders'), or a
/// fencing counter that is not an integer (`EX_DATAERR`).
pub const DATA: u8 = 65;
/// A file named on the command line cannot be read: the `--tls-ca`, `--tls-cert` or
/// `--tls-key` file (`EX_NOINPUT`).
pub const NO_INPUT: u8 = 66;
/// Redis cannot be reached, is not Redis, answers too slowly, or refuses the command
/// (read-only replica, out of memory, no `WAIT` or `WAITAOF`); a `rediss://` URL names a
/// server that does not speak TLS; fewer replicas than `--replicas` acknowledged a grant in
/// time (it was released); or a private server could not be started; or `redis-locks bench`
/// found no `redis-locks-bench` program to run.
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran, or Redis gave a reply the lock never expects.
pub const LOST: u8 = 70;
/// The lock was not acquired within `--wait`.
pub const NOT_ACQUIRED: u8 = 75;
/// Redis refused this client: no password, a wrong one, or an ACL that forbids what the lock
/// needs (`NOAUTH`, `WRONGPASS`, `NOPERM`); or the TLS handshake failed on a certificate: the
/// server's is not trusted (another CA, another host name, expired), or the server refused
/// this client's or wanted one (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// The command to run could not be started.
pub const CANNOT_RUN: u8 = 127;

/// Why a command failed, with the exit code that says so.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or an argument is wrong.
    #[error("{0}")]
    Usage(String),
    /// A file named on the command line cannot be read.
    #[error("{0}")]
    NoInput(String),
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
    /// A key of the lock holds data the lock did not write.
    #[error("{0}")]
    Data(String),
    /// Redis refused this client's credentials or permissions.
    #[error("{0}")]
    NoPermission(String),
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
            err if err.is_auth() => CliError::NoPermission(err.to_string()),
            err @ redis_locks::Error::Tls { problem, .. } => match problem {
                TlsProblem::ServerCertificate | TlsProblem::ClientCertificate => {
                    CliError::NoPermission(err.to_string())
                }
                TlsProblem::NotTls => CliError::Unavailable(err.to_string()),
                _ => CliError::Usage(err.to_string()),
            },
            err @ (redis_locks::Error::InvalidName { .. }
            | redis_locks::Error::InvalidDuration { .. }
            | redis_locks::Error::InvalidUrl { .. }
            | redis_locks::Error::InvalidNodes { .. }
            | redis_locks::Error::InvalidReplication { .. }
            | redis_locks::Error::InvalidPermits { .. }
            | redis_locks::Error::InvalidNames { .. }) => CliError::Usage(err.to_string()),
            err @ (redis_locks::Error::WrongType { .. }
            | redis_locks::Error::PermitsMismatch { .. }) => CliError::Data(err.to_string()),
            err @ (redis_locks::Error::NotRedis { .. }
            | redis_locks::Error::Redis { .. }
            | redis_locks::Error::NoQuorum { .. }
            | redis_locks::Error::NotReplicated { .. }
            | redis_locks::Error::Unsupported { .. }) => CliError::Unavailable(err.to_string()),
            err => CliError::Lock(err),
        }
    }
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code())
    }

    /// What kind of error this is, as `--json` errors name it: `usage`, `no_input`,
    /// `unavailable`, `check_failed`, `not_acquired`, `lost`, `data`, `no_permission`,
    /// `cannot_run`.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::Usage(_) => "usage",
            CliError::NoInput(_) => "no_input",
            CliError::Unavailable(_) => "unavailable",
            CliError::CheckFailed(_) => "check_failed",
            CliError::NotAcquired(_) => "not_acquired",
            CliError::Lost(_) | CliError::Lock(_) => "lost",
            CliError::Data(_) => "data",
            CliError::NoPermission(_) => "no_permission",
            CliError::CannotRun(_) => "cannot_run",
        }
    }

    /// The process exit code for this error, as a number.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => USAGE,
            CliError::NoInput(_) => NO_INPUT,
            CliError::Unavailable(_) => UNAVAILABLE,
            CliError::CheckFailed(_) => CHECK_FAILED,
            CliError::NotAcquired(_) => NOT_ACQUIRED,
            CliError::Lost(_) | CliError::Lock(_) => LOST,
            CliError::Data(_) => DATA,
            CliError::NoPermission(_) => NO_PERMISSION,
            CliError::CannotRun(_) => CANNOT_RUN,
        }
    }
}
