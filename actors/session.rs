//! One session actor per live session, supervised by the runtime. It computes the
//! catalog identity of each turn, replaces a stale catalog (closing every connection of
//! the old identity) and forwards the turn to the current catalog. It never waits on a
//! catalog: closing and preparing run in the catalog and connection actors.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::actors::catalog::{
    Catalog, CatalogArgs, CatalogIdentity, CatalogMsg, ServerStatus, TurnRequest,
};
use crate::actors::shared::Shared;
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::authority::{CapabilitySet, HostPolicy};
use crate::core::AgentCore;
use crate::events::EventKind;

/// A `core_revision` that follows `refs/demiurge/live` of the core's repository, read
/// at every turn: a promotion then changes the catalog identity and reauthorizes.
pub const LIVE_REVISION: &str = "live";

/// What a host says about a session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionSpec {
    /// Session id; generated when `None`.
    pub id: Option<String>,
    /// Who the session acts for.
    pub principal: String,
    /// The Agent Core directory.
    pub core_root: PathBuf,
    /// The core revision (the live git commit, or any host label).
    pub core_revision: String,
    /// The host workspace; the core root when `None`.
    pub workspace: Option<PathBuf>,
    /// The capability snapshot; the core's `capabilities.defaults` (read each turn)
    /// when `None`.
    pub capabilities: Option<CapabilitySet>,
    /// Starting or resuming a session evicts the previous session of the same lane.
    pub lane: String,
    /// Approval floors of this session; the runtime's when `None`.
    pub policy: Option<HostPolicy>,
    /// Servers the host gives as values, beside the core's (or instead of them).
    pub inline: Option<Arc<InlineServers>>,
    /// On a cluster node (feature `cluster`): start or resume even when the node that
    /// last held the lane cannot be reached (the host knows that node is gone); by
    /// default such a start fails closed with [`super::RuntimeError::LaneUnreachable`].
    pub proceed_if_owner_unreachable: bool,
    /// The token budget of this session's tool definitions; the runtime's
    /// (`RuntimeConfig::tool_budget`) when `None`.
    pub tool_budget: Option<crate::search::ToolBudget>,
}

/// Declarations a host gives a session in memory: validated exactly as files are (the
/// same reader, through a [`crate::core::MemoryTree`]), their errors naming
/// `provenance:agent/mcp/<id>.yaml`. An id the core declares too is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InlineServers {
    /// What errors and previews call where these came from (`host`, a config path).
    pub provenance: String,
    /// `(server id, declaration YAML)`, in order.
    pub declarations: Vec<(String, String)>,
    /// Only these: the core directory's declarations and grants are not read (the
    /// session's `capabilities` must then grant what these need).
    pub only: bool,
}

impl InlineServers {
    /// Servers from `provenance`, beside the core's.
    pub fn new(provenance: impl Into<String>) -> Self {
        InlineServers {
            provenance: provenance.into(),
            declarations: Vec::new(),
            only: false,
        }
    }

    /// Adds the declaration of server `id`.
    pub fn with(mut self, id: impl Into<String>, yaml: impl Into<String>) -> Self {
        self.declarations.push((id.into(), yaml.into()));
        self
    }

    /// Only these servers: no core directory is read.
    pub fn only(mut self) -> Self {
        self.only = true;
        self
    }

    /// `core` with these servers added (or, with `only`, an empty core rooted at
    /// `root` holding just them).
    pub(crate) fn merged(&self, core: Option<&AgentCore>, root: &std::path::Path) -> AgentCore {
        let mut tree =
            crate::core::MemoryTree::new(self.provenance.clone()).with_file("agent.yaml", "{}\n");
        for (id, yaml) in &self.declarations {
            tree = tree.with_file(format!("agent/mcp/{id}.yaml"), yaml.as_bytes().to_vec());
        }
        let report =
            crate::core::read_revision(&tree, std::path::Path::new(&self.provenance), None);
        let mut merged = match core {
            Some(core) => core.clone(),
            None => AgentCore {
                root: root.to_path_buf(),
                mcp_root: "agent/mcp".into(),
                grants: Default::default(),
                declarations: Vec::new(),
                broken: Vec::new(),
            },
        };
        let taken: Vec<String> = merged
            .declarations
            .iter()
            .map(|d| d.server_id.clone())
            .chain(merged.broken.iter().map(|b| b.server_id.clone()))
            .collect();
        for declaration in report.core.declarations {
            if taken.contains(&declaration.server_id) {
                merged
                    .broken
                    .push(std::sync::Arc::new(crate::core::Broken::duplicate_inline(
                        &declaration.server_id,
                        &declaration.path,
                        &self.provenance,
                    )));
            } else {
                merged.declarations.push(declaration);
            }
        }
        merged.broken.extend(report.core.broken);
        merged
    }
}

impl SessionSpec {
    /// A spec for `core_root` with defaults: principal `local`, revision `working-tree`,
    /// lane `main`, capabilities from the core.
    pub fn new(core_root: impl Into<PathBuf>) -> Self {
        SessionSpec {
            id: None,
            principal: "local".into(),
            core_root: core_root.into(),
            core_revision: "working-tree".into(),
            workspace: None,
            capabilities: None,
            lane: "main".into(),
            policy: None,
            inline: None,
            proceed_if_owner_unreachable: false,
            tool_budget: None,
        }
    }
}

/// Why a session was evicted: its `Display` is the reason events and reports carry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum EvictReason {
    /// The host evicted it (`Runtime::evict_session`).
    Explicit,
    /// Another session started or resumed in its lane.
    Replaced,
    /// Another node of the cluster claimed its lane.
    ReplacedOnNode(String),
    /// The runtime shut down.
    Shutdown,
    /// A delegated child finished (`ChildSession::finish`).
    ChildFinished,
    /// A delegated child's handle was dropped.
    ChildDropped,
    /// The node left the cluster.
    LeftCluster,
    /// The node's lane directory ended.
    ClusterDirectoryEnded,
}

impl std::fmt::Display for EvictReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvictReason::Explicit => f.write_str("explicit"),
            EvictReason::Replaced => f.write_str("replaced"),
            EvictReason::ReplacedOnNode(node) => write!(f, "replaced_on_node:{node}"),
            EvictReason::Shutdown => f.write_str("shutdown"),
            EvictReason::ChildFinished => f.write_str("child_finished"),
            EvictReason::ChildDropped => f.write_str("child_dropped"),
            EvictReason::LeftCluster => f.write_str("left_cluster"),
            EvictReason::ClusterDirectoryEnded => f.write_str("cluster_directory_ended"),
        }
    }
}

/// What an eviction closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct EvictionReport {
    /// Session id.
    pub session: String,
    /// What evicted it: `explicit`, `replaced`, `child_finished`, `shutdown`, ...
    pub reason: String,
    /// How many server connections the eviction closed (their process trees ended).
    pub connections_closed: usize,
}

/// Messages of a session actor.
pub enum SessionMsg {
    /// Resolve the next turn against this core snapshot.
    PrepareTurn {
        /// The session's spec and canonical workspace, as read once for this turn.
        spec: Box<(SessionSpec, PathBuf)>,
        /// The core as loaded for this turn.
        core: Arc<AgentCore>,
        /// The core revision read for this turn (when the spec follows the live ref).
        revision: Option<String>,
        /// Where the catalog (or why there is none) goes; the catalog actor answers it.
        reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>,
        /// Cancelled when the caller stops waiting (its future was dropped).
        cancel: CancellationToken,
        /// Only these servers (`None`: all).
        scope: Option<Arc<Vec<String>>>,
        /// The turn's span, parent of its connects' spans.
        trace: crate::telemetry::Trace,
    },
    /// Close everything and stop.
    Evict {
        /// Recorded in the eviction event and report.
        reason: EvictReason,
        /// Answered once every connection closed.
        reply: RpcReplyPort<EvictionReport>,
    },
    /// Per-server state of the current catalog.
    Status(RpcReplyPort<Vec<ServerStatus>>),
}

#[cfg(feature = "cluster")]
impl ractor::Message for SessionMsg {}

pub(crate) struct SessionArgs {
    pub shared: Arc<Shared>,
    pub id: String,
    /// A delegated child's host-issued scope: it can only narrow.
    pub scope: Option<CapabilitySet>,
}

pub(crate) struct SessionActor;

pub(crate) struct SessionState {
    args: SessionArgs,
    current: Option<(CatalogIdentity, ActorRef<CatalogMsg>)>,
    turn: u64,
    evicted: bool,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SessionState {
            args,
            current: None,
            turn: 0,
            evicted: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMsg::PrepareTurn {
                spec,
                core,
                revision,
                reply,
                cancel,
                scope,
                trace,
            } => {
                let budget = spec
                    .0
                    .tool_budget
                    .clone()
                    .or_else(|| state.args.shared.config.tool_budget.clone());
                let request = TurnRequest {
                    core,
                    turn: 0,
                    reply,
                    cancel,
                    scope,
                    budget,
                    wake: false,
                    trace,
                };
                state.prepare_turn(&myself, request, &spec, revision).await;
            }
            SessionMsg::Evict { reason, reply } => state.evict(&myself, reason, reply),
            SessionMsg::Status(reply) => state.status(reply),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A catalog that dies is replaced at the next turn; the session lives on.
        if let SupervisionEvent::ActorTerminated(cell, ..) | SupervisionEvent::ActorFailed(cell, _) =
            event
            && state
                .current
                .as_ref()
                .is_some_and(|(_, c)| c.get_id() == cell.get_id())
        {
            state.current = None;
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some((_, c)) = state.current.take() {
            let grace = state.args.shared.config.close_grace;
            close_catalog(&c, "session stopped", PrepareError::Evicted, grace).await;
        }
        Ok(())
    }
}

impl SessionState {
    /// Hands the turn to the catalog of the session's current identity (a new one when
    /// the identity changed); the catalog answers the host directly.
    async fn prepare_turn(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        mut request: TurnRequest,
        spec: &(SessionSpec, PathBuf),
        revision: Option<String>,
    ) {
        if self.evicted {
            let _ = request.reply.send(Err(PrepareError::Evicted));
            return;
        }
        self.turn += 1;
        request.turn = self.turn;
        let catalog = match self
            .catalog_for(myself, &request.core, spec, revision)
            .await
        {
            Ok(catalog) => catalog,
            Err(e) => {
                let _ = request.reply.send(Err(e));
                return;
            }
        };
        if let Err(ractor::MessagingErr::SendErr(CatalogMsg::PrepareTurn(request))) =
            catalog.cast(CatalogMsg::PrepareTurn(request))
        {
            let _ = request.reply.send(Err(PrepareError::Evicted));
        }
    }

    /// Marks the session evicted at once (no later turn starts), then closes its
    /// catalog off the mailbox, reports, and stops.
    fn evict(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        reason: EvictReason,
        reply: RpcReplyPort<EvictionReport>,
    ) {
        let reason = reason.to_string();
        self.evicted = true;
        let catalog = self.current.take().map(|(_, c)| c);
        let shared = Arc::clone(&self.args.shared);
        let session = self.args.id.clone();
        let me = myself.clone();
        tokio::spawn(async move {
            let closed = match catalog {
                Some(c) => {
                    let grace = shared.config.close_grace;
                    close_catalog(&c, &reason, PrepareError::Evicted, grace).await
                }
                None => 0,
            };
            shared.broker.forget_session(&session);
            shared.hub.emit(
                &session,
                EventKind::SessionEvicted {
                    reason: reason.clone(),
                    connections_closed: closed,
                },
            );
            shared.hub.close_session(&session);
            let _ = reply.send(EvictionReport {
                session,
                reason,
                connections_closed: closed,
            });
            me.stop(Some("evicted".into()));
        });
    }

    /// The current catalog's per-server state, asked off the mailbox (bounded).
    fn status(&self, reply: RpcReplyPort<Vec<ServerStatus>>) {
        let Some((_, catalog)) = &self.current else {
            let _ = reply.send(Vec::new());
            return;
        };
        let catalog = catalog.clone();
        tokio::spawn(async move {
            let asked = catalog
                .call(CatalogMsg::Status, Some(Duration::from_secs(5)))
                .await;
            let status = match asked {
                Ok(ractor::rpc::CallResult::Success(s)) => s,
                _ => Vec::new(),
            };
            let _ = reply.send(status);
        });
    }

    /// The catalog of this turn's identity: the current one, or a new one after closing
    /// the stale one (no peer is reused across identities).
    async fn catalog_for(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        core: &AgentCore,
        (spec, workspace): &(SessionSpec, PathBuf),
        revision: Option<String>,
    ) -> Result<ActorRef<CatalogMsg>, PrepareError> {
        let base = spec
            .capabilities
            .clone()
            .unwrap_or_else(|| CapabilitySet::new(core.grants.iter().cloned()));
        let capabilities = match &self.args.scope {
            Some(scope) => base.narrowed_by(scope),
            None => base,
        };
        let identity = CatalogIdentity {
            session: self.args.id.clone(),
            principal: spec.principal.clone(),
            capabilities: capabilities.fingerprint(),
            core_root: core.root.clone(),
            core_revision: revision.unwrap_or_else(|| spec.core_revision.clone()),
            workspace: workspace.clone(),
            policy: spec.policy.unwrap_or(self.args.shared.config.host_policy),
        };
        if let Some((current, catalog)) = &self.current {
            if *current == identity {
                return Ok(catalog.clone());
            }
            let stale = catalog.clone();
            let grace = self.args.shared.config.close_grace;
            tokio::spawn(async move {
                // A turn still preparing there was overtaken by this one.
                let overtaken = PrepareError::Cancelled;
                close_catalog(&stale, "catalog identity changed", overtaken, grace).await;
            });
            self.current = None;
        }
        let args = CatalogArgs {
            shared: Arc::clone(&self.args.shared),
            identity: identity.clone(),
            capabilities,
            catalog_id: self.args.shared.next_id(),
        };
        let (catalog, _) = Actor::spawn_linked(None, Catalog, args, myself.get_cell())
            .await
            .map_err(|e| PrepareError::Unavailable(e.to_string()))?;
        self.current = Some((identity, catalog.clone()));
        Ok(catalog)
    }
}

/// Asks a catalog to close its connections and stop; its pending turns end at once
/// with `answer`. Returns how many connections it closed.
pub(crate) async fn close_catalog(
    catalog: &ActorRef<CatalogMsg>,
    reason: &str,
    answer: PrepareError,
    grace: Duration,
) -> usize {
    let reason = reason.to_string();
    match catalog
        .call(
            |reply| CatalogMsg::Close {
                reason,
                answer,
                reply,
            },
            Some(grace * 6 + Duration::from_secs(5)),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(n)) => n,
        _ => {
            // Unresponsive: stopping it still closes its connections in post_stop.
            let _ = catalog
                .stop_and_wait(Some("forced".into()), Some(grace * 6))
                .await;
            0
        }
    }
}
