//! Resources that check fencing tokens: a write from a holder whose lease ran out is refused.

use std::sync::LazyLock;

use crate::client::Client;
use crate::error::{Error, Phase, Result};
use crate::key::LockKeys;
use crate::node::{LockScript, Node, Registered};
use crate::token::FencingToken;

/// A write applied only for a fencing token ≥ the highest seen: `{1, previous}` or
/// `{0, highest}`.
pub(crate) static SET: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[include_str!("set.lua")]));
inventory::submit!(Registered(|| &SET));

/// A string value in Redis that only the newest lock holder may write.
///
/// Each write carries the writer's [`FencingToken`]; the key remembers the highest token that
/// wrote it and refuses lower ones ([`Error::StaleToken`]). A holder that was paused past its
/// lease (GC, SIGSTOP, swap) and wakes up still believing it holds the lock therefore cannot
/// overwrite what the next holder wrote. The value and its highest token live in one cluster
/// slot (the key layout of [`LockKeys`]: the highest token is at `{name}:fenced`). Name it
/// apart from every lock: a `FencedKey` and a lock of the same name would share a key.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let server = test_support::RedisServer::start()?;
/// use redis_locks::{Client, Error, FencingToken};
///
/// let client = Client::connect(&server.url()).await?;
/// let report = client.fenced_key("report:today")?;
/// report.set(FencingToken::new(7), "from holder 7").await?;
/// let stale = report.set(FencingToken::new(6), "from holder 6").await.unwrap_err();
/// assert!(matches!(stale, Error::StaleToken { .. }));
/// assert_eq!(report.get().await?.as_deref(), Some("from holder 7"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedKey {
    node: Node,
    keys: LockKeys,
}

impl std::fmt::Debug for FencedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedKey")
            .field("key", &self.key())
            .finish()
    }
}

impl Client {
    /// A [`FencedKey`]: a string value that only the newest lock holder may write.
    ///
    /// # Errors
    /// [`Error::InvalidName`] as for [`Client::mutex`].
    pub fn fenced_key(&self, name: &str) -> Result<FencedKey> {
        Ok(FencedKey {
            node: self.node().clone(),
            keys: self.keys(name)?,
        })
    }
}

impl FencedKey {
    /// The key that holds the value.
    pub fn key(&self) -> &str {
        self.keys.lock()
    }

    /// Writes `value` if `token` is at least the highest token that wrote this key before.
    ///
    /// # Errors
    /// [`Error::StaleToken`] when a newer holder has written already (nothing is written);
    /// [`Error::WrongType`] when the key holds another type than a string;
    /// [`Error::Connection`] when Redis did not answer (the write may or may not have landed).
    pub async fn set(&self, token: FencingToken, value: &str) -> Result<()> {
        let fenced = self.keys.companion("fenced");
        let (written, highest): (i64, u64) = self
            .node
            .run_script(
                Phase::FencedWrite,
                &SET,
                &[self.keys.lock(), &fenced],
                &[&token.get().to_string(), value],
            )
            .await?;
        if written == 1 {
            Ok(())
        } else {
            Err(Error::StaleToken {
                key: self.key().to_string(),
                token,
                highest: FencingToken::new(highest),
            })
        }
    }

    /// Reads the value.
    ///
    /// # Errors
    /// [`Error::WrongType`] for a key of another type; [`Error::Connection`].
    pub async fn get(&self) -> Result<Option<String>> {
        let command = redis::cmd("GET").arg(self.key()).to_owned();
        self.node
            .query(Phase::FencedRead, &command, &[self.key()])
            .await
    }

    /// The highest token that has written the key, if any.
    ///
    /// # Errors
    /// As [`FencedKey::get`]; [`Error::WrongType`] naming the highest-token key when it holds
    /// something that is not a token.
    pub async fn highest_token(&self) -> Result<Option<FencingToken>> {
        let fenced = self.keys.companion("fenced");
        let command = redis::cmd("GET").arg(&fenced).to_owned();
        let highest: Option<String> = self
            .node
            .query(Phase::FencedRead, &command, &[&fenced])
            .await?;
        highest
            .map(|text| match text.parse() {
                Ok(token) => Ok(FencingToken::new(token)),
                Err(_) => Err(Error::WrongType {
                    key: fenced.clone(),
                    detail: format!("{text:?} is not a fencing token"),
                }),
            })
            .transpose()
    }
}
