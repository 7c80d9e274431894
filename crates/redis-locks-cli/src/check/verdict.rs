//! The checks `check` makes of a run's [`Record`], and the verdict they give.
//!
//! - **No overlap**: no two holders at once, unless the earlier one had been told its lock
//!   was lost before the overlap. A holder of ours is told when its lease ends (the guard's
//!   deadline; `lost()` fires) or `lost()` fires earlier, so its interval ends there; a legacy
//!   holder is never told, so its interval runs to its release. A holder killed while holding
//!   counts as holding until its lease ends (nobody may take the lock before), or, if it had
//!   begun its release (it says so first), as its own record would have. Readers may
//!   overlap readers. The library's own checker ([`test_support::history`]) does the pairing.
//! - **Tokens increase** between successive holders (for algorithms that have tokens).
//! - **No lost update**: the resource's value equals the number of writes it accepted.
//! - **No stale write** accepted by the fenced resource.
//! - **No key without a TTL**, looked at every 5 ms and at the end.
//! - **Nothing hangs**: the run ended within its timeout, and no task gave up.
//! - A **semaphore** of N permits ([`test_support::history::check_permits`]): never more than N
//!   holders at once (each holder's interval as above), every grant a token of its own, each
//!   task's tokens growing, and no permit leaked (all of them free again a lease after the
//!   last worker ended). Its holders share the resource as readers do, so the resource
//!   checks say nothing of it; the verdict also says the most holders seen at once.
//! - A **MultiLock** (each acquisition several names): no overlap and tokens increasing *per
//!   name* — the exclusive checker above run on each name's holdings, with that name's
//!   fencing token — and **none stuck**: every acquisition done within its deadline
//!   ([`Scenario::stuck_after`]). Its holders of other names hold at once, so they share the
//!   resource as readers do, and the resource checks say nothing of it.

use std::time::Duration;

use serde::Serialize;
use test_support::history::{History, Interval, check_permits};

use super::fault::Fault;
use super::plan::{Access, CheckPrimitive, Holding, Release, short_name};
use super::scenario::{Injection, Record, Scenario};

/// What the checks found in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `algorithm / primitive / faults`.
    pub label: String,
    /// Holdings (finished, and those of killed holders).
    pub acquisitions: usize,
    /// Holders killed while holding.
    pub crashed: usize,
    /// Pairs of holders at once that nobody was told about.
    pub overlaps: usize,
    /// Of `overlaps`, those with a holder granted just after a frozen Sentinel master was
    /// resumed: a request queued at it while it was frozen, granted by the zombie before it
    /// recounted its replicas, beside the new master's holder.
    pub zombie_overlaps: usize,
    /// Pairs of holders at once across a strike of a fault that makes the server forget the
    /// lock (the documented outcome of `server-restart` and `server-clock-jump` on one server).
    pub excused_overlaps: usize,
    /// Whether overlaps are this fault's documented outcome (a server that forgot the lock).
    pub overlaps_expected: bool,
    /// Times a shared holder (a reader) began while another one held: readers did share.
    pub shared_overlaps: usize,
    /// Successive holders whose tokens did not increase (`None`: no tokens).
    pub token_regressions: Option<usize>,
    /// Writes the resource accepted.
    pub writes: u64,
    /// Its value at the end.
    pub value: u64,
    /// Writes lost to a concurrent read-modify-write (`writes − value`).
    pub lost_updates: u64,
    /// Accepted writes with a token lower than an earlier one.
    pub stale_writes: u64,
    /// Accesses the fenced resource refused (a stale holder stopped by its token).
    pub fenced_refusals: usize,
    /// Releases that found the lock gone or another's, and said so.
    pub releases_not_held: usize,
    /// Times a lock key was seen without a TTL.
    pub keys_without_ttl: u64,
    /// The run did not end within its timeout.
    pub hung: bool,
    /// Tasks that gave up, faults that could not be injected, workers that failed.
    pub failures: Vec<String>,
    /// Failed requests that were retried.
    pub retries: usize,
    /// Faults injected.
    pub injections: usize,
    /// Holders (not themselves stopped) whose `lost()` fired.
    pub loss_signals: usize,
    /// The least time from a `lost()` to the next holder's acquisition, in ms (positive: the
    /// old holder was told before anyone else held).
    pub loss_margin_ms: Option<f64>,
    /// The least time from a `lost()` to the earliest the server could have let the lease run
    /// out (the holder's deadline plus the drift allowance), in ms: positive, the holder was
    /// told before its lease ended on the server.
    pub loss_lead_ms: Option<f64>,
    /// Locks lost under a fault that must lose none (a manual failover, a slot migration):
    /// holders told of a loss, releases that failed or found the lock gone.
    pub lost_locks: usize,
    /// Some of the violations, described.
    pub examples: Vec<String>,
    /// What the run showed besides the checks: what each topology fault did, and how the
    /// overlaps inside a documented failover window were fenced.
    pub notes: Vec<String>,
    /// A semaphore's N (`None` for the other primitives).
    pub permits: Option<u32>,
    /// A semaphore's most permits held at once.
    pub most_at_once: Option<u32>,
    /// Whether all N permits were held at once at some moment.
    pub all_permits_used: Option<bool>,
    /// Times a semaphore had more than N holders at once that no fault excuses (counted in
    /// `overlaps` too).
    pub over_limit: Option<usize>,
    /// Pairs of a semaphore's grants with the same token.
    pub repeated_tokens: Option<usize>,
    /// A semaphore's permits still held after every worker ended and a lease passed.
    pub leaked_permits: Option<u32>,
    /// MultiLock acquisitions that did not finish within their deadline (`None` for the
    /// other primitives).
    pub stuck: Option<usize>,
    /// Every check held.
    pub passed: bool,
}

/// What the semaphore checks found in one run.
struct Permits {
    limit: u32,
    most_at_once: u32,
    /// Times over N, unexcused and excused.
    over: usize,
    excused: usize,
    repeated: usize,
    regressions: usize,
    examples: Vec<String>,
}

/// The semaphore checks of `check_permits` over every holding of the run (each task's holdings
/// under its own name, so that its tokens must grow), the crashed ones to their lease end or
/// release; a time over N is excused only across a strike of a fault that makes the server
/// forget (as overlaps are).
fn judge_permits(
    scenario: &Scenario,
    record: &Record,
    told: &dyn Fn(u64, Option<u64>, Option<u64>) -> u64,
    forgetting: &[&Injection],
    ms: &dyn Fn(u64) -> f64,
) -> Permits {
    let mut holdings: Vec<(Interval, u32)> = Vec::new();
    for holding in &record.holdings {
        let end = told(holding.end, holding.lease_end, holding.lost_at);
        holdings.push((
            Interval {
                worker: holding.worker.clone(),
                token: holding.token.unwrap_or(0),
                start: holding.acquired_at,
                end: end.max(holding.acquired_at),
            },
            1,
        ));
    }
    for crashed in &record.crashed {
        let end = match crashed.releasing {
            Some(releasing) => told(releasing.at, releasing.lease_end, releasing.lost_at),
            None => crashed.lease_end,
        };
        holdings.push((
            Interval {
                worker: crashed.worker.clone(),
                token: crashed.token.unwrap_or(0),
                start: crashed.acquired_at,
                end: end.max(crashed.acquired_at),
            },
            1,
        ));
    }
    let mut report = check_permits(holdings, scenario.permits);
    if !scenario.algorithm.fenced() {
        // No tokens to check (all 0).
        report.repeated_tokens.clear();
        report.token_regressions.clear();
    }
    let (excused, over): (Vec<_>, Vec<_>) = report.over_limit.iter().partition(|open| {
        let first = open.iter().map(|i| i.start).min().unwrap_or(0);
        let last = open.iter().map(|i| i.start).max().unwrap_or(0);
        forgetting.iter().any(|i| first <= i.end && last >= i.start)
    });
    let mut examples: Vec<String> = over
        .iter()
        .take(EXAMPLES)
        .map(|open| {
            let at = open.iter().map(|i| i.start).max().unwrap_or(0);
            let holders: Vec<String> = open
                .iter()
                .map(|i| {
                    format!(
                        "{} (token {}, {:.1}–{:.1} ms)",
                        i.worker,
                        i.token,
                        ms(i.start),
                        ms(i.end)
                    )
                })
                .collect();
            format!(
                "over the limit: {} holders of {} permits at once at {:.1} ms: {}",
                open.len(),
                scenario.permits,
                ms(at),
                holders.join(", ")
            )
        })
        .collect();
    examples.extend(report.repeated_tokens.iter().take(EXAMPLES).map(|(a, b)| {
        format!(
            "repeated token: {} and {} were both granted token {}",
            a.worker, b.worker, a.token
        )
    }));
    examples.extend(
        report
            .token_regressions
            .iter()
            .take(EXAMPLES)
            .map(|(a, b)| {
                format!(
                    "token regression: {} had {} at {:.1} ms, then {} at {:.1} ms",
                    a.worker,
                    a.token,
                    ms(a.start),
                    b.token,
                    ms(b.start)
                )
            }),
    );
    Permits {
        limit: scenario.permits,
        most_at_once: report.most_at_once,
        over: over.len(),
        excused: excused.len(),
        repeated: report.repeated_tokens.len(),
        regressions: report.token_regressions.len(),
        examples,
    }
}

/// How many violations a verdict describes.
const EXAMPLES: usize = 5;
/// How long after a frozen master was resumed a grant may still be one it had queued.
const ZOMBIE_TURN: Duration = Duration::from_millis(250);

/// Checks one run.
pub fn judge(scenario: &Scenario, record: &Record) -> Verdict {
    let fenced = scenario.algorithm.fenced();
    let history = History::default();
    // A holder of ours is told when its lease ends or when `lost()` fires: its interval ends
    // at the first of those and the end of its use.
    let told = |end: u64, lease_end: Option<u64>, lost_at: Option<u64>| {
        if fenced {
            end.min(lease_end.unwrap_or(end))
                .min(lost_at.unwrap_or(end))
        } else {
            end
        }
    };
    let multilock = scenario.multilock();
    // A MultiLock's holdings, judged per name: a history each, with that name's token.
    let mut per_name: std::collections::BTreeMap<String, History> = Default::default();
    let mut by_name = |tokens: &[(String, u64)], worker: String, start: u64, end: u64| {
        for (name, token) in tokens {
            // At least a nanosecond: an interval that ends where it begins (a holder told of
            // a loss before it acquired) would be compared with itself as "ended before".
            per_name.entry(name.clone()).or_default().record(Interval {
                worker: format!("{worker} on {}", short_name(name, &record.lock)),
                token: *token,
                start,
                end: end.max(start + 1),
            });
        }
    };
    for holding in &record.holdings {
        let end = told(holding.end, holding.lease_end, holding.lost_at);
        if multilock {
            by_name(
                &holding.tokens,
                format!("{}#{}", holding.worker, holding.seq),
                holding.acquired_at,
                end,
            );
            continue;
        }
        let interval = Interval {
            worker: format!("{}#{}", holding.worker, holding.seq),
            token: holding.token.unwrap_or(0),
            start: holding.acquired_at,
            end: end.max(holding.acquired_at),
        };
        if holding.shared {
            history.record_shared(interval);
        } else {
            history.record(interval);
        }
    }
    for crashed in &record.crashed {
        // Killed while releasing: judged as its `Held` line would have been.
        let (label, end) = match crashed.releasing {
            Some(releasing) => (
                "killed while releasing",
                told(releasing.at, releasing.lease_end, releasing.lost_at),
            ),
            None => ("killed", crashed.lease_end),
        };
        if multilock {
            by_name(
                &crashed.tokens,
                format!("{} ({label})", crashed.worker),
                crashed.acquired_at,
                end,
            );
            continue;
        }
        let interval = Interval {
            worker: format!("{} ({label})", crashed.worker),
            token: crashed.token.unwrap_or(0),
            start: crashed.acquired_at,
            end: end.max(crashed.acquired_at),
        };
        // A semaphore's holders share (its own check counts them below); a killed reader
        // is not told apart from a writer, and counts as exclusive.
        if scenario.primitive == CheckPrimitive::Semaphore {
            history.record_shared(interval);
        } else {
            history.record(interval);
        }
    }
    let mut report = history.check();
    for history in per_name.values() {
        let name = history.check();
        report.acquisitions += name.acquisitions;
        report.overlaps.extend(name.overlaps);
        report.token_regressions.extend(name.token_regressions);
        report.shared_overlaps += name.shared_overlaps;
    }
    let ms = |ns: u64| (ns.saturating_sub(record.started_at)) as f64 / 1e6;
    // Two holders at once are excused only across a strike of a fault that makes the server
    // forget the lock: the first held before it ended, the second came after it began.
    let redlock = scenario.primitive == CheckPrimitive::Redlock && scenario.algorithm.fenced();
    let forgetting: Vec<&Injection> = record
        .injections
        .iter()
        .filter(|i| i.fault.breaks_exclusion(redlock))
        .collect();
    let (excused, overlaps): (Vec<_>, Vec<_>) = report.overlaps.iter().partition(|(a, b)| {
        forgetting
            .iter()
            .any(|i| a.start <= i.end && b.start >= i.start)
    });
    let mut notes: Vec<String> = record
        .injections
        .iter()
        .filter_map(|i| {
            i.detail
                .as_ref()
                .map(|detail| format!("{} at {:.1} ms: {detail}", i.fault.label(), ms(i.start)))
        })
        .collect();
    // The overlaps a fault lets in by design must still be fenced: the second holder's token
    // above the first's, and (told below) the first one's later accesses refused.
    let unfenced: Vec<_> = excused.iter().filter(|(a, b)| b.token <= a.token).collect();
    let window = record
        .injections
        .iter()
        .any(|i| i.fault == Fault::ClusterKill);
    // The window's notes pair one lock's holders; a semaphore's times over N say it there.
    if window && scenario.primitive != CheckPrimitive::Semaphore {
        notes.extend(window_notes(record, &excused, &ms));
    }
    // A holder granted within this long after a frozen master was resumed may have been
    // granted by it: a request it had queued while frozen.
    let thaws: Vec<u64> = record
        .injections
        .iter()
        .filter_map(|i| i.resumed_at)
        .collect();
    let at_thaw = |(a, b): &(Interval, Interval)| {
        thaws.iter().any(|&r| {
            [a.start, b.start]
                .iter()
                .any(|&t| t >= r && t - r <= ZOMBIE_TURN.as_nanos() as u64)
        })
    };
    let zombie_overlaps = overlaps.iter().filter(|pair| at_thaw(pair)).count();
    let mut examples: Vec<String> = overlaps
        .iter()
        .take(EXAMPLES)
        .map(|pair| {
            let (a, b) = pair;
            let zombie = if at_thaw(pair) {
                " — at the zombie master's thaw: a request queued at it while it was frozen \
                 was granted there (it recounts its replicas only after its first turns, so \
                 min-replicas-to-write did not refuse it), beside the new master's holder"
            } else {
                ""
            };
            format!(
                "overlap: {} held {:.1}–{:.1} ms, {} from {:.1} ms{zombie}",
                a.worker,
                ms(a.start),
                ms(a.end),
                b.worker,
                ms(b.start)
            )
        })
        .collect();
    let semaphore = scenario.primitive == CheckPrimitive::Semaphore;
    let permits = semaphore.then(|| judge_permits(scenario, record, &told, &forgetting, &ms));
    if let Some(permits) = &permits {
        examples.extend(permits.examples.iter().cloned());
    }
    let token_regressions = fenced.then_some(
        report.token_regressions.len() + permits.as_ref().map_or(0, |p| p.regressions + p.repeated),
    );
    if fenced {
        examples.extend(
            report
                .token_regressions
                .iter()
                .take(EXAMPLES)
                .map(|(a, b)| {
                    format!(
                        "token regression: {} had {}, then {} had {}",
                        a.worker, a.token, b.worker, b.token
                    )
                }),
        );
    }
    examples.extend(unfenced.iter().take(EXAMPLES).map(|(a, b)| {
        format!(
            "NOT fenced: {} (token {}) held beside {} (token {}) inside the window of a \
             fault, and the second token is not the greater",
            a.worker, a.token, b.worker, b.token
        )
    }));
    let tally = record.tally;
    let lost_updates = tally.writes.saturating_sub(tally.value);
    if lost_updates > 0 {
        examples.push(format!(
            "lost updates: {} writes accepted, the value is {}",
            tally.writes, tally.value
        ));
    }
    if record.keys_without_ttl > 0 {
        examples.push(format!(
            "a lock key without a TTL, seen {} times",
            record.keys_without_ttl
        ));
    }
    if record.hung {
        examples.push(format!(
            "hung: no acquisition for a long while, or not done within {:?} ({} acquisitions made)",
            scenario.timeout,
            record.holdings.len()
        ));
    }
    examples.extend(record.failures.iter().take(EXAMPLES).cloned());
    examples.extend(
        record
            .stuck
            .iter()
            .take(EXAMPLES)
            .map(|stuck| format!("stuck: {stuck}")),
    );

    let fenced_refusals = record
        .holdings
        .iter()
        .filter(|h| h.read == Access::Refused || h.write == Access::Refused)
        .count();
    let (loss_signals, loss_margin_ms, loss_lead_ms) = loss_margin(scenario, record);
    if record.injections.len() < record.expected_injections {
        examples.push(format!(
            "only {} of the {} planned faults struck: the run proves less than it should",
            record.injections.len(),
            record.expected_injections
        ));
    }
    // The loss signal: a holder that depends on its renewals must be told when the server
    // cannot renew for a lease, before its lease ends there; and must not be under latency
    // within the design threshold.
    let struck = |test: &dyn Fn(Fault) -> bool| record.injections.iter().any(|i| test(i.fault));
    let told_in_time = loss_lead_ms.is_none_or(|lead| lead > 0.0);
    let must_tell = fenced && struck(&|f| f.tells_holder(redlock));
    let must_keep =
        fenced && struck(&|f| f.keeps_holder()) && !struck(&|f| f.tells_holder(redlock));
    let signal_ok =
        told_in_time && (!must_tell || loss_signals > 0) && (!must_keep || loss_signals == 0);
    if !signal_ok {
        examples.push(format!(
            "loss signal: {loss_signals} holders told (lead on the lease end {loss_lead_ms:?} ms); {}",
            if must_keep {
                "none may lose its lock to this fault"
            } else {
                "a holder that depends on its renewals must be told before its lease ends"
            }
        ));
    }
    let overlaps_expected = scenario.faults.iter().any(|f| f.breaks_exclusion(redlock));
    // A manual failover or a slot migration loses no lock: every holder keeps it and
    // releases it.
    let keeping = fenced && struck(&|f| f.keeps_releases());
    let lost: Vec<&Holding> = if keeping {
        record
            .holdings
            .iter()
            .filter(|h| !h.paused)
            .filter(|h| {
                h.lost_at.is_some() || matches!(h.release, Release::NotHeld | Release::Failed)
            })
            .collect()
    } else {
        Vec::new()
    };
    examples.extend(lost.iter().take(EXAMPLES).map(|h| {
        format!(
            "lost lock: {}#{} (acquired at {:.1} ms){}, its release {:?}",
            h.worker,
            h.seq,
            ms(h.acquired_at),
            h.lost_at
                .map(|at| format!(" told of a loss at {:.1} ms", ms(at)))
                .unwrap_or_default(),
            h.release
        )
    }));
    let leaked = record.leaked_permits.filter(|&left| left > 0);
    if let Some(left) = leaked {
        examples.push(format!(
            "leaked permits: {left} still held after every worker had ended and a lease had passed"
        ));
    }
    if let Some(err) = &record.leak_error {
        notes.push(format!("leaked permits not looked for: {err}"));
    }
    if let Some(permits) = permits.as_ref().filter(|p| p.most_at_once < p.limit) {
        notes.push(format!(
            "at most {} of the {} permits were held at once: the run never used them all",
            permits.most_at_once, permits.limit
        ));
    }
    if let Some(permits) = permits.as_ref().filter(|_| window) {
        notes.push(format!(
            "{} time(s) over N inside the failover window (excused, as overlaps are), {} \
             outside",
            permits.excused, permits.over
        ));
    }
    let over_limit = permits.as_ref().map_or(0, |p| p.over);
    let passed = overlaps.is_empty()
        && over_limit == 0
        && leaked.is_none()
        && unfenced.is_empty()
        && lost.is_empty()
        && signal_ok
        && record.injections.len() >= record.expected_injections
        && token_regressions.unwrap_or(0) == 0
        && lost_updates == 0
        && tally.stale_writes == 0
        && record.keys_without_ttl == 0
        && record.stuck.is_empty()
        && !record.hung
        && record.failures.is_empty();
    Verdict {
        label: scenario.label(),
        acquisitions: record.holdings.len() + record.crashed.len(),
        crashed: record.crashed.len(),
        overlaps: overlaps.len() + over_limit,
        zombie_overlaps,
        excused_overlaps: excused.len() + permits.as_ref().map_or(0, |p| p.excused),
        overlaps_expected,
        shared_overlaps: report.shared_overlaps,
        token_regressions,
        writes: tally.writes,
        value: tally.value,
        lost_updates,
        stale_writes: tally.stale_writes,
        fenced_refusals,
        releases_not_held: record
            .holdings
            .iter()
            .filter(|h| h.release == Release::NotHeld)
            .count(),
        keys_without_ttl: record.keys_without_ttl,
        hung: record.hung,
        failures: record.failures.clone(),
        retries: record.retries,
        injections: record.injections.len(),
        loss_signals,
        loss_margin_ms,
        loss_lead_ms,
        lost_locks: lost.len(),
        examples,
        notes,
        permits: permits.as_ref().map(|p| p.limit),
        most_at_once: permits.as_ref().map(|p| p.most_at_once),
        all_permits_used: permits.as_ref().map(|p| p.most_at_once >= p.limit),
        over_limit: permits.as_ref().map(|p| p.over),
        repeated_tokens: permits.as_ref().map(|p| p.repeated),
        leaked_permits: record.leaked_permits,
        stuck: multilock.then_some(record.stuck.len()),
        passed,
    }
}

/// What `cluster-kill`'s window showed: each overlap inside it (the first holder's grant
/// died with the master, a second holder took the lock on the promoted replica while the
/// first's lease ran) and how it was fenced: the second token above the first, the first
/// holder's next access refused by the resource (or none made), or, when no second holder
/// came in time, that the window did not show.
fn window_notes(
    record: &Record,
    excused: &[&(Interval, Interval)],
    ms: &dyn Fn(u64) -> f64,
) -> Vec<String> {
    let holding = |label: &str| {
        record
            .holdings
            .iter()
            .find(|h| format!("{}#{}", h.worker, h.seq) == label)
    };
    if excused.is_empty() {
        return vec![
            "no second holder inside the failover window: the lock was granted again only \
             after the first holder's lease had ended"
                .to_string(),
        ];
    }
    let mut notes = vec![format!(
        "{} overlap(s) inside the documented failover window (a grant the replica never had \
         died with its master: README, \"What a failover does to a lock\"), not counted \
         against the run; how fencing covered them:",
        excused.len()
    )];
    // Grouped by the first holder: each later holder let in beside it.
    let mut firsts: Vec<&Interval> = Vec::new();
    for (a, _) in excused {
        if !firsts.iter().any(|f| f.worker == a.worker) {
            firsts.push(a);
        }
    }
    for a in firsts.into_iter().take(EXAMPLES) {
        let beside: Vec<&Interval> = excused
            .iter()
            .filter(|(first, _)| first.worker == a.worker)
            .map(|(_, b)| b)
            .collect();
        let Some(b) = beside.iter().min_by_key(|b| b.start) else {
            continue;
        };
        let grew = beside.iter().all(|b| b.token > a.token);
        let tokens = if grew {
            format!("every token above {}", a.token)
        } else {
            format!("NOT every token above {}", a.token)
        };
        let access = match holding(&a.worker) {
            Some(h) => match h.refused_at {
                Some(at) if at >= b.start => format!(
                    "its next access of the resource, {:.1} ms after the second grant, was \
                     refused by its token (the stale write refused)",
                    (at - b.start) as f64 / 1e6
                ),
                Some(at) => format!("its access was refused at {:.1} ms", ms(at)),
                None => format!(
                    "it made no access the resource refused ({} increments taken, all ordered \
                     before the newer holders' by the resource's token check)",
                    h.increments
                ),
            },
            None => "it was killed".to_string(),
        };
        notes.push(format!(
            "{} (token {}) held {:.1}–{:.1} ms; {} later holder(s) from {:.1} ms ({} first, \
             token {}), {tokens}; {access}",
            a.worker,
            a.token,
            ms(a.start),
            ms(a.end),
            beside.len(),
            ms(b.start),
            b.worker,
            b.token
        ));
    }
    notes
}

/// For every holder of ours that was told of a loss while it ran (not stopped itself): how
/// many, the least time from that signal to the next other holder's acquisition, and the
/// least time from it to the lease's end on the server (no earlier than the holder's
/// deadline plus the drift allowance: 1% of the lease + 2 ms).
fn loss_margin(scenario: &Scenario, record: &Record) -> (usize, Option<f64>, Option<f64>) {
    if !scenario.algorithm.fenced() {
        return (0, None, None);
    }
    let drift = (scenario.lease / 100 + Duration::from_millis(2)).as_nanos() as f64;
    let least = |least: Option<f64>, value: f64| Some(least.map_or(value, |l: f64| l.min(value)));
    let mut signals = 0;
    let (mut margin, mut lead) = (None, None);
    for holding in record.holdings.iter().filter(|h| !h.paused) {
        let Some(lost_at) = holding.lost_at else {
            continue;
        };
        signals += 1;
        if let Some(lease_end) = holding.lease_end {
            lead = least(lead, (lease_end as f64 + drift - lost_at as f64) / 1e6);
        }
        let next = record
            .holdings
            .iter()
            .filter(|other| other.worker != holding.worker || other.seq != holding.seq)
            .filter(|other| !other.shared && other.acquired_at > holding.acquired_at)
            .filter(|other| other.token > holding.token)
            .map(|other| other.acquired_at)
            .min();
        if let Some(next) = next {
            margin = least(margin, (next as f64 - lost_at as f64) / 1e6);
        }
    }
    (signals, margin, lead)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fault::Fault;
    use super::super::plan::{Access, Algorithm, CheckPrimitive, Holding, Release};
    use super::super::resource::Tally;
    use super::super::scenario::{Crashed, Injection, Record, Releasing, Scenario};
    use super::judge;

    const MS: u64 = 1_000_000;

    fn scenario(algorithm: Algorithm) -> Scenario {
        Scenario {
            algorithm,
            primitive: CheckPrimitive::Mutex,
            permits: 1,
            names: 1,
            faults: vec![Fault::HolderPause],
            processes: 2,
            tasks: 1,
            count: 1,
            lease: Duration::from_millis(100),
            hold: Duration::from_millis(1),
            injections: 1,
            timeout: Duration::from_secs(10),
        }
    }

    /// A holding of `worker` from `start` to `end` ms, its lease ending at `lease_end` ms.
    fn holding(worker: &str, token: u64, start: u64, end: u64, lease_end: u64) -> Holding {
        Holding {
            worker: worker.into(),
            seq: 0,
            shared: false,
            token: Some(token),
            tokens: Vec::new(),
            acquired_at: start * MS,
            lease_end: Some(lease_end * MS),
            end: end * MS,
            lost_at: None,
            paused: false,
            lingered: false,
            wall_step_ms: 0,
            refused_at: None,
            increments: 0,
            read: Access::Accepted,
            write: Access::Accepted,
            release: Release::Released,
        }
    }

    fn record(holdings: Vec<Holding>) -> Record {
        let writes = holdings.len() as u64;
        Record {
            lock: "l".into(),
            stuck: Vec::new(),
            started_at: 0,
            ended_at: 1000 * MS,
            holdings,
            crashed: Vec::new(),
            injections: Vec::new(),
            retries: 0,
            failures: Vec::new(),
            hung: false,
            keys_without_ttl: 0,
            tally: Tally {
                value: writes,
                writes,
                stale_writes: 0,
            },
            expected_injections: 0,
            servers: None,
            leaked_permits: None,
            leak_error: None,
        }
    }

    /// A strike of `fault` from `start` to `end` ms.
    fn injection(fault: Fault, start: u64, end: u64) -> Injection {
        Injection {
            fault,
            start: start * MS,
            end: end * MS,
            detail: None,
            resumed_at: None,
        }
    }

    #[test]
    fn holders_one_after_another_pass() {
        let run = record(vec![
            holding("a", 1, 0, 10, 100),
            holding("b", 2, 11, 20, 111),
        ]);
        let verdict = judge(&scenario(Algorithm::Ours), &run);
        assert!(verdict.passed, "{verdict:?}");
        assert_eq!(verdict.overlaps, 0);
    }

    #[test]
    fn a_holder_acting_past_its_lease_is_excused_only_when_it_was_told() {
        // `a` was stopped past its lease (100 ms) and acted until 150 ms; `b` took over at 120.
        let stale = holding("a", 1, 0, 150, 100);
        let next = holding("b", 2, 120, 130, 220);
        // Ours tells its holder at the lease end: `a` acted on after it was told.
        let ours = judge(
            &scenario(Algorithm::Ours),
            &record(vec![stale.clone(), next.clone()]),
        );
        assert!(ours.passed, "{ours:?}");
        // An algorithm that tells nobody: two holders at once.
        let legacy = judge(&scenario(Algorithm::NaiveDel), &record(vec![stale, next]));
        assert_eq!(legacy.overlaps, 1);
        assert!(!legacy.passed);
        assert!(legacy.examples[0].starts_with("overlap: a#0"));
    }

    #[test]
    fn a_holder_whose_lease_still_ran_overlapping_another_fails() {
        // The broken lock the checker must reject: `b` got in while `a`'s lease ran.
        let run = record(vec![
            holding("a", 1, 0, 50, 100),
            holding("b", 2, 40, 60, 140),
        ]);
        let verdict = judge(&scenario(Algorithm::Ours), &run);
        assert_eq!(verdict.overlaps, 1);
        assert!(!verdict.passed);
    }

    #[test]
    fn overlaps_are_excused_only_under_a_fault_that_forgets_the_lock() {
        // `a` learns at 45 ms, by its next renewal, that the server forgot its lock.
        let run = || {
            let mut a = holding("a", 1, 0, 50, 100);
            a.lost_at = Some(45 * MS);
            record(vec![a, holding("b", 2, 40, 60, 140)])
        };
        // The server restarted between 30 and 35 ms: `a` held before, `b` came after.
        let struck = |at: u64| {
            let mut run = run();
            run.injections
                .push(injection(Fault::ServerRestart, at, at + 5));
            run.expected_injections = 1;
            run
        };
        let mut restart = scenario(Algorithm::Ours);
        restart.faults = vec![Fault::ServerRestart];
        let verdict = judge(&restart, &struck(30));
        assert_eq!((verdict.overlaps, verdict.excused_overlaps), (0, 1));
        assert!(verdict.passed, "{verdict:?}");
        // A restart after `b` came explains nothing.
        let verdict = judge(&restart, &struck(45));
        assert_eq!((verdict.overlaps, verdict.excused_overlaps), (1, 0));
        assert!(!verdict.passed);
        // A Redlock keeps its majority when one node forgets: no excuse there.
        restart.primitive = CheckPrimitive::Redlock;
        let verdict = judge(&restart, &struck(30));
        assert!(!verdict.overlaps_expected && !verdict.passed, "{verdict:?}");
        // Nor under any other fault.
        let mut kill = scenario(Algorithm::Ours);
        kill.faults = vec![Fault::HolderKill];
        assert!(!judge(&kill, &run()).passed);
    }

    #[test]
    fn fewer_faults_than_planned_or_a_missing_loss_signal_fail() {
        let mut run = record(vec![holding("a", 1, 0, 10, 100)]);
        run.expected_injections = 2;
        run.injections.push(injection(Fault::ServerPause, 0, 150));
        let mut pause = scenario(Algorithm::Ours);
        pause.faults = vec![Fault::ServerPause];
        let verdict = judge(&pause, &run);
        assert!(!verdict.passed, "one of two strikes: {verdict:?}");
        run.expected_injections = 1;
        // The server was frozen for longer than a lease and no holder was told.
        assert!(!judge(&pause, &run).passed);
        let mut told = holding("a", 1, 0, 90, 90);
        told.lost_at = Some(90 * MS);
        run.holdings = vec![told.clone()];
        assert!(judge(&pause, &run).passed);
        // Told after the lease had ended on the server: too late.
        told.lost_at = Some(200 * MS);
        run.holdings = vec![told];
        assert!(!judge(&pause, &run).passed);
        // Under latency within the threshold, a told holder is a false loss.
        let mut latency = scenario(Algorithm::Ours);
        latency.faults = vec![Fault::Latency];
        run.injections[0].fault = Fault::Latency;
        assert!(!judge(&latency, &run).passed);
    }

    /// The overlaps `check` counts when "b" holds from 50 to 60 ms and "a", which took the
    /// lock at 0 with a lease to 100 ms, was killed (having begun its release as `releasing`
    /// says, in ms: the end of its use, its lease end, when `lost()` fired).
    fn overlaps_beside_killed(releasing: Option<(u64, u64, Option<u64>)>) -> usize {
        let mut run = record(vec![holding("b", 2, 50, 60, 150)]);
        run.crashed.push(Crashed {
            worker: "a".into(),
            token: Some(1),
            tokens: Vec::new(),
            acquired_at: 0,
            lease_end: 100 * MS,
            releasing: releasing.map(|(at, lease_end, lost_at)| Releasing {
                at: at * MS,
                lease_end: Some(lease_end * MS),
                lost_at: lost_at.map(|at| at * MS),
            }),
        });
        let verdict = judge(&scenario(Algorithm::Ours), &run);
        assert_eq!(verdict.crashed, 1);
        verdict.overlaps
    }

    #[test]
    fn a_holder_killed_while_releasing_held_until_it_began_to_release() {
        // Done at 40 ms and released; "b" took the lock at 50 ms and killed their process
        // before "a" wrote its record: no overlap.
        assert_eq!(overlaps_beside_killed(Some((40, 100, None))), 0);
        // Began to release after "b" took the lock, still within its lease: an overlap.
        assert_eq!(overlaps_beside_killed(Some((55, 100, None))), 1);
        // The same, but its lease had ended at 45 ms, or it was told at 45 ms that it lost
        // the lock: judged as its `Held` line would have been, no overlap.
        assert_eq!(overlaps_beside_killed(Some((55, 45, None))), 0);
        assert_eq!(overlaps_beside_killed(Some((55, 100, Some(45)))), 0);
    }

    #[test]
    fn a_killed_holder_holds_until_its_lease_ends() {
        assert_eq!(
            overlaps_beside_killed(None),
            1,
            "taken before the dead holder's lease ended"
        );
    }

    #[test]
    fn decreasing_tokens_lost_updates_missing_ttls_and_hangs_each_fail() {
        let regress = record(vec![
            holding("a", 5, 0, 10, 100),
            holding("b", 4, 11, 20, 111),
        ]);
        let verdict = judge(&scenario(Algorithm::Ours), &regress);
        assert_eq!(verdict.token_regressions, Some(1));
        assert!(!verdict.passed);

        let fine = || record(vec![holding("a", 1, 0, 10, 100)]);
        let mut lost = fine();
        lost.tally = Tally {
            value: 1,
            writes: 2,
            stale_writes: 0,
        };
        assert_eq!(judge(&scenario(Algorithm::Ours), &lost).lost_updates, 1);
        assert!(!judge(&scenario(Algorithm::Ours), &lost).passed);

        let mut no_ttl = fine();
        no_ttl.keys_without_ttl = 3;
        assert!(!judge(&scenario(Algorithm::Ours), &no_ttl).passed);

        let mut hung = fine();
        hung.hung = true;
        assert!(!judge(&scenario(Algorithm::Ours), &hung).passed);

        let mut stale = fine();
        stale.tally.stale_writes = 1;
        assert!(!judge(&scenario(Algorithm::Ours), &stale).passed);
        assert!(judge(&scenario(Algorithm::Ours), &fine()).passed);
    }

    #[test]
    fn the_loss_signal_lead_counts_from_the_lease_end_plus_drift() {
        let mut told = holding("a", 1, 0, 90, 90);
        told.lost_at = Some(90 * MS);
        let run = record(vec![told, holding("b", 2, 150, 160, 250)]);
        let verdict = judge(&scenario(Algorithm::Ours), &run);
        assert_eq!(verdict.loss_signals, 1);
        // Drift allowance of a 100 ms lease: 1 ms + 2 ms.
        assert!((verdict.loss_lead_ms.unwrap() - 3.0).abs() < 1e-6);
        assert!((verdict.loss_margin_ms.unwrap() - 60.0).abs() < 1e-6);
    }

    /// `cluster-kill`: `a` (token 5) took the lock at 0 with a lease to 100 ms; its master was
    /// killed at 10 ms and the replica, which never had the grant, promoted at 40 ms; `b`
    /// took the lock there at 50 ms with `b_token`. `a` worked on until it was told at 90 ms,
    /// its access at 55 ms refused by the resource.
    fn failover_window(b_token: u64) -> (Scenario, Record) {
        let mut kill = scenario(Algorithm::Ours);
        kill.faults = vec![Fault::ClusterKill];
        let mut a = holding("a", 5, 0, 95, 100);
        a.lost_at = Some(90 * MS);
        a.lingered = true;
        a.refused_at = Some(55 * MS);
        a.increments = 4;
        a.write = Access::Refused;
        a.release = Release::NotHeld;
        let mut run = record(vec![a, holding("b", b_token, 50, 60, 150)]);
        run.tally.writes = 5;
        run.tally.value = 5;
        run.injections.push(injection(Fault::ClusterKill, 10, 40));
        run.expected_injections = 1;
        (kill, run)
    }

    #[test]
    fn a_fenced_overlap_inside_the_failover_window_passes_with_a_note() {
        let (kill, run) = failover_window(7);
        let verdict = judge(&kill, &run);
        assert!(verdict.passed, "{verdict:#?}");
        assert_eq!((verdict.overlaps, verdict.excused_overlaps), (0, 1));
        assert!(verdict.overlaps_expected);
        assert_eq!(verdict.fenced_refusals, 1);
        let notes = verdict.notes.join("\n");
        assert!(
            notes.contains("inside the documented failover window"),
            "{notes}"
        );
        assert!(notes.contains("every token above 5"), "{notes}");
        assert!(
            notes.contains("5.0 ms after the second grant, was refused by its token"),
            "{notes}"
        );
        // No second holder in time: said so, and still a pass.
        let (kill, mut run) = failover_window(7);
        run.holdings[1].acquired_at = 120 * MS;
        run.holdings[1].end = 130 * MS;
        let verdict = judge(&kill, &run);
        assert!(verdict.passed, "{verdict:#?}");
        assert_eq!(verdict.excused_overlaps, 0);
        assert!(
            verdict
                .notes
                .join(" ")
                .contains("no second holder inside the failover window")
        );
    }

    #[test]
    fn an_overlap_inside_the_failover_window_fails_when_not_fenced() {
        // The second holder's token repeated the first's: no resource could tell them apart.
        let (kill, run) = failover_window(5);
        let verdict = judge(&kill, &run);
        assert!(!verdict.passed, "{verdict:#?}");
        assert!(
            verdict
                .examples
                .iter()
                .any(|e| e.starts_with("NOT fenced: a#0 (token 5)")),
            "{:?}",
            verdict.examples
        );
        assert!(verdict.notes.join(" ").contains("NOT every token above 5"));
        // A lower one, likewise.
        assert!(!judge(&kill, &failover_window(4).1).passed);
        // The resource took the stale holder's write after the newer holder's access.
        let (kill, mut run) = failover_window(7);
        run.holdings[0].refused_at = None;
        run.holdings[0].write = Access::Accepted;
        run.tally.stale_writes = 1;
        let verdict = judge(&kill, &run);
        assert!(!verdict.passed, "{verdict:#?}");
        assert_eq!(verdict.stale_writes, 1);
        // Two holders at once before the master was killed are no failover's doing.
        let (kill, mut run) = failover_window(7);
        run.injections[0] = injection(Fault::ClusterKill, 70, 80);
        let verdict = judge(&kill, &run);
        assert_eq!((verdict.overlaps, verdict.excused_overlaps), (1, 0));
        assert!(!verdict.passed);
        // Nor are they under a manual failover, which loses no grant.
        let (_, mut run) = failover_window(7);
        run.injections[0].fault = Fault::ClusterFailover;
        let mut manual = scenario(Algorithm::Ours);
        manual.faults = vec![Fault::ClusterFailover];
        assert!(!judge(&manual, &run).passed);
    }

    #[test]
    fn a_lock_lost_to_a_manual_failover_or_a_slot_migration_fails() {
        for fault in [Fault::ClusterFailover, Fault::SlotMigration] {
            let mut keep = scenario(Algorithm::Ours);
            keep.faults = vec![fault];
            let mut long = holding("a", 1, 0, 200, 300);
            long.lingered = true;
            let mut run = record(vec![long, holding("b", 2, 210, 220, 310)]);
            run.injections.push(injection(fault, 50, 60));
            run.expected_injections = 1;
            assert!(judge(&keep, &run).passed, "{fault:?}");
            // Its release found the lock gone: it was lost on the way.
            run.holdings[0].release = Release::NotHeld;
            let verdict = judge(&keep, &run);
            assert_eq!(verdict.lost_locks, 1);
            assert!(!verdict.passed, "{fault:?}");
            assert!(verdict.examples[0].starts_with("lost lock: a#0"));
            // A release that failed leaves the lock to its lease: lost too.
            run.holdings[0].release = Release::Failed;
            assert!(!judge(&keep, &run).passed, "{fault:?}");
            // Told of a loss (and so no longer writing): a false loss.
            run.holdings[0].release = Release::Released;
            run.holdings[0].lost_at = Some(100 * MS);
            run.holdings[0].end = 100 * MS;
            assert!(!judge(&keep, &run).passed, "{fault:?}");
        }
    }

    #[test]
    fn an_overlap_at_the_zombie_masters_thaw_is_named_and_fails() {
        let mut failover = scenario(Algorithm::Ours);
        failover.faults = vec![Fault::SentinelFailover];
        let mut strike = injection(Fault::SentinelFailover, 10, 400);
        strike.resumed_at = Some(300 * MS);
        // Granted 2 ms after the thaw (a request the frozen master had queued), beside the
        // new master's holder from 301 ms.
        let mut run = record(vec![
            holding("zombie", 3, 302, 305, 1302),
            holding("new", 4, 301, 310, 1301),
        ]);
        run.injections.push(strike);
        run.expected_injections = 1;
        let verdict = judge(&failover, &run);
        assert!(!verdict.passed);
        assert_eq!((verdict.overlaps, verdict.zombie_overlaps), (1, 1));
        assert!(verdict.examples[0].contains("at the zombie master's thaw"));
        // Well after the thaw, an overlap is an overlap.
        run.holdings[0].acquired_at = 900 * MS;
        run.holdings[0].end = 910 * MS;
        run.holdings[1].acquired_at = 905 * MS;
        run.holdings[1].end = 915 * MS;
        let verdict = judge(&failover, &run);
        assert_eq!((verdict.overlaps, verdict.zombie_overlaps), (1, 0));
        // Apart, they pass.
        run.holdings[1].acquired_at = 920 * MS;
        run.holdings[1].end = 925 * MS;
        assert!(judge(&failover, &run).passed);
    }

    /// A holding of one permit of a semaphore: shared, as the worker records it.
    fn permit(worker: &str, token: u64, start: u64, end: u64) -> Holding {
        let mut holding = holding(worker, token, start, end, start + 100);
        holding.shared = true;
        holding.write = Access::Skipped;
        holding
    }

    fn semaphore(permits: u32) -> Scenario {
        let mut scenario = scenario(Algorithm::Ours);
        scenario.primitive = CheckPrimitive::Semaphore;
        scenario.permits = permits;
        scenario.faults = vec![Fault::None];
        scenario
    }

    #[test]
    fn a_semaphore_with_at_most_n_holders_and_own_tokens_passes() {
        let mut run = record(vec![
            permit("p0t0", 1, 0, 10),
            permit("p0t1", 2, 5, 15),
            permit("p1t0", 3, 10, 20),
            permit("p0t0", 4, 16, 30),
        ]);
        run.tally = Tally {
            value: 0,
            writes: 0,
            stale_writes: 0,
        };
        run.leaked_permits = Some(0);
        let verdict = judge(&semaphore(2), &run);
        assert!(verdict.passed, "{verdict:#?}");
        assert_eq!(verdict.most_at_once, Some(2));
        assert_eq!(verdict.all_permits_used, Some(true));
        assert_eq!(verdict.over_limit, Some(0));
        // With 3 permits the same run never used them all: a note, not a failure.
        let verdict = judge(&semaphore(3), &run);
        assert!(verdict.passed, "{verdict:#?}");
        assert_eq!(verdict.all_permits_used, Some(false));
        assert!(
            verdict
                .notes
                .iter()
                .any(|n| n.contains("never used them all"))
        );
    }

    #[test]
    fn a_semaphore_over_n_a_repeated_token_a_regression_or_a_leak_each_fail() {
        let fine = || {
            let mut run = record(vec![permit("p0t0", 1, 0, 10), permit("p0t1", 2, 5, 15)]);
            run.tally = Tally {
                value: 0,
                writes: 0,
                stale_writes: 0,
            };
            run
        };
        assert!(judge(&semaphore(2), &fine()).passed);
        // Three holders at once of two permits: a broken semaphore let one in too many.
        let mut over = fine();
        over.holdings.push(permit("p1t0", 3, 8, 12));
        let verdict = judge(&semaphore(2), &over);
        assert!(!verdict.passed);
        assert_eq!((verdict.over_limit, verdict.overlaps), (Some(1), 1));
        assert!(verdict.examples[0].starts_with("over the limit: 3 holders of 2 permits"));
        // A holder killed holding counts to its lease end (100 ms): a third one at 50 ms is
        // one too many.
        let mut killed = fine();
        killed.crashed.push(Crashed {
            worker: "p1t0".into(),
            token: Some(3),
            tokens: Vec::new(),
            acquired_at: 0,
            lease_end: 100 * MS,
            releasing: None,
        });
        killed.holdings.push(permit("p1t1", 4, 8, 9));
        assert_eq!(judge(&semaphore(2), &killed).over_limit, Some(1));
        // Two grants with one token.
        let mut repeated = fine();
        repeated.holdings[1].token = Some(1);
        let verdict = judge(&semaphore(2), &repeated);
        assert!(!verdict.passed);
        assert_eq!(verdict.repeated_tokens, Some(1));
        // One task's later grant with a lower token.
        let mut regress = fine();
        regress.holdings.push(permit("p0t0", 0, 20, 30));
        assert!(!judge(&semaphore(2), &regress).passed);
        // A permit still held after every worker ended.
        let mut leak = fine();
        leak.leaked_permits = Some(1);
        let verdict = judge(&semaphore(2), &leak);
        assert!(!verdict.passed);
        assert!(
            verdict
                .examples
                .iter()
                .any(|e| e.starts_with("leaked permits: 1"))
        );
        // Over N across a server restart (the server forgot the permits): excused, as
        // overlaps are.
        let mut restart = semaphore(2);
        restart.faults = vec![Fault::ServerRestart];
        over.injections.push(injection(Fault::ServerRestart, 6, 7));
        over.expected_injections = 1;
        let verdict = judge(&restart, &over);
        assert_eq!((verdict.over_limit, verdict.excused_overlaps), (Some(0), 1));
    }

    /// A MultiLock holding of `worker` over `names` (with their tokens), `start`–`end` ms.
    fn multi(worker: &str, names: &[(&str, u64)], start: u64, end: u64) -> Holding {
        let mut holding = holding(worker, 0, start, end, end + 100);
        holding.shared = true;
        holding.tokens = names.iter().map(|(n, t)| (format!("l{n}"), *t)).collect();
        holding.token = holding.tokens.iter().map(|(_, t)| *t).max();
        holding
    }

    fn multilock() -> Scenario {
        let mut scenario = scenario(Algorithm::Ours);
        scenario.primitive = CheckPrimitive::Multilock;
        scenario.names = 2;
        scenario.faults = vec![Fault::None];
        scenario
    }

    #[test]
    fn a_multilock_is_judged_per_name() {
        // Disjoint names at once pass; each name's tokens grow.
        let fine = record(vec![
            multi("a", &[(":m1", 5), (":m2", 7)], 0, 10),
            multi("b", &[(":m3", 2), ("", 9)], 5, 15),
            multi("c", &[(":m1", 6), ("", 10)], 20, 30),
        ]);
        let verdict = judge(&multilock(), &fine);
        assert!(verdict.passed, "{:?}", verdict.examples);
        assert_eq!(verdict.stuck, Some(0));

        // A name held by two at once fails, named; so does a name's token that falls.
        let overlap = record(vec![
            multi("a", &[(":m1", 5), (":m2", 7)], 0, 10),
            multi("b", &[(":m2", 8), (":m3", 1)], 5, 15),
        ]);
        let verdict = judge(&multilock(), &overlap);
        assert!(!verdict.passed);
        assert_eq!(verdict.overlaps, 1);
        assert!(
            verdict.examples[0].contains("on m2"),
            "{:?}",
            verdict.examples
        );
        let falling = record(vec![
            multi("a", &[(":m1", 5)], 0, 10),
            multi("b", &[(":m1", 4)], 20, 30),
        ]);
        assert_eq!(judge(&multilock(), &falling).token_regressions, Some(1));

        // A stuck acquisition fails.
        let mut stuck = fine.clone();
        stuck.stuck.push("p0t0 waited 2000 ms for m1 m2".into());
        let verdict = judge(&multilock(), &stuck);
        assert!(!verdict.passed);
        assert_eq!(verdict.stuck, Some(1));
        assert!(verdict.examples.iter().any(|e| e.starts_with("stuck: ")));
    }
}
