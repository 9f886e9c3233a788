//! The runtime-wide discovery limiter: at most N servers connect at once, across every
//! session. Connecting tasks hold a [`Permit`] from spawn to the end of `tools/list`.
//!
//! Waiters are served first come, first served. A waiter that gave up (its future was
//! dropped) is skipped, and a permit granted to a vanished waiter is returned at once.

use std::collections::VecDeque;

use super::swappable::Swappable;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

/// Messages of the limiter.
pub enum LimiterMsg {
    /// Wait for a permit.
    Acquire(RpcReplyPort<Permit>),
    /// A permit was dropped.
    Release,
    /// Ask for the counters (tests, benches, `/servers`).
    Stats(RpcReplyPort<LimiterStats>),
}

#[cfg(feature = "cluster")]
impl ractor::Message for LimiterMsg {}

/// Counters, for tests, benches and `/servers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LimiterStats {
    /// Permits in total.
    pub limit: usize,
    /// Permits held now.
    pub in_use: usize,
    /// Most permits ever held at once.
    pub max_in_use: usize,
    /// Waiters queued now.
    pub waiting: usize,
    /// Permits granted since start.
    pub granted: u64,
}

pub(crate) struct Limiter;

pub(crate) struct LimiterState {
    stats: LimiterStats,
    waiters: VecDeque<RpcReplyPort<Permit>>,
    /// The queue's length in the host's gauge.
    queued: crate::telemetry::Level,
}

impl LimiterState {
    fn grant_waiting(&mut self, myself: &ActorRef<LimiterMsg>) {
        while self.stats.in_use < self.stats.limit {
            let Some(port) = self.waiters.pop_front() else {
                break;
            };
            if port.is_closed() {
                continue;
            }
            // Counted before sending: the permit travels as a value whose Drop releases
            // it, so a waiter that vanishes after the send still gives it back.
            self.stats.in_use += 1;
            self.stats.granted += 1;
            self.stats.max_in_use = self.stats.max_in_use.max(self.stats.in_use);
            let _ = port.send(Permit {
                limiter: myself.clone(),
            });
        }
        // Connects that gave up while waiting are no longer queued.
        self.waiters.retain(|port| !port.is_closed());
        self.stats.waiting = self.waiters.len();
        self.queued.set(self.stats.waiting);
    }
}

impl Actor for Limiter {
    type Msg = LimiterMsg;
    type State = LimiterState;
    /// The limit, and where the queue's length is measured.
    type Arguments = (usize, crate::telemetry::Telemetry);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (limit, telemetry): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(LimiterState {
            stats: LimiterStats {
                limit: limit.max(1),
                ..LimiterStats::default()
            },
            waiters: VecDeque::new(),
            queued: telemetry.gauge(crate::telemetry::Gauge::Queued),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LimiterMsg::Acquire(port) => {
                state.waiters.push_back(port);
                state.grant_waiting(&myself);
            }
            LimiterMsg::Release => {
                state.stats.in_use = state.stats.in_use.saturating_sub(1);
                state.grant_waiting(&myself);
            }
            LimiterMsg::Stats(port) => {
                let _ = port.send(state.stats);
            }
        }
        Ok(())
    }
}

/// The limiter is not running (it is being restarted by the runtime's root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the discovery limiter is restarting; the server is tried again next turn")]
pub struct LimiterUnavailable;

/// A held discovery permit; dropping it gives it back.
#[derive(Debug)]
pub struct Permit {
    limiter: ActorRef<LimiterMsg>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let _ = self.limiter.cast(LimiterMsg::Release);
    }
}

/// Handle of the limiter actor; the runtime's root swaps in a new actor when it
/// restarts one that died.
#[derive(Clone)]
pub struct LimiterHandle {
    actor: Swappable<LimiterMsg>,
}

impl LimiterHandle {
    pub(crate) fn new(actor: ActorRef<LimiterMsg>) -> Self {
        LimiterHandle {
            actor: Swappable::new(actor),
        }
    }

    /// Points the handle at a restarted limiter.
    pub(crate) fn replace(&self, actor: ActorRef<LimiterMsg>) {
        self.actor.replace(actor);
    }

    /// The current limiter's id (the root tells its death from a session's).
    pub(crate) fn id(&self) -> ractor::ActorId {
        self.actor.get().get_id()
    }

    /// Stops the current limiter (runtime shutdown, after the root).
    pub(crate) fn stop(&self) {
        self.actor.get().stop(Some("shutdown".into()));
    }

    /// Waits for a permit, first come, first served.
    ///
    /// # Errors
    /// [`LimiterUnavailable`] while the limiter is down (never a silent grant).
    pub async fn acquire(&self) -> Result<Permit, LimiterUnavailable> {
        match self.actor.get().call(LimiterMsg::Acquire, None).await {
            Ok(ractor::rpc::CallResult::Success(permit)) => Ok(permit),
            _ => Err(LimiterUnavailable),
        }
    }

    /// Current counters (zero while the limiter is down).
    pub async fn stats(&self) -> LimiterStats {
        let asked = self
            .actor
            .get()
            .call(LimiterMsg::Stats, Some(std::time::Duration::from_secs(5)))
            .await;
        match asked {
            Ok(ractor::rpc::CallResult::Success(s)) => s,
            _ => LimiterStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn limiter(limit: usize) -> LimiterHandle {
        let args = (limit, crate::telemetry::Telemetry::default());
        let (actor, _) = Actor::spawn(None, Limiter, args).await.unwrap();
        LimiterHandle::new(actor)
    }

    /// Waits until `n` waiters are queued (the order of `Acquire` messages is what FIFO
    /// is about, so each waiter is queued before the next is started).
    async fn queued(limiter: &LimiterHandle, n: usize) {
        for _ in 0..500 {
            if limiter.stats().await.waiting == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        panic!("{n} waiters never queued: {:?}", limiter.stats().await);
    }

    #[tokio::test]
    async fn waiters_are_served_in_arrival_order() {
        let limiter = limiter(1).await;
        let first = limiter.acquire().await.unwrap();
        let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut waiters = Vec::new();
        for n in 0..5 {
            let (waiter, order) = (limiter.clone(), order_tx.clone());
            waiters.push(tokio::spawn(async move {
                let permit = waiter.acquire().await.unwrap();
                order.send(n).unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(permit);
            }));
            queued(&limiter, n + 1).await;
        }
        drop(first);
        for w in waiters {
            w.await.unwrap();
        }
        let mut order = Vec::new();
        while let Ok(n) = order_rx.try_recv() {
            order.push(n);
        }
        assert_eq!(order, [0, 1, 2, 3, 4]);
        let stats = limiter.stats().await;
        assert_eq!((stats.in_use, stats.max_in_use, stats.granted), (0, 1, 6));
    }

    #[tokio::test]
    async fn a_vanished_waiter_is_skipped_and_its_turn_passes_on() {
        let limiter = limiter(1).await;
        let held = limiter.acquire().await.unwrap();
        let gone = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.acquire().await }
        });
        queued(&limiter, 1).await;
        let next = tokio::spawn({
            let limiter = limiter.clone();
            async move { limiter.acquire().await.map(drop) }
        });
        queued(&limiter, 2).await;
        gone.abort();
        drop(held);
        tokio::time::timeout(Duration::from_secs(10), next)
            .await
            .expect("the waiter behind a vanished one was never served")
            .unwrap()
            .unwrap();
        // Nothing leaked to the vanished waiter: the only permit is free again.
        let stats = limiter.stats().await;
        assert_eq!((stats.in_use, stats.waiting), (0, 0), "{stats:?}");
        assert_eq!(
            stats.granted, 2,
            "the aborted waiter was skipped, not granted"
        );
    }

    #[tokio::test]
    async fn a_dead_limiter_answers_unavailable_never_a_permit() {
        let limiter = limiter(2).await;
        limiter.actor.get().stop_and_wait(None, None).await.unwrap();
        assert_eq!(limiter.acquire().await.unwrap_err(), LimiterUnavailable);
    }
}
