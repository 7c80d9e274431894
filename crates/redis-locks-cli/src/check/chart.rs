//! `check --chart FILE.svg`: a timeline of every run, one panel each: a lane per task, a bar
//! per holding, and each fault as a band over the lanes. This module says what to draw (a
//! [`Timeline`]); the benchmarks program draws it (`redis-locks-bench timeline`, see
//! `redis-locks-bench/src/timeline.rs` for the colours), so this binary links no plotting
//! library.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use cli_support::exit::CliError;
use cli_support::timeline::{Bar, BarKind, Panel, Timeline};

use super::scenario::{Record, Scenario};
use super::verdict::Verdict;

/// Draws the runs into an SVG file at `path`, through the benchmarks program.
///
/// # Errors
/// [`CliError::Unavailable`] without the benchmarks program; [`CliError::CheckFailed`] when
/// it could not write the file.
pub fn draw(path: &Path, runs: &[(&Scenario, &Record, &Verdict)]) -> Result<(), CliError> {
    let timeline = Timeline {
        runs: runs
            .iter()
            .map(|(scenario, record, verdict)| panel(scenario, record, verdict))
            .collect(),
    };
    let program = crate::bench::program("check --chart")?;
    let failed = |what: String| CliError::CheckFailed(format!("chart {}: {what}", path.display()));
    let mut child = Command::new(&program)
        .arg("timeline")
        .arg("--out")
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|err| failed(format!("cannot run {}: {err}", program.display())))?;
    let json = serde_json::to_vec(&timeline).expect("plain data serializes");
    let written = child
        .stdin
        .take()
        .expect("stdin was piped")
        .write_all(&json);
    let status = child
        .wait()
        .map_err(|err| failed(format!("{} did not finish: {err}", program.display())))?;
    match (written, status.success()) {
        (Ok(()), true) => Ok(()),
        (Err(err), _) => Err(failed(format!("cannot hand it the timeline: {err}"))),
        (_, false) => Err(failed(format!(
            "{} exited with {status}",
            program.display()
        ))),
    }
}

/// One run as its panel shows it.
fn panel(scenario: &Scenario, record: &Record, verdict: &Verdict) -> Panel {
    let ms = |ns: u64| ns.saturating_sub(record.started_at) as f64 / 1e6;
    // One lane per worker, in name order.
    let lanes: BTreeMap<&str, usize> = record
        .holdings
        .iter()
        .map(|h| h.worker.as_str())
        .chain(record.crashed.iter().map(|c| c.worker.as_str()))
        .map(|worker| (worker, 0))
        .collect();
    let lanes: BTreeMap<&str, usize> = lanes
        .into_keys()
        .enumerate()
        .map(|(n, worker)| (worker, n))
        .collect();
    let held = record.holdings.iter().map(|h| Bar {
        lane: lanes[h.worker.as_str()],
        start_ms: ms(h.acquired_at),
        end_ms: ms(h.end),
        kind: if h.lost_at.is_some() || h.paused {
            BarKind::Lost
        } else if h.shared {
            BarKind::Shared
        } else {
            BarKind::Held
        },
    });
    let crashed = record.crashed.iter().map(|c| Bar {
        lane: lanes[c.worker.as_str()],
        start_ms: ms(c.acquired_at),
        end_ms: ms(c.releasing.map_or(c.lease_end, |releasing| releasing.at)),
        kind: BarKind::Crashed,
    });
    Panel {
        caption: format!(
            "{} — {} ({} acquisitions, {} overlaps)",
            scenario.label(),
            if verdict.passed { "pass" } else { "FAIL" },
            verdict.acquisitions,
            verdict.overlaps
        ),
        span_ms: ms(record.ended_at),
        lanes: lanes.keys().map(|worker| worker.to_string()).collect(),
        bars: held.chain(crashed).collect(),
        faults: record
            .injections
            .iter()
            .map(|i| (ms(i.start), ms(i.end)))
            .collect(),
    }
}
