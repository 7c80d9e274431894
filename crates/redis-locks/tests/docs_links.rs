//! No dead relative link in the documentation: every `](path)` and `](path#anchor)` of the
//! README, the CHANGELOG, `docs/*.md` and the crate README names a file that exists, and an
//! anchor names a heading of that file (as GitHub makes anchors from headings).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The workspace root: two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// The markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![
        root.join("README.md"),
        root.join("CHANGELOG.md"),
        root.join("crates/redis-locks/README.md"),
    ];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.expect("a readable entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

/// The lines of a markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// The anchor GitHub gives a heading: its text without markup, lower-cased, spaces turned
/// into hyphens, and every character but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    let mut text = String::new();
    // A link in a heading keeps its text only.
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](") else {
            break;
        };
        let Some(end) = rest[open + close..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + close]);
        rest = &rest[open + close + end + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Every anchor the headings of a markdown text produce (a repeated heading gets `-1`, `-2`...).
fn anchors(text: &str) -> HashSet<String> {
    let mut found = HashSet::new();
    for line in prose(text) {
        let trimmed = line.trim_start_matches('#');
        if trimmed.len() == line.len() || !trimmed.starts_with(' ') {
            continue;
        }
        let base = anchor(trimmed.trim());
        let mut name = base.clone();
        let mut n = 0;
        while found.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        found.insert(name);
    }
    found
}

/// The targets of the inline links and images of a markdown text, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        // Inline code is no link: drop what lies between backticks.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// Whether a link target leaves this repository or is a rustdoc intra-doc link (a Rust path
/// such as `RedlockGuard::lease_deadline`, which the crate README uses), so no file to check.
fn not_a_file(target: &str) -> bool {
    let rust_path = !target.is_empty()
        && !target.contains(['.', '/', '#'])
        && target
            .chars()
            .all(|c| c.is_alphanumeric() || "_:@!".contains(c));
    target.contains("://") || target.starts_with("mailto:") || rust_path
}

/// The dead relative links of one markdown file, each described.
fn dead_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("a readable markdown file");
    let dir = file.parent().expect("a file in a directory");
    let mut dead = Vec::new();
    for target in link_targets(&text) {
        if not_a_file(&target) {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        let name = file.strip_prefix(root()).unwrap_or(file);
        let shown = || format!("{}: ]({target})", name.display());
        if !resolved.exists() {
            dead.push(format!("{} — no such file", shown()));
            continue;
        }
        if let Some(fragment) = fragment {
            let is_markdown = resolved.extension().is_some_and(|ext| ext == "md");
            let headings = if is_markdown {
                anchors(&std::fs::read_to_string(&resolved).expect("a readable target"))
            } else {
                HashSet::new()
            };
            if !headings.contains(fragment) {
                dead.push(format!("{} — no heading makes #{fragment}", shown()));
            }
        }
    }
    dead
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut dead = Vec::new();
    let mut links = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a readable markdown file");
        links += link_targets(&text)
            .iter()
            .filter(|target| !not_a_file(target))
            .count();
        dead.extend(dead_links(&file));
    }
    // The README alone links dozens of files: finding few means the parsing broke.
    assert!(links >= 50, "only {links} relative links found");
    assert!(dead.is_empty(), "dead relative links:\n{}", dead.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(anchor("Guarantees"), "guarantees");
    assert_eq!(
        anchor("Without an async runtime: `blocking`"),
        "without-an-async-runtime-blocking"
    );
    assert_eq!(
        anchor("The market simulation (\"Redis in Action\" 6.2)"),
        "the-market-simulation-redis-in-action-62"
    );
    assert_eq!(
        anchor("`RwLock` and `ReentrantMutex`"),
        "rwlock-and-reentrantmutex"
    );
    assert_eq!(
        anchor("Readers together, a writer alone"),
        "readers-together-a-writer-alone"
    );
    assert_eq!(anchor("A [link](x.md) here"), "a-link-here");
    let repeated = anchors("# A\n## A\n```\n# not a heading\n```\n### A\n");
    assert_eq!(
        repeated,
        HashSet::from(["a".to_string(), "a-1".to_string(), "a-2".to_string()])
    );
}

#[test]
fn a_dead_link_is_found() {
    let dir = std::env::temp_dir().join(format!("docs-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.md");
    std::fs::write(
        &page,
        "# Title\n\n[ok](page.md#title), [here](#title), [gone](missing.md), \
         [bad anchor](page.md#nowhere), `[code](not-a-link.md)`, [web](https://example.com), \
         [rustdoc](Mutex::lock)\n\n```\n[fenced](nor-this.md)\n```\n",
    )
    .unwrap();
    let dead = dead_links(&page);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(dead.len(), 2, "{dead:#?}");
    assert!(dead[0].contains("missing.md"), "{dead:#?}");
    assert!(dead[1].contains("#nowhere"), "{dead:#?}");
}
