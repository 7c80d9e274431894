//! How a [`Redlock`](crate::Redlock) acquires: the common lock options plus the per-node
//! timeout.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lease::LeaseOptions;
use crate::options::LockOptions;
use crate::wait::WaitOptions;

/// The longest default per-node timeout.
const MAX_DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// How a [`Redlock`](crate::Redlock) acquires: the options every primitive takes
/// ([`LockOptions`]: the lease, the watchdog, how it waits) and how long each node may take to
/// answer one request.
///
/// The per-node timeout defaults to a tenth of the lease, at most 1 s: a node that does not
/// answer within it counts as not granting, so one slow or paused node never holds up an
/// attempt for long, and an attempt never spends most of the lease waiting.
///
/// ```
/// use std::time::Duration;
/// use redis_locks::RedlockOptions;
///
/// let options = RedlockOptions::default().lease(Duration::from_secs(2));
/// assert_eq!(options.get_node_timeout(), Duration::from_millis(200));
/// assert_eq!(RedlockOptions::default().get_node_timeout(), Duration::from_secs(1));
/// assert!(options.clone().node_timeout(Duration::from_secs(3)).check().is_err());
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RedlockOptions {
    lock: LockOptions,
    node_timeout: Option<Duration>,
}

impl RedlockOptions {
    /// The lease, the watchdog and how to wait, all at once.
    pub fn lock_options(mut self, options: LockOptions) -> Self {
        self.lock = options;
        self
    }

    /// The lease each acquisition asks for on every node (see [`LockOptions::lease`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lock = self.lock.lease(lease);
        self
    }

    /// Whether a watchdog renews the lease on a majority while the guard lives (see
    /// [`LockOptions::watchdog`]).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.lock = self.lock.watchdog(on);
        self
    }

    /// The mean pause between attempts when no wake-up can come: others may hold a majority
    /// but not the first node, whose releases wake the waiters (see
    /// [`LockOptions::retry_delay`]). Each pause is drawn at random around it. After votes
    /// split between contenders, the pause is shorter: about two attempts' time, at most this.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.lock = self.lock.retry_delay(delay);
        self
    }

    /// How much of the lease is not counted on for clock drift: the validity is the lease,
    /// less the time the attempt took, less this (default 1% of the lease + 2 ms; see
    /// [`ClockDrift`](crate::ClockDrift)).
    pub fn clock_drift(mut self, drift: crate::ClockDrift) -> Self {
        self.lock = self.lock.clock_drift(drift);
        self
    }

    /// How long one node may take to answer one request; a node that does not answer in
    /// time counts as not granting (its request finishes in the background, and whatever it
    /// granted is released). Must be shorter than the lease.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The lock options in force.
    pub fn get_lock_options(&self) -> &LockOptions {
        &self.lock
    }

    /// The lease options in force.
    pub fn get_lease_options(&self) -> &LeaseOptions {
        self.lock.get_lease_options()
    }

    /// The wait options in force.
    pub fn get_wait_options(&self) -> &WaitOptions {
        self.lock.get_wait_options()
    }

    /// The lease in force.
    pub fn get_lease(&self) -> Duration {
        self.lock.get_lease()
    }

    /// The per-node timeout in force.
    pub fn get_node_timeout(&self) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| (self.get_lease() / 10).min(MAX_DEFAULT_NODE_TIMEOUT))
    }

    /// Checks every value, so a bad one is reported when the handle is made.
    ///
    /// # Errors
    /// As [`LockOptions::check`]; [`Error::InvalidDuration`] for a per-node timeout of zero
    /// or not shorter than the lease.
    pub fn check(&self) -> Result<()> {
        self.lock.check()?;
        let timeout = self.get_node_timeout();
        if timeout.is_zero() || timeout >= self.get_lease() {
            return Err(Error::InvalidDuration {
                what: "node timeout",
                value: timeout,
                reason: format!(
                    "a node timeout must be above zero and shorter than the lease ({:?})",
                    self.get_lease()
                ),
            });
        }
        Ok(())
    }
}
