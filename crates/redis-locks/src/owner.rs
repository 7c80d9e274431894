//! Owner ids: who holds a reentrant lock, across handles and processes.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};

/// Who holds a reentrant lock ([`ReentrantMutex`](crate::ReentrantMutex), or either side of
/// an [`RwLock`](crate::RwLock)): every acquisition by the same owner id is a re-entry.
///
/// An owner is an explicit id, never a thread: async tasks move between threads. A handle
/// gets a fresh random id when it is made (a handle is not `Clone`); give the handles of several
/// processes or tasks one id (say, a job id) with `with_owner` when they act as one owner.
///
/// ```
/// use redis_locks::OwnerId;
/// let job = OwnerId::new("nightly-report-2026-11-23").unwrap();
/// assert_eq!(job.as_str(), "nightly-report-2026-11-23");
/// assert_ne!(OwnerId::random(), OwnerId::random());
/// assert!(OwnerId::new("").is_err());
/// assert!(OwnerId::new("a\nb").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// The longest owner id accepted, in bytes.
    pub const MAX_LEN: usize = 256;

    /// Checks an owner id.
    ///
    /// # Errors
    /// [`Error::InvalidOwner`] when it is empty, longer than
    /// [`OwnerId::MAX_LEN`] bytes, or contains a control character.
    pub fn new(id: &str) -> Result<OwnerId> {
        let invalid = |reason| Error::InvalidOwner {
            owner: id.to_string(),
            reason,
        };
        if id.is_empty() {
            return Err(invalid("an owner id must not be empty"));
        }
        if id.len() > OwnerId::MAX_LEN {
            return Err(invalid("an owner id must be at most 256 bytes"));
        }
        if id.chars().any(char::is_control) {
            return Err(invalid("an owner id must not contain control characters"));
        }
        Ok(OwnerId(id.into()))
    }

    /// A fresh random id (`owner-` and 32 hex characters).
    pub fn random() -> OwnerId {
        OwnerId(format!("owner-{:032x}", rand::random::<u128>()).into())
    }

    /// The id as stored with each hold.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerId({:?})", &*self.0)
    }
}

impl fmt::Display for OwnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
