//! Connecting to the nodes of a [`Redlock`](crate::Redlock) the way a Redlock wants them: all
//! at once, each client without reconnect attempts, going on as soon as a majority is there.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, NodeVote, Phase, Result, Vote};
use crate::node::ClientOptions;

/// How long [`Redlock::connect_nodes`](crate::Redlock::connect_nodes) waits for the nodes
/// still connecting once a majority has connected: a node that has neither connected nor
/// failed by then is taken as [`NodeStart::Late`].
pub const NODE_GRACE: Duration = Duration::from_secs(1);

/// How one node came up in [`Redlock::connect_nodes`](crate::Redlock::connect_nodes) (its
/// example matches on it).
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeStart {
    /// Connected (and answered `PING`).
    Connected,
    /// Could not be reached (the connection was refused, say): its client connects on its
    /// first request.
    Down(Error),
    /// Had neither connected nor failed within [`NODE_GRACE`] of the majority (a paused or
    /// overloaded server, a host that does not answer): its client connects on its first
    /// request.
    Late,
}

/// The clients of a Redlock's nodes, in the order of the URLs, and how each came up: what
/// [`Redlock::connect_nodes`](crate::Redlock::connect_nodes) returns (see its example).
#[derive(Debug)]
#[non_exhaustive]
pub struct RedlockNodes {
    /// One client per URL, for [`Redlock::new`](crate::Redlock::new).
    pub clients: Vec<Client>,
    /// How each node came up, by the URLs' order.
    pub starts: Vec<NodeStart>,
}

/// Refuses, before anything connects, a list of URLs that cannot be a Redlock's nodes: none,
/// an even number, or one given twice ([`Redlock::new`](crate::Redlock::new) also finds one
/// server behind two URLs, by its `run_id`).
fn check_urls(urls: &[impl AsRef<str>]) -> Result<()> {
    super::check_count(urls.len())?;
    for (index, url) in urls.iter().enumerate() {
        if urls[..index]
            .iter()
            .any(|other| other.as_ref() == url.as_ref())
        {
            return Err(Error::InvalidNodes {
                reason: format!(
                    "the URL of node {} is given twice; a majority must be of independent servers",
                    index + 1
                ),
            });
        }
    }
    Ok(())
}

/// See [`Redlock::node_options`](crate::Redlock::node_options).
pub(crate) fn node_options() -> ClientOptions {
    ClientOptions::default().reconnect_attempts(0)
}

/// See [`Redlock::connect_nodes_with`](crate::Redlock::connect_nodes_with).
pub(crate) async fn connect_nodes(
    urls: &[impl AsRef<str>],
    options: ClientOptions,
) -> Result<RedlockNodes> {
    check_urls(urls)?;
    let majority = urls.len() / 2 + 1;
    let mut connecting = JoinSet::new();
    for (index, url) in urls.iter().enumerate() {
        let (url, options) = (url.as_ref().to_string(), options.clone());
        connecting.spawn(async move { (index, Client::connect_with(&url, options).await) });
    }
    let mut clients: Vec<Option<Client>> = urls.iter().map(|_| None).collect();
    let mut down: Vec<Option<Error>> = urls.iter().map(|_| None).collect();
    let (mut connected, mut failed) = (0, 0);
    let mut grace_ends: Option<Instant> = None;
    loop {
        let next = match grace_ends {
            None => connecting.join_next().await,
            Some(end) => match tokio::time::timeout_at(end, connecting.join_next()).await {
                Ok(next) => next,
                // The grace is over: what finished meanwhile still counts; the rest is left.
                Err(_) => connecting.try_join_next(),
            },
        };
        let Some(joined) = next else { break };
        let (index, outcome) = match joined {
            Ok(joined) => joined,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // Only aborted tasks end otherwise, and none is aborted before the loop ends.
            Err(_) => continue,
        };
        match outcome {
            Ok(client) => {
                clients[index] = Some(client);
                connected += 1;
                if connected >= majority && grace_ends.is_none() {
                    grace_ends = Some(Instant::now() + NODE_GRACE);
                }
            }
            Err(err) if err.is_connection() => {
                down[index] = Some(err);
                failed += 1;
                if urls.len() - failed < majority {
                    return Err(no_majority(urls, &clients, down, majority));
                }
            }
            Err(err) => return Err(err),
        }
    }
    // Whatever is still connecting is late; dropping the set aborts it.
    drop(connecting);
    let mut nodes = RedlockNodes {
        clients: Vec::with_capacity(urls.len()),
        starts: Vec::with_capacity(urls.len()),
    };
    for ((url, client), down) in urls.iter().zip(clients).zip(down) {
        let (client, start) = match (client, down) {
            (Some(client), _) => (client, NodeStart::Connected),
            (None, Some(err)) => (
                Client::connect_lazy(url.as_ref(), options.clone())?,
                NodeStart::Down(err),
            ),
            (None, None) => (
                Client::connect_lazy(url.as_ref(), options.clone())?,
                NodeStart::Late,
            ),
        };
        nodes.clients.push(client);
        nodes.starts.push(start);
    }
    Ok(nodes)
}

/// The error of a start that can no longer reach a majority: every node's state, by the URLs'
/// order (connected, its error, or still connecting).
fn no_majority(
    urls: &[impl AsRef<str>],
    clients: &[Option<Client>],
    down: Vec<Option<Error>>,
    majority: usize,
) -> Error {
    let votes = urls
        .iter()
        .zip(clients)
        .zip(down)
        .map(|((url, client), down)| NodeVote {
            url: crate::node::redact(url.as_ref()),
            vote: match (client, down) {
                (Some(_), _) => Vote::Granted,
                (None, Some(err)) => Vote::Failed(Box::new(err)),
                (None, None) => Vote::Pending,
            },
        })
        .collect();
    Error::NoQuorum {
        name: String::new(),
        phase: Phase::Connect,
        needed: majority,
        votes,
    }
}
