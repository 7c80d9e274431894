//! Which Redis a command talks to: the one named by `--redis` / `REDIS_URL`, or a private
//! `redis-server` started for this run on a free loopback port (installed from Debian's
//! packages when missing).

use std::process::Command;

use test_support::{RedisServer, redis_server_installed};

use crate::exit::CliError;

/// The Redis a command uses; a private server is stopped when this is dropped.
pub struct RedisTarget {
    /// The URL to connect to (the first node's, with several).
    pub url: String,
    /// The private server, when this run started one (the first, with several).
    pub private: Option<RedisServer>,
    /// The other nodes' URLs, when several independent servers were given or started (a
    /// Redlock's nodes): the first node is `url`.
    pub more: Vec<String>,
    /// The other private servers this run started.
    more_private: Vec<RedisServer>,
}

impl RedisTarget {
    /// Uses `url` when given; otherwise starts a private server (installing it first if needed).
    pub fn resolve(url: Option<String>) -> Result<RedisTarget, CliError> {
        RedisTarget::resolve_nodes(url.into_iter().collect(), 1)
    }

    /// Uses `urls` when any are given; otherwise starts `nodes` private servers (installing
    /// redis-server first if needed), each on its own free port.
    pub fn resolve_nodes(urls: Vec<String>, nodes: usize) -> Result<RedisTarget, CliError> {
        let mut urls = urls.into_iter();
        if let Some(url) = urls.next() {
            return Ok(RedisTarget {
                url,
                private: None,
                more: urls.collect(),
                more_private: Vec::new(),
            });
        }
        ensure_installed()?;
        let mut servers = test_support::start_many(nodes.max(1)).map_err(|err| {
            CliError::Unavailable(format!("could not start a private redis-server: {err}"))
        })?;
        let first = servers.remove(0);
        Ok(RedisTarget {
            url: first.url(),
            private: Some(first),
            more: servers.iter().map(RedisServer::url).collect(),
            more_private: servers,
        })
    }

    /// Every node's URL, the first first.
    pub fn urls(&self) -> Vec<String> {
        std::iter::once(self.url.clone())
            .chain(self.more.iter().cloned())
            .collect()
    }

    /// One line that says which Redis this is, for a report's header.
    pub fn describe(&self) -> String {
        let nodes = 1 + self.more.len();
        match &self.private {
            Some(server) if nodes > 1 => format!(
                "{nodes} private redis-servers ({}) on 127.0.0.1 ports {}, started for this run and stopped at its end",
                server_version(),
                std::iter::once(server)
                    .chain(&self.more_private)
                    .map(|server| server.port().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(server) => format!(
                "a private redis-server ({}) on 127.0.0.1:{}, started for this run and stopped at its end",
                server_version(),
                server.port()
            ),
            None if nodes > 1 => format!("{} (from --redis / REDIS_URL)", self.urls().join(", ")),
            None => format!("{} (from --redis / REDIS_URL)", self.url),
        }
    }
}

fn server_version() -> String {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| {
            text.split_whitespace()
                .find_map(|word| word.strip_prefix("v=").map(|v| format!("v{v}")))
        })
        .unwrap_or_else(|| "unknown version".into())
}

/// Installs `redis-server` from Debian's packages when it is not on `PATH`: as root directly,
/// otherwise through `sudo -n`; a clear error when neither can work.
///
/// # Errors
/// [`CliError::Unavailable`] when it is missing and cannot be installed here.
pub fn ensure_installed() -> Result<(), CliError> {
    if redis_server_installed() {
        return Ok(());
    }
    let manual = "install it yourself (sudo apt-get install -y redis-server), or pass --redis URL";
    if Command::new("apt-get").arg("--version").output().is_err() {
        return Err(CliError::Unavailable(format!(
            "redis-server is not installed and there is no apt-get here: {manual}"
        )));
    }
    let sudo: &[&str] = if nix::unistd::Uid::effective().is_root() {
        &[]
    } else if Command::new("sudo")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        &["sudo", "-n"]
    } else {
        return Err(CliError::Unavailable(format!(
            "redis-server is not installed, and installing it needs root or password-less sudo: {manual}"
        )));
    };
    eprintln!("redis-server is not installed; installing it from Debian's packages...");
    for args in [
        &["apt-get", "update", "-qq"][..],
        &[
            "apt-get",
            "install",
            "-y",
            "-qq",
            "redis-server",
            "redis-tools",
        ][..],
    ] {
        let full: Vec<&str> = sudo.iter().chain(args).copied().collect();
        let status = Command::new(full[0])
            .args(&full[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .map_err(|err| CliError::Unavailable(format!("{}: {err}", full.join(" "))))?;
        if !status.success() {
            return Err(CliError::Unavailable(format!(
                "`{}` failed ({status}): {manual}",
                full.join(" ")
            )));
        }
    }
    if redis_server_installed() {
        Ok(())
    } else {
        Err(CliError::Unavailable(format!(
            "redis-server is still not on PATH after installing: {manual}"
        )))
    }
}
