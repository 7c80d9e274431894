//! The FairMutex scripts and the Mutex release's wake-up, called directly on a real server.

mod common;

use std::time::Duration;

use common::{FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, next_message, pttl, raw, server, subscribed};
use redis::Connection;

const KEYS: [&str; 5] = ["F", "{F}:fence", "{F}:queue", "{F}:places", "{F}:tickets"];
const CHANNEL: &str = "{F}:wake";

fn acquire(con: &mut Connection, owner: &str, place_ms: u64) -> redis::RedisResult<(i64, i64)> {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/fair/acquire.lua"),
    ])
    .key(&KEYS[..])
    .arg(owner)
    .arg(10_000)
    .arg(place_ms)
    .arg(CHANNEL)
    .invoke(con)
}

fn release(con: &mut Connection, owner: &str) -> redis::RedisResult<i64> {
    lua(&[LOCK_LUA, QUEUE_LUA, include_str!("../src/fair/release.lua")])
        .key(&[KEYS[0], KEYS[2], KEYS[3], KEYS[4]][..])
        .arg(owner)
        .arg(CHANNEL)
        .invoke(con)
}

fn queue(con: &mut Connection) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(KEYS[2])
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap()
}

#[test]
fn a_free_lock_with_nobody_waiting_is_granted_at_once() {
    let server = server();
    let mut con = raw(&server);
    let (granted, token) = acquire(&mut con, "a", 0).unwrap();
    assert_eq!(granted, 1);
    assert!(token > 1_000_000_000_000_000, "clock-seeded: {token}");
    assert!(pttl(&server, "F") > 9_000);
    // A retry by the same owner is granted again, with a new token that never goes back.
    let (again, retried) = acquire(&mut con, "a", 500).unwrap();
    assert_eq!(again, 1);
    assert!(retried > token, "{retried} > {token}");
}

#[test]
fn waiters_queue_in_arrival_order_and_only_the_head_may_take_the_lock() {
    let server = server();
    let mut con = raw(&server);
    acquire(&mut con, "holder", 0).unwrap();
    let (granted, remaining) = acquire(&mut con, "w1", 5_000).unwrap();
    assert_eq!(granted, 0);
    assert!(remaining > 9_000);
    acquire(&mut con, "w2", 5_000).unwrap();
    acquire(&mut con, "w3", 5_000).unwrap();
    // Asking again keeps the place.
    acquire(&mut con, "w1", 5_000).unwrap();
    assert_eq!(queue(&mut con), ["w1", "w2", "w3"]);
    // try-once never joins the queue.
    assert_eq!(acquire(&mut con, "once", 0).unwrap().0, 0);
    assert_eq!(queue(&mut con).len(), 3);

    let mut wake = subscribed(&server, CHANNEL);
    assert_eq!(release(&mut con, "holder").unwrap(), 1);
    assert_eq!(
        next_message(&mut wake).as_deref(),
        Some("w1"),
        "only the head is woken"
    );
    // The lock is free, but w2 is not the head: refused, and the head is prodded again.
    assert_eq!(acquire(&mut con, "w2", 5_000).unwrap(), (0, -2));
    assert_eq!(next_message(&mut wake).as_deref(), Some("w1"));
    assert_eq!(acquire(&mut con, "once", 0).unwrap(), (0, -2), "no barging");
    assert_eq!(acquire(&mut con, "w1", 5_000).unwrap().0, 1);
    assert_eq!(queue(&mut con), ["w2", "w3"]);
}

#[test]
fn a_waiter_whose_place_lease_ran_out_is_skipped() {
    let server = server();
    let mut con = raw(&server);
    acquire(&mut con, "holder", 0).unwrap();
    acquire(&mut con, "dead", 50).unwrap();
    acquire(&mut con, "alive", 5_000).unwrap();
    std::thread::sleep(Duration::from_millis(80));
    release(&mut con, "holder").unwrap();
    assert_eq!(
        queue(&mut con),
        ["alive"],
        "the release purged the dead waiter"
    );
    assert_eq!(acquire(&mut con, "alive", 5_000).unwrap().0, 1);
    assert_eq!(
        pttl(&server, KEYS[4]),
        -2,
        "the ticket counter goes with the empty queue"
    );
}

#[test]
fn giving_up_a_place_wakes_the_next_head_when_the_lock_is_free() {
    let server = server();
    let mut con = raw(&server);
    acquire(&mut con, "holder", 0).unwrap();
    acquire(&mut con, "w1", 5_000).unwrap();
    acquire(&mut con, "w2", 5_000).unwrap();
    // w1 gives up while the lock is held: not the holder (reply -1), place gone, no wake.
    assert_eq!(release(&mut con, "w1").unwrap(), -1);
    assert_eq!(queue(&mut con), ["w2"]);
    assert!(pttl(&server, "F") > 0, "the holder's lock is untouched");
    release(&mut con, "holder").unwrap();
    // Now w2 gives up with the lock free: the key is gone (0) and the queue is empty.
    assert_eq!(release(&mut con, "w2").unwrap(), 0);
    assert!(queue(&mut con).is_empty());
}

#[test]
fn queue_keys_expire_two_place_leases_after_the_last_live_waiter() {
    let server = server();
    let mut con = raw(&server);
    acquire(&mut con, "holder", 0).unwrap();
    acquire(&mut con, "w1", 1_000).unwrap();
    for key in &KEYS[2..] {
        let ttl = pttl(&server, key);
        assert!(ttl > 1_000 && ttl <= 2_000, "{key}: {ttl}");
    }
}

#[test]
fn fair_scripts_refuse_wrong_types_and_write_nothing() {
    let server = server();
    let mut con = raw(&server);
    redis::cmd("SET")
        .arg(KEYS[2])
        .arg("x")
        .exec(&mut con)
        .unwrap();
    let err = acquire(&mut con, "a", 500).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert_eq!(pttl(&server, "F"), -2);
    let err = release(&mut con, "a").unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
}

#[test]
fn a_mutex_release_publishes_a_wake_up_only_when_a_waiter_marked_it() {
    let server = server();
    let mut con = raw(&server);
    let release = lua(&[
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/release.lua"),
    ]);
    let set = |con: &mut redis::Connection, value: &str| {
        redis::cmd("SET")
            .arg("M")
            .arg(value)
            .arg("PX")
            .arg(10_000)
            .exec(con)
            .unwrap();
    };
    let release_as = |con: &mut redis::Connection, owner: &str| -> i64 {
        release
            .key("M")
            .arg(owner)
            .arg("{M}:wake")
            .invoke(con)
            .unwrap()
    };
    let mut wake = raw(&server);
    wake.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    redis::cmd("SUBSCRIBE")
        .arg("{M}:wake")
        .exec(&mut wake)
        .unwrap();
    // Nobody marked it: the release is silent.
    set(&mut con, "owner");
    assert_eq!(release_as(&mut con, "owner"), 1);
    // A marker of our own: had the release published, its message would come first.
    redis::cmd("PUBLISH")
        .arg("{M}:wake")
        .arg("marker")
        .exec(&mut con)
        .unwrap();
    assert_eq!(
        next_message(&mut wake).as_deref(),
        Some("marker"),
        "an unmarked release published"
    );
    // Marked by a waiter: a refused release stays silent, the owner's wakes everyone.
    set(&mut con, "owner+w");
    assert_eq!(release_as(&mut con, "other"), -1);
    redis::cmd("PUBLISH")
        .arg("{M}:wake")
        .arg("marker")
        .exec(&mut con)
        .unwrap();
    assert_eq!(release_as(&mut con, "owner"), 1);
    assert_eq!(pttl(&server, "M"), -2);
    assert_eq!(
        next_message(&mut wake).as_deref(),
        Some("marker"),
        "a refused release published"
    );
    assert_eq!(next_message(&mut wake).as_deref(), Some("*"));
}

// The handover, as a `FairMutex` sends its scripts: the acquire registers the waiter's token
// (its queue id) with a nonce, and a release hands the lock straight to the first in line.

const HANDOVER: &str = "{F}:handover";

fn acquire_handing(
    con: &mut Connection,
    owner: &str,
    place_ms: u64,
    nonce: u64,
) -> redis::RedisResult<(i64, i64)> {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/fair/acquire.lua"),
    ])
    .key(&KEYS[..])
    .key(HANDOVER)
    .arg(owner)
    .arg(10_000)
    .arg(place_ms)
    .arg(CHANNEL)
    .arg(nonce)
    .invoke(con)
}

fn release_handing(con: &mut Connection, owner: &str) -> redis::RedisResult<i64> {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/fair/release.lua"),
    ])
    .key(&[KEYS[0], KEYS[2], KEYS[3], KEYS[4], HANDOVER, KEYS[1]][..])
    .arg(owner)
    .arg(CHANNEL)
    .invoke(con)
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn registered(con: &mut Connection, id: &str) -> Option<String> {
    redis::cmd("HGET").arg(HANDOVER).arg(id).query(con).unwrap()
}

#[test]
fn a_fair_release_hands_the_lock_to_the_first_in_line_with_a_new_token() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    assert_eq!(acquire_handing(&mut con, "holder", 2_000, 0).unwrap().0, 1);
    assert_eq!(
        registered(&mut con, "holder"),
        None,
        "a grant registers nothing"
    );
    assert_eq!(acquire_handing(&mut con, "w1", 1_500, 4).unwrap().0, 0);
    assert_eq!(acquire_handing(&mut con, "w2", 2_000, 9).unwrap().0, 0);
    assert_eq!(registered(&mut con, "w1").as_deref(), Some("w1 4"));
    let before: i64 = get(&mut con, KEYS[1]).unwrap().parse().unwrap();
    assert_eq!(release_handing(&mut con, "holder").unwrap(), 1);
    // w1 holds it (marked), until its place would have ended, with the next token.
    assert_eq!(get(&mut con, KEYS[0]).as_deref(), Some("w1+w"));
    let ttl = pttl(&server, KEYS[0]);
    assert!(ttl > 1_000 && ttl <= 1_500, "until the place ends: {ttl}");
    let token: i64 = get(&mut con, KEYS[1]).unwrap().parse().unwrap();
    assert!(token > before);
    assert_eq!(next_message(&mut sub), Some(format!("w1 w1 4 {token}")));
    assert_eq!(queue(&mut con), ["w2"]);
    assert_eq!(registered(&mut con, "w1"), None);
    // A grant whose wake-up was lost: w1's next attempt (same token) takes it in full.
    let (granted, again) = acquire_handing(&mut con, "w1", 1_500, 5).unwrap();
    assert_eq!(granted, 1);
    assert!(again > token);
    assert!(pttl(&server, KEYS[0]) > 9_000);
    // Its release hands on to w2.
    assert_eq!(release_handing(&mut con, "w1").unwrap(), 1);
    assert_eq!(get(&mut con, KEYS[0]).as_deref(), Some("w2+w"));
    assert!(next_message(&mut sub).is_some_and(|m| m.starts_with("w2 w2 9 ")));
}

#[test]
fn a_fair_waiter_giving_up_a_lock_handed_to_it_passes_it_on() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    acquire_handing(&mut con, "holder", 2_000, 0).unwrap();
    acquire_handing(&mut con, "w1", 2_000, 1).unwrap();
    acquire_handing(&mut con, "w2", 2_000, 2).unwrap();
    release_handing(&mut con, "holder").unwrap();
    assert!(next_message(&mut sub).is_some_and(|m| m.starts_with("w1 w1 1 ")));
    // w1 gave up (timed out, cancelled) as the grant came: its place's release by its token
    // frees the lock and hands it to w2.
    assert_eq!(release_handing(&mut con, "w1").unwrap(), 1);
    assert_eq!(get(&mut con, KEYS[0]).as_deref(), Some("w2+w"));
    assert!(next_message(&mut sub).is_some_and(|m| m.starts_with("w2 w2 2 ")));
    // A waiter leaving without holding changes nothing else, and its registration goes.
    acquire_handing(&mut con, "w3", 2_000, 3).unwrap();
    assert_eq!(release_handing(&mut con, "w3").unwrap(), -1);
    assert_eq!(registered(&mut con, "w3"), None);
    assert_eq!(get(&mut con, KEYS[0]).as_deref(), Some("w2+w"));
    // Without the handover keys (as a Mutex-era caller), the release only wakes.
    acquire_handing(&mut con, "w4", 2_000, 4).unwrap();
    assert_eq!(release(&mut con, "w2").unwrap(), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("w4"));
    assert_eq!(get(&mut con, KEYS[0]), None);
}
