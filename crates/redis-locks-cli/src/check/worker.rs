//! `redis-locks check-worker PLAN`: one worker process of `check`. Its tasks take the lock
//! over and over; each holder reads the resource, works, writes back the value plus one and
//! releases, and every step is reported as a JSON [`Event`] line on stdout.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cli_support::exit::CliError;
use cli_support::primitive::{Guard, Handle, Primitive};
use nix::sys::signal::{Signal, raise};
use redis_locks::{Error, LostReason};

use super::clock::{self, now as now_nanos};
use super::legacy::LegacyLock;
use super::plan::{
    Access, Action, Algorithm, CheckPrimitive, Event, Holding, Plan, Release, Trigger,
    multilock_pool,
};
use super::resource::Resource;

/// How long a task waits after a failed request before it tries again (a fault at work).
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// How often a long holder looks whether a renewal moved its lease end.
const RENEWAL_WATCH: Duration = Duration::from_millis(10);
/// How many failed requests in a row a task takes before it gives up.
const MAX_RETRIES: u32 = 500;

/// Runs the worker described by the JSON `plan`.
pub async fn run(plan: &str) -> Result<(), CliError> {
    let plan: Plan = serde_json::from_str(plan)
        .map_err(|err| CliError::Usage(format!("check-worker: bad plan: {err}")))?;
    // Installed before the first lock is made, so that every record is seen.
    let forwarder = plan
        .metrics
        .then(super::metrics::Forwarder::install)
        .flatten();
    let resource = Resource::new(
        cli_support::connection(&plan.resource_url).await?,
        &plan.resource,
    );
    let clients = match plan.algorithm {
        algorithm if !algorithm.raw() => {
            let endpoint = match plan.primitive {
                CheckPrimitive::Redlock => plan.endpoint.clone(),
                _ => plan.endpoint.first(),
            };
            endpoint.connect_each().await?
        }
        _ => Vec::new(),
    };
    // Connected: `check` may now do what must come before the first acquisition.
    emit_line(&Event::Connected {
        process: plan.process,
    });
    clock::sleep_until(plan.start_at).await;
    let mut tasks = Vec::new();
    for task in 0..plan.tasks {
        let lock = match plan.algorithm {
            // A MultiLock's names change from one acquisition to the next.
            algorithm if plan.primitive == CheckPrimitive::Multilock => Lock::Multi {
                clients: clients.clone(),
                pool: multilock_pool(&plan.lock, plan.names),
                broken: algorithm != Algorithm::Ours,
            },
            Algorithm::Ours => Lock::Ours(Handle::renewed(
                &clients,
                &plan.lock,
                primitive(plan.primitive, task),
                Duration::from_millis(plan.lease_ms),
                plan.endpoint.settings().replication(),
                plan.permits,
            )?),
            algorithm => Lock::Legacy(LegacyLock::new(
                algorithm,
                cli_support::connection_with(
                    plan.endpoint.server_url().unwrap_or_default(),
                    plan.endpoint.settings(),
                )
                .await?,
                // The key our locks would have: under the namespace, where `check` watches.
                plan.endpoint.keys(&plan.lock)?.lock(),
                Duration::from_millis(plan.lease_ms),
                plan.permits,
            )),
        };
        let task = Task {
            worker: format!("p{}t{task}", plan.process),
            // A semaphore's holders share the resource as readers do: up to N at once, so
            // none of them may read-modify-write it.
            // A MultiLock's holders of other names hold at once too: the resource is one.
            shared: (plan.primitive == CheckPrimitive::Rwlock && task % 2 == 1)
                || plan.primitive == CheckPrimitive::Semaphore
                || plan.primitive == CheckPrimitive::Multilock,
            triggers: plan
                .triggers
                .iter()
                .copied()
                .filter(|trigger| trigger.task == task)
                .collect(),
            plan: plan.clone(),
            lock,
            resource: resource.clone(),
        };
        tasks.push(tokio::spawn(task.run()));
    }
    let all_done = async {
        for task in tasks {
            task.await
                .map_err(|err| CliError::Lost(format!("check-worker: a task panicked: {err}")))?;
        }
        Ok(())
    };
    match forwarder {
        Some(forwarder) => {
            let send = |samples| emit_line(&Event::Metrics { samples });
            forwarder.around(send, all_done).await
        }
        None => all_done.await,
    }
}

/// Which side of the primitive task number `task` takes.
fn primitive(primitive: CheckPrimitive, task: usize) -> Primitive {
    match primitive {
        CheckPrimitive::Mutex => Primitive::Mutex,
        CheckPrimitive::Fair => Primitive::FairMutex,
        CheckPrimitive::Reentrant => Primitive::Reentrant,
        CheckPrimitive::Rwlock if task % 2 == 1 => Primitive::Read,
        CheckPrimitive::Rwlock => Primitive::Write,
        CheckPrimitive::Redlock => Primitive::Redlock,
        CheckPrimitive::Semaphore => Primitive::Semaphore,
        CheckPrimitive::Multilock => Primitive::MultiLock,
    }
}

enum Lock {
    Ours(Handle),
    Legacy(LegacyLock),
    /// A MultiLock over a random part of `pool` at each acquisition; `broken`: the hand-made
    /// one of `caller-order-multilock`.
    Multi {
        clients: Vec<redis_locks::Client>,
        pool: Vec<String>,
        broken: bool,
    },
}

/// A hold of either kind.
enum Hold {
    Ours(Box<Guard>),
    Legacy,
}

struct Task {
    worker: String,
    shared: bool,
    triggers: Vec<Trigger>,
    plan: Plan,
    lock: Lock,
    resource: Resource,
}

impl Task {
    async fn run(self) {
        for seq in 0..self.plan.count {
            if let Err(message) = self.hold_once(seq).await {
                self.emit(&Event::Failed {
                    worker: self.worker.clone(),
                    message,
                })
                .await;
                return;
            }
        }
        self.emit(&Event::Done {
            worker: self.worker.clone(),
        })
        .await;
    }

    /// One acquisition, the work under it, and the release.
    async fn hold_once(&self, seq: usize) -> Result<(), String> {
        let strike = self
            .triggers
            .iter()
            .copied()
            .find(|trigger| trigger.at == seq);
        let die = strike.is_some_and(|trigger| trigger.action == Action::Die);
        let linger_here = strike.is_some_and(|trigger| trigger.action.lingers());
        let (hold, mut lease_end) = self.acquire(die, linger_here).await?;
        let acquired_at = now_nanos();
        if let (true, Hold::Ours(guard)) = (die, &hold) {
            // A lock handed over by a release runs for the waiter's place lease until the
            // watchdog's first extension, which lowers the deadline to the lease asked for
            // before it goes out (and may shorten the key): a holder killed after that held no
            // longer than the lower deadline. Die with it settled, so that `check` counts the
            // holding to the deadline the holder had when it died.
            let lease = Duration::from_millis(self.plan.lease_ms);
            lease_end = Some(check_time(settled_deadline(guard, lease).await));
        }
        let token = match &hold {
            Hold::Ours(guard) => Some(guard.fencing_token()),
            Hold::Legacy => None,
        };
        let tokens = match &hold {
            Hold::Ours(guard) => guard.fencing_tokens(),
            Hold::Legacy => Vec::new(),
        };
        self.emit(&Event::Acquired {
            worker: self.worker.clone(),
            seq,
            token,
            tokens: tokens.clone(),
            at: acquired_at,
            lease_end: lease_end.unwrap_or(acquired_at),
        })
        .await;
        if die {
            // A crash while holding; for a lock taken in steps it came in the middle.
            let _ = raise(Signal::SIGKILL);
        }
        // When the loss signal fires (0: not yet).
        let lost_at = Arc::new(AtomicU64::new(0));
        if let Hold::Ours(guard) = &hold {
            let lost = guard.lost();
            let lost_at = lost_at.clone();
            tokio::spawn(async move {
                if lost.await != LostReason::Released {
                    let _ = lost_at.compare_exchange(
                        0,
                        now_nanos(),
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
            });
        }

        let fencing = token.unwrap_or(0);
        // The largest step of the wall clock a long holder saw (ms).
        let mut wall_step: i64 = 0;
        let (read, value) = self.resource.read(fencing, self.shared).await;
        let read_refused_at = (read == Access::Refused).then(now_nanos);
        let action = strike.map(|trigger| trigger.action);
        let linger = action.is_some_and(Action::lingers);
        // What a long hold of `LingerWriting` did to the resource meanwhile.
        let mut work_state = Working {
            value,
            increments: 0,
            refused_at: None,
        };
        if let (Some(Action::LingerWriting), Hold::Ours(guard)) = (action, &hold) {
            // A lock handed over to a waiter runs for its place lease (2 s) until the
            // watchdog's first extension gives it the lease asked for: the fault strikes in
            // the lease asked for.
            let lease = Duration::from_millis(self.plan.lease_ms);
            extended_deadline(guard, lease).await;
        }
        let work = if linger {
            self.emit(&Event::Lingering {
                worker: self.worker.clone(),
            })
            .await;
            Duration::from_millis(self.plan.lease_ms * 2)
        } else {
            Duration::from_micros(self.plan.hold_us)
        };
        match &hold {
            // The work stops the moment the lock is lost.
            Hold::Ours(guard) => {
                let renewals = async {
                    // A long hold says when its renewals move its lease end, so that if its
                    // process is killed `check` knows how long it held; and it watches its
                    // wall clock against the monotonic one (a step shows there).
                    let mut deadline = guard.lease_deadline();
                    let skew = || wall_ms() - (now_nanos() / 1_000_000) as i64;
                    let base = skew();
                    loop {
                        tokio::time::sleep(RENEWAL_WATCH).await;
                        let step = skew() - base;
                        if step.abs() > wall_step.abs() {
                            wall_step = step;
                        }
                        let now = guard.lease_deadline();
                        if now > deadline {
                            deadline = now;
                            self.emit(&Event::Renewed {
                                worker: self.worker.clone(),
                                lease_end: check_time(now),
                            })
                            .await;
                        }
                    }
                };
                let writing = action == Some(Action::LingerWriting)
                    && !self.shared
                    && read == Access::Accepted;
                let working = self.work_on(fencing, &mut work_state);
                tokio::select! {
                    _ = renewals, if linger => {}
                    _ = working, if writing => {}
                    _ = tokio::time::sleep(work) => {}
                    reason = guard.lost() => {
                        if reason != LostReason::Released {
                            let _ = lost_at.compare_exchange(0, now_nanos(), Ordering::SeqCst, Ordering::SeqCst);
                        }
                    }
                }
            }
            Hold::Legacy => tokio::time::sleep(work).await,
        }
        let value = work_state.value;
        let knows_lost = match &hold {
            Hold::Ours(guard) => guard.lost_reason().is_some(),
            Hold::Legacy => false,
        };
        if action == Some(Action::Pause) {
            // Stopped between its last look at the lease and its write: the worst moment.
            self.emit(&Event::Pausing {
                worker: self.worker.clone(),
            })
            .await;
            let _ = raise(Signal::SIGSTOP);
        }
        let write = if work_state.refused_at.is_some() {
            Access::Refused
        } else if self.shared || knows_lost || read != Access::Accepted {
            Access::Skipped
        } else {
            self.resource.write(fencing, value + 1).await
        };
        let refused_at = read_refused_at
            .or(work_state.refused_at)
            .or_else(|| (write == Access::Refused).then(now_nanos));
        let end = now_nanos();
        let lease_end = match &hold {
            Hold::Ours(guard) => Some(check_time(guard.lease_deadline())),
            Hold::Legacy => None,
        };
        // Said before the release goes out: the next holder may be a task of this process
        // that is to kill it (holder-kill), before this task's `Held` line is written.
        let lost_by_end = match lost_at.load(Ordering::SeqCst) {
            0 => None,
            at => Some(at).filter(|&at| at <= end),
        };
        self.emit(&Event::Releasing {
            worker: self.worker.clone(),
            at: end,
            lease_end,
            lost_at: lost_by_end,
        })
        .await;
        let release = match (hold, &self.lock) {
            (Hold::Ours(guard), _) => match guard.release().await {
                Ok(()) => Release::Released,
                Err(err) if err.is_not_held() => Release::NotHeld,
                Err(_) => Release::Failed,
            },
            (Hold::Legacy, Lock::Legacy(lock)) => lock.release().await.unwrap_or(Release::Failed),
            (Hold::Legacy, _) => Release::Failed,
        };
        let lost_at = match lost_at.load(Ordering::SeqCst) {
            0 => None,
            at => Some(at),
        };
        self.emit(&Event::Held(Holding {
            worker: self.worker.clone(),
            seq,
            shared: self.shared,
            token,
            tokens,
            acquired_at,
            lease_end,
            end,
            lost_at: lost_at.filter(|&at| at <= end),
            paused: action == Some(Action::Pause),
            lingered: linger,
            wall_step_ms: wall_step,
            refused_at,
            increments: work_state.increments,
            read,
            write,
            release,
        }))
        .await;
        Ok(())
    }

    /// Acquires, retrying through failed requests (a fault at work); returns the hold and,
    /// for a legacy lock, when its lease ends as it set it. A MultiLock takes a random part
    /// of its pool (`linger`: one with the pool's first name, where the faults strike); an
    /// acquisition that takes longer than the plan's deadline is said to be stuck, given up
    /// and tried again.
    async fn acquire(&self, die: bool, linger: bool) -> Result<(Hold, Option<u64>), String> {
        let mut failures = 0;
        let names = match &self.lock {
            Lock::Multi { pool, .. } => pick(pool, self.plan.names as usize, linger),
            _ => Vec::new(),
        };
        loop {
            // Err((retryable, message)): a request that failed for a fault at work is
            // retried; anything else ends the task.
            let outcome = match &self.lock {
                Lock::Ours(handle) => handle
                    .acquire()
                    .await
                    .map(|guard| {
                        let lease_end = check_time(guard.lease_deadline());
                        (Hold::Ours(Box::new(guard)), Some(lease_end))
                    })
                    .map_err(|err| (passing(&err), err.to_string())),
                Lock::Multi {
                    clients, broken, ..
                } => {
                    let lease = Duration::from_millis(self.plan.lease_ms);
                    let replication = self.plan.endpoint.settings().replication();
                    let take = async {
                        if *broken {
                            let options = redis_locks::LockOptions::default()
                                .lease(lease)
                                .watchdog(true);
                            super::legacy::caller_order_multilock(&clients[0], &names, options)
                                .await
                        } else {
                            Handle::multi_lock(clients, &names, lease, replication)?
                                .acquire()
                                .await
                        }
                    };
                    let started = tokio::time::Instant::now();
                    let limit = Duration::from_millis(self.plan.stuck_ms);
                    let taken = if limit.is_zero() {
                        take.await
                    } else {
                        match tokio::time::timeout(limit, take).await {
                            Ok(taken) => taken,
                            Err(_) => {
                                // Given up: dropping the acquisition releases what it took.
                                self.emit(&Event::Stuck {
                                    worker: self.worker.clone(),
                                    names: names.clone(),
                                    waited_ms: started.elapsed().as_millis() as u64,
                                })
                                .await;
                                continue;
                            }
                        }
                    };
                    taken
                        .map(|guard| {
                            let lease_end = check_time(guard.lease_deadline());
                            (Hold::Ours(Box::new(guard)), Some(lease_end))
                        })
                        .map_err(|err| (passing(&err), err.to_string()))
                }
                Lock::Legacy(lock) => lock
                    .acquire(|| {
                        if die {
                            let _ = raise(Signal::SIGKILL);
                        }
                    })
                    .await
                    .map(|lease_end| (Hold::Legacy, Some(lease_end)))
                    .map_err(|err| {
                        let retry = err.is_io_error()
                            || err.is_timeout()
                            || err.is_connection_dropped()
                            || err.is_connection_refusal();
                        (retry, err.to_string())
                    }),
            };
            match outcome {
                Ok(hold) => return Ok(hold),
                Err((true, message)) if failures < MAX_RETRIES => {
                    failures += 1;
                    self.emit(&Event::Retry {
                        worker: self.worker.clone(),
                        message,
                    })
                    .await;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err((_, message)) => return Err(message),
            }
        }
    }

    /// Works on the resource until it refuses: an increment (a write of the value plus one,
    /// then a read of it) every eighth of the lease, or every 50 ms if that comes sooner.
    /// Never ends.
    async fn work_on(&self, fencing: u64, state: &mut Working) {
        let every = Duration::from_millis(self.plan.lease_ms / 8)
            .clamp(Duration::from_millis(5), Duration::from_millis(50));
        loop {
            tokio::time::sleep(every).await;
            match self.resource.write(fencing, state.value + 1).await {
                Access::Accepted => state.increments += 1,
                Access::Refused => break,
                // The resource's own server is never faulted; a failed request is tried again.
                _ => continue,
            }
            match self.resource.read(fencing, false).await {
                (Access::Accepted, value) => state.value = value,
                (Access::Refused, _) => break,
                _ => state.value += 1,
            }
        }
        state.refused_at = Some(now_nanos());
        // Refused: it holds on, touching nothing, until it is told of the loss (or its hold
        // ends), as a holder of ours that depends on its renewals must be.
        std::future::pending::<()>().await;
    }

    /// Prints one event line.
    async fn emit(&self, event: &Event) {
        emit_line(event);
    }
}

/// A MultiLock's names for one acquisition: 2 to `most` of `pool` (all of them, if the pool is
/// that small), in a random order; with `first`, the pool's first name among them.
fn pick(pool: &[String], most: usize, first: bool) -> Vec<String> {
    use rand::Rng;
    use rand::seq::SliceRandom;
    let mut rng = rand::rng();
    let most = most.clamp(1, pool.len());
    let count = rng.random_range(most.min(2)..=most);
    let mut names: Vec<String> = pool.to_vec();
    names.shuffle(&mut rng);
    names.truncate(count);
    if first && !names.contains(&pool[0]) {
        names[0] = pool[0].clone();
        names.shuffle(&mut rng);
    }
    names
}

/// Prints one event line (stdout is flushed at every newline, so a line printed before a
/// SIGKILL reaches `check`).
fn emit_line(event: &Event) {
    use std::io::Write;
    let line = serde_json::to_string(event).expect("plain data serializes");
    // A closed stdout means `check` is gone; the worker is killed with it.
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Whether an acquire that failed with `err` is tried again: Redis unreachable or too slow,
/// no Redlock majority, or a state of a cluster or Sentinel set-up that passes with a
/// failover or a slot migration — the cluster down until a replica is promoted
/// (`CLUSTERDOWN`), a multi-key request during a slot's migration (`TRYAGAIN`), a replica
/// that lost its master (`MASTERDOWN`), a master demoted (`READONLY`), a master without the
/// replicas its `min-replicas-to-write` asks for (`NOREPLICAS`, until its replica has
/// caught up with it after a promotion).
fn passing(err: &Error) -> bool {
    match err {
        Error::Connection { .. } | Error::NoQuorum { .. } => true,
        Error::Redis { source, .. } => matches!(
            source.code(),
            Some("CLUSTERDOWN" | "TRYAGAIN" | "MASTERDOWN" | "READONLY" | "NOREPLICAS")
        ),
        _ => false,
    }
}

/// What a long holder did to the resource while it worked on it.
struct Working {
    /// The value it last read or wrote.
    value: u64,
    /// Increments the resource took.
    increments: u32,
    /// When the resource refused it.
    refused_at: Option<u64>,
}

/// This process's wall clock (which `client-clock-step` fakes), in Unix ms.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The guard's lease deadline once it is no later than `lease` from now (at once, unless the
/// lock was handed over and its first extension has not gone out yet; at most a second).
async fn settled_deadline(
    guard: &cli_support::primitive::Guard,
    lease: Duration,
) -> tokio::time::Instant {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let deadline = guard.lease_deadline();
        let now = tokio::time::Instant::now();
        if deadline <= now + lease || now >= give_up {
            return deadline;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits (at most a second) until the guard's lease runs for about `lease` from now: at
/// once, unless the lock was handed over with a shorter place lease and the watchdog's first
/// extension has not gone out yet.
async fn extended_deadline(guard: &cli_support::primitive::Guard, lease: Duration) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
    let slack = Duration::from_millis(100).min(lease / 4);
    loop {
        let now = tokio::time::Instant::now();
        if guard.lease_deadline() + slack >= now + lease || now >= give_up {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A tokio instant, past or future, on `check`'s clock (monotonic ns): that clock is read
/// between two readings of tokio's, and set against their midpoint.
fn check_time(instant: tokio::time::Instant) -> u64 {
    let before = tokio::time::Instant::now();
    let wall = now_nanos();
    let now = before + (tokio::time::Instant::now() - before) / 2;
    if instant >= now {
        wall + (instant - now).as_nanos() as u64
    } else {
        wall.saturating_sub((now - instant).as_nanos() as u64)
    }
}
