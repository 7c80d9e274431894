//! `redis-locks run NAME -- COMMAND`: the distributed `flock(1)`. Acquires the lock, runs the
//! command with the lease renewed in the background, releases when it exits; stops the
//! command if the lock is lost.

use std::process::Stdio;
use std::time::Duration;

use std::io::IsTerminal;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp, tcgetpgrp};
use redis_locks::{Client, LockKeys, Mutex, MutexGuard, MutexOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use cli_support::exit::CliError;

/// Options of `redis-locks run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The lock's name.
    pub name: String,
    /// The lease; a watchdog renews it every third while the command runs, so it bounds how
    /// long the lock outlives a crash of this process.
    #[arg(long, default_value = "30s", value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// How long to wait for the lock; 0 tries once. Without it: wait as long as it takes.
    #[arg(long, value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub wait: Option<Duration>,
    /// After SIGTERM (the lock was lost), how long the command and every process of its
    /// process group have before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = cli_support::parse_duration, allow_hyphen_values = true)]
    pub grace: Duration,
    /// Keep the command in this process's process group, as flock(1) does, so it can read
    /// the terminal and take Ctrl-C / Ctrl-Z from it like any foreground job; a lost lock or
    /// a forwarded signal then reaches the command itself only, not the processes it
    /// started. The default when `run` is the foreground job of a terminal; otherwise (cron,
    /// systemd, a job started with `&`, no terminal at all) the command runs in a process
    /// group of its own, and a lost lock stops every process of that group.
    #[arg(long)]
    pub foreground: bool,
    /// Say nothing while waiting (without it, a wait longer than a second says once who
    /// holds the lock and how long its lease still runs).
    #[arg(long, short)]
    pub quiet: bool,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Runs the command under the lock and returns the exit code to leave with.
pub async fn run(url: &str, args: &RunArgs) -> Result<u8, CliError> {
    // Bad input is bad usage, whether or not Redis can be reached.
    LockKeys::new(&args.name)?;
    redis_locks::LeaseOptions::default()
        .lease(args.ttl)
        .check()?;
    let client = Client::connect(url).await?;
    let options = MutexOptions::default().lease(args.ttl).watchdog(true);
    let mutex = client.mutex_with(&args.name, options)?;
    let guard = acquire(&mutex, args).await?;
    // Listen for signals before the command exists, so none sent once it runs is missed
    // (with the default action, a Ctrl-C would kill this process and orphan the command).
    let signals = match Signals::listen() {
        Ok(signals) => signals,
        Err(err) => {
            release_after_failure(guard, &args.name).await;
            return Err(err);
        }
    };
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDIS_LOCKS_TOKEN", guard.fencing_token().to_string())
        .env("REDIS_LOCKS_NAME", &args.name)
        .stdin(Stdio::inherit());
    let terminal = interactive();
    let group = !args.foreground && !terminal;
    if group {
        // A process group of its own: a lost lock stops everything the command started
        // (that stayed in the group), not only the command.
        command.process_group(0);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            release_after_failure(guard, &args.name).await;
            return Err(CliError::CannotRun(format!(
                "cannot run {:?}: {err}",
                args.command[0]
            )));
        }
    };
    let Some(pid) = child.id() else {
        // Reaped already: it ran and ended before we looked.
        let code = exit_code(child.wait().await);
        return finish(guard, code).await;
    };
    let target = Target {
        pid: Pid::from_raw(pid as i32),
        group,
        terminal: terminal && !group,
    };
    supervise(&mut child, target, guard, args.grace, signals).await
}

/// Whether `run` is the foreground job of a terminal: it has a controlling terminal
/// (`/dev/tty`, whatever its stdin is: `producer | redis-locks run ...` too) whose foreground
/// process group is `run`'s own. Its command then stays in that group, so it can read the
/// terminal and take Ctrl-C and Ctrl-Z from it.
fn interactive() -> bool {
    let Ok(tty) = std::fs::File::open("/dev/tty") else {
        return false;
    };
    tty.is_terminal() && tcgetpgrp(&tty).is_ok_and(|foreground| foreground == getpgrp())
}

/// How long `run` waits in silence before it says who holds the lock.
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// Takes the lock as `--wait` says; a wait longer than [`QUIET_WAIT`] says once, on stderr,
/// who holds the lock and how long its lease still runs (unless `--quiet`).
async fn acquire(mutex: &Mutex, args: &RunArgs) -> Result<MutexGuard, redis_locks::Error> {
    let lock = async {
        match args.wait {
            None => mutex.lock().await,
            Some(wait) if wait.is_zero() => mutex.try_lock().await,
            Some(wait) => mutex.lock_timeout(wait).await,
        }
    };
    tokio::pin!(lock);
    if args.quiet {
        return lock.await;
    }
    tokio::select! {
        outcome = &mut lock => return outcome,
        () = tokio::time::sleep(QUIET_WAIT) => {}
    }
    let name = mutex.name();
    match mutex.state().await {
        Ok(state) => match state.holder {
            Some(holder) => match holder.lease_remaining {
                Some(left) => eprintln!(
                    "redis-locks: waiting for lock {name:?}: held by owner {}, whose lease ends \
                     in {} unless its holder renews it",
                    holder.owner,
                    humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
                ),
                None => eprintln!(
                    "redis-locks: waiting for lock {name:?}: its key has no expiry, so it was \
                     not set by redis-locks and will never be freed unless someone deletes it"
                ),
            },
            None => eprintln!("redis-locks: waiting for lock {name:?}: it was just freed"),
        },
        Err(err) => eprintln!("redis-locks: waiting for lock {name:?} (its state: {err})"),
    }
    lock.await
}

/// Releases the lock of a command that has finished with `code`, and says if it had been lost.
async fn finish(guard: MutexGuard, code: u8) -> Result<u8, CliError> {
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(err) if err.is_not_held() => Err(CliError::Lost(format!(
            "the command finished, but the lock had been lost meanwhile: {err}"
        ))),
        Err(err) => {
            eprintln!(
                "redis-locks: the command finished; releasing the lock failed ({err}); its lease will end it"
            );
            Ok(code)
        }
    }
}

/// Whom `run`'s signals reach: the command's process group, or (`--foreground`, or at a
/// terminal) the command.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Pid,
    group: bool,
    /// The command shares `run`'s place as a terminal's foreground job: the terminal sends
    /// Ctrl-C, Ctrl-\ and Ctrl-Z to both, so `run` does not send them again.
    terminal: bool,
}

impl Target {
    /// Sends `signal`, one that ends a process, then SIGCONT, so that a stopped process (one
    /// that read the terminal from the background, say) acts on it.
    fn signal(self, signal: Signal) {
        self.send(signal);
        self.send(Signal::SIGCONT);
    }

    /// Passes on a signal that a terminal sends to its whole foreground job (SIGINT,
    /// SIGQUIT) unless the command is part of that job and has had it already.
    fn pass_on(self, signal: Signal) {
        if !self.terminal {
            self.signal(signal);
        }
    }

    /// Whether the command has exited (a zombie not yet reaped counts; `run` reaps it last,
    /// so its process group id cannot be reused while `run` still signals the group).
    fn exited(self) -> bool {
        matches!(state(self.pid), None | Some('Z'))
    }

    /// Whether the command is stopped (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU).
    fn stopped(self) -> bool {
        state(self.pid) == Some('T')
    }

    /// Sends `signal` as it is.
    fn send(self, signal: Signal) {
        if self.group {
            let _ = killpg(self.pid, signal);
        } else {
            let _ = kill(self.pid, signal);
        }
    }

    /// Whether any live process is left in the group (zombies do not count: an orphan that
    /// died waits for init to reap it, which some containers never do).
    fn group_alive(self) -> bool {
        self.group && group_members(self.pid) > 0
    }
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
    quits: tokio::signal::unix::Signal,
    /// Ctrl-Z: stop the command, then `run` itself, as a shell's job would stop.
    stops: tokio::signal::unix::Signal,
    /// `fg` / `bg`: continue the command too.
    continues: tokio::signal::unix::Signal,
}

impl Signals {
    fn listen() -> Result<Signals, CliError> {
        let failed = |err: std::io::Error| CliError::CannotRun(format!("signal handling: {err}"));
        let on = |signal_number: Signal| signal(SignalKind::from_raw(signal_number as i32));
        Ok(Signals {
            interrupts: signal(SignalKind::interrupt()).map_err(failed)?,
            terminates: signal(SignalKind::terminate()).map_err(failed)?,
            hangups: signal(SignalKind::hangup()).map_err(failed)?,
            quits: signal(SignalKind::quit()).map_err(failed)?,
            stops: on(Signal::SIGTSTP).map_err(failed)?,
            continues: on(Signal::SIGCONT).map_err(failed)?,
        })
    }
}

/// The state letter (`R`, `S`, `T` stopped, `Z` zombie...) and the process group of process
/// `pid`, from `/proc/PID/stat`; `None` when it is gone or `/proc` cannot be read.
fn stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// The state letter of process `pid`, as [`stat`] reads it.
fn state(pid: Pid) -> Option<char> {
    stat(pid.as_raw()).map(|(state, _)| state)
}

/// How many processes of process group `group` are alive (zombies do not count), as `/proc`
/// shows them.
fn group_members(group: Pid) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(stat)
        .filter(|&(state, member_of)| state != 'Z' && member_of == group.as_raw())
        .count()
}

/// Waits for the command while watching the lock and this process's signals.
async fn supervise(
    child: &mut Child,
    target: Target,
    guard: MutexGuard,
    grace: Duration,
    mut signals: Signals,
) -> Result<u8, CliError> {
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut check = tokio::time::interval(Duration::from_secs(1));
    let mut stopped_checks = 0;
    loop {
        tokio::select! {
            // A loss first: a command that ended as the lock was lost is reported as lost.
            biased;
            reason = &mut lost => {
                eprintln!("redis-locks: lock {:?} lost ({reason}); stopping the command", guard.name());
                stop(child, target, grace).await;
                return Err(CliError::Lost(format!("lock {:?} was lost while the command ran: {reason}", guard.name())));
            }
            status = child.wait() => return finish(guard, exit_code(status)).await,
            _ = signals.interrupts.recv() => target.pass_on(Signal::SIGINT),
            _ = signals.quits.recv() => target.pass_on(Signal::SIGQUIT),
            _ = signals.terminates.recv() => target.signal(Signal::SIGTERM),
            _ = signals.hangups.recv() => target.signal(Signal::SIGHUP),
            _ = signals.stops.recv() => {
                // Ctrl-Z: stop the command, then this process, so the shell gets its job
                // back; both go on together at `fg`. A command that ignores SIGTSTP is
                // stopped anyway: it must not run on while nobody renews the lease.
                if !target.terminal {
                    target.send(Signal::SIGTSTP);
                }
                let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
                while !target.stopped() && !target.exited() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if !target.stopped() {
                    target.send(Signal::SIGSTOP);
                }
                let _ = kill(Pid::this(), Signal::SIGSTOP);
            }
            _ = signals.continues.recv() => {
                // Continued after a stop: if the lease ran out meanwhile, the loss branch
                // stops the command for good (it resumes only to get SIGTERM).
                if guard.lost_reason().is_none() {
                    target.send(Signal::SIGCONT);
                }
            }
            _ = check.tick() => {
                // A command that stopped by itself (reading the terminal from the background,
                // say) holds the lock as long as it stays stopped: say so once.
                stopped_checks = if target.stopped() { stopped_checks + 1 } else { 0 };
                if stopped_checks == 2 {
                    eprintln!(
                        "redis-locks: the command is stopped (waiting to use the terminal from the \
                         background?) and keeps lock {:?} while it is; continue it (fg), or run \
                         it with --foreground", guard.name()
                    );
                }
            }
        }
    }
}

/// SIGTERM to the command (and its process group), then SIGKILL to whatever is left of them
/// once `grace` has passed. The command is reaped last: until then its zombie keeps the
/// group id from being reused, so no other group can be signalled by mistake.
async fn stop(child: &mut Child, target: Target, grace: Duration) {
    target.signal(Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    if state(Pid::this()).is_none() {
        // No /proc to watch: wait for the command itself, and then signal what is left.
        let exited = tokio::time::timeout_at(deadline, child.wait())
            .await
            .is_ok();
        if !exited {
            eprintln!("redis-locks: the command ignored SIGTERM for {grace:?}; sending SIGKILL");
        }
        if target.group && killpg(target.pid, None).is_ok() {
            let _ = killpg(target.pid, Signal::SIGKILL);
        }
        let _ = child.kill().await;
        return;
    }
    while (!target.exited() || target.group_alive()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !target.exited() || target.group_alive() {
        eprintln!(
            "redis-locks: the command{} ignored SIGTERM for {grace:?}; sending SIGKILL",
            if target.group {
                " or its process group"
            } else {
                ""
            }
        );
    }
    // Whatever the group still holds gets SIGKILL: live processes that `/proc` did not show
    // (hidepid) too, and zombies (harmless). The command's zombie pins the group id.
    if target.group {
        let _ = killpg(target.pid, Signal::SIGKILL);
    } else if !target.exited() {
        let _ = kill(target.pid, Signal::SIGKILL);
    }
    let _ = child.wait().await;
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
