//! What `redis-locks check --chart` draws, as data: `check` computes it, and the benchmarks
//! program (`redis-locks-bench timeline`, the crate that carries the plotting library) draws
//! it, so the `redis-locks` binary links no plotting code.

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
