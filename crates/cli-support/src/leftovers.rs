//! What a run of the CLI leaves on a server it did not start: the fencing counters of its
//! locks, the only keys of a lock that never expire. The demo and the benchmarks delete them
//! at their end, whether or not they got through (`run` keeps its lock's counter on purpose:
//! the next holder's token must be greater).

use crate::endpoint::Endpoint;
use crate::exit::CliError;

/// Deletes the fencing counters of `locks` and their epochs (under the endpoint's
/// namespace), over connections of its own ([`Endpoint::sides`]): on every server of a
/// Redlock, on the master of each lock's slot in a cluster, on the current master under
/// Sentinel.
///
/// # Errors
/// [`CliError::Unavailable`] when Redis refused or did not answer: the counters stay, and
/// the user should hear that the run left keys behind.
pub async fn delete_counters(endpoint: &Endpoint, locks: &[&str]) -> Result<(), CliError> {
    let mut outcome = Ok(());
    for connection in endpoint.sides().await? {
        outcome = outcome.and(delete_on(endpoint, connection, locks).await);
    }
    outcome
}

async fn delete_on(
    endpoint: &Endpoint,
    mut connection: crate::endpoint::SideConnection,
    locks: &[&str],
) -> Result<(), CliError> {
    for lock in locks {
        let keys = endpoint.keys(lock)?;
        redis::cmd("DEL")
            .arg(keys.fence())
            .arg(keys.epoch())
            .query_async::<i64>(&mut connection)
            .await
            .map_err(|err| {
                CliError::Unavailable(format!(
                    "deleting the fencing counter {}: {err}",
                    keys.fence()
                ))
            })?;
    }
    Ok(())
}
