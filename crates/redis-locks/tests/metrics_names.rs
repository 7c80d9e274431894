//! `metric_lock_names(limit)`: the per-lock metrics carry `lock="<name>"` for the first
//! `limit` names and `lock="other"` for the rest (a bound on the recorder's series); the
//! process-wide metrics (requests, wake-ups) never carry one. Its own test process: the
//! recorder and the limit are global.

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis_locks::Client;
use test_support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_names_are_labelled_and_the_rest_count_as_other() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the one recorder of this test process");
    redis_locks::metric_lock_names(2);

    let server = RedisServer::start().unwrap();
    let client = Client::connect(&server.url()).await.unwrap();
    for name in ["orders:1", "orders:2", "orders:3", "orders:4", "orders:1"] {
        let mutex = client.mutex(name).unwrap();
        mutex.lock().await.unwrap().release().await.unwrap();
    }
    let mut acquired = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let lock = key
            .labels()
            .find(|label| label.key() == "lock")
            .map(|label| label.value().to_string());
        match key.name() {
            "redis_locks_acquisitions_total" => {
                if let DebugValue::Counter(n) = value {
                    *acquired.entry(lock.expect("a lock label")).or_insert(0) += n;
                }
            }
            "redis_locks_requests_total" | "redis_locks_wakeups_total" => {
                assert_eq!(lock, None, "a process-wide metric with a lock label")
            }
            _ => {}
        }
    }
    let expected: std::collections::BTreeMap<String, u64> = [
        ("orders:1".to_string(), 2),
        ("orders:2".to_string(), 1),
        ("other".to_string(), 2),
    ]
    .into_iter()
    .collect();
    assert_eq!(acquired, expected);
}
