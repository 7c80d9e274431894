//! What a wake-up message says: the format a release script publishes (`wake` in
//! `lock.lua`) and how a waiter reads it. The node delivers the payloads; only this module
//! knows what they mean.
//!
//! A payload is one of:
//! - `*`: every waiter of the lock looks again;
//! - `<waiter id>`: that waiter looks again;
//! - `<waiter id> <owner> <nonce> <token>`: the release handed the lock to that waiter.

use crate::node::{Listener, WAKE_ALL};

/// A release that handed the lock straight to a waiter (a `Mutex`'s, see `queue.lua`,
/// `hand_over`): the owner token it now holds the lock under, the nonce of the waiting attempt
/// whose place lease the grant's lease ends with, and the fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HandedOver {
    pub(crate) owner: String,
    pub(crate) nonce: u64,
    pub(crate) token: u64,
}

impl HandedOver {
    /// The grant in what follows the addressee of a message (`'<owner> <nonce> <token>'`).
    fn parse(rest: &str) -> Option<HandedOver> {
        let mut parts = rest.split(' ');
        let handed = HandedOver {
            owner: parts.next()?.to_string(),
            nonce: parts.next()?.parse().ok()?,
            token: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(handed)
    }
}

/// Resolves on the first message of `listener` addressed to `me` (or to everyone); with `me` =
/// `None`, on any message. A listener that fell behind counts as woken. Returns the grant when
/// the message handed the lock to `me`.
pub(crate) async fn woken(listener: &mut Listener, me: Option<&str>) -> Option<HandedOver> {
    loop {
        let payload = listener.next().await?;
        let me = me?;
        if &*payload == me || &*payload == WAKE_ALL {
            return None;
        }
        let addressed = payload
            .strip_prefix(me)
            .and_then(|rest| rest.strip_prefix(' '));
        if let Some(rest) = addressed {
            // A malformed grant still wakes: the waiter asks Redis and finds out.
            return HandedOver::parse(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HandedOver;

    #[test]
    fn a_grant_parses_only_whole() {
        assert_eq!(
            HandedOver::parse("abc 7 42"),
            Some(HandedOver {
                owner: "abc".into(),
                nonce: 7,
                token: 42
            })
        );
        for bad in ["abc 7", "abc x 42", "abc 7 42 9", ""] {
            assert_eq!(HandedOver::parse(bad), None, "{bad:?}");
        }
    }
}
