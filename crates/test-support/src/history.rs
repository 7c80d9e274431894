//! Checking a recorded history of lock holdings: no two overlap (unless both are shared
//! holdings, as an `RwLock`'s readers), tokens strictly increase.
//!
//! Each holder records the interval in which it *acted* as the holder — from after its
//! acquire call returned to before its release request was sent — with its fencing token.
//! That interval lies inside the time the server considered it the holder, so for a correct
//! lock no two recorded intervals overlap, and a holding that began after another ended has
//! the greater token (for two shared holdings, which may have held at once on the server
//! though recorded apart, tokens are not compared). Shared holdings ([`History::record_shared`]) may overlap each other,
//! never an exclusive one; the report counts how often they did
//! ([`Report::shared_overlaps`]), so a test can tell that readers really shared.
//! The tests of every primitive, the demo and `redis-locks check` use this one checker.
//!
//! Timestamps are nanoseconds of the wall clock ([`now_nanos`]), so intervals recorded by
//! different processes on one machine compare.
//!
//! ```
//! use test_support::history::{History, Interval};
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

/// A thread-safe collection of [`Interval`]s, exclusive and shared; share it behind an `Arc`.
///
/// ```
/// use test_support::history::{History, Interval};
///
/// let iv = |worker: &str, token, start, end| Interval { worker: worker.into(), token, start, end };
/// let history = History::default();
/// history.record_shared(iv("reader-1", 1, 0, 10));
/// history.record_shared(iv("reader-2", 2, 5, 15)); // readers may overlap
/// history.record(iv("writer", 3, 16, 20));
/// let report = history.check();
/// assert!(report.is_ok() && report.shared_overlaps == 1);
///
/// history.record_shared(iv("late-reader", 4, 18, 25)); // inside the write: a violation
/// assert_eq!(history.check().overlaps.len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct History {
    intervals: std::sync::Mutex<Vec<Interval>>,
    shared: std::sync::Mutex<Vec<Interval>>,
}

/// What [`History::check`] found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// How many intervals were checked.
    pub acquisitions: usize,
    /// Pairs of intervals that overlap in time: two holders at once.
    pub overlaps: Vec<(Interval, Interval)>,
    /// Pairs of intervals, the second begun after the first ended, whose tokens do not
    /// strictly increase.
    pub token_regressions: Vec<(Interval, Interval)>,
    /// How many shared intervals began while another shared one was open: proof that
    /// shared holders really held at once.
    pub shared_overlaps: usize,
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

    /// Adds one shared interval (a reader's): it may overlap other shared ones.
    pub fn record_shared(&self, interval: Interval) {
        self.shared
            .lock()
            .expect("history lock is never poisoned")
            .push(interval);
    }

    /// A copy of every exclusive interval recorded so far.
    pub fn intervals(&self) -> Vec<Interval> {
        self.intervals
            .lock()
            .expect("history lock is never poisoned")
            .clone()
    }

    /// A copy of every shared interval recorded so far.
    pub fn shared_intervals(&self) -> Vec<Interval> {
        self.shared
            .lock()
            .expect("history lock is never poisoned")
            .clone()
    }

    /// Checks the history recorded so far.
    pub fn check(&self) -> Report {
        check_modes(self.intervals(), self.shared_intervals())
    }
}

/// Checks a set of exclusive intervals: no two overlap, and each begun after another ended
/// carries the greater token.
pub fn check(intervals: Vec<Interval>) -> Report {
    check_modes(intervals, Vec::new())
}

/// Checks exclusive and shared intervals together: an exclusive interval overlaps no other
/// interval, shared ones may overlap each other (counted in
/// [`Report::shared_overlaps`]), and of two intervals where one began after the other
/// ended and at least one is exclusive, the later carries the greater token.
pub fn check_modes(exclusive: Vec<Interval>, shared: Vec<Interval>) -> Report {
    let mut all: Vec<(Interval, bool)> = exclusive
        .into_iter()
        .map(|interval| (interval, false))
        .chain(shared.into_iter().map(|interval| (interval, true)))
        .collect();
    all.sort_by_key(|(i, _)| (i.start, i.end));
    let mut report = Report {
        acquisitions: all.len(),
        ..Report::default()
    };
    // Overlaps: the open interval that ends last, of any mode and of the exclusive mode.
    let mut open_any: Option<&Interval> = None;
    let mut open_exclusive: Option<&Interval> = None;
    let mut open_shared: Option<&Interval> = None;
    let later = |open: Option<&Interval>, i: &Interval| open.is_some_and(|open| i.start < open.end);
    for (interval, is_shared) in &all {
        let clash = if *is_shared {
            open_exclusive.filter(|_| later(open_exclusive, interval))
        } else {
            open_any.filter(|_| later(open_any, interval))
        };
        if let Some(open) = clash {
            report.overlaps.push((open.clone(), interval.clone()));
        }
        if *is_shared && later(open_shared, interval) {
            report.shared_overlaps += 1;
        }
        widen(&mut open_any, interval);
        if *is_shared {
            widen(&mut open_shared, interval);
        } else {
            widen(&mut open_exclusive, interval);
        }
    }
    // Tokens: in order of start, each interval against the greatest token of those that
    // ended before it began, when one of the two is exclusive. (Two readers' recorded
    // intervals may be apart while they held at once on the server: a reader granted first
    // may start acting late. So their tokens are not compared.)
    let mut by_end: Vec<&(Interval, bool)> = all.iter().collect();
    by_end.sort_by_key(|(i, _)| i.end);
    let mut ended = by_end.iter().peekable();
    let mut greatest_any: Option<&Interval> = None;
    let mut greatest_exclusive: Option<&Interval> = None;
    for (interval, is_shared) in &all {
        // A holding that ended when this one began ended before it; not this one itself, if it
        // took no time at all.
        let before = |done: &Interval| {
            done.end <= interval.start && !(done.start == done.end && done.end == interval.start)
        };
        while let Some((done, done_shared)) = ended.next_if(|(done, _)| before(done)) {
            raise(&mut greatest_any, done);
            if !done_shared {
                raise(&mut greatest_exclusive, done);
            }
        }
        let before = if *is_shared {
            greatest_exclusive
        } else {
            greatest_any
        };
        if let Some(before) = before.filter(|g| interval.token <= g.token) {
            report
                .token_regressions
                .push((before.clone(), interval.clone()));
        }
    }
    report
}

/// What [`check_permits`] found in the holdings of a semaphore's permits.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PermitReport {
    /// How many holdings were checked.
    pub acquisitions: usize,
    /// N, the most permits that may be held at once.
    pub limit: u32,
    /// The most permits held at once.
    pub most_at_once: u32,
    /// Each time more than N permits were held at once: the holdings open then.
    pub over_limit: Vec<Vec<Interval>>,
    /// Pairs of holdings with the same token: every grant must have a token of its own.
    pub repeated_tokens: Vec<(Interval, Interval)>,
    /// Pairs of one worker's holdings, the second begun after the first ended, whose tokens
    /// do not strictly increase.
    pub token_regressions: Vec<(Interval, Interval)>,
}

impl PermitReport {
    /// Never more than N at once, and every token its own and growing per worker.
    pub fn is_ok(&self) -> bool {
        self.over_limit.is_empty()
            && self.repeated_tokens.is_empty()
            && self.token_regressions.is_empty()
    }
}

impl std::fmt::Display for PermitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} acquisitions, at most {} of {} permits at once, {} times over, {} repeated tokens, {} token regressions",
            self.acquisitions,
            self.most_at_once,
            self.limit,
            self.over_limit.len(),
            self.repeated_tokens.len(),
            self.token_regressions.len()
        )
    }
}

/// Checks the holdings of a semaphore with `limit` permits, each with the number of permits
/// it held: the permits held at once never exceed `limit`; no two holdings share a token
/// (one per grant); of one worker's holdings, a later one carries the greater token. (Two
/// workers' holdings are not compared by token: a holder granted first may start acting
/// after a later grant's holder is done.)
///
/// ```
/// use test_support::history::{Interval, check_permits};
///
/// let iv = |worker: &str, token, start, end| Interval { worker: worker.into(), token, start, end };
/// let two = vec![(iv("a", 1, 0, 10), 1), (iv("b", 2, 5, 15), 1)];
/// assert!(check_permits(two.clone(), 2).is_ok());
/// let report = check_permits(two, 1);
/// assert_eq!((report.most_at_once, report.over_limit.len()), (2, 1));
/// ```
pub fn check_permits(holdings: Vec<(Interval, u32)>, limit: u32) -> PermitReport {
    let mut report = PermitReport {
        acquisitions: holdings.len(),
        limit,
        ..PermitReport::default()
    };
    // Ends before starts at the same instant: a holding recorded as ending when another
    // begins did not overlap it.
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * holdings.len());
    for (i, (interval, _)) in holdings.iter().enumerate() {
        events.push((interval.start, true, i));
        events.push((interval.end, false, i));
    }
    events.sort_by_key(|&(at, starts, i)| (at, starts, i));
    let mut open = std::collections::BTreeSet::new();
    let mut held = 0u32;
    let mut over = false;
    for (_, starts, i) in events {
        let permits = holdings[i].1;
        if starts {
            open.insert(i);
            held = held.saturating_add(permits);
        } else {
            open.remove(&i);
            held = held.saturating_sub(permits);
        }
        report.most_at_once = report.most_at_once.max(held);
        // Each time the count goes over, once (not at every start while it stays over).
        if held > limit && !over {
            report
                .over_limit
                .push(open.iter().map(|&j| holdings[j].0.clone()).collect());
        }
        over = held > limit;
    }
    let mut by_token: Vec<&Interval> = holdings.iter().map(|(interval, _)| interval).collect();
    by_token.sort_by_key(|interval| interval.token);
    for pair in by_token.windows(2) {
        if pair[0].token == pair[1].token {
            report
                .repeated_tokens
                .push((pair[0].clone(), pair[1].clone()));
        }
    }
    let mut by_worker: Vec<&Interval> = holdings.iter().map(|(interval, _)| interval).collect();
    by_worker.sort_by(|a, b| (&a.worker, a.start).cmp(&(&b.worker, b.start)));
    for pair in by_worker.windows(2) {
        let (first, then) = (pair[0], pair[1]);
        if first.worker == then.worker && then.start >= first.end && then.token <= first.token {
            report.token_regressions.push((first.clone(), then.clone()));
        }
    }
    report
}

/// Makes `interval` the greatest if its token is greater.
fn raise<'a>(greatest: &mut Option<&'a Interval>, interval: &'a Interval) {
    if greatest.is_none_or(|g| interval.token > g.token) {
        *greatest = Some(interval);
    }
}

/// Makes `interval` the open one if it ends later.
fn widen<'a>(open: &mut Option<&'a Interval>, interval: &'a Interval) {
    if open.is_none_or(|open| interval.end > open.end) {
        *open = Some(interval);
    }
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
    fn shared_intervals_overlap_each_other_but_no_exclusive_one() {
        let shared = vec![
            iv("r1", 2, 10, 30),
            iv("r2", 3, 15, 40),
            iv("r3", 4, 35, 50),
        ];
        let report = check_modes(vec![iv("w1", 1, 0, 9), iv("w2", 5, 51, 60)], shared.clone());
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.shared_overlaps, 2);
        // A writer inside the readers' time (one overlap per interval that begins inside
        // another), and a reader inside a writer's.
        let report = check_modes(vec![iv("w", 9, 36, 45)], shared);
        assert_eq!(report.overlaps.len(), 1, "{report:?}");
        let report = check_modes(vec![iv("w", 1, 0, 20)], vec![iv("r", 2, 10, 30)]);
        assert_eq!(report.overlaps.len(), 1);
    }

    #[test]
    fn a_reader_after_a_writer_needs_the_greater_token() {
        let report = check_modes(vec![iv("w", 5, 0, 10)], vec![iv("r", 4, 11, 20)]);
        assert_eq!(report.token_regressions.len(), 1);
        // Readers may start in any token order, overlapping or not (a reader granted first
        // may start acting late), but not before a writer's token.
        let report = check_modes(vec![], vec![iv("r1", 4, 0, 20), iv("r2", 3, 5, 25)]);
        assert!(report.is_ok(), "{report:?}");
        let report = check_modes(vec![], vec![iv("r1", 4, 0, 20), iv("r2", 3, 21, 25)]);
        assert!(report.is_ok(), "{report:?}");
        let report = check_modes(vec![iv("w", 9, 0, 10)], vec![iv("r", 3, 21, 25)]);
        assert_eq!(report.token_regressions.len(), 1);
    }

    #[test]
    fn permits_over_the_limit_repeated_tokens_and_falling_tokens_are_found() {
        let weighted =
            |worker, token, start, end, permits| (iv(worker, token, start, end), permits);
        // Two of three permits, then three: at the limit, never over.
        let fine = vec![
            weighted("a", 1, 0, 10, 1),
            weighted("b", 2, 0, 10, 1),
            weighted("c", 3, 10, 20, 3),
        ];
        let report = check_permits(fine.clone(), 3);
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.most_at_once, 3);
        // A weighted holding that opens while two others hold: 4 of 3.
        let mut over = fine.clone();
        over.push(weighted("d", 4, 5, 6, 2));
        let report = check_permits(over, 3);
        assert_eq!(report.over_limit.len(), 1, "{report:?}");
        assert_eq!(report.over_limit[0].len(), 3);
        assert_eq!(report.most_at_once, 4);
        // A token given twice; one worker's later holding with a smaller token.
        let mut tokens = fine;
        tokens.push(weighted("e", 3, 30, 40, 1));
        tokens.push(weighted("a", 0, 50, 60, 1));
        let report = check_permits(tokens, 3);
        assert_eq!(report.repeated_tokens.len(), 1);
        assert_eq!(report.token_regressions.len(), 1);
        assert!(!report.is_ok());
    }

    #[test]
    fn a_holding_that_took_no_time_is_no_regression_of_itself() {
        let report = check(vec![iv("a", 7, 5, 5), iv("b", 8, 6, 9)]);
        assert!(report.is_ok(), "{report:?}");
        let report = check(vec![iv("a", 7, 5, 5), iv("b", 6, 6, 9)]);
        assert_eq!(report.token_regressions.len(), 1, "{report:?}");
    }

    #[test]
    fn equal_or_falling_tokens_are_regressions() {
        let report = check(vec![iv("a", 5, 0, 1), iv("b", 5, 2, 3), iv("c", 4, 4, 5)]);
        assert_eq!(report.token_regressions.len(), 2);
        assert!(report.overlaps.is_empty());
        assert!(!report.is_ok());
    }
}
