//! What a run of the CLI leaves on a server it did not start: the fencing counters of its
//! locks, the only keys of a lock that never expire. The demo and the benchmarks delete them
//! at their end, whether or not they got through (`run` keeps its lock's counter on purpose:
//! the next holder's token must be greater).

use redis_locks::Client;

use crate::exit::CliError;

/// Deletes the fencing counters of `locks` and their epochs.
///
/// # Errors
/// [`CliError::Unavailable`] when Redis refused or did not answer: the counters stay, and
/// the user should hear that the run left keys behind.
pub async fn delete_counters(client: &Client, locks: &[&str]) -> Result<(), CliError> {
    let mut connection = client.connection();
    for lock in locks {
        let mutex = client.mutex(lock)?;
        redis::cmd("DEL")
            .arg(mutex.keys().fence())
            .arg(mutex.keys().epoch())
            .query_async::<i64>(&mut connection)
            .await
            .map_err(|err| {
                CliError::Unavailable(format!(
                    "deleting the fencing counter {}: {err}",
                    mutex.keys().fence()
                ))
            })?;
    }
    Ok(())
}
