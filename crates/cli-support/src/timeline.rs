//! What `redis-locks check --chart` draws, as data ([`Timeline`]), and the small SVG writer
//! that draws it ([`to_svg`], [`write_svg`]): rectangles and text, so the `redis-locks`
//! binary links no plotting library.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Every run of a `check`, one panel each.
///
/// ```
/// use cli_support::timeline::{Bar, BarKind, Panel, Timeline};
///
/// let timeline = Timeline {
///     runs: vec![Panel {
///         caption: "Mutex / none — pass".into(),
///         span_ms: 100.0,
///         lanes: vec!["p0t0".into()],
///         bars: vec![Bar { lane: 0, start_ms: 1.0, end_ms: 2.0, kind: BarKind::Held }],
///         faults: vec![],
///     }],
/// };
/// let json = serde_json::to_string(&timeline).unwrap();
/// assert_eq!(serde_json::from_str::<Timeline>(&json).unwrap(), timeline);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// One panel per run.
    pub runs: Vec<Panel>,
}

/// One run: a lane per task, a bar per holding, a band per fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Panel {
    /// The run and its verdict.
    pub caption: String,
    /// How long the run lasted, in ms since its workers started.
    pub span_ms: f64,
    /// The lanes' names (`p<process>t<task>`), top to bottom.
    pub lanes: Vec<String>,
    /// The holdings.
    pub bars: Vec<Bar>,
    /// Each fault, from its start to its end (ms since the workers started).
    pub faults: Vec<(f64, f64)>,
}

/// One holding on its lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    /// The index of its lane in [`Panel::lanes`].
    pub lane: usize,
    /// When it was acquired (ms since the workers started).
    pub start_ms: f64,
    /// When it ended (ms since the workers started).
    pub end_ms: f64,
    /// What kind of holding it was.
    pub kind: BarKind,
}

/// What a holding was, drawn in its own colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BarKind {
    /// Held alone (blue).
    Held,
    /// A read hold (green).
    Shared,
    /// The holder was told its lock was lost, or was stopped (orange).
    Lost,
    /// The holder was killed while holding: to its lease end (grey).
    Crashed,
}

/// The width of the drawing, and the height of one panel, in SVG units (pixels).
const WIDTH: f64 = 1400.0;
const PANEL_HEIGHT: f64 = 320.0;
/// The margins of a panel's plot: lane names on the left, the caption above, the time axis
/// below.
const LEFT: f64 = 80.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 40.0;
/// At most this many lane names are written on a panel (every n-th lane beyond).
const MAX_LANE_LABELS: usize = 32;

/// Draws `timeline` as an SVG document: one panel per run, a lane per task (top to bottom), a
/// bar per holding (blue; green for a read hold; orange when the holder was told its lock was
/// lost or was stopped; grey for a holder killed while holding, to its lease end), and each
/// fault as a red band over the lanes. Numbers that are not finite or negative count as 0.
///
/// ```
/// use cli_support::timeline::{Bar, BarKind, Panel, Timeline, to_svg};
///
/// let timeline = Timeline {
///     runs: vec![Panel {
///         caption: "Mutex / holder-pause — pass".into(),
///         span_ms: 100.0,
///         lanes: vec!["p0t0".into(), "p1t0".into()],
///         bars: vec![Bar { lane: 1, start_ms: 10.0, end_ms: 20.0, kind: BarKind::Lost }],
///         faults: vec![(12.0, 15.0)],
///     }],
/// };
/// let svg = to_svg(&timeline);
/// assert!(svg.starts_with("<svg") && svg.contains("Mutex / holder-pause"));
/// ```
pub fn to_svg(timeline: &Timeline) -> String {
    let height = PANEL_HEIGHT * timeline.runs.len().max(1) as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (index, panel) in timeline.runs.iter().enumerate() {
        draw_panel(&mut svg, panel, index as f64 * PANEL_HEIGHT);
    }
    svg.push_str("</svg>\n");
    svg
}

/// Writes [`to_svg`] of `timeline` into the file at `path`.
///
/// # Errors
/// A message naming the file when it cannot be written.
pub fn write_svg(path: &Path, timeline: &Timeline) -> Result<(), String> {
    std::fs::write(path, to_svg(timeline))
        .map_err(|err| format!("cannot write {}: {err}", path.display()))
}

/// A number fit for the drawing: finite and not negative, else 0.
fn clean(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

/// `text` with the characters XML gives a meaning escaped.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A step between the time axis's ticks that gives about eight of them over `span` ms: 1, 2
/// or 5 times a power of ten.
fn tick_step(span: f64) -> f64 {
    let rough = span / 8.0;
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|step| *step >= rough)
        .unwrap_or(10.0 * power)
}

fn draw_panel(svg: &mut String, panel: &Panel, top: f64) {
    let span = clean(panel.span_ms).max(1.0);
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let (y0, y1) = (top + TOP, top + PANEL_HEIGHT - BOTTOM);
    let rows = panel.lanes.len().max(1);
    let row = (y1 - y0) / rows as f64;
    let x = |ms: f64| x0 + (clean(ms).min(span) / span) * (x1 - x0);
    // Writing to a String cannot fail.
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"16\" text-anchor=\"middle\">{}</text>",
        WIDTH / 2.0,
        top + 20.0,
        escape(&panel.caption)
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>",
        x1 - x0,
        y1 - y0
    );
    let step = tick_step(span);
    // Enough decimals for the step (0.2 ms: one), none from 1 ms up.
    let decimals = (-step.log10()).ceil().max(0.0) as usize;
    for tick in (0..)
        .map(|k| k as f64 * step)
        .take_while(|tick| *tick <= span)
    {
        let at = x(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{at:.1}\" y1=\"{y1}\" x2=\"{at:.1}\" y2=\"{}\" stroke=\"black\"/>\
             <text x=\"{at:.1}\" y=\"{}\" font-size=\"11\" text-anchor=\"middle\">{tick:.decimals$}</text>",
            y1 + 4.0,
            y1 + 16.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\">ms since the workers started</text>",
        (x0 + x1) / 2.0,
        y1 + 32.0
    );
    let every = panel.lanes.len().div_ceil(MAX_LANE_LABELS).max(1);
    for (lane, name) in panel.lanes.iter().enumerate().step_by(every) {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>",
            x0 - 6.0,
            y0 + (lane as f64 + 0.5) * row,
            escape(name)
        );
    }
    for &(start, stop) in &panel.faults {
        let (left, right) = (x(start), x(stop.max(start)).max(x(start) + 1.0));
        let _ = writeln!(
            svg,
            "<rect class=\"fault\" x=\"{left:.1}\" y=\"{y0}\" width=\"{:.1}\" height=\"{}\" fill=\"rgb(255,0,0)\" fill-opacity=\"0.18\"/>",
            right - left,
            y1 - y0
        );
    }
    for bar in panel.bars.iter().filter(|bar| bar.lane < rows) {
        let colour = match bar.kind {
            BarKind::Held => "rgb(50,100,180)",
            BarKind::Shared => "rgb(60,160,90)",
            BarKind::Lost => "rgb(230,140,20)",
            BarKind::Crashed => "rgb(140,140,140)",
        };
        let (left, right) = (x(bar.start_ms), x(bar.end_ms.max(bar.start_ms)));
        let _ = writeln!(
            svg,
            "<rect class=\"bar\" x=\"{left:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>",
            y0 + (bar.lane as f64 + 0.15) * row,
            (right - left).max(0.5),
            row * 0.7
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel(bars: Vec<Bar>, faults: Vec<(f64, f64)>) -> Panel {
        Panel {
            caption: "Mutex <ours> & \"friends\" — FAIL".into(),
            span_ms: 200.0,
            lanes: vec!["p0t0".into(), "p0t1".into()],
            bars,
            faults,
        }
    }

    fn bar(lane: usize, start_ms: f64, end_ms: f64, kind: BarKind) -> Bar {
        Bar {
            lane,
            start_ms,
            end_ms,
            kind,
        }
    }

    #[test]
    fn every_bar_fault_and_lane_is_drawn_in_its_colour() {
        let timeline = Timeline {
            runs: vec![
                panel(
                    vec![
                        bar(0, 0.0, 10.0, BarKind::Held),
                        bar(1, 10.0, 30.0, BarKind::Shared),
                        bar(1, 40.0, 50.0, BarKind::Lost),
                        bar(0, 60.0, 190.0, BarKind::Crashed),
                    ],
                    vec![(20.0, 25.0)],
                ),
                panel(vec![bar(0, 1.0, 2.0, BarKind::Held)], vec![]),
            ],
        };
        let svg = to_svg(&timeline);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"bar\"").count(), 5);
        assert_eq!(svg.matches("class=\"fault\"").count(), 1);
        for colour in [
            "rgb(50,100,180)",
            "rgb(60,160,90)",
            "rgb(230,140,20)",
            "rgb(140,140,140)",
        ] {
            assert!(svg.contains(colour), "{colour}");
        }
        assert_eq!(svg.matches(">p0t1</text>").count(), 2);
        assert!(svg.contains("height=\"640\""), "two panels");
        // Ticks every 50 ms over 200 ms, written without decimals.
        assert!(
            svg.contains(">150</text>") && !svg.contains(">150.0"),
            "ticks: {svg}"
        );
        // The caption is escaped: the document stays well formed.
        assert!(svg.contains("Mutex &lt;ours&gt; &amp; &quot;friends&quot; — FAIL"));
        assert!(!svg.contains("<ours>"));
    }

    #[test]
    fn bad_numbers_and_lanes_draw_nothing_wrong_and_never_panic() {
        let timeline = Timeline {
            runs: vec![Panel {
                caption: String::new(),
                span_ms: f64::NAN,
                lanes: vec![],
                bars: vec![
                    bar(0, f64::INFINITY, f64::NEG_INFINITY, BarKind::Held),
                    bar(7, 1.0, 2.0, BarKind::Held),
                    bar(0, 5.0, 1.0, BarKind::Held),
                ],
                faults: vec![(f64::NAN, -3.0)],
            }],
        };
        let svg = to_svg(&timeline);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        // The bar on a lane that does not exist is left out.
        assert_eq!(svg.matches("class=\"bar\"").count(), 2);
        assert!(to_svg(&Timeline { runs: vec![] }).contains("</svg>"));
    }

    #[test]
    fn ticks_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(tick_step(1000.0), 200.0);
        assert_eq!(tick_step(80.0), 10.0);
        assert_eq!(tick_step(1.0), 0.2);
        assert_eq!(tick_step(30_000.0), 5000.0);
    }
}
