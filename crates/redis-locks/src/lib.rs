#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod fair;
mod fenced;
mod guard;
pub mod history;
pub mod key;
pub mod lease;
mod lease_state;
mod mutex;
mod scripts;
mod state;
mod token;
mod wait;
mod wakeups;
mod watchdog;

pub use client::{Client, ClientOptions};
pub use error::{Error, LostReason, Result};
pub use fair::{DEFAULT_PLACE_LEASE, FairMutex, FairMutexOptions};
pub use fenced::FencedKey;
pub use guard::MutexGuard;
pub use key::LockKeys;
pub use mutex::{DEFAULT_LEASE, DEFAULT_RETRY_DELAY, Mutex, MutexOptions};
pub use state::{Holder, LockState};
pub use token::{FencingToken, OwnerToken};
