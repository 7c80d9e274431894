//! The metrics (`redis_locks_…`, through the `metrics` facade) seen by `metrics-util`'s
//! debugging recorder while locks work on a real server: acquisition, contention (a timeout,
//! a wake-up), renewals, a loss, the labels of each primitive, and no lock name, owner token
//! or URL in any key or label. One test: the recorder is the process's one global recorder.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis_locks::{Client, Error, LockOptions, LostReason};
use test_support::RedisServer;

/// Totals of every counter, and sample counts of every histogram, keyed by name and sorted
/// labels, summed over the snapshots taken so far (a snapshot drains what it reads).
#[derive(Default)]
struct Seen {
    counters: HashMap<String, u64>,
    samples: HashMap<String, usize>,
    keys: Vec<String>,
}

impl Seen {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            labels.sort();
            let id = format!("{}{{{}}}", key.name(), labels.join(","));
            self.keys.push(id.clone());
            match value {
                DebugValue::Counter(n) => *self.counters.entry(id).or_default() += n,
                DebugValue::Histogram(values) => {
                    *self.samples.entry(id).or_default() += values.len()
                }
                DebugValue::Gauge(_) => {}
            }
        }
    }

    fn counter(&self, id: &str) -> u64 {
        self.counters.get(id).copied().unwrap_or(0)
    }

    fn samples(&self, id: &str) -> usize {
        self.samples.get(id).copied().unwrap_or(0)
    }
}

/// Takes snapshots into `seen` until `check` holds, for 10 s at most.
async fn until(
    seen: &mut Seen,
    snapshotter: &Snapshotter,
    what: &str,
    check: impl Fn(&Seen) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        seen.take(snapshotter);
        if check(seen) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never seen: {what}: {:?}",
            seen.counters
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_moves_with_the_work_it_counts() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the one recorder of this test process");
    redis_locks::describe_metrics();
    let mut seen = Seen::default();

    let server = RedisServer::start().unwrap();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();

    // An acquisition and its release.
    let mutex = client.mutex("secret-name:orders").unwrap();
    mutex.lock().await.unwrap().release().await.unwrap();
    seen.take(&snapshotter);
    let acquired = "redis_locks_acquisitions_total{outcome=acquired,primitive=mutex}";
    assert_eq!(seen.counter(acquired), 1);
    assert_eq!(
        seen.samples("redis_locks_wait_seconds{outcome=acquired,primitive=mutex}"),
        1
    );
    assert!(seen.counter("redis_locks_attempts_total{primitive=mutex}") >= 1);
    assert_eq!(
        seen.counter("redis_locks_releases_total{outcome=released,primitive=mutex}"),
        1
    );
    assert_eq!(seen.samples("redis_locks_hold_seconds{primitive=mutex}"), 1);
    assert!(seen.counter("redis_locks_requests_total{}") >= 2);

    // Contention: a wait that times out, then a waiter woken by the release.
    let held = mutex.lock().await.unwrap();
    let err = mutex
        .lock_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    let other = Client::connect(&url).await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = other
            .mutex("secret-name:orders")
            .unwrap()
            .lock()
            .await
            .unwrap();
        guard.release().await.unwrap();
    });
    until(
        &mut seen,
        &snapshotter,
        "the waiter's first attempt",
        |seen| seen.counter("redis_locks_attempts_total{primitive=mutex}") >= 4,
    )
    .await;
    held.release().await.unwrap();
    waiter.await.unwrap();
    until(
        &mut seen,
        &snapshotter,
        "a timeout, a wake-up, the waiter's grant",
        |seen| {
            seen.counter("redis_locks_acquisitions_total{outcome=timeout,primitive=mutex}") == 1
                && seen.counter("redis_locks_wakeups_total{}") >= 1
                && seen.counter(acquired) == 3
        },
    )
    .await;

    // Renewals, then a loss: the key deleted by hand.
    let short = client
        .mutex_with(
            "secret-name:renewed",
            LockOptions::default()
                .lease(Duration::from_millis(300))
                .watchdog(true),
        )
        .unwrap();
    let guard = short.lock().await.unwrap();
    until(&mut seen, &snapshotter, "two renewals", |seen| {
        seen.counter("redis_locks_renewals_total{primitive=mutex}") >= 2
    })
    .await;
    let mut raw = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("secret-name:renewed")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(guard.lost().await, LostReason::Expired);
    until(&mut seen, &snapshotter, "the loss", |seen| {
        seen.counter("redis_locks_losses_total{primitive=mutex,reason=expired}") == 1
            && seen.counter("redis_locks_renewal_failures_total{primitive=mutex}") >= 1
    })
    .await;
    drop(guard);

    // A break: the holder's next renewal counts a loss for the reason `broken`.
    let guard = short.lock().await.unwrap();
    client.break_lock("secret-name:renewed").await.unwrap();
    assert_eq!(guard.lost().await, LostReason::Broken);
    until(&mut seen, &snapshotter, "the broken loss", |seen| {
        seen.counter("redis_locks_losses_total{primitive=mutex,reason=broken}") == 1
    })
    .await;
    drop(guard);

    // Each primitive under its own label.
    let rwlock = client.rwlock("secret-name:cart").unwrap();
    rwlock.read().await.unwrap().release().await.unwrap();
    let reentrant = client.reentrant_mutex("secret-name:ledger").unwrap();
    reentrant.lock().await.unwrap().release().await.unwrap();
    let semaphore = client.semaphore("secret-name:slots", 2).unwrap();
    semaphore.acquire().await.unwrap().release().await.unwrap();
    let fair = client.fair_mutex("secret-name:fair").unwrap();
    fair.lock().await.unwrap().release().await.unwrap();
    until(&mut seen, &snapshotter, "every primitive's grant", |seen| {
        ["rwlock", "reentrant_mutex", "semaphore", "fair_mutex"]
            .iter()
            .all(|kind| {
                seen.counter(&format!(
                    "redis_locks_acquisitions_total{{outcome=acquired,primitive={kind}}}"
                )) == 1
            })
    })
    .await;

    // No lock name, owner token or URL in any metric's name or labels.
    for key in &seen.keys {
        assert!(!key.contains("secret-name"), "a lock name in {key}");
        assert!(!key.contains("127.0.0.1"), "a URL in {key}");
        assert!(
            redis_locks::METRIC_NAMES
                .iter()
                .any(|name| key.starts_with(&format!("{name}{{"))),
            "{key} is not a listed metric"
        );
    }
}
