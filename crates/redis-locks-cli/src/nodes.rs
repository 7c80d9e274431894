//! Connecting to the Redis a command names: one server, or the independent servers of a
//! Redlock (several `--redis`), of which a minority may be down when the command starts.

use redis_locks::{Client, ClientOptions};

use cli_support::exit::CliError;

/// A client per URL. With one URL, it must be reachable. With several (a Redlock's nodes),
/// a server that cannot be reached now gets a client that connects on its first request, as
/// long as a majority was reached; any other failure (bad URL, refused password, not Redis)
/// is reported at once.
///
/// # Errors
/// What connecting to a server said; for a Redlock with no majority reachable, the first
/// unreachable server's error (exit 69).
pub async fn connect_all(urls: &[String]) -> Result<Vec<Client>, CliError> {
    if let [url] = urls {
        return Ok(vec![Client::connect(url).await?]);
    }
    let mut clients = Vec::with_capacity(urls.len());
    let mut down = Vec::new();
    for url in urls {
        match Client::connect(url).await {
            Ok(client) => clients.push(client),
            Err(err) if err.is_connection() => {
                clients.push(Client::connect_lazy(url, ClientOptions::default())?);
                down.push(err);
            }
            Err(err) => return Err(err.into()),
        }
    }
    let majority = urls.len() / 2 + 1;
    if urls.len() - down.len() < majority {
        return Err(down.remove(0).into());
    }
    for err in &down {
        eprintln!("redis-locks: a node is down ({err}); going on with the others");
    }
    Ok(clients)
}
