//! The progress bar of `check`: runs done of all, the current run's label, the time since the
//! first run started.
//!
//! It is drawn on stderr only when stderr is a terminal and `--json` is not given. Otherwise
//! it is hidden and the `check: ...` lines go to stderr as they always did, so a pipe or a
//! log file never sees a control character.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar, or nothing when it is not drawn; cleared when dropped (an error or a signal ends
/// `check` with no bar left on the screen).
pub struct Progress {
    bar: Option<ProgressBar>,
    /// Whether the `check: ...` lines are printed (not with `--json`).
    notes: bool,
}

impl Progress {
    /// A bar for `total` runs: drawn when stderr is a terminal and `json` is false.
    pub fn new(total: usize, json: bool) -> Progress {
        let shown = !json && std::io::stderr().is_terminal();
        Progress::with(total, json, shown)
    }

    fn with(total: usize, json: bool, shown: bool) -> Progress {
        let bar = shown.then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "check [{bar:24}] {pos}/{len} runs, {elapsed_precise}: {wide_msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            // The elapsed time moves while a long run gives no other news.
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Progress { bar, notes: !json }
    }

    /// The run `label` starts: named on the bar, and in a `check: label ...` line.
    pub fn start(&self, label: &str) {
        self.note(&format!("check: {label} ..."));
        if let Some(bar) = &self.bar {
            bar.set_message(label.to_string());
        }
    }

    /// The current run is over.
    pub fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Prints a `check: ...` line on stderr (above the bar when there is one); nothing with
    /// `--json`.
    pub fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None if self.notes => eprintln!("{line}"),
            None => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Progress;

    #[test]
    fn json_or_no_terminal_draws_nothing() {
        assert!(Progress::new(3, true).bar.is_none());
        assert!(Progress::with(3, false, false).bar.is_none());
        assert!(Progress::with(3, true, false).bar.is_none());
    }

    #[test]
    fn the_bar_counts_runs_and_names_the_current_one() {
        let progress = Progress::with(2, false, true);
        let bar = progress.bar.clone().unwrap();
        // Drawn nowhere in a test: only its state is looked at.
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        progress.start("Mutex / holder-kill");
        assert_eq!(bar.message(), "Mutex / holder-kill");
        assert_eq!((bar.position(), bar.length()), (0, Some(2)));
        progress.done();
        assert_eq!(bar.position(), 1);
        drop(progress);
        assert!(bar.is_finished());
    }
}
