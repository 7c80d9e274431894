//! Lock names and the Redis keys behind them, all in one Redis Cluster hash slot.
//!
//! For a lock name `K`:
//! - if `K` has a hash tag (a `{`, later a `}`, at least one character between), the lock key
//!   is `K` and every companion key is `K` + suffix: they share `K`'s tag;
//! - otherwise the lock key is `K` and the companions are `{K}` + suffix: their tag is all of
//!   `K`, which hashes like `K` itself.
//!
//! A name without a hash tag that contains `}` cannot follow that rule (the `}` would end the
//! companion's tag early), so it is refused; give such a name a hash tag instead.

#[cfg(feature = "layout-internals")]
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// A method of the layout's inner keys: `pub` with the `layout-internals` feature (this
/// project's tests and tools), else the crate's own.
macro_rules! internal {
    ($(#[$meta:meta])* fn $($rest:tt)*) => {
        #[cfg(feature = "layout-internals")]
        $(#[$meta])*
        pub fn $($rest)*
        #[cfg(not(feature = "layout-internals"))]
        $(#[$meta])*
        pub(crate) fn $($rest)*
    };
}

/// The longest lock name accepted, in bytes. Redis allows longer keys, but a lock name this
/// long is a mistake (a payload passed as a name), and every request carries it.
pub const MAX_NAME_LEN: usize = 1024;

/// The suffixes of companion keys; a lock name may not end in one of them.
pub(crate) const COMPANION_SUFFIXES: [&str; 8] = [
    "fence", "epoch", "wake", "queue", "places", "tickets", "handover", "fenced",
];

/// The Redis keys of one lock: the lock key itself and its companions, all in one slot.
///
/// ```
/// use redis_locks::LockKeys;
///
/// let keys = LockKeys::new("jobs:nightly").unwrap();
/// assert_eq!(keys.lock(), "jobs:nightly");
/// assert_eq!(keys.fence(), "{jobs:nightly}:fence");
///
/// let tagged = LockKeys::new("{tenant-7}:cart").unwrap();
/// assert_eq!(tagged.fence(), "{tenant-7}:cart:fence");
///
/// assert!(LockKeys::new("").is_err());
/// ```
#[derive(Clone)]
pub struct LockKeys {
    /// The parts every acquisition and a held lock use (see [`Part`]: name, key, prefix,
    /// fence, epoch, wake channel) in one allocation: a held lock keeps its keys for as long
    /// as it is held, and a process may hold 100,000 locks.
    text: Box<str>,
    /// Where each of those parts is in `text`, by [`Part`] (a part equal to an earlier one
    /// shares it).
    spans: [(u16, u16); HELD_PARTS],
    /// The keys of the line (queue, places, tickets, handover), made when a tool first asks
    /// for one of them (`layout-internals`). The library's own requests make theirs for each
    /// request ([`LockKeys::line`]): a held lock renews with the lock key alone, so holding
    /// it keeps none of them (about 120 bytes a lock).
    #[cfg(feature = "layout-internals")]
    line: OnceLock<LineKeys>,
}

/// Equal when every key is: the keys of the line follow from the others.
impl PartialEq for LockKeys {
    fn eq(&self, other: &LockKeys) -> bool {
        self.text == other.text && self.spans == other.spans
    }
}

impl Eq for LockKeys {}

/// The parts of [`LockKeys`]: those of `spans` first, then the keys of the line, in the order
/// of their suffixes in [`COMPANION_SUFFIXES`].
#[derive(Clone, Copy)]
enum Part {
    Name,
    /// The lock key: the name, under the namespace if there is one.
    Key,
    Prefix,
    Fence,
    Epoch,
    Wake,
    Queue,
    Places,
    Tickets,
    Handover,
}

/// How many parts `spans` places: `Name` to `Wake`.
const HELD_PARTS: usize = 6;

/// Where the suffixes of the line's keys (`Queue` to `Handover`) are in
/// [`COMPANION_SUFFIXES`]; the three before them are the held parts' fence, epoch and wake.
const LINE_SUFFIXES: std::ops::Range<usize> = 3..7;

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every key, as before the parts shared one allocation; the line's made for this
        // (a held lock's keys shown in a log must not keep them for the rest of the hold).
        let line = self.line();
        f.debug_struct("LockKeys")
            .field("name", &self.name())
            .field("prefix", &self.part(Part::Prefix))
            .field("lock", &self.lock())
            .field("fence", &self.fence())
            .field("epoch", &self.epoch())
            .field("wake_channel", &self.wake_channel())
            .field("queue", &line.queue())
            .field("places", &line.places())
            .field("tickets", &line.tickets())
            .field("handover", &line.handover())
            .finish()
    }
}

impl LockKeys {
    /// Checks a lock name and derives its keys.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name is empty, longer than [`MAX_NAME_LEN`] bytes,
    /// contains a control character (newline, NUL, escape, ...: a name is printed in
    /// messages and `status`, where such characters could forge output), contains `}`
    /// without having a hash tag, is only a hash tag (`{x}`), or ends in a
    /// companion suffix (`:fence`, `:wake`, ...) and so would share keys with another lock.
    pub fn new(name: &str) -> Result<LockKeys> {
        LockKeys::with_namespace("", name)
    }

    /// Checks a lock name and derives its keys under `namespace` (see
    /// [`ClientOptions::namespace`](crate::ClientOptions::namespace)): the lock key is
    /// `<namespace>:<name>`, and the companions follow the same rule as without a namespace,
    /// applied to that key. An empty namespace is none ([`LockKeys::new`]).
    ///
    /// ```
    /// use redis_locks::LockKeys;
    ///
    /// let keys = LockKeys::with_namespace("locks", "jobs:nightly").unwrap();
    /// assert_eq!(keys.name(), "jobs:nightly");
    /// assert_eq!(keys.lock(), "locks:jobs:nightly");
    /// assert_eq!(keys.fence(), "{locks:jobs:nightly}:fence");
    ///
    /// let tagged = LockKeys::with_namespace("locks", "{tenant-7}:cart").unwrap();
    /// assert_eq!(tagged.fence(), "locks:{tenant-7}:cart:fence");
    ///
    /// assert!(LockKeys::with_namespace("lo{cks", "x").is_err());
    /// ```
    ///
    /// # Errors
    /// As [`LockKeys::new`] for the name; [`Error::InvalidName`] for a namespace over 128
    /// bytes, with blanks or control characters, or with any of `{ } * ? [ ] \`.
    pub fn with_namespace(namespace: &str, name: &str) -> Result<LockKeys> {
        check_namespace(namespace)?;
        let invalid = |reason| Error::InvalidName {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("a lock name must not be empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(invalid("a lock name must be at most 1024 bytes"));
        }
        if name.chars().any(char::is_control) {
            return Err(invalid(
                "a lock name must not contain control characters (newline, tab, NUL, escape...)",
            ));
        }
        if hash_tag(name).is_some_and(|tag| tag.len() + 2 == name.len()) {
            return Err(invalid(
                "a name that is only a hash tag, like {x}, would share its keys with the lock \
                 named x; add something outside the braces, like {x}:lock",
            ));
        }
        if COMPANION_SUFFIXES.iter().any(|suffix| {
            name.strip_suffix(suffix)
                .is_some_and(|rest| rest.ends_with(':'))
        }) {
            return Err(invalid(
                "a name ending in :fence, :epoch, :wake, :queue, :places, :tickets, :handover or \
                 :fenced would be another lock's companion key",
            ));
        }
        let key = if namespace.is_empty() {
            name.to_string()
        } else {
            format!("{namespace}:{name}")
        };
        let prefix = if hash_tag(name).is_some() {
            key.clone()
        } else if name.contains('}') {
            return Err(invalid(
                "a name with '}' but no hash tag cannot keep its keys in one cluster slot; \
                 wrap the part that names the lock in braces, like {my}lock",
            ));
        } else {
            format!("{{{key}}}")
        };
        // fence, epoch, wake: the order of `Part`.
        let [fence, epoch, wake] = [0, 1, 2].map(|i| format!("{prefix}:{}", COMPANION_SUFFIXES[i]));
        Ok(LockKeys::joined(&[
            name, &key, &prefix, &fence, &epoch, &wake,
        ]))
    }

    /// The keys made of `parts`, in the order of [`Part`] up to `Wake`.
    fn joined(parts: &[&str; HELD_PARTS]) -> LockKeys {
        let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
        let mut spans = [(0u16, 0u16); HELD_PARTS];
        for (i, part) in parts.iter().enumerate() {
            // A part equal to an earlier one (the key is the name without a namespace, the
            // prefix the key with a hash tag) shares its text.
            spans[i] = match parts[..i].iter().position(|earlier| earlier == part) {
                Some(earlier) => spans[earlier],
                None => {
                    let start = text.len();
                    text.push_str(part);
                    // At most about 7 KB in all: names and namespaces are bounded.
                    (start as u16, text.len() as u16)
                }
            };
        }
        LockKeys {
            text: text.into_boxed_str(),
            spans,
            #[cfg(feature = "layout-internals")]
            line: OnceLock::new(),
        }
    }

    /// `part`, one of `Name` to `Wake` (the keys of the line are [`LockKeys::line`]'s).
    fn part(&self, part: Part) -> &str {
        let (start, end) = self.spans[part as usize];
        &self.text[usize::from(start)..usize::from(end)]
    }

    /// The lock name as given.
    pub fn name(&self) -> &str {
        self.part(Part::Name)
    }

    /// The key that holds the owner token while the lock is held: the name, under the
    /// namespace if there is one.
    pub fn lock(&self) -> &str {
        self.part(Part::Key)
    }

    /// The fencing counter: an integer that only grows, at least one step per acquisition
    /// (an attempt refused on the fast path takes a step too).
    pub fn fence(&self) -> &str {
        self.part(Part::Fence)
    }

    /// The fencing counter's epochs: a sorted set of the names of the connections on which a
    /// script brought the counter up to the server clock. A fast acquisition trusts its
    /// counter only on such a connection, which cannot outlive a restart or move to another
    /// server (see the crate README, "Fencing tokens").
    pub fn epoch(&self) -> &str {
        self.part(Part::Epoch)
    }

    internal! {
        /// The pub/sub channel on which releases wake this lock's waiters (in the lock's slot, so
        /// a cluster-aware client can use sharded pub/sub).
        fn wake_channel(&self) -> &str {
            self.part(Part::Wake)
        }
    }

    internal! {
        /// A companion key `<prefix>:<suffix>` in the lock's slot.
        fn companion(&self, suffix: &str) -> String {
            format!("{}:{suffix}", self.part(Part::Prefix))
        }
    }

    /// Whether these keys keep the keys of their line (see `line`): only after
    /// `LockKeys::queue` or another of them was asked for.
    #[cfg(all(test, feature = "layout-internals"))]
    pub(crate) fn keeps_line(&self) -> bool {
        self.line.get().is_some()
    }

    /// The keys of the lock's line (queue, places, tickets, handover), made for one request
    /// and not kept: the library's requests use these, so a held lock never keeps them (its
    /// first acquisition is a script that names them), while `LockKeys::queue` and the
    /// others keep theirs for the tools that ask for them.
    pub(crate) fn line(&self) -> LineKeys {
        LineKeys::new(self.part(Part::Prefix))
    }
}

/// The keys of the line for the tools that ask for them: `layout-internals` only (the library
/// makes its own for each request, `LockKeys::line`).
#[cfg(feature = "layout-internals")]
impl LockKeys {
    /// The queue of waiters: a sorted set of waiter ids by arrival (a ticket the server hands
    /// out). A release wakes the first of them.
    ///
    /// This and the other keys of the line are made when one of them is first asked for and
    /// kept from then on; the library's own requests make theirs each time
    /// (`LockKeys::line`), so that a held lock keeps none of them.
    pub fn queue(&self) -> &str {
        self.kept_line().part(Part::Queue)
    }

    /// The waiters' place leases: a sorted set of waiter ids by the server time (ms) at which
    /// each place runs out unless its waiter renews it.
    pub fn places(&self) -> &str {
        self.kept_line().part(Part::Places)
    }

    /// The ticket counter of the queue; it exists only while somebody waits.
    pub fn tickets(&self) -> &str {
        self.kept_line().part(Part::Tickets)
    }

    /// The owner tokens waiters are handed the lock under: a hash of waiter id ->
    /// `'<owner token> <nonce>'`, the token the waiter asks with (a `Mutex`'s waiters of one
    /// process share one; a `FairMutex` waiter's is its own, which is also its id) and the
    /// nonce of the attempt that last renewed its place. A release with such a waiter at
    /// the head of the queue gives the lock straight to that token and publishes the grant,
    /// so the woken waiter holds the lock without asking Redis again. It exists only while
    /// somebody waits.
    pub fn handover(&self) -> &str {
        self.kept_line().part(Part::Handover)
    }

    /// The keys of the line, made once and kept.
    fn kept_line(&self) -> &LineKeys {
        self.line.get_or_init(|| self.line())
    }
}

/// The keys of a lock's line ([`LockKeys::line`]).
#[derive(Clone, Debug)]
pub(crate) struct LineKeys {
    /// Every key of the line, `<prefix>:<suffix>`, one after the other in [`Part`]'s order,
    /// in one allocation: a request that names the line makes them every time.
    text: Box<str>,
    /// The length of the lock's prefix.
    prefix: usize,
}

impl LineKeys {
    /// The keys of the line of a lock whose companions begin with `prefix`.
    fn new(prefix: &str) -> LineKeys {
        let suffixes = &COMPANION_SUFFIXES[LINE_SUFFIXES];
        let length = suffixes.iter().map(|s| prefix.len() + 1 + s.len()).sum();
        let mut text = String::with_capacity(length);
        for suffix in suffixes {
            text.push_str(prefix);
            text.push(':');
            text.push_str(suffix);
        }
        LineKeys {
            text: text.into_boxed_str(),
            prefix: prefix.len(),
        }
    }

    /// `part`, a key of the line.
    fn part(&self, part: Part) -> &str {
        let suffixes = &COMPANION_SUFFIXES[LINE_SUFFIXES];
        let index = part as usize - HELD_PARTS;
        let length = |suffix: &&str| self.prefix + 1 + suffix.len();
        let start: usize = suffixes[..index].iter().map(length).sum();
        &self.text[start..start + length(&suffixes[index])]
    }

    /// As `LockKeys::queue`.
    pub(crate) fn queue(&self) -> &str {
        self.part(Part::Queue)
    }

    /// As `LockKeys::places`.
    pub(crate) fn places(&self) -> &str {
        self.part(Part::Places)
    }

    /// As `LockKeys::tickets`.
    pub(crate) fn tickets(&self) -> &str {
        self.part(Part::Tickets)
    }

    /// As `LockKeys::handover`.
    pub(crate) fn handover(&self) -> &str {
        self.part(Part::Handover)
    }
}

/// The longest namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 128;

/// Checks a namespace (see [`ClientOptions::namespace`](crate::ClientOptions::namespace)).
///
/// # Errors
/// [`Error::InvalidName`] as [`LockKeys::with_namespace`] says.
pub(crate) fn check_namespace(namespace: &str) -> Result<()> {
    let invalid = |reason| Error::InvalidName {
        name: namespace.to_string(),
        reason,
    };
    if namespace.len() > MAX_NAMESPACE_LEN {
        return Err(invalid("a namespace must be at most 128 bytes"));
    }
    if namespace
        .chars()
        .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(invalid(
            "a namespace must not contain blanks or control characters (an ACL pattern could \
             not name it)",
        ));
    }
    if namespace.contains(['{', '}']) {
        return Err(invalid(
            "a namespace must not contain { or }: they would move the locks' cluster slot",
        ));
    }
    if namespace.contains(['*', '?', '[', ']', '\\']) {
        return Err(invalid(
            "a namespace must not contain * ? [ ] or \\: an ACL key pattern could not name it",
        ));
    }
    Ok(())
}

/// The part of `key` Redis Cluster hashes: the hash tag's content, if `key` has a hash tag.
///
/// ```
/// use redis_locks::key::hash_tag;
/// assert_eq!(hash_tag("{user:1}:cart"), Some("user:1"));
/// assert_eq!(hash_tag("a{}b"), None);
/// assert_eq!(hash_tag("plain"), None);
/// ```
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

/// The Redis Cluster slot of `key`: CRC16 of its hash tag, or of the whole key, mod 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed.as_bytes()) % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_every_key() {
        let keys = LockKeys::with_namespace("ns", "orders").unwrap();
        let shown = format!("{keys:?}");
        let line = keys.line();
        for key in [
            keys.name(),
            keys.lock(),
            keys.fence(),
            keys.epoch(),
            keys.wake_channel(),
            line.queue(),
            line.places(),
            line.tickets(),
            line.handover(),
        ] {
            assert!(shown.contains(&format!("{key:?}")), "{key} in {shown}");
        }
        #[cfg(feature = "layout-internals")]
        assert!(!keys.keeps_line(), "Debug keeps no keys of the line");
    }

    #[test]
    fn every_key_follows_the_rule() {
        for (namespace, name) in [
            ("", "orders"),
            ("ns", "orders"),
            ("", "{t}:cart"),
            ("ns", "{t}:cart"),
        ] {
            let keys = LockKeys::with_namespace(namespace, name).unwrap();
            let prefix = keys.part(Part::Prefix).to_string();
            let line = keys.line();
            for (key, suffix) in [
                (keys.fence(), "fence"),
                (keys.epoch(), "epoch"),
                (keys.wake_channel(), "wake"),
                (line.handover(), "handover"),
                (line.tickets(), "tickets"),
                (line.queue(), "queue"),
                (line.places(), "places"),
            ] {
                assert_eq!(key, format!("{prefix}:{suffix}"), "{namespace} {name}");
            }
        }
    }

    /// The tools' getters keep the keys of the line once asked, the same keys as `line()`;
    /// equality and copies do not depend on it.
    #[cfg(feature = "layout-internals")]
    #[test]
    fn the_keys_of_the_line_are_kept_only_once_asked_for() {
        let keys = LockKeys::with_namespace("ns", "{t}:cart").unwrap();
        assert!(!keys.keeps_line());
        let line = keys.line();
        assert!(!keys.keeps_line(), "line() keeps nothing");
        let asked = [keys.handover(), keys.tickets(), keys.queue(), keys.places()];
        assert_eq!(
            asked,
            [line.handover(), line.tickets(), line.queue(), line.places()]
        );
        assert!(keys.keeps_line());
        assert_eq!(keys, LockKeys::with_namespace("ns", "{t}:cart").unwrap());
        assert_eq!(keys.clone().queue(), keys.queue());
    }
}
