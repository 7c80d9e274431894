//! Replicated acquisition: a grant or renewal that counts only once the server's replicas
//! (or its append-only file) have it, asked with `WAIT` / `WAITAOF` right after the write, in
//! the same round trip and on the same connection.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};

/// How many copies a grant or renewal must reach before it counts (see
/// [`LeaseOptions::replication`](crate::LeaseOptions::replication)).
///
/// ```
/// use std::time::Duration;
/// use redis_locks::{LeaseOptions, Replication};
///
/// let options = LeaseOptions::default().replication(Replication::Wait {
///     replicas: 1,
///     timeout: Duration::from_millis(100),
/// });
/// assert!(options.get_replication().is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replication {
    /// `WAIT replicas timeout` after each grant and renewal: at least `replicas` replicas
    /// acknowledged the write within `timeout`.
    Wait {
        /// How many replicas must acknowledge (at least 1).
        replicas: u32,
        /// How long the server waits for them (at least 1 ms, under the client's response
        /// timeout and a third of the lease). Replicated requests have connections of their
        /// own, so the wait holds up no other lock of the client.
        timeout: Duration,
    },
    /// `WAITAOF local replicas timeout` (Redis 7.2+, Valkey): the write reached the
    /// append-only file on disk — of the master itself with `local`, and of at least
    /// `replicas` replicas — within `timeout`. A server without the command refuses it at
    /// once ([`Error::Unsupported`]); `local` needs `appendonly yes` on the master.
    WaitAof {
        /// Whether the master's own append-only file must have it (fsynced).
        local: bool,
        /// How many replicas' append-only files must have it.
        replicas: u32,
        /// How long the server waits (at least 1 ms, under the client's response timeout).
        /// A replica reports what its disk has about once a second: with `replicas` above
        /// 0, allow a second or more.
        timeout: Duration,
    },
}

/// What the server acknowledged for one write: replicas, and the master's own disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Acked {
    /// Replicas that acknowledged.
    pub(crate) replicas: u32,
    /// Whether the master's append-only file has it (`WAITAOF` only; `true` for `WAIT`).
    pub(crate) local: bool,
}

impl Replication {
    /// The server's timeout.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Replication::Wait { timeout, .. } | Replication::WaitAof { timeout, .. } => *timeout,
        }
    }

    /// How many replicas must acknowledge.
    pub(crate) fn replicas(&self) -> u32 {
        match self {
            Replication::Wait { replicas, .. } | Replication::WaitAof { replicas, .. } => *replicas,
        }
    }

    /// Checks the policy against the client's `response_timeout`.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a timeout under 1 ms (`WAIT 0` would block for ever) or
    /// not under the response timeout (the reply would be given up before the server
    /// answers); [`Error::InvalidReplication`] for a `WAIT` of no replica or a `WAITAOF` of
    /// nothing.
    pub(crate) fn check(&self, response_timeout: Option<Duration>) -> Result<()> {
        let timeout = self.timeout();
        if timeout < Duration::from_millis(1) {
            return Err(Error::InvalidDuration {
                what: "replication timeout",
                value: timeout,
                reason: "at least 1 ms (WAIT 0 would block for ever)".into(),
            });
        }
        if let Some(response_timeout) = response_timeout
            && timeout >= response_timeout
        {
            return Err(Error::InvalidDuration {
                what: "replication timeout",
                value: timeout,
                reason: format!(
                    "under the client's response timeout ({response_timeout:?}), or the reply \
                     would be given up before the server's wait ends"
                ),
            });
        }
        match self {
            Replication::Wait { replicas: 0, .. } => Err(Error::InvalidReplication {
                reason: "WAIT for 0 replicas confirms nothing; ask for at least 1".into(),
            }),
            Replication::WaitAof {
                local: false,
                replicas: 0,
                ..
            } => Err(Error::InvalidReplication {
                reason: "WAITAOF of neither the master nor a replica confirms nothing".into(),
            }),
            _ => Ok(()),
        }
    }

    /// The command that asks for it.
    pub(crate) fn command(&self) -> redis::Cmd {
        let millis = self.timeout().as_millis().max(1) as u64;
        match self {
            Replication::Wait { replicas, .. } => {
                let mut cmd = redis::cmd("WAIT");
                cmd.arg(*replicas).arg(millis);
                cmd
            }
            Replication::WaitAof {
                local, replicas, ..
            } => {
                let mut cmd = redis::cmd("WAITAOF");
                cmd.arg(u8::from(*local)).arg(*replicas).arg(millis);
                cmd
            }
        }
    }

    /// The command's reply read as what was acknowledged.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the server does not know the command;
    /// [`Error::UnexpectedReply`] for a reply of another shape.
    pub(crate) fn acked(&self, reply: Value) -> Result<Acked> {
        let count = |value: &Value| match value {
            Value::Int(count) => u32::try_from(*count).ok(),
            _ => None,
        };
        if let Value::ServerError(err) = &reply {
            let command = match self {
                Replication::Wait { .. } => "WAIT",
                Replication::WaitAof { .. } => "WAITAOF",
            };
            if err.code() == "NOPERM" {
                // An ACL without the command: refused access, not a server without it.
                return Err(Error::Auth {
                    phase: crate::error::Phase::Extend,
                    source: redis::RedisError::from(err.clone()),
                });
            }
            return Err(Error::Unsupported {
                what: format!("{command} (replicated acquisition)"),
                detail: format!("{}: {}", err.code(), err.details().unwrap_or_default()),
            });
        }
        let acked = match (self, &reply) {
            (Replication::Wait { .. }, value) => count(value).map(|replicas| Acked {
                replicas,
                local: true,
            }),
            (Replication::WaitAof { .. }, Value::Array(parts)) if parts.len() == 2 => {
                match (count(&parts[0]), count(&parts[1])) {
                    (Some(local), Some(replicas)) => Some(Acked {
                        replicas,
                        local: local > 0,
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
        acked.ok_or_else(|| Error::UnexpectedReply {
            // Always asked after an owner-checked extension.
            phase: crate::error::Phase::Extend,
            detail: format!("a replication acknowledgement of another shape: {reply:?}"),
        })
    }

    /// Whether `acked` is enough.
    ///
    /// # Errors
    /// [`Error::NotReplicated`] for the lock `name` when it is not.
    pub(crate) fn enough(&self, name: &str, acked: Acked) -> Result<u32> {
        let (local_ok, local) = match self {
            Replication::WaitAof { local: true, .. } => (acked.local, acked.local),
            // Not asked for: not reported as missing.
            _ => (true, true),
        };
        if acked.replicas >= self.replicas() && local_ok {
            return Ok(acked.replicas);
        }
        Err(Error::NotReplicated {
            name: name.to_string(),
            wanted: self.replicas(),
            acked: acked.replicas,
            local,
        })
    }
}
