//! `rediss://` connections: the redis-rs client made with this client's CAs and certificate,
//! and what a failed handshake means.
//!
//! rustls does the TLS, with one crypto provider compiled in (`ring`, the workspace's `rustls`
//! dependency), which rustls then uses by itself: no connection can fail for want of a
//! provider.

use redis::{ClientTlsConfig, TlsCertificates};

use super::ClientOptions;
use super::url::redact;
use crate::error::{Error, Result, TlsProblem};

/// Whether `url` asks for TLS: its scheme, as the URL parser (and so redis-rs) reads it
/// (`REDISS://`, surrounding blanks).
pub(super) fn is_tls(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|parsed| parsed.scheme() == "rediss")
}

/// Whether `url` asks for no certificate check (`#insecure`), as the URL parser reads it.
fn asks_insecure(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|parsed| parsed.fragment() == Some("insecure"))
}

/// `url` as redis-rs should see it: `#insecure` kept only when `options` allow it on
/// purpose, and added to every `rediss://` URL when they do.
///
/// # Errors
/// [`Error::InvalidUrl`] for `#insecure` without [`ClientOptions::tls_insecure`];
/// [`Error::Tls`] ([`TlsProblem::Settings`]) for TLS settings given with a plaintext URL.
pub(super) fn effective_url(url: &str, options: &ClientOptions) -> Result<String> {
    let insecure_fragment = asks_insecure(url);
    if !is_tls(url) {
        if options.tls.any() {
            return Err(Error::Tls {
                url: redact(url),
                problem: TlsProblem::Settings,
                detail: "a CA or client certificate was given, but the URL is redis:// \
                         (plaintext); use rediss:// to connect with TLS"
                    .into(),
            });
        }
        return Ok(url.to_string());
    }
    if insecure_fragment && !options.tls.insecure {
        return Err(Error::InvalidUrl {
            url: redact(url),
            reason: "#insecure turns off the check of the server's certificate; allow it on \
                     purpose with ClientOptions::tls_insecure(true) (--tls-insecure)"
                .into(),
        });
    }
    if options.tls.insecure && !insecure_fragment {
        let mut parsed = url::Url::parse(url).map_err(|err| Error::InvalidUrl {
            url: redact(url),
            reason: err.to_string(),
        })?;
        parsed.set_fragment(Some("insecure"));
        return Ok(parsed.to_string());
    }
    Ok(url.to_string())
}

/// The certificates `options` give, if any, for redis-rs, each checked: a CA or a client
/// certificate with no PEM certificate in it, or a key that does not parse, is refused now
/// rather than met as an untrusted server at the first connection.
///
/// # Errors
/// [`Error::Tls`] ([`TlsProblem::Settings`]) naming what does not parse.
pub(super) fn certificates(url: &str, options: &ClientOptions) -> Result<Option<TlsCertificates>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let refuse = |detail: String| Error::Tls {
        url: redact(url),
        problem: TlsProblem::Settings,
        detail,
    };
    let count_certs = |pem: &[u8]| {
        CertificateDer::pem_slice_iter(pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(|certs| certs.len())
            .unwrap_or(0)
    };
    if let Some(ca) = &options.tls.ca
        && count_certs(ca) == 0
    {
        return Err(refuse("the CA holds no PEM certificate".into()));
    }
    if let Some((cert, key)) = &options.tls.client {
        if count_certs(cert) == 0 {
            return Err(refuse(
                "the client certificate holds no PEM certificate".into(),
            ));
        }
        if PrivateKeyDer::from_pem_slice(key).is_err() {
            return Err(refuse(
                "the client key is not a PEM private key (PKCS#1, PKCS#8 or SEC1)".into(),
            ));
        }
    }
    Ok(options.tls.any().then(|| TlsCertificates {
        client_tls: options
            .tls
            .client
            .as_ref()
            .map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert: options.tls.ca.clone(),
    }))
}

/// The redis-rs client of `url` (checked already) with `options`' TLS settings.
///
/// # Errors
/// [`Error::Tls`] ([`TlsProblem::Settings`]) when the CA or client certificate cannot be
/// used; [`Error::InvalidUrl`] as [`effective_url`].
pub(super) fn client(url: &str, options: &ClientOptions) -> Result<redis::Client> {
    let effective = effective_url(url, options)?;
    let built = match certificates(url, options)? {
        Some(certificates) => redis::Client::build_with_tls(effective.as_str(), certificates),
        None => redis::Client::open(effective.as_str()),
    };
    built.map_err(|source| {
        if is_tls(url) && options.tls.any() {
            Error::Tls {
                url: redact(url),
                problem: TlsProblem::Settings,
                detail: source.to_string(),
            }
        } else {
            Error::InvalidUrl {
                url: redact(url),
                reason: source.to_string(),
            }
        }
    })
}

/// What a failed connection to `url` means when its cause is the TLS handshake: the
/// [`Error::Tls`] to report, or `None` when TLS is not the cause.
pub(super) fn handshake_error(url: &str, err: &redis::RedisError) -> Option<Error> {
    if !is_tls(url) {
        return None;
    }
    let Some(rustls) = rustls_cause(err) else {
        // A client certificate or CA that rustls would not take shows when connecting.
        return (err.kind() == redis::ErrorKind::InvalidClientConfig).then(|| Error::Tls {
            url: redact(url),
            problem: TlsProblem::Settings,
            detail: err.to_string(),
        });
    };
    let problem = match rustls {
        rustls::Error::InvalidCertificate(_) => TlsProblem::ServerCertificate,
        rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired
            | rustls::AlertDescription::BadCertificate
            | rustls::AlertDescription::UnknownCA
            | rustls::AlertDescription::CertificateExpired
            | rustls::AlertDescription::CertificateUnknown
            | rustls::AlertDescription::AccessDenied,
        ) => TlsProblem::ClientCertificate,
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => TlsProblem::NotTls,
        // Other alerts (no version or cipher both sides speak, ...) and the rest: the
        // settings do not fit.
        _ => TlsProblem::Settings,
    };
    let detail = match problem {
        TlsProblem::NotTls => format!(
            "{rustls}; is the server a plaintext one? (use redis:// for it, or its TLS port)"
        ),
        _ => rustls.to_string(),
    };
    Some(Error::Tls {
        url: redact(url),
        problem,
        detail,
    })
}

/// Whether the server at the `rediss://` URL `url` answers plaintext Redis: a `PING` sent
/// without TLS gets a Redis reply within `within`. A plaintext server does not answer a TLS
/// greeting at all (it waits for the end of a command line that never comes), so a TLS
/// connection to it only times out; this tells why.
pub(super) async fn speaks_plaintext(url: &str, within: std::time::Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(parsed) = url::Url::parse(url) else {
        return false;
    };
    let (Some(host), port) = (parsed.host_str(), parsed.port().unwrap_or(6379)) else {
        return false;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
        stream.write_all(b"PING\r\n").await?;
        let mut reply = [0u8; 16];
        let read = stream.read(&mut reply).await?;
        Ok::<_, std::io::Error>(reply[..read].to_vec())
    };
    match tokio::time::timeout(within, probe).await {
        Ok(Ok(reply)) => {
            reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH") || reply.starts_with(b"-")
        }
        _ => false,
    }
}

/// The error of a `rediss://` connection to `url` that did not come up in time: a plaintext
/// server there is said to be one.
pub(super) async fn explain_timeout(url: &str, within: std::time::Duration) -> Option<Error> {
    (is_tls(url) && speaks_plaintext(url, within).await).then(|| Error::Tls {
        url: redact(url),
        problem: TlsProblem::NotTls,
        detail: "no TLS handshake within the connect timeout, and the port answers a plaintext \
                 PING: a plaintext server behind a rediss:// URL (use redis:// for it, or its \
                 TLS port)"
            .into(),
    })
}

/// The rustls error somewhere in `err`'s causes, if there is one. redis-rs keeps the cause
/// of an I/O error as an `Arc<dyn Error>` (its `source`), and tokio-rustls puts the rustls
/// error inside an `io::Error`: each layer is looked through by type, never by message.
fn rustls_cause(err: &redis::RedisError) -> Option<&rustls::Error> {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(current) = cause {
        let current: &(dyn std::error::Error + 'static) = match current.downcast_ref::<Shared>() {
            Some(shared) => shared.as_ref(),
            None => current,
        };
        if let Some(found) = current.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && let Some(found) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        cause = current.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insecure_only_on_purpose() {
        let plain = ClientOptions::default();
        assert!(matches!(
            effective_url("rediss://h:1#insecure", &plain),
            Err(Error::InvalidUrl { .. })
        ));
        assert_eq!(
            effective_url("rediss://h:1", &plain).unwrap(),
            "rediss://h:1"
        );
        let insecure = ClientOptions::default().tls_insecure(true);
        assert_eq!(
            effective_url("rediss://h:1", &insecure).unwrap(),
            "rediss://h:1#insecure"
        );
        assert_eq!(
            effective_url("rediss://h:1#insecure", &insecure).unwrap(),
            "rediss://h:1#insecure"
        );
        // What the URL parser (and redis-rs) reads as TLS and #insecure is refused as such.
        for sneaky in [
            "REDISS://h:1#insecure",
            "rediss://h:1#insecure\n",
            " rediss://h:1#insecure",
        ] {
            assert!(
                matches!(effective_url(sneaky, &plain), Err(Error::InvalidUrl { .. })),
                "{sneaky:?}"
            );
        }
        // No certificate to check on a plaintext URL: insecure changes nothing there.
        assert_eq!(
            effective_url("redis://h:1", &insecure).unwrap(),
            "redis://h:1"
        );
    }

    #[test]
    fn tls_settings_need_a_tls_url() {
        let with_ca = ClientOptions::default().tls_ca(b"not pem".to_vec());
        assert!(matches!(
            effective_url("redis://h:1", &with_ca),
            Err(Error::Tls {
                problem: TlsProblem::Settings,
                ..
            })
        ));
    }

    #[test]
    fn a_ca_that_is_not_pem_is_a_settings_error() {
        let with_ca = ClientOptions::default().tls_ca(b"not pem".to_vec());
        match client("rediss://127.0.0.1:1", &with_ca) {
            Err(Error::Tls { problem, .. }) => assert_eq!(problem, TlsProblem::Settings),
            other => panic!("expected a settings error, got {other:?}"),
        }
    }

    #[test]
    fn options_never_print_key_material() {
        let options = ClientOptions::default()
            .tls_ca(b"-----BEGIN CERTIFICATE-----SECRETCA".to_vec())
            .tls_client_cert(b"CERTBYTES".to_vec(), b"PRIVATEKEYBYTES".to_vec());
        let shown = format!("{options:?}");
        for secret in ["SECRETCA", "CERTBYTES", "PRIVATEKEYBYTES"] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
}
