//! `redis-locks demo-worker`: one demo instance in its own OS process. The demo starts these
//! and reads their JSON lines from stdout.

use test_support::history::History;

use crate::contend::{contend, lottery, wait_until};
use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;

/// What a worker process does.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Role {
    /// One attempt at the lottery lock.
    Lottery,
    /// `--count` acquisitions of the contention lock.
    Contend,
}

/// Runs one worker and prints its result lines: `lottery {json}` or `interval {json}`…, then `done`.
pub async fn run(
    endpoint: &Endpoint,
    lock: &str,
    worker: String,
    role: Role,
    start_at_ms: u64,
    count: usize,
) -> Result<(), CliError> {
    let client = endpoint.connect().await?;
    wait_until(start_at_ms).await;
    match role {
        Role::Lottery => {
            let outcome = lottery(&client, lock, worker, endpoint.settings()).await?;
            println!("lottery {}", json(&outcome));
        }
        Role::Contend => {
            let history = History::default();
            contend(&client, lock, &worker, count, &history, endpoint.settings()).await?;
            for interval in history.intervals() {
                println!("interval {}", json(&interval));
            }
        }
    }
    println!("done");
    Ok(())
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data serializes")
}
