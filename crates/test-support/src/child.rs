//! Another OS process running one test function of the current test binary.
//!
//! A test that needs a second process (a lock holder to kill with SIGKILL, a competitor in
//! another address space) re-runs its own test binary with `--exact <name> --ignored`, so the
//! child's code lives next to the test that drives it. The child function is marked
//! `#[ignore]` so the normal run skips it, and talks to the parent through stdout lines.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A child process running one `#[ignore]`d test of the current test binary; killed on drop.
///
/// ```no_run
/// use std::time::Duration;
/// use test_support::ChildProcess;
///
/// // In the parent test:
/// let mut child = ChildProcess::spawn_test("holder_child", &[("REDIS_URL", "redis://127.0.0.1:7000")])
///     .unwrap();
/// let line = child.wait_for_line("acquired", Duration::from_secs(10)).unwrap();
/// child.kill_hard();
///
/// // In the same test file:
/// #[test]
/// #[ignore = "runs only as a child process of another test"]
/// fn holder_child() {
///     println!("acquired token=42");
/// }
/// ```
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    lines: Receiver<String>,
    seen: VecDeque<String>,
    reaped: bool,
}

impl ChildProcess {
    /// Runs the `#[ignore]`d test `test_name` of the current test binary in a new process,
    /// with `envs` added to its environment.
    ///
    /// # Errors
    /// When the current executable cannot be found or spawned.
    pub fn spawn_test(test_name: &str, envs: &[(&str, &str)]) -> io::Result<ChildProcess> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "--exact",
            test_name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        Self::spawn(cmd)
    }

    /// Spawns any command with its stdout read line by line (see [`wait_for_line`]).
    ///
    /// [`wait_for_line`]: ChildProcess::wait_for_line
    ///
    /// # Errors
    /// When the command cannot be spawned.
    pub fn spawn(mut cmd: Command) -> io::Result<ChildProcess> {
        cmd.stdout(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildProcess {
            child,
            lines,
            seen: VecDeque::new(),
            reaped: false,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for a stdout line containing `marker`, and returns the line from
    /// the marker on (libtest may print its own `test name ... ` before it on the same line).
    /// Lines without the marker are kept for [`take_lines`].
    ///
    /// [`take_lines`]: ChildProcess::take_lines
    ///
    /// Returns `None` when the time ran out or the child closed its stdout first.
    pub fn wait_for_line(&mut self, marker: &str, timeout: Duration) -> Option<String> {
        if let Some(pos) = self.seen.iter().position(|l| l.contains(marker)) {
            return self.seen.remove(pos).map(|line| from_marker(&line, marker));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(marker) => return Some(from_marker(&line, marker)),
                Ok(line) => self.seen.push_back(line),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Takes every line read so far that contains `marker` (and that no [`wait_for_line`]
    /// took), each from the marker on.
    ///
    /// [`wait_for_line`]: ChildProcess::wait_for_line
    pub fn take_lines(&mut self, marker: &str) -> Vec<String> {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push_back(line);
        }
        let (taken, kept): (Vec<String>, Vec<String>) =
            self.seen.drain(..).partition(|l| l.contains(marker));
        self.seen = kept.into();
        taken.iter().map(|line| from_marker(line, marker)).collect()
    }

    /// Waits up to `timeout` for the child to exit and returns its exit code
    /// (`None` if it was killed by a signal or is still running at the timeout).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.reaped = true;
                return status.code();
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Sends SIGSTOP: the child freezes (as in a long GC pause) until [`resume`].
    ///
    /// [`resume`]: ChildProcess::resume
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Sends SIGCONT to a paused child.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Kills the child with SIGKILL (no cleanup code runs in it) and reaps it.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reaped = true;
    }

    fn signal(&self, signal: Signal) {
        // Only a child not yet reaped: its pid cannot have been given to another process.
        if !self.reaped {
            let _ = kill(Pid::from_raw(self.child.id() as i32), signal);
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.resume();
        self.kill_hard();
    }
}

fn from_marker(line: &str, marker: &str) -> String {
    let at = line.find(marker).unwrap_or(0);
    line[at..].to_string()
}
