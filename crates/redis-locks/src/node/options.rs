//! How a client talks to its Redis server: connect and reply timeouts, reconnects, TLS, and
//! the key namespace.

use std::time::Duration;

/// How many renewals the watchdog sends in one round trip by default (see
/// [`ClientOptions::renewal_batch`]): 100,000 locks held with a 30 s lease are then renewed
/// in about 20 round trips a second rather than 10,000.
pub const DEFAULT_RENEWAL_BATCH: usize = 500;

/// How a [`Client`](crate::Client) talks to Redis: bounded connect and response times,
/// bounded reconnects, TLS settings for `rediss://` URLs, and the namespace its locks' keys
/// live under.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::ClientOptions;
///
/// let options = ClientOptions::default()
///     .connect_timeout(Duration::from_millis(500))
///     .response_timeout(Duration::from_secs(1))
///     .namespace("locks");
/// assert_eq!(options.get_response_timeout(), Duration::from_secs(1));
/// assert_eq!(options.get_namespace(), "locks");
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    connect_timeout: Duration,
    response_timeout: Duration,
    reconnect_attempts: usize,
    namespace: String,
    functions: bool,
    renewal_batch: usize,
    pub(super) tls: TlsSettings,
}

/// What a `rediss://` connection trusts and shows: PEM bytes, never printed.
#[derive(Clone, Default)]
pub(super) struct TlsSettings {
    /// The CAs to trust instead of the system's.
    pub(super) ca: Option<Vec<u8>>,
    /// This client's certificate chain and key, for mutual TLS.
    pub(super) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether a `rediss://` connection may skip checking the server's certificate.
    pub(super) insecure: bool,
}

impl TlsSettings {
    /// Whether anything was set that only a `rediss://` URL can use.
    pub(super) fn any(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Certificates and keys are never printed, only whether they are set.
        f.debug_struct("ClientOptions")
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("reconnect_attempts", &self.reconnect_attempts)
            .field("namespace", &self.namespace)
            .field("functions", &self.functions)
            .field("renewal_batch", &self.renewal_batch)
            .field("tls_ca", &self.tls.ca.is_some())
            .field("tls_client_cert", &self.tls.client.is_some())
            .field("tls_insecure", &self.tls.insecure)
            .finish()
    }
}

impl Default for ClientOptions {
    /// 2 s to connect, 2 s for each reply, 3 reconnect attempts, no namespace, scripts as
    /// Redis functions where the server allows them, the system's CAs for `rediss://`.
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
            reconnect_attempts: 3,
            namespace: String::new(),
            functions: true,
            renewal_batch: DEFAULT_RENEWAL_BATCH,
            tls: TlsSettings::default(),
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

    /// Puts every key and channel of this client's locks under `namespace`: the lock named
    /// `K` lives at `<namespace>:K` (see [`LockKeys::with_namespace`](crate::LockKeys::with_namespace)),
    /// so lock keys never meet the application's own keys, and an ACL can confine the
    /// library to `~<namespace>:*` and `~{<namespace>:*` (the crate README gives the whole
    /// ACL line). Empty (the default) means no namespace: the lock key is the name itself.
    ///
    /// Every process that contends for a lock must use the same namespace: two namespaces
    /// are two different locks. That is why the default stays empty — a process upgraded
    /// to a namespaced default would no longer see the locks its older peers hold. The
    /// namespace is a prefix, so namespaces that nest meet: the lock `b:c` under `a` is the
    /// lock `c` under `a:b`, and the lock `locks:x` without a namespace is the lock `x`
    /// under `locks`; give unrelated applications namespaces that are not prefixes of each
    /// other. The namespace is checked when the client connects: at most 128 bytes, no
    /// blanks or control characters, none of `{`, `}` (they would move the lock's cluster
    /// slot) or the ACL pattern characters `*`, `?`, `[`, `]`, `\`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Whether the crate's scripts run as Redis functions (`FCALL` of one function library,
    /// loaded once per server with `FUNCTION LOAD`) where the server allows them: the
    /// default. With `false`, every script runs with `EVALSHA`, as on a server that refuses
    /// functions (an ACL without `FUNCTION`/`FCALL`, a server older than Redis 7): the same
    /// Lua, the same replies, the shared parts of the scripts defined again at each call.
    /// The crate README ("How scripts reach the server") says more; a benchmark sets it to
    /// compare the two.
    ///
    /// ```
    /// use redis_locks::ClientOptions;
    ///
    /// let options = ClientOptions::default().functions(false);
    /// assert!(!options.get_functions());
    /// assert!(ClientOptions::default().get_functions());
    /// ```
    pub fn functions(mut self, functions: bool) -> Self {
        self.functions = functions;
        self
    }

    /// How many renewals the watchdog sends in one round trip, at most (default
    /// [`DEFAULT_RENEWAL_BATCH`]). The watchdog renews the leases due close together (within
    /// an eighth of a renewal period) in batches: one round trip per batch (one script call
    /// for `Mutex`es and `FairMutex`es, a pipeline of owner-checked calls for the others),
    /// each lock still checked for its owner and each lease still lost on its own. A batch
    /// holds up the requests behind it on the connection while the server runs it (about
    /// 2 µs a lock). `1` (or `0`) renews each lock by a request of its own, when it is due,
    /// as before batching. Renewals that wait for replicas, and those of a `Redlock` or a
    /// `MultiLock`, are always sent one lock at a time.
    ///
    /// ```
    /// use redis_locks::ClientOptions;
    /// let one_by_one = ClientOptions::default().renewal_batch(1);
    /// assert_eq!(one_by_one.get_renewal_batch(), 1);
    /// ```
    pub fn renewal_batch(mut self, locks: usize) -> Self {
        self.renewal_batch = locks.max(1);
        self
    }

    /// Trusts the CAs in `pem` (one or more PEM certificates) for `rediss://` servers,
    /// instead of the system's. Read the file yourself, or give `--tls-ca FILE` to the
    /// command-line tool.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use redis_locks::{Client, ClientOptions};
    ///
    /// let options = ClientOptions::default().tls_ca(std::fs::read("/etc/redis/ca.crt")?);
    /// let client = Client::connect_with("rediss://locks:secret@redis.internal:6380", options).await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.ca = Some(pem.into());
        self
    }

    /// Shows `cert_pem` (a certificate chain) and proves it with `key_pem` (its private key)
    /// to `rediss://` servers that ask for a client certificate (mutual TLS,
    /// `tls-auth-clients yes`). The key is kept in memory and never printed.
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Lets `rediss://` connections skip checking the server's certificate, on purpose:
    /// anyone who can reach the network path can then read and change the locks' traffic.
    /// A URL ending in `#insecure` is refused unless this is set; with this set, every
    /// `rediss://` URL of the client is used without the check.
    pub fn tls_insecure(mut self, insecure: bool) -> Self {
        self.tls.insecure = insecure;
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

    /// The namespace in force (empty: none).
    pub fn get_namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether scripts run as Redis functions where the server allows them (see
    /// [`ClientOptions::functions`]).
    pub fn get_functions(&self) -> bool {
        self.functions
    }

    /// The most renewals sent in one round trip (1: one request per renewal).
    pub fn get_renewal_batch(&self) -> usize {
        self.renewal_batch
    }

    /// Whether `rediss://` connections may skip the certificate check.
    pub fn get_tls_insecure(&self) -> bool {
        self.tls.insecure
    }
}
