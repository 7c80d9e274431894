//! The handle every lock of a process is made from: one Redis node (a server, a cluster, or a
//! Sentinel-watched master), the watchdog's renewal queue, and the local queues of this
//! process's waiters.

use std::sync::Arc;

use crate::error::Result;
use crate::lease::Renewals;
use crate::node::{ClientOptions, Node};
use crate::wait::{LocalQueues, WaitOn, WaitOptions};

/// A connection to Redis — one server ([`Client::connect`]), a Redis Cluster
/// ([`Client::connect_cluster`]) or the master a set of sentinels watches
/// ([`Client::connect_sentinel`]) — shared by every lock handle made from it. Cheap to clone.
///
/// Requests go over one multiplexed connection (redis-rs's `ConnectionManager`; on a cluster,
/// one per master), so a process needs one `Client` per Redis, not one per lock. Locks that
/// ask for replicated acquisition send their confirmations and renewals over a second one,
/// opened at the first such request, so a `WAIT` never delays the other locks. What follows
/// holds for all three; [`Client::connect_cluster`] and [`Client::connect_sentinel`] say what
/// differs.
///
/// # Behavior
/// - A dropped connection is re-opened in the background; requests made meanwhile fail with
///   [`Error::Connection`](crate::Error::Connection) rather than wait.
/// - No request is ever retried by this crate (a cluster client retries on its own, see
///   [`Client::connect_cluster`]): a failed release or extension has an unknown outcome, and
///   the lease bounds it.
/// - An acquire that failed with a connection error may still have been granted; its owner
///   token is released in the background. If the connection was replaced meanwhile, that
///   release can reach the server before the late acquire does; the lease then ends the lock.
/// - Waiters are woken through one extra subscriber connection, opened the first time a
///   lock must be waited for. If it drops, waiters poll (jittered) until it is back.
/// - A request that gets no reply within the response timeout fails with [`Error::Connection`](crate::Error::Connection).
/// - The client names its connection (`CLIENT SETNAME redis-locks:<random>`; not on a cluster)
///   the first time a lock is granted on it, so that fast acquisitions can trust the fencing counter (see the
///   crate README, "Fencing tokens"). The connection is the locks' own: for commands of your
///   application, open a connection of your own.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// # let url = server.url();
/// let client = redis_locks::Client::connect(&url).await?;
/// let mutex = client.mutex("jobs:nightly")?;
/// let guard = mutex.try_lock().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    node: Node,
    renewals: Renewals,
    local: LocalQueues,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.node.url())
            .field("options", self.options())
            .finish()
    }
}

/// What a [`Client`] has done so far: a diagnostic for benchmarks and tests ("requests per
/// acquisition").
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// let client = redis_locks::Client::connect(&server.url()).await?;
/// let mutex = client.mutex("stats")?;
/// // The first grant on a new connection also seeds the fencing counter (one more request).
/// mutex.try_lock().await?.release().await?;
/// let before = client.stats().requests;
/// mutex.try_lock().await?.release().await?;
/// assert_eq!(client.stats().requests - before, 2); // one attempt, one release
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Round trips sent to Redis: script calls, pipelines and commands on the main
    /// connection (a pipeline counts once), plus subscription commands and reconnects of the
    /// wake-up connection. Counted when the request is handed to the connection: a
    /// [`Redlock`](crate::Redlock) request dropped once the outcome was decided is counted even
    /// when the connection had not written it yet (redis-rs then never writes it).
    pub requests: u64,
}

impl Client {
    /// Connects to the Redis server at `url` (`redis://host:port/db`) with default options.
    ///
    /// Sends one `PING`, so that what is wrong is said now rather than at the first lock.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`](crate::Error::InvalidUrl) for a URL that cannot name a server (the error says what is
    /// wrong); [`Error::Connection`](crate::Error::Connection) when the server cannot be reached within the connect
    /// timeout and reconnect attempts; [`Error::Auth`](crate::Error::Auth) when it wants a password that was not
    /// given, or refuses the one given; [`Error::NotRedis`](crate::Error::NotRedis) when something else than Redis
    /// answers; [`Error::Redis`](crate::Error::Redis) when Redis answers `PING` with an error (`LOADING` while it
    /// loads its data after a restart, say: try again).
    pub async fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, ClientOptions::default()).await
    }

    /// Connects to the Redis server at `url` with the given options.
    ///
    /// # Errors
    /// As [`Client::connect`].
    ///
    /// # Cancel safety
    /// Dropping the future drops the half-made connection; nothing is left behind.
    pub async fn connect_with(url: &str, options: ClientOptions) -> Result<Client> {
        crate::key::check_namespace(options.get_namespace())?;
        Ok(Client::from_node(Node::connect(url, options).await?))
    }

    /// Connects to a Redis Cluster through `seeds`, the URLs of one or more of its nodes
    /// (`redis://host:port`); the rest of the cluster is found from them.
    ///
    /// Every primitive works on a cluster unchanged: all keys of one lock share one hash
    /// slot, so each script and pipeline of a lock goes to the master of that slot, and
    /// follows a `MOVED` or `ASK` there. Waiters are woken by sharded pub/sub (`SPUBLISH` /
    /// `SSUBSCRIBE`) on the slot's shard only.
    ///
    /// # Behavior
    /// - Each request, its redirections and reconnects included, is bounded by the
    ///   response timeout as a whole.
    /// - A request that met a broken connection may have run once already when its retry
    ///   runs. Every acquire, extend, downgrade and release gives the same answer when it
    ///   runs again for the same owner token: a second acquire by the holder is granted
    ///   again, and a second release says released (a release leaves a tombstone in the
    ///   lock's slot for 10 s, which the second run finds). A [`FencedKey`](crate::FencedKey)
    ///   write run twice writes the same value twice (an equal token writes); its reply
    ///   then names its own token as the highest seen before.
    /// - Fencing tokens are numbered by the acquire script on every grant (the fast path's
    ///   vouching needs one connection, and a cluster has one per shard), from the
    ///   shard's clock, so they grow across a failover.
    /// - A failover that promotes a replica which had not received the last grant can let
    ///   a second holder in (the lock's key is lost with the master): see the crate README,
    ///   "What a failover does to a lock". Fencing tokens never repeat across it.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`](crate::Error::InvalidUrl) for no seed or a URL that cannot name
    /// a server; [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a response
    /// timeout over 8 s (a release retried later than its 10 s tombstone could no longer
    /// tell that it had released); otherwise as [`Client::connect`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let cluster = test_support::RedisCluster::start(3, 0)?;
    /// # let seeds = cluster.seed_urls();
    /// use redis_locks::{Client, ClientOptions};
    ///
    /// let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    /// let client = Client::connect_cluster(&seeds, ClientOptions::default()).await?;
    /// let guard = client.mutex("jobs:nightly")?.try_lock().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(seeds: &[&str], options: ClientOptions) -> Result<Client> {
        crate::key::check_namespace(options.get_namespace())?;
        Ok(Client::from_node(
            Node::connect_cluster(seeds, options).await?,
        ))
    }

    /// Connects to the master that the sentinels at `sentinels` (one or more URLs) watch
    /// under `master`, and follows it across failovers.
    ///
    /// The user name, password, database and scheme (`rediss://` for TLS) of the first
    /// sentinel URL are used for the master too.
    ///
    /// # Behavior
    /// - The sentinels are asked again when one announces `+switch-master`, when a request
    ///   finds the master read-only or unreachable, and once a second; a new master gets a
    ///   new connection, and waiters resubscribe there. The request that found the old
    ///   master fails; the next one goes to the new master.
    /// - A lock granted by the old master that had not reached the replica promoted is lost
    ///   in the failover: set `min-replicas-to-write` on the master so that a master cut off
    ///   from its replicas grants nothing (see the crate README, "What a failover does to a
    ///   lock").
    ///
    /// # Errors
    /// [`Error::InvalidUrl`](crate::Error::InvalidUrl) for no sentinel, a bad URL or an
    /// empty master name; [`Error::Connection`](crate::Error::Connection) when no sentinel
    /// answers, none knows `master`, or the server named is not a master; otherwise as
    /// [`Client::connect`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let set = test_support::SentinelSet::start(1, 1)?;
    /// # let sentinels = set.sentinel_urls();
    /// use redis_locks::{Client, ClientOptions};
    ///
    /// let sentinels: Vec<&str> = sentinels.iter().map(String::as_str).collect();
    /// let client = Client::connect_sentinel(&sentinels, "mymaster", ClientOptions::default()).await?;
    /// let guard = client.mutex("jobs:nightly")?.try_lock().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel(
        sentinels: &[&str],
        master: &str,
        options: ClientOptions,
    ) -> Result<Client> {
        crate::key::check_namespace(options.get_namespace())?;
        Ok(Client::from_node(
            Node::connect_sentinel(sentinels, master, options).await?,
        ))
    }

    /// Where the keys of the lock named `name` are served: the shard master's `host:port`
    /// on a cluster, the current master's on Sentinel, the URL on one server.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a name no lock can have; a
    /// failed request.
    pub async fn serving(&self, name: &str) -> Result<String> {
        let keys = self.keys(name)?;
        self.inner.node.serving(keys.lock()).await
    }

    /// A client whose connection is opened by its first request rather than now: for the
    /// nodes of a [`Redlock`](crate::Redlock) that cannot be reached when the process starts
    /// (a minority may be down; the lock still works, and the node joins in once it is back).
    /// Nothing is sent: a wrong password or a server that is not Redis shows at the first
    /// request, as its error.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`](crate::Error::InvalidUrl) for a URL that cannot name a server.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(2)?;
    /// use redis_locks::{Client, ClientOptions, Redlock};
    ///
    /// // The third node is down when the process starts.
    /// let clients = [
    ///     Client::connect(&servers[0].url()).await?,
    ///     Client::connect(&servers[1].url()).await?,
    ///     Client::connect_lazy("redis://127.0.0.1:1", ClientOptions::default())?,
    /// ];
    /// let lock = Redlock::new(&clients, "jobs:nightly")?;
    /// let guard = lock.try_lock().await?; // two of three grant
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn connect_lazy(url: &str, options: ClientOptions) -> Result<Client> {
        crate::key::check_namespace(options.get_namespace())?;
        Ok(Client::from_node(Node::connect_lazy(url, options)?))
    }

    fn from_node(node: Node) -> Client {
        Client {
            inner: Arc::new(Inner {
                local: LocalQueues::new(node.address().clone()),
                renewals: Renewals::new(node.options().get_renewal_batch()),
                node,
            }),
        }
    }

    /// The keys of the lock named `name` under this client's namespace (see
    /// [`ClientOptions::namespace`]): where every primitive made from this client keeps it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let server = test_support::RedisServer::start()?;
    /// use redis_locks::{Client, ClientOptions};
    ///
    /// let options = ClientOptions::default().namespace("locks");
    /// let client = Client::connect_with(&server.url(), options).await?;
    /// assert_eq!(client.keys("jobs:nightly")?.lock(), "locks:jobs:nightly");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for a name no lock can have.
    pub fn keys(&self, name: &str) -> Result<crate::key::LockKeys> {
        crate::key::LockKeys::with_namespace(self.options().get_namespace(), name)
    }

    /// The options this client was made with.
    pub fn options(&self) -> &ClientOptions {
        self.inner.node.options()
    }

    /// What this client has done so far (requests sent).
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            requests: self.inner.node.requests(),
        }
    }

    /// The node every request of this client's locks goes through.
    pub(crate) fn node(&self) -> &Node {
        &self.inner.node
    }

    /// The watchdog's renewal queue of this client's leases.
    pub(crate) fn renewals(&self) -> &Renewals {
        &self.inner.renewals
    }

    /// Where this client's waiters wait, with `options`.
    pub(crate) fn wait_on<'a>(&'a self, options: &'a WaitOptions) -> WaitOn<'a> {
        WaitOn {
            node: &self.inner.node,
            local: &self.inner.local,
            options,
        }
    }
}
