//! The master a set of sentinels names, followed across failovers.
//!
//! redis-rs's async Sentinel client resolves the master once and keeps talking to that
//! address (its issue #1438). This one asks the sentinels again:
//! - when a sentinel announces `+switch-master` for the master's name (a task listens on one
//!   sentinel at a time, moving to the next when it drops);
//! - when a request finds the master read-only (`READONLY`: it was demoted), without the
//!   replicas its `min-replicas-to-write` asks for (`NOREPLICAS`), or unreachable;
//! - once a second while the client lives, in case an announcement was missed.
//!
//! Every sentinel is asked at once, and the address most of them name is taken (a sentinel on
//! the minority side of a partition may still name the old master); the connections to them
//! are kept between questions. A new address gets a new connection, and the wake-up connection is told to reconnect
//! ([`Master::switched`]), so waiters resubscribe on the new master. No request is retried:
//! the one that found the old master fails, and the next goes to the new one.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::{RedisResult, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::connect::{connect_error, explained, manager, no_connection_within, open};
use super::{ClientOptions, redact};
use crate::error::{Error, Phase, Result};

/// How often the sentinels are asked for the master even when none announced a switch.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// A reply slower than this is checked against the sentinels before it counts (see
/// [`Master::vouch`]).
const SLOW_REPLY: Duration = Duration::from_millis(250);

/// The current master of one Sentinel-watched name. Cheap to clone.
#[derive(Clone)]
pub(super) struct Master {
    shared: Arc<Shared>,
}

struct Shared {
    /// The sentinels, as URLs (their passwords are theirs).
    sentinels: Vec<String>,
    /// The connections to them.
    known: Sentinels,
    /// The master's name as the sentinels know it.
    name: String,
    /// The user name, password and database for the data node, from the first sentinel
    /// URL.
    auth: Auth,
    options: ClientOptions,
    current: RwLock<Current>,
    /// Bumped at every switch to a new address.
    generation: watch::Sender<u64>,
    /// One re-resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    /// When the sentinels last answered.
    answered: std::sync::Mutex<Option<Instant>>,
}

#[derive(Clone, Default)]
struct Auth {
    /// `rediss` when the sentinels are reached over TLS (the data nodes are then too).
    scheme: String,
    user: String,
    password: String,
    db: String,
}

#[derive(Clone)]
struct Current {
    /// `host:port`.
    address: String,
    client: redis::Client,
    connection: ConnectionManager,
}

impl Master {
    /// Asks `sentinels` for the master named `name` and connects to it.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a bad sentinel URL or none; [`Error::Connection`] when no
    /// sentinel answers or none knows the name; the errors of
    /// [`Client::connect`](crate::Client::connect) for the master itself.
    pub(super) async fn connect(
        sentinels: &[&str],
        name: &str,
        options: ClientOptions,
    ) -> Result<Master> {
        let Some(first) = sentinels.first() else {
            return Err(Error::InvalidUrl {
                url: String::new(),
                reason: "Sentinel needs at least one sentinel's URL".into(),
            });
        };
        if name.trim().is_empty() || name.chars().any(char::is_control) {
            return Err(Error::InvalidUrl {
                url: redact(first),
                reason: format!("{name:?} is not a master name"),
            });
        }
        for sentinel in sentinels {
            open(sentinel, &options)?;
        }
        let auth = auth_of(first);
        let known = Sentinels::default();
        let address = resolve(&known, sentinels, name, &options).await?;
        let (client, connection) = connect_to(&address, &auth, &options).await?;
        let shared = Arc::new(Shared {
            sentinels: sentinels.iter().map(|s| s.to_string()).collect(),
            known,
            name: name.to_string(),
            auth,
            options,
            current: RwLock::new(Current {
                address,
                client,
                connection,
            }),
            generation: watch::Sender::new(0),
            resolving: tokio::sync::Mutex::new(()),
            answered: std::sync::Mutex::new(None),
        });
        tokio::spawn(watch_sentinels(Arc::downgrade(&shared)));
        Ok(Master { shared })
    }

    fn current(&self) -> Current {
        self.shared
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current master's client, for the wake-up connection.
    pub(super) fn client(&self) -> redis::Client {
        self.current().client
    }

    /// The current master's address (`host:port`).
    pub(super) fn address(&self) -> String {
        self.current().address
    }

    /// Changes each time the master's address changes.
    pub(super) fn switched(&self) -> watch::Receiver<u64> {
        self.shared.generation.subscribe()
    }

    /// Sends one command to the current master.
    pub(super) async fn command(&self, command: &redis::Cmd) -> RedisResult<Value> {
        let (sent_to, generation, started) = self.sending();
        let reply = command.query_async(&mut sent_to.connection.clone()).await;
        self.after(&reply);
        self.vouch(reply, &sent_to.address, generation, started)
            .await
    }

    /// Sends a pipeline to the current master.
    pub(super) async fn pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        let (sent_to, generation, started) = self.sending();
        let reply = pipe
            .query_async::<Vec<Value>>(&mut sent_to.connection.clone())
            .await;
        match &reply {
            Ok(replies) if replies.iter().any(is_readonly_reply) => self.resolve_soon(),
            other => self.after(other),
        }
        self.vouch(reply, &sent_to.address, generation, started)
            .await
    }

    /// The master a request goes to, the generation it belongs to, and when it was sent.
    fn sending(&self) -> (Current, u64, Instant) {
        let generation = *self.shared.generation.borrow();
        (self.current(), generation, Instant::now())
    }

    /// A reply counts only if the master it came from was still the master when it came.
    ///
    /// A master frozen past the sentinels' patience (a zombie: paused, swapped out, cut off)
    /// runs the requests queued while it was frozen the moment it thaws — before it has
    /// counted its replicas again, so `min-replicas-to-write` does not stop them — while the
    /// sentinels have promoted another. A grant it so gives must not count. A reply that came
    /// after this client switched masters is void; so is a slow one (over [`SLOW_REPLY`])
    /// when the sentinels, asked again now, name another master. Void is
    /// [`Error::Connection`] for the caller: the outcome is unknown,
    /// and an acquire's grant is given back by owner token.
    async fn vouch<T>(
        &self,
        reply: RedisResult<T>,
        address: &str,
        generation: u64,
        started: Instant,
    ) -> RedisResult<T> {
        let value = reply?;
        let mut moved = *self.shared.generation.borrow() != generation;
        if !moved && started.elapsed() > SLOW_REPLY {
            // Boxed as `dyn Future`: asking the sentinels (connecting to them, over TLS
            // perhaps) is deep, and every request future would carry it inline — too deep
            // for the compiler to prove a caller's `tokio::spawn(mutex.lock())` `Send`.
            let follow: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> =
                Box::pin(self.shared.follow_since(started));
            follow.await;
            moved = *self.shared.generation.borrow() != generation || self.address() != address;
        }
        if moved {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the sentinels named another master while this request was out: its reply is void",
            )));
        }
        Ok(value)
    }

    /// Asks the sentinels again (in the background) when `reply` says the master may have
    /// changed.
    fn after<T>(&self, reply: &RedisResult<T>) {
        if let Err(err) = reply
            && (err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
                || err.is_timeout()
                || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                || err.code() == Some("NOREPLICAS"))
        {
            self.resolve_soon();
        }
    }

    fn resolve_soon(&self) {
        let shared = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            if let Some(shared) = shared.upgrade() {
                shared.follow().await;
            }
        });
    }
}

impl Shared {
    /// Asks the sentinels for the master and, when its address changed, connects to the new
    /// one and bumps the generation; nothing when another such question is under way.
    async fn follow(&self) {
        let Ok(_one) = self.resolving.try_lock() else {
            return;
        };
        self.resolve_and_switch().await;
    }

    /// As [`Shared::follow`], but waits for a question under way, and asks again unless one
    /// was answered after `since`.
    async fn follow_since(&self, since: Instant) {
        let _one = self.resolving.lock().await;
        let answered = *self
            .answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if answered.is_some_and(|at| at > since) {
            return;
        }
        self.resolve_and_switch().await;
    }

    /// The question itself, in the `resolving` turn.
    async fn resolve_and_switch(&self) {
        let sentinels: Vec<&str> = self.sentinels.iter().map(String::as_str).collect();
        let Ok(address) = resolve(&self.known, &sentinels, &self.name, &self.options).await else {
            return;
        };
        *self
            .answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        let known = self
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .address
            .clone();
        if address == known {
            return;
        }
        match connect_to(&address, &self.auth, &self.options).await {
            Ok((client, connection)) => {
                tracing::info!(master = %address, "sentinel named a new master; following it");
                *self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Current {
                    address,
                    client,
                    connection,
                };
                self.generation.send_modify(|generation| *generation += 1);
            }
            Err(err) => tracing::debug!(%err, "the new master did not answer yet"),
        }
    }
}

/// Listens for `+switch-master` on one sentinel at a time, and asks the sentinels once a
/// [`CHECK_EVERY`] anyway; ends when the master's client is gone.
async fn watch_sentinels(shared: Weak<Shared>) {
    let mut next = 0usize;
    loop {
        let Some((sentinel, options)) = shared.upgrade().map(|shared| {
            let url = shared.sentinels[next % shared.sentinels.len()].clone();
            (url, shared.options.clone())
        }) else {
            return;
        };
        next += 1;
        let pubsub = match super::tls::client(&sentinel, &options) {
            Ok(client) => {
                tokio::time::timeout(options.get_connect_timeout(), client.get_async_pubsub())
                    .await
                    .ok()
                    .and_then(|pubsub| pubsub.ok())
            }
            Err(_) => None,
        };
        let mut pubsub = match pubsub {
            Some(mut pubsub) => {
                let subscribed = tokio::time::timeout(
                    options.get_connect_timeout(),
                    pubsub.subscribe("+switch-master"),
                )
                .await;
                matches!(subscribed, Ok(Ok(()))).then_some(pubsub)
            }
            None => None,
        };
        loop {
            let message = async {
                match pubsub.as_mut() {
                    Some(pubsub) => pubsub.on_message().next().await.map(|_| ()),
                    None => None,
                }
            };
            let heard = tokio::select! {
                heard = message => heard,
                () = tokio::time::sleep(CHECK_EVERY) => Some(()),
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            shared.follow().await;
            if heard.is_none() {
                // The sentinel dropped (or none answered): try the next one after a pause.
                tokio::time::sleep(CHECK_EVERY).await;
                break;
            }
        }
    }
}

/// Connections to the sentinels, kept between questions (the sentinels are asked once a
/// second); one that failed is opened again at the next question.
#[derive(Default)]
struct Sentinels {
    open: std::sync::Mutex<std::collections::HashMap<String, MultiplexedConnection>>,
}

impl Sentinels {
    /// What the sentinel at `url` says the master named `name` is (`host:port`), if it knows.
    async fn ask(&self, url: &str, name: &str, options: &ClientOptions) -> Result<Option<String>> {
        let kept = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(url)
            .cloned();
        let budget = options.get_connect_timeout() + options.get_response_timeout();
        let asked = async {
            let mut connection = match kept {
                Some(connection) => connection,
                None => {
                    super::tls::client(url, options)
                        .map_err(|err| redis::RedisError::from(std::io::Error::other(err)))?
                        .get_multiplexed_async_connection()
                        .await?
                }
            };
            let reply = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async::<Option<(String, String)>>(&mut connection)
                .await?;
            Ok::<_, redis::RedisError>((connection, reply))
        };
        let open = |connection: Option<MultiplexedConnection>| {
            let mut kept = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match connection {
                Some(connection) => kept.insert(url.to_string(), connection),
                None => kept.remove(url),
            };
        };
        match tokio::time::timeout(budget, asked).await {
            Ok(Ok((connection, reply))) => {
                open(Some(connection));
                Ok(reply.map(|(host, port)| address_of(&host, &port)))
            }
            Ok(Err(source)) => {
                open(None);
                Err(explained(url, connect_error(url, source), options).await)
            }
            Err(_) => {
                open(None);
                Err(explained(url, no_connection_within(budget), options).await)
            }
        }
    }
}

/// `host:port`, an IPv6 host in brackets.
fn address_of(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Asks every sentinel at once for the address of the master named `name`, and takes the
/// address most of those that answered name (the first sentinel's, of equals): a sentinel cut
/// off on the minority side of a partition may still name the old master.
///
/// # Errors
/// When no sentinel names a master: the first sentinel's error, or [`Error::Connection`]
/// when they answered but know no master of that name.
async fn resolve(
    known: &Sentinels,
    sentinels: &[&str],
    name: &str,
    options: &ClientOptions,
) -> Result<String> {
    let answers = futures_util::future::join_all(
        sentinels
            .iter()
            .map(|sentinel| known.ask(sentinel, name, options)),
    )
    .await;
    let mut votes: Vec<(String, usize)> = Vec::new();
    let mut first_error = None;
    for answer in answers {
        match answer {
            Ok(Some(address)) => match votes.iter_mut().find(|(named, _)| *named == address) {
                Some((_, count)) => *count += 1,
                None => votes.push((address, 1)),
            },
            Ok(None) => {}
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    // The most votes; of equals, the first named (max_by_key keeps the last maximum).
    if let Some((address, _)) = votes.iter().rev().max_by_key(|(_, count)| *count) {
        return Ok(address.clone());
    }
    Err(first_error.unwrap_or_else(|| Error::Connection {
        phase: Phase::Connect,
        source: redis::RedisError::from((
            redis::ErrorKind::Client,
            "the sentinels know no master of that name",
            name.to_string(),
        )),
    }))
}

/// Connects to the data node at `address` with `auth`, checking that it is a master.
async fn connect_to(
    address: &str,
    auth: &Auth,
    options: &ClientOptions,
) -> Result<(redis::Client, ConnectionManager)> {
    let Auth {
        scheme,
        user,
        password,
        db,
    } = auth;
    let scheme = if scheme.is_empty() { "redis" } else { scheme };
    let credentials = if password.is_empty() && user.is_empty() {
        String::new()
    } else {
        format!("{user}:{password}@")
    };
    let url = format!("{scheme}://{credentials}{address}/{db}");
    let (client, config) = open(&url, options)?;
    let mut connection = manager(&url, client.clone(), config, options).await?;
    let role: Value = redis::cmd("ROLE")
        .query_async(&mut connection)
        .await
        .map_err(|source| connect_error(&url, source))?;
    let is_master = matches!(&role, Value::Array(parts)
        if matches!(parts.first(), Some(Value::BulkString(kind)) if kind == b"master"));
    if !is_master {
        return Err(Error::Connection {
            phase: Phase::Connect,
            source: redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the server the sentinels named is not a master (yet)",
                address.to_string(),
            )),
        });
    }
    Ok((client, connection))
}

/// The user name, password and database of a sentinel URL, for the data nodes.
fn auth_of(url: &str) -> Auth {
    let Ok(url) = url::Url::parse(url) else {
        return Auth::default();
    };
    // A unix socket's path is no database.
    let db = match url.scheme() {
        "redis" | "rediss" => url.path().trim_start_matches('/').to_string(),
        _ => String::new(),
    };
    Auth {
        scheme: if url.scheme() == "rediss" {
            "rediss"
        } else {
            "redis"
        }
        .to_string(),
        user: url.username().to_string(),
        password: url.password().unwrap_or_default().to_string(),
        db,
    }
}

/// Whether a pipeline's reply says the server is no longer the master to write to: a
/// read-only replica, or a master without the replicas `min-replicas-to-write` asks for.
fn is_readonly_reply(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(err)
        if err.kind() == Some(redis::ServerErrorKind::ReadOnly) || err.code() == "NOREPLICAS")
}
