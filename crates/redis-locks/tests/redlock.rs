//! Redlock over independent real redis-server processes: the quorum, faults (nodes killed,
//! paused, a key lost), fencing tokens across nodes, cancellation, bad input.

mod common;

use std::sync::Arc;
use std::time::Duration;

use redis_locks::{
    Client, Error, LostReason, NODE_GRACE, NodeStart, Phase, Redlock, RedlockGuard, RedlockOptions,
    Vote,
};
use test_support::RedisServer;
use test_support::history::{History, Interval, now_nanos};
use tokio::time::Instant;

/// `n` private servers and a client for each.
async fn nodes(n: usize) -> (Vec<RedisServer>, Vec<Client>) {
    let servers = test_support::start_many(n).expect("start private redis-servers");
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(common::client(server).await);
    }
    (servers, clients)
}

fn options(lease_ms: u64, node_timeout_ms: u64) -> RedlockOptions {
    RedlockOptions::default()
        .lease(Duration::from_millis(lease_ms))
        .node_timeout(Duration::from_millis(node_timeout_ms))
}

/// Which servers hold a key `key` now.
fn holding(servers: &[RedisServer], key: &str) -> Vec<usize> {
    servers
        .iter()
        .enumerate()
        .filter(|(_, server)| server.pid().is_some() && common::exists(server, key))
        .map(|(index, _)| index)
        .collect()
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut common::raw(server))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_tasks_never_overlap_and_tokens_increase() {
    let (_servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:contended", options(2_000, 200)).unwrap();
    let history = Arc::new(History::default());
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (lock, history) = (lock.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let guard = lock.lock_timeout(Duration::from_secs(30)).await.unwrap();
                let start = now_nanos();
                tokio::time::sleep(Duration::from_micros(300)).await;
                let end = now_nanos();
                history.record(Interval {
                    worker: format!("task-{worker}"),
                    token: guard.fencing_token().get(),
                    start,
                    end,
                });
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("no task hangs")
            .unwrap();
    }
    let report = history.check();
    assert_eq!(report.acquisitions, 120);
    assert!(report.is_ok(), "{report}: {report:?}");
}

#[tokio::test]
async fn a_minority_down_still_acquires_a_majority_down_is_a_typed_error() {
    let (mut servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:down", options(2_000, 200)).unwrap();
    servers[1].kill();
    servers[3].kill();
    let guard = lock.try_lock().await.expect("3 of 5 nodes grant");
    assert_eq!(holding(&servers, "rl:down"), vec![0, 2, 4]);
    guard.release().await.unwrap();
    assert!(holding(&servers, "rl:down").is_empty());

    servers[4].kill();
    let started = Instant::now();
    let err = lock.lock().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded: {:?}",
        started.elapsed()
    );
    let Error::NoQuorum {
        needed,
        votes,
        phase,
        ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!((*needed, votes.len()), (3, 5));
    assert_eq!(*phase, redis_locks::Phase::Acquire);
    for (index, vote) in votes.iter().enumerate() {
        let down = [1, 3, 4].contains(&index);
        assert_eq!(
            matches!(vote.vote, Vote::Failed(_) | Vote::TimedOut),
            down,
            "node {index}: {vote}"
        );
    }
    assert!(
        holding(&servers, "rl:down").is_empty(),
        "the two grants were released"
    );
}

#[tokio::test]
async fn a_paused_node_costs_at_most_the_node_timeout() {
    let (servers, clients) = nodes(5).await;
    // A long lease: the acquire must not wait anything like it.
    let lock = Redlock::with_options(&clients, "rl:paused", options(20_000, 300)).unwrap();
    servers[0].pause();
    servers[2].pause();
    let started = Instant::now();
    let guard = lock.try_lock().await.expect("3 live nodes grant");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let released = Instant::now();
    guard.release().await.unwrap();
    assert!(released.elapsed() < Duration::from_secs(2));
    servers[0].resume();
    servers[2].resume();
    // The paused nodes' queued requests land now: the acquire, then its release.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            holding(&servers, "rl:paused").is_empty()
        })
        .await,
        "no key left behind on the nodes that were paused"
    );
}

/// Runs `resume` 300 ms from now beside `lock.settle()` (bounded by 10 s: within the node
/// timeout) and says whether settle returned only after `resume` ran.
async fn settled_after(lock: &Redlock, resume: impl FnOnce()) -> bool {
    let resumed = std::sync::atomic::AtomicBool::new(false);
    let resume = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        resumed.store(true, std::sync::atomic::Ordering::SeqCst);
        resume();
    };
    let settle = async {
        tokio::time::timeout(Duration::from_secs(10), lock.settle())
            .await
            .expect("settles within the node timeout");
        resumed.load(std::sync::atomic::Ordering::SeqCst)
    };
    let ((), settled_after_resume) = tokio::join!(resume, settle);
    settled_after_resume
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_waits_for_the_releases_left_to_the_background() {
    let (servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:settle", options(20_000, 5_000)).unwrap();
    let guard = lock.try_lock().await.expect("every node grants");
    // The attempt ends at the majority (a late node's request may never be written).
    assert!(holding(&servers, "rl:settle").len() >= 3);
    // Nothing is left running yet: settle returns at once (bounded by the test's timeout).
    tokio::time::timeout(Duration::from_secs(10), lock.settle())
        .await
        .expect("nothing in the background");
    servers[4].pause();
    guard
        .release()
        .await
        .expect("four nodes release: a majority");
    // The paused node's release is still under way; the node is resumed after a while, and
    // settle must not return before that.
    assert!(
        settled_after(&lock, || servers[4].resume()).await,
        "settle returned while the paused node's release was still under way"
    );
    assert!(
        holding(&servers, "rl:settle").is_empty(),
        "every node released, the paused one too, by the time settle returned"
    );
}

#[tokio::test]
async fn settle_waits_for_the_release_of_a_dropped_guard() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:settle-drop", options(20_000, 5_000)).unwrap();
    let guard = lock.try_lock().await.expect("every node grants");
    assert!(
        holding(&servers, "rl:settle-drop").len() >= 2,
        "a majority holds"
    );
    // Dropped without release(): the lease core releases in a task of its own, which on this
    // current-thread runtime has not even started when settle is called.
    drop(guard);
    tokio::time::timeout(Duration::from_secs(10), lock.settle())
        .await
        .expect("settles within the node timeout");
    assert!(
        holding(&servers, "rl:settle-drop").is_empty(),
        "settle returned before the dropped guard's release was done"
    );
}

#[tokio::test]
async fn settle_waits_for_the_release_owed_by_a_cancelled_acquire() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:settle-cancel", options(20_000, 5_000)).unwrap();
    // One acquisition first, so that the scripts are loaded (that step asks no lease).
    lock.try_lock().await.unwrap().release().await.unwrap();
    lock.settle().await;
    // Every node paused: the acquire's requests are written but not answered, and the acquire
    // is cancelled meanwhile; the release it owes goes out in the background. The nodes are
    // resumed a while later (they then grant, and release), and settle must not return before.
    for server in &servers {
        server.pause();
    }
    let cancelled = tokio::time::timeout(Duration::from_millis(100), lock.try_lock()).await;
    assert!(cancelled.is_err(), "no node can answer: {cancelled:?}");
    let resume_all = || {
        for server in &servers {
            server.resume();
        }
    };
    assert!(
        settled_after(&lock, resume_all).await,
        "settle returned while the cancelled acquire's release was still under way"
    );
    assert!(
        holding(&servers, "rl:settle-cancel").is_empty(),
        "the release reached every node by the time settle returned"
    );
}

#[tokio::test]
async fn a_key_lost_on_one_node_does_not_let_a_second_holder_in() {
    let (servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:lost-key", options(5_000, 200)).unwrap();
    let guard = lock.try_lock().await.unwrap();
    let held_on = holding(&servers, "rl:lost-key");
    assert!(held_on.len() >= 3);
    // A node restarted without persistence forgets the key: simulated by deleting it.
    redis::cmd("DEL")
        .arg("rl:lost-key")
        .exec(&mut common::raw(&servers[held_on[0]]))
        .unwrap();
    let err = lock.try_lock().await.unwrap_err();
    assert!(err.is_held(), "{err:?}");
    assert_eq!(
        get(&servers[held_on[0]], "rl:lost-key"),
        None,
        "the refused attempt released what it got"
    );
    // The holder still proves a majority: it can extend, and release.
    guard.extend(Duration::from_secs(5)).await.unwrap();
    guard.release().await.unwrap();
}

/// Takes the lock, trying again (for at most 5 s) while nodes that were just restarted make
/// attempts fail with `NoQuorum` (their clients reconnect on the first failed request).
async fn retry_no_quorum(lock: &Redlock) -> redis_locks::RedlockGuard {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match lock.lock_timeout(Duration::from_secs(5)).await {
            Ok(guard) => return guard,
            Err(Error::NoQuorum { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(err) => panic!("{err:?}"),
        }
    }
}

/// Checks that `guard`'s fencing token is above `before`, and releases it.
async fn released_above(guard: redis_locks::RedlockGuard, before: u64) {
    let token = guard.fencing_token().get();
    assert!(token > before, "{token} after {before}");
    guard.release().await.unwrap();
}

/// The fencing counter of `key`'s lock on `server` (0 when absent).
fn counter(server: &RedisServer, fence: &str) -> u64 {
    get(server, fence).map_or(0, |value| value.parse().unwrap())
}

#[tokio::test]
async fn the_token_is_raised_on_the_granting_majority_and_outlives_the_node_it_came_from() {
    let (mut servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:raise", options(5_000, 300)).unwrap();
    let fence = lock.keys().fence().to_string();
    // Nodes 0 and 1 down: exactly 2, 3 and 4 must grant. Node 2's counter is far ahead of the
    // clock (as after grants the others never saw); 3 and 4 have none.
    servers[0].kill();
    servers[1].kill();
    let ahead: u64 = 1 << 52;
    redis::cmd("SET")
        .arg(&fence)
        .arg(ahead)
        .exec(&mut common::raw(&servers[2]))
        .unwrap();
    let first = lock.try_lock().await.unwrap();
    let token = first.fencing_token().get();
    // (On these new connections the script numbers each grant after the pipeline's INCR.)
    assert!(token > ahead, "the greatest token of the majority: {token}");
    for (index, server) in servers.iter().enumerate().skip(2) {
        assert!(
            counter(server, &fence) >= token,
            "node {index}'s counter was raised to the token"
        );
    }
    first.release().await.unwrap();
    // Node 2, the only one that counted that far, restarts without its data: the raise on 3
    // and 4 keeps the next token above it.
    servers[2].restart().unwrap();
    // The first request to the restarted node finds its old connection broken (with 0 and 1
    // down, that is no majority: `NoQuorum` at once); the client reconnects.
    released_above(retry_no_quorum(&lock).await, token).await;
}

#[tokio::test]
async fn tokens_increase_across_a_minority_restarting_without_data() {
    let (mut servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:restarts", options(2_000, 300)).unwrap();
    let mut last = 0;
    for round in 0..8 {
        let guard = retry_no_quorum(&lock).await;
        let token = guard.fencing_token().get();
        assert!(token > last, "round {round}: {token} after {last}");
        last = token;
        guard.release().await.unwrap();
        // A minority (two of five, a different pair each round) loses its data.
        for index in [round % 5, (round + 2) % 5] {
            servers[index].restart().unwrap();
        }
    }
}

#[tokio::test]
async fn a_refused_attempt_leaves_no_key_on_any_node() {
    let (servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:clean", options(5_000, 200)).unwrap();
    // Another owner holds three nodes.
    for server in &servers[..3] {
        redis::cmd("SET")
            .arg("rl:clean")
            .arg("someone-else")
            .arg("PX")
            .arg(5_000)
            .exec(&mut common::raw(server))
            .unwrap();
    }
    let err = lock.try_lock().await.unwrap_err();
    assert!(err.is_held(), "{err:?}");
    assert!(
        err.retry_after()
            .is_some_and(|left| left <= Duration::from_secs(5))
    );
    for (index, server) in servers.iter().enumerate() {
        let value = get(server, "rl:clean");
        if index < 3 {
            assert!(value.is_some_and(|value| value.starts_with("someone-else")));
        } else {
            assert_eq!(value, None, "node {index} keeps nothing of the attempt");
        }
    }
}

#[tokio::test]
async fn quorum_is_exact_for_every_subset_of_paused_nodes() {
    let (servers, clients) = nodes(5).await;
    for paused in 0u32..32 {
        let down: Vec<usize> = (0..5).filter(|index| paused & (1 << index) != 0).collect();
        let name = format!("rl:subset:{paused}");
        let lock = Redlock::with_options(&clients, &name, options(3_000, 100)).unwrap();
        for index in &down {
            servers[*index].pause();
        }
        let started = Instant::now();
        let outcome = lock.try_lock().await;
        let took = started.elapsed();
        for index in &down {
            servers[*index].resume();
        }
        assert!(
            took < Duration::from_secs(2),
            "subset {down:?} took {took:?}"
        );
        let free = 5 - down.len();
        match outcome {
            Ok(guard) => {
                assert!(free >= 3, "granted with only {free} live nodes");
                guard.release().await.unwrap();
            }
            Err(Error::NoQuorum { .. }) => assert!(free < 3, "refused with {free} live nodes"),
            Err(err) => panic!("subset {down:?}: {err:?}"),
        }
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                holding(&servers, &name).is_empty()
            })
            .await,
            "subset {down:?}: keys left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_no_key_behind() {
    let (servers, clients) = nodes(5).await;
    // A lease far longer than the wait below: the keys must go by the background release of
    // each cancelled call (or dropped guard), not by their expiry.
    let lock = Redlock::with_options(&clients, "rl:cancel", options(30_000, 200)).unwrap();
    let mut granted = 0;
    for round in 0u64..40 {
        let cut = Duration::from_micros((round * 97) % 3_000);
        let attempt = lock.lock();
        if let Ok(Ok(_guard)) = tokio::time::timeout(cut, attempt).await {
            granted += 1;
        }
    }
    assert!(granted < 40, "some calls were cut before their grant");
    assert!(
        common::eventually(Duration::from_secs(3), || async {
            holding(&servers, "rl:cancel").is_empty()
        })
        .await,
        "keys left: {:?}",
        holding(&servers, "rl:cancel")
    );
    let guard = lock.try_lock().await.expect("the lock is free again");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_renews_on_a_majority_and_loss_is_signalled() {
    let (mut servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:watchdog", renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(guard.lost_reason(), None, "renewed past its first lease");
    let held_on = holding(&servers, "rl:watchdog");
    assert!(held_on.len() >= 2);
    // One node down, one whose loss leaves the key on a majority (a node that answered
    // after the decision, on a loaded machine, may not hold it): still a majority.
    let first_down = (0..3).find(|index| !held_on.contains(index)).unwrap_or(2);
    servers[first_down].kill();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(guard.lost_reason(), None, "two of three still renew");
    // A second node down: no majority can be proven any more.
    let second_down = (0..3).find(|index| *index != first_down).unwrap();
    servers[second_down].kill();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost() fires within the lease");
    assert_eq!(reason, LostReason::LeaseEnded);
    assert!(matches!(
        guard.release().await.unwrap_err(),
        Error::NoQuorum { .. }
    ));
}

/// The value of `key` on every node (None where it is absent).
fn values(servers: &[RedisServer], key: &str) -> Vec<Option<String>> {
    servers.iter().map(|server| get(server, key)).collect()
}

/// A lease of 1 s renewed by the watchdog every third of a second; a node has 300 ms to
/// answer (room for a loaded machine).
fn renewed() -> RedlockOptions {
    options(1_000, 300).watchdog(true)
}

/// Waits until every node holds `key` with one and the same owner token, and returns it.
async fn until_every_node_holds(servers: &[RedisServer], key: &str) -> String {
    until_every_node(servers, "one holder's key", |server| {
        let value = get(server, key);
        value.is_some() && value == get(&servers[0], key)
    })
    .await;
    get(&servers[0], key).expect("held")
}

/// Releases `guard`, which must never have been lost, settles `lock`, and checks that no
/// node keeps `key`.
async fn release_everywhere(
    lock: &Redlock,
    guard: RedlockGuard,
    servers: &[RedisServer],
    key: &str,
) {
    assert_eq!(guard.lost_reason(), None, "renewed all along");
    guard.release().await.unwrap();
    lock.settle().await;
    assert!(
        holding(servers, key).is_empty(),
        "{:?}",
        values(servers, key)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_the_key_gets_it_back_at_the_next_renewal() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:restore", renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    let owner = until_every_node_holds(&servers, "rl:restore").await;
    // Node 0 loses the key (a restart without its data, simulated).
    redis::cmd("DEL")
        .arg("rl:restore")
        .exec(&mut common::raw(&servers[0]))
        .unwrap();
    // A renewal later (a majority still proves the lock), node 0 holds it again, for this
    // owner, with a lease.
    assert_eq!(until_every_node_holds(&servers, "rl:restore").await, owner);
    assert!(common::pttl(&servers[0], "rl:restore") > 0);
    release_everywhere(&lock, guard, &servers, "rl:restore").await;
}

/// A real restart without persistence of node 0 while a renewed lock over `clients` holds
/// `key`: the node comes back empty, on a broken connection, and gets the holder's key back.
async fn a_restarted_node_gets_the_key_back(
    servers: &mut [RedisServer],
    clients: &[Client],
    key: &str,
) {
    let lock = Redlock::with_options(clients, key, renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    let owner = until_every_node_holds(servers, key).await;
    servers[0].restart().unwrap();
    assert_eq!(until_every_node_holds(servers, key).await, owner);
    release_everywhere(&lock, guard, servers, key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_gets_the_key_back() {
    // The test clients' default options: reconnect attempts.
    let (mut servers, clients) = nodes(3).await;
    a_restarted_node_gets_the_key_back(&mut servers, &clients, "rl:restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_under_node_options_gets_the_key_back() {
    // No reconnect attempts: the restarted node's first request finds the broken connection,
    // and a later renewal restores the key.
    let mut servers = test_support::start_many(3).unwrap();
    let nodes = Redlock::connect_nodes(&urls(&servers)).await.unwrap();
    a_restarted_node_gets_the_key_back(&mut servers, &nodes.clients, "rl:restart-0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_right_after_a_restoring_extend_leaves_nothing() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:restore-order", options(5_000, 300)).unwrap();
    // The restore an extend sends in the background is on the node's connection (or waited
    // for) before the release: nothing may be left behind, round after round.
    for round in 0..30 {
        let guard = lock.lock().await.unwrap();
        let held = holding(&servers, "rl:restore-order");
        assert!(held.len() >= 2, "a majority holds: {held:?}");
        // One node without the key: delete it on node 0 when every node has it (a late node's
        // acquire may never have been written, and then that node is the one).
        if held.len() == 3 {
            redis::cmd("DEL")
                .arg("rl:restore-order")
                .exec(&mut common::raw(&servers[0]))
                .unwrap();
        }
        guard.extend(Duration::from_secs(5)).await.unwrap();
        guard.release().await.unwrap();
        lock.settle().await;
        assert_eq!(
            values(&servers, "rl:restore-order"),
            vec![None, None, None],
            "round {round}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_the_key_gone_on_a_majority_restores_nothing() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:no-restore", renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    until_every_node_holds(&servers, "rl:no-restore").await;
    // A majority loses the key: the next renewal proves nothing, and puts nothing back (a
    // lost lock's key would block the others for a whole lease). A renewal between the two
    // deletions would still prove the lock (and restore the first key), so they are repeated
    // until the loss; none comes after it.
    let lost = guard.lost();
    tokio::pin!(lost);
    let started = Instant::now();
    let reason = loop {
        for server in &servers[..2] {
            redis::cmd("DEL")
                .arg("rl:no-restore")
                .exec(&mut common::raw(server))
                .unwrap();
        }
        tokio::select! {
            reason = &mut lost => break reason,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "lost() fires at the next renewal"
        );
    };
    assert_eq!(reason, LostReason::Expired);
    lock.settle().await;
    let left = values(&servers, "rl:no-restore");
    assert_eq!(&left[..2], &[None, None], "nothing restored: {left:?}");
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

#[tokio::test]
async fn connect_nodes_goes_on_at_once_without_a_node_that_refuses() {
    let mut servers = test_support::start_many(3).unwrap();
    servers[2].kill();
    let started = std::time::Instant::now();
    let nodes = Redlock::connect_nodes(&urls(&servers)).await.unwrap();
    // Refused is down at once: no reconnect attempts, no grace.
    assert!(
        started.elapsed() < NODE_GRACE,
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(nodes.starts[0], NodeStart::Connected));
    assert!(matches!(nodes.starts[1], NodeStart::Connected));
    assert!(
        matches!(&nodes.starts[2], NodeStart::Down(err) if err.is_connection()),
        "{:?}",
        nodes.starts[2]
    );
    let lock = Redlock::new(&nodes.clients, "rl:connect-down").unwrap();
    lock.try_lock().await.unwrap().release().await.unwrap();
    // The down node's release fails at once: settle does not wait for its node timeout.
    tokio::time::timeout(Duration::from_millis(500), lock.settle())
        .await
        .expect("a refused request ends at once");
}

#[tokio::test]
async fn connect_nodes_refuses_a_node_list_that_cannot_be_a_quorum_before_connecting() {
    let mut servers = test_support::start_many(3).unwrap();
    servers[0].kill();
    let urls = urls(&servers);
    let none: [&str; 0] = [];
    for bad in [
        &none[..],
        &[urls[1].as_str(), urls[2].as_str()][..],
        // A node given twice, one of them down: still bad usage, not "unreachable".
        &[urls[0].as_str(), urls[0].as_str(), urls[1].as_str()][..],
    ] {
        let err = Redlock::connect_nodes(bad).await.unwrap_err();
        assert!(
            matches!(err, Error::InvalidNodes { .. }),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_at_the_start_gets_the_key_once_it_is_back() {
    let mut servers = test_support::start_many(3).unwrap();
    servers[2].kill();
    let nodes = Redlock::connect_nodes(&urls(&servers)).await.unwrap();
    assert!(matches!(nodes.starts[2], NodeStart::Down(_)));
    let lock = Redlock::with_options(&nodes.clients, "rl:down-back", renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    servers[2].restart().unwrap();
    until_every_node_holds(&servers, "rl:down-back").await;
    release_everywhere(&lock, guard, &servers, "rl:down-back").await;
}

#[tokio::test]
async fn connect_nodes_without_a_majority_names_every_nodes_state() {
    let mut servers = test_support::start_many(3).unwrap();
    servers[0].kill();
    servers[2].kill();
    let urls = urls(&servers);
    let err = Redlock::connect_nodes(&urls).await.unwrap_err();
    let Error::NoQuorum {
        phase,
        needed,
        votes,
        ..
    } = &err
    else {
        panic!("expected NoQuorum, got {err:?}");
    };
    assert_eq!((*phase, *needed, votes.len()), (Phase::Connect, 2, 3));
    for (vote, url) in votes.iter().zip(&urls) {
        assert_eq!(&vote.url, url);
    }
    // Both dead nodes failed with their connection error; the live one connected, or was
    // still connecting when the second failure decided.
    for down in [0, 2] {
        assert!(
            matches!(&votes[down].vote, Vote::Failed(err) if err.is_connection()),
            "{:?}",
            votes[down]
        );
    }
    assert!(
        matches!(votes[1].vote, Vote::Granted | Vote::Pending),
        "{:?}",
        votes[1]
    );
    let message = err.to_string();
    assert!(
        message.starts_with("connect needs 2 of 3 nodes"),
        "{message}"
    );
    for url in &urls {
        assert!(message.contains(url.as_str()), "{url} in {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_late_at_the_start_gets_the_key_at_a_renewal() {
    let servers = test_support::start_many(3).unwrap();
    servers[1].pause();
    let started = std::time::Instant::now();
    let nodes = Redlock::connect_nodes(&urls(&servers)).await.unwrap();
    let took = started.elapsed();
    // A paused server accepts the connection and answers nothing: late after the grace.
    assert!(
        matches!(nodes.starts[1], NodeStart::Late),
        "{:?}",
        nodes.starts[1]
    );
    assert!(took >= NODE_GRACE, "took {took:?}");
    assert!(took < NODE_GRACE + Duration::from_secs(5), "took {took:?}");
    // The lock is taken on the other two alone (the late node still answers nothing); once
    // it answers, a renewal puts the key there too.
    let lock = Redlock::with_options(&nodes.clients, "rl:late", renewed()).unwrap();
    let guard = lock.lock().await.unwrap();
    servers[1].resume();
    until_every_node_holds(&servers, "rl:late").await;
    release_everywhere(&lock, guard, &servers, "rl:late").await;
}

#[tokio::test]
async fn a_release_after_the_lease_says_the_lock_is_gone() {
    let (_servers, clients) = nodes(3).await;
    // A node timeout that holds on a loaded machine (10 ms did not: all three nodes timed out).
    let lock = Redlock::with_options(&clients, "rl:expired", options(400, 150)).unwrap();
    let guard = lock.try_lock().await.unwrap();
    // Free once the lease (no watchdog) has ended on a majority.
    let deadline = Instant::now() + Duration::from_secs(5);
    let other = loop {
        match lock.try_lock().await {
            Ok(other) => break other,
            Err(err) if err.is_held() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(err) => panic!("free after the lease: {err:?}"),
        }
    };
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotHeld {
                reason: LostReason::Taken,
                ..
            }
        ),
        "{err:?}"
    );
    other.release().await.unwrap();
}

#[tokio::test]
async fn one_node_is_a_plain_lock_and_bad_node_sets_are_refused() {
    let (servers, clients) = nodes(3).await;
    let single = Redlock::new(&clients[..1], "rl:single").unwrap();
    let guard = single.try_lock().await.unwrap();
    assert!(single.try_lock().await.unwrap_err().is_held());
    guard.release().await.unwrap();

    for bad in [&clients[..0], &clients[..2]] {
        let err = Redlock::new(bad, "rl:bad").unwrap_err();
        assert!(matches!(err, Error::InvalidNodes { .. }), "{err:?}");
    }
    let twice = [clients[0].clone(), clients[1].clone(), clients[0].clone()];
    let err = Redlock::new(&twice, "rl:bad").unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");
    // The same server by another name is the same server.
    let port = servers[0].port();
    let alias = Client::connect(&format!("redis://localhost:{port}/0"))
        .await
        .unwrap();
    let aliased = [clients[0].clone(), clients[1].clone(), alias];
    let err = Redlock::new(&aliased, "rl:bad").unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");
    let three = &clients[..3];
    for (options, what) in [
        (options(100, 0), "zero node timeout"),
        (options(100, 100), "node timeout not below the lease"),
        (
            RedlockOptions::default().lease(Duration::ZERO),
            "zero lease",
        ),
    ] {
        let err = Redlock::with_options(three, "rl:bad", options).unwrap_err();
        assert!(
            matches!(err, Error::InvalidDuration { .. }),
            "{what}: {err:?}"
        );
    }
    assert!(matches!(
        Redlock::new(three, "").unwrap_err(),
        Error::InvalidName { .. }
    ));
}

#[tokio::test]
async fn state_shows_each_node_and_the_majority_holder() {
    let (mut servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:state", options(5_000, 200)).unwrap();
    let state = lock.state().await.unwrap();
    assert_eq!(
        (state.quorum, state.nodes.len(), state.holder()),
        (2, 3, None)
    );
    let guard = lock.try_lock().await.unwrap();
    // A node down, one whose loss leaves the lock on a majority.
    let held_on = holding(&servers, "rl:state");
    let down = (0..3).find(|index| !held_on.contains(index)).unwrap_or(2);
    servers[down].kill();
    let state = lock.state().await.unwrap();
    assert_eq!(state.holder(), Some(guard.owner_token().as_str()));
    assert!(state.nodes[down].state.is_err());
    assert!(state.fencing_counter().unwrap() >= guard.fencing_token());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_raise_is_sent_only_when_the_granting_nodes_disagree() {
    let (mut servers, clients) = nodes(5).await;
    let lock = Redlock::with_options(&clients, "rl:requests", options(5_000, 300)).unwrap();
    // The first attempts load the scripts and name each connection (the script numbers a
    // grant once per node and connection); then the counters agree (every first attempt
    // increments every node it reaches) and no raise is sent: an acquisition and its release
    // are one request per node each, give or take those first scripts.
    // Counted on the servers, as scripts run: twenty releases on each node, the scripts that
    // vouch for a counter the first time a node's grant counts on a connection, and no raise
    // (a raise in every acquisition would be at least two more scripts each). A request whose
    // reply is no longer awaited may never be written (redis-rs skips it), so the client's
    // own request count would also count scripts that never ran.
    cycles(&lock, &servers, 10).await;
    let before: u64 = servers.iter().map(script_calls).sum();
    cycles(&lock, &servers, 20).await;
    let ran = servers.iter().map(script_calls).sum::<u64>() - before;
    assert!(
        ran <= 5 * 20 + 10,
        "{ran} scripts for 20 acquisitions and releases"
    );
    // With 0 and 1 down, 2, 3 and 4 must grant; node 2 far ahead: its token wins, and 3 and 4
    // are raised to it before the guard is handed out.
    servers[0].kill();
    servers[1].kill();
    let ahead: u64 = 1 << 51;
    let fence = lock.keys().fence().to_string();
    redis::cmd("SET")
        .arg(&fence)
        .arg(ahead)
        .exec(&mut common::raw(&servers[2]))
        .unwrap();
    let second = lock.try_lock().await.unwrap();
    let token = second.fencing_token().get();
    assert!(token > ahead, "{token}");
    for (index, server) in servers.iter().enumerate().skip(2) {
        assert!(counter(server, &fence) >= token, "node {index}");
    }
    second.release().await.unwrap();
}

#[tokio::test]
async fn the_validity_keeps_back_the_configured_drift_allowance() {
    let (_servers, clients) = nodes(3).await;
    let lease = Duration::from_millis(1_000);
    let drift = redis_locks::ClockDrift::new(0.4, Duration::from_millis(100)).unwrap();
    let options = options(1_000, 100).clock_drift(drift);
    let lock = Redlock::with_options(&clients, "rl:drift", options).unwrap();
    let guard = lock.try_lock().await.unwrap();
    // The validity: the lease, less the time the attempt took, less 40% + 100 ms.
    assert!(guard.lease_remaining() <= lease - drift.allowance(lease));
    guard.release().await.unwrap();
    // An allowance that takes the whole lease leaves nothing to count on: refused.
    let greedy = redis_locks::ClockDrift::new(0.5, Duration::from_millis(600)).unwrap();
    let err = Redlock::with_options(
        &clients,
        "rl:drift",
        RedlockOptions::default().lease(lease).clock_drift(greedy),
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_first_waiting_process_alone() {
    let servers = test_support::start_many(3).expect("start private redis-servers");
    // A waiter that is not woken still looks again every 2 s (in case a wake-up was lost); on
    // a loaded machine that look may fall on the release. So a round disturbed that way is
    // run again (a herd, where every waiter is woken, fails every round).
    let mut failures = Vec::new();
    for round in 0..3 {
        match wake_round(&servers, &format!("rl:wakeups:{round}")).await {
            Ok(()) => return,
            Err(failure) => failures.push(failure),
        }
    }
    panic!("every round failed: {failures:?}");
}

/// One round of [`a_release_wakes_the_first_waiting_process_alone`] on the lock `name`.
async fn wake_round(servers: &[RedisServer], name: &str) -> Result<(), String> {
    // A long place lease: no waiter renews its place during the test.
    let options = || {
        options(10_000, 500).lock_options(
            redis_locks::LockOptions::default()
                .lease(Duration::from_secs(10))
                .place_lease(Duration::from_secs(30)),
        )
    };
    let mut sets = Vec::new();
    for _ in 0..4 {
        let mut clients = Vec::new();
        for server in servers {
            clients.push(common::client(server).await);
        }
        sets.push(clients);
    }
    let locks: Vec<Redlock> = sets
        .iter()
        .map(|clients| Redlock::with_options(clients, name, options()).unwrap())
        .collect();
    let holder = locks[0].try_lock().await.unwrap();
    let queue = locks[0].keys().queue().to_string();
    let in_line = |n: i64| {
        let (server, queue) = (&servers[0], queue.clone());
        async move {
            redis::cmd("ZCARD")
                .arg(&queue)
                .query::<i64>(&mut common::raw(server))
                .unwrap()
                == n
        }
    };
    // Three waiting processes (a client set each), in line one after the other.
    let mut waiters = Vec::new();
    for (n, lock) in locks.iter().enumerate().skip(1) {
        let lock = lock.clone();
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (n, guard)
        }));
        assert!(
            common::eventually(Duration::from_secs(5), || in_line(n as i64)).await,
            "waiter {n} in line"
        );
    }
    let requests = |n: usize| -> u64 { sets[n].iter().map(|c| c.stats().requests).sum() };
    // In line, and settled: no waiter sends anything any more (a subscription's confirmation
    // may still be on its way when the place is taken).
    let mut before: Vec<u64> = (1..4).map(requests).collect();
    let settled = Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now: Vec<u64> = (1..4).map(requests).collect();
        if now == before {
            break;
        }
        assert!(Instant::now() < settled, "the waiters keep sending");
        before = now;
    }
    holder.release().await.unwrap();
    let (winner, guard) = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            for waiter in &mut waiters {
                if waiter.is_finished() {
                    return waiter.await.unwrap();
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("a waiter takes the lock");
    // Read before the others are let in.
    let sent: Vec<u64> = (2..4).map(|n| requests(n) - before[n - 1]).collect();
    guard.release().await.unwrap();
    for waiter in waiters {
        if !waiter.is_finished() {
            let (_, guard) = waiter.await.unwrap();
            guard.release().await.unwrap();
        }
    }
    if winner != 1 {
        return Err(format!(
            "waiter {winner} took the lock, not the longest waiter"
        ));
    }
    if sent != [0, 0] {
        return Err(format!("waiters 2 and 3 were not woken but sent {sent:?}"));
    }
    Ok(())
}

#[tokio::test]
async fn a_waiter_the_first_node_cannot_wake_polls_at_the_retry_delay_and_reports_the_lease() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:unmarked", options(10_000, 200)).unwrap();
    // Another owner holds the first node for a moment: the holder gets the other two only.
    redis::cmd("SET")
        .arg("rl:unmarked")
        .arg("someone-else")
        .arg("PX")
        .arg(150)
        .exec(&mut common::raw(&servers[0]))
        .unwrap();
    let holder = lock.try_lock().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            !common::exists(&servers[0], "rl:unmarked")
        })
        .await
    );
    // A waiter now gets the first node but never a majority, and no release of the first
    // node will wake it: it looks again at about the retry delay (25 ms), not in a tight
    // loop, and reports the holder's lease, not its own pause.
    let before: u64 = clients.iter().map(|c| c.stats().requests).sum();
    let err = lock
        .lock_timeout(Duration::from_millis(500))
        .await
        .unwrap_err();
    let sent: u64 = clients.iter().map(|c| c.stats().requests).sum::<u64>() - before;
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err:?}");
    let left = err.retry_after().expect("the holder's lease is known");
    assert!(left > Duration::from_secs(5), "reported {left:?}");
    // At most one attempt (3 acquires + a release) per 12.5 ms, the shortest pause.
    assert!(sent <= 4 * 45, "{sent} requests in 500 ms");
    holder.release().await.unwrap();
}

#[tokio::test]
async fn a_node_down_at_start_joins_in_once_it_is_back() {
    let (mut servers, mut clients) = nodes(3).await;
    // The process starts while the third server is down: its client connects lazily.
    servers[2].kill();
    clients[2] = Client::connect_lazy(
        &servers[2].url(),
        redis_locks::ClientOptions::default()
            .connect_timeout(Duration::from_millis(200))
            .reconnect_attempts(0),
    )
    .unwrap();
    let lock = Redlock::with_options(&clients, "rl:lazy", options(5_000, 300)).unwrap();
    let guard = lock.try_lock().await.expect("two of three grant");
    assert_eq!(holding(&servers, "rl:lazy"), vec![0, 1]);
    guard.release().await.unwrap();
    // Back (empty, on the same port): the next attempts reach it too.
    servers[2].restart().unwrap();
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            let guard = lock.try_lock().await.unwrap();
            let all = holding(&servers, "rl:lazy").len() == 3;
            guard.release().await.unwrap();
            all
        })
        .await,
        "the node that came back holds the lock with the others"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_with_a_node_down_returns_within_about_the_node_timeout() {
    let (mut servers, mut clients) = nodes(3).await;
    // The process starts while the third server is down: its client connects lazily and keeps
    // trying to reconnect for far longer than the node timeout (1 s).
    servers[2].kill();
    let patient = redis_locks::ClientOptions::default().reconnect_attempts(30);
    clients[2] = Client::connect_lazy(&servers[2].url(), patient).unwrap();
    let lock = Redlock::with_options(&clients, "rl:settle-down", options(60_000, 1_000)).unwrap();
    let guard = lock.lock().await.expect("two of three grant");
    guard.release().await.expect("two of three release");
    // The release sent to the node that is down waits for a reconnect, but no longer than the
    // node timeout: settle ends with it, not with the client's reconnect attempts.
    tokio::time::timeout(Duration::from_secs(10), lock.settle())
        .await
        .expect("settle is bounded by the node timeout");
    assert!(holding(&servers, "rl:settle-down").is_empty());
}

#[tokio::test]
async fn a_node_that_answers_after_the_decision_still_takes_the_first_grant() {
    let (servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:late", options(10_000, 100)).unwrap();
    // Fresh servers: no script loaded yet. The third node answers only after the decision.
    servers[2].pause();
    let guard = lock.try_lock().await.unwrap();
    assert_eq!(holding(&servers[..2], "rl:late"), vec![0, 1]);
    servers[2].resume();
    // Its queued requests run now: the scripts were loaded before the attempt, so its grant
    // lands too (it would otherwise fail with NOSCRIPT, its fallback never sent), and the
    // lock stands on all three nodes.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            holding(&servers, "rl:late").len() == 3
        })
        .await,
        "the late node holds the key: {:?}",
        holding(&servers, "rl:late")
    );
    guard.release().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            holding(&servers, "rl:late").is_empty()
        })
        .await
    );
}

/// How many scripts (`EVALSHA`, `EVAL` and `FCALL`) `server` has run.
fn script_calls(server: &RedisServer) -> u64 {
    common::command_calls(server, &["evalsha", "eval", "fcall"])
}

/// Waits (at most 10 s) until `holds` says so of every node. A node that was down comes back
/// into its client's reach only at the client's next reconnect attempt, whose backoff grows
/// while the node is away (up to about 5 s seen on a loaded machine, Valkey).
async fn until_every_node(
    servers: &[RedisServer],
    what: &str,
    holds: impl Fn(&RedisServer) -> bool,
) {
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            servers.iter().all(&holds)
        })
        .await,
        "not on every node in time: {what}"
    );
}

/// Acquires and releases `lock` `n` times, each release seen through on every live node.
async fn cycles(lock: &Redlock, servers: &[RedisServer], n: usize) {
    let key = lock.keys().lock().to_string();
    for _ in 0..n {
        lock.try_lock().await.unwrap().release().await.unwrap();
        let released =
            |server: &RedisServer| server.pid().is_none() || !common::exists(server, &key);
        until_every_node(servers, "released", released).await;
    }
}

#[tokio::test]
async fn a_first_attempt_runs_no_script_and_a_node_that_lost_its_counter_numbers_from_the_clock() {
    let (mut servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:pipeline", options(5_000, 300)).unwrap();
    let fence = lock.keys().fence().to_string();
    // Twenty acquisitions and releases: each release is a script on every node; an acquire
    // runs one only the first time on a connection (to vouch for its counter there).
    let before: Vec<u64> = servers.iter().map(script_calls).collect();
    cycles(&lock, &servers, 20).await;
    for (index, server) in servers.iter().enumerate() {
        let scripts = script_calls(server) - before[index];
        assert!(scripts <= 20 + 3, "node {index}: {scripts} scripts");
    }
    // Node 2 loses its counter (as in a restart without data), and node 0 is down, so node
    // 2's grant counts: it is numbered from the proposal, the client's clock, not counted on
    // from 1.
    redis::cmd("DEL")
        .arg(&fence)
        .exec(&mut common::raw(&servers[2]))
        .unwrap();
    servers[0].kill();
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let guard = lock.try_lock().await.unwrap();
    assert!(guard.fencing_token().get() > clock);
    assert!(
        counter(&servers[2], &fence) > clock,
        "numbered from the clock"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn keys_of_another_type_on_a_majority_are_typed_errors_and_leave_no_lock() {
    let (servers, clients) = nodes(3).await;
    // The lock key is a hash on nodes 0 and 1; then, for another name, the counter is not an
    // integer there.
    let lock = Redlock::with_options(&clients, "rl:wrongtype", options(5_000, 300)).unwrap();
    let counted = Redlock::with_options(&clients, "rl:badcounter", options(5_000, 300)).unwrap();
    for server in &servers[..2] {
        redis::cmd("HSET")
            .arg(lock.keys().lock())
            .arg("field")
            .arg("value")
            .exec(&mut common::raw(server))
            .unwrap();
        redis::cmd("SET")
            .arg(counted.keys().fence())
            .arg("not-a-number")
            .exec(&mut common::raw(server))
            .unwrap();
    }
    // A wait without a budget asks first without `PTTL` and `GET`: its refusal is followed
    // by the acquire script, which names the other type, so it ends in the same error too,
    // not in a wait for ever.
    let waits = [false, true];
    for (lock, wait) in [&lock, &counted]
        .into_iter()
        .flat_map(|lock| waits.map(|w| (lock, w)))
    {
        let err = if wait {
            tokio::time::timeout(Duration::from_secs(10), lock.lock())
                .await
                .expect("a typed error, not an endless wait")
                .unwrap_err()
        } else {
            lock.try_lock().await.unwrap_err()
        };
        let Error::NoQuorum { votes, .. } = &err else {
            panic!("{err:?}");
        };
        for vote in &votes[..2] {
            assert!(
                matches!(&vote.vote, Vote::Failed(err) if matches!(**err, Error::WrongType { .. })),
                "{} (waiting: {wait}): {err:?}",
                lock.name()
            );
        }
        // Whatever node 2 (or the others) granted is given back.
        let key = lock.keys().lock().to_string();
        let ours = |server: &RedisServer| {
            let kind: String = redis::cmd("TYPE")
                .arg(&key)
                .query(&mut common::raw(server))
                .unwrap();
            kind != "string"
        };
        until_every_node(&servers, "no lock key", ours).await;
    }
    // The other type's keys are untouched.
    for server in &servers[..2] {
        let kind: String = redis::cmd("TYPE")
            .arg(lock.keys().lock())
            .query(&mut common::raw(server))
            .unwrap();
        assert_eq!(kind, "hash");
        assert_eq!(
            get(server, counted.keys().fence()).as_deref(),
            Some("not-a-number")
        );
    }
}

#[tokio::test]
async fn a_node_back_with_an_old_counter_is_renumbered_from_the_clock_not_trusted() {
    let (mut servers, clients) = nodes(3).await;
    let lock = Redlock::with_options(&clients, "rl:oldcounter", options(5_000, 300)).unwrap();
    let fence = lock.keys().fence().to_string();
    let epoch = lock.keys().epoch().to_string();
    // Until node 1's connection has vouched for its counter (its epoch is written): an
    // attempt decided by the other two before node 1 was asked leaves none there, which a
    // busy machine makes likely.
    let vouched = Instant::now() + Duration::from_secs(10);
    loop {
        cycles(&lock, &servers, 3).await;
        if common::exists(&servers[1], &epoch) {
            break;
        }
        assert!(
            Instant::now() < vouched,
            "node 1 never vouched for its counter"
        );
    }
    let first = lock.try_lock().await.unwrap();
    let token = first.fencing_token().get();
    first.release().await.unwrap();
    // Node 1 restarts and comes back with an old counter and its epochs (as from an older
    // snapshot, or an AOF that lost its last second: the epochs name the old connection);
    // node 2's counter lags (as if it missed attempts), and node 0 is down: the next majority
    // is 1 and 2, and neither counted up to `token`. (The gaps leave room for the attempts
    // that find node 1's old connection broken: each advances node 2's counter.)
    let epochs: Vec<u8> = redis::cmd("DUMP")
        .arg(&epoch)
        .query(&mut common::raw(&servers[1]))
        .unwrap();
    assert!(!epochs.is_empty(), "node 1 vouched for its counter");
    servers[1].restart().unwrap();
    redis::cmd("RESTORE")
        .arg(&epoch)
        .arg(0)
        .arg(epochs)
        .exec(&mut common::raw(&servers[1]))
        .unwrap();
    let set = |server: &RedisServer, value: u64| {
        redis::cmd("SET")
            .arg(&fence)
            .arg(value)
            .exec(&mut common::raw(server))
            .unwrap();
    };
    set(&servers[1], token - 1_000);
    set(&servers[2], token - 500);
    servers[0].kill();
    // Node 1's connection is new (unnamed, or named anew): its counter is not vouched for,
    // and the script numbers the grant from the client's clock instead of counting on from
    // the old value.
    released_above(retry_no_quorum(&lock).await, token).await;
}

/// A client of its own on each of `servers` (a server that is down gets a client that
/// connects on its first request): what a contender in a process of its own has.
async fn own_clients(servers: &[RedisServer]) -> Vec<Client> {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    Redlock::connect_nodes(&urls).await.unwrap().clients
}

/// Contenders with a client each on `servers` take the lock `name` `rounds` times each,
/// holding `hold`; every holding is recorded. Returns the history and the requests all their
/// clients sent.
async fn contend_with_a_client_each(
    servers: &[RedisServer],
    name: &str,
    contenders: usize,
    rounds: usize,
) -> (Arc<History>, u64) {
    let history = Arc::new(History::default());
    let mut tasks = Vec::new();
    for worker in 0..contenders {
        let clients = own_clients(servers).await;
        let lock = Redlock::with_options(&clients, name, options(2_000, 200)).unwrap();
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lock.lock_timeout(Duration::from_secs(30)).await.unwrap();
                let start = now_nanos();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let end = now_nanos();
                history.record(Interval {
                    worker: format!("client-{worker}"),
                    token: guard.fencing_token().get(),
                    start,
                    end,
                });
                guard.release().await.unwrap();
            }
            lock.settle().await;
            clients
                .iter()
                .map(|client| client.stats().requests)
                .sum::<u64>()
        }));
    }
    let mut requests = 0;
    for task in tasks {
        requests += tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("no contender hangs")
            .unwrap();
    }
    (history, requests)
}

#[tokio::test]
async fn contenders_with_a_client_each_never_overlap_and_tokens_increase() {
    for nodes in [3, 5] {
        let servers = test_support::start_many(nodes).expect("start private redis-servers");
        let (history, requests) = contend_with_a_client_each(&servers, "rl:handed", 6, 12).await;
        let report = history.check();
        assert_eq!(report.acquisitions, 72);
        assert!(report.is_ok(), "{nodes} nodes: {report}: {report:?}");
        eprintln!(
            "{nodes} nodes: {:.2} requests per acquisition",
            requests as f64 / 72.0
        );
    }
}

#[tokio::test]
async fn with_a_node_down_contenders_with_a_client_each_still_take_turns() {
    // A node after the first, and then the first (whose wake-ups then never come: the waiters
    // look again at the retry delay, and a majority still decides).
    for down in [2, 0] {
        let mut servers = test_support::start_many(5).expect("start private redis-servers");
        servers[down].kill();
        let (history, _) = contend_with_a_client_each(&servers, "rl:down-handed", 4, 8).await;
        let report = history.check();
        assert_eq!(report.acquisitions, 32);
        assert!(report.is_ok(), "node {down} down: {report}: {report:?}");
    }
}

/// Waits until `waiters` waiter ids are registered for a handover of the lock `name` on every
/// one of `servers` (each waiting line is in the queue there with its owner token).
async fn registered_everywhere(servers: &[RedisServer], name: &str, waiters: usize) -> bool {
    let handover = format!("{{{name}}}:handover");
    common::eventually(Duration::from_secs(10), || {
        let handover = handover.clone();
        async move {
            servers.iter().all(|server| {
                redis::cmd("HLEN")
                    .arg(&handover)
                    .query::<usize>(&mut common::raw(server))
                    .unwrap()
                    == waiters
            })
        }
    })
    .await
}

/// Waits until a client's wake channel of the lock `name` is subscribed on every one of
/// `servers` (`PUBSUB CHANNELS {name}:wake*`): the waiter's subscription request was sent,
/// so it is counted in its client's requests.
async fn subscribed_everywhere(servers: &[RedisServer], name: &str) -> bool {
    let pattern = format!("{{{name}}}:wake*");
    common::eventually(Duration::from_secs(10), || {
        let pattern = pattern.clone();
        async move {
            servers.iter().all(|server| {
                !redis::cmd("PUBSUB")
                    .arg("CHANNELS")
                    .arg(&pattern)
                    .query::<Vec<String>>(&mut common::raw(server))
                    .unwrap()
                    .is_empty()
            })
        }
    })
    .await
}

/// The owner token that holds the lock key `name` on `server`, without the waiter mark.
fn holder_on(server: &RedisServer, name: &str) -> Option<String> {
    let value: Option<String> = redis::cmd("GET")
        .arg(name)
        .query(&mut common::raw(server))
        .unwrap();
    value.map(|value| value.trim_end_matches("+w").to_string())
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiter_in_line_on_every_node_without_a_new_vote() {
    for nodes in [3, 5] {
        let servers = test_support::start_many(nodes).expect("start private redis-servers");
        let name = "rl:hand-over";
        let holder =
            Redlock::with_options(&own_clients(&servers).await, name, options(5_000, 500)).unwrap();
        let waiter_clients = own_clients(&servers).await;
        let waiter = Redlock::with_options(&waiter_clients, name, options(5_000, 500)).unwrap();
        let held = holder.lock().await.unwrap();
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.lock_timeout(Duration::from_secs(30)).await }
        });
        assert!(
            registered_everywhere(&servers, name, 1).await,
            "in line on every node"
        );
        // Its wake-up subscriptions may still be on their way (they count as requests too;
        // once in a CI run one was counted after this point).
        assert!(
            subscribed_everywhere(&servers, name).await,
            "subscribed on every node"
        );
        let asked: u64 = waiter_clients.iter().map(|c| c.stats().requests).sum();
        let before = held.fencing_token();
        held.release().await.unwrap();
        let handed = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiter is handed the lock")
            .unwrap()
            .unwrap();
        let after: u64 = waiter_clients.iter().map(|c| c.stats().requests).sum();
        assert_eq!(
            after, asked,
            "{nodes} nodes: the waiter holds from the release's wake-ups alone, asking no node again"
        );
        assert!(handed.fencing_token() > before, "tokens increase");
        let owner = handed.owner_token().as_str().to_string();
        let holding_nodes = servers
            .iter()
            .filter(|server| holder_on(server, name).as_deref() == Some(owner.as_str()))
            .count();
        assert!(holding_nodes >= waiter.quorum(), "handed on a majority");
        assert_eq!(
            waiter.state().await.unwrap().holder(),
            Some(owner.as_str()),
            "a majority agrees on the new holder"
        );
        handed.release().await.unwrap();
        waiter.settle().await;
        assert!(holding(&servers, name).is_empty(), "released everywhere");
    }
}

#[tokio::test]
async fn a_waiter_frozen_after_being_handed_the_lock_blocks_others_only_for_its_place_lease() {
    let servers = test_support::start_many(3).expect("start private redis-servers");
    let name = "rl:frozen-waiter";
    let place_lease = Duration::from_millis(600);
    let short_places = RedlockOptions::default()
        .lock_options(
            redis_locks::LockOptions::default()
                .lease(Duration::from_secs(5))
                .place_lease(place_lease),
        )
        .node_timeout(Duration::from_millis(500));
    let holder =
        Redlock::with_options(&own_clients(&servers).await, name, options(5_000, 500)).unwrap();
    let held = holder.lock().await.unwrap();
    // The frozen waiter: its own clients on a runtime of its own, whose one thread is then
    // blocked (a process stopped by SIGSTOP, say): it gets in line everywhere, then takes no
    // step, so a handover reaches the servers but never this waiter.
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (freeze, frozen) = tokio::sync::oneshot::channel::<()>();
    let (thaw, thawed) = std::sync::mpsc::channel::<()>();
    let frozen_waiter = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let clients = Redlock::connect_nodes(&urls).await.unwrap().clients;
            let lock = Redlock::with_options(&clients, name, short_places).unwrap();
            let waiting =
                tokio::spawn(
                    async move { lock.lock_timeout(Duration::from_secs(30)).await.map(drop) },
                );
            // The waiter runs until the freeze; then this runtime's only thread blocks until
            // thawed.
            frozen.await.unwrap();
            thawed.recv().unwrap();
            waiting.abort();
        });
    });
    assert!(
        registered_everywhere(&servers, name, 1).await,
        "in line on every node"
    );
    freeze.send(()).unwrap();
    let (before, released_by) = (
        held.fencing_token(),
        held.owner_token().as_str().to_string(),
    );
    held.release().await.unwrap();
    // Every node handed the lock to the frozen waiter's token, for what was left of its place
    // lease; then another contender takes it.
    let handed = servers
        .iter()
        .filter_map(|server| holder_on(server, name))
        .filter(|owner| *owner != released_by)
        .count();
    assert!(handed >= 2, "handed to the frozen waiter on a majority");
    let other =
        Redlock::with_options(&own_clients(&servers).await, name, options(5_000, 500)).unwrap();
    let started = Instant::now();
    let next = other
        .lock_timeout(Duration::from_secs(20))
        .await
        .expect("the frozen waiter's handover runs out");
    eprintln!(
        "taken {:?} after the release (place lease {place_lease:?})",
        started.elapsed()
    );
    assert!(next.fencing_token() > before, "tokens increase");
    next.release().await.unwrap();
    thaw.send(()).unwrap();
    frozen_waiter.join().unwrap();
}

#[tokio::test]
async fn a_cancelled_waiter_leaves_its_place_on_every_node() {
    let servers = test_support::start_many(5).expect("start private redis-servers");
    let name = "rl:cancelled-waiter";
    let holder =
        Redlock::with_options(&own_clients(&servers).await, name, options(5_000, 500)).unwrap();
    let held = holder.lock().await.unwrap();
    let waiter =
        Redlock::with_options(&own_clients(&servers).await, name, options(5_000, 500)).unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await.map(drop) });
    assert!(
        registered_everywhere(&servers, name, 1).await,
        "in line on every node"
    );
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    let queue = format!("{{{name}}}:queue");
    let left = common::eventually(Duration::from_secs(10), || {
        let queue = queue.clone();
        let servers = &servers;
        async move {
            servers.iter().all(|server| {
                redis::cmd("ZCARD")
                    .arg(&queue)
                    .query::<usize>(&mut common::raw(server))
                    .unwrap()
                    == 0
            })
        }
    })
    .await;
    assert!(left, "its places are given up on every node");
    held.release().await.unwrap();
    holder.settle().await;
    assert!(
        holding(&servers, name).is_empty(),
        "the release handed nothing to the cancelled waiter"
    );
}
