//! Bad input gets a clear, typed error: never a panic, a hang, or a lost lock.

mod common;

use std::time::Duration;

use common::{client, exists, pttl, raw, server};
use redis_locks::{Client, ClientOptions, Error, LockOptions};
use tokio::time::Instant;

#[tokio::test]
async fn empty_long_and_brace_broken_names_are_refused() {
    let server = server();
    let client = client(&server).await;
    for name in [
        "",
        "a{}b}",
        "x}y",
        "{jobs}",
        "jobs:fence",
        "{t}:x:wake",
        "a:queue",
        "a:places",
        "a:tickets",
        "doc:fenced",
        "job:epoch",
        "line\nstate           free",
        "nul\0",
        "esc\u{1b}[2J",
        "tab\t",
    ] {
        let err = client.mutex(name).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{name:?}: {err}");
    }
    let long = "n".repeat(10_000);
    let err = client.mutex(&long).unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }));
    // The message shows the length and a prefix, not 10 KB of name.
    let message = err.to_string();
    assert!(message.len() < 300, "{message}");
    assert!(message.contains("(10000 bytes)"), "{message}");
    // Names that are fine: a hash tag, a lone '{', unicode, exactly 1024 bytes.
    for name in [
        "{t}x",
        "a{b",
        "schloß",
        "{jobs}:lock",
        "fence",
        "a:fences",
        &"n".repeat(1024),
    ] {
        client.mutex(name).unwrap();
    }
}

#[tokio::test]
async fn zero_tiny_and_overflowing_leases_are_refused_before_anything_is_sent() {
    let server = server();
    let client = client(&server).await;
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        // All drift allowance (1% + 2 ms): it could never be proven held.
        Duration::from_millis(2),
        Duration::from_secs(200 * 365 * 24 * 3600),
        Duration::from_millis(i64::MAX as u64),
        Duration::MAX,
    ] {
        let err = client
            .mutex_with("lease", LockOptions::default().lease(lease))
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidDuration { what: "lease", .. }),
            "{lease:?}: {err}"
        );
        assert!(
            !exists(&server, "lease"),
            "nothing was written for {lease:?}"
        );
    }
    // The boundary values are accepted.
    let mutex = client
        .mutex_with(
            "lease",
            LockOptions::default().lease(redis_locks::MIN_LEASE),
        )
        .unwrap();
    // A 3 ms lease is short, but a loopback reply usually beats it; if not, the grant is
    // given back with a connection error ("too slow"), never handed out lost.
    match mutex.try_lock().await {
        Ok(guard) => drop(guard),
        Err(err) => assert!(err.is_connection(), "{err}"),
    }
    let guard = client.mutex("long").unwrap().lock().await.unwrap();
    let err = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::InvalidDuration { .. }), "{err}");
    guard
        .extend(redis_locks::MAX_LEASE)
        .await
        .expect("100 years fits in PX");
    assert!(pttl(&server, "long") > 1_000_000_000);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn an_overlong_retry_delay_is_refused_and_zero_still_pauses() {
    let server = server();
    let client = client(&server).await;
    let err = client
        .mutex_with(
            "r",
            LockOptions::default().retry_delay(Duration::from_secs(3601)),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidDuration {
                what: "retry delay",
                ..
            }
        ),
        "{err}"
    );
    // A zero delay is allowed: pauses never drop under 1 ms, so a waiter cannot spin.
    let zero = LockOptions::default()
        .retry_delay(Duration::ZERO)
        .lease(Duration::from_millis(300));
    let mutex = client.mutex_with("r", zero).unwrap();
    let _held = mutex.lock().await.unwrap();
    let started = Instant::now();
    let before = client.stats().requests;
    let err = mutex
        .lock_timeout(Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_held());
    assert!(started.elapsed() >= Duration::from_millis(100));
    // Woken by wake-ups, the waiter asks a few times; even polling, at most once a
    // millisecond. A spinning waiter would send thousands.
    let sent = client.stats().requests - before;
    assert!(sent <= 110, "{sent} requests in 100 ms");
}

#[tokio::test]
async fn a_lock_key_of_another_type_is_a_wrong_type_error_and_is_left_alone() {
    let server = server();
    let client = client(&server).await;
    redis::cmd("HSET")
        .arg("orders")
        .arg("k")
        .arg("v")
        .exec(&mut raw(&server))
        .unwrap();
    let mutex = client.mutex("orders").unwrap();
    for err in [
        mutex.try_lock().await.unwrap_err(),
        mutex.lock().await.unwrap_err(),
        mutex.state().await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::WrongType { key, .. } if key == "orders"),
            "{err}"
        );
    }
    let kind: String = redis::cmd("TYPE")
        .arg("orders")
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(kind, "hash", "the foreign key is untouched");
}

#[tokio::test]
async fn a_fencing_counter_of_another_type_is_a_wrong_type_error() {
    let server = server();
    let client = client(&server).await;
    let mut con = raw(&server);
    redis::cmd("SET")
        .arg("{jobs}:fence")
        .arg("hello")
        .exec(&mut con)
        .unwrap();
    let err = client.mutex("jobs").unwrap().try_lock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert!(!exists(&server, "jobs"), "no lock without a counter");
}

#[tokio::test]
async fn an_invalid_url_is_refused_saying_what_is_wrong() {
    for (url, says) in [
        ("", "empty"),
        ("http://example", "scheme"),
        ("redis://host:notaport", "port"),
        ("redis://host:70000", "1 to 65535"),
        ("redis://:pw@host:6380/x", "database"),
    ] {
        let err = Client::connect(url).await.unwrap_err();
        assert!(matches!(err, Error::InvalidUrl { .. }), "{url}: {err}");
        assert!(err.to_string().contains(says), "{url}: {err}");
        assert!(
            !err.to_string().contains("pw@"),
            "the password is hidden: {err}"
        );
    }
}

#[tokio::test]
async fn a_server_that_wants_a_password_is_an_auth_error_at_connect() {
    let locked = test_support::RedisServer::start_with_args(&["--requirepass", "s3cret"]).unwrap();
    let err = Client::connect(&locked.url()).await.unwrap_err();
    assert!(err.is_auth(), "{err}");
    let wrong = format!("redis://default:nope@127.0.0.1:{}", locked.port());
    let err = Client::connect(&wrong).await.unwrap_err();
    assert!(err.is_auth(), "{err}");
    assert!(!err.to_string().contains("nope"), "{err}");
    let right = format!("redis://default:s3cret@127.0.0.1:{}", locked.port());
    let client = Client::connect(&right).await.unwrap();
    client
        .mutex("ok")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_server_that_is_not_redis_is_said_to_be_so() {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        }
    });
    let err = Client::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotRedis { .. }), "{err}");
}

#[tokio::test]
async fn an_unreachable_server_fails_in_bounded_time() {
    // A port where a server was and is no more: connection refused.
    let port = {
        let mut server = server();
        let port = server.port();
        server.kill();
        port
    };
    let options = ClientOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .reconnect_attempts(1);
    let started = Instant::now();
    let err = Client::connect_with(&format!("redis://127.0.0.1:{port}"), options)
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_paused_server_gives_a_connection_error_within_the_response_timeout() {
    let server = server();
    let client = client(&server).await; // response timeout 1 s
    let mutex = client.mutex("paused").unwrap();
    server.pause();
    let started = Instant::now();
    let err = mutex.try_lock().await.unwrap_err();
    let waited = started.elapsed();
    server.resume();
    assert!(err.is_connection(), "{err}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test]
async fn a_server_restart_between_acquire_and_release_is_reported_not_hidden() {
    let mut server = server();
    let client = client(&server).await;
    let mutex = client.mutex("restart").unwrap();
    let guard = mutex.lock().await.unwrap();
    let token = guard.fencing_token();
    server.restart().unwrap();
    // The first request after the restart may meet the broken connection; either way the
    // release is not reported as a success: the lock died with the server's data.
    let err = guard.release().await.unwrap_err();
    assert!(
        err.is_connection() || matches!(err, Error::NotHeld { .. }),
        "{err}"
    );
    // The client reconnects, and the next holder's token is still greater.
    let mut next = None;
    for _ in 0..50 {
        match mutex.try_lock().await {
            Ok(guard) => {
                next = Some(guard);
                break;
            }
            Err(err) if err.is_connection() => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("{err}"),
        }
    }
    let next = next.expect("reconnected after the restart");
    assert!(next.fencing_token() > token);
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_too_long_for_the_clock_waits_without_panicking() {
    let server = server();
    let client = client(&server).await;
    let mutex = client.mutex("forever").unwrap();
    let holder = mutex.lock().await.unwrap();
    for wait in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        // Still waiting (not panicked, not given up) when the test stops it.
        let waiting = tokio::time::timeout(Duration::from_millis(100), mutex.lock_timeout(wait));
        assert!(waiting.await.is_err(), "{wait:?}");
        let fair = client.fair_mutex("forever-fair").unwrap();
        let _fair_holder = fair.lock().await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(100), fair.lock_timeout(wait));
        assert!(waiting.await.is_err(), "fair {wait:?}");
    }
    holder.release().await.unwrap();
}

#[tokio::test]
async fn a_highest_token_that_is_not_a_number_is_a_wrong_type_error_not_a_broken_connection() {
    let server = server();
    let client = client(&server).await;
    let report = client.fenced_key("report").unwrap();
    let _: () = redis::cmd("SET")
        .arg("{report}:fenced")
        .arg("not a token")
        .query(&mut raw(&server))
        .unwrap();
    match report.highest_token().await {
        Err(Error::WrongType { key, .. }) => assert_eq!(key, "{report}:fenced"),
        other => panic!("expected WrongType, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_busy_with_a_script_is_a_connection_error_that_passes() {
    let server = server();
    let client = client(&server).await;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut admin = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(50)
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    // A read-only script that spins for 1.5 s on the server's clock.
    let spin = redis::Script::new(
        "local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end \
         local deadline = now() + 1500000 while now() < deadline do end return 1",
    );
    let busy = tokio::spawn(async move { spin.invoke_async::<_, i64>(&mut admin).await });
    // Wait (bounded) until the server answers BUSY to everyone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ping = redis::cmd("PING").query::<String>(&mut raw(&server));
        if ping.is_err_and(|err| err.code() == Some("BUSY")) {
            break;
        }
        assert!(Instant::now() < deadline, "the server never said BUSY");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mutex = client.mutex("busy").unwrap();
    let err = mutex.try_lock().await.unwrap_err();
    assert!(err.is_connection(), "BUSY is retryable: {err}");
    assert!(err.to_string().contains("BUSY"), "{err}");
    assert_eq!(busy.await.unwrap().unwrap(), 1);
    // Once the script is done, the same lock is taken as usual, and nothing was left behind.
    let guard = mutex.try_lock().await.unwrap();
    assert!(pttl(&server, "busy") > 0);
    guard.release().await.unwrap();
    assert!(!exists(&server, "busy"));
}

#[tokio::test]
async fn a_server_that_lost_its_script_cache_gets_the_scripts_again_with_the_call() {
    let server = server();
    // The EVALSHA path (a server that refuses functions); functions survive SCRIPT FLUSH
    // (tests/functions.rs).
    let client = Client::connect_with(&server.url(), ClientOptions::default().functions(false))
        .await
        .unwrap();
    let mutex = client.mutex("flushed").unwrap();
    mutex.try_lock().await.unwrap().release().await.unwrap();
    // As after a restart or a failover: the server knows none of the scripts now.
    redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query::<()>(&mut raw(&server))
        .unwrap();
    let guard = mutex.try_lock().await.unwrap();
    guard.extend(Duration::from_secs(5)).await.unwrap();
    assert!(pttl(&server, "flushed") > 4000, "the extension ran");
    guard.release().await.unwrap();
    assert!(!exists(&server, "flushed"));
    // The scripts are cached again (loaded with their calls).
    let cached: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(redis::Script::new("return 1").get_hash())
        .query(&mut raw(&server))
        .unwrap();
    assert_eq!(cached, vec![0], "only the lock's scripts were loaded");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut raw(&server))
        .unwrap();
    let scripts = info
        .lines()
        .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap();
    assert!(scripts >= 2, "{info}");
}
