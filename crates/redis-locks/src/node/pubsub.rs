//! Wake-ups: one subscriber connection per [`Client`](crate::Client), shared by every waiter
//! in the process.
//!
//! Release scripts `PUBLISH` on the lock's wake channel (a name in the lock's slot, see
//! [`LockKeys::wake_channel`](crate::LockKeys::wake_channel)) when somebody waits: the id of
//! the first waiter in the lock's queue, or `*` for all. A waiter id that ends in
//! `@<address>` (see [`Wakeups::address`]) is addressed to one client: its wake-ups go to
//! that client's own channel of the lock, `<wake channel>:<address>` (same slot), so a release
//! reaches the one process it wakes instead of every process that waits (`wake` in
//! `lock.lua`). Each client subscribes to both channels of a lock at once, and hands the
//! messages of both to the same waiters. A background task owns the
//! subscriber connection: it subscribes to a channel while at least one waiter of this
//! process holds a [`Subscription`] to it, and for [`LINGER`] after the last one let go (so
//! that a process taking a contended lock again and again does not subscribe and unsubscribe
//! each time, and listens from its very first attempt); it fans each message out to those
//! waiters.
//! When the connection drops, the task wakes every waiter (a release may have been missed),
//! marks the subscriptions as not live — waiters then fall back to bounded, jittered polling —
//! and reconnects with backoff, restoring every subscription.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

/// The payload that wakes every waiter of a channel, whoever it is addressed to.
pub(crate) const WAKE_ALL: &str = "*";
/// Messages a waiter may fall behind by before it counts as woken anyway.
const BUFFER: usize = 64;
/// How long a channel stays subscribed after its last waiter let go.
pub(crate) const LINGER: Duration = Duration::from_secs(1);
/// Pause between reconnect attempts of the subscriber connection, doubling up to a second.
const RECONNECT_MIN: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Where the subscriber connection goes.
pub(crate) enum Source {
    /// One server: `SUBSCRIBE` there.
    Server(Box<redis::Client>),
    /// The current master of a Sentinel-watched name: `SUBSCRIBE` there, and again on the new
    /// master after a switch.
    Sentinel(super::sentinel::Master),
    /// A cluster: `SSUBSCRIBE` on the shard of each channel's slot, over a RESP3 cluster
    /// connection of its own, which redis-rs keeps subscribed across reconnects and slot
    /// moves.
    Cluster(Box<redis::cluster::ClusterClientBuilder>),
}

impl Source {
    /// The client of the server to subscribe on now, and what says that it changed.
    fn current(&self) -> (redis::Client, Option<watch::Receiver<u64>>) {
        match self {
            Source::Server(client) => ((**client).clone(), None),
            Source::Sentinel(master) => {
                // The receiver first: a switch between the two is then seen as a change.
                let switched = master.switched();
                (master.client(), Some(switched))
            }
            Source::Cluster(_) => unreachable!("a cluster subscribes in run_sharded"),
        }
    }
}

/// The handle a node keeps: asks the subscriber task for channels.
#[derive(Clone)]
pub(crate) struct Wakeups {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

struct Shared {
    /// This client's address: random, 16 lowercase hex characters.
    address: Arc<str>,
    channels: StdMutex<HashMap<String, Channel>>,
    /// How many channels `channels` holds, readable without the lock: an uncontended lock
    /// asks whether its channel is subscribed on every acquisition, and the answer is
    /// nearly always that none is.
    count: std::sync::atomic::AtomicUsize,
    /// Subscribe/unsubscribe round trips and reconnects, for the benchmark's request count.
    requests: std::sync::atomic::AtomicU64,
}

struct Channel {
    refs: usize,
    /// When the last reference was let go, while none is held (the channel lingers).
    idle_since: Option<Instant>,
    messages: broadcast::Sender<Arc<str>>,
    live: watch::Sender<bool>,
}

enum Command {
    Subscribe(String),
    /// A channel's last reference was let go: unsubscribe it once it has lingered.
    Idle,
}

impl Wakeups {
    /// Starts the (idle) subscriber task; it connects when the first channel is asked for.
    pub(crate) fn start(source: Source, connect_timeout: Duration) -> Wakeups {
        let shared = Arc::new(Shared {
            address: format!("{:016x}", rand::random::<u64>()).into(),
            channels: StdMutex::new(HashMap::new()),
            count: std::sync::atomic::AtomicUsize::new(0),
            requests: std::sync::atomic::AtomicU64::new(0),
        });
        let (commands, receiver) = mpsc::unbounded_channel();
        match source {
            Source::Cluster(builder) => {
                tokio::spawn(run_sharded(
                    shared.clone(),
                    *builder,
                    connect_timeout,
                    receiver,
                ));
            }
            source => {
                tokio::spawn(run(shared.clone(), source, connect_timeout, receiver));
            }
        }
        Wakeups { shared, commands }
    }

    /// This client's address: a waiter id ending in `@` and this is woken on this client's own
    /// channel of the lock (`<wake channel>:<address>`), which it listens to beside the
    /// lock's wake channel.
    pub(crate) fn address(&self) -> &Arc<str> {
        &self.shared.address
    }

    /// Registers interest in `channel` and waits up to `confirm_within` for the server to
    /// confirm the subscription. Past that the subscription is returned anyway, not live:
    /// its waiter polls until it becomes live.
    pub(crate) async fn subscribe(&self, channel: &str, confirm_within: Duration) -> Subscription {
        let (subscription, first) = self.register(channel);
        if first {
            let _ = self.commands.send(Command::Subscribe(channel.to_string()));
        }
        // The subscription exists before this wait, so a caller dropped during it still
        // gives its reference back.
        let mut live = subscription.live.clone();
        let _ = tokio::time::timeout(confirm_within, live.wait_for(|live| *live)).await;
        subscription
    }

    /// Counts one more reference to `channel`; true when it is the first.
    fn register(&self, channel: &str) -> (Subscription, bool) {
        let mut channels = self.shared.channels.lock().expect("never poisoned");
        let mut first = false;
        let entry = channels.entry(channel.to_string()).or_insert_with(|| {
            first = true;
            Channel {
                refs: 0,
                idle_since: None,
                messages: broadcast::channel(BUFFER).0,
                live: watch::channel(false).0,
            }
        });
        let subscription = self.reference(channel, entry);
        self.shared
            .count
            .store(channels.len(), std::sync::atomic::Ordering::Relaxed);
        (subscription, first)
    }

    /// A new reference to `channel`'s subscription if one is live already: no request is
    /// sent, so a waiter can listen before its very first attempt when others wait too.
    pub(crate) fn subscribe_live(&self, channel: &str) -> Option<Subscription> {
        if self.shared.count.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        let mut channels = self.shared.channels.lock().expect("never poisoned");
        let entry = channels.get_mut(channel)?;
        if !*entry.live.borrow() {
            return None;
        }
        Some(self.reference(channel, entry))
    }

    /// One more reference to the channel `entry`, counted.
    fn reference(&self, channel: &str, entry: &mut Channel) -> Subscription {
        entry.refs += 1;
        entry.idle_since = None;
        Subscription {
            channel: channel.to_string(),
            messages: entry.messages.clone(),
            live: entry.live.subscribe(),
            wakeups: self.clone(),
        }
    }

    /// Requests the subscriber connection has sent (SUBSCRIBE, UNSUBSCRIBE, reconnects).
    pub(crate) fn requests(&self) -> u64 {
        self.shared
            .requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One waiter's interest in a wake channel; the channel stays subscribed while any exists.
pub(crate) struct Subscription {
    channel: String,
    messages: broadcast::Sender<Arc<str>>,
    live: watch::Receiver<bool>,
    wakeups: Wakeups,
}

impl Subscription {
    /// The channel subscribed to.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Whether the server has confirmed the subscription and the connection is up: a release
    /// published from now on will reach [`Listener::next`].
    pub(crate) fn is_live(&self) -> bool {
        *self.live.borrow()
    }

    /// Wakes every listener of this channel in this client, as a `*` published on it would,
    /// without a request: for news only this process has (a guard of its own is done).
    pub(crate) fn wake_here(&self) {
        let _ = self.messages.send(Arc::from(WAKE_ALL));
    }

    /// Starts listening: the listener sees only messages published after this call, so make
    /// it *before* an attempt, and wait on it after the attempt failed.
    pub(crate) fn listen(&self) -> Listener {
        Listener {
            messages: self.messages.subscribe(),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.wakeups.shared.channels.lock().expect("never poisoned");
        if let Some(entry) = channels.get_mut(&self.channel) {
            entry.refs -= 1;
            if entry.refs == 0 {
                entry.idle_since = Some(Instant::now());
                let _ = self.wakeups.commands.send(Command::Idle);
            }
        }
    }
}

/// Messages of one channel from the moment [`Subscription::listen`] was called.
pub(crate) struct Listener {
    messages: broadcast::Receiver<Arc<str>>,
}

impl Listener {
    /// The next message published on the channel, in order; `None` when this listener fell
    /// behind (messages were dropped: count it as woken). Pending for ever once the channel
    /// is gone.
    pub(crate) async fn next(&mut self) -> Option<Arc<str>> {
        match self.messages.recv().await {
            Ok(payload) => Some(payload),
            Err(broadcast::error::RecvError::Lagged(_)) => None,
            // The channel entry is gone: nothing will ever arrive.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

impl Shared {
    fn count_request(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn wanted(&self) -> Vec<String> {
        let channels = self.channels.lock().expect("never poisoned");
        channels.keys().cloned().collect()
    }

    /// The channels to (un)subscribe for lock channels `names`: each with this client's own
    /// channel of the lock.
    fn with_own(&self, names: &[String]) -> Vec<String> {
        names
            .iter()
            .flat_map(|name| [name.clone(), format!("{name}:{}", self.address)])
            .collect()
    }

    /// The lock channel a message came on: `channel`, or the lock's wake channel when it is
    /// this client's own channel of the lock.
    fn lock_channel<'a>(&self, channel: &'a str) -> &'a str {
        channel
            .strip_suffix(&*self.address)
            .and_then(|rest| rest.strip_suffix(':'))
            .unwrap_or(channel)
    }

    fn is_wanted(&self, channel: &str) -> bool {
        let channels = self.channels.lock().expect("never poisoned");
        channels.contains_key(channel)
    }

    fn set_live(&self, names: &[String], live: bool) {
        let channels = self.channels.lock().expect("never poisoned");
        for name in names {
            if let Some(entry) = channels.get(name) {
                entry.live.send_replace(live);
            }
        }
    }

    /// Marks every channel not live and wakes every waiter: whatever was published while the
    /// connection was down is lost, so each waiter must look again.
    fn connection_lost(&self) {
        let channels = self.channels.lock().expect("never poisoned");
        for entry in channels.values() {
            entry.live.send_replace(false);
            let _ = entry.messages.send(Arc::from(WAKE_ALL));
        }
    }

    /// Forgets the channels that lingered long enough without a reference, and returns them
    /// (to unsubscribe) with when the next lingering one is due.
    fn sweep(&self, now: Instant) -> (Vec<String>, Option<Instant>) {
        let mut channels = self.channels.lock().expect("never poisoned");
        let mut gone = Vec::new();
        let mut next: Option<Instant> = None;
        channels.retain(|name, entry| match entry.idle_since {
            Some(since) if since + LINGER <= now => {
                gone.push(name.clone());
                false
            }
            Some(since) => {
                next = Some(next.map_or(since + LINGER, |n| n.min(since + LINGER)));
                true
            }
            None => true,
        });
        self.count
            .store(channels.len(), std::sync::atomic::Ordering::Relaxed);
        (gone, next)
    }

    /// The server confirmed `name`'s subscription: it is live, and its waiters look again
    /// (a release published before the confirmation was not heard).
    fn subscribed(&self, name: &str) {
        let name = name.to_string();
        self.set_live(std::slice::from_ref(&name), true);
        self.deliver(&name, Arc::from(WAKE_ALL));
    }

    fn deliver(&self, channel: &str, payload: Arc<str>) {
        let channels = self.channels.lock().expect("never poisoned");
        if let Some(entry) = channels.get(channel) {
            let _ = entry.messages.send(payload);
        }
    }
}

/// The subscriber task: idle until a channel is wanted, then connected for as long as the
/// client lives, reconnecting with backoff whenever the connection drops.
async fn run(
    shared: Arc<Shared>,
    source: Source,
    connect_timeout: Duration,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    // Idle until the first subscription is asked for.
    if commands.recv().await.is_none() {
        return;
    }
    let mut pause = RECONNECT_MIN;
    loop {
        shared.count_request();
        let (redis, mut switched) = source.current();
        let connected = tokio::time::timeout(connect_timeout, redis.get_async_pubsub()).await;
        let Ok(Ok(pubsub)) = connected else {
            tracing::debug!("wake-up connection failed; waiters poll meanwhile");
            if !sleep_or_closed(&mut commands, pause).await {
                return;
            }
            pause = (pause * 2).min(RECONNECT_MAX);
            continue;
        };
        let (mut sink, mut stream) = pubsub.split();
        let wanted = shared.wanted();
        if !wanted.is_empty() {
            shared.count_request();
            if !answered(sink.subscribe(shared.with_own(&wanted)), connect_timeout).await {
                // Refused (an ACL, say) or dropped: back off before trying again, so neither
                // the server nor the waiters see a storm.
                shared.connection_lost();
                if !sleep_or_closed(&mut commands, pause).await {
                    return;
                }
                pause = (pause * 2).min(RECONNECT_MAX);
                continue;
            }
        }
        pause = RECONNECT_MIN;
        shared.set_live(&wanted, true);
        // Anything published before this subscription was in place may be lost.
        for name in &wanted {
            shared.deliver(name, Arc::from(WAKE_ALL));
        }
        // Channels that lingered while the connection was down are swept at once.
        let mut sweep_at = Some(Instant::now());
        loop {
            let sweep = async {
                match sweep_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let switch = async {
                match switched.as_mut() {
                    Some(switched) => switched.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // The master changed: subscribe on the new one.
                true = switch => break,
                () = sweep => {
                    let (gone, next) = shared.sweep(Instant::now());
                    sweep_at = next;
                    if !gone.is_empty() {
                        shared.count_request();
                        if !answered(sink.unsubscribe(shared.with_own(&gone)), connect_timeout).await {
                            break;
                        }
                    }
                }
                message = stream.next() => {
                    let Some(message) = message else { break };
                    let payload: String = message.get_payload().unwrap_or_default();
                    let channel = shared.lock_channel(message.get_channel_name());
                    crate::telemetry::woken();
                    shared.deliver(channel, Arc::from(payload));
                }
                command = commands.recv() => match command {
                    None => return,
                    Some(Command::Subscribe(name)) => {
                        if shared.is_wanted(&name) {
                            shared.count_request();
                            let both = shared.with_own(std::slice::from_ref(&name));
                            if !answered(sink.subscribe(both), connect_timeout).await {
                                break;
                            }
                            shared.set_live(std::slice::from_ref(&name), true);
                            // A release published before the server confirmed was not heard:
                            // have the channel's waiters look again.
                            shared.deliver(&name, Arc::from(WAKE_ALL));
                        }
                    }
                    Some(Command::Idle) => {
                        // The channel that went idle is due last: keep an earlier sweep.
                        let due = Instant::now() + LINGER;
                        sweep_at = Some(sweep_at.map_or(due, |at| at.min(due)));
                    }
                }
            }
        }
        tracing::debug!("wake-up connection lost; reconnecting");
        shared.connection_lost();
    }
}

/// Whether a (un)subscribe request was confirmed within `limit`. A server that stopped
/// answering (frozen, cut off without a reset) would otherwise hold the subscriber task on
/// it for ever: after a Sentinel failover, it would never reach the new master.
async fn answered(
    request: impl std::future::Future<Output = redis::RedisResult<()>>,
    limit: Duration,
) -> bool {
    matches!(tokio::time::timeout(limit, request).await, Ok(Ok(())))
}

/// Sleeps `pause`, draining commands meanwhile (the reconnect subscribes to every channel
/// still wanted anyway). False when the client is gone.
async fn sleep_or_closed(commands: &mut mpsc::UnboundedReceiver<Command>, pause: Duration) -> bool {
    let sleep = tokio::time::sleep(pause);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return true,
            command = commands.recv() => if command.is_none() { return false },
        }
    }
}

/// The subscriber task of a cluster: one RESP3 cluster connection of its own, made when the
/// first channel is wanted, on which each lock's two channels are `SSUBSCRIBE`d together
/// (they share the lock's slot, so they reach one shard). Messages and subscription news
/// arrive as pushes:
/// - `smessage`: delivered to the channel's waiters;
/// - a dropped connection to a shard (`Disconnection`, which does not say which shard): every
///   channel is marked not live, every waiter woken, as on one server, and every channel
///   subscribed again (a channel whose shard is down is asked again each second; its request
///   fails over to the promoted replica once redis-rs has refreshed its slot map);
/// - `ssubscribe`, a (re)subscription confirmed: the channel is live again, and its waiters
///   look again (a release may have gone unheard meanwhile);
/// - `sunsubscribe` from the server (its slot moved to another shard) for a channel still
///   wanted: marked not live, its waiters woken, and subscribed again, which reaches the
///   slot's new shard.
async fn run_sharded(
    shared: Arc<Shared>,
    builder: redis::cluster::ClusterClientBuilder,
    connect_timeout: Duration,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    if commands.recv().await.is_none() {
        return;
    }
    let (pushes_in, mut pushes) = mpsc::unbounded_channel::<redis::PushInfo>();
    let client = match builder
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(pushes_in)
        .build()
    {
        Ok(client) => client,
        Err(err) => {
            // The seeds were checked when the node connected: not expected. Waiters poll.
            tracing::warn!(%err, "no wake-up connection on this cluster; waiters poll");
            return;
        }
    };
    let mut pause = RECONNECT_MIN;
    let mut connection = loop {
        shared.count_request();
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(Ok(connection)) => break connection,
            _ => {
                tracing::debug!("wake-up connection failed; waiters poll meanwhile");
                if !sleep_or_closed(&mut commands, pause).await {
                    return;
                }
                pause = (pause * 2).min(RECONNECT_MAX);
            }
        }
    };
    // Channels wanted but not confirmed subscribed: asked again after a pause.
    let mut pending: Vec<String> = shared.wanted();
    let mut retry_at = Some(Instant::now());
    let mut sweep_at: Option<Instant> = Some(Instant::now());
    loop {
        let sweep = until(sweep_at);
        let retry = until(retry_at);
        tokio::select! {
            () = sweep => {
                let (gone, next) = shared.sweep(Instant::now());
                sweep_at = next;
                for name in gone {
                    shared.count_request();
                    let both = shared.with_own(std::slice::from_ref(&name));
                    let _ = answered(connection.sunsubscribe(both), connect_timeout).await;
                }
            }
            () = retry => {
                retry_at = None;
                // All at once: a shard that does not answer holds the round up for one
                // timeout, not one per channel.
                let names: Vec<String> = std::mem::take(&mut pending)
                    .into_iter()
                    .filter(|name| shared.is_wanted(name))
                    .collect();
                let confirmed = futures_util::future::join_all(names.iter().map(|name| {
                    let (shared, mut connection) = (&shared, connection.clone());
                    async move { ssubscribe(shared, &mut connection, name, connect_timeout).await }
                }))
                .await;
                for (name, confirmed) in names.into_iter().zip(confirmed) {
                    if !confirmed {
                        pending.push(name);
                    }
                }
                if !pending.is_empty() {
                    retry_at = Some(Instant::now() + RECONNECT_MAX);
                }
            }
            push = pushes.recv() => {
                let Some(push) = push else { return };
                match push.kind {
                    redis::PushKind::SMessage => {
                        let mut data = push.data.into_iter();
                        let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                            continue;
                        };
                        let channel: String = redis::from_redis_value(channel).unwrap_or_default();
                        let payload: String = redis::from_redis_value(payload).unwrap_or_default();
                        crate::telemetry::woken();
                        shared.deliver(shared.lock_channel(&channel), Arc::from(payload));
                    }
                    redis::PushKind::Disconnection => {
                        // Which shard dropped is not told, and redis-rs subscribes again only
                        // on a shard it reconnects to (not on a replica promoted meanwhile):
                        // every channel is asked for again.
                        tracing::debug!("a shard's wake-up connection dropped; resubscribing");
                        shared.connection_lost();
                        for name in shared.wanted() {
                            if !pending.contains(&name) {
                                pending.push(name);
                            }
                        }
                        retry_at = Some(Instant::now() + RECONNECT_MIN);
                    }
                    redis::PushKind::SSubscribe => {
                        if let Some(name) = pushed_channel(&push.data) {
                            shared.subscribed(shared.lock_channel(&name));
                        }
                    }
                    redis::PushKind::SUnsubscribe => {
                        if let Some(name) = pushed_channel(&push.data) {
                            let name = shared.lock_channel(&name).to_string();
                            if shared.is_wanted(&name) && !pending.contains(&name) {
                                shared.set_live(std::slice::from_ref(&name), false);
                                shared.deliver(&name, Arc::from(WAKE_ALL));
                                pending.push(name);
                                retry_at = Some(Instant::now() + RECONNECT_MIN);
                            }
                        }
                    }
                    _ => {}
                }
            }
            command = commands.recv() => match command {
                None => return,
                Some(Command::Subscribe(name)) => {
                    if shared.is_wanted(&name)
                        && !ssubscribe(&shared, &mut connection, &name, connect_timeout).await
                    {
                        pending.push(name);
                        retry_at = Some(Instant::now() + RECONNECT_MIN);
                    }
                }
                Some(Command::Idle) => {
                    let due = Instant::now() + LINGER;
                    sweep_at = Some(sweep_at.map_or(due, |at| at.min(due)));
                }
            }
        }
    }
}

/// `SSUBSCRIBE`s the lock channel `name` with this client's own channel of the lock (one
/// slot, so one shard), within `limit`; live, and its waiters told to look again, once
/// confirmed. False when it was not confirmed (to be asked again).
async fn ssubscribe(
    shared: &Shared,
    connection: &mut redis::cluster_async::ClusterConnection,
    name: &str,
    limit: Duration,
) -> bool {
    shared.count_request();
    let both = shared.with_own(&[name.to_string()]);
    let confirmed = answered(connection.ssubscribe(both), limit).await;
    if confirmed {
        shared.subscribed(name);
    }
    confirmed
}

/// Sleeps until `at`, or for ever without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The channel a subscribe-like push names (its first element).
fn pushed_channel(data: &[redis::Value]) -> Option<String> {
    redis::from_redis_value_ref(data.first()?).ok()
}
