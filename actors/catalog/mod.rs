//! One catalog actor per session and catalog identity (principal, capabilities, core
//! root and revision, workspace, connect policy). It supervises the connection actors
//! of that identity, keeps the per-server failure cache and the naming state, and
//! resolves each turn's catalog.
//!
//! A turn: the planner (`plan.rs`, pure) says what to close, connect, relist and
//! reuse; closing happens in the handler, connecting and relisting on a spawned task
//! through the connect pipeline (`connect.rs`), so approvals and slow servers never
//! block the mailbox; the outcomes come back as a message, are applied, and the turn's
//! entries are built (`plan::entries`). Turns of one catalog are queued, never
//! interleaved. What a server sends outside our requests is routed by `inbound.rs`;
//! what `/servers` reports is `status.rs`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::actors::connection::{Connected, Live, LivePeer, close_all};
use crate::actors::shared::Shared;
use crate::actors::turn::{Denial, Diagnostic, PrepareError, Warm};
use crate::authority::{CapabilitySet, DenyReason, HostPolicy};
use crate::core::{Declaration, Fingerprint};
use crate::events::EventKind;
use crate::naming::Names;
use crate::redact::View;
use crate::telemetry::Trace;
use crate::transport::ConnectErrorKind;

mod assemble;
mod connect;
mod dormant;
mod inbound;
mod plan;
mod preparation;
mod status;

use connect::{Outcome, Pipeline, Relist};
pub use inbound::MAX_NOTICE_TEXT;
use plan::Failure;
use preparation::Ending;
pub(crate) use preparation::{Resolution, TurnRequest};
pub use status::{ServerState, ServerStatus};

/// What a catalog is bound to; any change means a new catalog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CatalogIdentity {
    /// Session id.
    pub session: String,
    /// Who the session acts for.
    pub principal: String,
    /// Digest of the capability snapshot.
    pub capabilities: Fingerprint,
    /// Canonical core root.
    pub core_root: PathBuf,
    /// Core revision (host-supplied, e.g. the live git commit).
    pub core_revision: String,
    /// Canonical workspace.
    pub workspace: PathBuf,
    /// The host's approval floors.
    pub policy: HostPolicy,
}

/// Messages of a catalog actor.
pub enum CatalogMsg {
    /// Resolve a turn against this core snapshot.
    PrepareTurn(TurnRequest),
    /// The preparation task finished.
    Resolved(Box<Resolution>),
    /// The preparation task ended without a resolution (its turn was cancelled).
    Abandoned,
    /// End the turns in flight, close every connection and stop; answers how many were
    /// closed.
    Close {
        /// Why (for events and logs).
        reason: String,
        /// What turns that are pending or preparing get.
        answer: PrepareError,
        /// Count of closed connections.
        reply: RpcReplyPort<usize>,
    },
    /// Ask for each server's state (`/servers`).
    Status(RpcReplyPort<Vec<ServerStatus>>),
}

#[cfg(feature = "cluster")]
impl ractor::Message for CatalogMsg {}

pub(crate) struct CatalogArgs {
    pub shared: Arc<Shared>,
    pub identity: CatalogIdentity,
    pub capabilities: CapabilitySet,
    pub catalog_id: u64,
}

pub(crate) struct Catalog;

pub(crate) struct CatalogState {
    shared: Arc<Shared>,
    identity: CatalogIdentity,
    capabilities: CapabilitySet,
    catalog_id: u64,
    live: HashMap<ActorId, Live>,
    by_server: HashMap<String, ActorId>,
    failures: HashMap<String, Failure>,
    denied: HashMap<String, DenyReason>,
    names: Names,
    /// Servers listed from their last listing, not started (`start: lazy`).
    dormant: HashMap<String, dormant::Dormant>,
    /// The core of the latest turn: what a start for an effect runs against.
    latest: Option<Arc<crate::core::AgentCore>>,
    last: Option<Warm>,
    preparing: bool,
    queue: VecDeque<TurnRequest>,
    closing: bool,
    /// Set when the catalog closes: the preparation in flight ends at once.
    ending: Ending,
}

impl Actor for Catalog {
    type Msg = CatalogMsg;
    type State = CatalogState;
    type Arguments = CatalogArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CatalogArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CatalogState {
            shared: args.shared,
            identity: args.identity,
            capabilities: args.capabilities,
            catalog_id: args.catalog_id,
            live: HashMap::new(),
            by_server: HashMap::new(),
            failures: HashMap::new(),
            denied: HashMap::new(),
            names: Names::default(),
            dormant: HashMap::new(),
            latest: None,
            last: None,
            preparing: false,
            queue: VecDeque::new(),
            closing: false,
            ending: Ending::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CatalogMsg::PrepareTurn(request) => {
                if state.closing {
                    let _ = request.reply.send(Err(PrepareError::Evicted));
                } else {
                    // Turns whose callers left while another prepared hold a core each.
                    state.queue.retain(|r| !r.abandoned());
                    state.queue.push_back(request);
                    state.next_turn(&myself).await;
                }
            }
            CatalogMsg::Resolved(resolution) => {
                state.finish_turn(&myself, *resolution).await;
                state.next_turn(&myself).await;
            }
            CatalogMsg::Abandoned => {
                state.preparing = false;
                state.next_turn(&myself).await;
            }
            CatalogMsg::Close {
                reason,
                answer,
                reply,
            } => {
                state.closing = true;
                // The turn preparing ends now (its processes killed, permits returned,
                // approvals withdrawn), not when its connect timeout passes.
                state.ending.end(answer.clone());
                for pending in state.queue.drain(..) {
                    let _ = pending.reply.send(Err(answer.clone()));
                }
                let closed = state.close_all(&reason).await;
                let _ = reply.send(closed);
                myself.stop(Some(reason));
            }
            CatalogMsg::Status(reply) => {
                let _ = reply.send(state.status());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A connection's end never ends the catalog: it becomes a diagnostic.
        match event {
            SupervisionEvent::ActorTerminated(cell, ..) => state.connection_ended(&cell, None),
            SupervisionEvent::ActorFailed(cell, err) => {
                let crash = format!("the connection actor crashed: {err}");
                state.connection_ended(&cell, Some(crash));
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.ending.end(PrepareError::Evicted);
        state.close_all("catalog stopped").await;
        Ok(())
    }
}

impl CatalogState {
    fn session(&self) -> &str {
        &self.identity.session
    }

    fn pipeline(&self) -> Pipeline {
        Pipeline {
            shared: Arc::clone(&self.shared),
            policy: self.identity.policy,
            session: self.session().to_string(),
            principal: self.identity.principal.clone(),
            capabilities: self.capabilities.clone(),
            workspace: self.identity.workspace.clone(),
            trace: Trace::default(),
        }
    }

    /// Starts the next queued turn whose caller still waits, unless one is preparing.
    async fn next_turn(&mut self, myself: &ActorRef<CatalogMsg>) {
        while !self.preparing && !self.closing {
            let Some(request) = self.queue.pop_front() else {
                return;
            };
            if !request.abandoned() {
                self.start_turn(myself, request).await;
            }
        }
    }

    /// Plans the turn, closes what changed, and answers at once when nothing needs a
    /// server (a warm turn); otherwise connects and relists on a task of its own.
    async fn start_turn(&mut self, myself: &ActorRef<CatalogMsg>, request: TurnRequest) {
        let Some(request) = self.current(request) else {
            return;
        };
        self.preparing = true;
        let peers: Vec<LivePeer> = self.live.values().map(Live::take_peer).collect();
        let covered = |server: &str| request.covers(server);
        let mut plan = plan::plan_for(
            &peers,
            &self.failures,
            &request.core,
            self.shared.now(),
            &covered,
        );
        for server in &plan.close {
            self.close_server(server, "declaration changed or removed");
        }
        for server in &plan.forget {
            self.failures.remove(server);
        }
        plan.connect = self.dormancy(std::mem::take(&mut plan.connect), &request);
        self.denied.clear();
        let relist: Vec<Relist> = plan
            .relist
            .iter()
            .filter_map(|server| {
                let id = self.by_server.get(server)?;
                let live = self.live.get(id)?;
                Some(Relist {
                    id: *id,
                    peer: live.dispatch.peer().clone(),
                    declaration: Arc::clone(&live.declaration),
                    redactor: live.redactor.clone(),
                })
            })
            .collect();
        let resolution = Resolution {
            request,
            outcomes: Vec::new(),
            relisted: Vec::new(),
            failed: plan.failed,
        };
        if plan.connect.is_empty() && relist.is_empty() {
            self.finish_turn(myself, resolution).await;
            return;
        }
        let (mut pipeline, me, ending) = (self.pipeline(), myself.clone(), self.ending.clone());
        pipeline.trace = resolution.request.trace.clone();
        tokio::spawn(async move {
            let run = preparation::run(&pipeline, plan.connect, relist, resolution, &ending);
            let Some(resolution) = run.await else {
                let _ = me.cast(CatalogMsg::Abandoned);
                return;
            };
            if let Err(ractor::MessagingErr::SendErr(CatalogMsg::Resolved(lost))) =
                me.cast(CatalogMsg::Resolved(Box::new(resolution)))
            {
                // The catalog was evicted while we connected: eviction wins, and
                // connections born during the race are closed here.
                pipeline.close_unowned(lost.outcomes).await;
            }
        });
    }

    /// Applies what the preparation task found and answers the turn.
    async fn finish_turn(&mut self, myself: &ActorRef<CatalogMsg>, resolution: Resolution) {
        let abandoned = resolution.request.abandoned();
        let Resolution {
            request:
                TurnRequest {
                    core,
                    turn,
                    reply,
                    scope,
                    budget,
                    ..
                },
            outcomes,
            relisted,
            failed,
        } = resolution;
        if self.closing || abandoned {
            // Nobody will use what this turn connected: it is closed, not kept.
            self.pipeline().close_unowned(outcomes).await;
            let _ = reply.send(Err(self.ending.answer()));
            self.preparing = false;
            return;
        }
        // A declaration that does not load is a diagnostic of every turn; its neighbours
        // load without it.
        let mut diagnostics: Vec<Diagnostic> =
            core.broken.iter().map(|b| Diagnostic::broken(b)).collect();
        diagnostics.extend(failed.iter().map(|(d, m)| Diagnostic::of(d, m.clone())));
        let kept: HashSet<String> = self.by_server.keys().cloned().collect();
        let mut denied = Vec::new();
        for outcome in outcomes {
            self.apply(myself, outcome, &mut diagnostics, &mut denied)
                .await;
        }
        let adopted: Vec<String> = self
            .by_server
            .keys()
            .filter(|s| !kept.contains(*s))
            .cloned()
            .collect();
        for (id, listed) in relisted {
            self.apply_relist(&id, listed, &mut diagnostics);
        }
        let built = self.build_turn(&core, scope.as_deref(), turn, &kept, diagnostics, denied);
        let result = built.and_then(|catalog| self.reach(myself, &core, turn, budget, catalog));
        if reply.send(result).is_err() {
            // The caller left as the turn resolved: what it connected is not kept.
            for server in adopted {
                self.close_server(&server, "the turn that connected it was abandoned");
            }
        }
        self.preparing = false;
    }

    /// One server's outcome: a new connection, a denial, a skip or a failure.
    async fn apply(
        &mut self,
        myself: &ActorRef<CatalogMsg>,
        outcome: Outcome,
        diagnostics: &mut Vec<Diagnostic>,
        denied: &mut Vec<Denial>,
    ) {
        match outcome {
            Outcome::Connected(connected) => {
                if let Err(message) = self.adopt(myself, *connected).await {
                    diagnostics.push(message);
                }
            }
            Outcome::Denied {
                declaration,
                reason,
            } => {
                self.emit(EventKind::ServerDenied {
                    server: declaration.server_id.clone(),
                    path: declaration.path.clone(),
                    reason: reason.to_string(),
                });
                self.denied
                    .insert(declaration.server_id.clone(), reason.clone());
                denied.push(Denial {
                    server: declaration.server_id.clone(),
                    path: declaration.path.clone(),
                    reason: reason.to_string(),
                    cause: reason,
                });
            }
            Outcome::Skipped {
                declaration,
                message,
            } => {
                self.emit(EventKind::ServerSkipped {
                    server: declaration.server_id.clone(),
                    path: declaration.path.clone(),
                    message: message.clone(),
                });
                diagnostics.push(Diagnostic::of(&declaration, message));
            }
            Outcome::Failed {
                declaration,
                message,
                kind,
            } => diagnostics.push(self.fail(&declaration, message, kind)),
        }
    }

    /// Puts a new connection under supervision: its actor, its dispatch rights, its
    /// prepared tools.
    async fn adopt(
        &mut self,
        myself: &ActorRef<CatalogMsg>,
        connected: Connected,
    ) -> Result<(), Diagnostic> {
        let declaration = Arc::clone(&connected.declaration);
        let generation = self.shared.next_id();
        // Boxed: starting the connection's actor is a large future, and every message
        // the catalog handles would otherwise be built at its size (a test in
        // `connect.rs` bounds the handler's).
        let started = Box::pin(Live::start(
            connected,
            &self.shared,
            self.session(),
            myself.get_cell(),
            generation,
        ));
        let live = match started.await {
            Ok(live) => live,
            Err(message) => return Err(self.fail(&declaration, message, None)),
        };
        self.emit(EventKind::ServerConnected {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            pid: live.pid,
            tools_listed: live.listed,
        });
        let id = live.actor.get_id();
        self.by_server.insert(declaration.server_id.clone(), id);
        self.live.insert(id, live);
        Ok(())
    }

    /// A relisting after `tools/list_changed`: new tools, or the connection closed as
    /// failed.
    fn apply_relist(
        &mut self,
        id: &ActorId,
        listed: Result<crate::offer::Shaped, String>,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let generation = self.shared.next_id();
        let Some(live) = self.live.get_mut(id) else {
            return;
        };
        if let Err(message) = live.relisted(listed, generation) {
            let declaration = Arc::clone(&live.declaration);
            self.close_server(&declaration.server_id, "relisting failed");
            diagnostics.push(self.fail(&declaration, message, None));
        }
    }

    /// Caches a failure for the failure TTL and reports it.
    fn fail(
        &mut self,
        declaration: &Declaration,
        message: String,
        kind: Option<ConnectErrorKind>,
    ) -> Diagnostic {
        let ttl = self.shared.config.failure_ttl;
        self.forget_listing(declaration);
        self.failures.insert(
            declaration.server_id.clone(),
            Failure {
                fingerprint: declaration.fingerprint,
                message: message.clone(),
                until: self.shared.now() + ttl,
            },
        );
        self.emit(EventKind::ServerFailed {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            message: message.clone(),
            kind,
            cached_for_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        });
        Diagnostic::of(declaration, message)
    }

    /// A connection actor stopped: a failure when it ended on its own or crashed,
    /// nothing when its catalog closed it.
    fn connection_ended(&mut self, cell: &ActorCell, crash: Option<String>) {
        let Some(live) = self.live.remove(&cell.get_id()) else {
            return;
        };
        self.by_server.remove(&live.declaration.server_id);
        let message = match (live.end.get(), crash) {
            (Some(end), _) => Some(end.to_string()),
            (None, crash) => crash,
        };
        if let Some(message) = message {
            let message = live.redactor.text(&message, View::Durable);
            self.fail(&live.declaration, message, None);
        }
    }

    /// Closes one server's connection (its actor's `post_stop` ends the process tree).
    fn close_server(&mut self, server: &str, reason: &str) {
        let Some(id) = self.by_server.remove(server) else {
            return;
        };
        if let Some(live) = self.live.remove(&id) {
            self.emit(EventKind::ServerClosed {
                server: server.to_string(),
                reason: reason.to_string(),
            });
            live.actor.stop(Some(format!("closed: {reason}")));
        }
    }

    async fn close_all(&mut self, reason: &str) -> usize {
        self.by_server.clear();
        let live: Vec<Live> = self.live.drain().map(|(_, l)| l).collect();
        for l in &live {
            self.emit(EventKind::ServerClosed {
                server: l.declaration.server_id.clone(),
                reason: reason.to_string(),
            });
        }
        close_all(live, reason, self.shared.config.close_grace).await
    }

    fn status(&self) -> Vec<ServerStatus> {
        let live = self
            .live
            .values()
            .map(|l| (l.declaration.server_id.as_str(), l.pid, l.tools.len()));
        status::collect(live, &self.failures, &self.denied, self.shared.now())
    }

    fn emit(&self, kind: EventKind) {
        self.shared.hub.emit(self.session(), kind);
    }
}
