//! The methods every guard has, written once: a guard is a thin wrapper around a
//! [`Lease`](super::Lease) in a field named `lease`.

/// Implements the lease methods (name, tokens, deadline, `lost`, `extend`...) on a guard
/// type with a `lease: Lease` field. The guard adds its own `release`.
macro_rules! guard_methods {
    ($guard:ty) => {
        impl $guard {
            /// The lock's name.
            pub fn name(&self) -> &str {
                self.lease.name()
            }

            /// This acquisition's fencing token: greater than that of every earlier holder of the
            /// lock of another owner (a `ReentrantMutex`'s or an `RwLock` writer's re-entries
            /// share their owner's first token).
            pub fn fencing_token(&self) -> $crate::FencingToken {
                self.lease.fencing_token()
            }

            /// The random token of this acquisition: the owner token stored in the lock key (a
            /// `Mutex`, a `FairMutex`), or the id of this guard's hold (a `ReentrantMutex`, an
            /// `RwLock`). Only a request that carries it may release or extend this hold.
            pub fn owner_token(&self) -> &$crate::OwnerToken {
                self.lease.owner_token()
            }

            /// The instant (local monotonic clock) until which the lock is certainly held: the lease
            /// counted from when the last acquire, extend or renewal request was *sent*, less a drift
            /// allowance.
            pub fn lease_deadline(&self) -> ::tokio::time::Instant {
                self.lease.deadline()
            }

            /// How much of the lease is certainly left; zero once it may have run out.
            pub fn lease_remaining(&self) -> ::std::time::Duration {
                self.lease.remaining()
            }

            /// Resolves the moment the lock is known lost — a renewal or extension found it gone or
            /// taken — or can no longer be proven held: the lease deadline passed without a confirmed
            /// renewal (no watchdog, Redis unreachable, or the renewal cap reached). Use it in
            /// `tokio::select!` beside the work the lock protects. The future does not borrow the
            /// guard; once the guard is released or dropped it resolves with
            /// [`LostReason::Released`]($crate::LostReason::Released).
            ///
            /// # Cancel safety
            /// Cancel-safe: dropping the future changes nothing.
            pub fn lost(
                &self,
            ) -> impl std::future::Future<Output = $crate::LostReason> + Send + 'static {
                self.lease.lost()
            }

            /// Why the lock is not held any more, if that is known now (a passed lease deadline
            /// counts); `None` while it is held.
            pub fn lost_reason(&self) -> Option<$crate::LostReason> {
                self.lease.lost_reason()
            }

            /// How many replicas acknowledged the last confirmed grant or renewal, when the
            /// options ask for replicated acquisition
            /// ([`LeaseOptions::replication`]($crate::LeaseOptions::replication)); `None`
            /// otherwise.
            pub fn replicas(&self) -> Option<u32> {
                self.lease.replicas()
            }

            /// Whether the watchdog renews this guard's lease.
            pub fn is_renewed(&self) -> bool {
                self.lease.is_renewed()
            }

            /// Sets the lease to `lease` from now, if the lock is still this guard's.
            ///
            /// # Errors
            /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a lease under 3 ms or over 100 years;
            /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock is gone or another owner's (nothing was changed, and
            /// [`lost`](Self::lost) resolves); [`Error::Connection`](crate::Error::Connection) when the outcome is unknown
            /// (the old lease still bounds it).
            ///
            /// # Cancel safety
            /// Dropping the future may or may not have changed the lease; the guard counts on the
            /// earlier of the old and the new deadline, never later than the truth.
            pub async fn extend(&self, lease: ::std::time::Duration) -> $crate::Result<()> {
                self.lease.extend(lease).await
            }
        }
    };
}

pub(crate) use guard_methods;
