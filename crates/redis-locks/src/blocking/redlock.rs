//! What a blocking [`Redlock`] adds to every handle: its nodes.

use super::runtime::Runtime;
use super::{Client, Redlock};
use crate::error::{Error, Result};
use crate::node::ClientOptions;
use crate::redlock::{NodeStart, RedlockOptions};

/// The clients of a blocking Redlock's nodes, in the order of the URLs, and how each came up:
/// what [`Redlock::connect_nodes`] returns. The clients share one runtime.
#[derive(Debug)]
#[non_exhaustive]
pub struct RedlockNodes {
    /// One client per URL, for [`Redlock::new`].
    pub clients: Vec<Client>,
    /// How each node came up, by the URLs' order.
    pub starts: Vec<NodeStart>,
}

impl Redlock {
    /// Connects to the nodes at `urls` at once, as
    /// [`Redlock::connect_nodes`](crate::Redlock::connect_nodes): a minority may be down.
    ///
    /// # Errors
    /// As [`Redlock::connect_nodes`](crate::Redlock::connect_nodes);
    /// [`Error::InsideRuntime`] inside a tokio runtime.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// use redis_locks::blocking::Redlock;
    ///
    /// let nodes = Redlock::connect_nodes(&urls)?;
    /// let lock = Redlock::new(&nodes.clients, "jobs:nightly")?;
    /// lock.lock()?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn connect_nodes(urls: &[impl AsRef<str>]) -> Result<RedlockNodes> {
        Redlock::connect_nodes_with(urls, crate::Redlock::node_options())
    }

    /// As [`Redlock::connect_nodes`], with `options` for every node's client.
    ///
    /// # Errors
    /// As [`Redlock::connect_nodes`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// use std::time::Duration;
    /// use redis_locks::blocking::Redlock;
    ///
    /// let options = redis_locks::Redlock::node_options().connect_timeout(Duration::from_millis(500));
    /// let nodes = Redlock::connect_nodes_with(&urls, options)?;
    /// # Ok(()) }
    /// ```
    pub fn connect_nodes_with(
        urls: &[impl AsRef<str>],
        options: ClientOptions,
    ) -> Result<RedlockNodes> {
        let runtime = Runtime::start("Redlock::connect_nodes")?;
        let nodes = runtime.run(
            "Redlock::connect_nodes",
            crate::Redlock::connect_nodes_with(urls, options),
        )?;
        Ok(RedlockNodes {
            clients: nodes
                .clients
                .into_iter()
                .map(|client| Client::from_async(client, runtime.clone()))
                .collect(),
            starts: nodes.starts,
        })
    }

    /// A Redlock handle for the lock `name` over the servers of `clients`, with default
    /// options, as [`Redlock::new`](crate::Redlock::new). It runs on the first client's
    /// runtime.
    ///
    /// # Errors
    /// As [`Redlock::new`](crate::Redlock::new).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// use redis_locks::blocking::{Client, Redlock};
    ///
    /// let clients = servers
    ///     .iter()
    ///     .map(|server| Client::connect(&server.url()))
    ///     .collect::<Result<Vec<_>, _>>()?;
    /// let lock = Redlock::new(&clients, "jobs:nightly")?;
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new(clients: &[Client], name: &str) -> Result<Redlock> {
        Redlock::with_options(clients, name, RedlockOptions::default())
    }

    /// A Redlock handle for the lock `name` with `options`, as
    /// [`Redlock::with_options`](crate::Redlock::with_options).
    ///
    /// # Errors
    /// As [`Redlock::with_options`](crate::Redlock::with_options).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// use std::time::Duration;
    /// use redis_locks::{RedlockOptions, blocking::Redlock};
    ///
    /// let nodes = Redlock::connect_nodes(&urls)?;
    /// let options = RedlockOptions::default().lease(Duration::from_secs(10));
    /// let lock = Redlock::with_options(&nodes.clients, "jobs:nightly", options)?;
    /// # Ok(()) }
    /// ```
    pub fn with_options(
        clients: &[Client],
        name: &str,
        options: RedlockOptions,
    ) -> Result<Redlock> {
        let asyncs: Vec<crate::Client> = clients.iter().map(|c| c.as_async().clone()).collect();
        let lock = crate::Redlock::with_options(&asyncs, name, options)?;
        let Some(first) = clients.first() else {
            return Err(Error::InvalidNodes {
                reason: "no nodes".to_string(),
            });
        };
        Ok(super::Handle::wrap(lock, first.runtime().clone()))
    }

    /// How many nodes must grant the lock: a majority.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// let nodes = redis_locks::blocking::Redlock::connect_nodes(&urls)?;
    /// let lock = redis_locks::blocking::Redlock::new(&nodes.clients, "jobs:nightly")?;
    /// assert_eq!(lock.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        self.as_async().quorum()
    }

    /// Waits until the requests this lock left running in the background are done (the
    /// releases of the nodes after the majority, say), as
    /// [`Redlock::settle`](crate::Redlock::settle): call it before the process exits.
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] inside a tokio runtime.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// let nodes = redis_locks::blocking::Redlock::connect_nodes(&urls)?;
    /// let lock = redis_locks::blocking::Redlock::new(&nodes.clients, "jobs:nightly")?;
    /// lock.lock()?.release()?;
    /// lock.settle()?; // every node's release is done: safe to exit
    /// # Ok(()) }
    /// ```
    pub fn settle(&self) -> Result<()> {
        self.run("Redlock::settle", async {
            self.as_async().settle().await;
            Ok(())
        })
    }
}
