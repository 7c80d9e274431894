//! Property tests of everything a caller hands the library: lock names, URLs, leases, clock
//! drift, Redlock options. Whatever the input, the answer is a value or a typed error, never
//! a panic; and what is accepted keeps the rules the docs state.

use std::time::Duration;

use proptest::prelude::*;
use redis_locks::key::hash_tag;
use redis_locks::{
    Client, ClientOptions, ClockDrift, Error, LeaseOptions, LockKeys, MAX_LEASE, MIN_LEASE,
    RedlockOptions,
};

/// Names from the characters that matter to the key rules, and from anything at all.
fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z{}:\\\\ \\t\\n\\x00\\x1b-]{0,12}",
        any::<String>(),
        "[a-z]{1,4}(:fence|:epoch|:wake|:queue|:places|:tickets|:fenced)?",
        proptest::collection::vec(any::<char>(), 1000..1100).prop_map(|c| c.into_iter().collect()),
    ]
}

/// URLs near the valid ones, and anything at all.
fn urls() -> impl Strategy<Value = String> {
    prop_oneof![
        "(redis|rediss|http|unix|redis\\+unix)?(://)?[a-z0-9.:@/?=-]{0,20}",
        "redis://[a-z0-9.]{0,10}:[0-9]{0,7}(/[0-9a-z]{0,3})?",
        any::<String>(),
    ]
}

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000).prop_map(Duration::from_micros),
        (0u64..100_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_name_is_accepted_with_slot_safe_keys_or_refused_as_invalid(name in names()) {
        match LockKeys::new(&name) {
            Ok(keys) => {
                prop_assert!(!name.is_empty() && name.len() <= 1024);
                prop_assert!(!name.chars().any(char::is_control));
                // Every companion hashes to the lock key's slot: the same hash tag, or the
                // lock key itself as the tag.
                let slot = hash_tag(keys.lock()).unwrap_or(keys.lock());
                for key in [keys.fence(), keys.epoch(), keys.queue(), keys.places(), keys.tickets()] {
                    prop_assert_eq!(hash_tag(key), Some(slot), "{}", key);
                }
            }
            Err(err) => prop_assert!(matches!(err, Error::InvalidName { .. }), "{err:?}"),
        }
    }

    #[test]
    fn a_url_is_accepted_or_refused_as_invalid_without_a_request(url in urls()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            match Client::connect_lazy(&url, ClientOptions::default()) {
                Ok(_) => Ok(()),
                Err(Error::InvalidUrl { url: shown, .. }) => {
                    // The password never shows in the message.
                    prop_assert!(!shown.contains("secret-pw"));
                    Ok(())
                }
                Err(err) => Err(TestCaseError::fail(format!("{err:?}"))),
            }
        })?;
    }

    #[test]
    fn a_password_never_shows_in_a_url_error(host in "[a-z]{0,5}", port in "[0-9a-z]{0,7}") {
        let url = format!("redis://user:secret-pw@{host}:{port}/x");
        if let Err(err) = Client::connect_lazy(&url, ClientOptions::default()) {
            prop_assert!(!err.to_string().contains("secret-pw"), "{err}");
        }
    }

    #[test]
    fn a_lease_is_checked_against_its_bounds(lease in durations(), watchdog in any::<bool>()) {
        let options = LeaseOptions::default().lease(lease).watchdog(watchdog);
        let allowed = lease >= MIN_LEASE
            && lease <= MAX_LEASE
            && (!watchdog || lease >= Duration::from_millis(30));
        match options.check() {
            Ok(()) => prop_assert!(allowed, "{lease:?} accepted"),
            Err(err) => {
                prop_assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}");
                prop_assert!(!allowed || ClockDrift::default().allowance(lease) >= lease);
            }
        }
    }

    #[test]
    fn a_clock_drift_is_a_share_up_to_half_and_a_fixed_part_up_to_a_minute(
        rate in prop_oneof![any::<f64>(), -1.0f64..1.0],
        fixed in durations(),
        lease in durations(),
    ) {
        match ClockDrift::new(rate, fixed) {
            Ok(drift) => {
                prop_assert!((0.0..=0.5).contains(&rate) && fixed <= Duration::from_secs(60));
                // Never more than half the lease plus the fixed part (and no overflow).
                let allowance = drift.allowance(lease);
                prop_assert!(allowance <= (lease / 2).saturating_add(fixed).saturating_add(Duration::from_nanos(1)));
            }
            Err(err) => prop_assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}"),
        }
    }

    #[test]
    fn redlock_options_are_checked(lease in durations(), node_timeout in proptest::option::of(durations())) {
        let mut options = RedlockOptions::default().lease(lease);
        if let Some(timeout) = node_timeout {
            options = options.node_timeout(timeout);
        }
        match options.check() {
            Ok(()) => {
                let timeout = options.get_node_timeout();
                prop_assert!(!timeout.is_zero() && timeout < lease);
            }
            Err(err) => prop_assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}"),
        }
    }
}
