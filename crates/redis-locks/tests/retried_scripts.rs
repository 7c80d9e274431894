//! Scripts run twice for the same owner token, as a cluster client's retry after a broken
//! connection runs them, on a real cluster: in the cluster's form (see `node/script.rs`),
//! every acquire, extend, downgrade and release gives the same answer the second time (a
//! second acquire by the holder is the holder's, a second release says released); in the
//! one-server form, a second release says the lock is gone, as a release must when nothing
//! retried it.

mod common;

use common::{FENCE_LUA, LOCK_LUA, QUEUE_LUA};
use redis::Script;
use redis::cluster::ClusterConnection;
use test_support::RedisCluster;

/// The lines the cluster's form changes, as `node/script.rs` changes them.
const CLUSTER_LINES: [(&str, &str); 2] = [
    ("local PUBLISH = 'PUBLISH'", "local PUBLISH = 'SPUBLISH'"),
    ("local RETRIED = false", "local RETRIED = true"),
];

const HOLDS_LUA: &str = include_str!("../src/engine/holds/holds.lua");

/// A script in the cluster's form when `cluster`, else as one server runs it.
fn form(cluster: bool, parts: &[&str]) -> Script {
    if !cluster {
        return common::lua(parts);
    }
    // Without the fast paths (`*_first.lua`, named on their header's first line).
    let kept: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|part| {
            !part
                .lines()
                .next()
                .unwrap_or_default()
                .contains("_first.lua:")
        })
        .collect();
    let mut source = kept.join("\n");
    for (plain, clustered) in CLUSTER_LINES {
        assert!(source.contains(plain), "the prelude names {plain:?}");
        source = source.replace(plain, clustered);
    }
    Script::new(&source)
}

fn connect(cluster: &RedisCluster) -> ClusterConnection {
    redis::cluster::ClusterClient::new(cluster.seed_urls())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn keys(name: &str) -> redis_locks::LockKeys {
    redis_locks::LockKeys::new(name).unwrap()
}

/// The tombstone key a release by `id` is given last where a script may run twice (as
/// `wait/mod.rs` passes it).
fn tombstone(name: &str, id: &str) -> String {
    keys(name).companion(&format!("released:{id}"))
}

fn mutex_acquire(con: &mut ClusterConnection, name: &str, owner: &str) -> (i64, i64) {
    form(
        true,
        &[
            FENCE_LUA,
            LOCK_LUA,
            QUEUE_LUA,
            include_str!("../src/engine/string_lock/acquire.lua"),
        ],
    )
    .key(name)
    .key(keys(name).fence())
    .key(keys(name).epoch())
    .arg(owner)
    .arg(10_000)
    .invoke(con)
    .unwrap()
}

fn mutex_release(cluster: bool, con: &mut ClusterConnection, name: &str, owner: &str) -> i64 {
    let script = form(
        cluster,
        &[
            include_str!("../src/engine/string_lock/release_first.lua"),
            FENCE_LUA,
            LOCK_LUA,
            QUEUE_LUA,
            include_str!("../src/engine/string_lock/release.lua"),
        ],
    );
    let mut call = script.key(name);
    if cluster {
        call.key(tombstone(name, owner));
    }
    call.arg(owner)
        .arg(keys(name).wake_channel())
        .invoke(con)
        .unwrap()
}

#[test]
fn a_mutex_acquire_extend_and_release_run_twice_answer_as_once() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let mut con = connect(&cluster);
    for name in ["twice", "twice:{tagged}"] {
        // A second acquire by the holder is the holder's, with a greater token.
        let (granted, first) = mutex_acquire(&mut con, name, "a");
        let (again, second) = mutex_acquire(&mut con, name, "a");
        assert_eq!((granted, again), (1, 1), "{name}");
        assert!(second > first, "{name}");
        // A second extend extends again.
        let extend = form(
            true,
            &[
                LOCK_LUA,
                include_str!("../src/engine/string_lock/extend.lua"),
            ],
        );
        for _ in 0..2 {
            let extended: i64 = extend
                .key(name)
                .arg("a")
                .arg(20_000)
                .invoke(&mut con)
                .unwrap();
            assert_eq!(extended, 1, "{name}");
        }
        // A second release says released, and leaves the lock free.
        assert_eq!(mutex_release(true, &mut con, name, "a"), 1, "{name}");
        assert_eq!(
            mutex_release(true, &mut con, name, "a"),
            1,
            "{name}: the second run"
        );
        let ttl: i64 = redis::cmd("PTTL").arg(name).query(&mut con).unwrap();
        assert_eq!(ttl, -2, "{name}: the lock is free");
        // Somebody else's release is still refused: the tombstone is the owner's only.
        assert_eq!(
            mutex_release(true, &mut con, name, "b"),
            0,
            "{name}: b never held it"
        );
        // Taken by b meanwhile: a's second run still says released, b keeps the lock.
        mutex_acquire(&mut con, name, "b");
        assert_eq!(mutex_release(true, &mut con, name, "a"), 1, "{name}");
        let holder: String = redis::cmd("GET").arg(name).query(&mut con).unwrap();
        assert_eq!(holder, "b", "{name}: b's lock is untouched");
        assert_eq!(mutex_release(true, &mut con, name, "b"), 1, "{name}");
    }
    // The tombstone lives in the lock's slot, and expires.
    let tombstone = "{twice}:released:a";
    let slot = |key: &str| -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut connect(&cluster))
            .unwrap()
    };
    assert_eq!(slot(tombstone), slot("twice"));
    assert_eq!(slot("twice:{tagged}:released:a"), slot("twice:{tagged}"));
    let ttl: i64 = redis::cmd("PTTL").arg(tombstone).query(&mut con).unwrap();
    assert!(ttl > 0 && ttl <= 10_000, "tombstone TTL {ttl}");
}

#[test]
fn one_server_forms_say_a_second_release_found_the_lock_gone() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let mut con = connect(&cluster);
    mutex_acquire(&mut con, "once", "a");
    assert_eq!(mutex_release(false, &mut con, "once", "a"), 1);
    assert_eq!(mutex_release(false, &mut con, "once", "a"), 0);
    let left: i64 = redis::cmd("EXISTS")
        .arg("{once}:released:a")
        .query(&mut con)
        .unwrap();
    assert_eq!(left, 0, "no tombstone where nothing retries");
}

#[test]
fn a_fair_release_run_twice_says_released_twice() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let mut con = connect(&cluster);
    let keys = ["F", "{F}:fence", "{F}:queue", "{F}:places", "{F}:tickets"];
    let acquire = form(
        true,
        &[
            FENCE_LUA,
            LOCK_LUA,
            QUEUE_LUA,
            include_str!("../src/fair/acquire.lua"),
        ],
    );
    for _ in 0..2 {
        let (granted, _): (i64, i64) = acquire
            .key(&keys[..])
            .arg("a")
            .arg(10_000)
            .arg(0)
            .arg("{F}:wake")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(granted, 1, "the holder's second acquire is its own");
    }
    let release = form(
        true,
        &[
            FENCE_LUA,
            LOCK_LUA,
            QUEUE_LUA,
            include_str!("../src/fair/release.lua"),
        ],
    );
    for run in ["first", "second"] {
        let released: i64 = release
            .key(
                &[
                    "F",
                    "{F}:queue",
                    "{F}:places",
                    "{F}:tickets",
                    "{F}:released:a",
                ][..],
            )
            .arg("a")
            .arg("{F}:wake")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(released, 1, "the {run} run");
    }
}

#[test]
fn holds_acquired_downgraded_and_released_twice_answer_as_once() {
    let cluster = RedisCluster::start(3, 0).unwrap();
    let mut con = connect(&cluster);
    let keys = ["R", "{R}:fence", "{R}:queue", "{R}:places", "{R}:tickets"];
    let line = ["R", "{R}:queue", "{R}:places", "{R}:tickets"];
    let acquire = form(
        true,
        &[
            FENCE_LUA,
            LOCK_LUA,
            QUEUE_LUA,
            HOLDS_LUA,
            include_str!("../src/engine/holds/acquire.lua"),
        ],
    );
    let take = |con: &mut ClusterConnection, kind: &str, hold: &str| -> (i64, i64) {
        acquire
            .key(&keys[..])
            .arg(&[kind, "w", hold, "owner", "10000", "0", "{R}:wake"][..])
            .invoke(con)
            .unwrap()
    };
    // A write hold and a re-entry of the same owner (a ReentrantMutex held twice).
    let first = take(&mut con, "reentrant", "h1");
    assert_eq!(
        first,
        take(&mut con, "reentrant", "h1"),
        "same hold, same token"
    );
    assert_eq!(take(&mut con, "reentrant", "h2").0, 1);
    let release = form(
        true,
        &[
            include_str!("../src/engine/holds/release_first.lua"),
            LOCK_LUA,
            QUEUE_LUA,
            HOLDS_LUA,
            include_str!("../src/engine/holds/release.lua"),
        ],
    );
    let give_back = |con: &mut ClusterConnection, hold: &str| -> (i64, i64) {
        release
            .key(&line[..])
            .key(format!("{{R}}:released:{hold}"))
            .arg(hold)
            .arg("{R}:wake")
            .invoke(con)
            .unwrap()
    };
    // The first release leaves one hold; its second run says the same, not "gone".
    assert_eq!(give_back(&mut con, "h2"), (1, 1));
    assert_eq!(give_back(&mut con, "h2"), (1, 1), "the second run");
    assert_eq!(give_back(&mut con, "h1"), (1, 0));
    assert_eq!(give_back(&mut con, "h1"), (1, 0), "the second run");
    let exists: i64 = redis::cmd("EXISTS").arg("R").query(&mut con).unwrap();
    assert_eq!(exists, 0, "the lock is free");

    // An RwLock write hold downgraded twice is a read hold once.
    let (granted, _) = take(&mut con, "rwlock", "w1");
    assert_eq!(granted, 1);
    let downgrade = form(
        true,
        &[
            LOCK_LUA,
            QUEUE_LUA,
            HOLDS_LUA,
            include_str!("../src/engine/holds/downgrade.lua"),
        ],
    );
    for run in ["first", "second"] {
        let downgraded: i64 = downgrade
            .key(&line[..])
            .arg("w1")
            .arg("{R}:wake")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(downgraded, 1, "the {run} run");
    }
    let writer: Option<String> = redis::cmd("HGET")
        .arg("R")
        .arg("writer")
        .query(&mut con)
        .unwrap();
    assert_eq!(writer, None, "no write hold is left");
    // Extended twice: both runs extend.
    let extend = form(
        true,
        &[
            LOCK_LUA,
            QUEUE_LUA,
            HOLDS_LUA,
            include_str!("../src/engine/holds/extend.lua"),
        ],
    );
    for _ in 0..2 {
        let extended: i64 = extend
            .key("R")
            .arg("w1")
            .arg(20_000)
            .invoke(&mut con)
            .unwrap();
        assert_eq!(extended, 1);
    }
    assert_eq!(give_back(&mut con, "w1"), (1, 0));
    assert_eq!(give_back(&mut con, "w1"), (1, 0), "the second run");
}
