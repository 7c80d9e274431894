//! Opening connections: the URL checked and turned into a redis-rs client, the connection
//! manager bounded in time, and what a failure to connect means. Every backend connects
//! through here.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::ClientOptions;
use super::tls;
use super::url::{self as urls, redact};
use crate::error::{Error, Phase, Result};

/// The redis-rs client of `url` and the connection manager's settings from `options`.
pub(super) fn open(
    url: &str,
    options: &ClientOptions,
) -> Result<(redis::Client, ConnectionManagerConfig)> {
    urls::check_url(url).map_err(|reason| Error::InvalidUrl {
        url: redact(url),
        reason,
    })?;
    let client = tls::client(url, options)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.get_connect_timeout()))
        .set_response_timeout(Some(options.get_response_timeout()))
        .set_number_of_retries(options.get_reconnect_attempts())
        .set_max_delay(Duration::from_secs(1));
    Ok((client, config))
}

/// Opens a connection manager on `client` within `options`' budget: the manager retries the
/// first connection too, so the whole of it is bounded, and an unreachable server fails in a
/// known time.
pub(super) async fn manager(
    url: &str,
    client: redis::Client,
    config: ConnectionManagerConfig,
    options: &ClientOptions,
) -> Result<ConnectionManager> {
    let budget = (options.get_connect_timeout() + Duration::from_secs(1))
        * (options.get_reconnect_attempts() as u32 + 1);
    let connect = ConnectionManager::new_with_config(client, config);
    let failed = match watched(url, options, tokio::time::timeout(budget, connect)).await? {
        Ok(Ok(connection)) => return Ok(connection),
        Ok(Err(source)) => connect_error(url, source),
        Err(_) => no_connection_within(budget),
    };
    Err(explained(url, failed, options).await)
}

/// Runs `connecting`; for a `rediss://` URL whose handshake has not come back within one
/// connect timeout, looks whether a plaintext server listens there (which never answers a
/// TLS greeting, so the connection's own retries would only time out, one after another),
/// and says so at once.
///
/// # Errors
/// [`Error::Tls`] ([`TlsProblem::NotTls`](crate::TlsProblem::NotTls)) when a plaintext
/// server answers.
pub(super) async fn watched<T>(
    url: &str,
    options: &ClientOptions,
    connecting: impl std::future::Future<Output = T>,
) -> Result<T> {
    if !tls::is_tls(url) {
        return Ok(connecting.await);
    }
    let plaintext = async {
        tokio::time::sleep(options.get_connect_timeout()).await;
        match tls::explain_timeout(url, options.get_connect_timeout()).await {
            Some(err) => err,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        done = connecting => Ok(done),
        err = plaintext => Err(err),
    }
}

/// `failed`, or the reason behind it when a `rediss://` connection timed out because a
/// plaintext server listens there.
pub(super) async fn explained(url: &str, failed: Error, options: &ClientOptions) -> Error {
    if !failed.is_connection() {
        return failed;
    }
    tls::explain_timeout(url, options.get_connect_timeout())
        .await
        .unwrap_or(failed)
}

/// The error of a connection not made within `budget`.
pub(super) fn no_connection_within(budget: Duration) -> Error {
    Error::Connection {
        phase: Phase::Connect,
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {budget:?}"),
        )),
    }
}

/// What a failure to connect means: a failed TLS handshake, refused access, something that
/// is not Redis, or no connection.
pub(super) fn connect_error(url: &str, source: redis::RedisError) -> Error {
    if let Some(tls) = tls::handshake_error(url, &source) {
        return tls;
    }
    if crate::error::is_auth_failure(&source) {
        return Error::Auth {
            phase: Phase::Connect,
            source,
        };
    }
    // Bytes that do not parse as RESP: something else listens on that port.
    if source.kind() == redis::ErrorKind::Parse {
        return Error::NotRedis {
            url: redact(url),
            detail: "its reply does not parse as the Redis protocol".into(),
        };
    }
    Error::from_redis(Phase::Connect, &[], source)
}
