//! How a client talks to its Redis server: connect and reply timeouts, reconnects.

use std::time::Duration;

/// How a [`Client`](crate::Client) talks to Redis: bounded connect and response times, bounded reconnects.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::ClientOptions;
///
/// let options = ClientOptions::default()
///     .connect_timeout(Duration::from_millis(500))
///     .response_timeout(Duration::from_secs(1));
/// assert_eq!(options.get_response_timeout(), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    connect_timeout: Duration,
    response_timeout: Duration,
    reconnect_attempts: usize,
}

impl Default for ClientOptions {
    /// 2 s to connect, 2 s for each reply, 3 reconnect attempts.
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            reconnect_attempts: 3,
        }
    }
}

impl ClientOptions {
    /// How long one attempt to open a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a request may wait for its reply before it fails with [`Error::Connection`](crate::Error::Connection).
    /// Keep it well below the leases you use: a lock call blocked longer than its lease is of
    /// no use.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How many times a broken connection is re-opened (with exponential backoff) before
    /// requests fail. With 0, there is one attempt and no back-off: the request that finds
    /// the connection broken fails, and the attempt it starts serves the next requests (which
    /// fail with its error if it failed, and then start another). A request to a server that
    /// refuses connections so fails at once, where the default waits out its attempts (about
    /// 1.1 s): what a [`Redlock`](crate::Redlock)'s nodes want, where the majority decides
    /// rather than one node's back-off. A node back from a restart answers again from the
    /// second request after it is back.
    pub fn reconnect_attempts(mut self, attempts: usize) -> Self {
        self.reconnect_attempts = attempts;
        self
    }

    /// The connect timeout in force.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The response timeout in force.
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The reconnect attempts in force.
    pub fn get_reconnect_attempts(&self) -> usize {
        self.reconnect_attempts
    }
}
