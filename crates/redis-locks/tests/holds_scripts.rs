//! The scripts of the locks kept in a hash of holds (`src/engine/holds/*.lua`: `RwLock` and
//! `ReentrantMutex`), called directly on a real server as the library sends them (the same
//! preludes, keys and arguments): every branch and every reply their headers document, and
//! the state each one leaves behind (the hash, the key's TTL, the queue, the wake-ups), then
//! wrong types and bad input.
//!
//! Every script call that succeeds is followed by `check_keys`: a lock key that exists has a
//! TTL at least as long as its latest live hold, and every queue key that exists expires.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, pttl, raw, server, server_micros, server_ms};
use redis::{Connection, FromRedisValue, RedisResult, Script, Value};
use test_support::RedisServer;

/// The hash prelude (`holds_read`, `wake_front`, ...), put after `LOCK_LUA` (and `QUEUE_LUA`).
const HOLDS_LUA: &str = include_str!("../src/engine/holds/holds.lua");
const ACQUIRE_LUA: &str = include_str!("../src/engine/holds/acquire.lua");
const RELEASE_LUA: &str = include_str!("../src/engine/holds/release.lua");
/// The common case of a release, put before the preludes (as the library sends it).
const RELEASE_FIRST_LUA: &str = include_str!("../src/engine/holds/release_first.lua");
const EXTEND_LUA: &str = include_str!("../src/engine/holds/extend.lua");
const DOWNGRADE_LUA: &str = include_str!("../src/engine/holds/downgrade.lua");
const INSPECT_LUA: &str = include_str!("../src/engine/holds/inspect.lua");

/// The keys of the lock named "R".
const LOCK: &str = "R";
const FENCE: &str = "{R}:fence";
const QUEUE: &str = "{R}:queue";
const PLACES: &str = "{R}:places";
const TICKETS: &str = "{R}:tickets";
const CHANNEL: &str = "{R}:wake";

/// The lease of a hold and the place lease of a waiter, unless a test says otherwise.
const LEASE: u64 = 10_000;
const PLACE: u64 = 5_000;

/// Published after the scripts' wake-ups, to know that all of them were read.
const MARKER: &str = "marker";

/// The hold id number `n` (32 hex characters, as a guard's).
fn id(n: u32) -> String {
    format!("{n:032x}")
}

/// The queue id of a reader (`r`) or a writer (`w`) waiting under hold id `n`.
fn r(n: u32) -> String {
    format!("r{}", id(n))
}

fn w(n: u32) -> String {
    format!("w{}", id(n))
}

/// One acquire request, as `holds.rs` sends it.
#[derive(Clone, Copy)]
struct Ask<'a> {
    kind: &'a str,
    mode: &'a str,
    hold: u32,
    owner: &'a str,
    lease: u64,
    place: u64,
}

/// A read hold of an RwLock, `LEASE` long, asked without waiting (place lease 0).
fn read(hold: u32, owner: &str) -> Ask<'_> {
    Ask {
        kind: "rwlock",
        mode: "r",
        hold,
        owner,
        lease: LEASE,
        place: 0,
    }
}

/// A write hold of an RwLock, `LEASE` long, asked without waiting.
fn write(hold: u32, owner: &str) -> Ask<'_> {
    Ask {
        mode: "w",
        ..read(hold, owner)
    }
}

impl Ask<'_> {
    fn lease(self, lease: u64) -> Self {
        Ask { lease, ..self }
    }

    /// Asked by a waiter: a refusal gives it a place in the queue, `PLACE` long.
    fn placed(self) -> Self {
        self.place(PLACE)
    }

    fn place(self, place: u64) -> Self {
        Ask { place, ..self }
    }

    /// Asked as a `ReentrantMutex`.
    fn reentrant(self) -> Self {
        Ask {
            kind: "reentrant",
            ..self
        }
    }

    fn try_run(self, con: &mut Connection) -> RedisResult<(i64, i64)> {
        acquire_with(
            con,
            [
                self.kind,
                self.mode,
                &id(self.hold),
                self.owner,
                &self.lease.to_string(),
                &self.place.to_string(),
                CHANNEL,
            ],
        )
    }

    fn run(self, con: &mut Connection) -> (i64, i64) {
        let reply = self.try_run(con).unwrap();
        check_keys(con);
        reply
    }
}

/// The acquire script with the library's preludes (fence, waiters, holds) and keys.
fn acquire_with(con: &mut Connection, args: [&str; 7]) -> RedisResult<(i64, i64)> {
    lua(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, HOLDS_LUA, ACQUIRE_LUA])
        .key(&[LOCK, FENCE, QUEUE, PLACES, TICKETS][..])
        .arg(&args[..])
        .invoke(con)
}

/// The other scripts: the waiters and holds preludes, then the body.
fn script(body: &str) -> Script {
    lua(&[LOCK_LUA, QUEUE_LUA, HOLDS_LUA, body])
}

fn try_release(con: &mut Connection, hold: u32) -> RedisResult<(i64, i64)> {
    lua(&[
        RELEASE_FIRST_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        HOLDS_LUA,
        RELEASE_LUA,
    ])
    .key(&[LOCK, QUEUE, PLACES, TICKETS][..])
    .arg(id(hold))
    .arg(CHANNEL)
    .invoke(con)
}

fn release(con: &mut Connection, hold: u32) -> (i64, i64) {
    let reply = try_release(con, hold).unwrap();
    check_keys(con);
    reply
}

fn try_extend(con: &mut Connection, hold: u32, lease: &str) -> RedisResult<i64> {
    script(EXTEND_LUA)
        .key(LOCK)
        .arg(id(hold))
        .arg(lease)
        .invoke(con)
}

fn extend(con: &mut Connection, hold: u32, lease: u64) -> i64 {
    let reply = try_extend(con, hold, &lease.to_string()).unwrap();
    check_keys(con);
    reply
}

fn try_downgrade(con: &mut Connection, hold: u32) -> RedisResult<i64> {
    script(DOWNGRADE_LUA)
        .key(&[LOCK, QUEUE, PLACES, TICKETS][..])
        .arg(id(hold))
        .arg(CHANNEL)
        .invoke(con)
}

fn downgrade(con: &mut Connection, hold: u32) -> i64 {
    let reply = try_downgrade(con, hold).unwrap();
    check_keys(con);
    reply
}

fn try_inspect(con: &mut Connection) -> RedisResult<Vec<String>> {
    lua(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, HOLDS_LUA, INSPECT_LUA])
        .key(&[LOCK, FENCE, PLACES][..])
        .invoke(con)
}

/// Inspect's reply, taken apart.
#[derive(Debug, PartialEq)]
struct State {
    kind: String,
    counter: i64,
    readers: i64,
    writers: i64,
    /// Hold id -> (mode, owner, remaining lease in ms, fencing token).
    holds: HashMap<String, (String, String, i64, i64)>,
}

impl State {
    /// The state with the remaining leases left out (they change from call to call).
    fn without_leases(mut self) -> State {
        for hold in self.holds.values_mut() {
            hold.2 = 0;
        }
        self
    }
}

fn parse_state(reply: &[String]) -> State {
    assert!(
        reply.len() >= 4 && (reply.len() - 4).is_multiple_of(5),
        "four values, then five per hold: {reply:?}"
    );
    let number = |text: &String| -> i64 { text.parse().unwrap() };
    State {
        kind: reply[0].clone(),
        counter: number(&reply[1]),
        readers: number(&reply[2]),
        writers: number(&reply[3]),
        holds: reply[4..]
            .chunks_exact(5)
            .map(|hold| {
                (
                    hold[0].clone(),
                    (
                        hold[1].clone(),
                        hold[2].clone(),
                        number(&hold[3]),
                        number(&hold[4]),
                    ),
                )
            })
            .collect(),
    }
}

fn inspect(con: &mut Connection) -> State {
    parse_state(&try_inspect(con).unwrap())
}

/// The lock hash's fields (empty when the key is absent).
fn fields(con: &mut Connection) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(LOCK).query(con).unwrap()
}

/// One hold field, taken apart: '<deadline> <mode> <token> <owner>'.
#[derive(Debug, PartialEq)]
struct HoldField {
    deadline: i64,
    mode: String,
    token: i64,
    owner: String,
}

fn parse_hold(value: &str) -> HoldField {
    let parts: Vec<&str> = value.splitn(4, ' ').collect();
    assert_eq!(parts.len(), 4, "a hold field: {value:?}");
    HoldField {
        deadline: parts[0].parse().unwrap(),
        mode: parts[1].to_string(),
        token: parts[2].parse().unwrap(),
        owner: parts[3].to_string(),
    }
}

fn hold_of(con: &mut Connection, hold: u32) -> Option<HoldField> {
    let value: Option<String> = redis::cmd("HGET")
        .arg(LOCK)
        .arg(format!("h:{}", id(hold)))
        .query(con)
        .unwrap();
    value.map(|value| parse_hold(&value))
}

/// The queue's waiter ids, first in line first.
fn queue(con: &mut Connection) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap()
}

fn counter(con: &mut Connection) -> Option<String> {
    redis::cmd("GET").arg(FENCE).query(con).unwrap()
}

fn exists(con: &mut Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

fn key_type(con: &mut Connection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query(con).unwrap()
}

/// Sets the lock key's TTL to 10 s by hand, past its holds' deadlines: what these scripts
/// never leave (the key expires with its latest hold) but an earlier version did (it only
/// ever raised the TTL), so that a test can have an expired hold whose key lives on.
fn outlive(con: &mut Connection) {
    let set: i64 = redis::cmd("PEXPIRE")
        .arg(LOCK)
        .arg(10_000)
        .query(con)
        .unwrap();
    assert_eq!(set, 1, "the lock key exists");
}

/// Waits (at most 2 s) until the server's clock has passed `deadline` (server ms).
fn wait_past(con: &mut Connection, deadline: i64) {
    let limit = Instant::now() + Duration::from_secs(2);
    while server_ms(con) <= deadline {
        assert!(
            Instant::now() < limit,
            "the server clock did not pass {deadline}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What every script must leave behind: a lock key that exists (a hash) expires, and no
/// sooner than the latest deadline of its holds (exactly then, unless a test set its TTL by
/// hand: see `the_key_expires_with_its_latest_hold_after_every_change`); every queue key
/// that exists expires.
fn check_keys(con: &mut Connection) {
    if key_type(con, LOCK) == "hash" {
        let (all, expires): (HashMap<String, String>, i64) = redis::pipe()
            .atomic()
            .cmd("HGETALL")
            .arg(LOCK)
            .cmd("PEXPIRETIME")
            .arg(LOCK)
            .query(con)
            .unwrap();
        assert!(expires > 0, "the lock key has no TTL ({expires}): {all:?}");
        let latest = all
            .iter()
            .filter(|(field, _)| field.starts_with("h:"))
            .filter_map(|(_, value)| value.split(' ').next()?.parse::<i64>().ok())
            .max()
            .unwrap_or(0);
        assert!(
            expires >= latest,
            "the key expires at {expires}, before its latest hold ends at {latest}: {all:?}"
        );
    }
    for (key, wanted) in [(QUEUE, "zset"), (PLACES, "zset"), (TICKETS, "string")] {
        if key_type(con, key) == wanted {
            let ttl: i64 = redis::cmd("PTTL").arg(key).query(con).unwrap();
            assert!(ttl > 0, "{key} has no TTL ({ttl})");
        }
    }
}

/// A connection subscribed to the wake channel.
fn listener(server: &RedisServer) -> Connection {
    let mut sub = raw(server);
    sub.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    redis::cmd("SUBSCRIBE").arg(CHANNEL).exec(&mut sub).unwrap();
    sub
}

/// What the scripts published on the wake channel since the last look, in order: a marker
/// is published after them, and everything heard before it is returned.
fn published(sub: &mut Connection, con: &mut Connection) -> Vec<String> {
    redis::cmd("PUBLISH")
        .arg(CHANNEL)
        .arg(MARKER)
        .exec(con)
        .unwrap();
    let mut heard = Vec::new();
    loop {
        let message: Value = sub.recv_response().expect("the marker comes within 2 s");
        let parts: Vec<Value> = FromRedisValue::from_redis_value(message).unwrap();
        let payload: String = FromRedisValue::from_redis_value(parts[2].clone()).unwrap();
        if payload == MARKER {
            return heard;
        }
        heard.push(payload);
    }
}

/// Asserts a WRONGTYPE error whose message starts with `start` (the key it names).
fn assert_wrongtype<T: std::fmt::Debug>(result: RedisResult<T>, start: &str) {
    let err = result.expect_err("a WRONGTYPE error");
    assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    let detail = err.detail().unwrap_or_default();
    assert!(detail.starts_with(start), "{start:?} in {err}");
}

// ---- acquire ----

#[test]
fn a_free_lock_grants_a_clock_seeded_token_and_writes_the_hold_as_documented() {
    let server = server();
    let mut con = raw(&server);
    let before = server_micros(&mut con);
    // An owner id may contain spaces: it comes last in the hold's value.
    let (granted, token) = write(1, "owner a").run(&mut con);
    let after = server_micros(&mut con);
    assert_eq!(granted, 1);
    assert!(
        (before..=after).contains(&token),
        "{before} <= {token} <= {after}"
    );
    let all = fields(&mut con);
    assert_eq!(
        all.len(),
        3,
        "writer, token, one hold (an RwLock has no kind): {all:?}"
    );
    assert!(!all.contains_key("kind"));
    assert_eq!(all["writer"], "owner a");
    assert_eq!(all["token"], token.to_string());
    let hold = hold_of(&mut con, 1).unwrap();
    assert_eq!(
        (hold.mode.as_str(), hold.token, hold.owner.as_str()),
        ("w", token, "owner a")
    );
    let lease = LEASE as i64;
    assert!(
        (before / 1_000 + lease..=after / 1_000 + lease).contains(&hold.deadline),
        "deadline {} is the lease from the grant",
        hold.deadline
    );
    let ttl = pttl(&server, LOCK);
    assert!(ttl > 9_000 && ttl <= 10_000, "lock key ttl {ttl}");
    assert_eq!(counter(&mut con), Some(token.to_string()));
    assert_eq!(pttl(&server, FENCE), -1, "the counter never expires");
    assert!(!exists(&mut con, QUEUE) && !exists(&mut con, TICKETS));

    // A retried request (same hold id): granted again with the same token, the lease set
    // again, no new token taken.
    let before = server_ms(&mut con);
    assert_eq!(write(1, "owner a").lease(20_000).run(&mut con), (1, token));
    let hold = hold_of(&mut con, 1).unwrap();
    assert!(hold.deadline >= before + 20_000, "{}", hold.deadline);
    assert!(pttl(&server, LOCK) > 19_000);
    assert_eq!(counter(&mut con), Some(token.to_string()));
    assert_eq!(fields(&mut con).len(), 3);
}

#[test]
fn reads_by_several_owners_are_granted_side_by_side_each_with_a_new_token() {
    let server = server();
    let mut con = raw(&server);
    let (granted, first) = read(1, "A").run(&mut con);
    assert_eq!(granted, 1);
    let (granted, second) = read(2, "B").lease(5_000).run(&mut con);
    assert_eq!(granted, 1);
    assert!(second > first, "{second} > {first}");
    let all = fields(&mut con);
    assert_eq!(all.len(), 2, "two holds, no writer, no kind: {all:?}");
    let one = hold_of(&mut con, 1).unwrap();
    let two = hold_of(&mut con, 2).unwrap();
    assert_eq!(
        (one.mode.as_str(), one.token, one.owner.as_str()),
        ("r", first, "A")
    );
    assert_eq!(
        (two.mode.as_str(), two.token, two.owner.as_str()),
        ("r", second, "B")
    );
    assert!(
        one.deadline - two.deadline >= 4_900,
        "each hold has its own lease"
    );
    assert_eq!(counter(&mut con), Some(second.to_string()));
    // A retried read keeps its token.
    assert_eq!(read(1, "A").run(&mut con), (1, first));
    assert_eq!(counter(&mut con), Some(second.to_string()));
}

#[test]
fn the_writer_reenters_with_its_token_and_may_read_while_others_wait_for_the_soonest_hold() {
    let server = server();
    let mut con = raw(&server);
    let (_, token) = write(1, "A").run(&mut con);
    // A write re-entry keeps the writer's token; no new token is taken.
    assert_eq!(write(2, "A").lease(3_000).run(&mut con), (1, token));
    let two = hold_of(&mut con, 2).unwrap();
    assert_eq!((two.mode.as_str(), two.token), ("w", token));
    assert_eq!(counter(&mut con), Some(token.to_string()));
    // The writer's owner may read while writing: a read hold with a new token.
    let (granted, read_token) = read(3, "A").lease(2_000).run(&mut con);
    assert_eq!(granted, 1);
    assert!(read_token > token);
    assert_eq!(hold_of(&mut con, 3).unwrap().mode, "r");
    let all = fields(&mut con);
    assert_eq!(all["writer"], "A");
    assert_eq!(
        all["token"],
        token.to_string(),
        "the first write hold's token"
    );

    // Another owner's read waits for the soonest write hold (hold 2, 3 s), not for the
    // writer's own read hold (2 s).
    let (granted, ms) = read(4, "B").run(&mut con);
    assert_eq!(granted, 0);
    assert!(ms > 2_000 && ms <= 3_000, "{ms}");
    // Another owner's write waits for the soonest hold of all (hold 3, 2 s).
    let (granted, ms) = write(5, "B").run(&mut con);
    assert_eq!(granted, 0);
    assert!(ms > 1_000 && ms <= 2_000, "{ms}");
    // Refused without a place: nothing written.
    assert_eq!(fields(&mut con), all);
    assert!(!exists(&mut con, QUEUE));
    assert_eq!(counter(&mut con), Some(read_token.to_string()));
}

#[test]
fn a_write_waits_for_the_soonest_read_and_a_placed_refusal_joins_the_queue() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    read(1, "A").run(&mut con);
    read(2, "B").lease(2_000).run(&mut con);
    let (granted, ms) = write(3, "C").run(&mut con);
    assert_eq!(granted, 0);
    assert!(
        ms > 1_000 && ms <= 2_000,
        "until the soonest read ends: {ms}"
    );
    assert!(!exists(&mut con, QUEUE), "place lease 0: no place");

    let now = server_ms(&mut con);
    let (granted, _) = write(3, "C").placed().run(&mut con);
    assert_eq!(granted, 0);
    assert_eq!(queue(&mut con), [w(3)]);
    let place: i64 = redis::cmd("ZSCORE")
        .arg(PLACES)
        .arg(w(3))
        .query(&mut con)
        .unwrap();
    assert!(
        (now + PLACE as i64..now + PLACE as i64 + 1_000).contains(&place),
        "the place is leased for the place lease: {place}"
    );
    for key in [QUEUE, PLACES, TICKETS] {
        let ttl = pttl(&server, key);
        assert!(
            ttl > PLACE as i64 && ttl <= 2 * PLACE as i64,
            "{key}: {ttl}"
        );
    }

    // A reader that comes later queues behind the waiting writer, though only reads are
    // held: {0, -2}. The writer may not enter yet (reads are live), so nobody is woken.
    assert_eq!(read(4, "D").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(3), r(4)]);
    // Asking again keeps the places.
    assert_eq!(write(3, "C").placed().run(&mut con).0, 0);
    assert_eq!(read(4, "D").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(3), r(4)]);
    // Without a place: refused the same way, and no place.
    assert_eq!(read(5, "E").run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(3), r(4)]);
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    assert!(hold_of(&mut con, 4).is_none() && hold_of(&mut con, 5).is_none());
}

#[test]
fn a_retry_must_carry_its_holds_own_mode_and_owner() {
    let server = server();
    let mut con = raw(&server);
    let (_, token) = read(1, "A").run(&mut con);
    let before = fields(&mut con);
    // The same hold id in the other mode, or for another owner: refused, nothing written.
    for ask in [write(1, "A"), read(1, "B")] {
        let err = ask.try_run(&mut con).expect_err("refused");
        assert!(
            err.to_string().contains("another mode or by another owner"),
            "{err}"
        );
    }
    assert_eq!(fields(&mut con), before);
    // The true retry is granted again with its token.
    assert_eq!(read(1, "A").run(&mut con), (1, token));
}

#[test]
fn a_write_re_entry_renews_every_write_hold_of_the_owner() {
    let server = server();
    let mut con = raw(&server);
    write(1, "A").run(&mut con);
    assert_eq!(extend(&mut con, 1, 300), 1);
    let short = hold_of(&mut con, 1).unwrap().deadline;
    write(2, "A").run(&mut con);
    let renewed = hold_of(&mut con, 1).unwrap().deadline;
    assert!(renewed > short + 1000, "{short} -> {renewed}");
    assert_eq!(renewed, hold_of(&mut con, 2).unwrap().deadline);
}

#[test]
fn an_upgrade_is_refused_with_minus_three_and_writes_nothing() {
    let server = server();
    let mut con = raw(&server);
    read(1, "A").run(&mut con);
    let before = fields(&mut con);
    let count = counter(&mut con);
    // Even the only reader may not upgrade, and a refusal for good gets no place.
    assert_eq!(write(2, "A").placed().run(&mut con), (0, -3));
    assert_eq!(fields(&mut con), before);
    assert_eq!(counter(&mut con), count);
    assert!(!exists(&mut con, QUEUE));

    // With another writer waiting (which marks the hash), the same.
    assert_eq!(write(3, "C").placed().run(&mut con).0, 0);
    let mut marked = before.clone();
    marked.insert("waiting".to_string(), "1".to_string());
    assert_eq!(fields(&mut con), marked);
    assert_eq!(write(2, "A").placed().run(&mut con), (0, -3));
    assert_eq!(queue(&mut con), [w(3)]);
    assert_eq!(fields(&mut con), marked);
    assert_eq!(counter(&mut con), count);
}

#[test]
fn an_owner_that_reads_already_reads_again_past_a_waiting_writer() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = read(1, "A").run(&mut con);
    assert_eq!(write(2, "W").placed().run(&mut con).0, 0);
    assert_eq!(read(3, "B").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(2), r(3)]);
    // A's re-entry is granted at once (it would otherwise wait for a writer that waits for
    // A): a new hold with a new token, and no place taken.
    let (granted, again) = read(4, "A").placed().run(&mut con);
    assert_eq!(granted, 1);
    assert!(again > first);
    let hold = hold_of(&mut con, 4).unwrap();
    assert_eq!((hold.mode.as_str(), hold.owner.as_str()), ("r", "A"));
    assert_eq!(queue(&mut con), [w(2), r(3)]);
}

#[test]
fn a_free_lock_goes_to_the_writer_first_in_line_and_latecomers_get_minus_two_and_wake_it() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    read(1, "A").run(&mut con);
    assert_eq!(write(2, "W").placed().run(&mut con).0, 0);
    // The read release that leaves no reader wakes the writer first in line.
    assert_eq!(release(&mut con, 1), (1, 0));
    assert!(!exists(&mut con, LOCK), "the last hold took the key");
    assert_eq!(published(&mut sub, &mut con), [w(2)]);

    // Before it comes back, the lock is free, but others queue first: a writer that is not
    // first in line, a reader without a place, a reader with a place behind the writer.
    // Each gets {0, -2}, and the head is woken again (its wake-up may have been lost).
    assert_eq!(write(3, "X").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(2), w(3)]);
    assert_eq!(published(&mut sub, &mut con), [w(2)]);
    assert_eq!(read(4, "B").run(&mut con), (0, -2));
    assert_eq!(
        queue(&mut con),
        [w(2), w(3)],
        "no place without a place lease"
    );
    assert_eq!(published(&mut sub, &mut con), [w(2)]);
    assert_eq!(read(5, "B").placed().run(&mut con), (0, -2));
    assert_eq!(read(5, "B").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(2), w(3), r(5)]);
    assert_eq!(published(&mut sub, &mut con), [w(2), w(2)]);
    assert!(!exists(&mut con, LOCK), "nothing was granted");

    // The head takes it, and leaves the line; a grant wakes nobody.
    let (granted, _) = write(2, "W").placed().run(&mut con);
    assert_eq!(granted, 1);
    assert_eq!(queue(&mut con), [w(3), r(5)]);
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    // Its release wakes the next writer only (the reader behind it waits for it).
    assert_eq!(release(&mut con, 2), (1, 0));
    assert_eq!(published(&mut sub, &mut con), [w(3)]);
    // That writer gives up instead: the reader now first in line is woken.
    assert_eq!(release(&mut con, 3), (0, 0));
    assert_eq!(queue(&mut con), [r(5)]);
    assert_eq!(published(&mut sub, &mut con), [r(5)]);
}

#[test]
fn release_wakes_the_readers_in_front_up_to_the_first_writer_then_that_writer() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    write(1, "W").run(&mut con);
    assert_eq!(read(2, "A").placed().run(&mut con).0, 0);
    assert_eq!(read(3, "B").placed().run(&mut con).0, 0);
    assert_eq!(write(4, "X").placed().run(&mut con).0, 0);
    assert_eq!(read(5, "C").placed().run(&mut con).0, 0);
    assert_eq!(queue(&mut con), [r(2), r(3), w(4), r(5)]);
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());

    // A write release wakes the readers in front, up to the first writer.
    assert_eq!(release(&mut con, 1), (1, 0));
    assert_eq!(published(&mut sub, &mut con), [r(2), r(3)]);
    // A writer that comes before they do is refused and wakes them again.
    assert_eq!(write(6, "Y").placed().run(&mut con), (0, -2));
    assert_eq!(published(&mut sub, &mut con), [r(2), r(3)]);
    assert_eq!(queue(&mut con), [r(2), r(3), w(4), r(5), w(6)]);

    // The woken readers enter and leave the line.
    assert_eq!(read(2, "A").placed().run(&mut con).0, 1);
    assert_eq!(read(3, "B").placed().run(&mut con).0, 1);
    assert_eq!(queue(&mut con), [w(4), r(5), w(6)]);
    // The reader behind the writer still waits; nobody may enter, nobody is woken.
    assert_eq!(read(5, "C").placed().run(&mut con), (0, -2));
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    // A read release that leaves readers publishes nothing...
    assert_eq!(release(&mut con, 2), (1, 0));
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    // ...the one that leaves none wakes the writer first in line.
    assert_eq!(release(&mut con, 3), (1, 0));
    assert_eq!(published(&mut sub, &mut con), [w(4)]);
    assert_eq!(write(4, "X").placed().run(&mut con).0, 1);
    assert_eq!(queue(&mut con), [r(5), w(6)]);
}

// ---- release ----

#[test]
fn release_reports_how_many_holds_the_owner_has_left_in_that_mode() {
    let server = server();
    let mut con = raw(&server);
    let (_, token) = write(1, "A").run(&mut con);
    write(2, "A").run(&mut con);
    write(3, "A").run(&mut con);
    read(4, "A").run(&mut con);
    assert_eq!(release(&mut con, 3), (1, 2));
    assert_eq!(release(&mut con, 2), (1, 1));
    let all = fields(&mut con);
    assert_eq!(all["writer"], "A");
    assert_eq!(all["token"], token.to_string());
    // The last write hold takes the writer's fields; the read hold stays.
    assert_eq!(release(&mut con, 1), (1, 0));
    let all = fields(&mut con);
    assert!(
        !all.contains_key("writer") && !all.contains_key("token"),
        "{all:?}"
    );
    assert_eq!(all.len(), 1, "the read hold alone: {all:?}");
    assert!(pttl(&server, LOCK) > 0);

    read(5, "A").run(&mut con);
    read(6, "B").run(&mut con);
    assert_eq!(release(&mut con, 4), (1, 1), "A reads once more");
    assert_eq!(release(&mut con, 6), (1, 0), "B reads no more");
    assert_eq!(release(&mut con, 5), (1, 0));
    assert!(!exists(&mut con, LOCK), "the last hold takes the key");
    // Released again: gone.
    assert_eq!(release(&mut con, 5), (0, 0));
}

#[test]
fn a_grant_that_leaves_others_in_line_marks_the_hash_so_its_release_wakes_them() {
    // (A waiter that joins the line of a held lock marks it too: see
    // `a_free_lock_goes_to_the_writer_first_in_line_and_latecomers_get_minus_two_and_wake_it`,
    // whose lone read release must wake the writer.)
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    read(1, "A").run(&mut con);
    assert_eq!(write(2, "W").placed().run(&mut con).0, 0);
    assert_eq!(write(3, "V").placed().run(&mut con).0, 0);
    assert_eq!(fields(&mut con)["waiting"], "1", "waiters mark a held lock");
    assert_eq!(release(&mut con, 1), (1, 0));
    assert_eq!(published(&mut sub, &mut con), [w(2)]);
    // The first writer's grant makes a new hash and marks it, since the second is still in
    // line: its lone write hold's release takes the full path and wakes the second (the
    // fast path would delete the hash and wake nobody).
    assert_eq!(write(2, "W").placed().run(&mut con).0, 1);
    assert_eq!(fields(&mut con)["waiting"], "1");
    assert_eq!(release(&mut con, 2), (1, 0));
    assert_eq!(published(&mut sub, &mut con), [w(3)]);
    // The last waiter's grant leaves nobody in line: no mark, and its release is the fast
    // path (the hash goes; nobody is woken).
    assert_eq!(write(3, "V").placed().run(&mut con).0, 1);
    assert!(!fields(&mut con).contains_key("waiting"));
    assert_eq!(release(&mut con, 3), (1, 0));
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    assert!(!exists(&mut con, LOCK) && !exists(&mut con, QUEUE));
}

#[test]
fn release_of_an_unknown_hold_changes_nothing_but_gives_up_the_callers_place() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    read(1, "A").run(&mut con);
    let before = fields(&mut con);
    let count = counter(&mut con);
    assert_eq!(release(&mut con, 9), (0, 0));
    assert_eq!(fields(&mut con), before);
    assert_eq!(counter(&mut con), count);
    assert!(pttl(&server, LOCK) > 9_000);

    assert_eq!(write(2, "W").placed().run(&mut con).0, 0);
    assert_eq!(read(3, "B").placed().run(&mut con), (0, -2));
    assert_eq!(queue(&mut con), [w(2), r(3)]);
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    // Waiters mark the hash (and the mark stays while it lives).
    let before = {
        let mut marked = before;
        marked.insert("waiting".to_string(), "1".to_string());
        marked
    };
    assert_eq!(fields(&mut con), before);
    // The writer gives up its wait (it holds nothing): {0, 0}, its place is gone, and the
    // reader now first in line may enter (only reads are held): it is woken.
    assert_eq!(release(&mut con, 2), (0, 0));
    assert_eq!(queue(&mut con), [r(3)]);
    assert_eq!(published(&mut sub, &mut con), [r(3)]);
    assert_eq!(fields(&mut con), before);
    // The last waiter gives up: the queue's keys go, nobody is woken.
    assert_eq!(release(&mut con, 3), (0, 0));
    for key in [QUEUE, PLACES, TICKETS] {
        assert!(!exists(&mut con, key), "{key}");
    }
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    assert_eq!(fields(&mut con), before);
}

// ---- expired holds ----

#[test]
fn an_expired_hold_is_purged_by_the_next_script_and_blocks_nobody() {
    let server = server();
    let mut con = raw(&server);
    let (_, first) = write(1, "A").run(&mut con);
    // Its lease shortened to 300 ms, and the key's TTL set back to 10 s by hand (as an
    // earlier version of these scripts left it: they only ever raised it), so the hold's
    // own deadline is what must count.
    assert_eq!(extend(&mut con, 1, 300), 1);
    outlive(&mut con);
    let deadline = hold_of(&mut con, 1).unwrap().deadline;
    let (granted, ms) = write(2, "B").run(&mut con);
    assert_eq!(granted, 0);
    assert!((1..=300).contains(&ms), "{ms}");
    wait_past(&mut con, deadline);
    // Inspect (which writes nothing) shows it free, the field still there.
    let state = inspect(&mut con);
    assert_eq!((state.kind.as_str(), state.holds.len()), ("", 0));
    assert!(hold_of(&mut con, 1).is_some());

    let (granted, second) = write(2, "B").run(&mut con);
    assert_eq!(granted, 1);
    assert!(second > first);
    let all = fields(&mut con);
    assert!(
        hold_of(&mut con, 1).is_none(),
        "the expired hold was purged"
    );
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all["writer"], "B");
    assert_eq!(all["token"], second.to_string());
}

#[test]
fn an_expired_write_hold_takes_the_writers_fields_with_it() {
    let server = server();
    let mut con = raw(&server);
    write(1, "A").run(&mut con);
    read(2, "A").run(&mut con);
    assert_eq!(extend(&mut con, 1, 300), 1);
    let deadline = hold_of(&mut con, 1).unwrap().deadline;
    assert_eq!(read(3, "B").run(&mut con).0, 0, "written");
    wait_past(&mut con, deadline);
    assert_eq!(read(3, "B").run(&mut con).0, 1);
    let mut names: Vec<String> = fields(&mut con).into_keys().collect();
    names.sort();
    let mut expected = vec![format!("h:{}", id(2)), format!("h:{}", id(3))];
    expected.sort();
    assert_eq!(names, expected, "the write hold, writer and token are gone");
    // A no longer writes: asking write now is an upgrade.
    assert_eq!(write(4, "A").run(&mut con), (0, -3));
}

#[test]
fn the_key_goes_with_its_last_hold_whichever_script_finds_it_expired() {
    let server = server();
    let mut con = raw(&server);
    let expire = |con: &mut Connection, hold: u32| {
        assert_eq!(extend(con, hold, 30), 1);
        outlive(con);
        let deadline = hold_of(con, hold).unwrap().deadline;
        wait_past(con, deadline);
        assert!(exists(con, LOCK), "the key's TTL outlives the hold");
    };
    read(1, "A").run(&mut con);
    expire(&mut con, 1);
    assert_eq!(release(&mut con, 9), (0, 0));
    assert!(!exists(&mut con, LOCK), "release");

    write(2, "A").run(&mut con);
    expire(&mut con, 2);
    assert_eq!(extend(&mut con, 2, LEASE), 0);
    assert!(!exists(&mut con, LOCK), "extend");

    write(3, "A").run(&mut con);
    expire(&mut con, 3);
    assert_eq!(downgrade(&mut con, 3), 0);
    assert!(!exists(&mut con, LOCK), "downgrade");
}

/// When the lock key expires (server ms), `PEXPIRETIME`.
fn expire_time(con: &mut Connection) -> i64 {
    redis::cmd("PEXPIRETIME").arg(LOCK).query(con).unwrap()
}

/// The latest deadline of the holds in the lock key (0 with none).
fn latest_deadline(con: &mut Connection) -> i64 {
    fields(con)
        .iter()
        .filter(|(field, _)| field.starts_with("h:"))
        .filter_map(|(_, value)| value.split(' ').next()?.parse::<i64>().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn the_key_expires_with_its_latest_hold_after_every_change() {
    let server = server();
    let mut con = raw(&server);
    let exact = |con: &mut Connection, step: &str| {
        let (expires, latest) = (expire_time(con), latest_deadline(con));
        assert!(latest > 0, "{step}: a hold is there");
        assert_eq!(
            expires, latest,
            "{step}: the key expires with its latest hold"
        );
    };
    // A fresh lock (the fast path), a second reader with a longer lease (raised), the
    // longer one given back (lowered to the first), extended (raised) and shortened
    // (lowered), a write re-entry that renews the writer's other holds.
    read(1, "A").lease(5_000).run(&mut con);
    exact(&mut con, "fresh");
    read(2, "B").lease(20_000).run(&mut con);
    exact(&mut con, "a second, longer hold");
    assert_eq!(release(&mut con, 2), (1, 0));
    exact(&mut con, "the latest given back");
    assert_eq!(extend(&mut con, 1, 30_000), 1);
    exact(&mut con, "extended");
    assert_eq!(extend(&mut con, 1, 2_000), 1);
    exact(&mut con, "shortened");
    assert_eq!(release(&mut con, 1), (1, 0));
    assert!(!exists(&mut con, LOCK), "the last hold takes the key");

    write(3, "W").lease(3_000).run(&mut con);
    exact(&mut con, "a fresh write hold");
    write(4, "W").lease(15_000).run(&mut con);
    exact(&mut con, "a write re-entry");
    read(5, "W").lease(1_000).run(&mut con);
    exact(&mut con, "the writer's read");
    assert_eq!(release(&mut con, 4), (1, 1));
    exact(&mut con, "a write hold given back");
    assert_eq!(downgrade(&mut con, 3), 1);
    exact(&mut con, "downgraded");
}

#[test]
fn a_lone_hold_is_released_without_the_clock_only_by_its_own_id() {
    let server = server();
    let mut con = raw(&server);
    // A lone read hold: another id changes nothing (and says so), its own deletes the key.
    read(1, "A").run(&mut con);
    let before = fields(&mut con);
    assert_eq!(release(&mut con, 2), (0, 0));
    assert_eq!(fields(&mut con), before, "another id leaves the hold");
    assert_eq!(release(&mut con, 1), (1, 0));
    assert!(!exists(&mut con, LOCK));
    // A lone write hold: the same, the writer's fields go with the key.
    write(3, "W").run(&mut con);
    let before = fields(&mut con);
    assert_eq!(release(&mut con, 4), (0, 0));
    assert_eq!(fields(&mut con), before, "another id leaves the write hold");
    assert_eq!(release(&mut con, 3), (1, 0));
    assert!(!exists(&mut con, LOCK));
    // Three read holds (as many fields as a lone write hold): the reader's own goes, the
    // others stay, and the key expires with the latest left.
    read(5, "A").lease(4_000).run(&mut con);
    read(6, "B").lease(8_000).run(&mut con);
    read(7, "C").lease(30_000).run(&mut con);
    assert_eq!(release(&mut con, 7), (1, 0));
    assert!(hold_of(&mut con, 7).is_none());
    assert!(hold_of(&mut con, 5).is_some() && hold_of(&mut con, 6).is_some());
    assert_eq!(
        expire_time(&mut con),
        hold_of(&mut con, 6).unwrap().deadline
    );
    // A lone hold whose lease ran out: its key went with it, so the release says gone.
    assert_eq!(release(&mut con, 5), (1, 0));
    assert_eq!(extend(&mut con, 6, 50), 1);
    let deadline = hold_of(&mut con, 6).unwrap().deadline;
    wait_past(&mut con, deadline);
    assert!(
        !exists(&mut con, LOCK),
        "the key expired with its lone hold"
    );
    assert_eq!(release(&mut con, 6), (0, 0));
}

// ---- extend ----

#[test]
fn extend_moves_one_holds_deadline_and_the_key_expires_with_the_latest() {
    let server = server();
    let mut con = raw(&server);
    read(1, "A").run(&mut con);
    let (_, token) = read(2, "B").lease(2_000).run(&mut con);
    let one = hold_of(&mut con, 1).unwrap();

    let before = server_ms(&mut con);
    assert_eq!(extend(&mut con, 2, 20_000), 1);
    let after = server_ms(&mut con);
    let two = hold_of(&mut con, 2).unwrap();
    assert!(
        (before + 20_000..=after + 20_000).contains(&two.deadline),
        "{before} + 20 s <= {} <= {after} + 20 s",
        two.deadline
    );
    assert_eq!(
        (two.mode.as_str(), two.token, two.owner.as_str()),
        ("r", token, "B"),
        "only the deadline changes"
    );
    assert!(pttl(&server, LOCK) > 19_000, "the key's TTL was raised");

    // Shortened: the hold's deadline comes closer, and the key now expires with the other
    // hold, the latest (never before it).
    let before = server_ms(&mut con);
    assert_eq!(extend(&mut con, 2, 1_000), 1);
    let two = hold_of(&mut con, 2).unwrap();
    assert!(
        (before + 1_000..before + 1_500).contains(&two.deadline),
        "{}",
        two.deadline
    );
    assert_eq!(expire_time(&mut con), one.deadline);
    assert_eq!(
        hold_of(&mut con, 1).unwrap(),
        one,
        "the other hold is untouched"
    );

    // A hold that is not there: 0, nothing changed.
    let all = fields(&mut con);
    assert_eq!(extend(&mut con, 9, 60_000), 0);
    assert_eq!(fields(&mut con), all);
    assert_eq!(expire_time(&mut con), one.deadline);

    // A write hold keeps its mode and the writer's fields.
    release(&mut con, 1);
    release(&mut con, 2);
    let (_, token) = write(3, "W").run(&mut con);
    assert_eq!(extend(&mut con, 3, 30_000), 1);
    let three = hold_of(&mut con, 3).unwrap();
    assert_eq!((three.mode.as_str(), three.token), ("w", token));
    let all = fields(&mut con);
    assert_eq!(
        (all["writer"].as_str(), all["token"].clone()),
        ("W", token.to_string())
    );
    assert!(pttl(&server, LOCK) > 29_000);
}

// ---- downgrade ----

#[test]
fn downgrade_turns_the_last_write_hold_into_a_read_and_wakes_the_readers_in_front() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    let (_, token) = write(1, "W").run(&mut con);
    write(2, "W").run(&mut con);
    assert_eq!(read(3, "A").placed().run(&mut con).0, 0);
    assert_eq!(read(4, "B").placed().run(&mut con).0, 0);
    assert_eq!(write(5, "X").placed().run(&mut con).0, 0);
    assert_eq!(read(6, "C").placed().run(&mut con).0, 0);
    assert_eq!(queue(&mut con), [r(3), r(4), w(5), r(6)]);
    let one = hold_of(&mut con, 1).unwrap();
    let two = hold_of(&mut con, 2).unwrap();

    // Not the last write hold: it becomes a read, the writer's fields stay, nobody may
    // enter yet and nobody is woken.
    assert_eq!(downgrade(&mut con, 2), 1);
    assert_eq!(
        hold_of(&mut con, 2).unwrap(),
        HoldField {
            mode: "r".into(),
            ..two
        }
    );
    let all = fields(&mut con);
    assert_eq!(
        (all["writer"].as_str(), all["token"].clone()),
        ("W", token.to_string())
    );
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
    assert_eq!(read(7, "D").run(&mut con).0, 0, "still written");

    // The last write hold: mode r, same deadline and token, the writer's fields go, and
    // the readers in front of the first waiting writer are woken.
    assert_eq!(downgrade(&mut con, 1), 1);
    assert_eq!(
        hold_of(&mut con, 1).unwrap(),
        HoldField {
            mode: "r".into(),
            ..one
        }
    );
    let all = fields(&mut con);
    assert!(
        !all.contains_key("writer") && !all.contains_key("token"),
        "{all:?}"
    );
    assert!(!all.contains_key("kind"), "{all:?}");
    assert_eq!(published(&mut sub, &mut con), [r(3), r(4)]);
    assert_eq!(read(3, "A").placed().run(&mut con).0, 1);
    assert_eq!(write(5, "X").placed().run(&mut con).0, 0, "read now");

    // A read hold already: -1 (W's, or A's); a hold that is not there: 0.
    assert_eq!(downgrade(&mut con, 1), -1);
    assert_eq!(downgrade(&mut con, 3), -1);
    assert_eq!(downgrade(&mut con, 9), 0);
    assert_eq!(published(&mut sub, &mut con), Vec::<String>::new());
}

// ---- inspect ----

#[test]
fn inspect_reports_free_written_and_read_locks_and_writes_nothing() {
    let server = server();
    let mut con = raw(&server);
    let free = State {
        kind: String::new(),
        counter: 0,
        readers: 0,
        writers: 0,
        holds: HashMap::new(),
    };
    assert_eq!(inspect(&mut con), free);

    let (_, first) = write(1, "W a").run(&mut con);
    let (_, second) = read(2, "W a").lease(5_000).run(&mut con);
    assert_eq!(write(3, "X").placed().run(&mut con).0, 0);
    assert_eq!(read(4, "Y").placed().run(&mut con).0, 0);
    // A waiter whose place runs out does not count; nor does a Mutex waiter's id (hex).
    assert_eq!(read(5, "Z").place(30).run(&mut con).0, 0);
    let now = server_ms(&mut con);
    redis::cmd("ZADD")
        .arg(PLACES)
        .arg(now + 5_000)
        .arg("0123abcd")
        .exec(&mut con)
        .unwrap();
    wait_past(&mut con, now + 30);
    let before = fields(&mut con);
    let line = queue(&mut con);
    assert!(line.contains(&r(5)));

    let state = inspect(&mut con);
    assert_eq!(
        (
            state.kind.as_str(),
            state.counter,
            state.readers,
            state.writers
        ),
        ("rwlock", second, 1, 1)
    );
    assert_eq!(state.holds.len(), 2, "{state:?}");
    let (mode, owner, ms, token) = &state.holds[&id(1)];
    assert_eq!((mode.as_str(), owner.as_str(), *token), ("w", "W a", first));
    assert!(*ms > 8_000 && *ms <= 10_000, "{ms}");
    let (mode, owner, ms, token) = &state.holds[&id(2)];
    assert_eq!(
        (mode.as_str(), owner.as_str(), *token),
        ("r", "W a", second)
    );
    assert!(*ms > 3_000 && *ms <= 5_000, "{ms}");

    // Nothing written: the hash and the queue (with its dead waiter) are as they were, and
    // the script runs as well read-only (EVAL_RO refuses every write command).
    assert_eq!(fields(&mut con), before);
    assert_eq!(queue(&mut con), line);
    let code = [FENCE_LUA, LOCK_LUA, QUEUE_LUA, HOLDS_LUA, INSPECT_LUA].join("\n");
    let read_only: Vec<String> = redis::cmd("EVAL_RO")
        .arg(&code)
        .arg(3)
        .arg(&[LOCK, FENCE, PLACES][..])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        parse_state(&read_only).without_leases(),
        state.without_leases()
    );

    // Read-held: the write hold released, the waiting writer gives up, the reader that was
    // behind it enters.
    assert_eq!(release(&mut con, 1), (1, 0));
    assert_eq!(release(&mut con, 3), (0, 0));
    assert_eq!(read(4, "Y").placed().run(&mut con).0, 1);
    let state = inspect(&mut con);
    assert_eq!(
        (state.kind.as_str(), state.readers, state.writers),
        ("rwlock", 0, 0)
    );
    let mut modes: Vec<(String, String)> = state
        .holds
        .values()
        .map(|(mode, owner, _, _)| (mode.clone(), owner.clone()))
        .collect();
    modes.sort();
    assert_eq!(
        modes,
        [("r".into(), "W a".into()), ("r".into(), "Y".into())]
    );

    // Free again: no kind, no holds, the counter as it was left.
    assert_eq!(release(&mut con, 2), (1, 0));
    assert_eq!(release(&mut con, 4), (1, 0));
    let state = inspect(&mut con);
    assert_eq!(
        (state.kind.as_str(), state.holds.len()),
        ("", 0),
        "{state:?}"
    );
    assert_eq!(
        Some(state.counter.to_string()),
        counter(&mut con),
        "the latest token"
    );
}

// ---- ReentrantMutex ----

#[test]
fn a_reentrant_mutex_keeps_write_holds_in_the_same_hash() {
    let server = server();
    let mut con = raw(&server);
    let (granted, token) = write(1, "A").reentrant().run(&mut con);
    assert_eq!(granted, 1);
    assert_eq!(write(2, "A").reentrant().run(&mut con), (1, token));
    let all = fields(&mut con);
    assert_eq!(all["kind"], "reentrant");
    assert_eq!(all["writer"], "A");
    let (granted, ms) = write(3, "B").reentrant().placed().run(&mut con);
    assert_eq!(granted, 0);
    assert!(ms > 9_000 && ms <= 10_000, "{ms}");
    assert_eq!(queue(&mut con), [w(3)]);
    assert_eq!(inspect(&mut con).kind, "reentrant");
    assert_eq!(release(&mut con, 2), (1, 1));
    assert_eq!(release(&mut con, 1), (1, 0));
    assert!(!exists(&mut con, LOCK));
    let (granted, next) = write(3, "B").reentrant().placed().run(&mut con);
    assert_eq!(granted, 1);
    assert!(next > token);
    assert!(queue(&mut con).is_empty());
}

// ---- wrong types ----

#[test]
fn every_script_refuses_a_lock_key_of_another_type_and_writes_nothing() {
    let server = server();
    let mut con = raw(&server);
    for (found, make) in [("string", "SET"), ("list", "RPUSH")] {
        redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
        // A Mutex's key (a string), or anything else.
        redis::cmd(make)
            .arg(LOCK)
            .arg("someone")
            .exec(&mut con)
            .unwrap();
        redis::cmd("PEXPIRE")
            .arg(LOCK)
            .arg(60_000)
            .exec(&mut con)
            .unwrap();
        let start = format!("R holds a {found}");
        for ask in [
            read(1, "A").placed(),
            write(1, "A").placed(),
            write(1, "A").reentrant().placed(),
        ] {
            assert_wrongtype(ask.try_run(&mut con), &start);
        }
        assert_wrongtype(try_release(&mut con, 1), &start);
        assert_wrongtype(try_extend(&mut con, 1, "1000"), &start);
        assert_wrongtype(try_downgrade(&mut con, 1), &start);
        assert_wrongtype(try_inspect(&mut con), &start);
        assert_eq!(key_type(&mut con, LOCK), found, "untouched");
        assert!(pttl(&server, LOCK) > 59_000);
        for key in [FENCE, QUEUE, PLACES, TICKETS] {
            assert!(!exists(&mut con, key), "{key} was written");
        }
    }
}

#[test]
fn acquire_refuses_a_hash_of_another_kind_and_writes_nothing() {
    let server = server();
    let mut con = raw(&server);
    let (_, token) = write(1, "A").reentrant().run(&mut con);
    let before = fields(&mut con);
    for ask in [read(2, "B").placed(), write(2, "B").placed(), write(2, "A")] {
        assert_wrongtype(
            ask.try_run(&mut con),
            "R is in use as a reentrant, not a rwlock",
        );
    }
    assert_eq!(fields(&mut con), before);
    assert_eq!(counter(&mut con), Some(token.to_string()));
    assert!(!exists(&mut con, QUEUE));
    release(&mut con, 1);

    let (_, token) = read(1, "A").run(&mut con);
    let before = fields(&mut con);
    for ask in [
        write(2, "B").reentrant().placed(),
        write(2, "A").reentrant(),
    ] {
        assert_wrongtype(
            ask.try_run(&mut con),
            "R is in use as a rwlock, not a reentrant",
        );
    }
    assert_eq!(fields(&mut con), before);
    assert_eq!(counter(&mut con), Some(token.to_string()));
    assert!(!exists(&mut con, QUEUE));
    release(&mut con, 1);

    // A hash that is no lock at all (no kind).
    redis::cmd("HSET")
        .arg(LOCK)
        .arg("field")
        .arg("value")
        .exec(&mut con)
        .unwrap();
    for ask in [write(2, "B").placed(), write(2, "B").reentrant()] {
        assert_wrongtype(
            ask.try_run(&mut con),
            "R holds a hash that is not a lock of holds",
        );
    }
    let all = fields(&mut con);
    assert_eq!(all.len(), 1, "{all:?}");

    // Without a kind, a hash is an RwLock's only if it has a hold and every field is an
    // RwLock's: a field named like a hold whose value is no hold's, or no hold at all (fields
    // named like a writer's only: these scripts never leave such a hash), makes it no lock,
    // and nothing touches it (a release deletes only the field of its own random hold id,
    // which only its acquisition wrote).
    let not_ours = "R holds a hash that is not a lock of holds";
    let hold_field = format!("h:{}", id(2));
    for hash in [
        vec![(hold_field.as_str(), "not a hold")],
        vec![("writer", "bob"), ("token", "77")],
    ] {
        redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
        let mut set = redis::cmd("HSET");
        set.arg(LOCK);
        for (field, value) in &hash {
            set.arg(*field).arg(*value);
        }
        set.exec(&mut con).unwrap();
        let before = fields(&mut con);
        for ask in [read(3, "B"), write(3, "B").placed()] {
            assert_wrongtype(ask.try_run(&mut con), not_ours);
        }
        assert_wrongtype(try_release(&mut con, 3), not_ours);
        assert_wrongtype(try_extend(&mut con, 3, "1000"), not_ours);
        assert_wrongtype(try_inspect(&mut con), not_ours);
        assert_eq!(fields(&mut con), before, "nothing written: {hash:?}");
    }
}

#[test]
fn a_hash_written_by_an_earlier_version_with_kind_rwlock_is_still_an_rwlock() {
    let server = server();
    let mut con = raw(&server);
    read(1, "A").run(&mut con);
    redis::cmd("HSET")
        .arg(LOCK)
        .arg("kind")
        .arg("rwlock")
        .exec(&mut con)
        .unwrap();
    assert_eq!(read(2, "B").run(&mut con).0, 1, "another reader joins");
    assert_eq!(write(3, "C").placed().run(&mut con).0, 0, "a writer waits");
    assert_wrongtype(
        write(4, "D").reentrant().try_run(&mut con),
        "R is in use as a rwlock, not a reentrant",
    );
    assert_eq!(inspect(&mut con).kind, "rwlock");
    assert_eq!(release(&mut con, 1), (1, 0));
    assert_eq!(release(&mut con, 2), (1, 0));
    assert!(
        !exists(&mut con, LOCK),
        "the last hold takes the key and its kind"
    );
}

#[test]
fn the_scripts_that_touch_the_queue_refuse_a_queue_key_of_another_type() {
    let server = server();
    let mut con = raw(&server);
    for (key, make, found) in [
        (QUEUE, ["SET", "x", ""], "string"),
        (PLACES, ["RPUSH", "x", ""], "list"),
        (TICKETS, ["HSET", "f", "v"], "hash"),
    ] {
        let (_, token) = write(1, "A").run(&mut con);
        let before = fields(&mut con);
        let mut cmd = redis::cmd(make[0]);
        cmd.arg(key).arg(make[1]);
        if !make[2].is_empty() {
            cmd.arg(make[2]);
        }
        cmd.exec(&mut con).unwrap();
        let start = format!("{key} holds a {found}, not a queue");
        // A new writer, a new reader, and even the writer's own re-entry.
        for ask in [write(2, "B").placed(), read(2, "B"), write(2, "A")] {
            assert_wrongtype(ask.try_run(&mut con), &start);
        }
        assert_wrongtype(try_downgrade(&mut con, 1), &start);
        assert_eq!(fields(&mut con), before, "nothing written");
        assert_eq!(counter(&mut con), Some(token.to_string()));
        // Extend takes no queue key.
        assert_eq!(extend(&mut con, 1, LEASE), 1);
        // Nobody waited (the hash has no 'waiting' mark), so the release of the only hold
        // is the common case (release_first.lua), which touches no queue key at all.
        assert_eq!(release(&mut con, 1), (1, 0));
        assert!(exists(&mut con, key), "{key} left alone");
        redis::cmd("DEL").arg(key).exec(&mut con).unwrap();
    }
}

#[test]
fn a_fencing_counter_that_is_no_integer_refuses_a_new_token_and_nothing_is_written() {
    let server = server();
    let mut con = raw(&server);
    for (make, value) in [
        ("SET", "not-a-number"),
        ("SET", "9223372036854775807"),
        ("RPUSH", "x"),
    ] {
        redis::cmd("DEL").arg(FENCE).exec(&mut con).unwrap();
        redis::cmd(make)
            .arg(FENCE)
            .arg(value)
            .exec(&mut con)
            .unwrap();
        for ask in [
            write(1, "A").placed(),
            read(1, "A").placed(),
            write(1, "A").reentrant(),
        ] {
            assert_wrongtype(ask.try_run(&mut con), "{R}:fence is not a fencing counter");
            assert!(!exists(&mut con, LOCK), "no hold for {value}");
            assert!(!exists(&mut con, QUEUE), "no place for {value}");
        }
    }
    redis::cmd("SET")
        .arg(FENCE)
        .arg("not-a-number")
        .exec(&mut con)
        .unwrap();
    assert_wrongtype(try_inspect(&mut con), "{R}:fence is not a fencing counter");
}

#[test]
fn inspect_names_a_fencing_counter_of_another_type() {
    let server = server();
    let mut con = raw(&server);
    redis::cmd("RPUSH")
        .arg(FENCE)
        .arg("x")
        .exec(&mut con)
        .unwrap();
    assert_wrongtype(try_inspect(&mut con), "{R}:fence");
}

#[test]
fn a_name_whose_holds_all_expired_is_free_for_the_other_kind() {
    let server = server();
    let mut con = raw(&server);
    read(1, "A").run(&mut con);
    assert_eq!(extend(&mut con, 1, 30), 1);
    let deadline = hold_of(&mut con, 1).unwrap().deadline;
    wait_past(&mut con, deadline);
    assert_eq!(inspect(&mut con).kind, "", "free by inspect's account");
    let (granted, _) = write(2, "B").reentrant().try_run(&mut con).unwrap();
    assert_eq!(granted, 1);
    assert_eq!(fields(&mut con)["kind"], "reentrant");
}

#[test]
fn release_extend_and_downgrade_leave_a_hash_that_is_no_lock_alone() {
    let server = server();
    let mut con = raw(&server);
    let mut deleted = Vec::new();
    for name in ["release", "extend", "downgrade"] {
        redis::cmd("HSET")
            .arg(LOCK)
            .arg("field")
            .arg("value")
            .exec(&mut con)
            .unwrap();
        let result = match name {
            "release" => try_release(&mut con, 1).map(|_| ()),
            "extend" => try_extend(&mut con, 1, "1000").map(|_| ()),
            _ => try_downgrade(&mut con, 1).map(|_| ()),
        };
        if !exists(&mut con, LOCK) {
            deleted.push(format!("{name} ({result:?}) deleted the hash"));
        }
    }
    assert!(deleted.is_empty(), "{deleted:#?}");
}

// ---- bad input ----

#[test]
fn a_lease_or_place_lease_that_is_no_number_is_refused_and_no_hold_is_written() {
    let server = server();
    let mut con = raw(&server);
    let hold = id(1);
    for (lease, place) in [("soon", "0"), ("1000", "later")] {
        let result = acquire_with(&mut con, ["rwlock", "w", &hold, "A", lease, place, CHANNEL]);
        assert!(
            result.is_err(),
            "lease {lease:?}, place {place:?}: {result:?}"
        );
        assert!(!exists(&mut con, LOCK), "no hold for {lease:?}/{place:?}");
        assert!(!exists(&mut con, QUEUE), "no place for {lease:?}/{place:?}");
    }
    write(1, "A").run(&mut con);
    let before = fields(&mut con);
    assert!(try_extend(&mut con, 1, "soon").is_err());
    assert_eq!(fields(&mut con), before, "the hold is untouched");
    check_keys(&mut con);
}

#[test]
fn acquire_refuses_a_lease_or_mode_it_cannot_keep_and_never_leaves_a_key_without_ttl() {
    let server = server();
    let mut con = raw(&server);
    let hold = id(1);
    let mut wrong = Vec::new();
    for (mode, lease) in [("w", "-5"), ("w", "1.5"), ("r", "0"), ("x", "1000")] {
        redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
        let result = acquire_with(&mut con, ["rwlock", mode, &hold, "A", lease, "0", CHANNEL]);
        let ttl = pttl(&server, LOCK);
        if ttl == -1 {
            wrong.push(format!(
                "mode {mode:?}, lease {lease:?}: the key has no TTL"
            ));
        }
        if let Ok(reply) = result {
            wrong.push(format!(
                "mode {mode:?}, lease {lease:?}: not refused: {reply:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_token_is_the_server_clock_or_one_past_a_counter_ahead_of_it() {
    let server = server();
    let mut con = raw(&server);
    let before = server_micros(&mut con);
    let (granted, first) = read(1, "A").run(&mut con);
    assert_eq!(granted, 1);
    assert!(
        first >= before,
        "seeded from the clock: {first} >= {before}"
    );
    let counter: i64 = redis::cmd("GET").arg(FENCE).query(&mut con).unwrap();
    assert_eq!(counter, first, "the counter holds the token");
    // A counter ahead of the clock (more than one grant per µs) steps by one.
    redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
    let ahead = server_micros(&mut con) + 10_000_000;
    redis::cmd("SET")
        .arg(FENCE)
        .arg(ahead)
        .exec(&mut con)
        .unwrap();
    let (granted, second) = write(2, "B").run(&mut con);
    assert_eq!((granted, second), (1, ahead + 1));
    let counter: i64 = redis::cmd("GET").arg(FENCE).query(&mut con).unwrap();
    assert_eq!(counter, ahead + 1);
    // Behind the clock again (a counter that came back old): the clock.
    redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
    redis::cmd("SET").arg(FENCE).arg(7).exec(&mut con).unwrap();
    let before = server_micros(&mut con);
    let (granted, third) = read(3, "C").run(&mut con);
    assert_eq!(granted, 1);
    assert!(third >= before, "{third} >= {before}");
}

#[test]
fn ten_thousand_expired_read_holds_are_purged_by_one_acquire() {
    // More than Lua's unpack gives at once (about 8,000): the purge deletes them in slices.
    let server = server();
    let mut con = raw(&server);
    // 10,000 read holds whose leases ended at server time 1 ms, and one live.
    let mut fields: Vec<(String, String)> = (0..10_000)
        .map(|n| (format!("h:{}", id(n)), format!("1 r {} reader-{n}", n + 1)))
        .collect();
    let live = server_ms(&mut con) + 60_000;
    fields.push((format!("h:{}", id(10_000)), format!("{live} r 1 live")));
    common::put_hash(&mut con, LOCK, &fields);
    assert_eq!(read(10_001, "late").run(&mut con).0, 1);
    let left: i64 = redis::cmd("HLEN").arg(LOCK).query(&mut con).unwrap();
    assert_eq!(left, 2, "the live hold and the new one");
}

// ---- a read hold kept as a plain key ----

/// Writes a lone read hold of `owner` under hold id `n` as the client's first attempt does:
/// the plain key '<hold> r <owner>' with the lease `ms` as its TTL.
fn plain(con: &mut Connection, n: u32, owner: &str, ms: u64) {
    redis::cmd("SET")
        .arg(LOCK)
        .arg(format!("{} r {owner}", id(n)))
        .arg("NX")
        .arg("PX")
        .arg(ms)
        .exec(con)
        .unwrap();
}

/// The acquire script as the library sends it after a first attempt whose grant the script
/// must number: with the counter's epochs (`KEYS[6]`) and the connection's name (`ARGV[8]`).
fn acquire_naming(con: &mut Connection, ask: Ask<'_>, name: &str) -> RedisResult<(i64, i64)> {
    lua(&[FENCE_LUA, LOCK_LUA, QUEUE_LUA, HOLDS_LUA, ACQUIRE_LUA])
        .key(&[LOCK, FENCE, QUEUE, PLACES, TICKETS, "{R}:epoch"][..])
        .arg(ask.kind)
        .arg(ask.mode)
        .arg(id(ask.hold))
        .arg(ask.owner)
        .arg(ask.lease.to_string())
        .arg(ask.place.to_string())
        .arg(CHANNEL)
        .arg(name)
        .invoke(con)
}

#[test]
fn a_plain_read_hold_is_read_as_the_hold_it_stands_for_and_written_nothing_by_reads() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "owner a", 5_000);
    let state = inspect(&mut con);
    assert_eq!(state.kind, "rwlock");
    let (mode, owner, left, token) = &state.holds[&id(1)];
    assert_eq!((mode.as_str(), owner.as_str(), *token), ("r", "owner a", 0));
    assert!(
        (4_000..=5_000).contains(left),
        "its lease is the key's TTL: {left}"
    );
    assert_eq!(state.holds.len(), 1);
    assert_eq!(key_type(&mut con, LOCK), "string", "inspect writes nothing");
    // The hold's own release takes it, without a clock or a conversion; another id does not.
    assert_eq!(release(&mut con, 2), (0, 0));
    assert_eq!(
        key_type(&mut con, LOCK),
        "hash",
        "a script that may write turns it first"
    );
    assert_eq!(hold_of(&mut con, 1).unwrap().token, 0);
    redis::cmd("DEL").arg(LOCK).exec(&mut con).unwrap();
    plain(&mut con, 1, "owner a", 5_000);
    assert_eq!(release(&mut con, 1), (1, 0));
    assert!(!exists(&mut con, LOCK));
}

#[test]
fn a_plain_read_hold_is_extended_as_a_plain_key_by_its_own_id_only() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "A", 1_000);
    assert_eq!(extend(&mut con, 1, 20_000), 1);
    assert_eq!(key_type(&mut con, LOCK), "string");
    assert!(
        pttl(&server, LOCK) > 19_000,
        "the key's TTL is the new lease"
    );
    // Another hold's extension finds no hold of its id (and reads the key as its hash).
    assert_eq!(extend(&mut con, 2, 20_000), 0);
    assert_eq!(hold_of(&mut con, 1).unwrap().owner, "A");
    assert_eq!(extend(&mut con, 1, 30_000), 1);
    assert!(pttl(&server, LOCK) > 29_000);
}

#[test]
fn a_second_reader_turns_a_plain_read_hold_into_the_hash_with_its_deadline() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "A", 8_000);
    let expires_before: i64 = redis::cmd("PEXPIRETIME").arg(LOCK).query(&mut con).unwrap();
    let (granted, token) = read(2, "B").lease(3_000).run(&mut con);
    assert_eq!(granted, 1);
    assert!(token > 0);
    assert_eq!(key_type(&mut con, LOCK), "hash");
    let a = hold_of(&mut con, 1).unwrap();
    assert_eq!((a.mode.as_str(), a.token, a.owner.as_str()), ("r", 0, "A"));
    // The plain key's expiry became the hold's deadline: its PTTL counted from the script's
    // TIME, which may have moved on since the script started (from which Redis counts PTTL),
    // so never sooner, and later only by how long a busy machine took to run the script.
    assert!(
        (expires_before..=expires_before + 100).contains(&a.deadline),
        "{expires_before} vs {}",
        a.deadline
    );
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(LOCK).query(&mut con).unwrap();
    assert_eq!(expires, a.deadline, "the key expires with its latest hold");
    assert_eq!(hold_of(&mut con, 2).unwrap().token, token);
    // Marked: a line may have come in beside the plain key, so a release looks at the line.
    assert_eq!(
        fields(&mut con).get("waiting").map(String::as_str),
        Some("1")
    );
}

#[test]
fn a_string_locks_waiter_leaving_never_marks_a_plain_read_hold() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "A", 60_000);
    // Two waiters of a Mutex of the same name in line (it waited before the read came).
    let until = server_ms(&mut con) + 10_000;
    redis::pipe()
        .cmd("ZADD")
        .arg(QUEUE)
        .arg(1)
        .arg("m1")
        .arg(2)
        .arg("m2")
        .cmd("ZADD")
        .arg(PLACES)
        .arg(until)
        .arg("m1")
        .arg(until)
        .arg("m2")
        .exec(&mut con)
        .unwrap();
    let left: i64 = lua(&[LOCK_LUA, QUEUE_LUA, include_str!("../src/wait/leave.lua")])
        .key(&[LOCK, QUEUE, PLACES, TICKETS][..])
        .arg("m1")
        .arg(CHANNEL)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(left, 1);
    let value: String = redis::cmd("GET").arg(LOCK).query(&mut con).unwrap();
    assert_eq!(value, format!("{} r A", id(1)), "no waiter's mark appended");
}

#[test]
fn a_writer_finds_a_plain_read_hold_and_waits_for_it_in_line() {
    let server = server();
    let mut con = raw(&server);
    let mut sub = listener(&server);
    plain(&mut con, 1, "A", 8_000);
    let (granted, wait) = write(2, "B").placed().run(&mut con);
    assert_eq!(granted, 0);
    assert!(
        (7_000..=8_000).contains(&wait),
        "until the read hold ends: {wait}"
    );
    assert_eq!(queue(&mut con), vec![w(2)]);
    assert_eq!(
        fields(&mut con).get("waiting").map(String::as_str),
        Some("1"),
        "turned into the hash, marked: the release wakes the writer"
    );
    assert_eq!(release(&mut con, 1), (1, 0));
    assert_eq!(published(&mut sub, &mut con), vec![w(2)]);
}

#[test]
fn a_plain_read_hold_asked_for_again_is_numbered_and_the_epoch_recorded() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "A", 8_000);
    let before = server_micros(&mut con);
    let (granted, token) = acquire_naming(&mut con, read(1, "A"), "conn-1").unwrap();
    check_keys(&mut con);
    assert_eq!(granted, 1);
    assert!(
        token >= before,
        "a new token, seeded from the clock: {token}"
    );
    let hold = hold_of(&mut con, 1).unwrap();
    assert_eq!((hold.token, hold.owner.as_str()), (token, "A"));
    let epoch: Option<i64> = redis::cmd("ZSCORE")
        .arg("{R}:epoch")
        .arg("conn-1")
        .query(&mut con)
        .unwrap();
    assert!(epoch.is_some(), "the connection's epoch is recorded");
    assert!(pttl(&server, "{R}:epoch") > 3_000_000);
    // Asked again, it keeps that token now.
    assert_eq!(read(1, "A").run(&mut con), (1, token));
    // A grant on a free lock records it too; epochs of another type are refused first.
    release(&mut con, 1);
    redis::cmd("DEL").arg("{R}:epoch").exec(&mut con).unwrap();
    acquire_naming(&mut con, read(3, "A"), "conn-2").unwrap();
    let names: i64 = redis::cmd("ZCARD")
        .arg("{R}:epoch")
        .query(&mut con)
        .unwrap();
    assert_eq!(names, 1);
    release(&mut con, 3);
    redis::cmd("DEL").arg("{R}:epoch").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg("{R}:epoch")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    assert_wrongtype(
        acquire_naming(&mut con, read(4, "A"), "conn-3"),
        "{R}:epoch",
    );
    assert!(
        !exists(&mut con, LOCK),
        "refused before anything was written"
    );
}

#[test]
fn a_string_that_is_no_read_hold_or_has_no_ttl_is_refused_and_left_alone() {
    let server = server();
    let mut con = raw(&server);
    // A read hold's form without a TTL is nobody's lease: no lock of holds.
    redis::cmd("SET")
        .arg(LOCK)
        .arg(format!("{} r A", id(1)))
        .exec(&mut con)
        .unwrap();
    assert_wrongtype(read(2, "B").try_run(&mut con), "R holds a string");
    assert_wrongtype(write(2, "B").placed().try_run(&mut con), "R holds a string");
    assert_wrongtype(try_extend(&mut con, 2, "1000"), "R holds a string");
    assert_wrongtype(try_inspect(&mut con), "R holds a string");
    assert_eq!(pttl(&server, LOCK), -1, "untouched");
    // A write hold is never kept as a plain key: 'w' is no read hold.
    redis::cmd("SET")
        .arg(LOCK)
        .arg(format!("{} w A", id(1)))
        .arg("PX")
        .arg(60_000)
        .exec(&mut con)
        .unwrap();
    assert_wrongtype(read(2, "B").try_run(&mut con), "R holds a string");
    assert_wrongtype(try_release(&mut con, 1), "R holds a string");
    assert_eq!(key_type(&mut con, LOCK), "string");
}

#[test]
fn the_string_locks_scripts_refuse_a_plain_read_hold_as_wrong_type() {
    let server = server();
    let mut con = raw(&server);
    plain(&mut con, 1, "A", 60_000);
    // The Mutex's acquire (owner, lease, whether to place), as in scripts.rs.
    let mutex_acquire = lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/acquire.lua"),
    ]);
    let refused: RedisResult<Value> = mutex_acquire
        .key(&[LOCK, FENCE, "{R}:epoch"][..])
        .arg(id(2))
        .arg(10_000)
        .invoke(&mut con);
    assert_wrongtype(refused, "R holds an RwLock's read hold");
    let mutex_inspect = lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        include_str!("../src/engine/string_lock/inspect.lua"),
    ]);
    let refused: RedisResult<Value> = mutex_inspect.key(&[LOCK, FENCE][..]).invoke(&mut con);
    assert_wrongtype(refused, "R holds an RwLock's read hold");
    assert_eq!(key_type(&mut con, LOCK), "string");
    assert!(pttl(&server, LOCK) > 59_000, "untouched");
}
