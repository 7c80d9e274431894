//! Checking a recorded history of lock holdings: no two overlap, tokens strictly increase.
//!
//! Each holder records the interval in which it *acted* as the holder — from after its
//! acquire call returned to before its release request was sent — with its fencing token.
//! That interval lies inside the time the server considered it the holder, so for a correct
//! lock no two recorded intervals overlap, and sorted by start their tokens strictly increase.
//! The tests of every primitive, the demo and `redis-locks check` use this one checker.
//!
//! Timestamps are nanoseconds of the wall clock ([`now_nanos`]), so intervals recorded by
//! different processes on one machine compare.
//!
//! ```
//! use redis_locks::history::{History, Interval};
//!
//! let history = History::default();
//! history.record(Interval { worker: "a".into(), token: 1, start: 10, end: 20 });
//! history.record(Interval { worker: "b".into(), token: 2, start: 21, end: 30 });
//! assert!(history.check().is_ok());
//!
//! history.record(Interval { worker: "c".into(), token: 3, start: 25, end: 40 });
//! let report = history.check();
//! assert_eq!(report.overlaps.len(), 1);
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in nanoseconds since the Unix epoch.
pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One holding of a lock, as its holder saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    /// Who held it (a task or process name).
    pub worker: String,
    /// The fencing token of the acquisition.
    pub token: u64,
    /// When the holder started acting ([`now_nanos`] after acquire returned).
    pub start: u64,
    /// When the holder stopped acting ([`now_nanos`] before release was sent).
    pub end: u64,
}

/// A thread-safe collection of [`Interval`]s; share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct History {
    intervals: std::sync::Mutex<Vec<Interval>>,
}

/// What [`History::check`] found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// How many intervals were checked.
    pub acquisitions: usize,
    /// Pairs of intervals that overlap in time: two holders at once.
    pub overlaps: Vec<(Interval, Interval)>,
    /// Pairs of successive intervals whose tokens do not strictly increase.
    pub token_regressions: Vec<(Interval, Interval)>,
}

impl Report {
    /// No overlap and no token regression.
    pub fn is_ok(&self) -> bool {
        self.overlaps.is_empty() && self.token_regressions.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acquisitions, {} overlaps, {} token regressions",
            self.acquisitions,
            self.overlaps.len(),
            self.token_regressions.len()
        )
    }
}

impl History {
    /// Adds one interval.
    pub fn record(&self, interval: Interval) {
        self.intervals
            .lock()
            .expect("history lock is never poisoned")
            .push(interval);
    }

    /// Adds many intervals (those another process recorded, say).
    pub fn extend(&self, intervals: impl IntoIterator<Item = Interval>) {
        self.intervals
            .lock()
            .expect("history lock is never poisoned")
            .extend(intervals);
    }

    /// A copy of every interval recorded so far.
    pub fn intervals(&self) -> Vec<Interval> {
        self.intervals
            .lock()
            .expect("history lock is never poisoned")
            .clone()
    }

    /// Checks the history recorded so far.
    pub fn check(&self) -> Report {
        check(self.intervals())
    }
}

/// Checks a set of intervals: sorted by start, each must begin after every earlier one ended,
/// and carry a greater token than the one before it.
pub fn check(mut intervals: Vec<Interval>) -> Report {
    intervals.sort_by_key(|i| (i.start, i.end));
    let mut report = Report {
        acquisitions: intervals.len(),
        ..Report::default()
    };
    let mut latest_end: Option<&Interval> = None;
    for pair in intervals.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.token <= before.token {
            report
                .token_regressions
                .push((before.clone(), after.clone()));
        }
    }
    for interval in &intervals {
        if let Some(open) = latest_end
            && interval.start < open.end
        {
            report.overlaps.push((open.clone(), interval.clone()));
        }
        if latest_end.is_none_or(|open| interval.end > open.end) {
            latest_end = Some(interval);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(worker: &str, token: u64, start: u64, end: u64) -> Interval {
        Interval {
            worker: worker.into(),
            token,
            start,
            end,
        }
    }

    #[test]
    fn disjoint_increasing_history_passes() {
        let report = check(vec![iv("b", 2, 5, 9), iv("a", 1, 0, 4), iv("c", 3, 9, 12)]);
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.acquisitions, 3);
    }

    #[test]
    fn an_interval_inside_a_long_one_is_an_overlap() {
        // c starts after b ended, but a is still open: the running maximum end catches it.
        let report = check(vec![
            iv("a", 1, 0, 100),
            iv("b", 2, 10, 20),
            iv("c", 3, 30, 40),
        ]);
        assert_eq!(report.overlaps.len(), 2);
    }

    #[test]
    fn equal_or_falling_tokens_are_regressions() {
        let report = check(vec![iv("a", 5, 0, 1), iv("b", 5, 2, 3), iv("c", 4, 4, 5)]);
        assert_eq!(report.token_regressions.len(), 2);
        assert!(report.overlaps.is_empty());
        assert!(!report.is_ok());
    }
}
