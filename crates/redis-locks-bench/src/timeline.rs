//! `redis-locks-bench timeline --out FILE.svg`: draws the timeline of a `redis-locks check`
//! (a [`Timeline`] as JSON on standard input) into an SVG file. `check --chart` runs it, so
//! the plotting library stays in this crate: one panel per run, a lane per task, a bar per
//! holding (blue; green for readers; orange when the holder was told its lock was lost or
//! was stopped; grey for a holder killed while holding, to its lease end), and each fault as
//! a red band over the lanes.

use std::io::Read;
use std::path::{Path, PathBuf};

use cli_support::exit::CliError;
use cli_support::timeline::{BarKind, Panel, Timeline};
use plotters::prelude::*;

const PANEL_HEIGHT: u32 = 320;
const WIDTH: u32 = 1400;

/// Where to draw.
#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// The SVG file to write.
    #[arg(long)]
    pub out: PathBuf,
}

/// Reads a [`Timeline`] from standard input and draws it into `args.out`.
///
/// # Errors
/// [`CliError::Usage`] for input that is not a timeline; [`CliError::CheckFailed`] when the
/// file cannot be written.
pub fn run(args: &TimelineArgs) -> Result<(), CliError> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|err| CliError::Usage(format!("cannot read the timeline: {err}")))?;
    let timeline: Timeline = serde_json::from_str(&input)
        .map_err(|err| CliError::Usage(format!("not a timeline: {err}")))?;
    draw(&args.out, &timeline).map_err(CliError::CheckFailed)
}

/// Draws `timeline` into an SVG file at `path`.
///
/// # Errors
/// A message when the file cannot be written.
pub fn draw(path: &Path, timeline: &Timeline) -> Result<(), String> {
    let runs = &timeline.runs;
    let height = PANEL_HEIGHT * runs.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let fail = |err: &dyn std::fmt::Display| format!("cannot write {}: {err}", path.display());
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let panels = root.split_evenly((runs.len().max(1), 1));
    for (area, run) in panels.iter().zip(runs) {
        panel(area, run).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(area: &Area<'_>, run: &Panel) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let end = run.span_ms.max(1.0);
    let rows = run.lanes.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(&run.caption, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..rows)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc("ms since the workers started")
        .y_labels(run.lanes.len().min(32))
        .y_label_formatter(&|y| {
            run.lanes
                .get(y.floor() as usize)
                .cloned()
                .unwrap_or_default()
        })
        .draw()?;
    chart.draw_series(run.faults.iter().map(|&(start, stop)| {
        let stop = stop.max(start + end / 500.0);
        Rectangle::new([(start, 0.0), (stop, rows)], RED.mix(0.18).filled())
    }))?;
    chart.draw_series(run.bars.iter().map(|bar| {
        let color = match bar.kind {
            BarKind::Lost => RGBColor(230, 140, 20),
            BarKind::Shared => RGBColor(60, 160, 90),
            BarKind::Held => RGBColor(50, 100, 180),
            BarKind::Crashed => RGBColor(140, 140, 140),
        };
        let y = bar.lane as f64;
        Rectangle::new(
            [
                (bar.start_ms, y + 0.15),
                (bar.end_ms.max(bar.start_ms + end / 2000.0), y + 0.85),
            ],
            color.filled(),
        )
    }))?;
    Ok(())
}
