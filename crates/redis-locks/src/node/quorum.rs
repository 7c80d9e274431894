//! Asking N independent nodes at once (a [`Redlock`](crate::Redlock)'s): every request of
//! a Redlock (acquire, raise, extend, release, inspect) is one request per node, sent to all
//! of them together, each bounded by the per-node timeout, and read until its outcome is
//! decided.

use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};

use tokio::sync::watch;
use tokio::time::Instant;

use super::Node;
use crate::error::{Error, NodeVote, Result, Vote};

/// The nodes of one Redlock and how long each may take to answer.
pub(crate) struct Quorum {
    nodes: Vec<Node>,
    node_timeout: Duration,
    /// How many background tasks of this Redlock still run ([`Late::finish_in_background`],
    /// and the releases the lease core spawns, [`Quorum::running`]): [`Quorum::settled`]
    /// waits for none.
    background: watch::Sender<usize>,
}

/// What one node answered to one request.
pub(crate) enum Answer<T> {
    /// A reply.
    Replied(T),
    /// No reply within the per-node timeout.
    TimedOut,
    /// An error reply, or no connection.
    Failed(Error),
}

/// Each node's answer, by node index; `None` for a node that was not asked, or had not
/// answered when the outcome was decided.
pub(crate) type Answers<T> = Vec<Option<Answer<T>>>;

impl Quorum {
    pub(crate) fn new(nodes: Vec<Node>, node_timeout: Duration) -> Quorum {
        Quorum {
            nodes,
            node_timeout,
            background: watch::Sender::new(0),
        }
    }

    /// Waits until every background task counted in `background` has finished (see
    /// [`Redlock::settle`](crate::Redlock::settle) for what they are and how long that takes).
    pub(crate) async fn settled(&self) {
        let mut running = self.background.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = running.wait_for(|running| *running == 0).await;
    }

    /// One more background task of this Redlock until the returned value is dropped (a
    /// release the lease core runs in a task of its own: see [`Hold::background`]).
    ///
    /// [`Hold::background`]: crate::lease::Hold::background
    pub(crate) fn running(&self) -> Box<dyn Send> {
        Box::new(Running::new(self.background.clone()))
    }

    /// How many nodes make a majority.
    pub(crate) fn needed(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    pub(crate) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Sends `request` to each node in `which` at once (each bounded by the per-node
    /// timeout) and collects the answers until `decided` says the outcome is known; answers
    /// already in by then are taken too. The requests still under way are dropped, and their
    /// outcome no longer matters to the caller: one the connection had written already still
    /// runs on its node; one it had not is never written (redis-rs skips a request whose
    /// reply nobody awaits). Either is safe: a dropped acquire may or may not have granted,
    /// and every node gets the release.
    pub(crate) async fn ask<T, Fut>(
        &self,
        which: impl IntoIterator<Item = usize>,
        request: impl Fn(usize, &Node) -> Fut,
        decided: impl FnMut(&Answers<T>) -> bool,
    ) -> Answers<T>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        self.ask_keeping(which, request, decided).await.0
    }

    /// As [`ask`](Quorum::ask), but the requests still under way when the outcome was decided
    /// are returned, for the caller to take their answers later ([`Late::take_ready`]) or to
    /// see to the end ([`Late::finish_in_background`]).
    pub(crate) async fn ask_keeping<T, Fut>(
        &self,
        which: impl IntoIterator<Item = usize>,
        request: impl Fn(usize, &Node) -> Fut,
        mut decided: impl FnMut(&Answers<T>) -> bool,
    ) -> (Answers<T>, Late<T>)
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut answers: Answers<T> = (0..self.nodes.len()).map(|_| None).collect();
        let mut late = self.sent(which, request);
        // One timer for all the nodes asked together: they share the deadline.
        let out_of_time = tokio::time::sleep_until(late.deadline);
        tokio::pin!(out_of_time);
        loop {
            tokio::select! {
                biased;
                next = late.pending.next() => {
                    let Some((index, reply)) = next else { break };
                    answers[index] = Some(answer(reply));
                    if decided(&answers) {
                        // Take what is in already: a node that answered with the others counts.
                        late.take_ready(&mut answers);
                        break;
                    }
                }
                () = &mut out_of_time => {
                    late.time_out(&mut answers);
                    break;
                }
            }
        }
        (answers, late)
    }

    /// Sends `request` to each node in `which` at once and sees the requests through in a
    /// background task (each within the per-node timeout), their answers unread: for requests
    /// that help but need not be awaited (the raise of a node behind a token a majority has).
    /// Each request is polled once here ([`Late::take_ready`]), so it is queued on its node's
    /// connection now, ahead of whatever this client sends that node next (the guard's
    /// release); the background task awaits it, so it is written.
    /// `also` is counted (see [`Running`]) until the background task ends too.
    pub(crate) fn send<T, Fut>(
        &self,
        which: impl IntoIterator<Item = usize>,
        request: impl Fn(usize, &Node) -> Fut,
        also: Option<Running>,
    ) where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let mut late = self.sent(which, request);
        let mut unread: Answers<T> = (0..self.nodes.len()).map(|_| None).collect();
        late.take_ready(&mut unread);
        late.finish_in_background_with(also);
    }

    /// The requests `request` makes of the nodes in `which`, not yet polled, with their
    /// common deadline: the per-node timeout from now (the callers bound them by it).
    fn sent<T, Fut>(
        &self,
        which: impl IntoIterator<Item = usize>,
        request: impl Fn(usize, &Node) -> Fut,
    ) -> Late<T>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let asked: Vec<usize> = which.into_iter().collect();
        Late {
            deadline: Instant::now() + self.node_timeout,
            background: self.background.clone(),
            pending: asked
                .iter()
                .map(|&index| {
                    let request = request(index, &self.nodes[index]);
                    async move { (index, request.await) }.boxed()
                })
                .collect(),
            asked,
        }
    }

    /// The error of one node that did not answer within the per-node timeout.
    pub(crate) fn timed_out(&self, phase: crate::error::Phase) -> Error {
        Error::Connection {
            phase,
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no reply within the node timeout of {:?}",
                    self.node_timeout
                ),
            )),
        }
    }

    /// The answers as the per-node votes of an error, `vote` saying what a reply was.
    pub(crate) fn votes<T>(&self, answers: Answers<T>, vote: impl Fn(T) -> Vote) -> Vec<NodeVote> {
        answers
            .into_iter()
            .zip(&self.nodes)
            .map(|(answer, node)| NodeVote {
                url: node.url().to_string(),
                vote: match answer {
                    None => Vote::Pending,
                    Some(Answer::Replied(reply)) => vote(reply),
                    Some(Answer::TimedOut) => Vote::TimedOut,
                    Some(Answer::Failed(err)) => Vote::Failed(Box::new(err)),
                },
            })
            .collect()
    }
}

/// Requests of one [`Quorum::ask_keeping`] still under way; dropped, their replies are not
/// awaited.
pub(crate) struct Late<T: Send + 'static> {
    pending: FuturesUnordered<BoxFuture<'static, (usize, Result<T>)>>,
    /// The nodes asked.
    asked: Vec<usize>,
    /// When the per-node timeout of every request ends (they were sent together).
    deadline: Instant,
    /// The Redlock's count of background tasks.
    background: watch::Sender<usize>,
}

/// One background task of a Redlock, counted from its spawn until it ends or is dropped (a
/// runtime shutting down drops it unfinished).
pub(crate) struct Running(watch::Sender<usize>);

impl Running {
    /// Counts one more in `background` until dropped.
    pub(crate) fn new(background: watch::Sender<usize>) -> Running {
        background.send_modify(|running| *running += 1);
        Running(background)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.send_modify(|running| *running -= 1);
    }
}

impl<T: Send + 'static> Late<T> {
    /// Moves the answers that have come in meanwhile into `answers`. Every request still
    /// under way is polled once more on the way, outside tokio's cooperative budget (a
    /// connection's request channel refuses a task whose budget ran out): so each one is
    /// queued on its connection when this returns (it is written only if it is still awaited
    /// when the connection gets to it, see [`Quorum::ask`]).
    pub(crate) fn take_ready(&mut self, answers: &mut Answers<T>) {
        while let Some(Some((index, reply))) =
            tokio::task::unconstrained(self.pending.next()).now_or_never()
        {
            answers[index] = Some(answer(reply));
        }
    }

    /// The per-node timeout has passed: every node asked that has not answered timed out.
    /// Its request is dropped.
    fn time_out(&mut self, answers: &mut Answers<T>) {
        self.pending = FuturesUnordered::new();
        for &index in &self.asked {
            answers[index].get_or_insert(Answer::TimedOut);
        }
    }

    /// Awaits the requests still under way (each within the node timeout) in a background
    /// task: for requests that must be seen through even if a node's connection is being
    /// re-opened (a release).
    pub(crate) fn finish_in_background(self) {
        self.finish_in_background_with(None);
    }

    /// As [`finish_in_background`](Self::finish_in_background), with `also` counted until
    /// the task ends too.
    fn finish_in_background_with(mut self, also: Option<Running>) {
        if self.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        let (running, deadline) = (Running::new(self.background.clone()), self.deadline);
        tokio::spawn(async move {
            let _also = also;
            // Nobody reads these answers any more; a failure is only worth a debug line (the
            // node's lease ends what it keeps).
            let finish = async {
                while let Some((index, reply)) = pending.next().await {
                    if let Err(err) = reply {
                        tracing::debug!(node = index, %err, "background request of a Redlock failed");
                    }
                }
            };
            if tokio::time::timeout_at(deadline, finish).await.is_err() {
                tracing::debug!(
                    "background requests of a Redlock not answered within the node timeout"
                );
            }
            drop(running);
        });
    }
}

/// One node's reply or error as its answer.
fn answer<T>(reply: Result<T>) -> Answer<T> {
    match reply {
        Ok(reply) => Answer::Replied(reply),
        Err(err) => Answer::Failed(err),
    }
}

/// How many answers are replies for which `counts` holds.
pub(crate) fn count<T>(answers: &Answers<T>, counts: impl Fn(&T) -> bool) -> usize {
    answers
        .iter()
        .filter(|answer| matches!(answer, Some(Answer::Replied(reply)) if counts(reply)))
        .count()
}

/// How many nodes answered with no reply (timed out or failed).
pub(crate) fn unreachable<T>(answers: &Answers<T>) -> usize {
    answers
        .iter()
        .filter(|answer| matches!(answer, Some(Answer::TimedOut | Answer::Failed(_))))
        .count()
}
