//! `check --chart FILE.svg`: a timeline of every run, one panel each: a lane per task, a bar
//! per holding (blue; green for readers; orange when the holder was told its lock was lost or
//! was stopped; grey for a holder killed while holding, to its lease end), and each fault as
//! a red band over the lanes.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::scenario::{Record, Scenario};
use super::verdict::Verdict;

const PANEL_HEIGHT: u32 = 320;
const WIDTH: u32 = 1400;

/// Draws the runs into an SVG file at `path`.
///
/// # Errors
/// A message when the file cannot be written.
pub fn draw(path: &Path, runs: &[(&Scenario, &Record, &Verdict)]) -> Result<(), String> {
    let height = PANEL_HEIGHT * runs.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let fail = |err: &dyn std::fmt::Display| format!("cannot write {}: {err}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for (area, (scenario, record, verdict)) in panels.iter().zip(runs) {
        panel(area, scenario, record, verdict).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(
    area: &Area<'_>,
    scenario: &Scenario,
    record: &Record,
    verdict: &Verdict,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let ms = |ns: u64| ns.saturating_sub(record.started_at) as f64 / 1e6;
    let end = ms(record.ended_at).max(1.0);
    let mut lanes: BTreeMap<String, usize> = BTreeMap::new();
    for worker in record
        .holdings
        .iter()
        .map(|h| &h.worker)
        .chain(record.crashed.iter().map(|c| &c.worker))
    {
        let next = lanes.len();
        lanes.entry(worker.clone()).or_insert(next);
    }
    let names: Vec<String> = lanes.keys().cloned().collect();
    for (n, name) in names.iter().enumerate() {
        lanes.insert(name.clone(), n);
    }
    let rows = lanes.len().max(1) as f64;
    let caption = format!(
        "{} — {} ({} acquisitions, {} overlaps)",
        scenario.label(),
        if verdict.passed { "pass" } else { "FAIL" },
        verdict.acquisitions,
        verdict.overlaps
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("ms since the workers started")
        .y_labels(lanes.len().min(32))
        .y_label_formatter(&|y| names.get(y.floor() as usize).cloned().unwrap_or_default())
        .draw()?;
    chart.draw_series(record.injections.iter().map(|i| {
        let (start, stop) = (ms(i.start), ms(i.end).max(ms(i.start) + end / 500.0));
        Rectangle::new([(start, 0.0), (stop, rows)], RED.mix(0.18).filled())
    }))?;
    let bar = |lane: usize, start: f64, stop: f64, color: RGBAColor| {
        let y = lane as f64;
        Rectangle::new(
            [
                (start, y + 0.15),
                (stop.max(start + end / 2000.0), y + 0.85),
            ],
            color.filled(),
        )
    };
    chart.draw_series(record.holdings.iter().map(|h| {
        let color = if h.lost_at.is_some() || h.paused {
            RGBColor(230, 140, 20).to_rgba()
        } else if h.shared {
            RGBColor(60, 160, 90).to_rgba()
        } else {
            RGBColor(50, 100, 180).to_rgba()
        };
        bar(lanes[&h.worker], ms(h.acquired_at), ms(h.end), color)
    }))?;
    chart.draw_series(record.crashed.iter().map(|c| {
        let end = c.releasing.map_or(c.lease_end, |releasing| releasing.at);
        bar(
            lanes[&c.worker],
            ms(c.acquired_at),
            ms(end),
            RGBColor(140, 140, 140).to_rgba(),
        )
    }))?;
    Ok(())
}
