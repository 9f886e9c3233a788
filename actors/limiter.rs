//! The runtime-wide discovery limiter: at most N servers connect at once, across every
//! session. Connecting tasks hold a [`Permit`] from spawn to the end of `tools/list`.
//!
//! Waiters are served first come, first served. A waiter that gave up (its future was
//! dropped) is skipped, and a permit granted to a vanished waiter is returned at once.

use std::collections::VecDeque;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

/// Messages of the limiter.
pub enum LimiterMsg {
    /// Wait for a permit.
    Acquire(RpcReplyPort<Permit>),
    /// A permit was dropped.
    Release,
    /// Current counters.
    Stats(RpcReplyPort<LimiterStats>),
}

/// Counters, for tests, benches and `/servers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
        self.stats.waiting = self.waiters.len();
    }
}

impl Actor for Limiter {
    type Msg = LimiterMsg;
    type State = LimiterState;
    type Arguments = usize;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        limit: usize,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(LimiterState {
            stats: LimiterStats {
                limit: limit.max(1),
                ..LimiterStats::default()
            },
            waiters: VecDeque::new(),
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
    actor: super::shared::Swappable<LimiterMsg>,
}

impl LimiterHandle {
    pub(crate) fn new(actor: ActorRef<LimiterMsg>) -> Self {
        LimiterHandle {
            actor: super::shared::Swappable::new(actor),
        }
    }

    /// Points the handle at a restarted limiter.
    pub(crate) fn replace(&self, actor: ActorRef<LimiterMsg>) {
        self.actor.replace(actor);
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
