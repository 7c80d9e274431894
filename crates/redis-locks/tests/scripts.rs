//! Each Lua script called directly against a real server: every branch, every reply.

mod common;

use common::{FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, pttl, raw, server, server_micros};
use redis::{Connection, Script, Value};

fn acquire() -> Script {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/acquire.lua"),
    ])
}
fn release() -> Script {
    lua(&[
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/release.lua"),
    ])
}
fn extend() -> Script {
    lua(&[
        LOCK_LUA,
        include_str!("../src/engine/string_lock/extend.lua"),
    ])
}
fn inspect() -> Script {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/inspect.lua"),
    ])
}

fn run_acquire(con: &mut Connection, owner: &str, ms: u64) -> redis::RedisResult<(i64, i64)> {
    acquire()
        .key("L")
        .key("{L}:fence")
        .key("{L}:epoch")
        .arg(owner)
        .arg(ms)
        .invoke(con)
}

/// The connection names in `{L}:epoch`, oldest first.
fn epochs(con: &mut Connection) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg("{L}:epoch")
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap()
}

#[test]
fn acquire_grants_a_free_lock_with_a_clock_seeded_token_and_a_ttl() {
    let server = server();
    let mut con = raw(&server);
    let before = server_micros(&mut con);
    let (granted, token) = run_acquire(&mut con, "owner-a", 10_000).unwrap();
    let after = server_micros(&mut con);
    assert_eq!(granted, 1);
    assert!(
        (before..=after).contains(&token),
        "{before} <= {token} <= {after}"
    );
    let ttl = pttl(&server, "L");
    assert!(ttl > 9_000 && ttl <= 10_000, "lock key ttl {ttl}");
    assert_eq!(pttl(&server, "{L}:fence"), -1, "the counter never expires");
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "owner-a");
}

#[test]
fn acquire_on_a_held_lock_returns_the_holders_pttl_and_marks_it_once() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = run_acquire(&mut con, "owner-a", 10_000).unwrap();
    for _ in 0..2 {
        let (granted, remaining) = run_acquire(&mut con, "owner-b", 50_000).unwrap();
        assert_eq!(granted, 0);
        assert!(remaining > 9_000 && remaining <= 10_000, "pttl {remaining}");
        let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
        assert_eq!(value, "owner-a+w", "marked for a wake-up, once");
        assert!(pttl(&server, "L") <= 10_000, "the holder's lease is kept");
    }
    let counter: i64 = redis::cmd("GET").arg("{L}:fence").query(&mut con).unwrap();
    assert_eq!(
        counter, first,
        "a refused attempt does not advance the counter"
    );
}

#[test]
fn acquire_regrants_a_marked_lock_to_its_owner_and_seeds_a_low_counter() {
    let server = server();
    let mut con = raw(&server);
    // What a fast attempt leaves behind on a counter that was lost: the lock taken, the
    // counter restarted at 1 (then bumped by a refused attempt), and a waiter's mark.
    redis::cmd("SET")
        .arg("L")
        .arg("a+w")
        .arg("PX")
        .arg(1_000)
        .exec(&mut con)
        .unwrap();
    redis::cmd("SET")
        .arg("{L}:fence")
        .arg(2)
        .exec(&mut con)
        .unwrap();
    let before = server_micros(&mut con);
    let (granted, token) = run_acquire(&mut con, "a", 20_000).unwrap();
    assert_eq!(granted, 1);
    assert!(
        token >= before,
        "seeded from the clock: {token} >= {before}"
    );
    let counter: i64 = redis::cmd("GET").arg("{L}:fence").query(&mut con).unwrap();
    assert_eq!(counter, token, "the next token starts above this one");
    assert!(pttl(&server, "L") > 15_000, "the lease was set again");
    // Asked again, the owner gets a new token, never one behind the old.
    let (_, again) = run_acquire(&mut con, "a", 20_000).unwrap();
    assert!(again > token, "{again} > {token}");
}

#[test]
fn acquire_tokens_grow_with_every_grant_and_never_fall_behind_the_clock() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = run_acquire(&mut con, "a", 10_000).unwrap();
    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    let before = server_micros(&mut con);
    let (_, second) = run_acquire(&mut con, "b", 10_000).unwrap();
    assert!(second > first);
    assert!(second >= before, "at least the clock: {second} >= {before}");
    // A counter ahead of the clock (grants faster than one per µs) just steps by one.
    let ahead = server_micros(&mut con) + 10_000_000;
    redis::cmd("SET")
        .arg("{L}:fence")
        .arg(ahead)
        .exec(&mut con)
        .unwrap();
    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    let (_, third) = run_acquire(&mut con, "c", 10_000).unwrap();
    assert_eq!(third, ahead + 1);
}

#[test]
fn acquire_retried_by_the_same_owner_is_granted_again_with_a_new_token() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = run_acquire(&mut con, "a", 1_000).unwrap();
    let (granted, again) = run_acquire(&mut con, "a", 20_000).unwrap();
    assert_eq!(granted, 1);
    assert!(again > first, "{again} > {first}");
    assert!(pttl(&server, "L") > 15_000, "the lease was set again");
}

#[test]
fn acquire_writes_the_epoch_only_when_given_one() {
    let server = server();
    let mut con = raw(&server);
    run_acquire(&mut con, "a", 1_000).unwrap();
    assert!(epochs(&mut con).is_empty());
    let (granted, _): (i64, i64) = acquire()
        .key("L")
        .key("{L}:fence")
        .key("{L}:epoch")
        .arg("a")
        .arg(1_000)
        .arg("0")
        .arg("redis-locks:this-connection")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(granted, 1);
    assert_eq!(epochs(&mut con), ["redis-locks:this-connection"]);
    let ttl: i64 = redis::cmd("PTTL").arg("{L}:epoch").query(&mut con).unwrap();
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "an hour: {ttl}");
}

/// A Redlock node's acquire script: `acquire_first.lua` in front of `acquire.lua`.
fn acquire_on_node() -> Script {
    lua(&[
        include_str!("../src/engine/string_lock/acquire_first.lua"),
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/acquire.lua"),
    ])
}

/// Runs [`acquire_on_node`] for `owner` with the Redlock `proposal` and the connection name
/// `name` to record (`""`: none).
fn run_on_node(con: &mut Connection, owner: &str, name: &str, proposal: i64) -> (i64, i64) {
    // ARGV: owner, lease, no mark, the name, no waiter, place lease or channel, the proposal.
    let proposal = proposal.to_string();
    acquire_on_node()
        .key(&["L", "{L}:fence", "{L}:epoch"][..])
        .arg(&[owner, "1000", "0", name, "", "", "", &proposal][..])
        .invoke(con)
        .unwrap()
}

#[test]
fn a_redlock_node_grant_numbers_from_the_proposal_and_records_the_epoch_when_given_one() {
    let server = server();
    let mut con = raw(&server);
    let proposal = 1_700_000_000_000_000;
    // The common case, no epoch to record: the grant takes the proposal, the epochs stay.
    assert_eq!(run_on_node(&mut con, "a", "", proposal), (1, proposal));
    assert!(epochs(&mut con).is_empty());
    assert!(pttl(&server, "L") > 0);
    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    // A free lock with a name to record (a connection the node did not vouch for): granted,
    // and the name recorded.
    let (granted, token) = run_on_node(&mut con, "b", "redis-locks:free", proposal);
    assert_eq!((granted, token), (1, proposal + 1));
    assert_eq!(epochs(&mut con), ["redis-locks:free"]);
    // The caller's own key (taken by the pipeline a moment before): granted again, numbered
    // from the later proposal, and the name recorded.
    let later = proposal + 1_000;
    let (granted, token) = run_on_node(&mut con, "b", "redis-locks:own", later);
    assert_eq!((granted, token), (1, later));
    assert_eq!(epochs(&mut con).len(), 2);
    assert!(epochs(&mut con).contains(&"redis-locks:own".to_string()));
}

#[test]
fn acquire_reports_a_foreign_key_without_expiry_as_pttl_minus_one() {
    let server = server();
    let mut con = raw(&server);
    redis::cmd("SET")
        .arg("L")
        .arg("someone")
        .exec(&mut con)
        .unwrap();
    assert_eq!(run_acquire(&mut con, "a", 1_000).unwrap(), (0, -1));
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "someone", "a key without expiry is not ours to mark");
}

#[test]
fn acquire_tokens_keep_growing_after_the_counter_is_lost() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = run_acquire(&mut con, "a", 10_000).unwrap();
    // A restart without persistence: every key gone, the counter too.
    redis::cmd("FLUSHALL").exec(&mut con).unwrap();
    let (_, second) = run_acquire(&mut con, "b", 10_000).unwrap();
    assert!(second > first, "{second} > {first}");
}

/// Puts a hash with no expiry at the lock key "L": a key the library never wrote.
fn foreign_hash(con: &mut Connection) {
    redis::cmd("HSET")
        .arg("L")
        .arg("f")
        .arg("v")
        .exec(con)
        .unwrap();
}

#[test]
fn acquire_refuses_wrong_types_and_writes_nothing() {
    let server = server();
    let mut con = raw(&server);
    foreign_hash(&mut con);
    let err = run_acquire(&mut con, "a", 1_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");

    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    redis::cmd("LPUSH")
        .arg("{L}:fence")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    let err = run_acquire(&mut con, "a", 1_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert_eq!(pttl(&server, "L"), -2, "no lock key was written");

    redis::cmd("DEL").arg("{L}:fence").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg("{L}:fence")
        .arg("not-a-number")
        .exec(&mut con)
        .unwrap();
    let err = run_acquire(&mut con, "a", 1_000).unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    assert_eq!(pttl(&server, "L"), -2, "no lock key was written");
}

#[test]
fn release_deletes_only_for_the_owner() {
    let server = server();
    let mut con = raw(&server);
    run_acquire(&mut con, "a", 10_000).unwrap();
    let foreign: i64 = release()
        .key("L")
        .arg("b")
        .arg("{L}:wake")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(foreign, -1);
    assert!(pttl(&server, "L") > 0, "another owner's lock is untouched");
    let own: i64 = release()
        .key("L")
        .arg("a")
        .arg("{L}:wake")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(own, 1);
    assert_eq!(pttl(&server, "L"), -2);
    let gone: i64 = release()
        .key("L")
        .arg("a")
        .arg("{L}:wake")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(gone, 0);
}

#[test]
fn release_and_extend_refuse_wrong_types() {
    let server = server();
    let mut con = raw(&server);
    redis::cmd("SADD").arg("L").arg("x").exec(&mut con).unwrap();
    let err = release()
        .key("L")
        .arg("a")
        .invoke::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let err = extend()
        .key("L")
        .arg("a")
        .arg(1000)
        .invoke::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    let err = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
}

#[test]
fn extend_sets_a_new_lease_only_for_the_owner() {
    let server = server();
    let mut con = raw(&server);
    run_acquire(&mut con, "a", 1_000).unwrap();
    let foreign: i64 = extend()
        .key("L")
        .arg("b")
        .arg(60_000)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(foreign, -1);
    assert!(pttl(&server, "L") <= 1_000);
    let own: i64 = extend()
        .key("L")
        .arg("a")
        .arg(60_000)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(own, 1);
    assert!(pttl(&server, "L") > 59_000);
    // A waiter's mark does not make the owner a stranger, and the mark stays.
    run_acquire(&mut con, "b", 1_000).unwrap();
    let marked: i64 = extend()
        .key("L")
        .arg("a")
        .arg(30_000)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(marked, 1);
    assert!(pttl(&server, "L") <= 30_000);
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "a+w");
    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    let gone: i64 = extend()
        .key("L")
        .arg("a")
        .arg(60_000)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(gone, 0);
    assert_eq!(pttl(&server, "L"), -2, "extend never creates the key");
}

#[test]
fn extend_with_restore_puts_a_gone_key_back_and_nothing_else() {
    let server = server();
    let mut con = raw(&server);
    let restore = |con: &mut Connection, owner: &str, ms: u64| -> i64 {
        extend()
            .key("L")
            .arg(owner)
            .arg(ms)
            .arg("1")
            .invoke(con)
            .unwrap()
    };
    // Gone: restored to the owner, with the lease, and the reply says so (2, not 1).
    assert_eq!(restore(&mut con, "a", 60_000), 2);
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "a");
    assert!((59_000..=60_000).contains(&pttl(&server, "L")));
    // The owner's own key: extended as without the flag.
    assert_eq!(restore(&mut con, "a", 30_000), 1);
    assert!(pttl(&server, "L") <= 30_000);
    // A waiter's mark on the owner's key: extended, the mark kept (no restore).
    run_acquire(&mut con, "b", 1_000).unwrap();
    assert_eq!(restore(&mut con, "a", 30_000), 1);
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "a+w");
    redis::cmd("SET")
        .arg("L")
        .arg("a")
        .arg("PX")
        .arg(30_000)
        .exec(&mut con)
        .unwrap();
    // Another owner's key: left alone.
    assert_eq!(restore(&mut con, "b", 90_000), -1);
    let value: String = redis::cmd("GET").arg("L").query(&mut con).unwrap();
    assert_eq!(value, "a");
    assert!(pttl(&server, "L") <= 30_000);
    // A key of another type: the script's error, nothing written.
    redis::cmd("DEL").arg("L").exec(&mut con).unwrap();
    foreign_hash(&mut con);
    let err = extend()
        .key("L")
        .arg("a")
        .arg(60_000)
        .arg("1")
        .invoke::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    assert_eq!(
        pttl(&server, "L"),
        -1,
        "the foreign key keeps its (lack of) expiry"
    );
}

#[test]
fn inspect_counts_the_connections_listening_for_a_release() {
    let server = server();
    let mut con = raw(&server);
    let listeners = |con: &mut redis::Connection| -> i64 {
        let state: (String, i64, i64, i64, i64) = inspect()
            .key("L")
            .key("{L}:fence")
            .arg("{L}:wake")
            .invoke(con)
            .unwrap();
        state.4
    };
    assert_eq!(listeners(&mut con), 0);
    let mut waiter = raw(&server);
    let mut pubsub = waiter.as_pubsub();
    pubsub.subscribe("{L}:wake").unwrap();
    assert_eq!(listeners(&mut con), 1);
    drop(pubsub);
    drop(waiter);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while listeners(&mut con) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a closed connection stops counting"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn inspect_reports_free_held_and_foreign_states() {
    let server = server();
    let mut con = raw(&server);
    let free: (String, i64, i64, i64, i64) = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(free, (String::new(), -2, 0, 0, 0));

    let (_, token) = run_acquire(&mut con, "a", 10_000).unwrap();
    let (owner, ttl, counter, marked, _): (String, i64, i64, i64, i64) = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke(&mut con)
        .unwrap();
    assert_eq!((owner.as_str(), counter, marked), ("a", token, 0));
    assert!(ttl > 9_000 && ttl <= 10_000);

    // A waiter's mark is not part of the owner token.
    run_acquire(&mut con, "b", 10_000).unwrap();
    let (owner, _, _, marked, _): (String, i64, i64, i64, i64) = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke(&mut con)
        .unwrap();
    assert_eq!((owner.as_str(), marked), ("a", 1));

    redis::cmd("SET")
        .arg("L")
        .arg("manual")
        .exec(&mut con)
        .unwrap();
    let (_, ttl, _, _, _): (String, i64, i64, i64, i64) = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke(&mut con)
        .unwrap();
    assert_eq!(ttl, -1);

    redis::cmd("SET")
        .arg("{L}:fence")
        .arg("abc")
        .exec(&mut con)
        .unwrap();
    let err = inspect()
        .key("L")
        .key("{L}:fence")
        .invoke::<Value>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
}
