//! `redis-locks status NAME`: who holds a lock, its lease, whether anyone waits, the
//! fencing counter.

use redis_locks::{Client, LockKeys};
use serde::Serialize;

use cli_support::exit::CliError;

/// What `status --json` prints.
#[derive(Debug, Serialize)]
struct Status<'a> {
    name: &'a str,
    held: bool,
    holder_owner: Option<&'a str>,
    /// A waiter marked the lock during this holder's tenure (it may have gone since).
    waited_for: bool,
    /// Processes waiting for the lock right now (subscribers of its wake channel).
    waiting_processes: u64,
    fencing_counter: Option<u64>,
    lease_remaining_ms: Option<u64>,
}

/// Prints the lock's state as a few lines, or one JSON object with `json`.
pub async fn run(url: &str, name: &str, json: bool) -> Result<(), CliError> {
    // A bad name is bad usage, whether or not Redis can be reached.
    LockKeys::new(name)?;
    let client = Client::connect(url).await?;
    let state = client.mutex(name)?.state().await?;
    let holder = state.holder.as_ref();
    let status = Status {
        name,
        held: holder.is_some(),
        holder_owner: holder.map(|h| h.owner.as_str()),
        waited_for: holder.is_some_and(|h| h.waited_for),
        waiting_processes: state.listeners,
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
            println!("holder owner    {}", holder.owner);
            match holder.lease_remaining {
                Some(left) => println!("lease remaining {}", humantime::format_duration(left)),
                None => {
                    println!("lease remaining none: the key has no expiry (not set by redis-locks)")
                }
            }
            if holder.waited_for {
                println!(
                    "marked          yes: a waiter asked during this tenure (it may have gone \
                     since); the release will publish a wake-up"
                );
            }
        }
        None => println!("state           free"),
    }
    match state.listeners {
        0 => println!("waiting         none"),
        1 => println!("waiting         1 process listens for the release"),
        n => println!("waiting         {n} processes listen for the release"),
    }
    match state.fencing_counter {
        Some(counter) if holder.is_some() => {
            println!("fencing counter {counter} (the holder's token is at most this)")
        }
        Some(counter) => println!("fencing counter {counter}"),
        None => println!("fencing counter none (never taken)"),
    }
    Ok(())
}
