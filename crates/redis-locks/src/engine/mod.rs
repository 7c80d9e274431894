//! The storage engines the primitives share, below them all: a primitive picks one and never
//! imports another primitive.
//!
//! - [`string_lock`]: one owner per lock, kept in a string key (the owner token, with the
//!   waiter mark) with a fencing counter beside it: the fast pipeline, the acquire script that
//!   puts waiters in line, the owner-checked release (which hands the lock to the next waiter)
//!   and extend, and the state read. `Mutex`, `FairMutex` and each node of a `Redlock` stand
//!   on it.
//! - [`holds`]: several holds per lock, kept in a hash (one field per guard, each with its own
//!   lease on the server clock, an owner id for re-entry, a mode). `RwLock` and
//!   `ReentrantMutex` stand on it.
//!
//! - [`first`]: the first attempt, outside the scripts, of a lock whose lone holder may be a
//!   plain key (a `Semaphore`'s single permit, an `RwLock`'s read hold): the `string_lock`
//!   pipeline with the line's `EXISTS`.
//!
//! Both wait through the one acquire loop of [`wait`](crate::wait) and hold through the lease
//! core of [`lease`](crate::lease).

pub(crate) mod first;
pub(crate) mod holds;
pub(crate) mod string_lock;
