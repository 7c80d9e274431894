//! Every command of a `sh` block in the README and `docs/*.md` is one the programs accept.
//!
//! A `redis-locks` or `redis-locks-bench` command is run with `--help` added after its
//! options (before a `--` that starts a child command): clap reads every option and value
//! before it answers `--help`, so an unknown option, a bad value or a missing command fails
//! it, and no server or benchmark is started. A `cargo` command must name packages and
//! examples of this workspace; a `./scripts/...` file must exist and parse (`bash -n`).
//! Blocks that show a synopsis or output are marked `text`, and not read. Built by a
//! workspace build, like the CLI's other tests (`redis-locks-bench` beside `redis-locks`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root: two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// The README and every page of `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.expect("a readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The lines of every ```` ```sh ```` block of a markdown text, with their line numbers.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut block: Option<bool> = None; // Some(is_sh) inside a block
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(matches!(info.trim(), "sh" | "bash" | "shell" | "console")),
            };
            continue;
        }
        if block == Some(true) && !trimmed.is_empty() && !trimmed.starts_with('#') {
            lines.push((number + 1, trimmed.to_string()));
        }
    }
    lines
}

/// A command line split into words as a shell would (quotes, and a `#` comment after blanks).
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, '#') if word.is_none() => break,
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The packages of the workspace, by name, with their directories.
fn packages() -> Vec<(String, PathBuf)> {
    let crates = root().join("crates");
    std::fs::read_dir(&crates)
        .expect("crates/")
        .map(|entry| entry.expect("a readable entry").path())
        .filter_map(|dir| {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
            let name = manifest
                .lines()
                .find_map(|line| line.strip_prefix("name = "))?
                .trim_matches('"')
                .to_string();
            Some((name, dir))
        })
        .collect()
}

/// The `redis-locks-bench` a workspace build puts beside `redis-locks`.
fn bench_binary() -> PathBuf {
    let bench = Path::new(env!("CARGO_BIN_EXE_redis-locks"))
        .with_file_name(format!("redis-locks-bench{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bench.exists(),
        "{} is missing: run the CLI tests from a workspace build",
        bench.display()
    );
    bench
}

/// Runs `program args --help` (the `--help` before a `--`), and says what went wrong.
fn accepted(program: &Path, args: &[String]) -> Result<(), String> {
    let mut args = args.to_vec();
    let at = args
        .iter()
        .position(|arg| arg == "--")
        .unwrap_or(args.len());
    args.insert(at, "--help".into());
    let mut cmd = Command::new(program);
    for variable in common::REDIS_VARIABLES {
        cmd.env_remove(variable);
    }
    let out = cmd.args(&args).output().expect("run the program");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Checks a `cargo` command: every `-p` names a package, every `--example` one of its examples;
/// `cargo run` of a binary checks the arguments after `--` as the binary would.
fn cargo(args: &[String]) -> Result<(), String> {
    let packages = packages();
    let mut package = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--" => break,
            "-p" | "--package" => {
                let name = iter.next().ok_or("-p without a package")?;
                let dir = packages
                    .iter()
                    .find(|(known, _)| known == name)
                    .map(|(_, dir)| dir.clone())
                    .ok_or(format!("no package {name} in the workspace"))?;
                package = Some((name.clone(), dir));
            }
            "--example" => {
                let example = iter.next().ok_or("--example without a name")?;
                let (name, dir) = package.clone().ok_or("--example without -p")?;
                let examples = dir.join("examples");
                if !examples.join(format!("{example}.rs")).exists()
                    && !examples.join(example).join("main.rs").exists()
                {
                    return Err(format!("{name} has no example {example}"));
                }
                return Ok(());
            }
            _ => {}
        }
    }
    let rest: Vec<String> = iter.cloned().collect();
    match (args.first().map(String::as_str), package) {
        (Some("run"), Some((name, _))) if name == "redis-locks-cli" => {
            accepted(Path::new(env!("CARGO_BIN_EXE_redis-locks")), &rest)
        }
        (Some("run"), Some((name, _))) if name == "redis-locks-bench" => {
            accepted(&bench_binary(), &rest)
        }
        (Some("run"), Some((name, _))) => Err(format!("cargo run of {name}: not checked here")),
        (Some("build" | "test" | "nextest" | "install" | "clippy" | "fmt"), _) => Ok(()),
        (other, _) => Err(format!("cargo {other:?}: not checked here")),
    }
}

/// Checks one command line of the docs.
fn check(line: &str) -> Result<(), String> {
    let mut words = words(line);
    // Variables set for the command (`REDIS_LOCKS_SERVER=... cargo ...`).
    while words
        .first()
        .is_some_and(|word| word.contains('=') && !word.starts_with('-'))
    {
        words.remove(0);
    }
    let Some((program, args)) = words.split_first() else {
        return Ok(());
    };
    match program.as_str() {
        "redis-locks" => accepted(Path::new(env!("CARGO_BIN_EXE_redis-locks")), args),
        "redis-locks-bench" | "target/release/redis-locks-bench" => accepted(&bench_binary(), args),
        "cargo" => cargo(args),
        script if script.starts_with("./scripts/") => {
            let path = root().join(script);
            let ok = Command::new("bash")
                .arg("-n")
                .arg(&path)
                .status()
                .is_ok_and(|status| status.success());
            if ok {
                Ok(())
            } else {
                Err(format!("{} is missing or not valid bash", path.display()))
            }
        }
        other => Err(format!(
            "{other}: not a command these docs run (mark a synopsis or output block `text`)"
        )),
    }
}

#[test]
fn every_command_in_the_docs_is_accepted_by_its_program() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a readable page");
        let name = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for (number, line) in shell_lines(&text) {
            checked += 1;
            if let Err(why) = check(&line) {
                failures.push(format!("{name}:{number}: {line}\n    {why}"));
            }
        }
    }
    assert!(checked >= 20, "only {checked} commands found in the docs");
    assert!(
        failures.is_empty(),
        "commands in the docs that fail:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_wrong_option_or_command_is_caught() {
    let line = |text: &str| check(text);
    assert!(line("redis-locks status NAME --json").is_ok());
    assert!(line("redis-locks status NAME --no-such-option").is_err());
    assert!(line("redis-locks no-such-command").is_err());
    assert!(line("redis-locks run job --ttl 30s -- true").is_ok());
    assert!(line("redis-locks run job --ttl forever -- true").is_err());
    assert!(line("cargo run -p redis-locks --example no_such_example").is_err());
    assert!(line("cargo run -p redis-locks --example fencing").is_ok());
    assert!(line("cargo build -p no-such-crate").is_err());
    assert_eq!(
        words("A='x y' cmd \"a b\" c   # comment"),
        ["A=x y", "cmd", "a b", "c"]
    );
}
