//! The blocking API (`redis_locks::blocking`), with no async runtime in the test: each
//! primitive, contention over threads and processes (checked for overlaps on the recorded
//! holdings), release on drop, `lost()` after the server forgot the key, and the typed error
//! inside a runtime.

mod common;

use std::time::{Duration, Instant};

use common::{children, env, exists, holds_of, raw, report_holds, say_go, server};
use redis_locks::blocking::{Client, Redlock};
use redis_locks::{ClientOptions, Error, LockOptions, LostReason, Released};
use test_support::RedisServer;
use test_support::history::{History, Interval, now_nanos};

/// A blocking client of `server` with short timeouts, so a fault shows quickly.
fn client(server: &RedisServer) -> Client {
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .reconnect_attempts(1);
    Client::connect_with(&server.url(), options).expect("connect to the private server")
}

/// Polls `condition` every 5 ms until it holds; false if `limit` passes first.
fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Records one holding as `worker`'s: from after the acquisition returned to before the
/// release is sent, with a little work inside so that an overlap would have room to show.
fn record(history: &History, worker: &str, token: u64, shared: bool) {
    let start = now_nanos();
    std::thread::yield_now();
    common::record_since(history, worker, token, start, shared);
}

#[test]
fn a_mutex_is_held_by_one_at_a_time_and_free_after_release() {
    let server = server();
    let client = client(&server);
    let mutex = client.mutex("blocking:mutex").unwrap();
    let guard = mutex.lock().unwrap();
    assert_eq!(guard.name(), "blocking:mutex");
    let busy = client
        .mutex("blocking:mutex")
        .unwrap()
        .try_lock()
        .unwrap_err();
    assert!(busy.is_held(), "{busy:?}");
    assert!(busy.retry_after().is_some());
    assert!(mutex.is_locked().unwrap());
    assert!(mutex.state().unwrap().holder.is_some());
    let first = guard.fencing_token();
    guard.release().unwrap();
    assert!(!mutex.is_locked().unwrap());
    let again = mutex.lock_timeout(Duration::from_secs(5)).unwrap();
    assert!(again.fencing_token() > first);
    again.release().unwrap();
}

#[test]
fn a_fair_mutex_serves_a_waiting_thread_after_the_release() {
    let server = server();
    let client = client(&server);
    let fair = client.fair_mutex("blocking:fair").unwrap();
    let guard = fair.lock().unwrap();
    let waiter = {
        let fair = fair.clone();
        std::thread::spawn(move || {
            let guard = fair.lock_timeout(Duration::from_secs(10))?;
            let token = guard.fencing_token();
            guard.release()?;
            Ok::<_, Error>(token)
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || fair.waiting().unwrap() == 1),
        "the thread queues"
    );
    let first = guard.fencing_token();
    guard.release().unwrap();
    assert!(waiter.join().unwrap().unwrap() > first);
}

#[test]
fn a_reentrant_mutex_is_taken_again_by_its_owner_only() {
    let server = server();
    let client = client(&server);
    let lock = client.reentrant_mutex("blocking:reentrant").unwrap();
    let outer = lock.lock().unwrap();
    let inner = lock.try_lock().unwrap();
    let other = client.reentrant_mutex("blocking:reentrant").unwrap();
    assert!(other.try_lock().unwrap_err().is_held());
    assert_eq!(inner.release().unwrap(), Released::StillHeld { holds: 1 });
    assert_eq!(outer.release().unwrap(), Released::Freed);
    other.try_lock().unwrap().release().unwrap();
    assert_eq!(lock.state().unwrap().holds.len(), 0);
}

#[test]
fn an_rwlock_admits_readers_together_and_a_writer_alone() {
    let server = server();
    let client = client(&server);
    let (a, b) = (
        client.rwlock("blocking:rw").unwrap(),
        client.rwlock("blocking:rw").unwrap(),
    );
    let read_a = a.read().unwrap();
    let read_b = b.try_read().unwrap();
    let c = client.rwlock("blocking:rw").unwrap();
    assert!(c.try_write().unwrap_err().is_held());
    read_a.release().unwrap();
    read_b.release().unwrap();
    let write = a.write_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        b.read_timeout(Duration::from_millis(50))
            .unwrap_err()
            .is_held()
    );
    let read = write.downgrade().unwrap();
    let read_b = b.try_read().unwrap();
    assert!(read.release().unwrap().is_freed());
    read_b.release().unwrap();
    b.try_write().unwrap().release().unwrap();
}

#[test]
fn a_redlock_is_granted_by_a_majority_of_its_nodes() {
    let servers = test_support::start_many(3).unwrap();
    let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    let nodes = Redlock::connect_nodes(&urls).unwrap();
    let lock = Redlock::new(&nodes.clients, "blocking:redlock").unwrap();
    assert_eq!(lock.quorum(), 2);
    let guard = lock.lock().unwrap();
    let other = Redlock::new(&nodes.clients, "blocking:redlock").unwrap();
    assert!(other.try_lock().unwrap_err().is_held());
    for server in &servers {
        assert!(exists(server, "blocking:redlock"));
    }
    let first = guard.fencing_token();
    guard.release().unwrap();
    lock.settle().unwrap();
    for server in &servers {
        assert!(!exists(server, "blocking:redlock"));
    }
    let again = other.lock_timeout(Duration::from_secs(5)).unwrap();
    assert!(again.fencing_token() > first);
    again.release().unwrap();
    other.settle().unwrap();
}

#[test]
fn a_semaphore_admits_its_permits_and_no_more() {
    let server = server();
    let client = client(&server);
    let mut api = client.semaphore("blocking:sem", 3).unwrap();
    let one = api.acquire().unwrap();
    let two = api.try_acquire_many(2).unwrap();
    assert_eq!((one.permits(), two.permits()), (1, 2));
    assert!(api.try_acquire().unwrap_err().is_held());
    assert_eq!(api.available().unwrap(), 0);
    two.release().unwrap();
    assert_eq!(api.available().unwrap(), 2);
    assert_eq!(api.set_permits(4).unwrap(), Some(3));
    let three = api.acquire_many_timeout(3, Duration::from_secs(5)).unwrap();
    assert_eq!(api.state().unwrap().in_use(), 4);
    one.release().unwrap();
    three.release().unwrap();
}

#[test]
fn a_multilock_takes_every_name_or_none() {
    let server = server();
    let client = client(&server);
    let both = client
        .multi_lock(["blocking:a", "blocking:b"])
        .unwrap()
        .lock()
        .unwrap();
    assert!(both.as_async().fencing_token("blocking:a").is_some());
    let b = client.mutex("blocking:b").unwrap();
    assert!(b.try_lock().unwrap_err().is_held());
    let other = client.multi_lock(["blocking:b", "blocking:c"]).unwrap();
    assert!(other.try_lock().unwrap_err().is_held());
    assert!(!exists(&server, "blocking:c"), "none taken: c was left");
    both.release().unwrap();
    other.try_lock().unwrap().release().unwrap();
}

#[test]
fn a_fenced_key_refuses_an_older_token() {
    let server = server();
    let client = client(&server);
    let mutex = client.mutex("blocking:fenced-lock").unwrap();
    let old = mutex.lock().unwrap().fencing_token();
    let new = mutex.lock().unwrap().fencing_token();
    let report = client.fenced_key("blocking:report").unwrap();
    report.set(new, "new").unwrap();
    assert!(matches!(
        report.set(old, "old"),
        Err(Error::StaleToken { .. })
    ));
    assert_eq!(report.get().unwrap().as_deref(), Some("new"));
    assert_eq!(report.highest_token().unwrap(), Some(new));
}

const THREADS: usize = 8;
const PER_THREAD: usize = 50;

fn contention_options() -> LockOptions {
    LockOptions::default()
        .lease(Duration::from_secs(10))
        .retry_delay(Duration::from_millis(2))
}

/// Runs `body(i)` on `THREADS` threads at once, and waits for all of them.
fn on_threads(body: impl Fn(usize) + Sync) {
    std::thread::scope(|scope| {
        for i in 0..THREADS {
            let body = &body;
            scope.spawn(move || body(i));
        }
    });
}

/// `THREADS` threads (over `clients`), `PER_THREAD` acquisitions of the `Mutex` `name` each,
/// recorded in `history` as `<prefix>-<thread>`.
fn contend_mutex(clients: &[Client], name: &str, prefix: &str, history: &History) {
    on_threads(|i| {
        let mutex = clients[i % clients.len()]
            .mutex_with(name, contention_options())
            .unwrap();
        let worker = format!("{prefix}-{i}");
        for _ in 0..PER_THREAD {
            let guard = mutex.lock().unwrap();
            record(history, &worker, guard.fencing_token().get(), false);
            guard.release().unwrap();
        }
    });
}

#[test]
fn threads_contending_for_a_mutex_never_overlap() {
    let server = server();
    let clients = [client(&server), client(&server)];
    let history = History::default();
    contend_mutex(&clients, "blocking:contended", "thread", &history);
    let report = history.check();
    eprintln!("{report}");
    assert_eq!(report.acquisitions, THREADS * PER_THREAD);
    common::assert_exclusive(&report);
}

#[test]
fn threads_contending_for_an_rwlock_read_together_and_write_alone() {
    let server = server();
    let clients = [client(&server), client(&server)];
    let history = History::default();
    on_threads(|i| {
        let rw = clients[i % 2].rwlock("blocking:rw-contended").unwrap();
        let worker = format!("thread-{i}");
        for round in 0..PER_THREAD {
            if (i + round) % 3 == 0 {
                let guard = rw.write().unwrap();
                record(&history, &worker, guard.fencing_token().get(), false);
                guard.release().unwrap();
            } else {
                let guard = rw.read().unwrap();
                record(&history, &worker, guard.fencing_token().get(), true);
                guard.release().unwrap();
            }
        }
    });
    let report = history.check();
    eprintln!("{report}");
    assert_eq!(
        history.intervals().len() + history.shared_intervals().len(),
        THREADS * PER_THREAD
    );
    common::assert_exclusive(&report);
}

#[test]
fn threads_contending_for_a_semaphore_never_exceed_its_permits() {
    let server = server();
    let client = client(&server);
    let holdings = std::sync::Mutex::new(Vec::new());
    on_threads(|i| {
        let api = client.semaphore("blocking:sem-contended", 3).unwrap();
        let permits = 1 + (i as u32 % 2);
        for _ in 0..PER_THREAD {
            let guard = api.acquire_many(permits).unwrap();
            let start = now_nanos();
            std::thread::yield_now();
            let interval = Interval {
                worker: format!("thread-{i}"),
                token: guard.fencing_token().get(),
                start,
                end: now_nanos(),
            };
            holdings.lock().unwrap().push((interval, permits));
            guard.release().unwrap();
        }
    });
    let holdings = holdings.into_inner().unwrap();
    assert_eq!(holdings.len(), THREADS * PER_THREAD);
    let report = test_support::history::check_permits(holdings, 3);
    eprintln!("{report}");
    assert!(report.is_ok(), "{report}");
}

const PROCESSES: usize = 2;

#[test]
#[ignore = "runs only as a child process of threads_and_processes_contending_never_overlap"]
fn blocking_contender_child() {
    let client = Client::connect(&env("CHILD_REDIS_URL")).unwrap();
    println!("ready");
    let mut con = redis::Client::open(env("CHILD_REDIS_URL"))
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || {
            redis::cmd("EXISTS")
                .arg("go")
                .query::<i64>(&mut con)
                .unwrap()
                == 1
        }),
        "the parent said go"
    );
    let history = History::default();
    let prefix = format!("process-{}", std::process::id());
    contend_mutex(&[client], "blocking:processes", &prefix, &history);
    report_holds(&history);
}

#[test]
fn threads_and_processes_contending_never_overlap() {
    let server = server();
    let mut children = children(&server, "blocking_contender_child", PROCESSES, &[]);
    let clients = [client(&server)];
    let history = History::default();
    say_go(&server);
    contend_mutex(&clients, "blocking:processes", "thread", &history);
    for child in &mut children {
        history.extend(holds_of(child, THREADS * PER_THREAD));
    }
    let report = history.check();
    eprintln!("{report}");
    let switches = common::process_switches(&history);
    assert!(switches >= 10, "processes and threads competed: {switches}");
    assert_eq!(report.acquisitions, (1 + PROCESSES) * THREADS * PER_THREAD);
    common::assert_exclusive(&report);
}

#[test]
fn a_dropped_guard_has_released_when_drop_returns() {
    let server = server();
    let client = client(&server);
    let mutex = client.mutex("blocking:dropped").unwrap();
    drop(mutex.lock().unwrap());
    assert!(!exists(&server, "blocking:dropped"));
    mutex.try_lock().unwrap().release().unwrap();

    let rw = client.rwlock("blocking:dropped-rw").unwrap();
    drop(rw.write().unwrap());
    assert!(!exists(&server, "blocking:dropped-rw"));

    let api = client.semaphore("blocking:dropped-sem", 2).unwrap();
    let permits = api.acquire_many(2).unwrap();
    drop(permits);
    assert_eq!(api.available().unwrap(), 2);

    let both = client
        .multi_lock(["blocking:dropped-a", "blocking:dropped-b"])
        .unwrap();
    drop(both.lock().unwrap());
    assert!(!exists(&server, "blocking:dropped-a"));
    assert!(!exists(&server, "blocking:dropped-b"));

    let reentrant = client.reentrant_mutex("blocking:dropped-re").unwrap();
    drop(reentrant.lock().unwrap());
    assert!(!exists(&server, "blocking:dropped-re"));

    // The last handle of the client goes with the guard: the release is still made.
    let last = Client::connect(&server.url())
        .unwrap()
        .mutex("blocking:dropped-last")
        .unwrap()
        .lock()
        .unwrap();
    drop(last);
    assert!(!exists(&server, "blocking:dropped-last"));
}

#[test]
fn the_watchdog_keeps_a_blocking_guard_past_its_lease() {
    let server = server();
    let client = client(&server);
    let options = LockOptions::default()
        .lease(Duration::from_millis(300))
        .watchdog(true);
    let mutex = client.mutex_with("blocking:renewed", options).unwrap();
    let guard = mutex.lock().unwrap();
    assert!(guard.is_renewed());
    let lost = guard.lost();
    // Hold for three leases with no call on this thread: the runtime's worker renews.
    std::thread::sleep(Duration::from_millis(900));
    assert!(lost.try_recv().is_err(), "still held");
    assert_eq!(guard.lost_reason(), None);
    assert!(exists(&server, "blocking:renewed"));
    assert!(guard.lease_remaining() > Duration::ZERO);
    assert!(
        client
            .mutex("blocking:renewed")
            .unwrap()
            .try_lock()
            .unwrap_err()
            .is_held()
    );
    guard.release().unwrap();
}

#[test]
fn lost_tells_the_holder_once_the_server_forgot_the_key() {
    let server = server();
    let client = client(&server);
    let lease = Duration::from_millis(600);
    let options = LockOptions::default().lease(lease).watchdog(true);
    let mutex = client.mutex_with("blocking:forgotten", options).unwrap();
    let guard = mutex.lock().unwrap();
    let lost = guard.lost();
    assert!(lost.try_recv().is_err(), "held");
    assert_eq!(guard.lost_reason(), None);
    let deleted: i64 = redis::cmd("DEL")
        .arg("blocking:forgotten")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(deleted, 1);
    let deleted_at = Instant::now();
    // The watchdog renews every third of the lease: its next renewal finds the key gone.
    let reason = lost
        .recv_timeout(Duration::from_secs(10))
        .expect("lost() fires");
    assert_eq!(reason, LostReason::Expired);
    assert!(
        deleted_at.elapsed() < lease,
        "told by a renewal, before the lease could end: {:?}",
        deleted_at.elapsed()
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::Expired));
    assert!(guard.release().unwrap_err().is_not_held());

    // Without the watchdog, by the lease's end at the latest; for an RwLock's hold, and a
    // channel asked for after the key was deleted.
    let options = redis_locks::LockOptions::default().lease(lease);
    let rw = client
        .rwlock_with("blocking:forgotten-rw", options)
        .unwrap();
    let read = rw.read().unwrap();
    redis::cmd("DEL")
        .arg("blocking:forgotten-rw")
        .exec(&mut raw(&server))
        .unwrap();
    let reason = read.lost().recv_timeout(Duration::from_secs(10)).unwrap();
    assert_ne!(reason, LostReason::Released);
    assert!(read.release().unwrap_err().is_not_held());
}

#[test]
fn a_released_guard_tells_its_lost_channel_released() {
    let server = server();
    let client = client(&server);
    let guard = client.mutex("blocking:released").unwrap().lock().unwrap();
    let lost = guard.lost();
    guard.release().unwrap();
    assert_eq!(
        lost.recv_timeout(Duration::from_secs(10)).unwrap(),
        LostReason::Released
    );
}

fn is_inside_runtime<T: std::fmt::Debug>(result: redis_locks::Result<T>) -> bool {
    matches!(result, Err(Error::InsideRuntime { .. }))
}

#[test]
fn every_call_inside_a_runtime_is_a_typed_error() {
    let server = server();
    let url = server.url();
    let client = client(&server);
    let mutex = client.mutex("blocking:inside").unwrap();
    let rw = client.rwlock("blocking:inside-rw").unwrap();
    let mut api = client.semaphore("blocking:inside-sem", 2).unwrap();
    let guard = mutex.lock().unwrap();
    let write = rw.write().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dropped = client
        .mutex("blocking:inside-dropped")
        .unwrap()
        .lock()
        .unwrap();
    let (guard, write) = runtime.block_on(async move {
        let refused = Client::connect(&url).unwrap_err();
        assert!(matches!(
            refused,
            Error::InsideRuntime {
                call: "Client::connect"
            }
        ));
        assert!(refused.to_string().contains("inside a tokio runtime"));
        assert!(is_inside_runtime(Client::connect_lazy(
            &url,
            ClientOptions::default()
        )));
        assert!(is_inside_runtime(Redlock::connect_nodes(&[url.as_str()])));
        assert!(is_inside_runtime(mutex.lock()));
        assert!(is_inside_runtime(mutex.try_lock()));
        assert!(is_inside_runtime(mutex.is_locked()));
        assert!(is_inside_runtime(mutex.state()));
        assert!(is_inside_runtime(rw.read()));
        assert!(is_inside_runtime(api.acquire()));
        assert!(is_inside_runtime(api.set_permits(3)));
        assert!(is_inside_runtime(guard.extend(Duration::from_secs(5))));
        // What needs no wait still works.
        assert_eq!(guard.lost_reason(), None);
        assert!(guard.lease_remaining() > Duration::ZERO);
        // A guard dropped in here releases in the background, without a panic.
        drop(dropped);
        (guard, write)
    });
    // Outside again: everything works, and the dropped guard's release was made.
    assert!(
        eventually(Duration::from_secs(10), || !exists(
            &server,
            "blocking:inside-dropped"
        )),
        "the guard dropped inside the runtime was released"
    );
    guard.release().unwrap();
    write.release().unwrap();

    // A release or a downgrade inside a runtime is refused; the guard drops and releases.
    let guard = client.mutex("blocking:inside").unwrap().lock().unwrap();
    let write = client
        .rwlock("blocking:inside-rw")
        .unwrap()
        .write()
        .unwrap();
    runtime.block_on(async move {
        assert!(is_inside_runtime(guard.release()));
        assert!(is_inside_runtime(write.downgrade()));
    });
    assert!(eventually(Duration::from_secs(10), || {
        !exists(&server, "blocking:inside") && !exists(&server, "blocking:inside-rw")
    }));

    // The last client dropped inside a runtime does not panic either.
    let last = Client::connect(&server.url()).unwrap();
    runtime.block_on(async move { drop(last) });
}
