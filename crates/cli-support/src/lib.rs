//! What the redis-locks command-line programs (`redis-locks` and `redis-locks-bench`) share,
//! so that both say the same things the same way: the exit codes and the error type that
//! carries them ([`exit`]), the Redis a command uses ([`topology`]: `--cluster`, `--sentinel`
//! beside `--redis`; [`redis_target`]: the one named, or private servers; [`endpoint`]: how
//! every process connects to it; [`settings`]: TLS and the key namespace), the cleanup of fencing counters ([`leftovers`]), a connection of their
//! own beside the lock client's ([`connection`]), durations on the command line
//! ([`parse_duration`]), and the frame of `main` ([`parse`], [`block_on`]).
//!
//! Not published: it exists for the two binaries of this workspace.

pub mod endpoint;
pub mod exit;
pub mod leftovers;
pub mod primitive;
pub mod redis_target;
pub mod settings;
pub mod timeline;
pub mod topology;

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::exit::CliError;

/// Parses `500ms`, `5s`, `2m` (humantime) for clap; a zero or negative duration is refused
/// where it makes no sense by the caller.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(cli_support::parse_duration("500ms"), Ok(Duration::from_millis(500)));
/// assert!(cli_support::parse_duration("-1s").unwrap_err().contains("negative"));
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!("a duration cannot be negative: {text}"));
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("{err} (write durations like 500ms, 5s, 2m)"))
}

/// How long a connection of [`connection`] may take to open, and a reply to come: the lock
/// client's defaults.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection of the program's own to the Redis at `url`, beside the lock client's, for
/// the commands that are not the locks': deleting fencing counters, the benchmarks' bare
/// baselines, `MEMORY USAGE`. It waits as the lock client does by default (2 s to connect,
/// 2 s for a reply) and tries to connect twice at most.
///
/// # Errors
/// [`CliError::Usage`] for a URL that cannot name a server; [`CliError::Unavailable`] when
/// no connection could be opened.
pub async fn connection(url: &str) -> Result<ConnectionManager, CliError> {
    connection_with(url, &settings::ClientSettings::default()).await
}

/// As [`connection`], with the TLS settings of `settings` (those the lock clients use).
///
/// # Errors
/// As [`connection`]; also [`CliError::NoInput`] for a TLS file that cannot be read.
pub async fn connection_with(
    url: &str,
    settings: &settings::ClientSettings,
) -> Result<ConnectionManager, CliError> {
    let client = settings.redis_client(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(CONNECTION_TIMEOUT))
        .set_number_of_retries(1);
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(|err| CliError::Unavailable(format!("cannot open a connection to Redis: {err}")))
}

/// `text` with the password of every URL in it hidden (`redis://user:***@host`), as the
/// library hides them: for every message and report that shows a URL. The user information
/// ends at the last `@` (a password with a raw `@` is hidden whole); a `unix://` URL's
/// `pass=` (or `password=`) query value is hidden too. URLs are found as words separated by
/// spaces or commas.
///
/// ```
/// use cli_support::redact;
/// assert_eq!(redact("redis://u:secret@h:6379/0"), "redis://u:***@h:6379/0");
/// assert_eq!(redact("rediss://:p@ss@h:1#insecure"), "rediss://:***@h:1#insecure");
/// assert_eq!(redact("redis://h:1, redis://:two@h:2"), "redis://h:1, redis://:***@h:2");
/// assert_eq!(redact("unix:///tmp/r.sock?user=u&pass=secret"), "unix:///tmp/r.sock?user=u&pass=***");
/// assert_eq!(redact("redis://h:1"), "redis://h:1");
/// ```
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for c in text.chars() {
        if c == ' ' || c == ',' {
            out.push_str(&redact_one(&word));
            word.clear();
            out.push(c);
        } else {
            word.push(c);
        }
    }
    out.push_str(&redact_one(&word));
    out
}

/// One URL with its password hidden.
fn redact_one(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    let rest = match rest.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key == "pass" || key == "password" => format!("{key}=***"),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => rest,
    };
    format!("{scheme}://{rest}")
}

/// Parses the command line as `C`. On bad usage the error goes to stderr (as one JSON object,
/// `{"error", "kind": "usage", "exit_code": 64}`, with `--json` on the line) and the exit code
/// is 64; `--help` and `--version` print to stdout and exit 0.
///
/// # Errors
/// The exit code to end with, when there is nothing to run.
pub fn parse<C: clap::Parser>() -> Result<C, ExitCode> {
    C::try_parse().map_err(|err| {
        if !err.use_stderr() {
            let _ = err.print();
            return ExitCode::from(0);
        }
        if json_asked() {
            let error = serde_json::json!({
                "error": err.kind().as_str().map_or_else(|| err.to_string(), str::to_string),
                "detail": redact(err.to_string().trim()),
                "kind": "usage",
                "exit_code": exit::USAGE,
            });
            eprintln!("{error}");
        } else {
            let _ = err.print();
        }
        ExitCode::from(exit::USAGE)
    })
}

/// Runs `command` to its end on a multi-threaded Tokio runtime, with the libraries' logs on
/// stderr (level `warn`, or `RUST_LOG`), and turns its outcome into the exit code: the code it
/// returned, or its error's, printed after `program: ` (with every URL's password hidden,
/// [`redact`]).
pub fn block_on(program: &str, command: impl Future<Output = Result<u8, CliError>>) -> ExitCode {
    block_on_with(program, Flavor::MultiThread, command)
}

/// Which Tokio runtime a program runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    /// Tokio's default: a worker thread per core, tasks moved between them.
    MultiThread,
    /// Every task on the one thread that runs the program.
    CurrentThread,
}

/// As [`block_on`], on a runtime of the given `flavor`.
pub fn block_on_with(
    program: &str,
    flavor: Flavor,
    command: impl Future<Output = Result<u8, CliError>>,
) -> ExitCode {
    block_on_logged(program, flavor, 0, command)
}

/// As [`block_on_with`], with the logs of `verbosity` when `RUST_LOG` is not set: 0 warnings,
/// 1 (`-v`) the locks' spans and events at `debug` (`redis_locks=debug`), 2 and more (`-vv`)
/// at `trace`. With `--json` on the command line (before a `--`), an error goes to stderr as
/// one JSON object: `{"error": MESSAGE, "kind": KIND, "exit_code": CODE}`.
pub fn block_on_logged(
    program: &str,
    flavor: Flavor,
    verbosity: u8,
    command: impl Future<Output = Result<u8, CliError>>,
) -> ExitCode {
    let level = match verbosity {
        0 => "warn",
        1 => "warn,redis_locks=debug",
        _ => "warn,redis_locks=trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(color_on_stderr())
        // With -v, each span is logged as it closes, with its fields (attempts, wait, outcome).
        .with_span_events(if verbosity > 0 {
            tracing_subscriber::fmt::format::FmtSpan::CLOSE
        } else {
            tracing_subscriber::fmt::format::FmtSpan::NONE
        })
        .init();
    let mut builder = match flavor {
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("{program}: cannot start the async runtime: {err}");
            return ExitCode::from(exit::LOST);
        }
    };
    match runtime.block_on(command) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            // Every URL in the message with its password hidden, whatever said it (the
            // library hides them too; this also covers a `unix://` URL's `pass=`).
            let message = redact(&err.to_string());
            if json_asked() {
                let error = serde_json::json!({
                    "error": message,
                    "kind": err.kind(),
                    "exit_code": err.code(),
                });
                eprintln!("{error}");
            } else {
                eprintln!("{program}: {message}");
            }
            err.exit_code()
        }
    }
}

/// Whether `--json` is among the program's arguments (before a `--`, after which they are a
/// command's own).
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

/// Whether stderr takes colour: a terminal, and `NO_COLOR` unset or empty
/// (<https://no-color.org>).
pub fn color_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// Serves the metrics of this process (the library's `redis_locks_...`) for Prometheus at
/// `addr` (`--metrics-addr`), from now until the process exits.
///
/// # Errors
/// [`CliError::Usage`] when `addr` cannot be listened on (in use, not this host's).
pub fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), CliError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|err| CliError::Usage(format!("--metrics-addr {addr}: {err}")))?;
    redis_locks::describe_metrics();
    Ok(())
}
