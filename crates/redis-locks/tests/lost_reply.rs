//! A release whose reply is lost after the server ran it (a proxy between the client and a
//! real server cuts the connection instead of passing the reply on): the client asks again
//! on a new connection and reports `Released`, not `NotHeld` — for a `Mutex` and a permit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use redis_locks::Client;
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
                let server = TcpStream::connect(("127.0.0.1", upstream)).await.unwrap();
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
