//! `RwLock` against a real server: readers share, writers exclude (across tasks and
//! processes), writers are not starved, a killed reader's hold ends with its own lease,
//! downgrade and upgrade, and every row of seed 004's comparison table.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    assert_not_held, child_main, children, client, env, eventually, exists, holds_of, raw,
    report_holds, say_go, server, shared_holds_of, wait_for_go,
};
use redis_locks::{Client, Error, LeaseOptions, LockOptions, LostReason};
use test_support::ChildProcess;
use test_support::history::{History, now_nanos};
use tokio::time::Instant;

/// A lease of `ms` renewed by the watchdog, and a 20 s retry delay: a waiter that is not
/// woken would wait that long.
fn renewed(ms: u64) -> LockOptions {
    LockOptions::default().lease_options(
        LeaseOptions::default()
            .lease(Duration::from_millis(ms))
            .watchdog(true),
    )
}

/// Holds a read or write guard for a little work, then records the holding.
async fn hold_for_a_moment(history: &History, worker: &str, token: u64, shared: bool) {
    let start = now_nanos();
    // Long enough for readers to meet (a few ms), short enough to keep the test quick.
    tokio::time::sleep(Duration::from_millis(1)).await;
    common::record_since(history, worker, token, start, shared);
}

/// `readers` reader tasks and `writers` writer tasks, each `count` acquisitions of "rw".
async fn contend(
    client: Client,
    prefix: String,
    readers: usize,
    writers: usize,
    count: usize,
    history: Arc<History>,
) {
    let mut tasks = Vec::new();
    for i in 0..readers + writers {
        let (client, history) = (client.clone(), history.clone());
        let worker = format!("{prefix}-{i}");
        let reader = i < readers;
        tasks.push(tokio::spawn(async move {
            let lock = client.rwlock_with("rw", renewed(10_000)).unwrap();
            for _ in 0..count {
                if reader {
                    let guard = lock.read().await.unwrap();
                    hold_for_a_moment(&history, &worker, guard.fencing_token().get(), true).await;
                    guard.release().await.unwrap();
                } else {
                    let guard = lock.write().await.unwrap();
                    hold_for_a_moment(&history, &worker, guard.fencing_token().get(), false).await;
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

const READS: usize = 20;
const WRITES: usize = 10;

#[test]
#[ignore = "runs only as a child process of readers_share_and_writers_exclude_across_processes"]
fn rwlock_contender_child() {
    child_main(|client| async move {
        println!("ready");
        wait_for_go(&env("CHILD_REDIS_URL")).await;
        let history = Arc::new(History::default());
        let prefix = format!("process-{}", std::process::id());
        contend(client, prefix, 2, 1, READS, history.clone()).await;
        report_holds(&history);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_writers_exclude_across_processes() {
    let server = server();
    let mut children =
        tokio::task::block_in_place(|| children(&server, "rwlock_contender_child", 2, &[]));
    let client = client(&server).await;
    let history = Arc::new(History::default());
    say_go(&server);
    // Here: 4 readers and 1 writer; in each child 2 readers and 1 writer (the child's
    // writer does READS writes): 8 readers and 3 writers in all.
    contend(client, "task".into(), 4, 1, WRITES, history.clone()).await;
    for child in &mut children {
        // Each child: one writer and two readers, READS acquisitions each.
        history.extend(holds_of(child, READS));
        for interval in shared_holds_of(child, 2 * READS) {
            history.record_shared(interval);
        }
    }
    let report = history.check();
    assert_eq!(report.acquisitions, 5 * WRITES + 2 * 3 * READS);
    assert!(report.is_ok(), "{report}: {:?}", report.overlaps.first());
    assert!(
        report.shared_overlaps > 0,
        "readers never held at once: {report}"
    );
    assert!(!exists(&server, "rw"), "the lock is free at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_every_reader_that_came_after_it() {
    let server = server();
    let client = client(&server).await;
    // A reader that holds on until told, so that the writer's wait lasts as long as the
    // test needs; 8 readers re-acquire back to back beside it.
    let anchor = client.rwlock("rw").unwrap().read().await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Each read: (asked at, granted at), in ns.
    let reads = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let mut readers = Vec::new();
    for _ in 0..8 {
        let lock = client.rwlock_with("rw", renewed(10_000)).unwrap();
        let (stop, reads) = (stop.clone(), reads.clone());
        readers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let asked = now_nanos();
                let guard = lock.read().await.unwrap();
                reads.lock().unwrap().push((asked, now_nanos()));
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    let writer = client.rwlock_with("rw", renewed(10_000)).unwrap();
    let write = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        let granted = now_nanos();
        tokio::time::sleep(Duration::from_millis(2)).await;
        guard.release().await.unwrap();
        granted
    });
    let observer = client.rwlock("rw").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_writers == 1
        })
        .await,
        "the writer queued"
    );
    // From now on every reader asks after the writer queued. Wait until all 8 wait in line
    // (a reader that asked just before may be in line too, behind or before the writer).
    let queued = now_nanos();
    assert!(
        eventually(Duration::from_secs(10), || async {
            observer.state().await.unwrap().waiting_readers == 8
        })
        .await,
        "every reader waits"
    );
    anchor.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(10), write)
        .await
        .expect("the writer was served within 10 s")
        .unwrap();
    // Let the readers go round a few more times after the write.
    let after = reads.lock().unwrap().len();
    assert!(
        eventually(Duration::from_secs(5), || async {
            reads.lock().unwrap().len() > after + 8
        })
        .await
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
    let reads = reads.lock().unwrap().clone();
    let late: Vec<_> = reads.iter().filter(|(asked, _)| *asked > queued).collect();
    assert!(
        !late.is_empty(),
        "readers asked after the writer queued, and were served"
    );
    let jumped: Vec<_> = late.iter().filter(|(_, got)| *got < granted).collect();
    assert!(
        jumped.is_empty(),
        "{} of {} readers that asked after the writer queued were let in before it",
        jumped.len(),
        late.len()
    );
}

#[test]
#[ignore = "runs only as a child process of a_killed_readers_hold_ends_with_its_own_lease"]
fn short_reader_child() {
    child_main(|client| async move {
        let options = LockOptions::default().lease(Duration::from_millis(1500));
        let lock = client.rwlock_with("rw", options).unwrap();
        let guard = lock.read().await.unwrap();
        println!("reading {}", guard.owner_token().as_str());
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(guard);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_hold_ends_with_its_own_lease() {
    let server = server();
    let client = client(&server).await;
    // A live reader, renewed by its watchdog all along.
    let live = client.rwlock_with("rw", renewed(600)).unwrap();
    let live_guard = live.read().await.unwrap();
    // The child's hold is granted after this, so its lease ends after dead_deadline.
    let dead_deadline = Instant::now() + Duration::from_millis(1500);
    let mut child =
        ChildProcess::spawn_test("short_reader_child", &[("CHILD_REDIS_URL", &server.url())])
            .unwrap();
    let line =
        tokio::task::block_in_place(|| child.wait_for_line("reading ", Duration::from_secs(30)));
    assert!(line.is_some(), "the child reads");
    child.kill_hard();
    let writer = client.rwlock("rw").unwrap();
    let write = tokio::spawn(async move {
        let guard = writer.write().await.unwrap();
        (Instant::now(), guard)
    });
    // After the dead reader's lease, only the live reader's hold is left, untouched.
    let observer = client.rwlock("rw").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().holds.len() == 1
        })
        .await,
        "the dead reader's hold ended"
    );
    assert!(Instant::now() >= dead_deadline - Duration::from_millis(100));
    let state = observer.state().await.unwrap();
    assert_eq!(state.holds[0].owner, live.owner().as_str());
    assert_eq!(
        state.waiting_writers, 1,
        "the writer still waits for the live reader"
    );
    assert!(live_guard.lost_reason().is_none());
    assert!(!write.is_finished());
    // The live reader leaves: the writer is woken and enters.
    live_guard.release().await.unwrap();
    let (entered, guard) = tokio::time::timeout(Duration::from_secs(2), write)
        .await
        .expect("the writer entered after the last live reader left")
        .unwrap();
    assert!(entered >= dead_deadline - Duration::from_millis(100));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_dead_readers_lease_alone_holds_a_writer_up() {
    let server = server();
    let client = client(&server).await;
    // A reader that will never release (as if killed): its lease ends it, no earlier than
    // 800 ms after `started`.
    let started = Instant::now();
    let stuck = client
        .rwlock_with(
            "rw",
            LockOptions::default().lease(Duration::from_millis(800)),
        )
        .unwrap()
        .read()
        .await
        .unwrap();
    let other = client.rwlock("rw").unwrap().read().await.unwrap();
    other.release().await.unwrap();
    // A writer that waits without polling: only the stuck reader's lease end lets it in.
    let writer = client
        .rwlock_with("rw", renewed(5_000).wait_options(slow_polling()))
        .unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), writer.write())
        .await
        .expect("the writer entered at the stuck reader's lease end")
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(750));
    // Its hold ran out and a writer holds the lock now: taken.
    assert_not_held(stuck.release().await, LostReason::Taken);
    guard.release().await.unwrap();
}

/// How soon a woken waiter enters: well under the 2 s after which a live waiter looks again
/// on its own, so a waiter that enters within it was woken.
const WOKEN_WITHIN: Duration = Duration::from_secs(1);

/// A waiter that polls rarely (a 20 s retry delay, a 30 s place lease renewed every third
/// of it): beside a wake-up, only its holder's lease end or the 2 s look of a live waiter
/// let it in.
fn slow_polling() -> redis_locks::WaitOptions {
    redis_locks::WaitOptions::default()
        .retry_delay(Duration::from_secs(20))
        .place_lease(Duration::from_secs(30))
}

#[tokio::test]
async fn downgrade_keeps_writers_out_and_upgrade_is_refused() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("rw").unwrap();
    let write = lock.write().await.unwrap();
    let token = write.fencing_token();
    // Another owner's writer waits in line.
    let other = client.rwlock_with("rw", renewed(5_000)).unwrap();
    let waiting = tokio::spawn(async move { other.write().await.unwrap() });
    let observer = client.rwlock("rw").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_writers == 1
        })
        .await
    );
    let read = write.downgrade().await.unwrap();
    assert_eq!(read.fencing_token(), token, "the hold keeps its token");
    let state = observer.state().await.unwrap();
    assert_eq!(state.holds.len(), 1);
    assert_eq!(state.holds[0].mode, redis_locks::HoldMode::Read);
    assert_eq!(state.waiting_writers, 1);
    assert!(!waiting.is_finished(), "no writer entered at the downgrade");
    // A newcomer reader queues behind the waiting writer...
    assert!(matches!(
        client.rwlock("rw").unwrap().try_read().await,
        Err(Error::Held { .. })
    ));
    // ...and the read holder's own owner asking to write is refused at once.
    match lock.write().await {
        Err(Error::Upgrade { owner, .. }) => assert_eq!(owner, lock.owner().as_str()),
        other => panic!("expected Upgrade, got {other:?}"),
    }
    assert_eq!(observer.state().await.unwrap().holds.len(), 1);
    read.release().await.unwrap();
    let writer = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("the writer entered once the downgraded reader left")
        .unwrap();
    assert!(writer.fencing_token() > token);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn a_write_after_a_dropped_read_waits_for_its_release_instead_of_refusing() {
    // One thread: the dropped read's background release cannot run before `write()` sends its
    // request, so `write()` meets the read hold on the server.
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("rw").unwrap();
    for _ in 0..20 {
        // A read guard dropped without `release()`...
        drop(lock.read().await.unwrap());
        let write = tokio::time::timeout(Duration::from_secs(10), lock.write())
            .await
            .expect("the write ends")
            .expect("no read guard is held");
        write.release().await.unwrap();
        // ...and a `read()` polled once and cancelled (whether its request went out before
        // the cancel depends on the connection's task; when it did, its grant's release runs
        // in the background as a dropped guard's does).
        tokio::select! {
            biased;
            read = lock.read() => panic!("a read in one poll: {read:?}"),
            () = std::future::ready(()) => {}
        }
        let write = tokio::time::timeout(Duration::from_secs(10), lock.try_write())
            .await
            .expect("the write ends")
            .expect("no read guard is held");
        write.release().await.unwrap();
    }
    // A read guard that is still held: the refusal is real.
    let read = lock.read().await.unwrap();
    assert!(matches!(lock.try_write().await, Err(Error::Upgrade { .. })));
    read.release().await.unwrap();
}

// Seed 004's comparison table, row by row.

#[tokio::test]
async fn table_read_lock_is_reentrant_even_with_a_writer_waiting() {
    let server = server();
    let client = client(&server).await;
    let reader = client.rwlock("rw").unwrap();
    let first = reader.read().await.unwrap();
    let writer = client.rwlock_with("rw", renewed(5_000)).unwrap();
    let waiting = tokio::spawn(async move { writer.write().await.unwrap() });
    let observer = client.rwlock("rw").unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_writers == 1
        })
        .await
    );
    // The reader reads again: granted at once, not queued behind the writer it blocks.
    let again = reader.try_read().await.unwrap();
    assert_eq!(observer.state().await.unwrap().holds.len(), 2);
    assert_eq!(again.release().await.unwrap().holds(), 1);
    assert!(first.release().await.unwrap().is_freed());
    let write = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .unwrap()
        .unwrap();
    write.release().await.unwrap();
}

#[tokio::test]
async fn table_only_the_holder_releases() {
    let server = server();
    let client = client(&server).await;
    let a = client.rwlock("rw").unwrap().read().await.unwrap();
    let b = client.rwlock("rw").unwrap().read().await.unwrap();
    let observer = client.rwlock("rw").unwrap();
    // B releasing releases only B's hold; A's stays.
    assert!(b.release().await.unwrap().is_freed());
    let state = observer.state().await.unwrap();
    assert_eq!(state.holds.len(), 1);
    assert_eq!(state.holds[0].fencing_token, Some(a.fencing_token()));
    // No other owner's writer can take or end it.
    assert!(matches!(
        client.rwlock("rw").unwrap().try_write().await,
        Err(Error::Held { .. })
    ));
    assert_eq!(observer.state().await.unwrap().holds.len(), 1);
    a.release().await.unwrap();
    assert!(!exists(&server, "rw"));
}

#[tokio::test]
async fn table_a_hold_ends_by_itself_when_its_lease_runs_out() {
    let server = server();
    let client = client(&server).await;
    let options = LockOptions::default().lease(Duration::from_millis(300));
    let write = client
        .rwlock_with("rw", options)
        .unwrap()
        .write()
        .await
        .unwrap();
    let lost = write.lost();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .unwrap(),
        LostReason::LeaseEnded
    );
    let next = client
        .rwlock("rw")
        .unwrap()
        .write_timeout(Duration::from_secs(2))
        .await
        .unwrap();
    assert!(next.fencing_token() > write.fencing_token());
    // The next writer holds it now: taken, as a `Mutex` says.
    assert_not_held(write.release().await, LostReason::Taken);
    next.release().await.unwrap();
}

#[tokio::test]
async fn table_the_write_lock_is_reentrant_for_its_owner() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("rw").unwrap();
    let first = lock.write().await.unwrap();
    let second = lock.try_write().await.unwrap();
    // The writer may read too.
    let read = lock.try_read().await.unwrap();
    assert_eq!(second.fencing_token(), first.fencing_token());
    assert!(read.fencing_token() > first.fencing_token());
    let state = lock.state().await.unwrap();
    assert_eq!(state.writer(), Some(lock.owner().as_str()));
    assert_eq!(state.hold_count(), 3);
    // Another owner stays out until every write hold is released.
    let other = client.rwlock("rw").unwrap();
    assert!(other.try_read().await.is_err());
    assert_eq!(second.release().await.unwrap().holds(), 1);
    assert!(other.try_read().await.is_err());
    assert!(first.release().await.unwrap().is_freed());
    let shared = other.try_read().await.unwrap();
    shared.release().await.unwrap();
    read.release().await.unwrap();
}

#[tokio::test]
async fn a_name_in_use_as_one_kind_is_refused_as_another() {
    let server = server();
    let client = client(&server).await;
    let rw = client.rwlock("name").unwrap().read().await.unwrap();
    assert!(matches!(
        client.mutex("name").unwrap().try_lock().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        client.reentrant_mutex("name").unwrap().try_lock().await,
        Err(Error::WrongType { .. })
    ));
    rw.release().await.unwrap();
    let mutex = client.mutex("name").unwrap().lock().await.unwrap();
    assert!(matches!(
        client.rwlock("name").unwrap().try_read().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        client.rwlock("name").unwrap().state().await,
        Err(Error::WrongType { .. })
    ));
    mutex.release().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_wait_leaves_no_place_and_no_hold() {
    let server = server();
    let client = client(&server).await;
    let write = client.rwlock("rw").unwrap().write().await.unwrap();
    let observer = client.rwlock("rw").unwrap();
    for mode in ["read", "write"] {
        let lock = client.rwlock("rw").unwrap();
        let waiting = tokio::spawn(async move {
            if mode == "read" {
                drop(lock.read().await);
            } else {
                drop(lock.write().await);
            }
        });
        assert!(
            eventually(Duration::from_secs(5), || async {
                let state = observer.state().await.unwrap();
                state.waiting_readers + state.waiting_writers == 1
            })
            .await,
            "{mode} waits"
        );
        waiting.abort();
        assert!(
            eventually(Duration::from_secs(2), || async {
                let state = observer.state().await.unwrap();
                state.waiting_readers + state.waiting_writers == 0
            })
            .await,
            "the cancelled {mode} left its place"
        );
    }
    assert_eq!(observer.state().await.unwrap().holds.len(), 1);
    write.release().await.unwrap();
    assert!(!exists(&server, "rw"));
}

#[tokio::test]
async fn releases_wake_exactly_those_who_may_enter() {
    let server = server();
    let client = client(&server).await;
    let observer = client.rwlock("rw").unwrap();
    let write = client.rwlock("rw").unwrap().write().await.unwrap();
    // Three readers that would poll only every 20 s: a wake-up must let them in.
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let lock = client
                .rwlock_with("rw", renewed(5_000).wait_options(slow_polling()))
                .unwrap();
            tokio::spawn(async move { lock.read().await.unwrap() })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_readers == 3
        })
        .await
    );
    write.release().await.unwrap();
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(
            tokio::time::timeout(WOKEN_WITHIN, reader)
                .await
                .expect("the write release woke every reader")
                .unwrap(),
        );
    }
    assert_eq!(observer.state().await.unwrap().holds.len(), 3);
    // A writer behind them is woken by the last read release, not by the others.
    let writer = client
        .rwlock_with("rw", renewed(5_000).wait_options(slow_polling()))
        .unwrap();
    let waiting = tokio::spawn(async move { writer.write().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_writers == 1
        })
        .await
    );
    let last = guards.pop().unwrap();
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(observer.state().await.unwrap().waiting_writers, 1);
    last.release().await.unwrap();
    let write = tokio::time::timeout(WOKEN_WITHIN, waiting)
        .await
        .expect("the last read release woke the writer")
        .unwrap();
    write.release().await.unwrap();
}

#[tokio::test]
async fn a_release_wakes_a_waiter_on_its_own_clients_channel_only() {
    let server = server();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let write = holder.rwlock("own").unwrap().write().await.unwrap();
    let reading = tokio::spawn({
        let lock = waiter
            .rwlock_with("own", renewed(5_000).wait_options(slow_polling()))
            .unwrap();
        async move { lock.read().await.unwrap() }
    });
    let queued = || async {
        let line: Vec<String> = redis::cmd("ZRANGE")
            .arg("{own}:queue")
            .arg(0)
            .arg(-1)
            .query(&mut raw(&server))
            .unwrap();
        line
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            queued().await.len() == 1
        })
        .await
    );
    // The reader's place: 'r' and its hold id, which ends in its client's address.
    let place = queued().await.remove(0);
    let (_, address) = place.split_once('@').expect("a hold id with an address");
    let mut con = raw(&server);
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut pubsub = con.as_pubsub();
    pubsub.psubscribe("{own}:wake*").unwrap();
    write.release().await.unwrap();
    let message = pubsub.get_message().unwrap();
    assert_eq!(
        message.get_channel_name(),
        format!("{{own}}:wake:{address}")
    );
    assert_eq!(message.get_payload::<String>().unwrap(), place);
    let read = tokio::time::timeout(WOKEN_WITHIN, reading)
        .await
        .expect("woken")
        .unwrap();
    assert_eq!(format!("r{}", read.owner_token().as_str()), place);
    // Nothing else was published: the next message is a marker.
    redis::cmd("PUBLISH")
        .arg("{own}:wake")
        .arg("marker")
        .exec(&mut raw(&server))
        .unwrap();
    assert_eq!(
        pubsub
            .get_message()
            .unwrap()
            .get_payload::<String>()
            .unwrap(),
        "marker"
    );
    read.release().await.unwrap();
}

#[test]
#[ignore = "runs only as a child process of a_writer_that_dies_waiting_holds_readers_up_only_for_its_place_lease"]
fn waiting_writer_child() {
    child_main(|client| async move {
        let lock = client.rwlock("rw").unwrap();
        println!("waiting");
        let guard = lock.write().await.unwrap();
        drop(guard);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_dies_waiting_holds_readers_up_only_for_its_place_lease() {
    let server = server();
    let client = client(&server).await;
    let observer = client.rwlock("rw").unwrap();
    let anchor = client.rwlock("rw").unwrap().read().await.unwrap();
    let mut child = ChildProcess::spawn_test(
        "waiting_writer_child",
        &[("CHILD_REDIS_URL", &server.url())],
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || async {
            observer.state().await.unwrap().waiting_writers == 1
        })
        .await,
        "the child's writer waits"
    );
    // A reader that comes now queues behind the writer.
    let reader = client.rwlock("rw").unwrap();
    let reading = tokio::spawn(async move { reader.read().await.unwrap() });
    assert!(
        eventually(Duration::from_secs(5), || async {
            observer.state().await.unwrap().waiting_readers == 1
        })
        .await
    );
    child.kill_hard();
    let killed = Instant::now();
    // The dead writer's place lease (2 s by default) runs out; the reader's next renewal of
    // its own place finds no writer before it.
    let guard = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .expect("the reader entered after the dead writer's place lease")
        .unwrap();
    assert!(killed.elapsed() < Duration::from_secs(4));
    assert_eq!(observer.state().await.unwrap().waiting_writers, 0);
    guard.release().await.unwrap();
    anchor.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_refused_with_a_typed_error() {
    let server = server();
    let client = client(&server).await;
    assert!(matches!(client.rwlock(""), Err(Error::InvalidName { .. })));
    assert!(matches!(
        client.reentrant_mutex("a\u{1b}b"),
        Err(Error::InvalidName { .. })
    ));
    let zero = LockOptions::default().lease(Duration::ZERO);
    assert!(matches!(
        client.rwlock_with("rw", zero),
        Err(Error::InvalidDuration { .. })
    ));
    let huge = LockOptions::default().lease(Duration::from_secs(u64::MAX / 2));
    assert!(matches!(
        client.rwlock_with("rw", huge),
        Err(Error::InvalidDuration { .. })
    ));
    assert!(matches!(
        redis_locks::OwnerId::new(&"x".repeat(257)),
        Err(Error::InvalidOwner { .. })
    ));
    // A lock key of another Redis type.
    redis::cmd("RPUSH")
        .arg("list")
        .arg("x")
        .exec(&mut raw(&server))
        .unwrap();
    let lock = client.rwlock("list").unwrap();
    assert!(matches!(
        lock.try_read().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        lock.write_timeout(Duration::from_millis(50)).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.state().await, Err(Error::WrongType { .. })));
}

#[tokio::test]
async fn a_renewal_that_finds_the_hold_gone_says_taken_only_when_another_owner_excludes_it() {
    let server = server();
    let client = client(&server).await;
    // Deletes the lock key, and every hold with it.
    let gone = || async {
        let mut con = raw(&server);
        redis::cmd("DEL").arg("rw").exec(&mut con).unwrap();
    };
    // Its holds renewed every 200 ms; the others are other owners'.
    let watched = client.rwlock_with("rw", common::renewed(600)).unwrap();
    // A read hold gone (its lock key deleted by hand) while another owner writes: taken.
    let read = watched.read().await.unwrap();
    let lost = read.lost();
    gone().await;
    let writer = client.rwlock("rw").unwrap().write().await.unwrap();
    assert_eq!(within(lost).await, LostReason::Taken);
    writer.release().await.unwrap();
    // A write hold turned into a read hold, gone while another owner reads: only expired
    // (reads share), as its release says too.
    let write = watched.write().await.unwrap();
    let read = write.downgrade().await.unwrap();
    let lost = read.lost();
    gone().await;
    let reader = client.rwlock("rw").unwrap().read().await.unwrap();
    assert_eq!(within(lost).await, LostReason::Expired);
    assert_not_held(read.release().await, LostReason::Expired);
    // And a write hold gone while another owner reads: taken.
    reader.release().await.unwrap();
    let write = watched.write().await.unwrap();
    let lost = write.lost();
    gone().await;
    let reader = client.rwlock("rw").unwrap().read().await.unwrap();
    assert_eq!(within(lost).await, LostReason::Taken);
    assert_not_held(write.release().await, LostReason::Taken);
    reader.release().await.unwrap();
}

/// What `lost` resolves to, within 5 s (a renewal every 200 ms sees a loss well before).
async fn within(lost: impl std::future::Future<Output = LostReason>) -> LostReason {
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("the renewal saw the loss")
}

/// A handle on the RwLock `name` (with `options`) whose counter is vouched for on the
/// client's connection: its first read, numbered by the script (which records the
/// connection's epoch), is taken and given back, so that the next read nobody contends for
/// is a plain key taken without a script.
async fn vouched(client: &Client, name: &str, options: LockOptions) -> redis_locks::RwLock {
    let lock = client.rwlock_with(name, options).unwrap();
    lock.read().await.unwrap().release().await.unwrap();
    lock
}

#[tokio::test]
async fn a_read_nobody_contends_for_is_a_plain_key_taken_without_a_script() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("plain").unwrap();
    // The first read on a connection: the counter is not vouched for there yet, so the
    // script numbers it, in the hash, and records the connection among the counter's epochs.
    let first = lock.read().await.unwrap();
    assert_eq!(common::key_type(&server, "plain"), "hash");
    assert_eq!(
        lock.state().await.unwrap().holds[0].fencing_token,
        Some(first.fencing_token()),
        "the server keeps the token of a hold it numbered"
    );
    let epochs: i64 = redis::cmd("ZCARD")
        .arg("{plain}:epoch")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(epochs, 1);
    let first_token = first.fencing_token();
    first.release().await.unwrap();
    // The next: one pipeline, no script; the hold is the key '<hold> r <owner>' with the lease.
    let (scripts, attempts) = common::scripts_and_first_attempts(&server);
    let read = lock.read().await.unwrap();
    let (scripts_after, attempts_after) = common::scripts_and_first_attempts(&server);
    assert_eq!((scripts_after - scripts, attempts_after - attempts), (0, 1));
    let value: String = redis::cmd("GET")
        .arg("plain")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(
        value,
        format!("{} r {}", read.owner_token().as_str(), lock.owner())
    );
    let left = common::pttl(&server, "plain");
    assert!((25_000..=30_000).contains(&left), "the lease: {left}");
    assert!(read.fencing_token() > first_token);
    let state = lock.state().await.unwrap();
    assert_eq!(
        (state.kind.as_deref(), state.holds.len()),
        (Some("rwlock"), 1)
    );
    assert_eq!(state.holds[0].owner, lock.owner().as_str());
    assert_eq!(state.holds[0].fencing_token, None, "kept by the guard only");
    // It is no other primitive's: each is told what it is.
    let mutex = client.mutex("plain").unwrap();
    for err in [
        mutex
            .lock_timeout(Duration::from_secs(2))
            .await
            .unwrap_err(),
        mutex.state().await.unwrap_err(),
        mutex.try_lock().await.unwrap_err(),
        client
            .semaphore("plain", 2)
            .unwrap()
            .try_acquire()
            .await
            .unwrap_err(),
        client
            .fair_mutex("plain")
            .unwrap()
            .try_lock()
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::WrongType { .. }), "{err}");
    }
    assert_eq!(
        common::key_type(&server, "plain"),
        "string",
        "left as it was"
    );
    // (A ReentrantMutex's script reads it as the hash it stands for, and may write that.)
    let err = client
        .reentrant_mutex("plain")
        .unwrap()
        .try_lock()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(
        lock.state().await.unwrap().holds.len(),
        1,
        "the read hold kept"
    );
    // Another owner's writer is kept out; another reader (its first attempt refused, the
    // script grants it) turns the key into the hash, and both count.
    assert!(matches!(
        client.rwlock("plain").unwrap().try_write().await,
        Err(Error::Held { .. })
    ));
    let other = client.rwlock("plain").unwrap().read().await.unwrap();
    assert_eq!(common::key_type(&server, "plain"), "hash");
    assert!(other.fencing_token() > read.fencing_token());
    let state = lock.state().await.unwrap();
    assert_eq!(state.holds.len(), 2);
    assert!(
        common::pttl(&server, "plain") > 25_000,
        "the plain hold's lease kept"
    );
    other.release().await.unwrap();
    assert!(read.release().await.unwrap().is_freed());
    assert!(!exists(&server, "plain"), "released, nothing is kept");
    // And again a plain key, released by its own id.
    let read = lock.read().await.unwrap();
    assert_eq!(common::key_type(&server, "plain"), "string");
    assert!(read.release().await.unwrap().is_freed());
    assert!(!exists(&server, "plain"));
}

#[tokio::test]
async fn a_writer_waits_for_a_plain_read_hold_and_its_release_wakes_it() {
    let server = server();
    let client = client(&server).await;
    // A 20 s retry delay: the writer gets in at once only if the release wakes it.
    let lock = vouched(&client, "wake", renewed(30_000)).await;
    let read = lock.read().await.unwrap();
    assert_eq!(common::key_type(&server, "wake"), "string");
    let writer = client.rwlock_with("wake", renewed(30_000)).unwrap();
    let waiting = tokio::spawn(async move { writer.write().await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            lock.state().await.unwrap().waiting_writers == 1
        })
        .await
    );
    assert_eq!(
        common::key_type(&server, "wake"),
        "hash",
        "the waiter turned it"
    );
    let released = Instant::now();
    assert!(read.release().await.unwrap().is_freed());
    let write = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the release, not by its retry 20 s later")
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(5));
    write.release().await.unwrap();
}

#[tokio::test]
async fn a_first_read_that_finds_a_line_gives_its_hold_back_and_prods_the_line() {
    let server = server();
    let client = client(&server).await;
    let lock = vouched(&client, "lined", LockOptions::default()).await;
    // A line that outlived its lock (a `break` leaves one): a writer placed for 10 s.
    common::put_line(&mut raw(&server), "lined", "wx", 10_000);
    let mut wakes = common::subscribed(&server, "{lined}:wake");
    let (_, attempts) = common::scripts_and_first_attempts(&server);
    let err = lock.try_read().await.unwrap_err();
    assert!(
        matches!(err, Error::Held { .. }),
        "a writer waits first: {err}"
    );
    assert_eq!(common::scripts_and_first_attempts(&server).1 - attempts, 1);
    assert!(
        !exists(&server, "lined"),
        "the hold the first attempt took was given back"
    );
    assert_eq!(common::next_message(&mut wakes).as_deref(), Some("wx"));
}

#[tokio::test]
async fn the_watchdog_renews_a_plain_read_hold_and_a_lost_one_fires_lost() {
    let server = server();
    let client = client(&server).await;
    let lock = vouched(&client, "renewed", renewed(600)).await;
    let read = lock.read().await.unwrap();
    assert_eq!(common::key_type(&server, "renewed"), "string");
    // Three leases: kept only if renewed (every 200 ms), as the plain key it is.
    let until = Instant::now() + Duration::from_millis(1_800);
    while Instant::now() < until {
        assert!(common::pttl(&server, "renewed") > 0, "renewed in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(read.lost_reason(), None);
    assert_eq!(common::key_type(&server, "renewed"), "string");
    // Deleted by hand: the next renewal finds it gone.
    let lost = read.lost();
    redis::cmd("DEL")
        .arg("renewed")
        .exec(&mut raw(&server))
        .unwrap();
    assert_eq!(within(lost).await, LostReason::Expired);
    assert_not_held(read.release().await, LostReason::Expired);
}

#[tokio::test]
async fn a_first_read_that_finds_the_counter_broken_gives_its_hold_back() {
    let server = server();
    let client = client(&server).await;
    let lock = vouched(&client, "broken", LockOptions::default()).await;
    redis::cmd("SET")
        .arg("{broken}:fence")
        .arg("nope")
        .exec(&mut raw(&server))
        .unwrap();
    let (_, attempts) = common::scripts_and_first_attempts(&server);
    let err = lock.read().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(common::scripts_and_first_attempts(&server).1 - attempts, 1);
    assert!(
        !exists(&server, "broken"),
        "the hold taken was given back before the error returned"
    );
}
