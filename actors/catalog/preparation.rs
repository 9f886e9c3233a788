//! The preparation of one turn off the catalog's mailbox: the connect pipeline and the
//! relistings run on a task, and that task ends at once when its caller stops waiting
//! (the `prepare_turn` future was dropped) or its catalog closes (eviction, shutdown, a
//! newer turn with another identity). Ending it drops the unfinished work, and dropping
//! is what cleans up: each child process is killed by its guard, each discovery permit
//! goes back to the limiter, each approval question is withdrawn from the broker.

use std::sync::{Arc, OnceLock};

use ractor::{ActorId, RpcReplyPort};
use tokio_util::sync::CancellationToken;

use super::connect::{Outcome, Pipeline, Relist};
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::core::{AgentCore, Declaration};
use crate::offer::Shaped;

/// One turn to resolve: the core as loaded for it, its number, where the answer goes.
pub(crate) struct TurnRequest {
    pub core: Arc<AgentCore>,
    pub turn: u64,
    pub reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>,
    /// Cancelled when the caller stopped waiting.
    pub cancel: CancellationToken,
    /// The servers this turn is for (`Session::prepare_turn_for`); every enabled one
    /// when `None`. Connections of the others are kept, untouched.
    pub scope: Option<Arc<Vec<String>>>,
    /// The token budget of the turn's tool definitions.
    pub budget: Option<crate::search::ToolBudget>,
    /// Start the servers of the scope even when their last listing could stand in for
    /// them: a call, read or prompt needs one now.
    pub wake: bool,
    /// Where its spans go: under the turn's span (`mcp.turn`), or the call's that woke
    /// a server.
    pub trace: crate::telemetry::Trace,
}

impl TurnRequest {
    /// Whether nobody waits for this turn any more.
    pub(super) fn abandoned(&self) -> bool {
        self.cancel.is_cancelled() || self.reply.is_closed()
    }

    /// Whether `server` is part of this turn.
    pub(super) fn covers(&self, server: &str) -> bool {
        self.scope
            .as_ref()
            .is_none_or(|s| s.iter().any(|x| x == server))
    }
}

/// What a preparation task found, handed back to the catalog.
pub(crate) struct Resolution {
    pub request: TurnRequest,
    pub outcomes: Vec<Outcome>,
    pub relisted: Vec<(ActorId, Result<Shaped, String>)>,
    pub failed: Vec<(Arc<Declaration>, String)>,
}

/// A catalog's end, as its preparation tasks see it: a token cancelled when it closes,
/// and the answer its unfinished turns get.
#[derive(Clone, Default)]
pub(super) struct Ending {
    token: CancellationToken,
    answer: Arc<OnceLock<PrepareError>>,
}

impl Ending {
    /// Ends every preparation of the catalog; the first answer set stays.
    pub(super) fn end(&self, answer: PrepareError) {
        let _ = self.answer.set(answer);
        self.token.cancel();
    }

    /// What an unfinished turn is told: the catalog's answer once it closed, else that
    /// the turn was cancelled (its caller left).
    pub(super) fn answer(&self) -> PrepareError {
        self.answer
            .get()
            .cloned()
            .unwrap_or(PrepareError::Cancelled)
    }
}

/// Connects and relists for `resolution`'s turn. `None` when the turn ended first (its
/// caller left or the catalog closed); its caller has then been answered.
pub(super) async fn run(
    pipeline: &Pipeline,
    connect: Vec<Arc<Declaration>>,
    relist: Vec<Relist>,
    mut resolution: Resolution,
    ending: &Ending,
) -> Option<Resolution> {
    let caller = resolution.request.cancel.clone();
    let resolved = tokio::select! {
        biased;
        () = ending.token.cancelled() => None,
        () = caller.cancelled() => None,
        resolved = pipeline.resolve(connect, relist) => Some(resolved),
    };
    match resolved {
        Some((outcomes, relisted)) => {
            (resolution.outcomes, resolution.relisted) = (outcomes, relisted);
            Some(resolution)
        }
        None => {
            let _ = resolution.request.reply.send(Err(ending.answer()));
            None
        }
    }
}
