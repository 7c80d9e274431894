//! `redis-locks run` and `status` as real processes against a real server.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{command, exists};
use test_support::{ChildProcess, RedisServer};

fn run(server: &RedisServer, args: &[&str], command: &[&str]) -> Command {
    let mut cmd = common::command();
    cmd.args(["run", "--redis", &server.url()])
        .args(args)
        .arg("--")
        .args(command);
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run redis-locks")
}

#[test]
fn the_command_gets_the_token_and_name_and_its_exit_code_is_kept() {
    let server = RedisServer::start().unwrap();
    let script = "echo token=$REDIS_LOCKS_TOKEN name=$REDIS_LOCKS_NAME; exit 3";
    let first = output(run(&server, &["job"], &["sh", "-c", script]));
    assert_eq!(first.status.code(), Some(3));
    let second = output(run(&server, &["job"], &["sh", "-c", script]));
    let token = |out: &Output| -> u64 {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let field = text.split_whitespace().next().unwrap();
        field.strip_prefix("token=").unwrap().parse().unwrap()
    };
    assert!(
        token(&second) > token(&first),
        "tokens increase across runs"
    );
    assert!(String::from_utf8_lossy(&second.stdout).contains("name=job"));
    assert!(!exists(&server, "job"), "released after the command");
}

#[test]
fn of_two_runs_with_wait_zero_exactly_one_runs_the_command() {
    let server = RedisServer::start().unwrap();
    let spawn = || {
        run(
            &server,
            &["once", "--wait", "0"],
            &["sh", "-c", "echo ran; sleep 1"],
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let mut codes = [a.status.code().unwrap(), b.status.code().unwrap()];
    codes.sort();
    assert_eq!(codes, [0, 75], "one ran, one was told the lock is held");
    let ran = [&a, &b]
        .iter()
        .filter(|o| String::from_utf8_lossy(&o.stdout).contains("ran"))
        .count();
    assert_eq!(ran, 1);
    let loser = if a.status.code() == Some(75) { &a } else { &b };
    assert!(String::from_utf8_lossy(&loser.stderr).contains("held by another owner"));
}

#[test]
fn a_waiting_run_starts_after_a_killed_holders_ttl() {
    let server = RedisServer::start().unwrap();
    let mut holder = ChildProcess::spawn(run(
        &server,
        &["crash", "--ttl", "1s"],
        &["sh", "-c", "echo holding $$; exec sleep 4"],
    ))
    .unwrap();
    let line = holder
        .wait_for_line("holding", Duration::from_secs(30))
        .unwrap();
    // The command outlives a SIGKILLed `run` (as with flock); end it with the test.
    let orphan: i32 = line["holding ".len()..].parse().unwrap();
    let mut waiter =
        ChildProcess::spawn(run(&server, &["crash"], &["sh", "-c", "echo started"])).unwrap();
    holder.kill_hard();
    let ttl: i64 = redis::cmd("PTTL")
        .arg("crash")
        .query(&mut server.connection().unwrap())
        .unwrap();
    let killed_at = Instant::now();
    waiter
        .wait_for_line("started", Duration::from_secs(10))
        .expect("the waiting run started");
    let waited = killed_at.elapsed();
    let remaining = Duration::from_millis(ttl as u64);
    assert!(
        waited + Duration::from_millis(5) >= remaining,
        "{waited:?} < {remaining:?}"
    );
    assert!(
        waited < remaining + Duration::from_secs(1),
        "{waited:?}, ttl {remaining:?}"
    );
    assert_eq!(waiter.wait_exit(Duration::from_secs(10)), Some(0));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(orphan),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Starts `run NAME FLAGS... --ttl 600ms --grace GRACE -- sh -c SCRIPT`, waits for the
/// script's `ready <pid> [<pid>...]` line, then deletes the lock key by hand, as an operator
/// or an expiry would. Returns the runner and the pids of the line.
fn run_and_lose_the_lock(
    server: &RedisServer,
    name: &str,
    flags: &[&str],
    grace: &str,
    script: &str,
) -> (ChildProcess, Vec<i32>) {
    let args = [&[name, "--ttl", "600ms", "--grace", grace][..], flags].concat();
    let mut runner = ChildProcess::spawn(run(server, &args, &["sh", "-c", script])).unwrap();
    let ready = runner
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let pids = ready
        .split_whitespace()
        .skip(1)
        .map(|pid| pid.parse().unwrap())
        .collect();
    redis::cmd("DEL")
        .arg(name)
        .exec(&mut server.connection().unwrap())
        .unwrap();
    (runner, pids)
}

/// Whether process `pid` still runs: it exists and is not a zombie (an orphan that died
/// waits for init to reap it, which some containers never do).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z`...), if it exists.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits up to `limit` for process `pid` to be in state `want`.
fn reaches(pid: i32, want: char, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while state(pid) != Some(want) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits up to `limit` for the process group `pgid` to be stopped: every member stopped
/// (`T`), or held in `D` by a child that was stopped (a shell forks its commands with
/// `vfork`, and waits uninterruptibly until the child has exec'd; a child stopped before
/// that holds it there), and at least one member stopped.
fn group_stopped(pgid: i32, limit: Duration) -> bool {
    let states = || -> Vec<char> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| {
                let stat = std::fs::read_to_string(entry.ok()?.path().join("stat")).ok()?;
                let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
                let state = fields.next()?.chars().next()?;
                let group: i32 = fields.nth(1)?.parse().ok()?;
                (group == pgid && state != 'Z').then_some(state)
            })
            .collect()
    };
    let deadline = Instant::now() + limit;
    loop {
        let states = states();
        if states.contains(&'T') && states.iter().all(|s| matches!(s, 'T' | 't' | 'D')) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits up to `limit` for every process of `pids` to be gone.
fn all_gone(pids: &[i32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|&pid| alive(pid)) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn a_lock_lost_mid_run_stops_the_command_and_exits_70() {
    let server = RedisServer::start().unwrap();
    let script = "trap 'echo got-term; exit 0' TERM; echo ready $$; while :; do sleep 0.05; done";
    // The same for the Mutex and for either side of the RwLock (a hold of its hash).
    for (name, flags) in [
        ("lost", &[][..]),
        ("lost-shared", &["--shared"]),
        ("lost-exclusive", &["--exclusive"]),
    ] {
        let (mut runner, _) = run_and_lose_the_lock(&server, name, flags, "5s", script);
        runner
            .wait_for_line("got-term", Duration::from_secs(5))
            .expect("the command got SIGTERM");
        assert_eq!(
            runner.wait_exit(Duration::from_secs(10)),
            Some(70),
            "{flags:?}"
        );
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let server = RedisServer::start().unwrap();
    let script = "trap '' TERM; echo ready $$; while :; do sleep 0.05; done";
    let (mut runner, pids) = run_and_lose_the_lock(&server, "stubborn", &[], "1s", script);
    let pid = pids[0];
    let lost = std::time::Instant::now();
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(70));
    // SIGTERM comes after the loss, SIGKILL a whole grace period later, not at once.
    assert!(
        lost.elapsed() >= Duration::from_secs(1),
        "killed {:?} after the loss, before the 1 s grace",
        lost.elapsed()
    );
    // `run` waited for it, so the command is reaped: gone, not orphaned.
    assert!(!alive(pid), "the command survived its SIGKILL");
}

#[test]
fn a_run_that_waits_in_vain_exits_75_without_running_the_command() {
    let server = RedisServer::start().unwrap();
    let mut holder = ChildProcess::spawn(run(
        &server,
        &["busy"],
        &["sh", "-c", "echo ready; sleep 3"],
    ))
    .unwrap();
    holder
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let out = output({
        let mut cmd = command();
        cmd.args(["run", "busy", "--wait", "200ms", "--redis", &server.url()])
            .args(["--", "sh", "-c", "echo ran"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(75));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert_eq!(holder.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn ctrl_c_is_passed_to_the_command_and_the_lock_released() {
    let server = RedisServer::start().unwrap();
    let script = "trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let mut runner =
        ChildProcess::spawn(run(&server, &["interrupted"], &["sh", "-c", script])).unwrap();
    runner
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    assert!(exists(&server, "interrupted"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.pid() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    runner
        .wait_for_line("got-int", Duration::from_secs(5))
        .expect("the command got SIGINT");
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(7));
    assert!(
        !exists(&server, "interrupted"),
        "released after the command exited"
    );
}

#[test]
fn run_exit_codes_for_bad_usage_unreachable_redis_and_a_missing_command() {
    let server = RedisServer::start().unwrap();
    let bad = [
        &["run", "x", "--wait", "-1s", "--", "true"][..],
        &["run", "x", "--ttl", "soon", "--", "true"],
        &["run", "x"],
        &["run", "", "--", "true"],
        &["run", "x", "--ttl", "0s", "--", "true"],
    ];
    for args in bad {
        let out = output({
            let mut cmd = command();
            cmd.args(["run", "--redis", &server.url()]).args(&args[1..]);
            cmd
        });
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dead = {
        let mut dead = RedisServer::start().unwrap();
        dead.kill();
        dead
    };
    let out = output(run(&dead, &["x"], &["true"]));
    assert_eq!(out.status.code(), Some(69));
    let out = output(run(&server, &["x"], &["/no/such/command"]));
    assert_eq!(out.status.code(), Some(127));
    assert!(
        !exists(&server, "x"),
        "the lock was released when the command could not start"
    );
}

#[test]
fn status_shows_holder_counter_and_lease() {
    let server = RedisServer::start().unwrap();
    let status = |name: &str| -> serde_json::Value {
        let out = output({
            let mut cmd = command();
            cmd.args(["status", name, "--json", "--redis", &server.url()]);
            cmd
        });
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let free = status("shown");
    assert_eq!(free["held"], false);
    assert_eq!(free["kind"], "mutex");
    assert_eq!(free["fencing_counter"], serde_json::Value::Null);
    let mut holder = ChildProcess::spawn(run(
        &server,
        &["shown", "--ttl", "5s"],
        &["sh", "-c", "echo token=$REDIS_LOCKS_TOKEN; sleep 3"],
    ))
    .unwrap();
    let line = holder
        .wait_for_line("token=", Duration::from_secs(30))
        .unwrap();
    let token: u64 = line["token=".len()..].parse().unwrap();
    let held = status("shown");
    assert_eq!(held["held"], true);
    // Nobody else asked for the lock, so the counter is still the holder's token.
    assert_eq!(held["fencing_counter"], token);
    assert_eq!(held["holder_owner"].as_str().unwrap().len(), 32);
    assert_eq!(held["waited_for"], false);
    assert!(held["lease_remaining_ms"].as_u64().unwrap() > 1_000);
    // The table form, for people.
    let out = output({
        let mut cmd = command();
        cmd.args(["status", "shown", "--redis", &server.url()]);
        cmd
    });
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("state           held"), "{text}");
    assert!(text.contains(&format!("fencing counter {token}")), "{text}");
    // A second run waits: its attempt marks the lock, and status says someone waits.
    let mut waiter =
        ChildProcess::spawn(run(&server, &["shown", "--wait", "20s"], &["true"])).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status("shown")["waited_for"] != true {
        assert!(
            std::time::Instant::now() < deadline,
            "status never showed the waiter"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(holder.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(waiter.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn a_lost_lock_stops_every_process_the_command_started() {
    let server = RedisServer::start().unwrap();
    // Grandchildren in the background: one plain, one that ignores SIGTERM.
    let script = "sleep 60 & a=$!; sh -c 'trap \"\" TERM; while :; do sleep 0.05; done' & b=$!; \
                  echo ready $$ $a $b; wait";
    let (mut runner, pids) = run_and_lose_the_lock(&server, "tree", &[], "1s", script);
    assert_eq!(pids.len(), 3, "{pids:?}");
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(70));
    // `run` exits once the grace period is over and the SIGKILL sent: nothing survives it.
    assert!(
        all_gone(&pids, Duration::from_secs(2)),
        "still running: {:?}",
        pids.iter().filter(|&&pid| alive(pid)).collect::<Vec<_>>()
    );
}

#[test]
fn forwarded_signals_reach_the_whole_process_group() {
    let server = RedisServer::start().unwrap();
    let script = "sleep 60 & echo ready $!; wait";
    let mut runner = ChildProcess::spawn(run(&server, &["group"], &["sh", "-c", script])).unwrap();
    let line = runner
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let grandchild: i32 = line["ready ".len()..].parse().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.pid() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // sh dies of the SIGTERM (143), and so does the `sleep` it started.
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(143));
    assert!(all_gone(&[grandchild], Duration::from_secs(5)));
    assert!(!exists(&server, "group"), "released");
}

#[test]
fn with_foreground_the_command_shares_runs_process_group() {
    let server = RedisServer::start().unwrap();
    // Field 5 of /proc/PID/stat is the process group.
    let script = "echo pgid $(cut -d' ' -f5 /proc/$$/stat) $(cut -d' ' -f5 /proc/$PPID/stat)";
    let out = output(run(&server, &["fg", "--foreground"], &["sh", "-c", script]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let groups: Vec<&str> = text.split_whitespace().skip(1).collect();
    assert_eq!(groups.len(), 2, "{text}");
    assert_eq!(groups[0], groups[1], "same group as run: {text}");
    let out = output(run(&server, &["fg"], &["sh", "-c", script]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let groups: Vec<&str> = text.split_whitespace().skip(1).collect();
    assert_ne!(groups[0], groups[1], "a group of its own: {text}");
}

#[test]
fn ctrl_z_stops_the_command_and_run_and_fg_continues_both() {
    let server = RedisServer::start().unwrap();
    // Long enough (4 s at least) that a loaded machine cannot let it end before run stops it.
    let script =
        "echo ready $$; i=0; while [ $i -lt 80 ]; do sleep 0.05; i=$((i+1)); done; echo finished";
    let mut runner = ChildProcess::spawn(run(&server, &["paused"], &["sh", "-c", script])).unwrap();
    let line = runner
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let command: i32 = line["ready ".len()..].parse().unwrap();
    let run_pid = runner.pid() as i32;
    let signal = |pid: i32, signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    };
    signal(run_pid, nix::sys::signal::Signal::SIGTSTP);
    assert!(
        group_stopped(command, Duration::from_secs(15)),
        "the command (its whole group) stopped"
    );
    assert!(
        reaches(run_pid, 'T', Duration::from_secs(15)),
        "and run itself"
    );
    signal(run_pid, nix::sys::signal::Signal::SIGCONT);
    runner
        .wait_for_line("finished", Duration::from_secs(20))
        .expect("the command went on after SIGCONT");
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn in_the_foreground_of_a_terminal_the_command_shares_runs_process_group() {
    let server = RedisServer::start().unwrap();
    // `script` gives the command a terminal, with `run` as its foreground job.
    let inner = format!(
        "{} run --redis {} tty -- sh -c 'echo pgid $(cut -d\" \" -f5 /proc/$$/stat) $(cut -d\" \" -f5 /proc/$PPID/stat)'",
        env!("CARGO_BIN_EXE_redis-locks"),
        server.url()
    );
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env_remove("REDIS_URL")
        .output()
        .expect("script(1) from util-linux");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("pgid"))
        .unwrap_or_default();
    let groups: Vec<&str> = line.split_whitespace().skip(1).collect();
    assert_eq!(groups.len(), 2, "{text}");
    assert_eq!(
        groups[0], groups[1],
        "interactive: run's own group, as flock: {text}"
    );
}

#[test]
fn a_stop_longer_than_the_lease_ends_in_a_loss_not_a_run_without_the_lock() {
    let server = RedisServer::start().unwrap();
    let script = "echo ready $$; while :; do sleep 0.05; done";
    let mut runner = ChildProcess::spawn(run(
        &server,
        &["napping", "--ttl", "600ms", "--grace", "1s"],
        &["sh", "-c", script],
    ))
    .unwrap();
    let line = runner
        .wait_for_line("ready", Duration::from_secs(30))
        .unwrap();
    let command: i32 = line["ready ".len()..].parse().unwrap();
    let run_pid = nix::unistd::Pid::from_raw(runner.pid() as i32);
    nix::sys::signal::kill(run_pid, nix::sys::signal::Signal::SIGTSTP).unwrap();
    assert!(
        group_stopped(command, Duration::from_secs(15)),
        "the command (its whole group) stopped"
    );
    // Stopped for longer than the lease: nobody renewed it, and it has run out.
    let gone = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if !exists(&server, "napping") {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    assert!(gone, "the lease ran out while everything was stopped");
    nix::sys::signal::kill(run_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    // On `fg`, run finds the lock lost: the command is stopped for good, run exits 70.
    assert_eq!(runner.wait_exit(Duration::from_secs(10)), Some(70));
    assert!(all_gone(&[command], Duration::from_secs(2)));
}
