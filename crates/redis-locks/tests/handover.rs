//! The handover (issue 11): a `Mutex` release hands the lock straight to the first process in
//! line, which holds it the moment the wake-up reaches it — with the fencing token the release
//! took, under the owner token its waiters registered — and then extends it to its own lease.

mod common;

use std::time::Duration;

use common::{client, eventually, exists, pttl, raw, server};
use redis::Commands;
use redis_locks::{Client, LockOptions, MutexGuard, Result};
use test_support::RedisServer;
use tokio::task::JoinHandle;

/// Everything published on `lock`'s wake channels (its wake channel and every client's own
/// channel of it) as it comes, `(channel, payload)`; subscribed when this returns.
fn published(server: &RedisServer, lock: &str) -> std::sync::mpsc::Receiver<(String, String)> {
    let (sender, receiver) = std::sync::mpsc::channel();
    let (subscribed, ready) = std::sync::mpsc::channel();
    let mut con = raw(server);
    let pattern = format!("{{{lock}}}:wake*");
    std::thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        pubsub.psubscribe(&pattern).unwrap();
        let _ = subscribed.send(());
        while let Ok(message) = pubsub.get_message() {
            let payload: String = message.get_payload().unwrap();
            let channel = message.get_channel_name().to_string();
            if sender.send((channel, payload)).is_err() {
                return;
            }
        }
    });
    ready
        .recv_timeout(Duration::from_secs(5))
        .expect("subscribed to the wake channels");
    receiver
}

/// The next message `published` saw.
fn next_published(published: &std::sync::mpsc::Receiver<(String, String)>) -> (String, String) {
    published
        .recv_timeout(Duration::from_secs(5))
        .expect("a message")
}

/// How many waiter ids have an owner token registered for a handover of `lock`.
fn registered(server: &RedisServer, lock: &str) -> i64 {
    raw(server).hlen(format!("{{{lock}}}:handover")).unwrap()
}

/// Waits until `count` processes (clients) registered a token in `lock`'s line.
async fn queued(server: &RedisServer, lock: &str, count: i64) {
    let queued = eventually(Duration::from_secs(5), || async {
        registered(server, lock) == count
    })
    .await;
    assert!(queued, "{count} waiting processes registered a token");
}

/// `guard` is released while `waiting` (another client's `lock()`) waits in line for `lock`:
/// returns the guard the waiter got and the grant published for it, split ('<waiter id>
/// <owner> <nonce> <token>'), having checked that the waiter holds the lock under the token
/// handed and with the fencing token the release took (so it did not ask again), and that
/// the grant was the release's only message, published on the channel it is addressed to:
/// the client's own channel of the lock for a waiter id that ends in `@<address>` (a
/// `Mutex` line's), else the lock's wake channel.
async fn handed_on(
    server: &RedisServer,
    lock: &str,
    guard: MutexGuard,
    waiting: JoinHandle<Result<MutexGuard>>,
) -> (MutexGuard, Vec<String>) {
    let published = published(server, lock);
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter holds the lock")
        .unwrap()
        .unwrap();
    let (channel, grant) = next_published(&published);
    let parts: Vec<String> = grant.split(' ').map(str::to_string).collect();
    assert_eq!(parts.len(), 4, "a grant: {grant}");
    let wake = format!("{{{lock}}}:wake");
    let addressed_to = match parts[0].split_once('@') {
        Some((_, address)) => format!("{wake}:{address}"),
        None => wake.clone(),
    };
    assert_eq!(channel, addressed_to, "published to its addressee");
    redis::cmd("PUBLISH")
        .arg(&wake)
        .arg("marker")
        .exec(&mut raw(server))
        .unwrap();
    assert_eq!(
        next_published(&published),
        (wake, "marker".to_string()),
        "the grant was the only message"
    );
    assert_eq!(
        parts[1],
        next.owner_token().as_str(),
        "held under the token handed"
    );
    assert_eq!(
        parts[3],
        next.fencing_token().to_string(),
        "with the fencing token the release took: the waiter did not ask again"
    );
    (next, parts)
}

/// A lock `name` (with `options`) held by one client while another client's `lock()` waits
/// in line for it, then released: returns the waiting client, the guard it was handed (checked
/// as [`handed_on`] does) and the waiting client's request count from just before the
/// release.
async fn handed_between_two_clients(
    server: &RedisServer,
    name: &str,
    options: LockOptions,
) -> (Client, MutexGuard, u64) {
    let holder = client(server).await;
    let waiter = client(server).await;
    let guard = holder
        .mutex_with(name, options.clone())
        .unwrap()
        .lock()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let mine = waiter.mutex_with(name, options).unwrap();
        async move { mine.lock().await }
    });
    queued(server, name, 1).await;
    let requests = waiter.stats().requests;
    let (next, _) = handed_on(server, name, guard, waiting).await;
    (waiter, next, requests)
}

/// The handed lease of `next` (a guard of `waiter`, whose request count was `requests` before
/// the release) is extended to the full 10 s lease, and that extension is the only request
/// the waiter sent.
async fn extended_by_one_request(
    server: &RedisServer,
    lock: &str,
    next: &MutexGuard,
    waiter: &Client,
    requests: u64,
) {
    let extended = eventually(Duration::from_secs(5), || async {
        pttl(server, lock) > 5_000 && next.lease_remaining() > Duration::from_secs(5)
    })
    .await;
    assert!(
        extended,
        "extended to the full lease: {}",
        pttl(server, lock)
    );
    let sent = waiter.stats().requests - requests;
    assert_eq!(sent, 1, "one request: the extension");
}

#[tokio::test]
async fn a_released_lock_is_held_by_the_next_process_with_the_token_the_release_took() {
    let server = server();
    let options = LockOptions::default()
        .lease(Duration::from_secs(10))
        .watchdog(false)
        .place_lease(Duration::from_secs(1));
    let (waiter, next, requests) = handed_between_two_clients(&server, "handed", options).await;
    // The lease that ended with the waiter's place is replaced by its own.
    extended_by_one_request(&server, "handed", &next, &waiter, requests).await;
    assert!(
        !next.is_renewed(),
        "without the watchdog, no renewal follows"
    );
    next.release().await.unwrap();
    assert!(!exists(&server, "handed"));
    assert_eq!(registered(&server, "handed"), 0);
}

#[tokio::test]
async fn a_handed_lease_with_the_watchdog_is_renewed_past_its_place_lease() {
    let server = server();
    // The place lease is under a third of the lease: a watchdog that only renewed on its
    // usual schedule (a third of the lease after the grant) would let the handed lease,
    // which ends with the place, run out first.
    let options = LockOptions::default()
        .lease(Duration::from_millis(900))
        .watchdog(true)
        .place_lease(Duration::from_millis(200));
    let (_waiter, next, _) = handed_between_two_clients(&server, "renewed", options).await;
    // Well past the place lease and the lease itself: renewed all along.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(next.lost_reason().is_none(), "{:?}", next.lost_reason());
    let value: String = raw(&server).get("renewed").unwrap();
    assert!(value.starts_with(next.owner_token().as_str()));
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_line_whose_first_waiter_timed_out_keeps_its_place_and_hands_to_its_next_waiter() {
    let server = server();
    let options = LockOptions::default()
        .lease(Duration::from_secs(10))
        .place_lease(Duration::from_secs(5));
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let held = holder.mutex_with("line", options.clone()).unwrap();
    let guard = held.lock().await.unwrap();
    // The first waiter of the line registers its token and gives up; the second asks with
    // the same token, so a grant to it is the second waiter's to take.
    let first = waiting.mutex_with("line", options.clone()).unwrap();
    let second = waiting.mutex_with("line", options).unwrap();
    let impatient =
        tokio::spawn(async move { first.lock_timeout(Duration::from_millis(300)).await });
    queued(&server, "line", 1).await;
    let patient = tokio::spawn(async move { second.lock().await });
    // The token the line registered while its first waiter waited ('<token> <nonce>').
    let registrations: Vec<String> = raw(&server).hvals("{line}:handover").unwrap();
    let first_token = registrations[0].split(' ').next().unwrap().to_string();
    let timed_out = impatient.await.unwrap();
    assert!(timed_out.is_err(), "the first waiter gave up");
    assert_eq!(registered(&server, "line"), 1, "the line keeps its place");
    let (next, parts) = handed_on(&server, "line", guard, patient).await;
    assert_eq!(
        parts[1], first_token,
        "the second waiter asks with the token its line registered before the first gave up"
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_cancelled_as_the_lock_is_handed_to_it_leaves_the_lock_free() {
    let server = server();
    // Place leases far longer than the test: only the line's leave can free the lock.
    let options = LockOptions::default()
        .lease(Duration::from_secs(30))
        .place_lease(Duration::from_secs(30));
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let held = holder.mutex_with("gone", options.clone()).unwrap();
    let mine = waiter.mutex_with("gone", options).unwrap();
    for round in 0..20 {
        let guard = held.lock().await.unwrap();
        let waiting = tokio::spawn({
            let mine = mine.clone();
            async move { mine.lock().await }
        });
        queued(&server, "gone", 1).await;
        // The wait ends as the release hands the lock to its line (either may land first).
        if round % 2 == 0 {
            waiting.abort();
            guard.release().await.unwrap();
        } else {
            let release = tokio::spawn(guard.release());
            tokio::task::yield_now().await;
            waiting.abort();
            release.await.unwrap().unwrap();
        }
        match waiting.await {
            // The waiter got it before the abort: its guard dropped, released in the
            // background.
            Ok(granted) => drop(granted.unwrap()),
            Err(err) => assert!(err.is_cancelled()),
        }
        let free = eventually(Duration::from_secs(2), || async {
            !exists(&server, "gone") && registered(&server, "gone") == 0
        })
        .await;
        assert!(free, "round {round}: the lock is free, the line empty");
    }
}

#[tokio::test]
async fn two_waiters_of_one_process_never_both_ask_with_the_lines_token() {
    // A process that waited a moment ago still listens (its subscription lingers), so its
    // next `lock()` gets in line from its first attempt; a second `lock()` beside it must
    // wait for its turn rather than ask with the same line token (a free lock would then be
    // granted to both: one by SET NX, the other as a retry of the same owner).
    let server = server();
    let holder = client(&server).await;
    let contender = client(&server).await;
    let held = holder.mutex("pair").unwrap();
    let mine = contender.mutex("pair").unwrap();
    let history = std::sync::Arc::new(test_support::history::History::default());
    for round in 0..10 {
        // Wait once, so that the subscription lingers.
        let guard = held.lock().await.unwrap();
        let waiting = tokio::spawn({
            let mine = mine.clone();
            async move { mine.lock().await }
        });
        queued(&server, "pair", 1).await;
        guard.release().await.unwrap();
        waiting.await.unwrap().unwrap().release().await.unwrap();
        // Two calls at once on the free lock.
        let calls: Vec<_> = (0..2)
            .map(|n| {
                let (mine, history) = (mine.clone(), history.clone());
                tokio::spawn(async move {
                    let guard = mine.lock().await.unwrap();
                    let start = test_support::history::now_nanos();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    history.record(test_support::history::Interval {
                        worker: format!("round {round} call {n}"),
                        token: guard.fencing_token().get(),
                        start,
                        end: test_support::history::now_nanos(),
                    });
                    guard.release().await.unwrap();
                })
            })
            .collect();
        for call in calls {
            call.await.unwrap();
        }
    }
    let report = history.check();
    assert!(report.is_ok(), "{report}");
}

#[tokio::test]
async fn a_fair_mutex_release_hands_the_lock_to_the_next_waiter_too() {
    let server = server();
    let options = LockOptions::default()
        .lease(Duration::from_secs(10))
        .watchdog(false)
        .place_lease(Duration::from_secs(1));
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let held = holder.fair_mutex_with("fair", options.clone()).unwrap();
    let mine = waiter.fair_mutex_with("fair", options).unwrap();
    let guard = held.lock().await.unwrap();
    let waiting = tokio::spawn(async move { mine.lock().await });
    queued(&server, "fair", 1).await;
    let requests = waiter.stats().requests;
    let (next, parts) = handed_on(&server, "fair", guard, waiting).await;
    assert_eq!(
        parts[0],
        next.owner_token().as_str(),
        "its place is its token"
    );
    extended_by_one_request(&server, "fair", &next, &waiter, requests).await;
    next.release().await.unwrap();
    assert!(!exists(&server, "fair"));
    assert_eq!(registered(&server, "fair"), 0);
}

#[tokio::test]
async fn a_release_reaches_only_the_client_it_hands_the_lock_to() {
    let server = server();
    let holder = client(&server).await;
    let first = client(&server).await;
    let second = client(&server).await;
    let guard = holder.mutex("one").unwrap().lock().await.unwrap();
    let waiting = tokio::spawn({
        let mutex = first.mutex("one").unwrap();
        async move { mutex.lock().await }
    });
    queued(&server, "one", 1).await;
    let later = tokio::spawn({
        let mutex = second.mutex("one").unwrap();
        async move { mutex.lock().await }
    });
    queued(&server, "one", 2).await;
    // Each waiting client listens on its own channel of the lock (beside the lock's wake
    // channel), named after the address its waiter id ends in.
    let line: Vec<String> = raw(&server).zrange("{one}:queue", 0, -1).unwrap();
    for id in &line {
        let (_, address) = id
            .split_once('@')
            .expect("a Mutex line's id has an address");
        let channel = format!("{{one}}:wake:{address}");
        assert_eq!(common::subscribers(&server, &channel), 1, "{channel}");
    }
    assert_eq!(common::subscribers(&server, "{one}:wake"), 2);
    // One message, on the first client's channel: the second client hears nothing.
    let (next, parts) = handed_on(&server, "one", guard, waiting).await;
    assert_eq!(parts[0], line[0], "handed to the first in line");
    assert!(!later.is_finished());
    let (last, _) = handed_on(&server, "one", next, later).await;
    last.release().await.unwrap();
    assert!(!exists(&server, "one"));
}

#[tokio::test]
async fn a_handed_lock_released_at_once_costs_its_holder_the_release_alone() {
    let server = server();
    // With the watchdog and without: the extension of a handed lease is due only once a
    // third of it has passed, so a guard released before sends none.
    let with_watchdog = LockOptions::default().place_lease(Duration::from_secs(2));
    let without = with_watchdog
        .clone()
        .lease(Duration::from_secs(10))
        .watchdog(false);
    for (name, options) in [("renewed", with_watchdog), ("leased", without)] {
        let (waiter, next, requests) = handed_between_two_clients(&server, name, options).await;
        assert!(
            pttl(&server, name) <= 2_000,
            "the handed lease, not extended"
        );
        next.release().await.unwrap();
        assert_eq!(
            waiter.stats().requests - requests,
            1,
            "{name}: the release alone"
        );
        assert!(!exists(&server, name));
    }
}

#[tokio::test]
async fn a_holder_that_extends_a_handed_lease_itself_is_not_cut_short_by_the_watchdog() {
    let server = server();
    // Without the watchdog, a handed lease is owed one extension (to end the 10 s asked for
    // after the handover), due a third of the way into the handed lease (under 100 ms here);
    // the holder's own longer extension before then makes it owed no more.
    let options = LockOptions::default()
        .lease(Duration::from_secs(10))
        .watchdog(false)
        .place_lease(Duration::from_millis(300));
    let (waiter, next, _) = handed_between_two_clients(&server, "longer", options).await;
    next.extend(Duration::from_secs(60)).await.unwrap();
    let requests = waiter.stats().requests;
    // Well past when the owed extension was due, and past the handed lease itself.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        pttl(&server, "longer") > 30_000,
        "{}",
        pttl(&server, "longer")
    );
    assert!(next.lease_remaining() > Duration::from_secs(30));
    assert_eq!(waiter.stats().requests, requests, "nothing more was sent");
    next.release().await.unwrap();
}
