//! `Redlock`: one lock over N independent Redis masters, held while a majority grants it.
//!
//! The algorithm, the fencing-token construction with the argument for it, and what Redlock
//! assumes are in the crate documentation, "Redlock" (`crates/redis-locks/README.md`). In
//! short: every request (acquire, raise, extend, release, inspect) is one request per node,
//! sent to all at once through [`Quorum`] (each within the per-node timeout, read until the
//! outcome is decided); each node keeps a `Mutex` key (a first attempt asks each node in one
//! pipeline, `SET NX PX` + the counter's `INCR`, with no script where the node vouches for
//! its counter on that connection: `engine::string_lock::acquire_first_on`; a waiting attempt runs the
//! string-key engine's acquire script, with `acquire_first.lua` in front for a node's common case)
//! and `raise.lua` brings the fencing counters of the granting majority up to the chosen
//! token, in the background when a majority has it already. Waiters keep a place in line on
//! every node, and a release hands each node to its first waiter: one woken on the first
//! node holds once a majority handed it the lock ([`Contending`]). The lease core ([`Hold`](crate::lease::Hold) for
//! release and extend, the watchdog, `lost()`, the owed release) and the one acquire loop are
//! the same as every primitive's.

mod connect;
mod guard;
mod hold;
mod options;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt, stream::FuturesUnordered};
use rand::Rng;
use tokio::time::Instant;

use crate::node::quorum::{Answer, Answers, Quorum, count, unreachable};
pub use connect::{NODE_GRACE, NodeStart, RedlockNodes};
pub use guard::RedlockGuard;
use hold::{LineHold, RedlockHold};
pub use options::RedlockOptions;

use crate::client::Client;
use crate::engine::string_lock::{
    InLine, StringHold, acquire_first_on, acquire_on, clock_proposal, inspect, node_scripts,
};
use crate::error::{Error, Phase, Result, Vote};
use crate::key::LockKeys;
use crate::lease::{Lease, OwedRelease, lease_millis};
use crate::node::{Listener, LockScript, Node, Registered, Subscription};
use crate::state::LockState;
use crate::token::{FENCE_LUA, FencingToken, OwnerToken};
use crate::wait::{
    Contender, HandedOver, LOCK_LUA, Line, LocalQueue, Try, acquire, in_time, leave_queue, woken,
};

/// Bring a node's counter up to the chosen token, owner-checked: `1` / `0` gone / `-1` taken.
pub(crate) static RAISE: LazyLock<LockScript> =
    LazyLock::new(|| LockScript::new(&[FENCE_LUA, LOCK_LUA, include_str!("raise.lua")]));
inventory::submit!(Registered(|| &RAISE));

/// A lock over N independent Redis masters (the Redlock algorithm), held while a majority of
/// them grants it, with fencing tokens that still grow from one holder to the next. See the
/// crate documentation's "Redlock" section for the algorithm, the argument for the tokens and
/// what it assumes.
///
/// The handle is cheap to clone; each acquisition has a fresh owner token, used on every
/// node. The nodes are [`Client`]s, one per server, in a fixed order: the first node's
/// wake-ups wake waiters, and the first client's watchdog renews leases.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let servers = test_support::start_many(3)?;
/// use std::time::Duration;
/// use redis_locks::{Client, Redlock, RedlockOptions};
///
/// let mut clients = Vec::new();
/// for server in &servers {
///     clients.push(Client::connect(&server.url()).await?);
/// }
/// let options = RedlockOptions::default().lease(Duration::from_secs(10));
/// let lock = Redlock::with_options(&clients, "jobs:nightly", options)?;
/// let guard = lock.lock_timeout(Duration::from_secs(1)).await?;
/// assert!(lock.try_lock().await.unwrap_err().is_held());
/// let state = lock.state().await?;
/// assert_eq!(state.holder(), Some(guard.owner_token().as_str()));
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    clients: Arc<[Client]>,
    keys: Arc<LockKeys>,
    hold: Arc<RedlockHold>,
    options: RedlockOptions,
    /// The lease in milliseconds, as the acquire script takes it.
    lease_ms: Arc<str>,
    /// A waiter's place lease in milliseconds, as the acquire script takes it.
    place_ms: Arc<str>,
    /// Whether the scripts were loaded on a majority of nodes (again after a node failed:
    /// it may have restarted with an empty script cache).
    scripts_loaded: Arc<AtomicBool>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("name", &self.name())
            .field("nodes", &self.hold.quorum.nodes().len())
            .field("options", &self.options)
            .finish()
    }
}

impl Redlock {
    /// Connects to the independent Redis masters of a Redlock, all at once, each client with
    /// [`Redlock::node_options`]. Returns as soon as a majority has connected and every other node has
    /// connected, failed, or had [`NODE_GRACE`] more; a node down or late gets a client that
    /// connects on its first request (a Redlock renewal then puts the holder's key back on it
    /// once it answers). A node that refuses the connection is down at once, so a minority down
    /// costs the start nothing, and a paused one costs the grace.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let mut servers = test_support::start_many(3)?;
    /// # servers[2].kill();
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// use redis_locks::{NodeStart, Redlock};
    ///
    /// let nodes = Redlock::connect_nodes(&urls).await?; // the third server is down
    /// assert!(matches!(nodes.starts[2], NodeStart::Down(_)));
    /// let lock = Redlock::new(&nodes.clients, "jobs:nightly")?;
    /// lock.try_lock().await?.release().await?; // two of three grant: a majority
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidNodes`] for no URL, an even number of them, or one given twice (checked
    /// before anything connects; [`Redlock::new`] also finds one server behind two URLs);
    /// [`Error::InvalidUrl`] for a URL that cannot be used; what a node said when it answered
    /// but refused the client before the grace ended, a minority node too ([`Error::Auth`],
    /// [`Error::NotRedis`], ...: a misconfigured node is reported, not taken as down; one that
    /// answers only after the grace is [`NodeStart::Late`]); with no majority reachable,
    /// [`Error::NoQuorum`] with [`Phase::Connect`] and every node's
    /// state: connected, its error, or still connecting.
    pub async fn connect_nodes(urls: &[impl AsRef<str>]) -> Result<RedlockNodes> {
        Redlock::connect_nodes_with(urls, Redlock::node_options()).await
    }

    /// As [`Redlock::connect_nodes`], with `options` for every node's client instead of
    /// [`Redlock::node_options`] (other timeouts, say). Keep
    /// [`reconnect_attempts(0)`](crate::ClientOptions::reconnect_attempts) unless you have a
    /// reason: with attempts, a node that refuses connections is only found down after them,
    /// and each request to it waits them out.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// # let urls: Vec<String> = servers.iter().map(|server| server.url()).collect();
    /// use std::time::Duration;
    /// use redis_locks::Redlock;
    ///
    /// let options = Redlock::node_options().connect_timeout(Duration::from_millis(500));
    /// let nodes = Redlock::connect_nodes_with(&urls, options).await?;
    /// assert_eq!(nodes.clients[0].options().get_connect_timeout(), Duration::from_millis(500));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Redlock::connect_nodes`].
    pub async fn connect_nodes_with(
        urls: &[impl AsRef<str>],
        options: crate::ClientOptions,
    ) -> Result<RedlockNodes> {
        connect::connect_nodes(urls, options).await
    }

    /// The client options for a Redlock's nodes: the defaults, with no reconnect attempts
    /// (see [`ClientOptions::reconnect_attempts`](crate::ClientOptions::reconnect_attempts)):
    /// a request to a node that refuses connections fails at once, and the majority decides
    /// rather than one node's back-off. [`Redlock::connect_nodes`] uses them.
    ///
    /// ```
    /// assert_eq!(redis_locks::Redlock::node_options().get_reconnect_attempts(), 0);
    /// ```
    pub fn node_options() -> crate::ClientOptions {
        connect::node_options()
    }

    /// A Redlock handle for the lock `name` over the servers of `clients`, with default
    /// options (a 30 s lease renewed by a watchdog, a 1 s per-node timeout).
    ///
    /// # Errors
    /// [`Error::InvalidNodes`] for no clients, an even number of them, or one server given
    /// twice; [`Error::InvalidName`] as for [`Client::mutex`].
    pub fn new(clients: &[Client], name: &str) -> Result<Redlock> {
        Redlock::with_options(clients, name, RedlockOptions::default())
    }

    /// A Redlock handle for the lock `name` with the given options.
    ///
    /// # Errors
    /// As [`Redlock::new`]; also [`Error::InvalidDuration`] as [`RedlockOptions::check`]
    /// says.
    pub fn with_options(
        clients: &[Client],
        name: &str,
        options: RedlockOptions,
    ) -> Result<Redlock> {
        check_nodes(clients)?;
        options.check()?;
        if let Some(replication) = options.get_lease_options().get_replication() {
            return Err(Error::Unsupported {
                what: format!("{replication:?} on a Redlock"),
                detail: "a Redlock's nodes are independent masters, each without replicas to \
                         wait for; its majority is its replication"
                    .into(),
            });
        }
        let keys = Arc::new(clients[0].keys(name)?);
        let nodes: Vec<_> = clients.iter().map(|client| client.node().clone()).collect();
        let holds = nodes
            .iter()
            .map(|node| {
                Arc::new(StringHold {
                    node: node.clone(),
                    keys: keys.clone(),
                    // Each node's release hands the lock to its first waiter, under the token
                    // the releasing client proposes, so that the nodes hand over under one.
                    hands_over: true,
                    proposes: true,
                })
            })
            .collect();
        let hold = RedlockHold {
            quorum: Arc::new(Quorum::new(nodes, options.get_node_timeout())),
            nodes: holds,
            restoring: tokio::sync::watch::Sender::new(0),
        };
        Ok(Redlock {
            clients: clients.into(),
            keys,
            hold: Arc::new(hold),
            lease_ms: lease_millis(options.get_lease())?.to_string().into(),
            place_ms: options
                .get_wait_options()
                .get_place_lease()
                .as_millis()
                .to_string()
                .into(),
            scripts_loaded: Arc::new(AtomicBool::new(false)),
            options,
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// The Redis keys behind this lock, the same on every node.
    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    /// How many nodes must grant the lock: a majority.
    pub fn quorum(&self) -> usize {
        self.hold.quorum.needed()
    }

    /// Waits until the requests this lock left running in the background are done, so that
    /// a process about to exit leaves no node keeping the key until its lease ends (an
    /// exiting runtime drops those tasks, and a request not yet written is never sent). They
    /// are:
    /// - the releases of the nodes after the majority ([`RedlockGuard::release`] returns
    ///   once a majority has released);
    /// - the raise of a node behind on tokens, and the keys a renewal restores on nodes that
    ///   lost them;
    /// - the release of a guard dropped without [`RedlockGuard::release`], and the one an
    ///   acquisition cancelled after its requests went out owes.
    ///
    /// Each request is bounded by the per-node timeout, so this returns within about that
    /// long after the last one began (a node that is down costs up to that), and up to three
    /// times that for a guard dropped during a renewal: its release waits for the renewal,
    /// then for the keys that renewal restores.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let servers = test_support::start_many(3)?;
    /// use redis_locks::{Client, Redlock};
    ///
    /// let mut clients = Vec::new();
    /// for server in &servers {
    ///     clients.push(Client::connect(&server.url()).await?);
    /// }
    /// let lock = Redlock::new(&clients, "jobs:nightly")?;
    /// lock.lock().await?.release().await?;
    /// lock.settle().await; // every node's release is done: safe to exit
    /// let state = lock.state().await?;
    /// assert!(state.nodes.iter().all(|node| matches!(&node.state, Ok(s) if s.holder.is_none())));
    /// # Ok(()) }
    /// ```
    pub async fn settle(&self) {
        self.hold.quorum.settled().await;
    }

    /// Tries once to take the lock on a majority.
    ///
    /// # Errors
    /// [`Error::Held`] when other owners hold it on too many nodes, with how long until
    /// enough of their leases end; [`Error::NoQuorum`] when too many nodes did not answer or
    /// failed; [`Error::Connection`] when grants kept coming back after their validity.
    ///
    /// # Cancel safety
    /// If the future is dropped after the requests went out, whatever the nodes granted is
    /// released by owner token in a background task.
    pub async fn try_lock(&self) -> Result<RedlockGuard> {
        match self.attempt(None, Some(Instant::now()), true).await?.0 {
            Try::Won(lease) => Ok(RedlockGuard::new(lease)),
            Try::Held(retry_after) => Err(Error::Held {
                name: self.name().to_string(),
                retry_after,
            }),
        }
    }

    /// Waits as long as it takes to take the lock.
    ///
    /// # Errors
    /// As [`Redlock::try_lock`], except that a held lock is waited for.
    ///
    /// # Cancel safety
    /// As [`Redlock::try_lock`].
    pub async fn lock(&self) -> Result<RedlockGuard> {
        self.acquire_until(None).await
    }

    /// Waits at most `wait` to take the lock; `Duration::ZERO` tries exactly once.
    ///
    /// # Errors
    /// [`Error::WaitTimeout`] when the lock stayed held for all of `wait`; otherwise as
    /// [`Redlock::try_lock`].
    ///
    /// # Cancel safety
    /// As [`Redlock::try_lock`].
    pub async fn lock_timeout(&self, wait: Duration) -> Result<RedlockGuard> {
        self.acquire_until(Instant::now().checked_add(wait)).await
    }

    /// Reads the lock's state on every node at once (each within the per-node timeout).
    ///
    /// # Errors
    /// None of its own: a node that fails or times out is reported in its
    /// [`NodeState::state`].
    pub async fn state(&self) -> Result<RedlockState> {
        let quorum = &self.hold.quorum;
        let keys = self.keys.clone();
        let answers = quorum
            .ask(
                0..quorum.nodes().len(),
                |_, node| {
                    let (node, keys) = (node.clone(), keys.clone());
                    async move { inspect(&node, &keys).await }
                },
                |_| false,
            )
            .await;
        let nodes = answers
            .into_iter()
            .zip(quorum.nodes())
            .map(|(answer, node)| NodeState {
                url: node.url().to_string(),
                state: match answer {
                    Some(Answer::Replied(state)) => Ok(state),
                    Some(Answer::Failed(err)) => Err(err),
                    Some(Answer::TimedOut) | None => Err(quorum.timed_out(Phase::Inspect)),
                },
            })
            .collect();
        Ok(RedlockState {
            quorum: quorum.needed(),
            nodes,
        })
    }

    async fn acquire_until(&self, deadline: Option<Instant>) -> Result<RedlockGuard> {
        let on = self.clients[0].wait_on(self.options.get_wait_options());
        let contending = Contending {
            lock: self,
            place: None,
            poll: None,
            others: Vec::new(),
            asking: None,
            ticket: None,
            nudging: None,
        };
        let lease = acquire(on, contending, deadline).await?;
        Ok(RedlockGuard::new(lease))
    }

    /// One attempt on all nodes; a grant whose validity was gone by the time it was proven
    /// is given back and asked again within `deadline` (the wait budget), as [`in_time`]
    /// says. With a refusal, how soon to look again when no wake-up is sure to come
    /// (see [`Refusal::poll`]). A first attempt (no `line`) asks `with_pttl` how long the
    /// holders' leases run (a try-once call reports it; a wait's refused first attempt is
    /// followed by a waiting attempt, whose script says it).
    async fn attempt(
        &self,
        line: Option<Waiting>,
        deadline: Option<Instant>,
        with_pttl: bool,
    ) -> Result<(Try, Option<Duration>)> {
        if !self.scripts_loaded.load(Ordering::Relaxed) {
            self.load_scripts().await;
        }
        let ask = |_| async {
            // A waiting attempt asks with its line's token, which it registers for a release to
            // hand the lock to (and a key handed to it already is granted again); armed all
            // the same: a dropped attempt releases what it may have been granted.
            let owed = match &line {
                Some(waiting) => {
                    let mut owed =
                        OwedRelease::of_line(self.line_hold(&waiting.ids), waiting.owner.clone());
                    owed.arm();
                    owed
                }
                None => OwedRelease::new(self.hold.clone()),
            };
            let sent_at = Instant::now();
            match self.ask(&owed, sent_at, line.as_ref(), with_pttl).await {
                Ok(Try::Won(token)) => Ok(Try::Won((owed, token))),
                Ok(Try::Held(outcome)) => {
                    // Whatever may have been granted was released already.
                    owed.disarm();
                    Ok(Try::Held(outcome?))
                }
                Err(err) => {
                    owed.give_back().await;
                    Err(err)
                }
            }
        };
        // A late grant is given back at once (by the line's token, for a waiting attempt: what
        // was handed to it is then handed on).
        let give_back = |(owed, _token): (OwedRelease, u64), _give_up| owed.give_back();
        let lease_options = self.options.get_lease_options();
        match in_time(lease_options, deadline, 0, ask, give_back).await? {
            Try::Won(((owed, token), sent_at)) => {
                let token = FencingToken::new(token);
                let renewals = self.clients[0].renewals();
                let lease = Lease::new(owed, token, sent_at, lease_options, renewals);
                Ok((Try::Won(lease), None))
            }
            Try::Held(refusal) => Ok((Try::Held(refusal.lease_ends), refusal.poll)),
        }
    }

    /// Loads the scripts on every node at once, done when a majority has them; a node that
    /// answers later still loads them before it runs the attempt sent after (the same
    /// connection). Without this, the first attempt on a node whose reply comes after the
    /// decision would be dropped in its `NOSCRIPT` fallback, and never grant there.
    async fn load_scripts(&self) {
        let quorum = &self.hold.quorum;
        let needed = quorum.needed();
        let answers = quorum
            .ask(
                0..quorum.nodes().len(),
                |_, node| {
                    let node = node.clone();
                    async move {
                        let [acquire, release, extend] = node_scripts();
                        node.load_scripts(&[acquire, release, extend, &RAISE]).await
                    }
                },
                |answers| count(answers, |()| true) >= needed,
            )
            .await;
        if count(&answers, |()| true) >= needed {
            self.scripts_loaded.store(true, Ordering::Relaxed);
        }
    }

    /// Asks every node for the lock with `owed`'s owner token, then raises the fencing
    /// counter on the granting majority: granted (a majority has its fencing counter at the
    /// token, not yet checked against the validity), or refused (no majority granted, and
    /// whatever may have been granted was released: how long to wait before the next
    /// attempt, or that no majority can be reached, [`Error::NoQuorum`]).
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when a majority granted but the token could not be raised on a
    /// majority: nothing was released yet.
    async fn ask(
        &self,
        owed: &OwedRelease,
        sent_at: Instant,
        line: Option<&Waiting>,
        with_pttl: bool,
    ) -> Result<Try<u64, Result<Refusal>>> {
        let quorum = &self.hold.quorum;
        let total = quorum.nodes().len();
        let needed = quorum.needed();
        let owner: Arc<str> = owed.owner().as_str().into();
        let keys = self.keys.clone();
        let lease_ms = self.lease_ms.clone();
        // The proposed token: this host's clock in µs. The script numbers a grant
        // `max(counter + 1, proposal)`: nodes whose counters are behind it all grant exactly
        // it, and then no raise is needed.
        let proposal: Arc<str> = clock_proposal().to_string().into();
        // A first attempt asks each node in one pipeline, with no script where the node
        // vouches for its counter: the counters advance together (every attempt increments
        // every node it reaches), so counters that agreed still agree.
        let first = line.is_none();
        let (mut answers, mut late): (Answers<Try<u64>>, _) = quorum
            .ask_keeping(
                0..total,
                |index, node| {
                    let (node, keys, owner, lease_ms, proposal) = (
                        node.clone(),
                        keys.clone(),
                        owner.clone(),
                        lease_ms.clone(),
                        proposal.clone(),
                    );
                    // Waiters keep their place on every node, under that node's waiter id, with
                    // the line's token registered for a release to hand the lock to.
                    let line = line.map(|line| (line.clone(), self.place_ms.clone()));
                    async move {
                        if first {
                            return acquire_first_on(
                                &node, &keys, &owner, &lease_ms, &proposal, with_pttl,
                            )
                            .await;
                        }
                        let in_line = line.as_ref().map(|(line, place_ms)| InLine {
                            waiter: &line.ids[index],
                            place_ms,
                            mark: line.mark,
                            wake_only: true,
                            nonce: Some(&line.nonce),
                            ticket: &line.ticket,
                        });
                        acquire_on(&node, &keys, &owner, &lease_ms, &proposal, in_line).await
                    }
                },
                |answers| {
                    let held = count(answers, |grant| matches!(grant, Try::Held(_)));
                    let granted = count(answers, |grant| matches!(grant, Try::Won(_)));
                    if granted >= needed {
                        return true;
                    }
                    // A refused waiting attempt hears every node out (each within the node
                    // timeout): a node that refused needs no release, and one that did not
                    // answer would (the waiter sleeps until a wake-up after it anyway, and
                    // one that comes meanwhile is heard, its listener made before).
                    let answered = answers.iter().filter(|answer| answer.is_some()).count();
                    total - held - unreachable(answers) < needed && (first || answered == total)
                },
            )
            .await;
        if answers
            .iter()
            .any(|answer| matches!(answer, Some(Answer::Failed(_))))
        {
            // A node failed: it may come back restarted, without the scripts.
            self.scripts_loaded.store(false, Ordering::Relaxed);
        }
        if granted(&answers).len() < needed {
            // The requests still under way are released with the rest.
            drop(late);
            return Ok(Try::Held(self.refused(owed, answers, sent_at).await));
        }
        // Won: the attempt ends here, with the answers in so far. The requests still under way
        // are dropped: a late node whose request was written already still takes its grant
        // when it runs it (the lock then stands there too); one not yet written never is (nor
        // a `NOSCRIPT` fallback or a vouching script, which could land after the release).
        // The release goes to every node either way. A late grant is neither counted nor
        // raised: the fencing counters that decide the next holder's token are those of a
        // majority, and every majority shares a node with the one raised below (the argument
        // is in the crate README, "Redlock").
        late.take_ready(&mut answers);
        drop(late);
        let grants = granted(&answers);
        let (token, behind) = highest(&grants).unwrap_or_default();
        let at_token = grants.len() - behind.len();
        let raise = self.raise(&owner, token);
        if at_token >= needed {
            // A majority has the token already, which is all its order needs. The nodes
            // behind are raised all the same, in the background, so that the next attempt's
            // counters agree again and it needs no raise of its own.
            quorum.send(behind.iter().copied(), raise, None);
            return Ok(Try::Won(token));
        }
        let raised: Answers<i64> = quorum
            .ask(behind.iter().copied(), raise, |raised| {
                let done = count(raised, |reply| *reply == 1);
                let refused = behind.len() - done - unasked_open(raised, &behind);
                at_token + done >= needed || at_token + behind.len() - refused < needed
            })
            .await;
        let done = count(&raised, |reply| *reply == 1);
        if at_token + done >= needed {
            // Nodes that had not answered keep whatever they grant. The release goes to every
            // node (after the acquire, on each node's connection), so a late grant is
            // released with the rest.
            return Ok(Try::Won(token));
        }
        // The keys ran out (or nodes failed) between the grant and the raise: give it all back.
        // Each node's vote: the raise's answer where one was asked, else the acquire's.
        let mut raised = raised;
        let mut merged: Answers<Try<u64>> = answers;
        for index in &behind {
            merged[*index] = match raised[*index].take() {
                Some(Answer::Replied(1)) => Some(Answer::Replied(Try::Won(token))),
                Some(Answer::Replied(_)) => Some(Answer::Replied(Try::Held(None))),
                Some(Answer::TimedOut) => Some(Answer::TimedOut),
                Some(Answer::Failed(err)) => Some(Answer::Failed(err)),
                None => None,
            };
        }
        let votes = quorum.votes(merged, |grant| match grant {
            Try::Won(_) => Vote::Granted,
            Try::Held(retry_after) => Vote::Held { retry_after },
        });
        Err(Error::NoQuorum {
            name: self.name().to_string(),
            phase: Phase::Acquire,
            needed,
            votes,
        })
    }

    /// The request that brings a node's fencing counter up to `token`, owner-checked for
    /// `owner` (`raise.lua`): `1` raised, `0` gone, `-1` taken.
    fn raise(
        &self,
        owner: &Arc<str>,
        token: u64,
    ) -> impl Fn(usize, &Node) -> BoxFuture<'static, Result<i64>> + use<> {
        let (keys, owner, chosen) = (self.keys.clone(), owner.clone(), token.to_string());
        move |_, node: &Node| {
            let (node, keys, owner, chosen) =
                (node.clone(), keys.clone(), owner.clone(), chosen.clone());
            async move {
                node.run_script::<i64>(
                    Phase::Acquire,
                    &RAISE,
                    &[keys.lock(), keys.fence()],
                    &[&owner, &chosen],
                )
                .await
            }
            .boxed()
        }
    }

    /// The hold of a lock taken by the line whose waiter ids are `places` (see [`LineHold`]).
    fn line_hold(&self, places: &Arc<[Arc<str>]>) -> Arc<LineHold> {
        Arc::new(LineHold {
            hold: self.hold.clone(),
            places: places.clone(),
        })
    }

    /// This process's waiter id on each node, in the nodes' order, for the line whose id is
    /// `line` (its random part, then `@` and each node's client address, so that each node's
    /// wake-ups for it go to its client there alone).
    fn waiter_ids(&self, line: &str) -> Arc<[Arc<str>]> {
        let base = line.rsplit_once('@').map_or(line, |(base, _)| base);
        self.hold
            .quorum
            .nodes()
            .iter()
            .map(|node| format!("{base}@{}", node.address()).into())
            .collect()
    }

    /// A failed attempt: release whatever may have been granted (every node but those that
    /// refused), and say how long the holders' leases run and how soon to look again, or that
    /// no majority can be reached.
    async fn refused(
        &self,
        owed: &OwedRelease,
        answers: Answers<Try<u64>>,
        sent_at: Instant,
    ) -> Result<Refusal> {
        let quorum = &self.hold.quorum;
        let (total, needed) = (quorum.nodes().len(), quorum.needed());
        let all_refused = count(&answers, |grant| matches!(grant, Try::Held(_))) == total;
        if !all_refused {
            // Awaited, so that the next attempt does not find this one's keys.
            let maybe_granted = (0..total)
                .filter(|index| !matches!(answers[*index], Some(Answer::Replied(Try::Held(_)))));
            self.release_now(owed, maybe_granted.collect()).await;
        }
        let unreachable = unreachable(&answers);
        if unreachable > total - needed {
            return Err(Error::NoQuorum {
                name: self.name().to_string(),
                phase: Phase::Acquire,
                needed,
                votes: quorum.votes(answers, |grant| match grant {
                    Try::Won(_) => Vote::Granted,
                    Try::Held(retry_after) => Vote::Held { retry_after },
                }),
            });
        }
        // The lock can be taken once enough holders' leases end: of the nodes held, all but
        // as many as may stay held.
        let mut leases: Vec<Option<Duration>> = answers
            .iter()
            .filter_map(|answer| match answer {
                Some(Answer::Replied(Try::Held(left))) => Some(*left),
                _ => None,
            })
            .collect();
        leases.sort_by_key(|left| left.unwrap_or(Duration::MAX));
        let must_end = (leases.len() + unreachable + needed)
            .saturating_sub(total)
            .max(1);
        let lease_ends = leases.get(must_end - 1).copied().flatten();
        // Only a release on the first node wakes the waiters (they listen there). When it
        // refused, its holder's release will wake this waiter. Otherwise no wake-up is sure to
        // come: look again at random around the retry delay while others may hold a majority,
        // or after about two attempts' time when no majority was held by others (the votes
        // split between contenders: they then rarely meet again).
        let first_held = matches!(answers[0], Some(Answer::Replied(Try::Held(_))));
        let poll = match () {
            () if first_held => None,
            () if leases.len() >= needed => Some(self.options.get_lock_options().get_retry_delay()),
            () => {
                Some((sent_at.elapsed() * 2).min(self.options.get_lock_options().get_retry_delay()))
            }
        };
        let poll = poll.map(|delay| delay / 2 + delay.mul_f64(rand::rng().random_range(0.0..1.0)));
        Ok(Refusal { lease_ends, poll })
    }

    /// Releases this attempt's owner token on `nodes` and waits for the answers (each within
    /// the per-node timeout); failures are only logged: the lease ends those keys.
    async fn release_now(&self, owed: &OwedRelease, nodes: Vec<usize>) {
        let owner = owed.owner().clone();
        let holds = &self.hold.nodes;
        // One proposal for every node: what they hand on, they hand under one token.
        let proposal: Arc<str> = clock_proposal().to_string().into();
        self.hold
            .quorum
            .ask(
                nodes,
                |index, _| {
                    let (hold, owner) = (holds[index].clone(), owner.clone());
                    let proposal = proposal.clone();
                    async move { hold.release_proposing(&owner, Some(&proposal)).await }
                },
                |_| false,
            )
            .await;
    }
}

/// A refused attempt: how long the holders' leases still run, as far as the nodes said
/// (the lock can be taken once enough of them end), and how soon to look again when no
/// wake-up is sure to come.
struct Refusal {
    lease_ends: Option<Duration>,
    /// `None`: the first node refused, and its holder's release will wake the waiter.
    poll: Option<Duration>,
}

/// The nodes that granted, with their tokens.
/// The highest token of `grants` (node index, token) and the nodes whose token is below it
/// (to be raised to it); `None` without grants.
fn highest(grants: &[(usize, u64)]) -> Option<(u64, Vec<usize>)> {
    let token = grants.iter().map(|(_, token)| *token).max()?;
    let behind = grants
        .iter()
        .filter(|(_, node_token)| *node_token < token)
        .map(|(index, _)| *index)
        .collect();
    Some((token, behind))
}

fn granted(answers: &Answers<Try<u64>>) -> Vec<(usize, u64)> {
    answers
        .iter()
        .enumerate()
        .filter_map(|(index, answer)| match answer {
            Some(Answer::Replied(Try::Won(token))) => Some((index, *token)),
            _ => None,
        })
        .collect()
}

/// How many of the nodes `asked` have not answered yet.
fn unasked_open<T>(answers: &Answers<T>, asked: &[usize]) -> usize {
    asked
        .iter()
        .filter(|index| answers[**index].is_none())
        .count()
}

/// Refuses a set of nodes that cannot form a quorum.
fn check_nodes(clients: &[Client]) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidNodes { reason });
    check_count(clients.len())?;
    // The same server may be reached by two URLs (127.0.0.1 and localhost, a database
    // number): each server's run_id, read when its client connected, tells.
    let namespace = clients[0].options().get_namespace();
    if let Some(other) = clients
        .iter()
        .find(|client| client.options().get_namespace() != namespace)
    {
        return invalid(format!(
            "the nodes' clients use different namespaces ({namespace:?}, {:?}): a lock's keys must be the same on every node",
            other.options().get_namespace()
        ));
    }
    let nodes: Vec<_> = clients.iter().map(Client::node).collect();
    for (index, node) in nodes.iter().enumerate() {
        let twice = nodes[..index].iter().find(|other| {
            other.url() == node.url()
                || (other.run_id().is_some() && other.run_id() == node.run_id())
        });
        if let Some(other) = twice {
            return invalid(format!(
                "the server {} is given twice (also as {}); a majority must be of independent servers",
                node.url(),
                other.url()
            ));
        }
    }
    Ok(())
}

/// Refuses a number of nodes that cannot form a quorum: none, or an even number.
pub(super) fn check_count(count: usize) -> Result<()> {
    let invalid = |reason: String| Err(Error::InvalidNodes { reason });
    if count == 0 {
        return invalid("no nodes given; a Redlock needs 1, 3, 5... independent servers".into());
    }
    if count.is_multiple_of(2) {
        return invalid(format!(
            "{count} nodes given; use an odd number (an even number tolerates no more failures than one fewer)"
        ));
    }
    Ok(())
}

/// A waiting attempt's place in line: this process's waiter id in the lock's queue on each
/// node, whether to mark a grant at once, and the line's owner token with this attempt's
/// nonce, registered with each place for a release to hand the lock to.
#[derive(Debug, Clone)]
struct Waiting {
    ids: Arc<[Arc<str>]>,
    mark: bool,
    owner: OwnerToken,
    nonce: Arc<str>,
    /// The line's ticket on every node (see [`Contending::ticket`]).
    ticket: Arc<str>,
}

/// A Redlock's side of the acquire loop: each attempt asks every node. Waiters of one process
/// take local turns (as a `Mutex`'s do) and keep one place in the lock's queue on every node
/// (under that node's waiter id, [`Redlock::waiter_ids`]), with their line's owner token
/// registered there, so that a release hands the lock, on each node, to the first waiter in
/// line there, under one fencing token (the releasing client's proposal). The waiter listens
/// on every node: woken on the first node with the lock handed to it, it holds the Redlock
/// once a majority of nodes has handed it the lock under the nonce of its latest attempt
/// ([`Contender::take_handed`]), without asking again. Where the nodes' first waiters
/// differ, or a message does not come in time, it asks again with the line's token, which a
/// key handed to it grants at once.
struct Contending<'a> {
    lock: &'a Redlock,
    /// The place in line this wait's attempts took on the first node, to be woken by.
    place: Option<Arc<str>>,
    /// How soon to look again without a wake-up, as the last refusal said.
    poll: Option<Duration>,
    /// The wake channel's subscription on every node but the first (in the nodes' order),
    /// with a listener made before the latest waiting attempt went out.
    others: Vec<(Subscription, Option<Listener>)>,
    /// The line's owner token and waiter ids of the latest waiting attempt, and how long that
    /// attempt took, until the lock is granted or handed to it.
    asking: Option<Asking>,
    /// The ticket this wait's place is numbered with on every node that gives it a new one:
    /// this host's clock in µs when the wait first got in line, so that the nodes order their
    /// lines alike (by when each waiter began to wait), and a release on each hands over to
    /// the same waiter. A place kept keeps its number.
    ticket: Option<Arc<str>>,
    /// The nudge of the latest refused waiting attempt, if one is pending (see
    /// [`Contending::nudge`]).
    nudging: Option<tokio::task::AbortHandle>,
}

/// What a waiting attempt registered on the nodes.
#[derive(Clone)]
struct Asking {
    owner: OwnerToken,
    ids: Arc<[Arc<str>]>,
    took: Duration,
}

impl Contending<'_> {
    /// One attempt, in `line`'s place on every node when it has one.
    async fn in_line(&mut self, line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        let Some(local) = line.local else {
            return self.once(None, deadline, true).await;
        };
        let lock = self.lock;
        local.placing(&lock.hold.quorum.nodes()[0], &lock.keys);
        self.place = Some(local.id().clone());
        self.stop_nudging();
        let nudges = self.listen_on_others().await;
        let (owner, nonce) = local.asking();
        let ids = lock.waiter_ids(local.id());
        let waiting = Waiting {
            ids: ids.clone(),
            mark: line.mark,
            owner: owner.clone(),
            nonce: nonce.to_string().into(),
            ticket: self
                .ticket
                .get_or_insert_with(|| clock_proposal().to_string().into())
                .clone(),
        };
        // Before the request goes out: the places the nodes renew count from no earlier.
        let sent_at = Instant::now();
        self.asking = Some(Asking {
            owner: owner.clone(),
            ids,
            took: Duration::ZERO,
        });
        // A won attempt keeps the place recorded: the majority may have granted without the
        // first node, whose queue then still holds it, and a stale place there would be woken
        // by every release instead of the waiters behind it. The place is left when this
        // process's last waiter of the lock is done (a leave that finds no place does nothing).
        let attempt = self.once(Some(waiting), deadline, false).await?;
        match &attempt {
            Try::Won(_) => {
                local.granted(&owner);
                self.asking = None;
            }
            Try::Held(_) => {
                let place_lease = lock.options.get_wait_options().get_place_lease();
                local.refused(&owner, nonce, sent_at, place_lease);
                let took = sent_at.elapsed();
                if let Some(asking) = &mut self.asking {
                    asking.took = took;
                    let ids = asking.ids.clone();
                    self.nudge(
                        nudges,
                        &ids,
                        owner.as_str(),
                        nonce,
                        self.gather_window(took),
                    );
                }
            }
        }
        Ok(attempt)
    }

    /// How long a waiter handed the lock on one node waits for the others' handovers: four
    /// of its attempts' round trips (`took`, the latest), at least [`GATHER_AT_LEAST`], at
    /// most the node timeout.
    fn gather_window(&self, took: Duration) -> Duration {
        (took * 4).clamp(GATHER_AT_LEAST, self.lock.options.get_node_timeout())
    }

    /// Wakes this waiter when another node hands the lock to `owner` under `nonce` (heard on
    /// `listeners`, made before the attempt, one per node after the first) and no handover on
    /// the first node, where the acquire loop listens, has been taken within `window` after:
    /// a `*` on the first node's wake channel in this client alone (no request), after which
    /// the waiter asks again with the line's token, which the nodes handed to it grant at
    /// once. Without it, a waiter handed a majority but not the first node (its first waiter
    /// differed) would keep those nodes until its place renewal.
    fn nudge(
        &mut self,
        listeners: Vec<Listener>,
        ids: &[Arc<str>],
        owner: &str,
        nonce: u64,
        window: Duration,
    ) {
        if listeners.is_empty() {
            return;
        }
        let first = self.lock.hold.quorum.nodes()[0].clone();
        let channel = self.lock.keys.wake_channel().to_string();
        let mut heard: FuturesUnordered<_> = listeners
            .into_iter()
            .zip(&ids[1..])
            .map(|(mut listener, id)| {
                let (id, owner) = (id.clone(), owner.to_string());
                async move {
                    loop {
                        if let Some(grant) = woken(&mut listener, Some(&id)).await
                            && grant.owner == owner
                            && grant.nonce == nonce
                        {
                            return;
                        }
                    }
                }
            })
            .collect();
        let task = tokio::spawn(async move {
            heard.next().await;
            tokio::time::sleep(window).await;
            if let Some(subscription) = first.subscribe_live(&channel) {
                subscription.wake_here();
            }
        });
        self.nudging = Some(task.abort_handle());
    }

    /// Stops the nudge of the latest attempt (see [`nudge`](Self::nudge)).
    fn stop_nudging(&mut self) {
        if let Some(nudging) = self.nudging.take() {
            nudging.abort();
        }
    }

    /// Listens on every node but the first (subscribing there the first time: a subscription
    /// that lingers from an earlier wait costs no request), from before the next attempt.
    /// Returns a second listener on each of those nodes, for [`nudge`](Self::nudge).
    async fn listen_on_others(&mut self) -> Vec<Listener> {
        let channel = self.lock.keys.wake_channel();
        if self.others.is_empty() {
            for node in &self.lock.hold.quorum.nodes()[1..] {
                // Not waited for: until the server confirms it, a handover on that node is
                // not heard, and the waiter asks again instead.
                let subscription = match node.subscribe_live(channel) {
                    Some(live) => live,
                    None => node.subscribe(channel, Duration::ZERO).await,
                };
                self.others.push((subscription, None));
            }
        }
        let mut nudges = Vec::new();
        for (subscription, listener) in &mut self.others {
            *listener = Some(subscription.listen());
            nudges.push(subscription.listen());
        }
        nudges
    }

    /// One attempt, remembering how soon to look again; a first attempt (no `waiting`) asks
    /// `with_pttl` how long the holders' leases run.
    async fn once(
        &mut self,
        waiting: Option<Waiting>,
        deadline: Option<Instant>,
        with_pttl: bool,
    ) -> Result<Try> {
        let (attempt, poll) = self.lock.attempt(waiting, deadline, with_pttl).await?;
        self.poll = poll;
        Ok(attempt)
    }

    /// The handovers to `handed`'s owner token under its nonce that the other nodes publish
    /// (besides the first node's, `handed`), as `(node, fencing token)`, gathered until a
    /// majority with the first node's, or until `window` has passed.
    async fn gather(
        &mut self,
        ids: &[Arc<str>],
        handed: &HandedOver,
        window: Duration,
    ) -> Vec<(usize, u64)> {
        let needed = self.lock.quorum();
        let mut grants = vec![(0, handed.token)];
        let mut pending: FuturesUnordered<_> = self
            .others
            .iter_mut()
            .enumerate()
            .filter_map(|(other, (_, listener))| {
                let (index, mut listener) = (other + 1, listener.take()?);
                let id = ids[index].clone();
                Some(async move {
                    loop {
                        if let Some(grant) = woken(&mut listener, Some(&id)).await
                            && grant.owner == handed.owner
                            && grant.nonce == handed.nonce
                        {
                            return (index, grant.token);
                        }
                    }
                })
            })
            .collect();
        let until = Instant::now() + window;
        while grants.len() < needed {
            match tokio::time::timeout_at(until, pending.next()).await {
                Ok(Some(grant)) => grants.push(grant),
                Ok(None) | Err(_) => break,
            }
        }
        grants
    }
}

impl Drop for Contending<'_> {
    /// A wait that ends without the lock (out of time, cancelled, failed) gives up its places
    /// on every node but the first (the first node's is the local queue's, see
    /// [`LocalQueue::leave`]) in the background, so that no later release there hands that
    /// node to it. Places only: the line's token may still be asked with by another waiter of
    /// this process, whose grant a release by that token here would undo; a node handed to it
    /// already keeps the key until the place lease it was handed for ends.
    fn drop(&mut self) {
        self.stop_nudging();
        let Some(asking) = self.asking.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let nodes = self.lock.hold.quorum.nodes()[1..].to_vec();
        let keys = self.lock.keys.clone();
        runtime.spawn(async move {
            let leaves = nodes
                .iter()
                .enumerate()
                .map(|(other, node)| leave_queue(node, &keys, &asking.ids[other + 1], None));
            futures_util::future::join_all(leaves).await;
        });
    }
}

impl Contender for Contending<'_> {
    fn kind(&self) -> crate::telemetry::Kind {
        crate::telemetry::Kind::Redlock
    }

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn channel(&self) -> &str {
        self.lock.keys.wake_channel()
    }

    async fn attempt(&mut self, line: Line<'_>, deadline: Option<Instant>) -> Result<Try> {
        self.in_line(line, deadline).await
    }

    async fn first(&mut self, deadline: Option<Instant>, line: Option<Line<'_>>) -> Result<Try> {
        match line {
            // This process waited for the lock a moment ago: get in line.
            Some(line) => self.in_line(line, deadline).await,
            // With a budget, a refusal may end the wait: then say how long the holders'
            // leases last (and name a key of another type). Without one, a refusal is
            // followed by a waiting attempt, whose script says both.
            None => self.once(None, deadline, deadline.is_some()).await,
        }
    }

    fn local_turns(&self) -> Option<&'static str> {
        Some(LOCAL_TURNS)
    }

    fn address(&self) -> Option<&str> {
        self.place.as_deref()
    }

    fn refresh(&self) -> Option<Duration> {
        let place = self.lock.options.get_wait_options().get_place_lease() / 3;
        Some(self.poll.map_or(place, |poll| poll.min(place)))
    }

    /// The first node handed the lock to this waiter's line: it holds the Redlock once a
    /// majority of nodes has (the others' messages are gathered for a few of its attempts'
    /// round trips), under the greatest of their tokens (the nodes behind it raised to it,
    /// awaited when fewer than a majority have it), with the lease the Mutex's handover has:
    /// counted from when the latest waiting attempt was sent, for its place lease (every node
    /// handing over under that attempt's nonce renewed the place then, and the handed key
    /// lasts until that place lease ends), then extended by the watchdog on a majority.
    async fn take_handed(&mut self, line: Line<'_>, handed: &HandedOver) -> Option<Lease> {
        let local: &LocalQueue = line.local?;
        self.stop_nudging();
        let asking = self.asking.clone()?;
        if handed.owner != asking.owner.as_str() {
            return None;
        }
        let lock = self.lock;
        let quorum = &lock.hold.quorum;
        let needed = quorum.needed();
        let window = self.gather_window(asking.took);
        let grants = self.gather(&asking.ids, handed, window).await;
        if grants.len() < needed {
            // Too few handovers heard: the next attempt asks with the line's token, which the
            // keys handed to it grant at once.
            return None;
        }
        let (token, behind) = highest(&grants)?;
        let at_token = grants.len() - behind.len();
        if !behind.is_empty() {
            let raise = lock.raise(&asking.owner.as_str().into(), token);
            if at_token >= needed {
                quorum.send(behind, raise, None);
            } else {
                let raised: Answers<i64> = quorum
                    .ask(behind, raise, |raised| {
                        at_token + count(raised, |reply| *reply == 1) >= needed
                    })
                    .await;
                if at_token + count(&raised, |reply| *reply == 1) < needed {
                    return None;
                }
            }
        }
        let lease_options = lock.options.get_lease_options();
        let (owner, placed) =
            local.take_handover(&handed.owner, handed.nonce, |placed_at, place_lease| {
                lease_options.takes_handover(placed_at, place_lease)
            })?;
        // The first node's place went with its handover.
        local.unplaced();
        self.asking = None;
        let owed = OwedRelease::of_line(lock.line_hold(&asking.ids), owner);
        Some(Lease::handed_over(
            owed,
            FencingToken::new(token),
            placed,
            lease_options,
            lock.clients[0].renewals(),
        ))
    }
}

/// The least time a waiter handed the lock on its first node waits for the other nodes'
/// handovers (more where its attempts take longer: four of their round trips).
const GATHER_AT_LEAST: Duration = Duration::from_millis(5);

/// The name of a Redlock's local turns.
const LOCAL_TURNS: &str = "redlock";

/// A Redlock's state on each node, read at once.
#[derive(Debug)]
#[non_exhaustive]
pub struct RedlockState {
    /// How many nodes must agree.
    pub quorum: usize,
    /// Each node's view, in the nodes' order.
    pub nodes: Vec<NodeState>,
}

/// One node's view of a Redlock.
#[derive(Debug)]
#[non_exhaustive]
pub struct NodeState {
    /// The node's URL, its password hidden.
    pub url: String,
    /// The lock's state there, or why it could not be read.
    pub state: Result<LockState>,
}

impl RedlockState {
    /// The owner token that a majority of nodes agree holds the lock, if any.
    pub fn holder(&self) -> Option<&str> {
        let owners: Vec<&str> = self
            .nodes
            .iter()
            .filter_map(|node| node.state.as_ref().ok()?.holder.as_ref())
            .map(|holder| holder.owner.as_str())
            .collect();
        owners
            .iter()
            .find(|owner| owners.iter().filter(|other| other == owner).count() >= self.quorum)
            .copied()
    }

    /// The greatest fencing counter of the nodes that answered: the next holder's token is
    /// greater than every token a holder had before.
    pub fn fencing_counter(&self) -> Option<FencingToken> {
        self.nodes
            .iter()
            .filter_map(|node| node.state.as_ref().ok()?.fencing_counter)
            .max()
    }
}

#[cfg(test)]
mod script_tests {
    use crate::node::undefined_calls;
    use crate::wait::PRELUDES;

    #[test]
    fn raise_carries_the_preludes_it_calls() {
        assert_eq!(
            undefined_calls(&super::RAISE, &PRELUDES, &[]),
            Vec::<String>::new()
        );
    }
}
