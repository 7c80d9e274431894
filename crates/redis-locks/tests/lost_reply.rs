//! A release whose reply is lost after the server ran it (a proxy between the client and a
//! real server cuts the connection instead of passing the reply on): the client asks again
//! on a new connection and reports `Released`, not `NotHeld` — for a `Mutex`, a permit, and
//! the hold counts of an `RwLock` and a `ReentrantMutex` (with the holds the owner has left).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis_locks::{Client, Released, Result};
use test_support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to `upstream` that, once armed, drops the next reply it would pass to a client
/// and closes that client's connection (the server has run the request by then).
struct Proxy {
    port: u16,
    armed: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
}

impl Proxy {
    async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (cut, count) = (armed.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let cut = cut.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    loop {
                        let Ok(read) = server_read.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        if cut.swap(false, Ordering::SeqCst) {
                            // The reply is dropped and the client's connection closed.
                            let _ = client_write.shutdown().await;
                            return;
                        }
                        if client_write.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Proxy {
            port,
            armed,
            accepted,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

async fn exists(server: &RedisServer, key: &str) -> bool {
    let mut raw = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let found: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    found == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_is_asked_again_and_says_released() {
    let server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).await;
    let client = Client::connect(&proxy.url()).await.unwrap();

    let guard = client.mutex("jobs:nightly").unwrap().lock().await.unwrap();
    let before = proxy.accepted.load(Ordering::SeqCst);
    proxy.armed.store(true, Ordering::SeqCst);
    let released = tokio::time::timeout(Duration::from_secs(10), guard.release())
        .await
        .expect("the release ends");
    assert!(!proxy.armed.load(Ordering::SeqCst), "the proxy cut a reply");
    assert!(
        released.is_ok(),
        "a release whose reply was lost: {released:?}"
    );
    assert!(!exists(&server, "jobs:nightly").await, "the lock is gone");
    assert!(
        proxy.accepted.load(Ordering::SeqCst) > before,
        "asked again over a new connection"
    );

    // A semaphore's permit the same way.
    let permit = client
        .semaphore("slots", 2)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let released = tokio::time::timeout(Duration::from_secs(10), permit.release())
        .await
        .expect("the release ends");
    assert!(!proxy.armed.load(Ordering::SeqCst), "the proxy cut a reply");
    assert!(
        released.is_ok(),
        "a permit's release whose reply was lost: {released:?}"
    );
    assert!(!exists(&server, "slots").await, "the permit is back");
}

/// Cuts the reply of the next request through `proxy`, runs `release` (a guard's release) and
/// gives its outcome, checking that a reply was cut.
async fn with_reply_cut<F>(proxy: &Proxy, release: F) -> Result<Released>
where
    F: std::future::Future<Output = Result<Released>>,
{
    proxy.armed.store(true, Ordering::SeqCst);
    let released = tokio::time::timeout(Duration::from_secs(10), release)
        .await
        .expect("the release ends");
    assert!(!proxy.armed.load(Ordering::SeqCst), "the proxy cut a reply");
    released
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_counts_release_whose_reply_was_lost_says_how_many_holds_are_left() {
    let server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).await;
    let client = Client::connect(&proxy.url()).await.unwrap();

    // A ReentrantMutex held twice: the first release leaves one hold, the second none.
    let mutex = client.reentrant_mutex("ledger").unwrap();
    let (first, second) = (mutex.lock().await.unwrap(), mutex.lock().await.unwrap());
    let released = with_reply_cut(&proxy, second.release()).await;
    assert_eq!(released.unwrap(), Released::StillHeld { holds: 1 });
    let released = with_reply_cut(&proxy, first.release()).await;
    assert_eq!(released.unwrap(), Released::Freed);
    assert!(!exists(&server, "ledger").await, "the lock is free");

    // An RwLock: a write hold entered twice, and a read hold of the same owner.
    let rwlock = client.rwlock("catalog").unwrap();
    let (write, again) = (rwlock.write().await.unwrap(), rwlock.write().await.unwrap());
    let read = rwlock.read().await.unwrap();
    let released = with_reply_cut(&proxy, again.release()).await;
    assert_eq!(released.unwrap(), Released::StillHeld { holds: 1 });
    let released = with_reply_cut(&proxy, read.release()).await;
    assert_eq!(released.unwrap(), Released::Freed, "no read hold left");
    let released = with_reply_cut(&proxy, write.release()).await;
    assert_eq!(released.unwrap(), Released::Freed);
    assert!(!exists(&server, "catalog").await, "the lock is free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_released_by_a_flush_before_the_retry_is_not_called_released() {
    let server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).await;
    let client = Client::connect(&proxy.url()).await.unwrap();
    let mutex = client.reentrant_mutex("ledger").unwrap();
    let guard = mutex.lock().await.unwrap();
    // The data is lost (a flush, as a restart without persistence would): the counter with
    // it, so the retry cannot tell its first request from the loss and says NotHeld.
    let mut raw = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
    let released = with_reply_cut(&proxy, guard.release()).await;
    assert!(
        matches!(released, Err(redis_locks::Error::NotHeld { .. })),
        "a hold the server lost: {released:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_and_a_new_grant_before_the_retry_are_not_taken_for_the_first_release() {
    let mut server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).await;
    let client = Client::connect(&proxy.url()).await.unwrap();
    // No watchdog: nothing but the release looks at the lock before it.
    let fixed = redis_locks::LockOptions::default().lease(Duration::from_secs(30));
    let mutex = client.mutex_with("jobs:nightly", fixed).unwrap();
    let guard = mutex.lock().await.unwrap();
    // The server restarts and loses the lock; another client takes it and lets it go, so the
    // fencing counter is back above the guard's token.
    server.restart().unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    let theirs = other.mutex("jobs:nightly").unwrap().lock().await.unwrap();
    assert!(theirs.fencing_token() > guard.fencing_token());
    theirs.release().await.unwrap();
    // The guard's client has reconnected (through the proxy) before its release is cut.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while mutex.state().await.is_err() {
        assert!(std::time::Instant::now() < deadline, "reconnected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = with_reply_cut(&proxy, guard.release()).await;
    assert!(
        matches!(released, Err(redis_locks::Error::NotHeld { .. })),
        "a lock the restart lost: {released:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_already_lost_is_not_called_released_by_a_retry() {
    let server = RedisServer::start().unwrap();
    let proxy = Proxy::start(server.port()).await;
    let client = Client::connect(&proxy.url()).await.unwrap();
    let renewed = redis_locks::LockOptions::default()
        .lease(Duration::from_millis(600))
        .watchdog(true);
    let guard = client
        .mutex_with("jobs:nightly", renewed)
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Deleted by hand: the watchdog's next renewal finds it gone and `lost()` says so, long
    // before the lease could end.
    let mut raw = redis::Client::open(server.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("jobs:nightly")
        .query_async(&mut raw)
        .await
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the watchdog saw the loss");
    assert_eq!(lost, redis_locks::LostReason::Expired);
    let released = with_reply_cut(&proxy, guard.release()).await;
    assert!(
        matches!(released, Err(redis_locks::Error::NotHeld { .. })),
        "a lock lost before its release: {released:?}"
    );
}
