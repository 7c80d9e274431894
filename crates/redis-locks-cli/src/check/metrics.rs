//! `check --metrics-addr`: the library's metrics of every worker process, served by `check`.
//!
//! The locks are taken in the worker processes, so that is where the library records its
//! metrics. A worker asked to forward them (its plan's `metrics`) installs `metrics-util`'s
//! debugging recorder and, every [`FORWARD_EVERY`] and once at its end, sends what was
//! recorded since the last time as an [`Event::Metrics`](super::plan::Event::Metrics) line;
//! `check` adds each line to its own recorder, the Prometheus exporter that
//! `--metrics-addr` serves. A worker killed on purpose (`holder-kill`) loses at most its last
//! interval's records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use metrics::Label;
use metrics_util::MetricKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::{Deserialize, Serialize};

/// How often a worker forwards its records.
const FORWARD_EVERY: Duration = Duration::from_millis(250);

/// Whether `check` serves metrics, so that its workers forward theirs.
static SERVED: AtomicBool = AtomicBool::new(false);

/// Serves the metrics at `addr` for Prometheus (bad usage when `addr` cannot be listened on),
/// and has the workers started from now on forward theirs.
///
/// # Errors
/// As [`cli_support::serve_metrics`].
pub fn serve(addr: std::net::SocketAddr) -> Result<(), cli_support::exit::CliError> {
    cli_support::serve_metrics(addr)?;
    SERVED.store(true, Ordering::SeqCst);
    Ok(())
}

/// Whether workers forward their metrics (`check` serves them).
pub fn forwarded() -> bool {
    SERVED.load(Ordering::SeqCst)
}

/// What one metric recorded since the last forward.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The metric's name (`redis_locks_...`).
    pub name: String,
    /// Its labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
    /// A counter's increase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub increase: Option<u64>,
    /// A histogram's new values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<f64>,
}

/// A worker's side: records the library's metrics in this process, to be forwarded.
pub struct Forwarder {
    snapshotter: Snapshotter,
}

impl Forwarder {
    /// Installs the recording recorder; `None` if a recorder was installed already.
    pub fn install() -> Option<Forwarder> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().ok()?;
        redis_locks::describe_metrics();
        Some(Forwarder { snapshotter })
    }

    /// What was recorded since the last call (counters that did not move left out).
    pub fn take(&self) -> Vec<Sample> {
        let snapshot = self.snapshotter.snapshot().into_vec();
        snapshot
            .into_iter()
            .filter_map(|(key, _, _, value)| {
                let (kind, key) = key.into_parts();
                let labels = key
                    .labels()
                    .map(|label| (label.key().to_string(), label.value().to_string()))
                    .collect();
                let name = key.name().to_string();
                let sample = |increase, values| Sample {
                    name,
                    labels,
                    increase,
                    values,
                };
                match (kind, value) {
                    (MetricKind::Counter, DebugValue::Counter(0)) => None,
                    (MetricKind::Counter, DebugValue::Counter(n)) => Some(sample(Some(n), vec![])),
                    (MetricKind::Histogram, DebugValue::Histogram(values))
                        if !values.is_empty() =>
                    {
                        Some(sample(None, values.into_iter().map(|v| v.0).collect()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Sends what was recorded with `send` every [`FORWARD_EVERY`] until `work` ends, then
    /// the rest, and gives `work`'s output.
    pub async fn around<T>(&self, send: fn(Vec<Sample>), work: impl Future<Output = T>) -> T {
        let forward = |samples: Vec<Sample>| {
            if !samples.is_empty() {
                send(samples);
            }
        };
        let mut work = std::pin::pin!(work);
        let mut every = tokio::time::interval(FORWARD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let output = loop {
            tokio::select! {
                output = &mut work => break output,
                _ = every.tick() => forward(self.take()),
            }
        };
        forward(self.take());
        output
    }
}

/// `check`'s side: adds a worker's `samples` to this process's recorder.
pub fn apply(samples: &[Sample]) {
    for sample in samples {
        let labels: Vec<Label> = sample
            .labels
            .iter()
            .map(|(key, value)| Label::new(key.clone(), value.clone()))
            .collect();
        if let Some(increase) = sample.increase {
            metrics::counter!(sample.name.clone(), labels).increment(increase);
        } else if !sample.values.is_empty() {
            let histogram = metrics::histogram!(sample.name.clone(), labels);
            for value in &sample.values {
                histogram.record(*value);
            }
        }
    }
}
