//! `redis-locks status NAME`: who holds a lock, its fencing token and counter, its lease.

use redis_locks::Client;
use serde::Serialize;

use crate::exit::CliError;

/// What `status --json` prints.
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    held: bool,
    holder_fencing_token: Option<u64>,
    fencing_counter: Option<u64>,
    lease_remaining_ms: Option<u64>,
}

/// Prints the lock's state as a few lines, or one JSON object with `json`.
pub async fn run(url: &str, name: &str, json: bool) -> Result<(), CliError> {
    let client = Client::connect(url).await?;
    let state = client.mutex(name)?.state().await?;
    let holder = state.holder.as_ref();
    let status = Status {
        name,
        held: holder.is_some(),
        holder_fencing_token: holder.map(|h| h.fencing_token.get()),
        fencing_counter: state.fencing_counter.map(|t| t.get()),
        lease_remaining_ms: holder
            .and_then(|h| h.lease_remaining)
            .map(|d| d.as_millis() as u64),
    };
    if json {
        println!("{}", serde_json::to_string(&status).expect("plain data"));
        return Ok(());
    }
    println!("lock            {name}");
    match holder {
        Some(holder) => {
            println!("state           held");
            println!("holder token    {}", holder.fencing_token);
            match holder.lease_remaining {
                Some(left) => println!("lease remaining {}", humantime::format_duration(left)),
                None => {
                    println!("lease remaining none: the key has no expiry (not set by redis-locks)")
                }
            }
        }
        None => println!("state           free"),
    }
    match state.fencing_counter {
        Some(counter) => println!("fencing counter {counter}"),
        None => println!("fencing counter none (never taken)"),
    }
    Ok(())
}
