//! `redis-locks run NAME -- COMMAND`: the distributed `flock(1)`. Acquires the lock, runs the
//! command with the lease renewed in the background, releases when it exits; stops the
//! command if the lock is lost.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis_locks::{Client, LockKeys, MutexGuard, MutexOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::CliError;

/// Options of `redis-locks run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The lock's name.
    pub name: String,
    /// The lease; a watchdog renews it every third while the command runs, so it bounds how
    /// long the lock outlives a crash of this process.
    #[arg(long, default_value = "30s", value_parser = crate::bench::parse_duration)]
    pub ttl: Duration,
    /// How long to wait for the lock; 0 tries once. Without it: wait as long as it takes.
    #[arg(long, value_parser = crate::bench::parse_duration)]
    pub wait: Option<Duration>,
    /// After SIGTERM (the lock was lost), how long the command has before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = crate::bench::parse_duration)]
    pub grace: Duration,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Runs the command under the lock and returns the exit code to leave with.
pub async fn run(url: &str, args: &RunArgs) -> Result<u8, CliError> {
    // Bad input is bad usage, whether or not Redis can be reached.
    LockKeys::new(&args.name)?;
    redis_locks::lease::lease_millis(args.ttl)?;
    let client = Client::connect(url).await?;
    let options = MutexOptions::default().lease(args.ttl).watchdog(true);
    let mutex = client.mutex_with(&args.name, options)?;
    let guard = match args.wait {
        None => mutex.lock().await?,
        Some(wait) if wait.is_zero() => mutex.try_lock().await?,
        Some(wait) => mutex.lock_timeout(wait).await?,
    };
    // Listen for signals before the command exists, so none sent once it runs is missed
    // (with the default action, a Ctrl-C would kill this process and orphan the command).
    let signals = match Signals::listen() {
        Ok(signals) => signals,
        Err(err) => {
            release_after_failure(guard, &args.name).await;
            return Err(err);
        }
    };
    let mut child = match Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("REDIS_LOCKS_TOKEN", guard.fencing_token().to_string())
        .env("REDIS_LOCKS_NAME", &args.name)
        .stdin(Stdio::inherit())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            release_after_failure(guard, &args.name).await;
            return Err(CliError::CannotRun(format!(
                "cannot run {:?}: {err}",
                args.command[0]
            )));
        }
    };
    supervise(&mut child, guard, args.grace, signals).await
}

/// Releases the lock of a run that failed before its command ran; the failure is what the
/// user hears about, and a release that went wrong is said beside it.
async fn release_after_failure(guard: MutexGuard, name: &str) {
    if let Err(err) = guard.release().await {
        eprintln!("redis-locks: releasing {name:?}: {err}");
    }
}

/// The signals `run` passes on to the command.
struct Signals {
    interrupts: tokio::signal::unix::Signal,
    terminates: tokio::signal::unix::Signal,
    hangups: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Signals, CliError> {
        let failed = |err: std::io::Error| CliError::CannotRun(format!("signal handling: {err}"));
        Ok(Signals {
            interrupts: signal(SignalKind::interrupt()).map_err(failed)?,
            terminates: signal(SignalKind::terminate()).map_err(failed)?,
            hangups: signal(SignalKind::hangup()).map_err(failed)?,
        })
    }
}

/// Waits for the command while watching the lock and this process's signals.
async fn supervise(
    child: &mut Child,
    guard: MutexGuard,
    grace: Duration,
    mut signals: Signals,
) -> Result<u8, CliError> {
    let lost = guard.lost();
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = exit_code(status);
                // The command is done: give the lock back, and say if it had been lost.
                return match guard.release().await {
                    Ok(()) => Ok(code),
                    Err(err) if err.is_not_held() => Err(CliError::Lost(format!(
                        "the command finished, but the lock had been lost meanwhile: {err}"
                    ))),
                    Err(err) => {
                        eprintln!("redis-locks: the command finished; releasing the lock failed ({err}); its lease will end it");
                        Ok(code)
                    }
                };
            }
            reason = &mut lost => {
                eprintln!("redis-locks: lock {:?} lost ({reason}); stopping the command", guard.name());
                stop(child, grace).await;
                return Err(CliError::Lost(format!("lock {:?} was lost while the command ran: {reason}", guard.name())));
            }
            _ = signals.interrupts.recv() => forward(child, Signal::SIGINT),
            _ = signals.terminates.recv() => forward(child, Signal::SIGTERM),
            _ = signals.hangups.recv() => forward(child, Signal::SIGHUP),
        }
    }
}

/// Passes a signal this process got on to the command; its exit then ends the run.
fn forward(child: &Child, signal: Signal) {
    if let Some(pid) = child.id() {
        let _ = kill(Pid::from_raw(pid as i32), signal);
    }
}

/// SIGTERM, then SIGKILL after `grace` if the command is still running.
async fn stop(child: &mut Child, grace: Duration) {
    forward(child, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("redis-locks: the command ignored SIGTERM for {grace:?}; sending SIGKILL");
        let _ = child.kill().await;
    }
}

/// The shell's convention: the exit code, or 128 + the signal that ended the command.
fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128u8.saturating_add(signal as u8),
            (None, None) => 1,
        },
        Err(_) => 1,
    }
}
