//! The Semaphore's scripts, called directly on a real server: every branch and reply of
//! their headers.

mod common;

use common::{
    FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, next_message, nothing_more, pttl, raw, server,
    server_micros, server_ms, subscribed,
};
use redis::Connection;

const PERMITS_LUA: &str = include_str!("../src/semaphore/permits.lua");
/// The semaphore's hash, fence, queue, places, tickets.
const KEYS: [&str; 5] = ["S", "{S}:fence", "{S}:queue", "{S}:places", "{S}:tickets"];
const FENCE: &str = KEYS[1];
const QUEUE: &str = KEYS[2];
const CHANNEL: &str = "{S}:wake";

fn script(body: &str) -> redis::Script {
    lua(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, PERMITS_LUA, body])
}

/// A script with its fast path first, as the library runs it on one server.
fn fast_first(fast: &str, body: &str) -> redis::Script {
    lua(&[fast, FENCE_LUA, LOCK_LUA, QUEUE_LUA, PERMITS_LUA, body])
}

/// The slow path alone (as a cluster runs it), for the same calls.
static SLOW_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn acquire(
    con: &mut Connection,
    owner: &str,
    permits: u32,
    limit: u32,
    lease_ms: u64,
    place_ms: u64,
) -> redis::RedisResult<(i64, i64)> {
    let body = include_str!("../src/semaphore/acquire.lua");
    let fast = include_str!("../src/semaphore/acquire_first.lua");
    let script = if SLOW_ONLY.load(std::sync::atomic::Ordering::SeqCst) {
        script(body)
    } else {
        fast_first(fast, body)
    };
    script
        .key(&KEYS[..])
        .arg(owner)
        .arg(permits)
        .arg(limit)
        .arg(lease_ms)
        .arg(place_ms)
        .arg(CHANNEL)
        .invoke(con)
}

fn release(con: &mut Connection, owner: &str) -> redis::RedisResult<i64> {
    let body = include_str!("../src/semaphore/release.lua");
    let fast = include_str!("../src/semaphore/release_first.lua");
    let script = if SLOW_ONLY.load(std::sync::atomic::Ordering::SeqCst) {
        script(body)
    } else {
        fast_first(fast, body)
    };
    script
        .key(&[KEYS[0], KEYS[2], KEYS[3], KEYS[4]][..])
        .arg(owner)
        .arg(CHANNEL)
        .invoke(con)
}

fn extend(con: &mut Connection, owner: &str, lease_ms: u64) -> redis::RedisResult<i64> {
    script(include_str!("../src/semaphore/extend.lua"))
        .key(KEYS[0])
        .arg(owner)
        .arg(lease_ms)
        .invoke(con)
}

fn inspect(con: &mut Connection) -> redis::RedisResult<Vec<redis::Value>> {
    script(include_str!("../src/semaphore/inspect.lua"))
        .key(&[KEYS[0], KEYS[1], KEYS[3]][..])
        .invoke(con)
}

fn resize(con: &mut Connection, limit: u32) -> redis::RedisResult<i64> {
    script(include_str!("../src/semaphore/resize.lua"))
        .key(&[KEYS[0], KEYS[2], KEYS[3], KEYS[4]][..])
        .arg(limit)
        .arg(CHANNEL)
        .invoke(con)
}

/// Waits (at most 5 s) until the server's clock has passed `owner`'s lease end (or its entry
/// is gone): the server, not a sleep of the test's, decides when a lease ended.
fn lease_ended(con: &mut Connection, owner: &str) {
    let within = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let ends = holder(con, owner).map(|(ends, _)| ends);
        let now = server_ms(con);
        if ends.is_none_or(|ends| ends <= now) {
            return;
        }
        assert!(
            std::time::Instant::now() < within,
            "{owner}'s lease never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// `owner`'s field in the semaphore's hash: its lease end (server ms) and its permits.
fn holder(con: &mut Connection, owner: &str) -> Option<(i64, i64)> {
    let value: Option<String> = redis::cmd("HGET").arg("S").arg(owner).query(con).unwrap();
    value.map(|value| {
        let (ends, count) = value.split_once(' ').expect("'<deadline> <permits>'");
        (ends.parse().unwrap(), count.parse().unwrap())
    })
}

/// The holders' fields of the semaphore's hash (every field but 'limit', 'used' and
/// 'waiting').
fn holders(con: &mut Connection) -> Vec<String> {
    let mut fields: Vec<String> = redis::cmd("HKEYS").arg("S").query(con).unwrap();
    fields.retain(|field| !["limit", "used", "waiting"].contains(&field.as_str()));
    fields.sort();
    fields
}

fn marked(con: &mut Connection) -> bool {
    redis::cmd("HEXISTS")
        .arg("S")
        .arg("waiting")
        .query(con)
        .unwrap()
}

fn int(value: &redis::Value) -> i64 {
    redis::from_redis_value(value.clone()).unwrap()
}

#[test]
fn grants_count_permits_and_refusals_say_how_long() {
    let server = server();
    let mut con = raw(&server);
    let (granted, first) = acquire(&mut con, "a", 2, 3, 10_000, 0).unwrap();
    assert_eq!(granted, 1);
    assert!(first > 1_000_000_000_000_000, "clock-seeded token: {first}");
    let (granted, second) = acquire(&mut con, "b", 1, 3, 5_000, 0).unwrap();
    assert_eq!(granted, 1);
    assert!(second > first, "a token per grant");
    // Full: refused with the earliest lease end (b's, 5 s), nothing written.
    let (granted, ms) = acquire(&mut con, "c", 1, 3, 10_000, 0).unwrap();
    assert_eq!(granted, 0);
    assert!((4_000..=5_000).contains(&ms), "{ms}");
    let queued: i64 = redis::cmd("ZCARD").arg(QUEUE).query(&mut con).unwrap();
    assert_eq!(queued, 0, "try once never joins the line");
    assert!(!marked(&mut con), "nor marks the hash");
    // A retry by a holder is granted again with a new token, its lease set again; it keeps
    // the permits it holds, whatever count it asks with (no way past N).
    let (again, retried) = acquire(&mut con, "b", 3, 3, 8_000, 0).unwrap();
    assert_eq!(again, 1);
    assert!(retried > second);
    let (ends, count) = holder(&mut con, "b").unwrap();
    assert_eq!(count, 1, "b still holds one permit");
    let now = server_ms(&mut con);
    assert!(
        (7_000..=8_000).contains(&(ends - now)),
        "its lease set again"
    );
    assert_eq!(used(&mut con), Some(3));
    // The hash lasts as long as its latest lease.
    assert!(pttl(&server, "S") > 9_000);
    let reply = inspect(&mut con).unwrap();
    assert_eq!(int(&reply[0]), 3, "limit");
    assert_eq!(int(&reply[1]), retried, "counter");
    assert_eq!(int(&reply[2]), 0, "waiting");
    // b (8 s) ends before a (10 s): earliest first.
    let owners: Vec<String> = [3, 6]
        .iter()
        .map(|i| redis::from_redis_value(reply[*i].clone()).unwrap())
        .collect();
    assert_eq!(owners, ["b", "a"]);
    assert_eq!((int(&reply[4]), int(&reply[7])), (1, 2), "permits each");
}

#[test]
fn a_mismatched_n_a_wrong_type_and_a_broken_counter_are_refused_with_nothing_written() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "a", 1, 3, 10_000, 0).unwrap().0, 1);
    let err = acquire(&mut con, "b", 1, 4, 10_000, 500).unwrap_err();
    assert_eq!(err.code(), Some("PERMITS"), "{err}");
    assert_eq!(err.detail(), Some("3"));
    let queued: i64 = redis::cmd("ZCARD").arg(QUEUE).query(&mut con).unwrap();
    assert_eq!(queued, 0, "nothing written");
    assert_eq!(holders(&mut con), ["a"]);
    redis::cmd("DEL").arg(&KEYS[..]).exec(&mut con).unwrap();
    redis::cmd("SET").arg("S").arg("x").exec(&mut con).unwrap();
    let err = acquire(&mut con, "a", 1, 3, 10_000, 0).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    assert!(
        err.to_string()
            .contains("S holds a string, not a semaphore"),
        "{err}"
    );
    redis::cmd("DEL").arg("S").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg(FENCE)
        .arg("nope")
        .exec(&mut con)
        .unwrap();
    let err = acquire(&mut con, "a", 1, 3, 10_000, 0).unwrap_err();
    assert!(
        err.to_string().contains("is not a fencing counter"),
        "{err}"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("S").query(&mut con).unwrap();
    assert_eq!(exists, 0);
    // Release and extend do not read the counter; inspect does, and says so.
    assert_eq!(release(&mut con, "a").unwrap(), 0);
    assert_eq!(extend(&mut con, "a", 1_000).unwrap(), 0);
    let err = inspect(&mut con).unwrap_err();
    assert!(err.to_string().contains("fencing counter"), "{err}");
    redis::cmd("DEL").arg(FENCE).exec(&mut con).unwrap();
    redis::cmd("SET").arg("S").arg("x").exec(&mut con).unwrap();
    for err in [
        release(&mut con, "a").unwrap_err(),
        extend(&mut con, "a", 1_000).unwrap_err(),
        inspect(&mut con).unwrap_err(),
        resize(&mut con, 2).unwrap_err(),
    ] {
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    }
    // A hash that is no semaphore's (an RwLock's hold, a hash of the application's): every
    // script that reads it refuses it, and nothing is written.
    for fields in [&["h:r1", "1 r 1 bob"][..], &["name", "x"], &["used", "1"]] {
        redis::cmd("DEL").arg("S").exec(&mut con).unwrap();
        redis::cmd("HSET")
            .arg("S")
            .arg(fields)
            .exec(&mut con)
            .unwrap();
        for slow in [false, true] {
            SLOW_ONLY.store(slow, std::sync::atomic::Ordering::SeqCst);
            for err in [
                acquire(&mut con, "a", 1, 3, 10_000, 500).unwrap_err(),
                release(&mut con, "a").unwrap_err(),
                inspect(&mut con).unwrap_err(),
                resize(&mut con, 2).unwrap_err(),
            ] {
                assert!(
                    err.to_string()
                        .contains("S holds a hash that is not a semaphore"),
                    "{fields:?}: {err}"
                );
            }
        }
        SLOW_ONLY.store(false, std::sync::atomic::Ordering::SeqCst);
        let left: Vec<String> = redis::cmd("HGETALL").arg("S").query(&mut con).unwrap();
        assert_eq!(left, fields, "nothing written");
        let queued: i64 = redis::cmd("EXISTS").arg(QUEUE).query(&mut con).unwrap();
        assert_eq!(queued, 0, "nobody joined the line");
    }
}

#[test]
fn waiters_are_served_in_line_and_woken_by_a_release() {
    let server = server();
    let mut con = raw(&server);
    let mut wakes = subscribed(&server, CHANNEL);
    assert_eq!(acquire(&mut con, "holder", 2, 2, 10_000, 0).unwrap().0, 1);
    // "many" wants 2 and queues first; "one" wants 1 and queues behind it.
    assert_eq!(acquire(&mut con, "many", 2, 2, 10_000, 2_000).unwrap().0, 0);
    assert_eq!(acquire(&mut con, "one", 1, 2, 10_000, 2_000).unwrap().0, 0);
    let line: Vec<String> = redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(line, ["many", "one"]);
    assert!(pttl(&server, QUEUE) > 0 && pttl(&server, "S") >= pttl(&server, QUEUE));
    // Waiters mark the hash, so that a release wakes them (its fast path would not look).
    assert!(marked(&mut con));
    // The release wakes the head of the line.
    assert_eq!(release(&mut con, "holder").unwrap(), 1);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("many"));
    // Permits are free, but "one" is not first: refused with -2, and the head is prodded.
    assert_eq!(
        acquire(&mut con, "one", 1, 2, 10_000, 2_000).unwrap(),
        (0, -2)
    );
    assert_eq!(next_message(&mut wakes).as_deref(), Some("many"));
    // The head takes both; none left, so nobody else is woken.
    assert_eq!(acquire(&mut con, "many", 2, 2, 10_000, 2_000).unwrap().0, 1);
    assert!(nothing_more(&server, &mut wakes, CHANNEL));
    // Released, the next is woken; its grant leaves a permit, but nobody is behind it.
    assert_eq!(release(&mut con, "many").unwrap(), 1);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("one"));
    assert!(marked(&mut con), "marked while anyone is in line");
    assert_eq!(acquire(&mut con, "one", 1, 2, 10_000, 2_000).unwrap().0, 1);
    assert!(!marked(&mut con), "the mark goes with the line");
    // A second release of the same permits: gone (0); a waiter that gives up: 0.
    assert_eq!(release(&mut con, "many").unwrap(), 0);
    assert_eq!(release(&mut con, "one").unwrap(), 1);
    // Nobody holds or waits: only the counter is left.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [FENCE]);
}

#[test]
fn a_grant_that_leaves_permits_wakes_the_next_in_line() {
    let server = server();
    let mut con = raw(&server);
    let mut wakes = subscribed(&server, CHANNEL);
    assert_eq!(acquire(&mut con, "holder", 3, 3, 10_000, 0).unwrap().0, 1);
    assert_eq!(
        acquire(&mut con, "first", 1, 3, 10_000, 2_000).unwrap().0,
        0
    );
    assert_eq!(
        acquire(&mut con, "second", 1, 3, 10_000, 2_000).unwrap().0,
        0
    );
    assert_eq!(release(&mut con, "holder").unwrap(), 1);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("first"));
    assert_eq!(
        acquire(&mut con, "first", 1, 3, 10_000, 2_000).unwrap().0,
        1
    );
    assert_eq!(next_message(&mut wakes).as_deref(), Some("second"));
}

#[test]
fn an_ended_lease_comes_back_to_the_waiter_the_hash_lives_for() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "short", 1, 1, 50, 0).unwrap().0, 1);
    // Only the server's clock ends it: refused until then.
    assert_eq!(acquire(&mut con, "next", 1, 1, 10_000, 2_000).unwrap().0, 0);
    lease_ended(&mut con, "short");
    // The hash outlives its last lease for the waiter in line (its TTL is the line's).
    assert!(pttl(&server, "S") > 1_000, "the hash lives on for the line");
    assert_eq!(extend(&mut con, "short", 1_000).unwrap(), 0, "gone");
    assert_eq!(acquire(&mut con, "next", 1, 1, 10_000, 2_000).unwrap().0, 1);
    assert_eq!(
        holders(&mut con),
        ["next"],
        "the ended holder was reclaimed"
    );
    assert_eq!(used(&mut con), Some(1));
    let ttl = pttl(&server, "S");
    assert!(
        ttl > 9_000 && ttl <= 10_000,
        "the latest lease's TTL: {ttl}"
    );
}

#[test]
fn extend_is_owner_checked_and_ends_with_the_lease() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "a", 1, 2, 200, 0).unwrap().0, 1);
    assert_eq!(extend(&mut con, "a", 10_000).unwrap(), 1);
    assert!(
        pttl(&server, "S") > 9_000,
        "the holders key follows its latest lease"
    );
    assert_eq!(extend(&mut con, "nobody", 10_000).unwrap(), 0);
    assert_eq!(acquire(&mut con, "b", 1, 2, 30, 0).unwrap().0, 1);
    lease_ended(&mut con, "b");
    // b's lease ended on the server's clock (its entry may still be there): not extended.
    assert_eq!(extend(&mut con, "b", 10_000).unwrap(), 0);
}

#[test]
fn resize_changes_n_on_purpose_and_wakes_the_line() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(
        resize(&mut con, 5).unwrap(),
        0,
        "idle: nothing to replace, nothing kept"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("S").query(&mut con).unwrap();
    assert_eq!(exists, 0);
    let mut wakes = subscribed(&server, CHANNEL);
    assert_eq!(acquire(&mut con, "a", 1, 1, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "b", 1, 1, 10_000, 2_000).unwrap().0, 0);
    assert_eq!(resize(&mut con, 2).unwrap(), 1);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("b"));
    assert_eq!(
        acquire(&mut con, "b", 1, 1, 10_000, 2_000)
            .unwrap_err()
            .code(),
        Some("PERMITS")
    );
    assert_eq!(acquire(&mut con, "b", 1, 2, 10_000, 2_000).unwrap().0, 1);
    // Shrinking below what is held keeps the holders; nobody more is granted.
    assert_eq!(resize(&mut con, 1).unwrap(), 2);
    assert_eq!(acquire(&mut con, "c", 1, 1, 10_000, 0).unwrap().0, 0);
    let reply = inspect(&mut con).unwrap();
    assert_eq!((int(&reply[0]), reply.len()), (1, 3 + 2 * 3));
}

fn used(con: &mut Connection) -> Option<i64> {
    redis::cmd("HGET").arg("S").arg("used").query(con).unwrap()
}

#[test]
fn used_counts_every_holder_on_the_fast_path_and_the_slow_one_alike() {
    let server = server();
    let mut con = raw(&server);
    // Fast grants (nobody in line) count their permits; a fast release takes them off.
    assert_eq!(acquire(&mut con, "a", 2, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "b", 1, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(used(&mut con), Some(3));
    assert!(pttl(&server, "S") > 9_000);
    assert_eq!(release(&mut con, "a").unwrap(), 1);
    assert_eq!(used(&mut con), Some(1));
    assert_eq!(release(&mut con, "a").unwrap(), 0, "a second release: gone");
    // With somebody in line, the slow path serves and keeps the count the same way.
    assert_eq!(acquire(&mut con, "c", 3, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "d", 1, 4, 10_000, 2_000).unwrap().0, 0);
    assert_eq!(used(&mut con), Some(4));
    assert_eq!(release(&mut con, "b").unwrap(), 1);
    assert_eq!(used(&mut con), Some(3));
    assert_eq!(acquire(&mut con, "d", 1, 4, 10_000, 2_000).unwrap().0, 1);
    assert_eq!(used(&mut con), Some(4));
    // A holder whose lease ended is still counted until reclaimed: never less than the
    // truth, so the fast path refuses and the slow one reclaims.
    for owner in ["c", "d"] {
        assert_eq!(release(&mut con, owner).unwrap(), 1);
    }
    assert_eq!(acquire(&mut con, "short", 4, 4, 30, 0).unwrap().0, 1);
    // A waiter keeps the hash alive past its holders' leases.
    assert_eq!(acquire(&mut con, "e", 4, 4, 10_000, 2_000).unwrap().0, 0);
    lease_ended(&mut con, "short");
    assert_eq!(used(&mut con), Some(4), "counted until reclaimed");
    assert_eq!(acquire(&mut con, "e", 4, 4, 10_000, 2_000).unwrap().0, 1);
    assert_eq!(used(&mut con), Some(4), "reclaimed, and e's counted");
    // The last holder gone, nothing but the counter is left.
    assert_eq!(release(&mut con, "e").unwrap(), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [FENCE]);
}

#[test]
fn fast_grants_raise_the_ttl_never_lower_it_and_leave_no_key_without_one() {
    let server = server();
    let mut con = raw(&server);
    // A new semaphore: the hash gets the lease.
    assert_eq!(acquire(&mut con, "long", 1, 4, 60_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 59_000);
    // A shorter lease on the fast path leaves the longer TTL alone.
    assert_eq!(acquire(&mut con, "short", 1, 4, 5_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 59_000);
    // A longer one raises it.
    assert_eq!(acquire(&mut con, "longer", 1, 4, 120_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 119_000);
    assert_eq!(used(&mut con), Some(3));
    // A hash whose TTL was taken away by hand: the fast grant gives it one (a raise alone
    // would leave it without).
    let _: i64 = redis::cmd("PERSIST").arg("S").query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "again", 1, 4, 10_000, 0).unwrap().0, 1);
    let ttl = pttl(&server, "S");
    assert!(ttl > 9_000 && ttl <= 10_000, "the hash's TTL: {ttl}");
    // An extension raises it too, and a shorter one never lowers it.
    assert_eq!(extend(&mut con, "again", 30_000).unwrap(), 1);
    assert!(pttl(&server, "S") > 29_000);
    assert_eq!(extend(&mut con, "again", 1_000).unwrap(), 1);
    assert!(pttl(&server, "S") > 28_000, "never lowered");
    let (ends, count) = holder(&mut con, "again").unwrap();
    let left = ends - server_ms(&mut con);
    assert!((0..=1_000).contains(&left), "its own lease: {left}");
    assert_eq!(count, 1);
}

#[test]
fn a_fast_release_of_the_last_holder_deletes_the_hash_and_of_another_only_its_own() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "a", 2, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "b", 1, 4, 10_000, 0).unwrap().0, 1);
    // Not the last: its field and its permits go; the rest stays.
    assert_eq!(release(&mut con, "a").unwrap(), 1);
    assert_eq!(used(&mut con), Some(1));
    assert_eq!(holders(&mut con), ["b"]);
    // The last: the hash goes, the counter stays.
    assert_eq!(release(&mut con, "b").unwrap(), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [FENCE]);
    // A release after the lease ended says so, and takes the ended holder away.
    assert_eq!(acquire(&mut con, "c", 1, 4, 30, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "d", 1, 4, 10_000, 0).unwrap().0, 1);
    lease_ended(&mut con, "c");
    assert_eq!(release(&mut con, "c").unwrap(), 0, "its lease ended");
    assert_eq!(holders(&mut con), ["d"]);
    assert_eq!(used(&mut con), Some(1));
}

#[test]
fn the_slow_path_alone_gives_the_same_replies() {
    // As a cluster runs the scripts (no fast path): the whole reply table again.
    SLOW_ONLY.store(true, std::sync::atomic::Ordering::SeqCst);
    grants_count_permits_and_refusals_say_how_long();
    waiters_are_served_in_line_and_woken_by_a_release();
    used_counts_every_holder_on_the_fast_path_and_the_slow_one_alike();
    a_fast_release_of_the_last_holder_deletes_the_hash_and_of_another_only_its_own();
}

#[test]
fn a_token_is_the_server_clock_or_one_past_a_counter_ahead_of_it_on_either_path() {
    let server = server();
    let mut con = raw(&server);
    // A new semaphore and one with a holder (the fast path), then the slow path alone.
    for slow in [false, true] {
        SLOW_ONLY.store(slow, std::sync::atomic::Ordering::SeqCst);
        redis::cmd("DEL").arg(&KEYS[..]).exec(&mut con).unwrap();
        let before = server_micros(&mut con);
        let (granted, first) = acquire(&mut con, "a", 1, 3, 10_000, 0).unwrap();
        assert_eq!(granted, 1);
        assert!(
            first >= before,
            "seeded from the clock: {first} >= {before}"
        );
        let counter: i64 = redis::cmd("GET").arg(FENCE).query(&mut con).unwrap();
        assert_eq!(counter, first, "the counter holds the token");
        // Ahead of the clock (more than one grant per µs): one more.
        let ahead = server_micros(&mut con) + 10_000_000;
        redis::cmd("SET")
            .arg(FENCE)
            .arg(ahead)
            .exec(&mut con)
            .unwrap();
        let (granted, second) = acquire(&mut con, "b", 1, 3, 10_000, 0).unwrap();
        assert_eq!((granted, second), (1, ahead + 1), "slow path alone: {slow}");
        let counter: i64 = redis::cmd("GET").arg(FENCE).query(&mut con).unwrap();
        assert_eq!(counter, ahead + 1);
        assert_eq!(
            holders(&mut con),
            ["a", "b"],
            "one field per grant, none left by a fast path undone"
        );
    }
    SLOW_ONLY.store(false, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn ten_thousand_ended_holders_are_reclaimed_by_one_acquire() {
    // More than Lua's unpack gives at once (about 8,000): the reclaim deletes them in slices.
    let server = server();
    let mut con = raw(&server);
    common::put_semaphore(&mut con, "S", 10_000, 10_000, 1);
    // Full by the count, so the fast path refuses and the slow path reclaims all of them.
    assert_eq!(
        acquire(&mut con, "next", 1, 10_000, 10_000, 0).unwrap().0,
        1
    );
    assert_eq!(holders(&mut con), ["next"]);
    assert_eq!(used(&mut con), Some(1));
}

#[test]
fn a_line_that_outlived_its_hash_is_served_before_a_newcomer() {
    // `break` deletes the hash and wakes the line, which lives on: the first acquirer after it
    // must not take the fast path past the waiters.
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "holder", 1, 1, 10_000, 0).unwrap().0, 1);
    assert_eq!(
        acquire(&mut con, "waiter", 1, 1, 10_000, 2_000).unwrap().0,
        0
    );
    redis::cmd("DEL").arg("S").exec(&mut con).unwrap();
    assert_eq!(
        acquire(&mut con, "newcomer", 1, 1, 10_000, 0).unwrap(),
        (0, -2),
        "the waiter first"
    );
    assert_eq!(
        acquire(&mut con, "waiter", 1, 1, 10_000, 2_000).unwrap().0,
        1
    );
    assert_eq!(holders(&mut con), ["waiter"]);
    assert!(!marked(&mut con), "the line is gone, and its mark");
    let queued: i64 = redis::cmd("EXISTS").arg(QUEUE).query(&mut con).unwrap();
    assert_eq!(queued, 0);
}

/// A permit kept as a plain key, as the client's first attempt writes it: `'<owner> <N>'`
/// with the lease as its TTL.
fn plain(con: &mut Connection, owner: &str, limit: u32, lease_ms: u64) {
    redis::cmd("SET")
        .arg("S")
        .arg(format!("{owner} {limit}"))
        .arg("PX")
        .arg(lease_ms)
        .exec(con)
        .unwrap();
}

fn kind(con: &mut Connection) -> String {
    redis::cmd("TYPE").arg("S").query(con).unwrap()
}

#[test]
fn a_permit_kept_as_a_plain_key_is_read_as_the_hash_it_stands_for() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, "p", 3, 8_000);
    let reply = inspect(&mut con).unwrap();
    assert_eq!(int(&reply[0]), 3, "N from the value");
    assert_eq!(reply.len(), 6, "one holder: {reply:?}");
    let owner: String = redis::from_redis_value(reply[3].clone()).unwrap();
    assert_eq!((owner.as_str(), int(&reply[4])), ("p", 1));
    assert!((7_000..=8_000).contains(&int(&reply[5])), "{reply:?}");
    assert_eq!(kind(&mut con), "string", "inspecting writes nothing");
    // The owner extends it: the key's TTL is the lease; anybody else holds nothing there.
    assert_eq!(extend(&mut con, "p", 20_000).unwrap(), 1);
    assert!(pttl(&server, "S") > 19_000);
    assert_eq!(extend(&mut con, "q", 20_000).unwrap(), 0);
    assert_eq!(kind(&mut con), "string");
    // Its owner releases it, on the fast path and on the slow one alike.
    for slow in [false, true] {
        SLOW_ONLY.store(slow, std::sync::atomic::Ordering::SeqCst);
        plain(&mut con, "p", 3, 8_000);
        assert_eq!(release(&mut con, "p").unwrap(), 1, "slow: {slow}");
        let exists: i64 = redis::cmd("EXISTS").arg("S").query(&mut con).unwrap();
        assert_eq!(exists, 0, "slow: {slow}");
    }
    SLOW_ONLY.store(false, std::sync::atomic::Ordering::SeqCst);
    // Gone with its lease: the release says so.
    plain(&mut con, "p", 3, 1);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(release(&mut con, "p").unwrap(), 0);
    assert_eq!(extend(&mut con, "p", 1_000).unwrap(), 0);
}

#[test]
fn a_second_acquirer_turns_a_plain_permit_into_the_hash_and_n_still_counts() {
    let server = server();
    let mut con = raw(&server);
    for slow in [false, true] {
        SLOW_ONLY.store(slow, std::sync::atomic::Ordering::SeqCst);
        redis::cmd("DEL").arg(&KEYS[..]).exec(&mut con).unwrap();
        plain(&mut con, "p", 2, 8_000);
        // Another N: refused, nothing written.
        let err = acquire(&mut con, "b", 1, 3, 10_000, 500).unwrap_err();
        assert_eq!(err.code(), Some("PERMITS"), "{err}");
        assert_eq!(err.detail(), Some("2"));
        assert_eq!(kind(&mut con), "string", "nothing written");
        // The same N: granted beside it, in the hash, the plain holder with its own lease.
        let (granted, token) = acquire(&mut con, "b", 1, 2, 20_000, 0).unwrap();
        assert_eq!(granted, 1, "slow: {slow}");
        assert!(token > 1_000_000_000_000_000);
        assert_eq!(kind(&mut con), "hash");
        assert_eq!(holders(&mut con), ["b", "p"]);
        assert_eq!(used(&mut con), Some(2));
        let (ends, count) = holder(&mut con, "p").unwrap();
        let now = server_ms(&mut con);
        assert_eq!(count, 1);
        assert!((7_000..=8_000).contains(&(ends - now)), "{}", ends - now);
        assert!(pttl(&server, "S") > 19_000, "the latest lease");
        // Full now: refused with the plain holder's lease end, the earliest.
        let (granted, ms) = acquire(&mut con, "c", 1, 2, 10_000, 0).unwrap();
        assert_eq!(granted, 0);
        assert!((7_000..=8_000).contains(&ms), "{ms}");
        // Its owner releases it from the hash.
        assert_eq!(release(&mut con, "p").unwrap(), 1);
        assert_eq!(holders(&mut con), ["b"]);
    }
    SLOW_ONLY.store(false, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_waiter_behind_a_plain_permit_is_woken_by_its_release() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, "p", 1, 8_000);
    let mut sub = subscribed(&server, CHANNEL);
    let (granted, ms) = acquire(&mut con, "w", 1, 1, 10_000, 2_000).unwrap();
    assert_eq!(granted, 0);
    assert!((7_000..=8_000).contains(&ms), "{ms}");
    // The waiter's script turned the key into the hash and marked it.
    assert_eq!(kind(&mut con), "hash");
    assert!(marked(&mut con));
    assert!(pttl(&server, "S") > 7_000, "no key without a TTL");
    assert_eq!(release(&mut con, "p").unwrap(), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("w"));
    assert!(nothing_more(&server, &mut sub, CHANNEL));
    assert_eq!(acquire(&mut con, "w", 1, 1, 10_000, 2_000).unwrap().0, 1);
}

#[test]
fn resize_turns_a_plain_permit_into_the_hash_with_the_new_n() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, "p", 1, 8_000);
    assert_eq!(resize(&mut con, 3).unwrap(), 1, "the N it replaced");
    assert_eq!(kind(&mut con), "hash");
    assert_eq!(holders(&mut con), ["p"]);
    let limit: i64 = redis::cmd("HGET")
        .arg("S")
        .arg("limit")
        .query(&mut con)
        .unwrap();
    assert_eq!(limit, 3);
    assert!(pttl(&server, "S") > 7_000);
    assert_eq!(acquire(&mut con, "b", 2, 3, 10_000, 0).unwrap().0, 1);
}

#[test]
fn a_string_that_is_no_permit_is_refused_by_every_script() {
    let server = server();
    let mut con = raw(&server);
    // A Mutex's owner token has no space; a permit-like value without a TTL is nobody's.
    for (value, ttl) in [("0123abcd", Some(8_000)), ("p 3", None)] {
        redis::cmd("DEL").arg("S").exec(&mut con).unwrap();
        let mut set = redis::cmd("SET");
        set.arg("S").arg(value);
        if let Some(ttl) = ttl {
            set.arg("PX").arg(ttl);
        }
        set.exec(&mut con).unwrap();
        for err in [
            acquire(&mut con, "a", 1, 3, 10_000, 500).unwrap_err(),
            release(&mut con, "a").unwrap_err(),
            extend(&mut con, "a", 1_000).unwrap_err(),
            inspect(&mut con).unwrap_err(),
            resize(&mut con, 2).unwrap_err(),
        ] {
            assert_eq!(err.code(), Some("WRONGTYPE"), "{value}: {err}");
        }
        let left: String = redis::cmd("GET").arg("S").query(&mut con).unwrap();
        assert_eq!(left, value, "nothing written");
    }
}

#[test]
fn a_grant_records_the_connection_named_among_the_counters_epochs() {
    let server = server();
    let mut con = raw(&server);
    let acquire_named = |con: &mut Connection, owner: &str, name: &str| {
        fast_first(
            include_str!("../src/semaphore/acquire_first.lua"),
            include_str!("../src/semaphore/acquire.lua"),
        )
        .key(&KEYS[..])
        .key("{S}:epoch")
        .arg(owner)
        .arg(1)
        .arg(2)
        .arg(10_000)
        .arg(0)
        .arg(CHANNEL)
        .arg(name)
        .invoke::<(i64, i64)>(con)
    };
    // A re-grant of a permit kept as a plain key (how the first attempt has a grant it could
    // not number itself numbered) records the name, with a TTL of an hour.
    plain(&mut con, "p", 2, 8_000);
    let (granted, token) = acquire_named(&mut con, "p", "redis-locks:conn").unwrap();
    assert_eq!(granted, 1);
    assert!(token > 1_000_000_000_000_000);
    let score: Option<i64> = redis::cmd("ZSCORE")
        .arg("{S}:epoch")
        .arg("redis-locks:conn")
        .query(&mut con)
        .unwrap();
    assert!(score.is_some());
    let left = pttl(&server, "{S}:epoch");
    assert!(left > 3_500_000 && left <= 3_600_000, "{left}");
    // Epochs of another type: refused before anything is written.
    redis::cmd("DEL")
        .arg(&KEYS[..])
        .arg("{S}:epoch")
        .exec(&mut con)
        .unwrap();
    redis::cmd("SET")
        .arg("{S}:epoch")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    plain(&mut con, "p", 2, 8_000);
    let err = acquire_named(&mut con, "p", "redis-locks:conn").unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert_eq!(kind(&mut con), "string", "nothing written");
}
