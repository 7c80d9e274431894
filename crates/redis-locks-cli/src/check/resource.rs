//! The resource the checked lock protects: an integer on a Redis server of its own (never
//! faulted), read and written by every holder as a read-modify-write, each access checked
//! against the holder's fencing token as a fenced store would (`read.lua`, `write.lua`).
//!
//! The log of accepted writes says how many increments the resource took; a lost update
//! (two holders that both read N and both wrote N + 1) leaves the value below that count.

use redis::Script;
use redis::aio::ConnectionManager;

use super::plan::Access;

/// The resource of one check, through one connection.
#[derive(Clone)]
pub struct Resource {
    con: ConnectionManager,
    value_key: String,
    log_key: String,
}

/// What the resource holds at the end of a check.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Tally {
    /// The integer the holders incremented.
    pub value: u64,
    /// How many writes it accepted.
    pub writes: u64,
    /// Accepted writes whose token is lower than an earlier accepted write's (a stale
    /// holder's write that a fenced store must refuse).
    pub stale_writes: u64,
}

impl Resource {
    /// The resource named `prefix` on the server behind `con`.
    pub fn new(con: ConnectionManager, prefix: &str) -> Resource {
        Resource {
            con,
            value_key: format!("{prefix}:value"),
            log_key: format!("{prefix}:writes"),
        }
    }

    /// Reads the value with `token` (0 without tokens); a `shared` read does not raise the
    /// highest token. `None` when the request failed.
    pub async fn read(&self, token: u64, shared: bool) -> (Access, u64) {
        let script = Script::new(include_str!("read.lua"));
        let reply: redis::RedisResult<(u8, u64)> = script
            .key(&self.value_key)
            .arg(token)
            .arg(if shared { "check" } else { "raise" })
            .invoke_async(&mut self.con.clone())
            .await;
        match reply {
            Ok((1, value)) => (Access::Accepted, value),
            Ok(_) => (Access::Refused, 0),
            Err(_) => (Access::Failed, 0),
        }
    }

    /// Writes `value` with `token`.
    pub async fn write(&self, token: u64, value: u64) -> Access {
        let script = Script::new(include_str!("write.lua"));
        let reply: redis::RedisResult<(u8, u64)> = script
            .key(&self.value_key)
            .key(&self.log_key)
            .arg(token)
            .arg(value)
            .invoke_async(&mut self.con.clone())
            .await;
        match reply {
            Ok((1, _)) => Access::Accepted,
            Ok(_) => Access::Refused,
            Err(_) => Access::Failed,
        }
    }

    /// The value and the log of accepted writes.
    pub async fn tally(&self) -> redis::RedisResult<Tally> {
        let mut con = self.con.clone();
        let value: Option<u64> = redis::cmd("HGET")
            .arg(&self.value_key)
            .arg("value")
            .query_async(&mut con)
            .await?;
        let log: Vec<u64> = redis::cmd("LRANGE")
            .arg(&self.log_key)
            .arg(0)
            .arg(-1)
            .query_async(&mut con)
            .await?;
        let mut highest = 0;
        let mut stale_writes = 0;
        for &token in &log {
            if token < highest {
                stale_writes += 1;
            }
            highest = highest.max(token);
        }
        Ok(Tally {
            value: value.unwrap_or(0),
            writes: log.len() as u64,
            stale_writes,
        })
    }
}
