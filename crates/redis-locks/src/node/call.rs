//! How a script call reaches the server: the one code path that chooses between a function
//! of the crate's library (`FCALL`, see [`library`](super::library)) and the script itself
//! (`EVALSHA`), and loads what the call needs, once per server however many first calls
//! race (see [`loading`](super::loading)).
//!
//! - **Functions first.** A node calls the script's function once the library is loaded.
//!   The first caller leads the load; callers that come meanwhile wait for it. On one server
//!   the leader sends `FUNCTION LOAD` (no `REPLACE`), `FUNCTION LIST` of the library's name
//!   with its code, and its own call as `EVAL` of the script's source (the crate's code,
//!   whatever the load did), in one round trip. The library is loaded then, or was there:
//!   with this build's code (a client of this build loaded it; nothing is compiled,
//!   replicated or written to the AOF again), or with other code, which one more round trip
//!   replaces (`REPLACE`). On a cluster the load goes alone to every master first
//!   (`FUNCTION LOAD REPLACE`: redis-rs routes `FUNCTION LOAD` to all masters), then the call.
//! - **Checked, never trusted.** A function is called only after the server said the load
//!   succeeded or listed this build's code under the name. A library of another version has
//!   other names and is never called.
//! - **Refused: `EVALSHA`.** A load the server refuses (no `FUNCTION` command, an ACL
//!   without it, a function name another library holds) makes this node use `EVALSHA` for
//!   good; so does [`ClientOptions::functions`](super::ClientOptions::functions)`(false)`.
//!   A script's first `EVALSHA` goes with its `SCRIPT LOAD`, single-flight too.
//! - **Lost: load again.** A call that finds the function or script missing (`FUNCTION
//!   FLUSH`, a restarted server without its data, a new shard) did not run: the next caller
//!   leads a new load and the call is sent again, once (on a cluster, a function still
//!   missing after the load goes as `EVALSHA`, which loads on the key's own shard). `SCRIPT
//!   FLUSH` leaves functions be.
//! - **Out of reach: no queue.** A leader whose round trip fails (a timeout, a broken
//!   connection) pauses loading for a moment: the callers waiting behind it go on with loads of
//!   their own (`SCRIPT LOAD` with their `EVALSHA`) instead of each leading in turn and waiting
//!   out its own timeout.

use redis::{Cmd, RedisError, RedisResult, ServerErrorKind, Value};

use super::backend::Backend;
use super::library::{Form, LIBRARY};
use super::loading::{Lead, Ready};
use super::{LockScript, Node, request_error};
use crate::error::{Error, Phase, Result};

/// The replies of one script call and the commands sent with it.
pub(super) struct Sent {
    /// The replies of the commands sent before the script, in order.
    pub(super) before: Vec<Value>,
    /// The script's reply; an error the server replied with is `Err`.
    pub(super) reply: RedisResult<Value>,
    /// The replies of the commands sent after the script, in order.
    pub(super) after: Vec<Value>,
    /// The replies of the load commands sent with the script, in order.
    load: Vec<Value>,
}

impl Node {
    /// Runs `call.script` (in the form this node's backend runs) over `call.backend`, after
    /// `call.before` and followed by `call.after` in the same round trip.
    pub(super) async fn call(&self, call: &Call<'_>) -> Result<Sent> {
        let cluster = self.inner.backend.cluster_form();
        let hash = call.script.variant(cluster).get_hash();
        if let Some(function) = LIBRARY.form(cluster).function(hash)
            && let Some(sent) = self.call_function(call, function).await?
        {
            return Ok(sent);
        }
        self.call_script(call).await
    }

    /// The call as `FCALL`, loading the library first where needed; `None` when this call
    /// must go with `EVALSHA` (the library refused, or not loaded on a cluster now).
    async fn call_function(&self, call: &Call<'_>, function: &str) -> Result<Option<Sent>> {
        let library = &self.inner.loads.library;
        let mut found_missing = false;
        loop {
            match library.ready().await {
                Ready::Without => return Ok(None),
                Ready::Call(epoch) => {
                    let fcall = script_command("FCALL", function, call.keys, call.args);
                    let sent = self.send(call, &[], &fcall).await?;
                    if fcall_refused(&sent.reply) {
                        // An ACL with FUNCTION LOAD but without FCALL: it did not run.
                        library.refuse();
                        return Ok(None);
                    }
                    if !is_missing(&sent.reply) {
                        return Ok(Some(sent));
                    }
                    if found_missing {
                        if self.inner.backend.one_connection() {
                            return Err(not_found(call.phase));
                        }
                        // A cluster whose master of this key the load did not reach (one
                        // the slot map does not list yet): EVALSHA loads the script on the
                        // key's own shard.
                        return Ok(None);
                    }
                    library.lost(epoch);
                    found_missing = true;
                }
                Ready::Lead(lead) => {
                    tracing::debug!(library = self.form().name(), "loading the function library");
                    if self.inner.backend.one_connection() {
                        // One server: the load and this call in one round trip, the call as
                        // EVAL of the source (the crate's code, whatever the load did).
                        let cluster = self.inner.backend.cluster_form();
                        let eval = script_command(
                            "EVAL",
                            call.script.source(cluster),
                            call.keys,
                            call.args,
                        );
                        let sent = match self.send(call, &self.library_check(), &eval).await {
                            Ok(sent) => sent,
                            Err(err) => {
                                // Unreachable or timed out: the callers behind this one go
                                // without the load for a moment instead of each waiting out
                                // its own timeout in turn at the gate.
                                lead.failed();
                                return Err(err);
                            }
                        };
                        self.settle(call.backend, lead, &sent.load).await;
                        return Ok(Some(sent));
                    }
                    // A cluster: every master, alone, first.
                    self.count_request();
                    match call.backend.command(&self.library_replace()).await {
                        Ok(_) => lead.loaded(),
                        Err(err) => {
                            failed(lead, &err);
                            return Ok(None);
                        }
                    }
                }
            }
        }
    }

    /// The call as `EVALSHA`, with the script's `SCRIPT LOAD` in the same round trip when
    /// this node has not loaded it yet (single-flight).
    async fn call_script(&self, call: &Call<'_>) -> Result<Sent> {
        let Call {
            phase,
            script,
            keys,
            args,
            ..
        } = *call;
        let cluster = self.inner.backend.cluster_form();
        let hash = script.variant(cluster).get_hash();
        let loading = self.inner.loads.script(hash);
        let evalsha = script_command("EVALSHA", hash, keys, args);
        let mut found_missing = false;
        loop {
            // On a cluster the load of the others reached their shards only: a call that
            // found the script missing loads it on its own.
            let ready = if found_missing && cluster {
                Ready::Lead(loading.lead().await)
            } else {
                loading.ready().await
            };
            match ready {
                Ready::Call(epoch) => {
                    let sent = self.send(call, &[], &evalsha).await?;
                    if !is_missing(&sent.reply) {
                        return Ok(sent);
                    }
                    if found_missing {
                        return Err(not_found(phase));
                    }
                    loading.lost(epoch);
                    found_missing = true;
                }
                Ready::Lead(lead) => {
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(script.source(cluster));
                    let mut sent = match self.send(call, &[load], &evalsha).await {
                        Ok(sent) => sent,
                        Err(err) => {
                            // As for the library: the callers behind this one do not each
                            // wait out a timeout in turn; they load with their own calls for
                            // a moment.
                            lead.failed();
                            return Err(err);
                        }
                    };
                    match sent.load.first() {
                        // The script ran unless it said NOSCRIPT; then the load's error
                        // says why. The next call loads again.
                        Some(Value::ServerError(err)) => {
                            if is_missing(&sent.reply) {
                                sent.reply = Err(err.clone().into());
                            }
                        }
                        _ => lead.loaded(),
                    }
                    return Ok(sent);
                }
                // A leader's round trip failed a moment ago (the server out of reach): each
                // call goes with a load of its own meanwhile, not in turn. Scripts are never
                // refused for good.
                Ready::Without => {
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(script.source(cluster));
                    let mut sent = self.send(call, &[load], &evalsha).await?;
                    if let Some(Value::ServerError(err)) = sent.load.first()
                        && is_missing(&sent.reply)
                    {
                        sent.reply = Err(err.clone().into());
                    }
                    return Ok(sent);
                }
            }
        }
    }

    /// The library in the form this node's backend runs.
    fn form(&self) -> &'static Form {
        LIBRARY.form(self.inner.backend.cluster_form())
    }

    /// `FUNCTION LOAD` of the library (no `REPLACE`), then `FUNCTION LIST` of its name with
    /// the code: the library loaded now, or the code already under its name, to compare.
    /// Nothing is compiled, replicated or written to the AOF when it is there already.
    fn library_check(&self) -> [Cmd; 2] {
        let form = self.form();
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg(form.text());
        let mut list = redis::cmd("FUNCTION");
        list.arg("LIST")
            .arg("LIBRARYNAME")
            .arg(form.name())
            .arg("WITHCODE");
        [load, list]
    }

    /// `FUNCTION LOAD REPLACE` of the library: whatever is under its name, it is this
    /// build's code after.
    fn library_replace(&self) -> Cmd {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(self.form().text());
        load
    }

    /// Ends `lead` by the replies to [`Node::library_check`]: loaded (now, or by a client of
    /// this build before), replaced when other code was under the name (one more round
    /// trip), refused, or failed for a moment.
    async fn settle(&self, backend: &Backend, lead: Lead<'_>, replies: &[Value]) {
        let (load, list) = (replies.first(), replies.get(1));
        let exists = match load {
            Some(Value::ServerError(err)) => {
                let err: RedisError = err.clone().into();
                if !library_exists(&err) {
                    return failed(lead, &err);
                }
                err
            }
            _ => return lead.loaded(),
        };
        if list.is_some_and(|list| listed_code(list) == Some(self.form().text().as_bytes())) {
            return lead.loaded();
        }
        // Other code under this build's name (or a user that may not list it): replace it.
        tracing::debug!(%exists, "replacing the function library");
        self.count_request();
        match backend.command(&self.library_replace()).await {
            Ok(_) => lead.loaded(),
            Err(err) => failed(lead, &err),
        }
    }

    /// Loads what a call of `scripts` needs (see [`Node::load_scripts`]), for calls of
    /// `phase` (what an error says it was).
    pub(super) async fn load(&self, phase: Phase, scripts: &[&LockScript]) -> Result<()> {
        let cluster = self.inner.backend.cluster_form();
        let form = LIBRARY.form(cluster);
        let all_in_library = scripts
            .iter()
            .all(|script| form.function(script.variant(cluster).get_hash()).is_some());
        if all_in_library {
            if let Ready::Lead(lead) = self.inner.loads.library.ready().await {
                let backend = &self.inner.backend;
                self.count_request();
                if backend.one_connection() {
                    let mut pipe = redis::pipe();
                    pipe.ignore_errors();
                    for command in self.library_check() {
                        pipe.add_command(command);
                    }
                    let replies = match backend.pipeline(&pipe).await {
                        Ok(replies) => replies,
                        Err(err) => {
                            // As for a lone call's load: no queue of timeouts behind it.
                            lead.failed();
                            return Err(request_error(phase, &[], err));
                        }
                    };
                    self.settle(backend, lead, &replies).await;
                } else {
                    match backend.command(&self.library_replace()).await {
                        Ok(_) => lead.loaded(),
                        Err(err) if is_server_reply(&err) => failed(lead, &err),
                        Err(err) => {
                            lead.failed();
                            return Err(request_error(phase, &[], err));
                        }
                    }
                }
            }
            if !self.inner.loads.library.is_refused() {
                return Ok(());
            }
        }
        if !self.inner.backend.one_connection() {
            // A keyless pipeline would reach one shard of many: each shard loads a script
            // with its first call instead.
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for script in scripts {
            pipe.cmd("SCRIPT").arg("LOAD").arg(script.source(cluster));
        }
        self.count_request();
        self.inner
            .backend
            .pipeline(&pipe)
            .await
            .map_err(|err| request_error(phase, &[], err))?;
        for script in scripts {
            self.inner
                .loads
                .script_loaded(script.variant(cluster).get_hash());
        }
        Ok(())
    }

    /// Sends `call`'s commands before, the `load` commands, `command` (the script's call)
    /// and `call`'s commands after, in one round trip: a lone call as a command.
    async fn send(&self, call: &Call<'_>, load: &[Cmd], command: &Cmd) -> Result<Sent> {
        let Call {
            backend,
            phase,
            keys,
            before,
            after,
            ..
        } = *call;
        self.count_request();
        if before.is_empty() && after.is_empty() && load.is_empty() {
            let reply = match backend.command(command).await {
                Ok(reply) => Ok(reply),
                Err(err) if is_server_reply(&err) => Err(err),
                Err(err) => return Err(request_error(phase, keys, err)),
            };
            return Ok(Sent {
                before: Vec::new(),
                reply,
                after: Vec::new(),
                load: Vec::new(),
            });
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for command in before.iter().chain(load) {
            pipe.add_command(command.clone());
        }
        pipe.add_command(command.clone());
        for command in after {
            pipe.add_command(command.clone());
        }
        let replies = backend
            .pipeline(&pipe)
            .await
            .map_err(|err| request_error(phase, keys, err))?;
        let expected = before.len() + load.len() + 1 + after.len();
        if replies.len() != expected {
            return Err(Error::UnexpectedReply {
                phase,
                detail: format!(
                    "a pipeline of {expected} commands got {} replies",
                    replies.len()
                ),
            });
        }
        let mut replies = replies.into_iter();
        let before = replies.by_ref().take(before.len()).collect();
        let load = replies.by_ref().take(load.len()).collect();
        let reply = match replies.next() {
            Some(Value::ServerError(err)) => Err(err.into()),
            reply => Ok(reply.unwrap_or(Value::Nil)),
        };
        Ok(Sent {
            before,
            reply,
            after: replies.collect(),
            load,
        })
    }
}

/// One script call: what runs, over which backend, with what around it.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    /// The backend it goes over (the node's, or its replicated requests' one).
    pub(super) backend: &'a Backend,
    pub(super) phase: Phase,
    pub(super) script: &'a LockScript,
    /// The keys it touches, the lock key first.
    pub(super) keys: &'a [&'a str],
    pub(super) args: &'a [&'a str],
    /// Commands sent before it in the same round trip.
    pub(super) before: &'a [Cmd],
    /// Commands sent after it in the same round trip.
    pub(super) after: &'a [Cmd],
}

impl<'a> Call<'a> {
    /// `script` with `keys` and `args` over `backend`, nothing sent around it.
    pub(super) fn on(
        backend: &'a Backend,
        phase: Phase,
        script: &'a LockScript,
        keys: &'a [&'a str],
        args: &'a [&'a str],
    ) -> Call<'a> {
        Call {
            backend,
            phase,
            script,
            keys,
            args,
            before: &[],
            after: &[],
        }
    }
}

/// `<name> <script> <numkeys> <keys...> <args...>` (`EVAL`, `EVALSHA`, `FCALL`), its
/// buffers sized once (every lock call passes here: growing them argument by argument cost
/// several reallocations a call).
pub(super) fn script_command(name: &str, script: &str, keys: &[&str], args: &[&str]) -> Cmd {
    let bytes = name.len()
        + script.len()
        + 20
        + keys
            .iter()
            .chain(args)
            .map(|part| part.len())
            .sum::<usize>();
    let mut command = Cmd::with_capacity(3 + keys.len() + args.len(), bytes);
    command
        .arg(name)
        .arg(script)
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    command
}

/// Ends `lead` after the server refused its load with `err`: for good, or for a moment when
/// the reason may pass.
fn failed(lead: Lead<'_>, err: &RedisError) {
    tracing::debug!(%err, "loading the function library");
    if is_refusal(err) {
        lead.refused();
    } else {
        lead.failed();
    }
}

/// Whether the server answered that it has no such script (`NOSCRIPT`) or function: the
/// call did not run.
pub(super) fn is_missing(reply: &RedisResult<Value>) -> bool {
    let Err(err) = reply else {
        return false;
    };
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
        || (err.code() == Some("ERR")
            && err.detail().is_some_and(|detail| {
                detail
                    .to_ascii_lowercase()
                    .starts_with("function not found")
            }))
}

/// Whether a `FUNCTION LOAD` failed because a library of that name is there already.
fn library_exists(err: &RedisError) -> bool {
    err.detail().is_some_and(|detail| {
        let detail = detail.to_ascii_lowercase();
        detail.starts_with("library") && detail.contains("already exists")
    })
}

/// The code of the one library in a `FUNCTION LIST ... WITHCODE` reply (RESP2 or RESP3).
fn listed_code(list: &Value) -> Option<&[u8]> {
    let Value::Array(libraries) = list else {
        return None;
    };
    let [library] = libraries.as_slice() else {
        return None;
    };
    let field = |name: &str, value: &Value| {
        matches!(value, Value::BulkString(bytes) if bytes == name.as_bytes())
            || matches!(value, Value::SimpleString(text) if text == name)
    };
    let code = match library {
        Value::Array(pairs) => pairs
            .chunks(2)
            .find(|pair| field("library_code", &pair[0]))
            .and_then(|pair| pair.get(1)),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(key, _)| field("library_code", key))
            .map(|(_, value)| value),
        _ => None,
    };
    match code? {
        Value::BulkString(bytes) => Some(bytes),
        Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        Value::SimpleString(text) => Some(text.as_bytes()),
        _ => None,
    }
}

/// Whether the server refused `FCALL` itself to this user (not a command inside the
/// function): the call did not run.
pub(super) fn fcall_refused(reply: &RedisResult<Value>) -> bool {
    let Err(err) = reply else {
        return false;
    };
    err.code() == Some("NOPERM")
        && err.detail().is_some_and(|detail| {
            detail
                .to_ascii_lowercase()
                .contains("run the 'fcall' command")
        })
}

/// Whether `err` is a reply of the server (not a broken connection or a timeout).
fn is_server_reply(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// Whether a load the server answered with `err` is refused for good: anything but the
/// server being busy, loading, out of memory, read-only or between masters, which pass.
fn is_refusal(err: &RedisError) -> bool {
    is_server_reply(err)
        && !matches!(
            err.code(),
            Some(
                "BUSY"
                    | "LOADING"
                    | "OOM"
                    | "READONLY"
                    | "MASTERDOWN"
                    | "TRYAGAIN"
                    | "CLUSTERDOWN"
                    | "MOVED"
                    | "ASK"
                    | "NOREPLICAS"
                    | "MISCONF"
            )
        )
}

pub(super) fn not_found(phase: Phase) -> Error {
    Error::UnexpectedReply {
        phase,
        detail: "the script was not found even after it was loaded".into(),
    }
}
