//! The companion-key rule checked against `CLUSTER KEYSLOT` of a real cluster-enabled server.

use rand::Rng;
use redis_locks::LockKeys;
use test_support::RedisServer;

fn slot(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(con)
        .unwrap()
}

#[test]
fn every_companion_key_hashes_to_the_lock_keys_slot() {
    let node = RedisServer::start_cluster_node().unwrap();
    let mut con = node.connection().unwrap();
    let mut names: Vec<String> = [
        "jobs:nightly",
        "{tenant-7}:cart",
        "a{b",
        "{",
        "x{}y",
        "{}{z}",
        "pre{tag}post",
        "schloß",
        "k",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Random names, braces included, so the rule is tried beyond the cases thought of.
    let mut rng = rand::rng();
    let alphabet = ['a', 'b', '{', '}', ':', '-', '1'];
    for _ in 0..300 {
        let len = rng.random_range(1..12);
        names.push(
            (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect(),
        );
    }
    let mut checked = 0;
    for name in names {
        let tag = redis_locks::key::hash_tag(&name);
        let only_a_tag = tag.is_some_and(|t| t.len() + 2 == name.len());
        let broken_brace = name.contains('}') && tag.is_none();
        let Ok(keys) = LockKeys::new(&name) else {
            // Refused names are exactly these (no random name ends in a companion suffix).
            assert!(only_a_tag || broken_brace, "{name:?} refused");
            continue;
        };
        assert!(!only_a_tag && !broken_brace, "{name:?} accepted");
        let lock_slot = slot(&mut con, keys.lock());
        for companion in [
            keys.fence().to_string(),
            keys.wake_channel().to_string(),
            keys.companion("queue"),
            keys.companion("places"),
            keys.companion("tickets"),
            keys.handover().to_string(),
            keys.epoch().to_string(),
        ] {
            assert_eq!(
                slot(&mut con, &companion),
                lock_slot,
                "{companion:?} is not in the slot of {name:?}"
            );
        }
        checked += 1;
    }
    assert!(checked > 100, "only {checked} names were usable");
}
