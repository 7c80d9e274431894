//! Connecting to the Redis a command names: one server, a cluster, a Sentinel-watched
//! master, or the independent servers of a Redlock (several `--redis`), of which a minority
//! may be down when the command starts.

use redis_locks::{Client, NODE_GRACE, NodeStart, Redlock};

use cli_support::endpoint::{Endpoint, Place};
use cli_support::exit::CliError;

/// A client per server of a Redlock; otherwise the one client of `endpoint`, which must be
/// reachable; each with the endpoint's settings (TLS, namespace). With several (a Redlock's
/// nodes), [`Redlock::connect_nodes_with`]: all at once, each client with no reconnect attempts, going on
/// once a majority has connected and the others have connected, failed, or had
/// [`NODE_GRACE`] more; each node down or late is named on stderr, and gets the holder's key
/// at a renewal once it answers.
///
/// # Errors
/// What connecting to a server said; for a Redlock with no majority reachable, the
/// `NoQuorum` error that names every node's state (exit 69), after a line on stderr that
/// says no majority could be reached.
pub async fn connect_all(endpoint: &Endpoint) -> Result<Vec<Client>, CliError> {
    let urls = match endpoint.place() {
        Place::Servers(urls) if urls.len() > 1 => urls,
        _ => return Ok(vec![endpoint.connect().await?]),
    };
    let count = urls.len();
    let options = endpoint.settings().apply(Redlock::node_options())?;
    let nodes = match Redlock::connect_nodes_with(urls, options).await {
        Ok(nodes) => nodes,
        Err(err @ redis_locks::Error::NoQuorum { .. }) => {
            eprintln!("redis-locks: no majority of the {count} nodes could be reached");
            return Err(err.into());
        }
        Err(err) => return Err(err.into()),
    };
    for (index, start) in nodes.starts.iter().enumerate() {
        let node = index + 1;
        match start {
            NodeStart::Down(err) => {
                let err = cli_support::redact(&err.to_string());
                eprintln!(
                    "redis-locks: node {node} of {count} is down ({err}); going on with the others"
                );
            }
            NodeStart::Late => eprintln!(
                "redis-locks: node {node} of {count} did not connect within {} ms of a majority; \
                 going on with the others",
                NODE_GRACE.as_millis()
            ),
            _ => {}
        }
    }
    Ok(nodes.clients)
}
