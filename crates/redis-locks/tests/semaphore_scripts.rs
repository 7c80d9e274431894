//! The Semaphore's scripts, called directly on a real server: every branch and reply of
//! their headers.

mod common;

use common::{
    FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, next_message, nothing_more, pttl, raw, server,
    server_micros, server_ms, subscribed,
};
use redis::Connection;

const PERMITS_LUA: &str = include_str!("../src/semaphore/permits.lua");
/// holders, permits, fence, queue, places, tickets.
const KEYS: [&str; 6] = [
    "S",
    "{S}:permits",
    "{S}:fence",
    "{S}:queue",
    "{S}:places",
    "{S}:tickets",
];
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
        .key(&[KEYS[0], KEYS[1], KEYS[3], KEYS[4], KEYS[5]][..])
        .arg(owner)
        .arg(CHANNEL)
        .invoke(con)
}

fn extend(con: &mut Connection, owner: &str, lease_ms: u64) -> redis::RedisResult<i64> {
    script(include_str!("../src/semaphore/extend.lua"))
        .key(&[KEYS[0], KEYS[1], KEYS[3]][..])
        .arg(owner)
        .arg(lease_ms)
        .invoke(con)
}

fn inspect(con: &mut Connection) -> redis::RedisResult<Vec<redis::Value>> {
    script(include_str!("../src/semaphore/inspect.lua"))
        .key(&[KEYS[0], KEYS[1], KEYS[2], KEYS[4]][..])
        .invoke(con)
}

fn resize(con: &mut Connection, limit: u32) -> redis::RedisResult<i64> {
    script(include_str!("../src/semaphore/resize.lua"))
        .key(&[KEYS[0], KEYS[1], KEYS[3], KEYS[4]][..])
        .arg(limit)
        .arg(CHANNEL)
        .invoke(con)
}

/// Waits (at most 5 s) until the server's clock has passed `owner`'s lease end (or its entry
/// is gone): the server, not a sleep of the test's, decides when a lease ended.
fn lease_ended(con: &mut Connection, owner: &str) {
    let within = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let ends: Option<f64> = redis::cmd("ZSCORE").arg("S").arg(owner).query(con).unwrap();
        let now = server_ms(con) as f64;
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
    let queued: i64 = redis::cmd("ZCARD").arg(KEYS[3]).query(&mut con).unwrap();
    assert_eq!(queued, 0, "try once never joins the line");
    // A retry by a holder is granted again with a new token, its lease set again; it keeps
    // the permits it holds, whatever count it asks with (no way past N).
    let (again, retried) = acquire(&mut con, "b", 3, 3, 8_000, 0).unwrap();
    assert_eq!(again, 1);
    assert!(retried > second);
    let count: i64 = redis::cmd("HGET")
        .arg(KEYS[1])
        .arg("b")
        .query(&mut con)
        .unwrap();
    assert_eq!(count, 1, "b still holds one permit");
    // The holders key lasts as long as its latest lease; the hash as long as the holders.
    assert!(pttl(&server, "S") > 9_000);
    assert!(pttl(&server, KEYS[1]) > 9_000);
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
    let queued: i64 = redis::cmd("ZCARD").arg(KEYS[3]).query(&mut con).unwrap();
    assert_eq!(queued, 0, "nothing written");
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
        .arg(KEYS[2])
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
    redis::cmd("DEL").arg(KEYS[2]).exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg(KEYS[1])
        .arg("x")
        .exec(&mut con)
        .unwrap();
    for err in [
        release(&mut con, "a").unwrap_err(),
        extend(&mut con, "a", 1_000).unwrap_err(),
        inspect(&mut con).unwrap_err(),
        resize(&mut con, 2).unwrap_err(),
    ] {
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
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
        .arg(KEYS[3])
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(line, ["many", "one"]);
    assert!(pttl(&server, KEYS[3]) > 0 && pttl(&server, KEYS[1]) > 0);
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
    assert_eq!(acquire(&mut con, "one", 1, 2, 10_000, 2_000).unwrap().0, 1);
    // A second release of the same permits: gone (0); a waiter that gives up: 0.
    assert_eq!(release(&mut con, "many").unwrap(), 0);
    assert_eq!(release(&mut con, "one").unwrap(), 1);
    // Nobody holds or waits: only the counter is left.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [KEYS[2]]);
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
fn expired_permits_come_back_also_when_the_holders_key_expired_whole() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "short", 1, 1, 50, 0).unwrap().0, 1);
    // Only the server's clock ends it: refused until then.
    assert_eq!(acquire(&mut con, "next", 1, 1, 10_000, 2_000).unwrap().0, 0);
    // The holders key goes by its TTL (its latest lease), the hash lives on for the waiter.
    let within = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while redis::cmd("EXISTS")
        .arg("S")
        .query::<i64>(&mut con)
        .unwrap()
        == 1
    {
        assert!(
            std::time::Instant::now() < within,
            "the holders key never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(pttl(&server, KEYS[1]) > 0, "the hash lives on");
    assert_eq!(extend(&mut con, "short", 1_000).unwrap(), 0, "gone");
    assert_eq!(acquire(&mut con, "next", 1, 1, 10_000, 2_000).unwrap().0, 1);
    let stale: Option<String> = redis::cmd("HGET")
        .arg(KEYS[1])
        .arg("short")
        .query(&mut con)
        .unwrap();
    assert_eq!(stale, None, "the gone holder's count was dropped");
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
    let exists: i64 = redis::cmd("EXISTS").arg(KEYS[1]).query(&mut con).unwrap();
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
    redis::cmd("HGET")
        .arg(KEYS[1])
        .arg("used")
        .query(con)
        .unwrap()
}

#[test]
fn used_counts_every_holder_on_the_fast_path_and_the_slow_one_alike() {
    let server = server();
    let mut con = raw(&server);
    // Fast grants (nobody in line) count their permits; a fast release takes them off.
    assert_eq!(acquire(&mut con, "a", 2, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "b", 1, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(used(&mut con), Some(3));
    assert!(pttl(&server, "S") > 9_000 && pttl(&server, KEYS[1]) > 9_000);
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
    // A waiter keeps the hash alive past the holders key's TTL.
    assert_eq!(acquire(&mut con, "e", 4, 4, 10_000, 2_000).unwrap().0, 0);
    lease_ended(&mut con, "short");
    assert_eq!(used(&mut con), Some(4), "counted until reclaimed");
    assert_eq!(acquire(&mut con, "e", 4, 4, 10_000, 2_000).unwrap().0, 1);
    assert_eq!(used(&mut con), Some(4), "reclaimed, and e's counted");
    // The last holder gone, nothing but the counter is left.
    assert_eq!(release(&mut con, "e").unwrap(), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [KEYS[2]]);
}

#[test]
fn fast_grants_raise_both_ttls_never_lower_them_and_leave_no_key_without_one() {
    let server = server();
    let mut con = raw(&server);
    // A new semaphore: both keys get the lease.
    assert_eq!(acquire(&mut con, "long", 1, 4, 60_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 59_000 && pttl(&server, KEYS[1]) > 59_000);
    // A shorter lease on the fast path leaves the longer TTLs alone.
    assert_eq!(acquire(&mut con, "short", 1, 4, 5_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 59_000 && pttl(&server, KEYS[1]) > 59_000);
    // A longer one raises both.
    assert_eq!(acquire(&mut con, "longer", 1, 4, 120_000, 0).unwrap().0, 1);
    assert!(pttl(&server, "S") > 119_000 && pttl(&server, KEYS[1]) > 119_000);
    assert_eq!(used(&mut con), Some(3));
    // A holders key deleted by hand while the hash lives: the fast grant makes the key
    // again, and gives it a TTL (a raise alone would leave a key without one).
    let _: i64 = redis::cmd("DEL").arg("S").query(&mut con).unwrap();
    assert_eq!(acquire(&mut con, "again", 1, 4, 10_000, 0).unwrap().0, 1);
    let ttl = pttl(&server, "S");
    assert!(
        ttl > 9_000 && ttl <= 10_000,
        "the remade holders key's TTL: {ttl}"
    );
    assert!(
        pttl(&server, KEYS[1]) > 119_000,
        "the hash's TTL is never lowered"
    );
}

#[test]
fn a_fast_release_of_the_last_holder_deletes_both_keys_and_of_another_only_its_own() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, "a", 2, 4, 10_000, 0).unwrap().0, 1);
    assert_eq!(acquire(&mut con, "b", 1, 4, 10_000, 0).unwrap().0, 1);
    // Not the last: its entry, its count and its permits go; the rest stays.
    assert_eq!(release(&mut con, "a").unwrap(), 1);
    assert_eq!(used(&mut con), Some(1));
    let counted: Option<i64> = redis::cmd("HGET")
        .arg(KEYS[1])
        .arg("a")
        .query(&mut con)
        .unwrap();
    assert_eq!(counted, None);
    let holders: Vec<String> = redis::cmd("ZRANGE")
        .arg("S")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(holders, ["b"]);
    // The last: both keys at once, the counter stays.
    assert_eq!(release(&mut con, "b").unwrap(), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, [KEYS[2]]);
    // A release after the lease ended says so, and takes the expired entry away.
    assert_eq!(acquire(&mut con, "c", 1, 4, 30, 0).unwrap().0, 1);
    lease_ended(&mut con, "c");
    assert_eq!(release(&mut con, "c").unwrap(), 0, "its lease ended");
}

#[test]
fn the_slow_path_alone_gives_the_same_replies() {
    // As a cluster runs the scripts (no fast path): the whole reply table again.
    SLOW_ONLY.store(true, std::sync::atomic::Ordering::SeqCst);
    grants_count_permits_and_refusals_say_how_long();
    waiters_are_served_in_line_and_woken_by_a_release();
    used_counts_every_holder_on_the_fast_path_and_the_slow_one_alike();
    a_fast_release_of_the_last_holder_deletes_both_keys_and_of_another_only_its_own();
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
        let counter: i64 = redis::cmd("GET").arg(KEYS[2]).query(&mut con).unwrap();
        assert_eq!(counter, first, "the counter holds the token");
        // Ahead of the clock (more than one grant per µs): one more.
        let ahead = server_micros(&mut con) + 10_000_000;
        redis::cmd("SET")
            .arg(KEYS[2])
            .arg(ahead)
            .exec(&mut con)
            .unwrap();
        let (granted, second) = acquire(&mut con, "b", 1, 3, 10_000, 0).unwrap();
        assert_eq!((granted, second), (1, ahead + 1), "slow path alone: {slow}");
        let counter: i64 = redis::cmd("GET").arg(KEYS[2]).query(&mut con).unwrap();
        assert_eq!(counter, ahead + 1);
        let holders: i64 = redis::cmd("ZCARD").arg(KEYS[0]).query(&mut con).unwrap();
        assert_eq!(
            holders, 2,
            "one entry per grant, none left by a fast path undone"
        );
    }
    SLOW_ONLY.store(false, std::sync::atomic::Ordering::SeqCst);
}
