//! Many script calls in one round trip: the watchdog's batched renewals.
//!
//! A batch is a pipeline of `EVALSHA`s, each call with its own keys and reply, so one call's
//! error is that call's alone. On a cluster a pipeline reaches one shard by the slot of its
//! first key, so the caller puts only keys of one slot in a batch ([`Node::slot_of`]).

use std::sync::Arc;

use redis::{FromRedisValue, ServerErrorKind, Value};

use super::{LockScript, Node, convert, request_error};
use crate::error::{Error, Phase, Result};

/// One script call of a batch: the script, its keys (the lock key first) and its ARGV.
pub(crate) struct ScriptCall<'a> {
    pub(crate) script: &'static LockScript,
    pub(crate) keys: Vec<&'a str>,
    pub(crate) args: Vec<String>,
}

impl Node {
    /// An id of this node, the same for every clone of it: a batch holds the calls of one
    /// node only.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// Which calls may share a batch on this node: every call on one server, the calls of
    /// one slot on a cluster (`key` is a lock key).
    pub(crate) fn slot_of(&self, key: &str) -> u16 {
        if self.is_cluster() {
            crate::key::slot(key)
        } else {
            0
        }
    }

    /// Runs `calls` in one pipeline, in one round trip (two when the server lacks one of
    /// the scripts: they are loaded and the calls that said `NOSCRIPT` sent again), and
    /// returns each call's reply or error, in order.
    ///
    /// # Errors
    /// The round trip failed (the connection, a timeout): the outcome of every call is
    /// unknown.
    pub(crate) async fn run_scripts<T: FromRedisValue>(
        &self,
        phase: Phase,
        calls: &[ScriptCall<'_>],
    ) -> Result<Vec<Result<T>>> {
        let mut replies: Vec<Option<Value>> = vec![None; calls.len()];
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        for retry in [false, true] {
            let mut loads: Vec<&LockScript> = Vec::new();
            for &i in &pending {
                let script = calls[i].script;
                let hash = self.hash_of(script);
                if (retry || !self.is_loaded(hash))
                    && !loads.iter().any(|s| self.hash_of(s) == hash)
                {
                    loads.push(script);
                }
            }
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for script in &loads {
                pipe.cmd("SCRIPT").arg("LOAD").arg(self.source_of(script));
            }
            for &i in &pending {
                let call = &calls[i];
                pipe.cmd("EVALSHA")
                    .arg(self.hash_of(call.script))
                    .arg(call.keys.len())
                    .arg(&call.keys)
                    .arg(&call.args);
            }
            self.count_request();
            let values = self
                .inner
                .backend
                .pipeline(&pipe)
                .await
                .map_err(|err| request_error(phase, &[], err))?;
            if values.len() != loads.len() + pending.len() {
                return Err(Error::UnexpectedReply {
                    phase,
                    detail: format!(
                        "{} replies to a pipeline of {} commands",
                        values.len(),
                        loads.len() + pending.len()
                    ),
                });
            }
            let mut values = values.into_iter();
            for script in &loads {
                if !matches!(values.next(), Some(Value::ServerError(_))) {
                    self.mark_loaded(&[script]);
                }
            }
            let mut again = Vec::new();
            for (i, value) in pending.iter().copied().zip(values) {
                match value {
                    Value::ServerError(err)
                        if !retry && err.kind() == Some(ServerErrorKind::NoScript) =>
                    {
                        self.unmark_loaded(self.hash_of(calls[i].script));
                        again.push(i);
                    }
                    value => replies[i] = Some(value),
                }
            }
            pending = again;
            if pending.is_empty() {
                break;
            }
        }
        Ok(calls
            .iter()
            .zip(replies)
            .map(|(call, reply)| match reply {
                Some(Value::ServerError(err)) => Err(request_error(phase, &call.keys, err.into())),
                Some(value) => convert(phase, value),
                None => Err(Error::UnexpectedReply {
                    phase,
                    detail: "the script was not found even after it was loaded".into(),
                }),
            })
            .collect())
    }
}
