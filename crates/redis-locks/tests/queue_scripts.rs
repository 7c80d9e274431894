//! The `Mutex` waiters' queue, script by script on a real server: a waiter's refusal puts it
//! in line, a grant takes it out, a free lock goes to the first in line, a release wakes the
//! first in line (or everybody when a marked lock has nobody in line), and `leave.lua`
//! gives a place up and prods the next waiter.

mod common;

use std::time::Duration;

use common::{
    FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, next_message, nothing_more, raw, server, server_ms,
    subscribed,
};
use redis::{Commands, Connection};

const LOCK: &str = "Q";
const QUEUE: [&str; 3] = ["{Q}:queue", "{Q}:places", "{Q}:tickets"];
const CHANNEL: &str = "{Q}:wake";

/// The acquire script on the waiting path: `owner` for client `waiter`, 10 s lease.
fn wait(con: &mut Connection, owner: &str, waiter: &str, place_ms: u64) -> (i64, i64) {
    try_wait(con, owner, waiter, place_ms).unwrap()
}

fn try_wait(
    con: &mut Connection,
    owner: &str,
    waiter: &str,
    place_ms: u64,
) -> redis::RedisResult<(i64, i64)> {
    acquire(con, owner, waiter, place_ms, None)
}

/// The acquire script on the waiting path for `owner` of client `waiter`, 10 s lease; with
/// `nonce`, registering `owner` for a handover as a `Mutex` does (the handover hash and
/// `ARGV[10]`), else as a Redlock's node does.
fn acquire(
    con: &mut Connection,
    owner: &str,
    waiter: &str,
    place_ms: u64,
    nonce: Option<u64>,
) -> redis::RedisResult<(i64, i64)> {
    let script = lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/acquire.lua"),
    ]);
    let mut call = script.prepare_invoke();
    call.key(LOCK)
        .key("{Q}:fence")
        .key("{Q}:epoch")
        .key(&QUEUE[..]);
    if nonce.is_some() {
        call.key("{Q}:handover");
    }
    call.arg(owner)
        .arg(10_000)
        .arg(0)
        .arg("")
        .arg(waiter)
        .arg(place_ms)
        .arg(CHANNEL);
    if let Some(nonce) = nonce {
        call.arg("").arg("").arg(nonce);
    }
    call.invoke(con)
}

/// The release as the library sends it: its first check, the prelude, the body.
fn release(con: &mut Connection, owner: &str) -> i64 {
    lua(&[
        include_str!("../src/engine/string_lock/release_first.lua"),
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/release.lua"),
    ])
    .key(LOCK)
    .key(&QUEUE[..])
    .arg(owner)
    .arg(CHANNEL)
    .invoke(con)
    .unwrap()
}

fn leave(con: &mut Connection, waiter: &str) -> i64 {
    lua(&[LOCK_LUA, QUEUE_LUA, include_str!("../src/wait/leave.lua")])
        .key(LOCK)
        .key(&QUEUE[..])
        .arg(waiter)
        .arg(CHANNEL)
        .invoke(con)
        .unwrap()
}

fn line(con: &mut Connection) -> Vec<String> {
    con.zrange(QUEUE[0], 0, -1).unwrap()
}

#[test]
fn a_refused_waiter_gets_a_place_in_line_and_a_grant_takes_it_out() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(wait(&mut con, "holder", "client-a", 2_000).0, 1);
    let (granted, pttl) = wait(&mut con, "owner-b", "client-b", 2_000);
    assert_eq!(granted, 0);
    assert!(pttl > 9_000);
    let (granted, _) = wait(&mut con, "owner-c", "client-c", 2_000);
    assert_eq!(granted, 0);
    assert_eq!(
        line(&mut con),
        ["client-b", "client-c"],
        "in the order they came"
    );
    // Asking again keeps the place (and renews its lease).
    wait(&mut con, "owner-b2", "client-b", 2_000);
    assert_eq!(line(&mut con), ["client-b", "client-c"]);
    for key in QUEUE {
        let ttl: i64 = con.pttl(key).unwrap();
        assert!(
            ttl > 3_000 && ttl <= 4_000,
            "{key} outlives the last waiter by two place leases: {ttl}"
        );
    }
    // The first in line takes the lock when it is free, and leaves the line.
    assert_eq!(release(&mut con, "holder"), 1);
    assert_eq!(wait(&mut con, "owner-b3", "client-b", 2_000).0, 1);
    assert_eq!(line(&mut con), ["client-c"]);
    // A grant with others still in line is marked at once, so that its release wakes them;
    // the last one in line takes it unmarked.
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "owner-b3+w");
    assert_eq!(release(&mut con, "owner-b3"), 1);
    assert_eq!(wait(&mut con, "owner-c2", "client-c", 2_000).0, 1);
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "owner-c2");
}

#[test]
fn a_free_lock_goes_to_the_first_in_line_and_a_late_comer_is_refused_with_minus_two() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    wait(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "owner-b", "client-b", 2_000);
    // The release wakes client-b; before it asks, client-c finds the lock free.
    release(&mut con, "holder");
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-b"));
    assert_eq!(wait(&mut con, "owner-c", "client-c", 2_000), (0, -2));
    assert_eq!(
        line(&mut con),
        ["client-b", "client-c"],
        "client-c queues behind"
    );
    assert!(!con.exists::<_, bool>(LOCK).unwrap(), "nothing was granted");
    assert_eq!(
        next_message(&mut sub).as_deref(),
        Some("client-b"),
        "and the first in line is prodded again"
    );
    assert_eq!(wait(&mut con, "owner-b", "client-b", 2_000).0, 1);
}

#[test]
fn a_dead_waiters_place_runs_out_and_the_next_one_is_first() {
    let server = server();
    let mut con = raw(&server);
    wait(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "owner-dead", "client-dead", 50);
    wait(&mut con, "owner-b", "client-b", 2_000);
    release(&mut con, "holder");
    // Within the dead waiter's place lease the line is kept...
    assert_eq!(wait(&mut con, "owner-b", "client-b", 2_000), (0, -2));
    until_place_ends(&mut con, "client-dead");
    // ...and then it is dropped, and the next waiter is first.
    assert_eq!(wait(&mut con, "owner-b", "client-b", 2_000).0, 1);
    assert!(line(&mut con).is_empty());
    let tickets: bool = con.exists(QUEUE[2]).unwrap();
    assert!(!tickets, "the ticket counter goes with the last waiter");
}

#[test]
fn a_line_emptied_by_place_leases_and_joined_again_keeps_every_key_expiring() {
    let server = server();
    let mut con = raw(&server);
    wait(&mut con, "holder", "client-a", 2_000);
    // A place of 50 ms: the line's keys expire 100 ms after it.
    wait(&mut con, "owner-dead", "client-dead", 50);
    until_place_ends(&mut con, "client-dead");
    // client-b's attempt purges the dead place (the line is empty, its counter still there
    // with a few ms left) and starts the line anew: every key lives two of its place leases.
    wait(&mut con, "owner-b", "client-b", 2_000);
    assert_eq!(line(&mut con), ["client-b"]);
    for key in QUEUE {
        let ttl: i64 = con.pttl(key).unwrap();
        assert!(ttl > 3_000 && ttl <= 4_000, "{key}: {ttl}");
    }
}

#[test]
fn a_release_wakes_the_first_in_line_else_everybody_if_marked_else_nobody() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    // Somebody in line: only its id is published.
    wait(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "owner-b", "client-b", 2_000);
    release(&mut con, "holder");
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-b"));
    assert!(nothing_more(&server, &mut sub, CHANNEL), "one message");
    wait(&mut con, "owner-b", "client-b", 2_000);
    // Marked but nobody in line (a waiter of the holder's own process): everybody.
    let _: () = con.set(LOCK, "owner-b+w").unwrap();
    assert_eq!(release(&mut con, "owner-b"), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("*"));
    // Neither: nothing.
    let _: () = con.set(LOCK, "owner-c").unwrap();
    assert_eq!(release(&mut con, "owner-c"), 1);
    assert!(nothing_more(&server, &mut sub, CHANNEL));
}

#[test]
fn leave_gives_a_place_up_and_prods_the_next_waiter_if_the_lock_is_free() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    wait(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "owner-b", "client-b", 2_000);
    wait(&mut con, "owner-c", "client-c", 2_000);
    // Held: leaving wakes nobody.
    assert_eq!(leave(&mut con, "client-c"), 1);
    assert!(nothing_more(&server, &mut sub, CHANNEL));
    assert_eq!(line(&mut con), ["client-b"]);
    assert_eq!(leave(&mut con, "client-c"), 0, "no place any more");
    // Free, with client-b woken but leaving: the next in line is prodded.
    wait(&mut con, "owner-d", "client-d", 2_000);
    release(&mut con, "holder");
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-b"));
    assert_eq!(leave(&mut con, "client-b"), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-d"));
    assert_eq!(leave(&mut con, "client-d"), 1);
    assert!(line(&mut con).is_empty());
    assert!(!con.exists::<_, bool>(QUEUE[2]).unwrap());
}

#[test]
fn queue_keys_of_another_type_are_wrong_type_errors_and_nothing_is_written() {
    let server = server();
    let mut con = raw(&server);
    let _: () = con.set(QUEUE[0], "not a queue").unwrap();
    let err = try_wait(&mut con, "owner", "client-a", 2_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert!(err.to_string().contains("{Q}:queue"), "{err}");
    assert!(!con.exists::<_, bool>(LOCK).unwrap());
}

// The handover: a Mutex's waiters register the owner token they ask with, and a release hands
// the lock straight to the first in line's token.

const HANDOVER: &str = "{Q}:handover";
const FENCE: &str = "{Q}:fence";

/// The nonce every handing attempt of these tests registers, unless a test says otherwise.
const NONCE: u64 = 7;

/// The acquire script on the waiting path with the handover hash, as a `Mutex` sends it.
fn try_wait_handing(
    con: &mut Connection,
    owner: &str,
    waiter: &str,
    place_ms: u64,
) -> redis::RedisResult<(i64, i64)> {
    try_wait_nonce(con, owner, waiter, place_ms, NONCE)
}

fn try_wait_nonce(
    con: &mut Connection,
    owner: &str,
    waiter: &str,
    place_ms: u64,
    nonce: u64,
) -> redis::RedisResult<(i64, i64)> {
    acquire(con, owner, waiter, place_ms, Some(nonce))
}

fn wait_handing(con: &mut Connection, owner: &str, waiter: &str, place_ms: u64) -> (i64, i64) {
    try_wait_handing(con, owner, waiter, place_ms).unwrap()
}

/// The release as a `Mutex` sends it: with the handover hash and the fencing counter.
fn try_release_handing(con: &mut Connection, owner: &str) -> redis::RedisResult<i64> {
    lua(&[
        include_str!("../src/engine/string_lock/release_first.lua"),
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/release.lua"),
    ])
    .key(LOCK)
    .key(&QUEUE[..])
    .key(HANDOVER)
    .key(FENCE)
    .arg(owner)
    .arg(CHANNEL)
    .invoke(con)
}

fn release_handing(con: &mut Connection, owner: &str) -> i64 {
    try_release_handing(con, owner).unwrap()
}

fn leave_handing(con: &mut Connection, waiter: &str, owner: &str) -> i64 {
    lua(&[LOCK_LUA, QUEUE_LUA, include_str!("../src/wait/leave.lua")])
        .key(LOCK)
        .key(&QUEUE[..])
        .key(HANDOVER)
        .arg(waiter)
        .arg(CHANNEL)
        .arg(owner)
        .invoke(con)
        .unwrap()
}

fn counter(con: &mut Connection) -> i64 {
    con.get(FENCE).unwrap()
}

#[test]
fn a_refused_waiter_registers_its_token_and_a_grant_takes_it_out() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(wait_handing(&mut con, "holder", "client-a", 2_000).0, 1);
    let registered: Option<String> = con.hget(HANDOVER, "client-a").unwrap();
    assert_eq!(registered, None, "a grant registers nothing");
    assert_eq!(wait_handing(&mut con, "line-b", "client-b", 2_000).0, 0);
    let registered: Option<String> = con.hget(HANDOVER, "client-b").unwrap();
    assert_eq!(
        registered.as_deref(),
        Some("line-b 7"),
        "with the attempt's nonce"
    );
    let ttl: i64 = con.pttl(HANDOVER).unwrap();
    assert!(
        ttl > 3_000 && ttl <= 4_000,
        "it outlives its last registration by two place leases: {ttl}"
    );
    // Asking again registers that attempt's token and nonce.
    let asked = try_wait_nonce(&mut con, "line-b2", "client-b", 2_000, 8).unwrap();
    assert_eq!(asked.0, 0);
    let registered: Option<String> = con.hget(HANDOVER, "client-b").unwrap();
    assert_eq!(registered.as_deref(), Some("line-b2 8"));
    // Without the handover hash (a Redlock's node), a refusal registers nothing.
    wait(&mut con, "line-c", "client-c", 2_000);
    let registered: Option<String> = con.hget(HANDOVER, "client-c").unwrap();
    assert_eq!(registered, None);
    // A grant by the plain path takes the registration out.
    let _: () = con.del(LOCK).unwrap();
    assert_eq!(wait_handing(&mut con, "line-b2", "client-b", 2_000).0, 1);
    let registered: Option<String> = con.hget(HANDOVER, "client-b").unwrap();
    assert_eq!(registered, None);
}

#[test]
fn a_release_hands_the_lock_to_the_first_in_lines_token_with_a_new_fencing_token() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    assert_eq!(wait_handing(&mut con, "holder", "client-a", 2_000).0, 1);
    let first = counter(&mut con);
    wait_handing(&mut con, "line-b", "client-b", 1_500);
    wait_handing(&mut con, "line-c", "client-c", 2_000);
    assert_eq!(release_handing(&mut con, "holder"), 1);
    // The lock is line-b's, marked (its release hands on in turn), for what is left of
    // client-b's place lease, with the next fencing token.
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "line-b+w");
    let ttl: i64 = con.pttl(LOCK).unwrap();
    assert!(ttl > 1_000 && ttl <= 1_500, "until the place ends: {ttl}");
    let token = counter(&mut con);
    assert!(token > first, "a new fencing token: {token} after {first}");
    assert_eq!(
        next_message(&mut sub),
        Some(format!("client-b line-b 7 {token}")),
        "the grant, addressed to client-b"
    );
    assert!(nothing_more(&server, &mut sub, CHANNEL), "one message");
    assert_eq!(line(&mut con), ["client-c"], "client-b left the line");
    let registered: Option<String> = con.hget(HANDOVER, "client-b").unwrap();
    assert_eq!(registered, None);
    // Its release hands on to client-c; client-c's ends with the line.
    assert_eq!(release_handing(&mut con, "line-b"), 1);
    assert_eq!(
        next_message(&mut sub),
        Some(format!("client-c line-c 7 {}", counter(&mut con)))
    );
    assert!(counter(&mut con) > token);
    assert_eq!(release_handing(&mut con, "line-c"), 1);
    assert_eq!(
        next_message(&mut sub).as_deref(),
        Some("*"),
        "marked, nobody in line"
    );
    assert!(!con.exists::<_, bool>(LOCK).unwrap());
    // A release by a token the lock was not handed to changes nothing.
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-d", "client-d", 2_000);
    assert_eq!(release_handing(&mut con, "line-d"), -1);
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "holder+w");
}

#[test]
fn a_handover_whose_wake_up_was_lost_is_taken_by_the_lines_next_attempt() {
    let server = server();
    let mut con = raw(&server);
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-b", "client-b", 2_000);
    release_handing(&mut con, "holder");
    let handed = counter(&mut con);
    // client-b never heard: its next attempt, with the same token, finds the lock its own
    // and takes it with its full lease and a new fencing token.
    let (granted, token) = wait_handing(&mut con, "line-b", "client-b", 2_000);
    assert_eq!(granted, 1);
    assert!(token > handed);
    let ttl: i64 = con.pttl(LOCK).unwrap();
    assert!(ttl > 9_000, "the full lease: {ttl}");
    // Another token of the same line (a later wait) does not take it.
    release_handing(&mut con, "line-b");
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-x", "client-x", 2_000);
    release_handing(&mut con, "holder");
    assert_eq!(wait_handing(&mut con, "line-y", "client-x", 2_000).0, 0);
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "line-x+w");
}

#[test]
fn a_first_in_line_without_a_token_or_with_a_broken_counter_is_only_woken() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    // A waiter that registered nothing (a Redlock's, on its first node).
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "line-b", "client-b", 2_000);
    assert_eq!(release_handing(&mut con, "holder"), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-b"));
    assert!(
        !con.exists::<_, bool>(LOCK).unwrap(),
        "released, not handed"
    );
    assert_eq!(wait(&mut con, "line-b", "client-b", 2_000).0, 1);
    // A broken fencing counter: the lock is released and the waiter woken, to find out.
    wait_handing(&mut con, "line-c", "client-c", 2_000);
    let _: () = con.set(FENCE, "not-a-number").unwrap();
    assert_eq!(release_handing(&mut con, "line-b"), 1);
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-c"));
    assert!(!con.exists::<_, bool>(LOCK).unwrap());
    assert_eq!(line(&mut con), ["client-c"], "still in line");
}

#[test]
fn leaving_releases_a_lock_handed_to_the_leaving_lines_token_only() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = subscribed(&server, CHANNEL);
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-b", "client-b", 2_000);
    wait_handing(&mut con, "line-c", "client-c", 2_000);
    release_handing(&mut con, "holder");
    assert!(next_message(&mut sub).is_some_and(|m| m.starts_with("client-b line-b 7 ")));
    // client-b's last waiter goes before taking it: the lock is released and client-c,
    // now first, is woken to take it.
    assert_eq!(
        leave_handing(&mut con, "client-b", "line-b"),
        0,
        "no place left"
    );
    assert!(!con.exists::<_, bool>(LOCK).unwrap());
    assert_eq!(next_message(&mut sub).as_deref(), Some("client-c"));
    // Leaving with a token the lock was not handed to leaves the holder alone.
    assert_eq!(wait_handing(&mut con, "line-c", "client-c", 2_000).0, 1);
    wait_handing(&mut con, "line-d", "client-d", 2_000);
    assert_eq!(leave_handing(&mut con, "client-d", "line-d"), 1);
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "line-c+w");
    let registered: Option<String> = con.hget(HANDOVER, "client-d").unwrap();
    assert_eq!(registered, None, "the registration goes with the place");
}

#[test]
fn a_handover_hash_of_another_type_is_a_wrong_type_error_and_nothing_is_written() {
    let server = server();
    let mut con = raw(&server);
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-b", "client-b", 2_000);
    let _: () = con.del(HANDOVER).unwrap();
    let _: () = con.set(HANDOVER, "not a hash").unwrap();
    let err = try_release_handing(&mut con, "holder").unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert!(err.to_string().contains(HANDOVER), "{err}");
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "holder+w", "the lock is as it was");
    assert_eq!(line(&mut con), ["client-b"]);
    let err = try_wait_handing(&mut con, "line-c", "client-c", 2_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    assert_eq!(line(&mut con), ["client-b"], "nothing written");
}

#[test]
fn a_waiter_id_with_an_address_is_woken_and_handed_the_lock_on_its_clients_own_channel() {
    let server = server();
    let mut con = raw(&server);
    let mut shared = subscribed(&server, CHANNEL);
    let own = format!("{CHANNEL}:0a1b");
    let mut addressed = subscribed(&server, &own);
    // A wake-up: the id alone, on the channel of the client whose address the id ends in.
    wait(&mut con, "holder", "client-a", 2_000);
    wait(&mut con, "owner-b", "b@0a1b", 2_000);
    release(&mut con, "holder");
    assert_eq!(next_message(&mut addressed).as_deref(), Some("b@0a1b"));
    assert!(nothing_more(&server, &mut addressed, &own), "one message");
    assert!(
        nothing_more(&server, &mut shared, CHANNEL),
        "nothing on the lock's wake channel"
    );
    assert_eq!(wait(&mut con, "owner-b", "b@0a1b", 2_000).0, 1);
    release(&mut con, "owner-b");
    // A grant: the whole message there too.
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-b", "b@0a1b", 2_000);
    release_handing(&mut con, "holder");
    let token = counter(&mut con);
    assert_eq!(
        next_message(&mut addressed),
        Some(format!("b@0a1b line-b 7 {token}"))
    );
    assert!(nothing_more(&server, &mut shared, CHANNEL));
    // What is not an address (not hex, or nothing after '@') goes to the wake channel; so
    // does the wake-up of everybody.
    release_handing(&mut con, "line-b");
    assert_eq!(next_message(&mut shared).as_deref(), Some("*"));
    for id in ["c@", "c@xyz"] {
        wait(&mut con, "holder", "client-a", 2_000);
        wait(&mut con, "owner-c", id, 2_000);
        release(&mut con, "holder");
        assert_eq!(next_message(&mut shared).as_deref(), Some(id));
        assert_eq!(wait(&mut con, "owner-c", id, 2_000).0, 1);
        release(&mut con, "owner-c");
    }
    assert!(nothing_more(&server, &mut addressed, &own));
}

/// Every key a `Mutex`'s waiting attempt or release may write, as `(name, value)` snapshots:
/// `DUMP` (the value and its type) and whether it has a TTL.
fn snapshot(con: &mut Connection) -> Vec<(String, Option<Vec<u8>>, bool)> {
    [LOCK, QUEUE[0], QUEUE[1], QUEUE[2], HANDOVER, FENCE]
        .into_iter()
        .map(|key| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(con).unwrap();
            let ttl: i64 = con.pttl(key).unwrap();
            (key.to_string(), dump, ttl > 0)
        })
        .collect()
}

/// Puts a value of another type under `key` (a string for the sorted sets and the hash, a
/// hash for the ticket counter), with no TTL.
fn foreign(con: &mut Connection, key: &str) {
    let _: () = con.del(key).unwrap();
    if key == QUEUE[2] {
        let _: () = con.hset(key, "not", "a counter").unwrap();
    } else {
        let _: () = con.set(key, "not a queue").unwrap();
    }
}

/// What an attempt or a release did with a foreign `key`: an error naming it with nothing
/// written (`Ok(false)`), or success with the foreign key as it was (`Ok(true)`); anything
/// else (a foreign key written, or an error after a write) fails the test.
fn left_alone(
    con: &mut Connection,
    key: &str,
    case: &str,
    call: impl FnOnce(&mut Connection) -> redis::RedisResult<()>,
) -> bool {
    let before = snapshot(con);
    let foreign_before = before.iter().find(|(name, ..)| name == key).cloned();
    // A foreign TTL is none (-1) or a minute: one set by a queue script is two place leases.
    let foreign_ttl = |con: &mut Connection| {
        let ttl: i64 = con.pttl(key).unwrap();
        ttl.min(50_000)
    };
    let ttl_before = foreign_ttl(con);
    match call(con) {
        Err(err) => {
            assert_eq!(err.code(), Some("WRONGTYPE"), "{case}: {err}");
            assert!(err.to_string().contains(key), "{case}: {err}");
            assert_eq!(snapshot(con), before, "{case}: nothing written");
            false
        }
        Ok(()) => {
            let after = snapshot(con);
            let foreign_after = after.iter().find(|(name, ..)| name == key).cloned();
            assert_eq!(
                foreign_after, foreign_before,
                "{case}: the foreign key as it was"
            );
            assert_eq!(
                foreign_ttl(con),
                ttl_before,
                "{case}: the foreign key's TTL as it was"
            );
            true
        }
    }
}

#[test]
fn a_queue_key_of_another_type_is_never_written_and_an_error_leaves_everything_as_it_was() {
    let server = server();
    let mut con = raw(&server);
    let fresh = |con: &mut Connection| {
        let _: () = redis::cmd("FLUSHALL").query(con).unwrap();
    };
    let keys = [QUEUE[0], QUEUE[1], QUEUE[2], HANDOVER];
    for key in keys {
        // A new waiter joins a held line: it writes every queue key, so each must be refused.
        fresh(&mut con);
        wait_handing(&mut con, "holder", "client-a", 2_000);
        wait_handing(&mut con, "line-b", "client-b", 2_000);
        foreign(&mut con, key);
        let joined = left_alone(&mut con, key, &format!("{key}, a new waiter"), |con| {
            try_wait_handing(con, "line-c", "client-c", 2_000).map(drop)
        });
        assert!(!joined, "{key}: a new waiter writes every queue key");

        // A waiter renews its place in a held line, with the line's TTLs due and not due.
        for due in [false, true] {
            fresh(&mut con);
            wait_handing(&mut con, "holder", "client-a", 2_000);
            wait_handing(&mut con, "line-b", "client-b", 2_000);
            foreign(&mut con, key);
            if due {
                for other in keys.iter().filter(|other| **other != key) {
                    let _: () = con.pexpire(*other, 500).unwrap();
                }
            } else {
                // A foreign key with no TTL would be due itself.
                let _: () = con.pexpire(key, 60_000).unwrap();
            }
            let case = format!("{key}, a renewal, TTLs due: {due}");
            let renewed = left_alone(&mut con, key, &case, |con| {
                try_wait_handing(con, "line-b", "client-b", 2_000).map(drop)
            });
            // Only the ticket counter is not written by a renewal whose TTLs are not due.
            assert_eq!(renewed, key == QUEUE[2] && !due, "{case}");
        }

        // A release with a waiter in line, which it hands the lock to (the line then empty,
        // or with one more behind).
        for behind in [false, true] {
            fresh(&mut con);
            wait_handing(&mut con, "holder", "client-a", 2_000);
            wait_handing(&mut con, "line-b", "client-b", 2_000);
            if behind {
                wait_handing(&mut con, "line-c", "client-c", 2_000);
            }
            foreign(&mut con, key);
            let case = format!("{key}, a release handing over, one behind: {behind}");
            let released = left_alone(&mut con, key, &case, |con| {
                try_release_handing(con, "holder").map(drop)
            });
            // The ticket counter is written (deleted) only when the line empties.
            assert_eq!(released, key == QUEUE[2] && behind, "{case}");
        }

        // A waiter takes a free lock (its place and registration go): every key may be
        // written, so each is refused.
        fresh(&mut con);
        wait_handing(&mut con, "holder", "client-a", 2_000);
        wait_handing(&mut con, "line-b", "client-b", 2_000);
        let _: () = con.del(LOCK).unwrap();
        foreign(&mut con, key);
        let case = format!("{key}, a grant to the first in line");
        let granted = left_alone(&mut con, key, &case, |con| {
            try_wait_handing(con, "line-b", "client-b", 2_000).map(drop)
        });
        assert!(!granted, "{case}");
    }
}

#[test]
fn handing_the_lock_to_the_last_waiter_takes_the_ticket_counter_with_the_line() {
    let server = server();
    let mut con = raw(&server);
    wait_handing(&mut con, "holder", "client-a", 2_000);
    wait_handing(&mut con, "line-b", "client-b", 2_000);
    wait_handing(&mut con, "line-c", "client-c", 2_000);
    // One stays behind: the line and its counter stay, and the next ticket follows on.
    release_handing(&mut con, "holder");
    assert_eq!(line(&mut con), ["client-c"]);
    assert!(con.exists::<_, bool>(QUEUE[2]).unwrap());
    // The last one is handed the lock: nothing of the line is left.
    release_handing(&mut con, "line-b");
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "line-c+w");
    for key in QUEUE {
        assert!(!con.exists::<_, bool>(key).unwrap(), "{key} is gone");
    }
}

/// Waits until `waiter`'s place lease has run out by the server's clock (its score in the
/// places is a server time in ms), at most 5 s.
fn until_place_ends(con: &mut Connection, waiter: &str) {
    let ends: f64 = con.zscore(QUEUE[1], waiter).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if server_ms(con) as f64 > ends {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{waiter}'s place never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The remaining TTL of every key of the line that exists, by name.
fn line_ttls(con: &mut Connection) -> Vec<(&'static str, i64)> {
    [QUEUE[0], QUEUE[1], QUEUE[2], HANDOVER]
        .into_iter()
        .map(|key| (key, con.pttl::<_, i64>(key).unwrap()))
        // -2: no such key.
        .filter(|(_, ttl)| *ttl != -2)
        .collect()
}

#[test]
fn a_line_emptied_of_dead_places_by_a_join_whose_ttls_are_not_due_keeps_every_key_expiring() {
    let server = server();
    let mut con = raw(&server);
    wait_handing(&mut con, "holder", "client-h", 2_000);
    // b waits with a short place; a, with a long one, raises the line's TTLs far past it,
    // then leaves; b dies.
    wait_handing(&mut con, "line-b", "client-b", 200);
    wait_handing(&mut con, "line-a", "client-a", 60_000);
    assert_eq!(leave_handing(&mut con, "client-a", "line-a"), 1);
    until_place_ends(&mut con, "client-b");
    // c's join purges b, which empties the queue and the places: they are made anew and must
    // expire as a line of c's place lease does.
    wait_handing(&mut con, "line-c", "client-c", 200);
    assert_eq!(line(&mut con), ["client-c"]);
    let ttls = line_ttls(&mut con);
    assert_eq!(ttls.len(), 4, "{ttls:?}");
    for (key, ttl) in ttls {
        assert!(ttl > 0, "{key} has no expiry: {ttl}");
    }
}

#[test]
fn a_regrant_purges_dead_places_and_the_line_goes_with_them() {
    let server = server();
    let mut con = raw(&server);
    // Granted by the fast path (unmarked); a waiter that died stands in line.
    let _: () = redis::cmd("SET")
        .arg(LOCK)
        .arg("owner-a")
        .arg("PX")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    wait_handing(&mut con, "line-d", "client-d", 50);
    until_place_ends(&mut con, "client-d");
    // The holder's own waiting attempt (its line's token) is granted again.
    assert_eq!(wait_handing(&mut con, "owner-a", "client-a", 2_000).0, 1);
    assert!(line(&mut con).is_empty());
    // (The dead waiter's refusal marked the key; a re-grant keeps the value it finds, so its
    // release publishes one wake-up that nobody needs.)
    let value: String = con.get(LOCK).unwrap();
    assert_eq!(value, "owner-a+w");
    for key in QUEUE {
        assert!(!con.exists::<_, bool>(key).unwrap(), "{key} is gone");
    }
}

#[test]
fn a_release_that_finds_only_dead_places_empties_the_line_with_its_counter() {
    let server = server();
    let mut con = raw(&server);
    wait_handing(&mut con, "holder", "client-h", 2_000);
    wait_handing(&mut con, "line-d", "client-d", 50);
    until_place_ends(&mut con, "client-d");
    assert_eq!(release_handing(&mut con, "holder"), 1);
    assert!(!con.exists::<_, bool>(LOCK).unwrap());
    for key in QUEUE {
        assert!(!con.exists::<_, bool>(key).unwrap(), "{key} is gone");
    }
}
