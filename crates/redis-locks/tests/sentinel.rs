//! Every primitive through Redis Sentinel (`Client::connect_sentinel`, real sentinels and
//! data nodes from `test_support::SentinelSet`): mutual exclusion through the master the
//! sentinels name; a master killed with SIGKILL, followed by the same `Client`s without a
//! restart (the time from the kill to the first grant on the new master is printed); waiters
//! that resubscribe on the new master after a failover, woken rather than polled; a paused
//! and resumed old master (a "zombie") that grants nothing with `min-replicas-to-write`; and
//! the inputs `connect_sentinel` refuses, each refused promptly.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::eventually;
use redis_locks::{Client, ClientOptions, Error, LockKeys, LockOptions, MutexGuard};
use test_support::SentinelSet;
use test_support::history::History;
use tokio::time::Instant;

/// Acquisitions per worker in the contention check.
const PER_WORKER: usize = 15;
/// Workers (a `Client` each) per lock.
const WORKERS: usize = 3;
/// How long the sentinels may take to promote a replica after the master died or froze
/// (down-after is 1 s; a failover takes about 2.5 s here).
const FAILOVER_WITHIN: Duration = Duration::from_secs(30);

/// Short timeouts, so a dead or frozen master shows within a second.
fn options() -> ClientOptions {
    ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(1))
        .reconnect_attempts(1)
}

async fn connect(set: &SentinelSet) -> Client {
    let urls = set.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::connect_sentinel(&urls, set.master_name(), options())
        .await
        .unwrap()
}

/// `host:port` of the data node on `port`, as `Client::serving` names it.
fn address(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// A plain connection to the data node on `port` whose reads and writes give up after 2 s
/// (the node may be frozen).
fn raw(port: u16) -> redis::Connection {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    con.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

/// The `field:value` lines of `INFO replication` of the node on `port`.
fn replication(port: u16) -> HashMap<String, String> {
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut raw(port))
        .unwrap();
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether `client` names the data node on `port` as its master now.
async fn serves(client: &Client, port: u16) -> bool {
    client.serving("any").await.unwrap() == address(port)
}

/// No failover here: the sentinels only name the master. One replica and one sentinel keep
/// the start cheap (about a second less than 2 + 3) and still make the master a replicated
/// one, as it is in production.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_excludes_through_sentinel() {
    let set = SentinelSet::start(1, 1).unwrap();
    let master = set.master_port();
    let clients = [
        connect(&set).await,
        connect(&set).await,
        connect(&set).await,
    ];
    for client in &clients {
        assert_eq!(client.serving("any").await.unwrap(), address(master));
    }
    let kinds = [
        "mutex",
        "fair",
        "reentrant",
        "rwlock",
        "semaphore",
        "multilock",
    ];
    let mut histories = Vec::new();
    let mut tasks = Vec::new();
    for kind in kinds {
        let name = format!("{kind}:through-sentinel");
        let history = Arc::new(History::default());
        for (worker, client) in clients.iter().enumerate() {
            tasks.push(tokio::spawn(common::contend_as(
                client.clone(),
                kind.into(),
                name.clone(),
                format!("client-{worker}@{kind}"),
                PER_WORKER,
                history.clone(),
            )));
        }
        histories.push((name, history));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the workers finish")
            .unwrap();
    }
    let mut con = raw(master);
    for (name, history) in &histories {
        let report = history.check();
        assert!(report.is_ok(), "{name}: {report}");
        assert_eq!(report.acquisitions, WORKERS * PER_WORKER, "{name}");
        // The grants were made by the master the sentinels name: its fencing counter is
        // there; and the lock ends free.
        let keys = LockKeys::new(name).unwrap();
        let counter: Option<u64> = redis::cmd("GET").arg(keys.fence()).query(&mut con).unwrap();
        assert!(
            counter.is_some(),
            "{name}: no fencing counter on the master {master}"
        );
        let ttl: i64 = redis::cmd("PTTL").arg(keys.lock()).query(&mut con).unwrap();
        assert_eq!(ttl, -2, "{name} is left behind");
    }
}

/// An application's wait for `mutex` through a failover: `lock_timeout` fails with
/// `Error::Connection` when its attempt meets the dead master (no request is retried by the
/// library), and is called again for what is left of `budget`. Returns the guard and the
/// errors met on the way.
async fn lock_through_failover(
    mutex: redis_locks::Mutex,
    budget: Duration,
) -> (redis_locks::Result<MutexGuard>, Vec<String>) {
    let deadline = Instant::now() + budget;
    let mut errors = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match mutex.lock_timeout(left).await {
            Err(err) if err.is_connection() && Instant::now() < deadline => {
                errors.push(err.to_string());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return (other, errors),
        }
    }
}

/// Tries to take `name` through `client` every 10 ms (for at most `budget`) until granted:
/// when, and the master `client` names just after the grant. Panics with the errors seen if
/// no grant came.
async fn first_grant(client: Client, name: &str, budget: Duration) -> (Instant, String) {
    let mutex = client.mutex(name).unwrap();
    let deadline = Instant::now() + budget;
    let mut errors: Vec<String> = Vec::new();
    loop {
        match mutex.try_lock().await {
            Ok(guard) => {
                let at = Instant::now();
                let serving = client.serving(name).await.unwrap();
                guard.release().await.unwrap();
                return (at, serving);
            }
            Err(err) => {
                let err = err.to_string();
                if !errors.contains(&err) {
                    errors.push(err);
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no grant of {name} within {budget:?}; errors: {errors:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two replicas and three sentinels (quorum 2): the failover as it runs in production.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_followed_without_a_restart() {
    let mut set = SentinelSet::start(2, 3).unwrap();
    let old = set.master_port();
    let holder = connect(&set).await;
    let waiter = connect(&set).await;
    let prober = connect(&set).await;
    let name = "followed";
    let channel = LockKeys::new(name).unwrap().wake_channel().to_string();
    let options = LockOptions::default()
        .lease(Duration::from_secs(2))
        .watchdog(true);
    // Tokens handed out before the failover: one grant to each client, then the holder's.
    let mut before = Vec::new();
    for client in [&holder, &waiter, &prober] {
        let guard = client
            .mutex_with(name, options.clone())
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        before.push(guard.fencing_token());
        guard.release().await.unwrap();
    }
    let held = holder
        .mutex_with(name, options.clone())
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    before.push(held.fencing_token());
    let highest_before = *before.iter().max().unwrap();
    let waiting = tokio::spawn(lock_through_failover(
        waiter.mutex_with(name, options.clone()).unwrap(),
        Duration::from_secs(20),
    ));
    assert!(
        eventually(Duration::from_secs(5), || async {
            common::subscribers(set.server(old).unwrap(), &channel) >= 1
        })
        .await,
        "the waiter waits, subscribed on the master {old}"
    );

    let killed_at = Instant::now();
    set.kill_node(old);
    let probing = tokio::spawn({
        let prober = prober.clone();
        async move { first_grant(prober, "probe", Duration::from_secs(20)).await }
    });
    let new = tokio::task::block_in_place(|| set.wait_failover(old, FAILOVER_WITHIN)).unwrap();
    let promoted = killed_at.elapsed();
    let (granted_at, granted_by) = probing.await.unwrap();
    let first = granted_at - killed_at;
    eprintln!(
        "kill -9 of master {old} -> sentinels name {new}: {promoted:?}; \
         -> first grant on the new master: {first:?} ({:?} after the promotion was seen)",
        first.saturating_sub(promoted)
    );
    assert_eq!(
        granted_by,
        address(new),
        "the first grant after the kill came from the new master"
    );

    // The same Client objects follow: each names the new master, and takes and gives back
    // a lock there at the first try.
    for (who, client) in [
        ("holder", &holder),
        ("waiter", &waiter),
        ("prober", &prober),
    ] {
        assert!(
            eventually(Duration::from_secs(5), || serves(client, new)).await,
            "the {who}'s client follows the new master {new}: it names {}",
            client.serving("any").await.unwrap()
        );
        let fresh = format!("after:{who}");
        let guard = client.mutex(&fresh).unwrap().try_lock().await.unwrap();
        guard.release().await.unwrap();
        assert_eq!(
            redis::cmd("EXISTS")
                .arg(LockKeys::new(&fresh).unwrap().fence())
                .query::<i64>(&mut raw(new))
                .unwrap(),
            1,
            "the {who}'s grant was made by the new master"
        );
    }

    // The holder's key went down with the old master or was replicated (and maybe renewed
    // on the new one by the watchdog): either way its release ends it, and the waiter gets
    // the lock within its 20 s with a token above every token handed out before.
    match held.release().await {
        Ok(_) => eprintln!("the holder's lock survived the failover and was released"),
        Err(err) if err.is_not_held() => eprintln!("the holder's lock was lost: {err}"),
        Err(err) => panic!("the holder's release on the new master failed: {err}"),
    }
    let (got, errors) = waiting.await.unwrap();
    let got = got.unwrap_or_else(|err| panic!("the waiter: {err}; before it: {errors:#?}"));
    eprintln!(
        "the waiter's lock_timeout met {} connection error(s) on the way",
        errors.len()
    );
    assert!(
        got.fencing_token() > highest_before,
        "the waiter's token {} is above every earlier one (up to {highest_before})",
        got.fencing_token()
    );
    got.release().await.unwrap();
}

/// One round on the master at `port`: `holder` takes the lock, `waiter` waits for it with a
/// 20 s retry delay, subscribed on that master; the release wakes it. How long the waiter
/// took from the release.
async fn woken_round(
    holder: &redis_locks::Mutex,
    waiter: &redis_locks::Mutex,
    master: &test_support::RedisServer,
    round: &str,
) -> Duration {
    let port = master.port();
    let channel = waiter.keys().wake_channel().to_string();
    let guard = holder.try_lock().await.unwrap();
    let first = guard.fencing_token();
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock_timeout(Duration::from_secs(10)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            common::subscribers(master, &channel) >= 1
        })
        .await,
        "{round}: the waiter subscribed on the master {port} (PUBSUB NUMSUB {channel} \
         stayed 0 there for 5 s)"
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let got = waiting
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{round}: {err}"));
    let waited = released_at.elapsed();
    assert!(got.fencing_token() > first, "{round}: tokens grow");
    got.release().await.unwrap();
    waited
}

/// One replica and one sentinel (quorum 1) make a failover too, at less cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_resubscribe_on_the_new_master() {
    let set = SentinelSet::start(1, 1).unwrap();
    let old = set.master_port();
    let name = "resubscribe";
    // A 20 s retry delay and place lease: a waiter that is not woken polls only when it
    // rechecks its subscription, every 2 s.
    let options =
        common::slow_polling(Duration::from_secs(30)).place_lease(Duration::from_secs(20));
    let holder_client = connect(&set).await;
    let holder = holder_client.mutex_with(name, options.clone()).unwrap();
    let waiter_client = connect(&set).await;
    let waiter = waiter_client.mutex_with(name, options).unwrap();
    // Before: the waiter's wake-up connection is open on the old master.
    let waited = woken_round(
        &holder,
        &waiter,
        set.server(old).unwrap(),
        "on the first master",
    )
    .await;
    assert!(
        waited < Duration::from_millis(1500),
        "on the first master: woken, not polled ({waited:?})"
    );

    // Frozen, not killed: the wake-up connection to it stays open (no FIN), so only the
    // switch of master can move it. The freeze comes within the 1 s that the first round's
    // channel lingers subscribed, and lasts longer (down-after alone is 1 s): the client
    // unsubscribes it while the master is frozen, as any client may send a (un)subscription
    // to a master at the moment it stops answering; that must not keep its wake-ups there.
    set.pause_node(old);
    let new = tokio::task::block_in_place(|| set.wait_failover(old, FAILOVER_WITHIN)).unwrap();
    for (who, client) in [("holder", &holder_client), ("waiter", &waiter_client)] {
        assert!(
            eventually(Duration::from_secs(10), || serves(client, new)).await,
            "the {who}'s client follows the new master {new}"
        );
    }
    // Not woken, a waiter looks again only when it rechecks its subscription (every 2 s):
    // a wake-up published on the new master while the waiter still listens on the frozen
    // one fails this bound (and so does a waiter that never subscribed there).
    let waited = woken_round(
        &holder,
        &waiter,
        set.server(new).unwrap(),
        "on the new master",
    )
    .await;
    eprintln!("woken on the new master {waited:?} after the release");
    assert!(
        waited < Duration::from_millis(1500),
        "on the new master: woken, not polled ({waited:?})"
    );
}

/// `role` of the node on `port`, and (for a master started with `min-replicas-to-write`)
/// how many replicas it counts as good.
fn role_and_good_replicas(port: u16) -> (String, String) {
    let info = replication(port);
    let get = |k: &str| info.get(k).cloned().unwrap_or_default();
    (get("role"), get("min_slaves_good_slaves"))
}

/// Two replicas, so that the promoted one still has a replica for its own
/// `min-replicas-to-write 1`; three sentinels as in production.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_grants_nothing_with_min_replicas_to_write() {
    let set = SentinelSet::builder()
        .replicas(2)
        .sentinels(3)
        .data_args(&[
            "--min-replicas-to-write",
            "1",
            "--min-replicas-max-lag",
            "2",
        ])
        .start()
        .unwrap();
    let old = set.master_port();
    let name = "zombie";
    let lock_key = LockKeys::new(name).unwrap().lock().to_string();
    let lease = LockOptions::default().lease(Duration::from_secs(30));
    let client = connect(&set).await;
    // A process that was given the old master's address and is never told of the failover:
    // its connection survives the pause.
    let stale = Client::connect_with(&format!("redis://127.0.0.1:{old}"), options())
        .await
        .unwrap();
    let stale_mutex = stale.mutex_with(name, lease.clone()).unwrap();
    let guard = stale_mutex.try_lock().await.unwrap();
    let before = guard.fencing_token();
    guard.release().await.unwrap();

    // Frozen past down-after: the sentinels promote a replica and point the other one at it.
    set.pause_node(old);
    let new = tokio::task::block_in_place(|| set.wait_failover(old, FAILOVER_WITHIN)).unwrap();
    tokio::task::block_in_place(|| set.wait_replicas_up(FAILOVER_WITHIN)).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || serves(&client, new)).await,
        "the Sentinel client follows the new master {new}"
    );
    let held = client
        .mutex_with(name, lease.clone())
        .unwrap()
        .try_lock()
        .await
        .unwrap();
    assert!(
        held.fencing_token() > before,
        "tokens grow across the failover"
    );

    // Thawed: a master in its own eyes (the sentinels make it a replica of the new one only
    // several seconds later), without the lock's key, and with its replicas gone: a zombie.
    // Its replicas closed their links while it was frozen; it counts them gone within its
    // first event-loop turns (a command read in the very turn it wakes in may still see the
    // old count: Redis frees the replica links after that turn), so wait for it to say so.
    set.resume_node(old);
    let mut seen = (String::new(), String::new());
    assert!(
        eventually(Duration::from_secs(5), || {
            seen = role_and_good_replicas(old);
            let ready = seen.0 == "slave" || seen == ("master".to_owned(), "0".to_owned());
            async move { ready }
        })
        .await,
        "the old master {old} counts no good replica: role and good replicas {seen:?}"
    );
    // Every attempt there is refused, not granted, as long as it is a master (and, once the
    // sentinels demoted it, as a replica): never a second holder.
    let mut refused_as_master = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while refused_as_master.len() < 5 && Instant::now() < deadline {
        let (role_before, _) = role_and_good_replicas(old);
        let attempt = stale_mutex.try_lock().await;
        let (role_after, _) = role_and_good_replicas(old);
        let err = match attempt {
            Ok(guard) => panic!(
                "the demoted master {old} granted {name} (token {}) while the new master {new} \
                 has it held (token {})",
                guard.fencing_token(),
                held.fencing_token()
            ),
            Err(err) => err,
        };
        if role_before == "master" && role_after == "master" {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&lock_key)
                .query(&mut raw(old))
                .unwrap();
            assert_eq!(exists, 0, "the refused attempt wrote nothing on {old}");
            refused_as_master.push(err);
        } else if role_before == "slave" {
            eprintln!("the old master {old} was made a replica: {err}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("refusals of the zombie master: {refused_as_master:#?}");
    assert!(
        !refused_as_master.is_empty(),
        "the old master {old} was seen refusing as a master (the zombie window)"
    );
    for err in &refused_as_master {
        assert!(
            matches!(err, Error::Redis { source, .. } if source.code() == Some("NOREPLICAS")),
            "refused for want of replicas: {err:?}"
        );
    }
    // The one holder is the new master's, and the Sentinel client never left it.
    let state = client.mutex(name).unwrap().state().await.unwrap();
    assert_eq!(
        state.holder.map(|h| h.owner),
        Some(held.owner_token().as_str().to_string()),
        "the new master's holder is the Sentinel client's"
    );
    assert_eq!(client.serving(name).await.unwrap(), address(new));
    assert!(held.lost_reason().is_none());
    held.release().await.unwrap();
}

/// A loopback port nothing listens on (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_sentinel_refuses_bad_input_promptly() {
    let refused = |result: redis_locks::Result<Client>| match result {
        Ok(client) => panic!("connected: {client:?}"),
        Err(err) => err,
    };
    // No sentinel at all: nothing to ask.
    let err = refused(Client::connect_sentinel(&[], "mymaster", options()).await);
    assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");

    // A master alone, watched by one sentinel: enough to be asked.
    let set = SentinelSet::builder()
        .replicas(0)
        .sentinels(1)
        .start()
        .unwrap();
    let live = set.sentinel_urls()[0].clone();
    let live = live.as_str();
    for name in ["", " ", "my\nmaster"] {
        let err = refused(Client::connect_sentinel(&[live], name, options()).await);
        assert!(matches!(err, Error::InvalidUrl { .. }), "{name:?}: {err:?}");
    }
    for url in ["", "http://127.0.0.1:26379", "redis://127.0.0.1:notaport"] {
        let err = refused(Client::connect_sentinel(&[live, url], "mymaster", options()).await);
        assert!(matches!(err, Error::InvalidUrl { .. }), "{url:?}: {err:?}");
    }

    // A name the sentinel does not watch: a connection error, at once.
    let started = Instant::now();
    let err = refused(
        tokio::time::timeout(
            Duration::from_secs(10),
            Client::connect_sentinel(&[live], "nosuchmaster", options()),
        )
        .await
        .expect("an unknown master name does not hang"),
    );
    assert!(err.is_connection(), "{err:?}");
    assert!(err.to_string().contains("nosuchmaster"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Nothing listens where the sentinel should be: refused, within the connect timeout.
    let dead = format!("redis://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let err = refused(
        tokio::time::timeout(
            Duration::from_secs(10),
            Client::connect_sentinel(&[&dead], "mymaster", options()),
        )
        .await
        .expect("a dead sentinel does not hang"),
    );
    assert!(err.is_connection(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Something accepts but never answers: given up after the connect and response
    // timeouts (0.5 s + 1 s), not waited on for ever.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("redis://{}", silent.local_addr().unwrap());
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let started = Instant::now();
    let err = refused(
        tokio::time::timeout(
            Duration::from_secs(10),
            Client::connect_sentinel(&[&silent_url], "mymaster", options()),
        )
        .await
        .expect("a silent sentinel does not hang"),
    );
    assert!(err.is_connection(), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // A dead sentinel before a live one: each is asked in turn.
    let client = Client::connect_sentinel(&[&dead, &silent_url, live], "mymaster", options())
        .await
        .unwrap();
    assert_eq!(
        client.serving("any").await.unwrap(),
        address(set.master_port())
    );
}
