//! `--help` as `flock` and `etcdctl` have it: one screen for the program, a line per command,
//! the paragraphs and examples in each command's own `--help`.

mod common;

use common::{redis_locks, stdout};

/// The commands `redis-locks --help` lists (besides `help`).
const COMMANDS: [&str; 8] = [
    "run", "status", "list", "top", "break", "check", "demo", "bench",
];

#[test]
fn the_programs_help_fits_one_80_by_24_screen_with_a_line_per_command() {
    let out = redis_locks(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    let lines: Vec<&str> = help.lines().collect();
    assert!(lines.len() <= 24, "{} lines:\n{help}", lines.len());
    for line in &lines {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line:?}",
            line.chars().count()
        );
    }
    for command in COMMANDS {
        let listed: Vec<&&str> = lines
            .iter()
            .filter(|line| line.trim_start().starts_with(&format!("{command} ")))
            .collect();
        assert_eq!(listed.len(), 1, "{command} listed once:\n{help}");
        // One line: the next line is another command, or the list's end.
        let at = lines.iter().position(|line| line == listed[0]).unwrap();
        let next = lines[at + 1].trim_start();
        assert!(
            next.is_empty()
                || COMMANDS
                    .iter()
                    .chain(&["help", "completions", "man"])
                    .any(|c| next.starts_with(c)),
            "{command}'s entry runs on: {next:?}"
        );
    }
    assert!(help.contains("Exit codes"), "{help}");
}

#[test]
fn each_commands_help_has_its_paragraph_and_ends_with_examples() {
    // `bench --help` is the benchmarks program's (built beside `redis-locks` by a workspace build).
    for command in COMMANDS {
        let out = redis_locks(&[command, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{command}");
        let help = stdout(&out);
        let examples = help
            .rfind("\nExamples:\n")
            .unwrap_or_else(|| panic!("{command} --help has no examples:\n{help}"));
        let tail = &help[examples..];
        assert!(
            tail.lines()
                .skip(2)
                .all(|line| line.starts_with("  ") || line.is_empty()),
            "{command}: the examples end the help:\n{tail}"
        );
        assert!(
            tail.contains(&format!("redis-locks {command}")),
            "{command}: {tail}"
        );
        // The paragraph and the exit codes are here rather than in the program's help.
        assert!(help.contains("Exit codes: 0 success"), "{command}");
        let first = help.lines().next().unwrap_or_default();
        assert!(
            help.lines().filter(|line| !line.is_empty()).count() > 10
                && help.len() > 2 * first.len(),
            "{command}: {help}"
        );
    }
}
