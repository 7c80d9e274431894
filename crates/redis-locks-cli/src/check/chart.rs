//! `check --chart FILE.svg`: a timeline of every run, one panel each: a lane per task, a bar
//! per holding, and each fault as a band over the lanes. This module says what to draw (a
//! [`Timeline`]); `cli_support::timeline` writes the SVG (rectangles and text), so this binary
//! links no plotting library.

use std::collections::BTreeMap;
use std::path::Path;

use cli_support::exit::CliError;
use cli_support::timeline::{Bar, BarKind, Panel, Timeline};

use super::scenario::{Record, Scenario};
use super::verdict::Verdict;

/// Fails now if the chart cannot be written at `path` (a missing directory, no permission),
/// rather than after the runs: creates the file, empty until [`draw`] fills it.
///
/// # Errors
/// [`CliError::CheckFailed`] naming the file.
pub fn can_write(path: &Path) -> Result<(), CliError> {
    std::fs::File::create(path).map(drop).map_err(|err| {
        CliError::CheckFailed(format!(
            "chart {}: cannot write there: {err}",
            path.display()
        ))
    })
}

/// Draws the runs into an SVG file at `path`.
///
/// # Errors
/// [`CliError::CheckFailed`] when the file cannot be written.
pub fn draw(path: &Path, runs: &[(&Scenario, &Record, &Verdict)]) -> Result<(), CliError> {
    let timeline = Timeline {
        runs: runs
            .iter()
            .map(|(scenario, record, verdict)| panel(scenario, record, verdict))
            .collect(),
    };
    cli_support::timeline::write_svg(path, &timeline)
        .map_err(|err| CliError::CheckFailed(format!("chart: {err}")))
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
