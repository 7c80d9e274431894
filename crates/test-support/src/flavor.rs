//! What the server program is: Redis or Valkey, which version, and what it offers.

use std::process::Command;
use std::sync::OnceLock;

use crate::error::SpawnError;
use crate::program::server_program;
/// Which server a [`ServerFlavor`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// Redis (`redis-server`).
    Redis,
    /// Valkey (`valkey-server`), the fork of Redis 7.2.4.
    Valkey,
}

/// The server the private servers run, and its version, as its `--version` tells.
///
/// ```
/// use test_support::{ServerFlavor, ServerKind};
///
/// let valkey = ServerFlavor::parse("Valkey server v=9.1.2 sha=00000000:1 malloc=libc").unwrap();
/// assert_eq!(valkey.kind(), ServerKind::Valkey);
/// assert_eq!(valkey.version(), (9, 1, 2));
/// assert!(valkey.has_waitaof());
/// assert_eq!(valkey.to_string(), "Valkey 9.1.2");
///
/// let redis = ServerFlavor::parse("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0").unwrap();
/// assert_eq!(redis.kind(), ServerKind::Redis);
/// assert!(!redis.has_waitaof());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ServerFlavor {
    kind: ServerKind,
    version: (u32, u32, u32),
}

impl ServerFlavor {
    /// Reads a server's `--version` line (`Redis server v=7.0.15 ...`,
    /// `Valkey server v=9.1.2 ...`); `None` for anything else.
    ///
    /// ```
    /// use test_support::ServerFlavor;
    ///
    /// assert!(ServerFlavor::parse("Redis server v=7.2.4 sha=0").is_some());
    /// assert!(ServerFlavor::parse("KeyDB server v=6.3.4").is_none());
    /// assert!(ServerFlavor::parse("Redis server").is_none());
    /// ```
    pub fn parse(version_line: &str) -> Option<ServerFlavor> {
        let mut words = version_line.split_whitespace();
        let kind = match words.next()? {
            "Redis" => ServerKind::Redis,
            "Valkey" => ServerKind::Valkey,
            _ => return None,
        };
        let number = words.find_map(|word| word.strip_prefix("v="))?;
        let mut parts = number.split('.').map(|part| part.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(ServerFlavor {
            kind,
            version: (major, minor, patch),
        })
    }

    /// Redis or Valkey.
    ///
    /// ```
    /// use test_support::{ServerFlavor, ServerKind};
    ///
    /// let flavor = ServerFlavor::parse("Valkey server v=8.0.1").unwrap();
    /// assert_eq!(flavor.kind(), ServerKind::Valkey);
    /// ```
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Whether it is Valkey.
    ///
    /// ```
    /// let flavor = test_support::ServerFlavor::parse("Valkey server v=8.0.1").unwrap();
    /// assert!(flavor.is_valkey());
    /// ```
    pub fn is_valkey(&self) -> bool {
        self.kind == ServerKind::Valkey
    }

    /// The version as (major, minor, patch), in the server's own numbering (Valkey 8 is not
    /// Redis 8).
    ///
    /// ```
    /// let flavor = test_support::ServerFlavor::parse("Redis server v=7.0.15").unwrap();
    /// assert_eq!(flavor.version(), (7, 0, 15));
    /// ```
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// Whether the server knows `WAITAOF` (Redis 7.2 and later, every Valkey).
    ///
    /// ```
    /// use test_support::ServerFlavor;
    ///
    /// assert!(ServerFlavor::parse("Redis server v=7.2.0").unwrap().has_waitaof());
    /// assert!(!ServerFlavor::parse("Redis server v=7.0.15").unwrap().has_waitaof());
    /// assert!(ServerFlavor::parse("Valkey server v=7.2.5").unwrap().has_waitaof());
    /// ```
    pub fn has_waitaof(&self) -> bool {
        match self.kind {
            ServerKind::Redis => self.version >= (7, 2, 0),
            ServerKind::Valkey => true,
        }
    }
}

impl std::fmt::Display for ServerFlavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.kind {
            ServerKind::Redis => "Redis",
            ServerKind::Valkey => "Valkey",
        };
        let (major, minor, patch) = self.version;
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

/// The server the private servers run ([`server_program`]), asked once per process with
/// `--version`.
///
/// # Errors
/// [`SpawnError::NotInstalled`] when the program does not run, or does not say it is Redis or
/// Valkey.
///
/// ```
/// let flavor = test_support::server_flavor().unwrap();
/// // WAITAOF came with Redis 7.2; every Valkey has it.
/// if flavor.is_valkey() {
///     assert!(flavor.has_waitaof());
/// }
/// println!("the tests run on {flavor}");
/// ```
pub fn server_flavor() -> Result<ServerFlavor, SpawnError> {
    static FLAVOR: OnceLock<Option<ServerFlavor>> = OnceLock::new();
    FLAVOR
        .get_or_init(|| {
            let out = Command::new(server_program())
                .arg("--version")
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            ServerFlavor::parse(&String::from_utf8_lossy(&out.stdout))
        })
        .ok_or(SpawnError::NotInstalled)
}
