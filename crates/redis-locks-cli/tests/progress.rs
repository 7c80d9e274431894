//! The progress bar of `redis-locks check`: drawn on a terminal (seen in `tmux`), never when
//! stderr is a pipe or a file, never with `--json`; the table and the JSON report are the same
//! either way.

mod common;

use std::time::Duration;

use serde_json::Value;

use common::tmux::Tmux;
use common::{REDIS_VARIABLES, eventually, redis_locks, stderr, stdout};

/// Two short runs of ours: no fault, then a killed holder (both pass).
const SHORT: [&str; 15] = [
    "check",
    "--fault",
    "none",
    "--fault",
    "holder-kill",
    "--processes",
    "2",
    "--tasks",
    "1",
    "--count",
    "40",
    "--lease",
    "300ms",
    "--injections",
    "1",
];

/// What a drawn bar leaves in the text: an escape sequence or a carriage return.
fn control_characters(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect()
}

#[test]
fn without_a_terminal_check_prints_its_lines_and_table_and_no_bar() {
    let out = redis_locks(&SHORT);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert_eq!(
        control_characters(&err),
        Vec::<char>::new(),
        "stderr: {err:?}"
    );
    assert_eq!(
        control_characters(&text),
        Vec::<char>::new(),
        "stdout: {text:?}"
    );
    // stderr: the `check:` lines, one a run (and where its servers were), as before.
    assert!(err.lines().all(|line| line.starts_with("check: ")), "{err}");
    assert!(err.contains("check: Mutex / none ...\n"), "{err}");
    assert!(err.contains("check: Mutex / holder-kill ...\n"), "{err}");
    // stdout: the table alone.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("| run | acquisitions |"), "{text}");
    assert!(lines[1].starts_with("|---|"), "{text}");
    assert!(lines[2].starts_with("| Mutex / none |"), "{text}");
    assert!(lines[3].starts_with("| Mutex / holder-kill |"), "{text}");
    assert!(
        lines[2..4].iter().all(|l| l.ends_with("| pass |")),
        "{text}"
    );
}

#[test]
fn with_json_check_prints_the_report_alone() {
    let mut args = SHORT.to_vec();
    args.push("--json");
    let out = redis_locks(&args);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert_eq!(err, "", "nothing on stderr with --json");
    let report: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(report["passed"], true);
    let labels: Vec<&str> = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["verdict"]["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["Mutex / none", "Mutex / holder-kill"]);
}

/// The bar's line on `screen`, if it shows.
fn bar(screen: &str) -> Option<&str> {
    screen
        .lines()
        .find(|line| line.starts_with("check [") && line.contains(" runs, "))
}

#[test]
fn on_a_terminal_check_shows_the_runs_done_the_current_one_and_the_time() {
    let unset: String = REDIS_VARIABLES.iter().map(|v| format!("-u {v} ")).collect();
    let args = SHORT.join(" ");
    // The shell stays after check exits, so the last screen can be read.
    let command = format!(
        "env {unset}{} {args}; echo \"check exited $?\"; sleep 120",
        env!("CARGO_BIN_EXE_redis-locks")
    );
    let tmux = Tmux::start("progress", &command, 200, 40);
    let mut screen = String::new();
    let mut seen = Vec::new();
    let exited = eventually(Duration::from_secs(120), || {
        screen = tmux.screen();
        if let Some(line) = bar(&screen)
            && seen.last() != Some(&line.to_string())
        {
            seen.push(line.to_string());
        }
        screen.contains("check exited")
    });
    assert!(exited, "check did not end:\n{screen}");
    let screen = tmux.history();
    assert!(screen.contains("check exited 0"), "{screen}");
    // The bar showed each run by name, with the runs done of two and the time elapsed
    // (`hh:mm:ss`).
    let timed = |line: &str, done: &str| {
        line.split_once(&format!("{done} runs, "))
            .is_some_and(|(_, rest)| {
                let clock: Vec<char> = rest.chars().take(8).collect();
                clock.len() == 8
                    && clock.iter().enumerate().all(|(i, c)| {
                        if i == 2 || i == 5 {
                            *c == ':'
                        } else {
                            c.is_ascii_digit()
                        }
                    })
            })
    };
    let first = seen
        .iter()
        .find(|line| timed(line, "0/2") && line.trim_end().ends_with("Mutex / none"));
    assert!(first.is_some(), "no bar for the first run: {seen:#?}");
    let second = seen
        .iter()
        .find(|line| timed(line, "1/2") && line.trim_end().ends_with("Mutex / holder-kill"));
    assert!(second.is_some(), "no bar for the second run: {seen:#?}");
    // Cleared at the end: the `check:` lines, then the table, and no bar.
    assert_eq!(bar(&screen), None, "{screen}");
    assert!(screen.contains("check: Mutex / none ..."), "{screen}");
    assert!(
        screen.contains("check: Mutex / holder-kill ..."),
        "{screen}"
    );
    assert!(screen.contains("| Mutex / holder-kill |"), "{screen}");
}
