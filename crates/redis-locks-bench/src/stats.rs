//! Latency histograms and the small table printer the benchmarks share.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency histogram in microseconds (1 µs to 1 hour, 3 significant digits).
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Latencies(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"))
    }
}

/// Percentiles of a [`Latencies`], in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Maximum.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

impl Latencies {
    /// Records one duration (clamped to the histogram's range).
    pub fn record(&mut self, value: Duration) {
        let micros = (value.as_micros() as u64).clamp(1, 3_600_000_000);
        self.0.record(micros).expect("clamped into range");
    }

    /// Merges another histogram into this one.
    pub fn add(&mut self, other: &Latencies) {
        self.0.add(&other.0).expect("same bounds");
    }

    /// How many durations were recorded.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// p50, p99, max and mean in milliseconds.
    pub fn summary(&self) -> Summary {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Summary {
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            max_ms: ms(self.0.max()),
            mean_ms: self.0.mean() / 1000.0,
        }
    }
}

/// Prints rows as an aligned table: the first row is the header.
pub fn print_table(rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c == 0 {
                    format!("{cell:<width$}", width = widths[c])
                } else {
                    format!("{cell:>width$}", width = widths[c])
                }
            })
            .collect();
        println!("  {}", line.join("  "));
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (columns.saturating_sub(1));
            println!("  {}", "-".repeat(total));
        }
    }
}

/// A progress bar on stderr for a timed run; hidden when stderr is not a terminal or
/// `quiet` is set.
pub fn progress(label: &str, duration: Duration, quiet: bool) -> indicatif::ProgressBar {
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::with_draw_target(
            Some(duration.as_millis() as u64),
            indicatif::ProgressDrawTarget::stderr(),
        )
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("  {msg:<28} [{bar:30}] {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_message(label.to_string());
    bar
}

/// Shows `bar` moving while a timed run goes on; clears it when dropped.
pub struct Ticker {
    bar: indicatif::ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Ticker {
    /// Starts moving `bar` every 100 ms.
    pub fn start(bar: indicatif::ProgressBar) -> Ticker {
        let start = tokio::time::Instant::now();
        let task = tokio::spawn({
            let bar = bar.clone();
            async move {
                loop {
                    bar.set_position(start.elapsed().as_millis() as u64);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Ticker { bar, task }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish_and_clear();
    }
}
