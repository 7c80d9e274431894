//! `redis-locks break NAME`: frees a lock on purpose ([`Client::break_lock`]): its fencing
//! counter goes past every token handed out, its holders are told `Broken` at their next
//! renewal, its waiters are woken. Asks first on a terminal, unless `--yes`; off a terminal
//! it needs `--yes`. On several `--redis` (a Redlock) every node is broken.

use std::io::{BufRead, IsTerminal, Write};

use redis_locks::{BrokenLock, Client};
use serde::Serialize;

use crate::status::{Found, inspect};
use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;

/// What `break --json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    name: &'a str,
    /// Whether a holder was there to break (on any node).
    broken: bool,
    /// `mutex` (a `Mutex` or `FairMutex`), `rwlock`, `reentrant`, `semaphore`; `null` when
    /// it was free.
    kind: Option<&'a str>,
    /// Who held it (owner tokens, or `"r owner"`/`"w owner"` per hold), from every node.
    holders: Vec<&'a str>,
    /// The highest fencing counter of the nodes now.
    fencing_counter: u64,
    /// How many nodes were broken (several for a Redlock).
    nodes: usize,
}

/// Breaks the lock `name`, after asking (unless `yes`); prints what it did, or one JSON
/// object with `json`. Exit 0 also when the lock was free (it says so).
///
/// # Errors
/// [`CliError::Usage`] off a terminal without `yes`; [`CliError::CheckFailed`] (exit 1) when
/// the answer was not yes (nothing done); what connecting and breaking say.
pub async fn run(endpoint: &Endpoint, name: &str, yes: bool, json: bool) -> Result<(), CliError> {
    endpoint.keys(name)?;
    let clients = crate::nodes::connect_all(endpoint).await?;
    // Who holds it, on the first node that says (a Redlock's nodes may disagree).
    let mut held = None;
    for client in &clients {
        held = describe(client, name).await?;
        if held.is_some() {
            break;
        }
    }
    if let Some(held) = &held
        && !yes
    {
        confirm(name, held)?;
    }
    let mut broken: Vec<BrokenLock> = Vec::with_capacity(clients.len());
    for client in &clients {
        broken.push(client.break_lock(name).await?);
    }
    let kind = broken.iter().find_map(|b| b.kind.as_deref());
    let mut holders: Vec<&str> = broken
        .iter()
        .flat_map(|b| b.holders.iter().map(String::as_str))
        .collect();
    holders.sort_unstable();
    holders.dedup();
    let counter = broken
        .iter()
        .map(|b| b.fencing_counter.get())
        .max()
        .unwrap_or(0);
    if json {
        let report = Report {
            name,
            broken: kind.is_some(),
            kind,
            holders,
            fencing_counter: counter,
            nodes: clients.len(),
        };
        println!("{}", serde_json::to_string(&report).expect("plain data"));
        return Ok(());
    }
    match kind {
        None => println!("{name} is not held: nothing to break (fencing counter {counter})"),
        Some(kind) => {
            println!("broke {name} ({kind}), held by {}", holders.join(", "));
            println!(
                "fencing counter now {counter}: a holder that goes on has its fenced writes \
                 refused once the next holder writes; it is told Broken at its next renewal; \
                 the waiters were woken"
            );
        }
    }
    Ok(())
}

/// Who holds `name`, in words, or `None` when nobody does.
async fn describe(client: &Client, name: &str) -> Result<Option<String>, CliError> {
    Ok(match inspect(client, name).await? {
        Found::Mutex(state) => state
            .holder
            .map(|holder| format!("a mutex held by {}", holder.owner)),
        Found::Holds(state) if !state.holds.is_empty() => Some(format!(
            "a {} with {} hold(s) of {}",
            state.kind.as_deref().unwrap_or("lock"),
            state.holds.len(),
            state
                .holds
                .iter()
                .map(|hold| format!("{} ({})", hold.owner, hold.mode))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Found::Semaphore(state) if !state.holders.is_empty() => Some(format!(
            "a semaphore with {} holder(s)",
            state.holders.len()
        )),
        Found::Holds(_) | Found::Semaphore(_) => None,
    })
}

/// Asks on the terminal whether to break `name` (`held` says who holds it).
fn confirm(name: &str, held: &str) -> Result<(), CliError> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(format!(
            "break asks before it frees {name} ({held}): give --yes when not on a terminal"
        )));
    }
    eprint!("Break {name}, {held}? Its holder loses it. [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|err| CliError::Usage(format!("reading the answer: {err}")))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(CliError::CheckFailed(format!("{name} not broken"))),
    }
}
