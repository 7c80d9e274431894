//! ACL users and the key namespace: the least ACL line the crate README documents is enough
//! for every primitive (the contention checker runs as that user), every key and channel
//! stays under the namespace, and what a user lacks is said clearly, without its password.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis_locks::{Client, ClientOptions, Error, LockKeys};
use test_support::RedisServer;
use test_support::history::History;

/// The password of the test users: it must never show in any output.
const PASSWORD: &str = "s3cret-Passw0rd-never-shown";

/// The `ACL SETUSER` line of the crate README, with the test password.
fn documented_acl_line() -> String {
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("ACL SETUSER locks "))
        .expect("the crate README gives the least ACL line");
    line.replace(">PASSWORD", &format!(">{PASSWORD}"))
}

/// Runs `line` (an `ACL SETUSER ...`) on `server` as the default user.
fn set_user(server: &RedisServer, line: &str) {
    let mut command = redis::cmd("ACL");
    for word in line.split_whitespace().skip(1) {
        command.arg(word);
    }
    // The error, not the line: the line holds the password.
    if let Err(err) = command.query::<()>(&mut common::raw(server)) {
        panic!("ACL SETUSER failed: {err}");
    }
}

/// A client of `user`, made on `server` with the documented least ACL line less `removed`
/// (for example `" -pexpireat"`).
async fn client_without(server: &RedisServer, user: &str, removed: &str) -> Client {
    let line = documented_acl_line().replace("ACL SETUSER locks ", &format!("ACL SETUSER {user} "));
    set_user(server, &(line + removed));
    Client::connect_with(&url_as(server, user), options())
        .await
        .unwrap()
}

/// Whether a reply is the text `text` (a bulk or a simple string).
fn is_text(value: &redis::Value, text: &str) -> bool {
    redis::from_redis_value::<String>(value.clone()).is_ok_and(|value| value == text)
}

fn url_as(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", server.port())
}

fn options() -> ClientOptions {
    ClientOptions::default()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
        .reconnect_attempts(1)
        .namespace("locks")
}

/// Every key on the server (as the default user).
fn all_keys(server: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut common::raw(server))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_runs_as_the_documented_least_privileged_user() {
    let server = common::server();
    set_user(&server, &documented_acl_line());
    let url = url_as(&server, "locks");
    let mut workers = Vec::new();
    let mut histories = Vec::new();
    for kind in [
        "mutex",
        "fair",
        "reentrant",
        "rwlock",
        "semaphore",
        "multilock",
    ] {
        // One history per lock: different locks may be held at once.
        let history = Arc::new(History::default());
        histories.push((kind, history.clone()));
        for worker in 0..2 {
            // A client per worker: several connections, each logged in as the user.
            let client = Client::connect_with(&url, options()).await.unwrap();
            workers.push(tokio::spawn(common::contend_as(
                client,
                kind.to_string(),
                format!("acl:{kind}"),
                format!("{kind}-{worker}"),
                6,
                history.clone(),
            )));
        }
    }
    for worker in workers {
        worker.await.unwrap();
    }
    for (kind, history) in histories {
        let report = history.check();
        assert!(report.is_ok(), "{kind}: {report}");
        assert_eq!(history.intervals().len(), 2 * 6, "{kind}");
    }

    // A fenced write and a replicated-acquisition-free inspect work too.
    let client = Client::connect_with(&url, options()).await.unwrap();
    let mutex = client.mutex("acl:inspect").unwrap();
    let guard = mutex.lock().await.unwrap();
    assert!(mutex.state().await.unwrap().holder.is_some());
    let fenced = client.fenced_key("acl:resource").unwrap();
    fenced
        .set(guard.fencing_token(), "value")
        .await
        .expect("a fenced write as the user");
    guard.release().await.unwrap();

    // No command the scripts run was refused, not even one they call with redis.pcall and
    // recover from (a fast path that falls back to its slow path on a refusal would run
    // slow for ever): the server logs every refusal inside a script with context "lua".
    let log: Vec<HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut common::raw(&server))
        .unwrap();
    let refused: Vec<String> = log
        .iter()
        .filter(|entry| entry.get("context").is_some_and(|c| is_text(c, "lua")))
        .map(|entry| format!("{:?}", entry.get("object")))
        .collect();
    assert!(refused.is_empty(), "refused inside scripts: {refused:?}");

    // Every key the locks left is under the namespace.
    let keys = all_keys(&server);
    assert!(!keys.is_empty());
    for key in &keys {
        assert!(
            key.starts_with("locks:") || key.starts_with("{locks:"),
            "{key} is outside the namespace"
        );
    }
}

#[tokio::test]
async fn the_namespace_keeps_lock_keys_off_application_keys() {
    let server = common::server();
    // The application's own key, named like a lock.
    let _: () = redis::cmd("SET")
        .arg("user:42")
        .arg("the application's data")
        .query(&mut common::raw(&server))
        .unwrap();
    let client = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    let guard = client.mutex("user:42").unwrap().try_lock().await.unwrap();
    let keys = LockKeys::with_namespace("locks", "user:42").unwrap();
    assert_eq!(client.keys("user:42").unwrap(), keys);
    let token: String = redis::cmd("GET")
        .arg(keys.lock())
        .query(&mut common::raw(&server))
        .unwrap();
    assert_eq!(token, guard.owner_token().as_str());
    let untouched: String = redis::cmd("GET")
        .arg("user:42")
        .query(&mut common::raw(&server))
        .unwrap();
    assert_eq!(untouched, "the application's data");
    guard.release().await.unwrap();

    // Two namespaces are two locks; the same namespace is one.
    let other = Client::connect_with(&server.url(), ClientOptions::default().namespace("other"))
        .await
        .unwrap();
    let held = client.mutex("job").unwrap().try_lock().await.unwrap();
    let elsewhere = other.mutex("job").unwrap().try_lock().await.unwrap();
    let same = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    assert!(
        same.mutex("job")
            .unwrap()
            .try_lock()
            .await
            .unwrap_err()
            .is_held()
    );
    held.release().await.unwrap();
    elsewhere.release().await.unwrap();

    // A namespace that would break the slot rule or an ACL pattern is refused at connect.
    for bad in ["lo{cks", "locks*", "a\nb"] {
        let refused =
            Client::connect_with(&server.url(), ClientOptions::default().namespace(bad)).await;
        assert!(
            matches!(refused, Err(Error::InvalidName { .. })),
            "{bad:?}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn a_user_without_channels_is_refused_at_connect_and_told_which() {
    let server = common::server();
    let line = documented_acl_line()
        .replace(" &locks:* &{locks:*", "")
        .replace("ACL SETUSER locks ", "ACL SETUSER deaf ");
    set_user(&server, &line);
    let err = Client::connect_with(&url_as(&server, "deaf"), options())
        .await
        .unwrap_err();
    assert!(err.is_auth(), "{err:?}");
    let said = err.to_string();
    assert!(said.contains("&locks:*"), "{said}");
    assert!(!said.contains(PASSWORD) && !format!("{err:?}").contains(PASSWORD));
}

#[tokio::test]
async fn a_user_without_a_needed_command_gets_an_auth_error_naming_it() {
    let server = common::server();
    let client = client_without(&server, "noscript", " -evalsha -eval").await;
    // The fast path needs no script; a FairMutex's first attempt does.
    let err = client
        .fair_mutex("acl:needs-scripts")
        .unwrap()
        .try_lock()
        .await
        .unwrap_err();
    assert!(err.is_auth(), "{err:?}");
    let said = err.to_string().to_lowercase();
    assert!(said.contains("eval"), "{said}");
    assert!(!said.contains(&PASSWORD.to_lowercase()));
    // Nothing was left held.
    assert!(
        all_keys(&server)
            .iter()
            .all(|key| !key.contains("needs-scripts"))
    );
}

#[tokio::test]
async fn a_user_without_pexpireat_leaves_no_hold_without_a_ttl() {
    // The least ACL line of earlier versions, without `+pexpireat`: a fresh read or write
    // hold is written, then its expiry refused; the script deletes what it wrote (no lock
    // key may be left without a TTL), and the caller gets an auth error naming the command.
    let server = common::server();
    let client = client_without(&server, "noexpireat", " -pexpireat").await;
    let lock = client.rwlock("acl:needs-pexpireat").unwrap();
    for err in [
        lock.try_read().await.unwrap_err(),
        lock.try_write().await.unwrap_err(),
    ] {
        assert!(err.is_auth(), "{err:?}");
        assert!(
            err.to_string().to_lowercase().contains("pexpireat"),
            "{err}"
        );
    }
    let key = client
        .keys("acl:needs-pexpireat")
        .unwrap()
        .lock()
        .to_string();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&key)
        .query(&mut common::raw(&server))
        .unwrap();
    assert_eq!(exists, 0, "{key} is gone, not left without a TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_pexpire_leaves_no_permit_without_a_ttl() {
    // A semaphore's fast grant writes the holder, then sets the hash's expiry; refused, it
    // undoes the write (a new hash goes, another loses only the new holder), and the slow
    // path asks before it writes: an auth error naming the command.
    let server = common::server();
    let client = client_without(&server, "noexpire", " -pexpire").await;
    let name = "acl:needs-pexpire";
    let key = client.keys(name).unwrap().lock().to_string();
    let mut raw = common::raw(&server);
    let refused = || async {
        let err = client
            .semaphore(name, 2)
            .unwrap()
            .try_acquire()
            .await
            .unwrap_err();
        assert!(err.is_auth(), "{err:?}");
        assert!(err.to_string().contains("'pexpire'"), "{err}");
    };
    refused().await;
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut raw).unwrap();
    assert_eq!(exists, 0, "{key} is gone, not left without a TTL");
    // With a holder there already (one the default user's client took).
    let admin = Client::connect_with(&server.url(), options())
        .await
        .unwrap();
    let held = admin
        .semaphore(name, 2)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    let before: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut raw).unwrap();
    refused().await;
    let after: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut raw).unwrap();
    assert_eq!(after, before, "the refused holder's write is undone");
    assert!(common::pttl(&server, &key) > 0);
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_is_an_auth_error_that_never_shows_the_password() {
    let server = common::server();
    set_user(&server, &documented_acl_line());
    let url = format!("redis://locks:{PASSWORD}-wrong@127.0.0.1:{}", server.port());
    let err = Client::connect_with(&url, options()).await.unwrap_err();
    assert!(err.is_auth(), "{err:?}");
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
    // A client's Debug shows its URL without the password.
    let client = Client::connect_with(&url_as(&server, "locks"), options())
        .await
        .unwrap();
    let shown = format!("{client:?}");
    assert!(
        !shown.contains(PASSWORD) && shown.contains("***"),
        "{shown}"
    );
}
