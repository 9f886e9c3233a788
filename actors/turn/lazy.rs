//! Servers started when first used (`start: lazy`): a turn may list a server from its
//! last listing without starting it; the first call, read or prompt that needs it asks
//! its catalog to start it, through the connect pipeline as any connect (capability,
//! where it runs, connect approval, pins), and the effect then goes to the turn that
//! started it. One start per server per turn: effects racing for it share it, and a
//! failed start answers every later effect of the turn the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::telemetry::Trace;
use tokio::sync::OnceCell;

use super::{Binding, CallError, PrepareError, StaleReason, TurnCatalog};

/// Starts a dormant server of a turn: what its catalog provides.
pub(crate) trait Starter: Send + Sync {
    /// A turn of just `server`, started now.
    fn start(
        &self,
        server: String,
        trace: Trace,
    ) -> BoxFuture<'static, Result<TurnCatalog, PrepareError>>;
}

/// One server's start in a turn: the turn that started it, or why it did not start.
type Start = Arc<OnceCell<Result<TurnCatalog, CallError>>>;

/// The starts of one turn's dormant servers.
pub(crate) struct Wakes {
    starter: Box<dyn Starter>,
    started: Mutex<HashMap<String, Start>>,
}

impl Wakes {
    pub(crate) fn new(starter: impl Starter + 'static) -> Self {
        Wakes {
            starter: Box::new(starter),
            started: Mutex::new(HashMap::new()),
        }
    }

    /// The turn that started `server` for `subject` (an exposed name or a URI), started
    /// now unless an earlier effect of this turn started it (or failed to).
    async fn start(
        &self,
        server: &str,
        subject: &str,
        trace: &Trace,
    ) -> Result<TurnCatalog, CallError> {
        let cell = {
            let Ok(mut started) = self.started.lock() else {
                return Err(unavailable(subject, server, "the runtime is not running"));
            };
            Arc::clone(started.entry(server.to_string()).or_default())
        };
        let starting = || async {
            match self.starter.start(server.to_string(), trace.clone()).await {
                Ok(turn)
                    if turn
                        .offers()
                        .iter()
                        .any(|o| o.binding.declaration.server_id == server) =>
                {
                    Ok(turn)
                }
                Ok(turn) => {
                    let reason = turn
                        .diagnostics()
                        .iter()
                        .map(|d| (&d.server, &d.message))
                        .chain(turn.denied().iter().map(|d| (&d.server, &d.reason)))
                        .find(|(s, _)| s.as_str() == server)
                        .map_or_else(|| "it did not start".to_string(), |(_, r)| r.clone());
                    Err(unavailable(subject, server, &reason))
                }
                Err(PrepareError::Evicted | PrepareError::Cancelled) => Err(CallError::Stale {
                    tool: subject.to_string(),
                    reason: StaleReason::Closed,
                }),
                Err(other) => Err(unavailable(subject, server, &other.to_string())),
            }
        };
        cell.get_or_init(starting).await.clone()
    }
}

fn unavailable(subject: &str, server: &str, reason: &str) -> CallError {
    CallError::ServerUnavailable {
        tool: subject.to_string(),
        server: server.to_string(),
        reason: reason.to_string(),
    }
}

impl TurnCatalog {
    /// The turn to send an effect of `binding` through: `None` when its server is live
    /// in this turn, else the turn that started it (started now when this is its first
    /// effect). `subject` names the effect in errors.
    pub(crate) async fn woken(
        &self,
        binding: &Binding,
        subject: &str,
        trace: &Trace,
    ) -> Result<Option<TurnCatalog>, CallError> {
        if binding.link.dispatch().is_some() {
            return Ok(None);
        }
        let server = &binding.declaration.server_id;
        let Some(wakes) = &self.wakes else {
            return Err(unavailable(subject, server, "it was not started"));
        };
        wakes.start(server, subject, trace).await.map(Some)
    }
}
