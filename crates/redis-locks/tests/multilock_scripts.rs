//! The MultiLock's scripts, called directly on a real server: every branch and reply of
//! their headers.

mod common;

use common::{
    FENCE_LUA, LOCK_LUA, QUEUE_LUA, lua, next_message, nothing_more, pttl, raw, server, subscribed,
};
use redis::Connection;

const LINES_LUA: &str = include_str!("../src/multilock/lines.lua");

/// Per name: the lock key, its fencing counter, its queue, places and ticket counter.
fn keys(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .flat_map(|name| {
            [
                name.to_string(),
                format!("{{{name}}}:fence"),
                format!("{{{name}}}:queue"),
                format!("{{{name}}}:places"),
                format!("{{{name}}}:tickets"),
            ]
        })
        .collect()
}

fn channels(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| format!("{{{name}}}:wake"))
        .collect()
}

/// An attempt that waits in line for `place_ms` when refused (0: try once).
fn acquire(
    con: &mut Connection,
    names: &[&str],
    owner: &str,
    place_ms: u64,
) -> redis::RedisResult<Vec<i64>> {
    lua(&[
        FENCE_LUA,
        LOCK_LUA,
        QUEUE_LUA,
        LINES_LUA,
        include_str!("../src/multilock/acquire.lua"),
    ])
    .key(keys(names))
    .arg(owner)
    .arg(10_000)
    .arg(place_ms)
    .arg(channels(names))
    .invoke(con)
}

fn release(con: &mut Connection, names: &[&str], owner: &str) -> redis::RedisResult<Vec<i64>> {
    lua(&[
        LOCK_LUA,
        QUEUE_LUA,
        LINES_LUA,
        include_str!("../src/multilock/release.lua"),
    ])
    .key(keys(names))
    .arg(owner)
    .arg(channels(names))
    .invoke(con)
}

fn extend(con: &mut Connection, names: &[&str], owner: &str) -> redis::RedisResult<Vec<i64>> {
    lua(&[
        LOCK_LUA,
        LINES_LUA,
        include_str!("../src/multilock/extend.lua"),
    ])
    .key(keys(names))
    .arg(owner)
    .arg(20_000)
    .invoke(con)
}

fn get(con: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

#[test]
fn all_are_taken_with_a_token_each_or_none() {
    let server = server();
    let mut con = raw(&server);
    let reply = acquire(&mut con, &["a", "b"], "me", 0).unwrap();
    assert_eq!((reply.len(), reply[0]), (3, 1));
    assert!(reply[1] > 1_000_000_000_000_000 && reply[2] > 1_000_000_000_000_000);
    assert!(pttl(&server, "a") > 9_000 && pttl(&server, "b") > 9_000);
    // Again by the same owner (a retried request): granted with new tokens.
    let again = acquire(&mut con, &["a", "b"], "me", 0).unwrap();
    assert!(again[0] == 1 && again[1] > reply[1] && again[2] > reply[2]);
    // Another owner over b and c: refused at b (the first), nothing taken, b not marked.
    let refused = acquire(&mut con, &["c", "b"], "other", 0).unwrap();
    assert_eq!(refused[..2], [0, 2]);
    assert!(refused[2] > 9_000, "b's lease: {refused:?}");
    assert_eq!(get(&mut con, "c"), None);
    assert_eq!(get(&mut con, "b").as_deref(), Some("me"));
    // A waiting attempt marks the lock that refused it.
    assert_eq!(
        acquire(&mut con, &["c", "b"], "other", 2_000).unwrap()[..2],
        [0, 2]
    );
    assert_eq!(get(&mut con, "b").as_deref(), Some("me+w"));
    // The holder's re-grant keeps the mark (its release still wakes the waiter).
    assert_eq!(acquire(&mut con, &["a", "b"], "me", 2_000).unwrap()[0], 1);
    assert_eq!(get(&mut con, "b").as_deref(), Some("me+w"));
}

#[test]
fn wrong_types_and_broken_counters_are_refused_with_nothing_written() {
    let server = server();
    let mut con = raw(&server);
    redis::cmd("LPUSH")
        .arg("b")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    let err = acquire(&mut con, &["a", "b"], "me", 2_000).unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    assert!(
        err.to_string().contains("b holds a list, not a lock"),
        "{err}"
    );
    for err in [
        release(&mut con, &["a", "b"], "me").unwrap_err(),
        extend(&mut con, &["a", "b"], "me").unwrap_err(),
    ] {
        assert_eq!(err.code(), Some("WRONGTYPE"), "{err}");
    }
    redis::cmd("DEL").arg("b").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg("{b}:fence")
        .arg("x")
        .exec(&mut con)
        .unwrap();
    let err = acquire(&mut con, &["a", "b"], "me", 2_000).unwrap_err();
    assert!(
        err.to_string().contains("is not a fencing counter"),
        "{err}"
    );
    assert_eq!(get(&mut con, "a"), None, "nothing written");
    let counter: Option<String> = get(&mut con, "{a}:fence");
    assert_eq!(counter, None, "no token taken");
}

#[test]
fn release_reports_each_lock_and_wakes_the_waiters_of_marked_ones() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, &["a", "b", "c"], "me", 0).unwrap()[0], 1);
    // a is marked by a waiter; b's lease ran out; c was taken by another owner since.
    assert_eq!(acquire(&mut con, &["a"], "waiter", 2_000).unwrap()[0], 0);
    redis::cmd("DEL").arg("b").exec(&mut con).unwrap();
    redis::cmd("SET")
        .arg("c")
        .arg("other")
        .exec(&mut con)
        .unwrap();
    // A Mutex waiter stands in a's line.
    redis::cmd("ZADD")
        .arg("{a}:queue")
        .arg(1)
        .arg("line-head")
        .exec(&mut con)
        .unwrap();
    let mut wakes = subscribed(&server, "{a}:wake");
    assert_eq!(
        release(&mut con, &["a", "b", "c"], "me").unwrap(),
        [1, 0, -1]
    );
    assert_eq!(next_message(&mut wakes).as_deref(), Some("line-head"));
    assert!(
        nothing_more(&server, &mut wakes, "{a}:wake"),
        "the line's head only"
    );
    // Marked with nobody in line: '*', every waiter of another kind looks again.
    assert_eq!(acquire(&mut con, &["e"], "me", 0).unwrap()[0], 1);
    redis::cmd("APPEND")
        .arg("e")
        .arg("+w")
        .exec(&mut con)
        .unwrap();
    let mut all = subscribed(&server, "{e}:wake");
    assert_eq!(release(&mut con, &["e"], "me").unwrap(), [1]);
    assert_eq!(next_message(&mut all).as_deref(), Some("*"));
    assert_eq!(get(&mut con, "a"), None);
    assert_eq!(get(&mut con, "c").as_deref(), Some("other"), "left alone");
    // Unmarked: a release publishes nothing.
    let mut quiet = subscribed(&server, "{d}:wake");
    assert_eq!(acquire(&mut con, &["d"], "me", 0).unwrap()[0], 1);
    assert_eq!(release(&mut con, &["d"], "me").unwrap(), [1]);
    assert!(nothing_more(&server, &mut quiet, "{d}:wake"));
    // A second release: each gone.
    assert_eq!(release(&mut con, &["d"], "me").unwrap(), [0]);
}

#[test]
fn extend_is_all_or_none_and_names_the_lock_it_lost() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, &["a", "b"], "me", 0).unwrap()[0], 1);
    assert_eq!(extend(&mut con, &["a", "b"], "me").unwrap(), [1]);
    assert!(pttl(&server, "a") > 19_000 && pttl(&server, "b") > 19_000);
    redis::cmd("PEXPIRE")
        .arg("a")
        .arg(5_000)
        .exec(&mut con)
        .unwrap();
    redis::cmd("SET")
        .arg("b")
        .arg("other")
        .exec(&mut con)
        .unwrap();
    assert_eq!(extend(&mut con, &["a", "b"], "me").unwrap(), [-1, 2]);
    assert!(pttl(&server, "a") <= 5_000, "nothing extended");
    redis::cmd("DEL").arg("a").exec(&mut con).unwrap();
    assert_eq!(extend(&mut con, &["a", "b"], "me").unwrap(), [0, 1]);
}

fn line(con: &mut Connection, name: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(format!("{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap()
}

#[test]
fn a_waiter_stands_in_the_line_of_the_lock_that_refused_it_and_is_served_first() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, &["b"], "holder", 0).unwrap()[0], 1);
    // Try once: refused at b, no line joined, b not marked.
    assert_eq!(
        acquire(&mut con, &["a", "b"], "w0", 0).unwrap()[..2],
        [0, 2]
    );
    assert!(line(&mut con, "b").is_empty());
    assert_eq!(get(&mut con, "b").as_deref(), Some("holder"));
    // Waiting: w0 stands in b's line (the lock that refused it, only), b is marked; w1 and
    // w2, each after b alone, behind it.
    assert_eq!(
        acquire(&mut con, &["a", "b"], "w0", 2_000).unwrap()[..2],
        [0, 2]
    );
    assert_eq!(acquire(&mut con, &["b"], "w1", 2_000).unwrap()[..2], [0, 1]);
    assert_eq!(acquire(&mut con, &["b"], "w2", 2_000).unwrap()[..2], [0, 1]);
    assert_eq!(line(&mut con, "b"), ["w0", "w1", "w2"]);
    assert!(
        line(&mut con, "a").is_empty(),
        "only the refusing lock's line"
    );
    assert_eq!(get(&mut con, "b").as_deref(), Some("holder+w"));
    // w0 gives up; released, b wakes the first in line, w1.
    assert_eq!(release(&mut con, &["a", "b"], "w0").unwrap(), [0, -1]);
    let mut wakes = subscribed(&server, "{b}:wake");
    assert_eq!(release(&mut con, &["b"], "holder").unwrap(), [1]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("w1"));
    // b is free, but w2 is not first: refused (-2), and w1 is prodded; a newcomer trying b
    // alone is refused the same way: no barging past the line.
    assert_eq!(acquire(&mut con, &["b"], "w2", 2_000).unwrap(), [0, 1, -2]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("w1"));
    assert_eq!(acquire(&mut con, &["b"], "new", 0).unwrap(), [0, 1, -2]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("w1"));
    // Several locks are taken whenever all are free at once, lines or not.
    let pair = acquire(&mut con, &["b", "c"], "pair", 0).unwrap();
    assert_eq!((pair[0], pair.len()), (1, 3));
    assert_eq!(release(&mut con, &["b", "c"], "pair").unwrap(), [1, 1]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("w1"));
    // w1 takes b and leaves the line; w2 is first now, and woken by w1's release.
    assert_eq!(acquire(&mut con, &["b"], "w1", 2_000).unwrap()[0], 1);
    assert_eq!(line(&mut con, "b"), ["w2"]);
    assert_eq!(release(&mut con, &["b"], "w1").unwrap(), [1]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("w2"));
}

#[test]
fn a_waiter_refused_elsewhere_moves_to_that_line_and_wakes_the_next_where_it_was_first() {
    let server = server();
    let mut con = raw(&server);
    assert_eq!(acquire(&mut con, &["a"], "holder-a", 0).unwrap()[0], 1);
    assert_eq!(
        acquire(&mut con, &["a", "b"], "w", 2_000).unwrap()[..2],
        [0, 1]
    );
    assert_eq!(
        acquire(&mut con, &["a"], "next", 2_000).unwrap()[..2],
        [0, 1]
    );
    assert_eq!(line(&mut con, "a"), ["w", "next"]);
    // a is released; before w comes back, b is taken: w is refused at b now.
    assert_eq!(release(&mut con, &["a"], "holder-a").unwrap(), [1]);
    assert_eq!(acquire(&mut con, &["b"], "holder-b", 0).unwrap()[0], 1);
    let mut wakes = subscribed(&server, "{a}:wake");
    assert_eq!(
        acquire(&mut con, &["a", "b"], "w", 2_000).unwrap()[..2],
        [0, 2]
    );
    // It left a's line, where it was first with a free: the next there is woken.
    assert_eq!(line(&mut con, "a"), ["next"]);
    assert_eq!(line(&mut con, "b"), ["w"]);
    assert_eq!(next_message(&mut wakes).as_deref(), Some("next"));
    // Giving up (a release by the waiter's token) leaves its line: "not held" for each.
    assert_eq!(release(&mut con, &["a", "b"], "w").unwrap(), [0, -1]);
    assert!(line(&mut con, "b").is_empty());
}
