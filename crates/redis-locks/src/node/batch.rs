//! Many script calls in one round trip: the watchdog's batched renewals.
//!
//! A batch is a pipeline of `FCALL`s (or `EVALSHA`s where the server refuses functions),
//! each call with its own keys and reply, so one call's error is that call's alone. On a cluster a pipeline reaches one shard by the slot of its
//! first key, so the caller puts only keys of one slot in a batch ([`Node::slot_of`]).

use std::sync::Arc;

use redis::{FromRedisValue, Value};

use super::call::{fcall_refused, is_missing, not_found, script_command};
use super::library::LIBRARY;
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

    /// Runs `calls` in one pipeline, in one round trip, and returns each call's reply or
    /// error, in order. The calls go as `FCALL`s of the crate's function library once it is
    /// loaded (the batch waits for the node's single-flight load, as a lone call does), else
    /// as `EVALSHA`s with the `SCRIPT LOAD` of each script this node has not loaded yet in
    /// the same pipeline. A call that found its function or script missing (the server lost
    /// it) did not run: it is sent once more after a new load, in a second round trip.
    ///
    /// # Errors
    /// The round trip failed (the connection, a timeout): the outcome of every call is
    /// unknown.
    pub(crate) async fn run_scripts<T: FromRedisValue>(
        &self,
        phase: Phase,
        calls: &[ScriptCall<'_>],
    ) -> Result<Vec<Result<T>>> {
        let cluster = self.inner.backend.cluster_form();
        let form = LIBRARY.form(cluster);
        let mut replies: Vec<Option<Value>> = vec![None; calls.len()];
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        for retry in [false, true] {
            let mut scripts: Vec<&LockScript> = Vec::new();
            for &i in &pending {
                let hash = calls[i].script.variant(cluster).get_hash();
                if !scripts
                    .iter()
                    .any(|s| s.variant(cluster).get_hash() == hash)
                {
                    scripts.push(calls[i].script);
                }
            }
            let library = &self.inner.loads.library;
            // On a cluster a function still missing after a load is on a master the load did
            // not reach: the second round goes as EVALSHA, which loads on the key's own shard
            // (as a lone call does).
            let evalsha = retry && !self.inner.backend.one_connection();
            if !library.is_refused() && !evalsha {
                self.load(phase, &scripts).await?;
            }
            let epoch = if evalsha { None } else { library.loaded() };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            // Without the library: the scripts this node has not loaded, loaded first.
            let mut loads: Vec<&str> = Vec::new();
            if epoch.is_none() {
                for script in &scripts {
                    let hash = script.variant(cluster).get_hash();
                    if retry || self.inner.loads.script(hash).loaded().is_none() {
                        pipe.cmd("SCRIPT").arg("LOAD").arg(script.source(cluster));
                        loads.push(hash);
                    }
                }
            }
            let mut functions = Vec::with_capacity(pending.len());
            for &i in &pending {
                let call = &calls[i];
                let hash = call.script.variant(cluster).get_hash();
                let args: Vec<&str> = call.args.iter().map(String::as_str).collect();
                let function = epoch.and(form.function(hash));
                pipe.add_command(match function {
                    Some(function) => script_command("FCALL", function, &call.keys, &args),
                    None => script_command("EVALSHA", hash, &call.keys, &args),
                });
                functions.push(function.is_some());
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
            for hash in &loads {
                if !matches!(values.next(), Some(Value::ServerError(_))) {
                    self.inner.loads.script_loaded(hash);
                }
            }
            let mut again = Vec::new();
            for ((i, value), function) in pending.iter().copied().zip(values).zip(functions) {
                // The reply as the checks read it: only an error matters to them.
                let reply = match &value {
                    Value::ServerError(err) => Err(err.clone().into()),
                    _ => Ok(Value::Nil),
                };
                if function && fcall_refused(&reply) {
                    // An ACL with FUNCTION LOAD but without FCALL: it did not run.
                    library.refuse();
                    again.push(i);
                } else if is_missing(&reply) && !retry {
                    let hash = calls[i].script.variant(cluster).get_hash();
                    match (function, epoch) {
                        (true, Some(epoch)) => library.lost(epoch),
                        _ => {
                            let loading = self.inner.loads.script(hash);
                            if let Some(epoch) = loading.loaded() {
                                loading.lost(epoch);
                            }
                        }
                    }
                    again.push(i);
                } else {
                    replies[i] = Some(value);
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
                None => Err(not_found(phase)),
            })
            .collect())
    }
}
