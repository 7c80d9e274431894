//! An in-process TCP proxy on loopback that delays everything it carries, in both
//! directions, by a latency that `check` changes while it runs (faults.md rows 7 and 17).
//!
//! (The `noxious` crate, a port of toxiproxy, was considered: it is a proxy *server* driven
//! through its own HTTP API. One latency knob needs neither, so this is a few lines of tokio.)
//!
//! Every chunk read is stamped with the instant it arrived and written out once the latency
//! has passed since then, so the delay is added to each chunk without serializing them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running proxy; dropping it closes the listener and every connection through it.
pub struct Proxy {
    port: u16,
    latency_us: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`
    /// (`host:port`).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(upstream: String) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let latency_us = Arc::new(AtomicU64::new(0));
        let latency = latency_us.clone();
        let accept = tokio::spawn(async move {
            // Owned here, so that aborting this task ends every connection too.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let latency = latency.clone();
                connections.spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let (client_read, client_write) = client.into_split();
                        let (server_read, server_write) = server.into_split();
                        tokio::join!(
                            pump(client_read, server_write, latency.clone()),
                            pump(server_read, client_write, latency),
                        );
                    }
                });
                // Reap the connections that ended.
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Proxy {
            port,
            latency_us,
            accept,
        })
    }

    /// The URL to give clients instead of the server's.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The knob of the one-way latency, in microseconds, for the task that injects it: what
    /// it stores applies to every chunk that arrives from then on.
    pub fn knob(&self) -> Arc<AtomicU64> {
        self.latency_us.clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Carries bytes from `from` to `to`, each chunk held back by the latency current when it
/// arrived; ends when either side closes.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, latency_us: Arc<AtomicU64>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due =
                        Instant::now() + Duration::from_micros(latency_us.load(Ordering::SeqCst));
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
