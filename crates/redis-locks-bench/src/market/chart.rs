//! The market comparison as an SVG chart: operations per second and p99 purchase latency,
//! grouped by scenario, one bar per strategy.

use std::path::Path;

use plotters::prelude::*;

use super::RunReport;
use cli_support::exit::CliError;

const COLOURS: [RGBColor; 4] = [
    RGBColor(214, 69, 65),
    RGBColor(244, 162, 38),
    RGBColor(38, 120, 178),
    RGBColor(76, 160, 90),
];

/// One figure of a run, drawn as a bar.
type Metric = fn(&RunReport) -> f64;

/// Fails (exit 1, as a chart that cannot be drawn) unless a file can be written at `path`:
/// checked before the benchmark starts. A file that was not there is created and removed
/// again, so a run that fails later leaves nothing behind; one that was there is opened for
/// writing and left as it was until [`draw`] replaces it.
pub fn check_writable(path: &Path) -> Result<(), CliError> {
    let existed = path.exists();
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    match opened {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(err) => Err(CliError::CheckFailed(format!(
            "chart {}: cannot write there ({err}); nothing was run",
            path.display()
        ))),
    }
}

/// Draws `runs` into an SVG file at `path`.
pub fn draw(path: &Path, runs: &[RunReport]) -> Result<(), CliError> {
    let failed = |err: String| CliError::CheckFailed(format!("chart {}: {err}", path.display()));
    let mut scenarios: Vec<String> = Vec::new();
    let mut strategies: Vec<&'static str> = Vec::new();
    for run in runs {
        if !scenarios.contains(&run.scenario) {
            scenarios.push(run.scenario.clone());
        }
        if !strategies.contains(&run.strategy_label) {
            strategies.push(run.strategy_label);
        }
    }
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(e.to_string()))?;
    let panels = root.split_evenly((1, 2));
    let metrics: [(&str, Metric); 2] = [
        ("operations per second (listed + bought)", |r| {
            r.ops_per_second
        }),
        ("p99 purchase latency (ms)", |r| r.purchase_p99_ms),
    ];
    // Each scenario is a group of one slot per strategy plus a gap slot.
    let width = strategies.len() as u32 + 1;
    let slots = width * scenarios.len() as u32;
    for (panel, (title, metric)) in panels.iter().zip(metrics) {
        let top = runs.iter().map(metric).fold(0.0f64, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d((0u32..slots).into_segmented(), 0f64..top)
            .map_err(|e| failed(e.to_string()))?;
        let names = scenarios.clone();
        let middle = (width - 1) / 2;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(slots as usize)
            .x_label_formatter(&|slot| match slot {
                SegmentValue::CenterOf(slot) if slot % width == middle => names
                    .get((slot / width) as usize)
                    .map(|name| format!("{name} (sellers/buyers)"))
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(|e| failed(e.to_string()))?;
        for (s, strategy) in strategies.iter().enumerate() {
            let colour = COLOURS[s % COLOURS.len()];
            let bars = runs
                .iter()
                .filter(|r| r.strategy_label == *strategy)
                .filter_map(|r| {
                    let group = scenarios.iter().position(|x| *x == r.scenario)? as u32;
                    let slot = group * width + s as u32;
                    let mut bar = Rectangle::new(
                        [
                            (SegmentValue::Exact(slot), 0.0),
                            (SegmentValue::Exact(slot + 1), metric(r)),
                        ],
                        colour.filled(),
                    );
                    bar.set_margin(0, 0, 3, 3);
                    Some(bar)
                });
            chart
                .draw_series(bars)
                .map_err(|e| failed(e.to_string()))?
                .label(*strategy)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| failed(e.to_string()))?;
    }
    root.present().map_err(|e| failed(e.to_string()))?;
    Ok(())
}
