//! The master a set of sentinels names, followed across failovers.
//!
//! redis-rs's async Sentinel client resolves the master once and keeps talking to that
//! address (its issue #1438). This one asks the sentinels again:
//! - when a sentinel announces `+switch-master` for the master's name (a task listens on one
//!   sentinel at a time, moving to the next when it drops);
//! - when a request finds the master read-only (`READONLY`: it was demoted) or unreachable;
//! - once a second while the client lives, in case an announcement was missed.
//!
//! A new address gets a new connection, and the wake-up connection is told to reconnect
//! ([`Master::switched`]), so waiters resubscribe on the new master. No request is retried:
//! the one that found the old master fails, and the next goes to the new one.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{RedisResult, Value};
use tokio::sync::watch;

use super::connect::{connect_error, manager, no_connection_within, open};
use super::{ClientOptions, redact};
use crate::error::{Error, Phase, Result};

/// How often the sentinels are asked for the master even when none announced a switch.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The current master of one Sentinel-watched name. Cheap to clone.
#[derive(Clone)]
pub(super) struct Master {
    shared: Arc<Shared>,
}

struct Shared {
    /// The sentinels, as URLs (their passwords are theirs).
    sentinels: Vec<String>,
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
}

#[derive(Clone, Default)]
struct Auth {
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
    /// [`Error::InvalidUrl`] for a bad sentinel URL or none; [`Error::NoMaster`]-like
    /// [`Error::Connection`] when no sentinel answers or none knows the name; the errors of
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
        let address = resolve(sentinels, name, &options).await?;
        let (client, connection) = connect_to(&address, &auth, &options).await?;
        let shared = Arc::new(Shared {
            sentinels: sentinels.iter().map(|s| s.to_string()).collect(),
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
        let reply = command.query_async(&mut self.current().connection).await;
        self.after(&reply);
        reply
    }

    /// Sends a pipeline to the current master.
    pub(super) async fn pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        let reply = pipe
            .query_async::<Vec<Value>>(&mut self.current().connection)
            .await;
        match &reply {
            Ok(replies) if replies.iter().any(is_readonly_reply) => self.resolve_soon(),
            other => self.after(other),
        }
        reply
    }

    /// Asks the sentinels again (in the background) when `reply` says the master may have
    /// changed.
    fn after<T>(&self, reply: &RedisResult<T>) {
        if let Err(err) = reply
            && (err.is_io_error()
                || err.is_connection_dropped()
                || err.is_connection_refusal()
                || err.is_timeout()
                || err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly))
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
    /// one and bumps the generation.
    async fn follow(&self) {
        let Ok(_one) = self.resolving.try_lock() else {
            return;
        };
        let sentinels: Vec<&str> = self.sentinels.iter().map(String::as_str).collect();
        let Ok(address) = resolve(&sentinels, &self.name, &self.options).await else {
            return;
        };
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
        let pubsub = match redis::Client::open(sentinel.as_str()) {
            Ok(client) => {
                tokio::time::timeout(options.get_connect_timeout(), client.get_async_pubsub())
                    .await
                    .ok()
                    .and_then(|pubsub| pubsub.ok())
            }
            Err(_) => None,
        };
        let mut pubsub = match pubsub {
            Some(mut pubsub) => pubsub
                .subscribe("+switch-master")
                .await
                .is_ok()
                .then_some(pubsub),
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

/// Asks each sentinel in turn for the address of the master named `name`.
async fn resolve(sentinels: &[&str], name: &str, options: &ClientOptions) -> Result<String> {
    let mut last = None;
    for sentinel in sentinels {
        let asked = async {
            let client = redis::Client::open(*sentinel)?;
            let mut connection = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async::<Option<(String, String)>>(&mut connection)
                .await
        };
        let budget = options.get_connect_timeout() + options.get_response_timeout();
        match tokio::time::timeout(budget, asked).await {
            Ok(Ok(Some((host, port)))) => return Ok(format!("{host}:{port}")),
            Ok(Ok(None)) => {
                last = Some(Error::Connection {
                    phase: Phase::Connect,
                    source: redis::RedisError::from((
                        redis::ErrorKind::Client,
                        "the sentinels know no master of that name",
                        name.to_string(),
                    )),
                })
            }
            Ok(Err(source)) => last = Some(connect_error(sentinel, source)),
            Err(_) => last = Some(no_connection_within(budget)),
        }
    }
    Err(last.unwrap_or_else(|| no_connection_within(Duration::ZERO)))
}

/// Connects to the data node at `address` with `auth`, checking that it is a master.
async fn connect_to(
    address: &str,
    auth: &Auth,
    options: &ClientOptions,
) -> Result<(redis::Client, ConnectionManager)> {
    let Auth { user, password, db } = auth;
    let credentials = if password.is_empty() && user.is_empty() {
        String::new()
    } else {
        format!("{user}:{password}@")
    };
    let url = format!("redis://{credentials}{address}/{db}");
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
    Auth {
        user: url.username().to_string(),
        password: url.password().unwrap_or_default().to_string(),
        db: url.path().trim_start_matches('/').to_string(),
    }
}

/// Whether a pipeline's reply says the server is a read-only replica.
fn is_readonly_reply(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(err) if err.kind() == Some(redis::ServerErrorKind::ReadOnly))
}
