//! How every client of a command talks to its Redis, beside where that Redis is (the
//! [`Endpoint`](crate::endpoint::Endpoint)): TLS for `rediss://` URLs (`--tls-ca`,
//! `--tls-cert`, `--tls-key`, `--tls-insecure`), the key namespace (`--namespace`) and
//! whether scripts go as functions (`--no-functions`: `EVALSHA` only), and,
//! for the commands that take locks, replicated acquisition (`--replicas`,
//! `--replicas-timeout`); each also an environment variable. Every command that connects
//! flattens [`SettingsArgs`] (and one that takes locks [`ReplicationArgs`]);
//! [`SettingsArgs::settings`] checks them, [`ClientSettings::client_options`] is the one place
//! that turns them into the library's [`ClientOptions`] (the files are read there), and
//! [`ClientSettings::lease_options`] the one that adds replication to a lock's lease. A
//! command's worker processes get them on their command line ([`ClientSettings::args`]) or in
//! their plan (the settings are plain data: paths, never the keys themselves).

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis_locks::{ClientOptions, LeaseOptions, LockKeys, Replication};
use serde::{Deserialize, Serialize};

use crate::exit::CliError;

/// The heading the flags are listed under in `--help`.
const HEADING: &str = "TLS and key namespace";
/// The heading of [`ReplicationArgs`] in `--help`.
const REPLICATION_HEADING: &str = "Replicated acquisition";
/// How long the server waits for the replicas by default (`--replicas-timeout`).
pub const DEFAULT_REPLICAS_TIMEOUT: Duration = Duration::from_millis(100);

/// The flags as clap declares them (global: they may come after the subcommand's own).
///
/// ```
/// use clap::Parser;
/// use cli_support::settings::SettingsArgs;
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     settings: SettingsArgs,
/// }
/// let cli = Cli::try_parse_from(["cli", "--namespace", "locks", "--tls-insecure"]).unwrap();
/// let settings = cli.settings.settings().unwrap();
/// assert_eq!(settings.namespace(), "locks");
/// assert!(settings.tls_insecure());
/// let cli = Cli::try_parse_from(["cli", "--tls-cert", "client.crt"]).unwrap();
/// assert!(cli.settings.settings().is_err()); // a certificate without its key
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SettingsArgs {
    /// Trust the CA certificates in FILE (PEM) for rediss:// servers, instead of the
    /// system's.
    #[arg(
        long,
        env = "REDIS_TLS_CA",
        value_name = "FILE",
        global = true,
        help_heading = HEADING
    )]
    tls_ca: Option<PathBuf>,
    /// Show the client certificate in FILE (PEM) to rediss:// servers that ask for one
    /// (mutual TLS); with --tls-key.
    #[arg(
        long,
        env = "REDIS_TLS_CERT",
        value_name = "FILE",
        global = true,
        help_heading = HEADING
    )]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "REDIS_TLS_KEY",
        value_name = "FILE",
        global = true,
        help_heading = HEADING
    )]
    tls_key: Option<PathBuf>,
    /// Do not check rediss:// servers' certificates (anyone on the network path can then
    /// read and change the locks' traffic). A URL ending in #insecure is refused without it.
    #[arg(
        long,
        env = "REDIS_TLS_INSECURE",
        global = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = HEADING
    )]
    tls_insecure: bool,
    /// Keep every key and channel of the locks under NS: the lock NAME lives at NS:NAME.
    /// Every process that shares a lock must use the same namespace. Default: none (the
    /// lock key is the name itself).
    #[arg(
        long,
        env = "REDIS_LOCKS_NAMESPACE",
        value_name = "NS",
        global = true,
        help_heading = HEADING
    )]
    namespace: Option<String>,
    /// Send the locks' scripts with EVALSHA instead of loading them as one function library
    /// (FUNCTION LOAD, then FCALL). The library falls back to EVALSHA by itself where the
    /// server or the ACL refuses functions; this skips even the first, refused load.
    #[arg(
        long,
        env = "REDIS_LOCKS_NO_FUNCTIONS",
        global = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        help_heading = HEADING
    )]
    no_functions: bool,
}

impl SettingsArgs {
    /// The settings as given, checked: a certificate without its key (or a key without its
    /// certificate) and a namespace no lock can live under are bad usage. The files are
    /// read later, by [`ClientSettings::client_options`].
    ///
    /// # Errors
    /// [`CliError::Usage`] as said.
    pub fn settings(&self) -> Result<ClientSettings, CliError> {
        let tls_client = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(CliError::Usage(
                    "--tls-cert needs --tls-key (REDIS_TLS_KEY): the private key of the client \
                     certificate"
                        .into(),
                ));
            }
            (None, Some(_)) => {
                return Err(CliError::Usage(
                    "--tls-key needs --tls-cert (REDIS_TLS_CERT): the client certificate the \
                     key belongs to"
                        .into(),
                ));
            }
        };
        let namespace = self.namespace.clone().unwrap_or_default();
        // A name every lock may have, to check the namespace alone.
        LockKeys::with_namespace(&namespace, "x").map_err(|err| match err {
            redis_locks::Error::InvalidName { reason, .. } => {
                CliError::Usage(format!("--namespace {namespace:?}: {reason}"))
            }
            other => CliError::from(other),
        })?;
        Ok(ClientSettings {
            tls_ca: self.tls_ca.clone(),
            tls_client,
            tls_insecure: self.tls_insecure,
            namespace,
            replication: None,
            no_functions: self.no_functions,
        })
    }
}

/// `--replicas N [--replicas-timeout D]`: replicated acquisition, for the commands that take
/// locks (`run`, `demo`, `check`).
///
/// ```
/// use std::time::Duration;
/// use clap::Parser;
/// use cli_support::settings::{ReplicationArgs, SettingsArgs};
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     settings: SettingsArgs,
///     #[command(flatten)]
///     replication: ReplicationArgs,
/// }
/// let cli = Cli::try_parse_from(["cli", "--replicas", "1"]).unwrap();
/// let settings = cli.settings.settings().unwrap().with_replication(&cli.replication);
/// assert_eq!(settings.replicas(), Some((1, Duration::from_millis(100))));
/// assert!(Cli::try_parse_from(["cli", "--replicas", "0"]).is_err());
/// assert!(Cli::try_parse_from(["cli", "--replicas-timeout", "1s"]).is_err());
/// ```
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ReplicationArgs {
    /// Count the acquisition, and each renewal, only once N replicas acknowledged it (WAIT N
    /// after the grant, in the same round trip): a grant the master loses in a failover
    /// before any replica had it is then never taken for held. Fewer within
    /// --replicas-timeout: exit 69, the grant released; a renewal that falls short does not
    /// extend the lease. Not with a Redlock (several --redis).
    #[arg(
        long,
        env = "REDIS_LOCKS_REPLICAS",
        value_name = "N",
        global = true,
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = REPLICATION_HEADING
    )]
    replicas: Option<u32>,
    /// With --replicas: how long the server waits for the replicas' acknowledgements (WAIT's
    /// timeout), at least 1ms and under the 2s reply timeout [default: 100ms].
    #[arg(
        long,
        env = "REDIS_LOCKS_REPLICAS_TIMEOUT",
        value_name = "D",
        global = true,
        requires = "replicas",
        value_parser = crate::parse_duration,
        help_heading = REPLICATION_HEADING
    )]
    replicas_timeout: Option<Duration>,
}

/// Replicated acquisition as the command line asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Replicas {
    /// How many replicas must acknowledge.
    replicas: u32,
    /// How long the server waits for them.
    timeout: Duration,
}

/// How the clients of a command talk to Redis: checked, but with the files not read yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientSettings {
    /// `--tls-ca`: the CAs to trust for `rediss://`.
    tls_ca: Option<PathBuf>,
    /// `--tls-cert` and `--tls-key`.
    tls_client: Option<(PathBuf, PathBuf)>,
    /// `--tls-insecure`.
    tls_insecure: bool,
    /// `--namespace`; empty for none.
    namespace: String,
    /// `--replicas` and `--replicas-timeout`.
    #[serde(default)]
    replication: Option<Replicas>,
    /// `--no-functions`.
    #[serde(default)]
    no_functions: bool,
}

impl ClientSettings {
    /// These settings with the replicated acquisition `args` ask for (none without
    /// `--replicas`).
    pub fn with_replication(self, args: &ReplicationArgs) -> ClientSettings {
        ClientSettings {
            replication: args.replicas.map(|replicas| Replicas {
                replicas,
                timeout: args.replicas_timeout.unwrap_or(DEFAULT_REPLICAS_TIMEOUT),
            }),
            ..self
        }
    }

    /// `--replicas` and its timeout, if given.
    pub fn replicas(&self) -> Option<(u32, Duration)> {
        self.replication
            .map(|Replicas { replicas, timeout }| (replicas, timeout))
    }

    /// The library's replication policy of `--replicas`, if given.
    pub fn replication(&self) -> Option<Replication> {
        self.replication
            .map(|Replicas { replicas, timeout }| Replication::Wait { replicas, timeout })
    }

    /// `lease` with the replicated acquisition of `--replicas`, if given: the one place a
    /// lock's lease gets it.
    pub fn lease_options(&self, lease: LeaseOptions) -> LeaseOptions {
        match self.replication() {
            Some(replication) => lease.replication(replication),
            None => lease,
        }
    }

    /// The namespace (empty: none).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether `rediss://` servers' certificates go unchecked on purpose.
    pub fn tls_insecure(&self) -> bool {
        self.tls_insecure
    }

    /// These settings without the TLS files (the namespace and `--tls-insecure` kept): for
    /// a private server, which is plaintext, beside the servers the settings are for.
    pub fn plaintext(&self) -> ClientSettings {
        ClientSettings {
            tls_ca: None,
            tls_client: None,
            ..self.clone()
        }
    }

    /// Whether a CA or a client certificate was given (which only a `rediss://` URL can use).
    pub fn has_tls_files(&self) -> bool {
        self.tls_ca.is_some() || self.tls_client.is_some()
    }

    /// The keys of the lock `name` under the namespace.
    ///
    /// # Errors
    /// [`CliError::Usage`] for a name no lock can have.
    pub fn keys(&self, name: &str) -> Result<LockKeys, CliError> {
        Ok(LockKeys::with_namespace(&self.namespace, name)?)
    }

    /// The library's client options: the defaults with these settings.
    ///
    /// # Errors
    /// As [`ClientSettings::apply`].
    pub fn client_options(&self) -> Result<ClientOptions, CliError> {
        self.apply(ClientOptions::default())
    }

    /// `options` with these settings: the CA, client certificate and key read from their
    /// files, `--tls-insecure`, the namespace. The one place the command-line programs make
    /// a lock client's options.
    ///
    /// # Errors
    /// [`CliError::NoInput`] (exit 66) for a file that cannot be read.
    pub fn apply(&self, mut options: ClientOptions) -> Result<ClientOptions, CliError> {
        if let Some(ca) = &self.tls_ca {
            options = options.tls_ca(read(ca, "--tls-ca")?);
        }
        if let Some((cert, key)) = &self.tls_client {
            options = options.tls_client_cert(read(cert, "--tls-cert")?, read(key, "--tls-key")?);
        }
        Ok(options
            .tls_insecure(self.tls_insecure)
            .namespace(self.namespace.clone())
            .functions(!self.no_functions))
    }

    /// Checks that every file can be read, so that a command fails at once (exit 66), before
    /// it starts servers or processes.
    ///
    /// # Errors
    /// As [`ClientSettings::apply`].
    pub fn check_files(&self) -> Result<(), CliError> {
        self.client_options().map(drop)
    }

    /// The command-line options that give these settings, for a worker process of this
    /// program.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        let path = |path: &Path| path.to_string_lossy().into_owned();
        if let Some(ca) = &self.tls_ca {
            args.extend(["--tls-ca".to_string(), path(ca)]);
        }
        if let Some((cert, key)) = &self.tls_client {
            args.extend([
                "--tls-cert".to_string(),
                path(cert),
                "--tls-key".to_string(),
                path(key),
            ]);
        }
        if self.tls_insecure {
            args.push("--tls-insecure".into());
        }
        if self.no_functions {
            args.push("--no-functions".into());
        }
        if !self.namespace.is_empty() {
            args.extend(["--namespace".to_string(), self.namespace.clone()]);
        }
        if let Some(Replicas { replicas, timeout }) = self.replication {
            args.extend([
                "--replicas".to_string(),
                replicas.to_string(),
                "--replicas-timeout".to_string(),
                format!("{}ms", timeout.as_millis().max(1)),
            ]);
        }
        args
    }

    /// A redis-rs client of the program's own for `url` (not a lock client), with the same
    /// TLS settings as the lock clients: for the connections beside them
    /// ([`Endpoint::side`](crate::endpoint::Endpoint::side)).
    ///
    /// # Errors
    /// [`CliError::Usage`] for a URL that cannot name a server, `#insecure` without
    /// `--tls-insecure`, or TLS files with a `redis://` URL; [`CliError::NoInput`] for a file
    /// that cannot be read.
    pub fn redis_client(&self, url: &str) -> Result<redis::Client, CliError> {
        let invalid = |err: &dyn std::fmt::Display| {
            CliError::Usage(format!("invalid Redis URL {}: {err}", crate::redact(url)))
        };
        match self.certificates(url)? {
            Some(certificates) => {
                redis::Client::build_with_tls(self.effective_url(url)?.as_str(), certificates)
                    .map_err(|err| invalid(&err))
            }
            None => {
                redis::Client::open(self.effective_url(url)?.as_str()).map_err(|err| invalid(&err))
            }
        }
    }

    /// The TLS certificates of a cluster connection of the program's own, for
    /// [`redis::cluster::ClusterClientBuilder::certs`]; `None` without TLS files.
    ///
    /// # Errors
    /// As [`ClientSettings::redis_client`].
    pub fn certificates(&self, url: &str) -> Result<Option<redis::TlsCertificates>, CliError> {
        if !self.has_tls_files() {
            return Ok(None);
        }
        if !is_tls(url) {
            return Err(CliError::Usage(format!(
                "--tls-ca, --tls-cert and --tls-key are for rediss:// (TLS) URLs, and {} is \
                 redis:// (plaintext)",
                crate::redact(url)
            )));
        }
        let client_tls = match &self.tls_client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert, "--tls-cert")?,
                client_key: read(key, "--tls-key")?,
            }),
            None => None,
        };
        let root_cert = match &self.tls_ca {
            Some(ca) => Some(read(ca, "--tls-ca")?),
            None => None,
        };
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// `url` as redis-rs should see it, as the lock clients see it: `#insecure` only with
    /// `--tls-insecure`, and added to every `rediss://` URL with it.
    ///
    /// # Errors
    /// [`CliError::Usage`] for `#insecure` without `--tls-insecure`.
    pub fn effective_url(&self, url: &str) -> Result<String, CliError> {
        if !is_tls(url) {
            return Ok(url.to_string());
        }
        let fragment = url.ends_with("#insecure");
        if fragment && !self.tls_insecure {
            return Err(CliError::Usage(format!(
                "{}: #insecure turns off the check of the server's certificate; allow it on \
                 purpose with --tls-insecure (REDIS_TLS_INSECURE=1)",
                crate::redact(url)
            )));
        }
        if self.tls_insecure && !fragment {
            return Ok(format!("{}#insecure", url.trim_end_matches('#')));
        }
        Ok(url.to_string())
    }
}

/// Whether `url` asks for TLS.
pub fn is_tls(url: &str) -> bool {
    url.trim_start().starts_with("rediss://")
}

/// The bytes of the file `path` given to `flag`.
fn read(path: &Path, flag: &str) -> Result<Vec<u8>, CliError> {
    std::fs::read(path)
        .map_err(|err| CliError::NoInput(format!("{flag}: cannot read {}: {err}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(insecure: bool) -> ClientSettings {
        ClientSettings {
            tls_insecure: insecure,
            ..ClientSettings::default()
        }
    }

    #[test]
    fn insecure_only_on_purpose() {
        assert!(matches!(
            settings(false).effective_url("rediss://h:1#insecure"),
            Err(CliError::Usage(_))
        ));
        assert_eq!(
            settings(true).effective_url("rediss://h:1").unwrap(),
            "rediss://h:1#insecure"
        );
        assert_eq!(
            settings(true).effective_url("redis://h:1").unwrap(),
            "redis://h:1"
        );
    }

    #[test]
    fn an_unreadable_file_is_no_input() {
        let settings = ClientSettings {
            tls_ca: Some("/nonexistent/ca.crt".into()),
            ..ClientSettings::default()
        };
        assert!(matches!(settings.check_files(), Err(CliError::NoInput(_))));
    }

    #[test]
    fn the_worker_arguments_give_the_same_settings() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            settings: SettingsArgs,
            #[command(flatten)]
            replication: ReplicationArgs,
        }
        let settings = ClientSettings {
            tls_ca: Some("ca.pem".into()),
            tls_client: Some(("c.pem".into(), "k.pem".into())),
            tls_insecure: true,
            namespace: "locks".into(),
            replication: Some(Replicas {
                replicas: 2,
                timeout: Duration::from_millis(250),
            }),
            no_functions: true,
        };
        let args = std::iter::once("cli".to_string()).chain(settings.args());
        let cli = Cli::try_parse_from(args).unwrap();
        let parsed = cli
            .settings
            .settings()
            .unwrap()
            .with_replication(&cli.replication);
        assert_eq!(parsed, settings);
    }

    #[test]
    fn no_functions_reaches_the_client_options() {
        let settings = ClientSettings {
            no_functions: true,
            ..ClientSettings::default()
        };
        assert!(!settings.client_options().unwrap().get_functions());
        assert!(
            ClientSettings::default()
                .client_options()
                .unwrap()
                .get_functions()
        );
    }

    #[test]
    fn a_bad_namespace_is_bad_usage() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            settings: SettingsArgs,
        }
        let cli = Cli::try_parse_from(["cli", "--namespace", "a{b"]).unwrap();
        match cli.settings.settings() {
            Err(CliError::Usage(message)) => assert!(message.contains("--namespace"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
