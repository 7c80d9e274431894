//! Connecting to the Redis a command names: one server, or the independent servers of a
//! Redlock (several `--redis`), of which a minority may be down when the command starts.

use std::time::Duration;

use redis_locks::{Client, ClientOptions};
use tokio::task::JoinSet;
use tokio::time::Instant;

use cli_support::exit::CliError;

/// How long the nodes still connecting are waited for once a majority has connected; the
/// ones that have not connected by then are started as down (see [`connect_all`]). A node
/// that refuses connections is known down at once; this only holds up the start when a
/// server accepts the connection and answers nothing (paused, overloaded) or a host does not
/// answer at all.
pub const STRAGGLER_GRACE: Duration = Duration::from_secs(1);

/// A client per URL. With one URL, it must be reachable. With several (a Redlock's nodes),
/// the nodes are connected to all at once, each client with no reconnect attempts (a request
/// that finds the connection broken fails, and the next one opens it again: the majority
/// decides, not one node's back-off). A node that refuses the connection is down at once; the
/// command goes on as soon as a majority has connected and the others have either connected,
/// failed, or had [`STRAGGLER_GRACE`] more (a paused or unreachable server answers nothing,
/// and a node that has not answered by then is taken as down, whatever it would have said). A
/// node down or late gets a client that connects on its first request: a request to it that
/// is refused fails at once, so the Redlock's background requests to it (the release of a
/// node that never got the acquire) end at once too, instead of after the node timeout. Such
/// a node gets the holder's key at a renewal once it answers (see `Redlock`'s renewals). Any
/// other failure within the grace (bad URL, refused password, not Redis) is reported at once.
///
/// # Errors
/// What connecting to a server said; for a Redlock with no majority reachable, the
/// connection error of the first node (in the order given) that could not be reached (exit
/// 69).
pub async fn connect_all(urls: &[String]) -> Result<Vec<Client>, CliError> {
    if let [url] = urls {
        return Ok(vec![Client::connect(url).await?]);
    }
    let majority = urls.len() / 2 + 1;
    let mut connecting = JoinSet::new();
    for (index, url) in urls.iter().enumerate() {
        let url = url.clone();
        connecting.spawn(async move { (index, Client::connect_with(&url, node_options()).await) });
    }
    let mut clients: Vec<Option<Client>> = urls.iter().map(|_| None).collect();
    let mut down = Vec::new();
    let mut connected = 0;
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
            Err(err) => {
                return Err(CliError::Unavailable(format!(
                    "connecting to a Redlock node failed: {err}"
                )));
            }
        };
        match outcome {
            Ok(client) => {
                clients[index] = Some(client);
                connected += 1;
                if connected >= majority && grace_ends.is_none() {
                    grace_ends = Some(Instant::now() + STRAGGLER_GRACE);
                }
            }
            Err(err) if err.is_connection() => {
                down.push((index, err));
                if urls.len() - down.len() < majority {
                    down.sort_by_key(|(index, _)| *index);
                    return Err(down.swap_remove(0).1.into());
                }
            }
            Err(err) => return Err(err.into()),
        }
    }
    // Whatever is still connecting now is a straggler; the JoinSet's drop aborts it.
    drop(connecting);
    down.sort_by_key(|(index, _)| *index);
    let count = urls.len();
    let mut all = Vec::with_capacity(count);
    for (index, client) in clients.into_iter().enumerate() {
        match client {
            Some(client) => all.push(client),
            None => {
                match down.iter().find(|(down, _)| *down == index) {
                    Some((_, err)) => eprintln!(
                        "redis-locks: node {} of {count} is down ({err}); going on with the others",
                        index + 1
                    ),
                    None => eprintln!(
                        "redis-locks: node {} of {count} did not connect within {} ms of a \
                         majority; going on with the others",
                        index + 1,
                        STRAGGLER_GRACE.as_millis()
                    ),
                }
                all.push(Client::connect_lazy(&urls[index], node_options())?);
            }
        }
    }
    Ok(all)
}

/// The options of a Redlock node's client: the library's defaults, with no reconnect attempts
/// (each request on a broken connection tries once to re-open it).
fn node_options() -> ClientOptions {
    ClientOptions::default().reconnect_attempts(0)
}
