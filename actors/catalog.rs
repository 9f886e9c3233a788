//! One catalog actor per session and catalog identity (principal, capabilities, core
//! root and revision, workspace, connect policy). It supervises the connection actors
//! of that identity, keeps the per-server failure cache and the naming state, and
//! resolves each turn's catalog.
//!
//! A turn: plan in the handler (keep unchanged healthy peers, reuse cached failures,
//! close changed or removed servers), authorize and connect the rest on a spawned task
//! (so approvals and slow servers never block the mailbox), then apply the outcomes
//! and answer. Turns of one catalog are queued, never interleaved.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use rmcp::model::Tool;

use super::connection::{Connection, ConnectionArgs, ConnectionMsg, FAILED};
use super::shared::Shared;
use super::turn::{Binding, Denial, Diagnostic, PrepareError, ToolEntry, TurnCatalog};
use crate::authority::{Action, ApprovalRequest};
use crate::authority::{CapabilitySet, ConnectPreview};
use crate::core::{AgentCore, Declaration, Endpoint, Fingerprint};
use crate::events::EventKind;
use crate::naming::{self, Names, ServerTools};
use crate::net::PinnedClient;
use crate::process::{
    append_stderr_log, child_environment, interpolate_all, private_dir, referenced_values,
};
use crate::redact::{Redactor, View};
use crate::transport::{
    ListedTools, McpClient, ServerSignals, StdioLaunch, connect_http, connect_stdio,
};
use std::collections::BTreeMap;

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
    pub policy: crate::authority::HostPolicy,
}

/// The state of one server, for `/servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Connected.
    Connected {
        /// Child pid (stdio).
        pid: Option<u32>,
        /// Tools listed (before filtering).
        tools: usize,
    },
    /// Failed; retried after the cache expires.
    Failed {
        /// Redacted diagnostic.
        message: String,
        /// Milliseconds until the retry.
        retry_in_ms: u64,
    },
    /// Denied at the last turn (asked again next turn).
    Denied {
        /// Why.
        reason: String,
    },
}

/// One server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    /// Server id.
    pub server: String,
    /// Its state.
    pub state: ServerState,
}

/// Messages of a catalog actor.
pub enum CatalogMsg {
    /// Resolve a turn against this core snapshot.
    PrepareTurn {
        /// The core as loaded for this turn.
        core: Arc<AgentCore>,
        /// Turn number.
        turn: u64,
        /// The answer.
        reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>,
    },
    /// The preparation task finished.
    Resolved(Box<Resolution>),
    /// Close every connection and stop; answers how many were closed.
    Close {
        /// Why (for events and logs).
        reason: String,
        /// Count of closed connections.
        reply: RpcReplyPort<usize>,
    },
    /// Per-server state.
    Status(RpcReplyPort<Vec<ServerStatus>>),
}

pub(crate) struct Resolution {
    core: Arc<AgentCore>,
    turn: u64,
    reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>,
    outcomes: Vec<Outcome>,
    cached_failures: Vec<(Arc<Declaration>, String)>,
}

// Outcomes are built once per server per turn and moved, never stored: boxing the
// connected variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Outcome {
    Connected {
        declaration: Arc<Declaration>,
        client: McpClient,
        listed: ListedTools,
        redactor: Redactor,
        signals: Arc<ServerSignals>,
    },
    Relisted {
        server: String,
        result: Result<ListedTools, String>,
    },
    Denied {
        declaration: Arc<Declaration>,
        reason: String,
    },
    Skipped {
        declaration: Arc<Declaration>,
        message: String,
    },
    Failed {
        declaration: Arc<Declaration>,
        message: String,
    },
}

struct Live {
    actor: ActorRef<ConnectionMsg>,
    declaration: Arc<Declaration>,
    tools: Arc<Vec<Tool>>,
    /// What listing found wrong (cut lists, duplicate names): a diagnostic every turn.
    notes: Vec<String>,
    redactor: Redactor,
    pid: Option<u32>,
    /// A request handle for relisting after `tools/list_changed`.
    peer: Option<rmcp::Peer<rmcp::RoleClient>>,
    /// Flags the server's notifications set (`tools/list_changed`), read and cleared by
    /// the next turn.
    signals: Arc<ServerSignals>,
    /// The dispatch rights the actor granted this catalog (asked once, at connect).
    dispatch: super::connection::Dispatch,
}

struct Failure {
    fingerprint: Fingerprint,
    message: String,
    until: Instant,
}

/// (server id, tool list identity, declaration fingerprint) per server, and the entries.
type LastEntries = (
    Vec<(String, usize, Fingerprint)>,
    Arc<Vec<ToolEntry>>,
    Arc<HashMap<String, usize>>,
);

/// A turn waiting for the one in progress: core snapshot, turn number, reply.
type PendingTurn = (
    Arc<AgentCore>,
    u64,
    RpcReplyPort<Result<TurnCatalog, PrepareError>>,
);

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
    live: HashMap<String, Live>,
    failures: HashMap<String, Failure>,
    denied: HashMap<String, String>,
    names: Names,
    /// The last turn's entries and the servers they were built from.
    last_entries: Option<LastEntries>,
    preparing: bool,
    queue: VecDeque<PendingTurn>,
    closing: bool,
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
            failures: HashMap::new(),
            denied: HashMap::new(),
            names: Names::default(),
            last_entries: None,
            preparing: false,
            queue: VecDeque::new(),
            closing: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CatalogMsg::PrepareTurn { core, turn, reply } => {
                if state.closing {
                    let _ = reply.send(Err(PrepareError::Evicted));
                } else if state.preparing {
                    state.queue.push_back((core, turn, reply));
                } else {
                    state.start_turn(&myself, core, turn, reply).await;
                }
            }
            CatalogMsg::Resolved(resolution) => {
                state.finish_turn(&myself, *resolution).await;
                while !state.preparing && !state.closing {
                    let Some((core, turn, reply)) = state.queue.pop_front() else {
                        break;
                    };
                    state.start_turn(&myself, core, turn, reply).await;
                }
            }
            CatalogMsg::Close { reason, reply } => {
                state.closing = true;
                for (_, _, pending) in state.queue.drain(..) {
                    let _ = pending.send(Err(PrepareError::Evicted));
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
        let (cell, reason) = match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                (cell, reason.unwrap_or_default())
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                (cell, format!("{FAILED}the connection actor crashed: {err}"))
            }
            _ => return Ok(()),
        };
        state.connection_ended(&cell, &reason);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.close_all("catalog stopped").await;
        Ok(())
    }
}

impl CatalogState {
    fn session(&self) -> &str {
        &self.identity.session
    }

    async fn start_turn(
        &mut self,
        myself: &ActorRef<CatalogMsg>,
        core: Arc<AgentCore>,
        turn: u64,
        reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>,
    ) {
        self.preparing = true;
        let now = self.shared.now();
        let declared: HashMap<&str, &Arc<Declaration>> =
            core.enabled().map(|d| (d.server_id.as_str(), d)).collect();

        // Close peers whose declaration changed or went away: only those.
        let stale: Vec<String> = self
            .live
            .iter()
            .filter(|(id, l)| {
                declared
                    .get(id.as_str())
                    .is_none_or(|d| d.fingerprint != l.declaration.fingerprint)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(l) = self.live.remove(&id) {
                self.emit(EventKind::ServerClosed {
                    server: id.clone(),
                    reason: "declaration changed or removed".into(),
                });
                l.actor
                    .stop(Some("closed: declaration changed or removed".into()));
            }
        }
        self.failures.retain(|id, f| {
            declared
                .get(id.as_str())
                .is_some_and(|d| d.fingerprint == f.fingerprint)
                && f.until > now
        });
        self.denied.clear();

        let mut todo = Vec::new();
        let mut cached_failures = Vec::new();
        let mut relist = Vec::new();
        for decl in core.enabled() {
            if let Some(l) = self.live.get(&decl.server_id) {
                // A flag the connection sets on tools/list_changed; reading it costs no
                // message, so a warm turn touches no other actor.
                let changed = l.signals.take_tools_changed();
                if changed && let Some(peer) = &l.peer {
                    relist.push((decl.server_id.clone(), peer.clone()));
                }
            } else if let Some(f) = self.failures.get(&decl.server_id) {
                cached_failures.push((Arc::clone(decl), f.message.clone()));
            } else {
                todo.push(Arc::clone(decl));
            }
        }
        let ctx = ResolveContext {
            shared: Arc::clone(&self.shared),
            policy: self.identity.policy,
            session: self.session().to_string(),
            capabilities: self.capabilities.clone(),
            workspace: self.identity.workspace.clone(),
        };
        if todo.is_empty() && relist.is_empty() {
            // Warm turn: nothing to authorize, connect or relist; answer right here.
            let resolution = Resolution {
                core,
                turn,
                reply,
                outcomes: Vec::new(),
                cached_failures,
            };
            self.finish_turn(myself, resolution).await;
            return;
        }
        let me = myself.clone();
        tokio::spawn(async move {
            let connects = futures::future::join_all(todo.into_iter().map(|d| ctx.resolve(d)));
            let relists =
                futures::future::join_all(relist.into_iter().map(|(server, peer)| async move {
                    let result = crate::transport::list_tools(&peer).await;
                    Outcome::Relisted { server, result }
                }));
            let (mut outcomes, relisted) = futures::join!(connects, relists);
            outcomes.extend(relisted);
            let resolution = Resolution {
                core,
                turn,
                reply,
                outcomes,
                cached_failures,
            };
            if let Err(ractor::MessagingErr::SendErr(CatalogMsg::Resolved(lost))) =
                me.cast(CatalogMsg::Resolved(Box::new(resolution)))
            {
                // The catalog was evicted while we connected: eviction wins, and
                // connections born during the race are closed here.
                close_orphans(&ctx, lost.outcomes).await;
            }
        });
    }

    async fn finish_turn(&mut self, myself: &ActorRef<CatalogMsg>, resolution: Resolution) {
        let Resolution {
            core,
            turn,
            reply,
            outcomes,
            cached_failures,
        } = resolution;
        if self.closing {
            let ctx = self.resolve_context();
            close_orphans(&ctx, outcomes).await;
            let _ = reply.send(Err(PrepareError::Evicted));
            self.preparing = false;
            return;
        }
        // A declaration that does not load is a diagnostic of every turn; its neighbours
        // load without it.
        let mut diagnostics: Vec<Diagnostic> = core
            .broken
            .iter()
            .map(|b| Diagnostic {
                server: b.server_id.clone(),
                path: b.path.clone(),
                message: b
                    .errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            })
            .collect();
        diagnostics.extend(cached_failures.iter().map(|(d, m)| Diagnostic {
            server: d.server_id.clone(),
            path: d.path.clone(),
            message: m.clone(),
        }));
        let mut denied = Vec::new();
        let kept: std::collections::HashSet<String> = self.live.keys().cloned().collect();
        let now = self.shared.now();
        let ttl = self.shared.config.failure_ttl;

        for outcome in outcomes {
            match outcome {
                Outcome::Connected {
                    declaration,
                    client,
                    listed,
                    redactor,
                    signals,
                } => {
                    let pid = client.pid();
                    let peer = client.peer();
                    let args = ConnectionArgs {
                        client,
                        declaration: Arc::clone(&declaration),
                        catalog_id: self.catalog_id,
                        session: self.session().to_string(),
                        redactor: redactor.clone(),
                        hub: Arc::clone(&self.shared.hub),
                        home: self.shared.config.home.clone(),
                        grace: self.shared.config.close_grace,
                        signals: Arc::clone(&signals),
                    };
                    match Actor::spawn_linked(None, Connection, args, myself.get_cell()).await {
                        Ok((actor, _)) => {
                            let catalog_id = self.catalog_id;
                            let grant = actor
                                .call(
                                    |reply| ConnectionMsg::Dispatch { catalog_id, reply },
                                    Some(std::time::Duration::from_secs(10)),
                                )
                                .await;
                            let Ok(ractor::rpc::CallResult::Success(Ok(dispatch))) = grant else {
                                actor.stop(Some("closed: no dispatch grant".into()));
                                diagnostics.push(self.fail(
                                    &declaration,
                                    "the connection actor did not answer".into(),
                                    now,
                                    ttl,
                                ));
                                continue;
                            };
                            self.emit(EventKind::ServerConnected {
                                server: declaration.server_id.clone(),
                                path: declaration.path.clone(),
                                pid,
                                tools_listed: listed.tools.len(),
                            });
                            let (tools, notes) =
                                shape_listing(listed, &redactor, &self.shared.schemas);
                            self.live.insert(
                                declaration.server_id.clone(),
                                Live {
                                    actor,
                                    declaration,
                                    notes,
                                    tools,
                                    redactor,
                                    pid,
                                    peer: Some(peer),
                                    signals,
                                    dispatch,
                                },
                            );
                        }
                        Err(e) => {
                            let message = format!("cannot start the connection actor: {e}");
                            diagnostics.push(self.fail(&declaration, message, now, ttl));
                        }
                    }
                }
                Outcome::Relisted { server, result } => match result {
                    Ok(listed) => {
                        if let Some(l) = self.live.get_mut(&server) {
                            (l.tools, l.notes) =
                                shape_listing(listed, &l.redactor, &self.shared.schemas);
                        }
                    }
                    Err(e) => {
                        if let Some(l) = self.live.remove(&server) {
                            let message = format!(
                                "tools/list failed after a list change: {}",
                                l.redactor.text(&e, View::Durable)
                            );
                            l.actor.stop(Some("closed: relisting failed".into()));
                            diagnostics.push(self.fail(&l.declaration, message, now, ttl));
                        }
                    }
                },
                Outcome::Denied {
                    declaration,
                    reason,
                } => {
                    self.emit(EventKind::ServerDenied {
                        server: declaration.server_id.clone(),
                        path: declaration.path.clone(),
                        reason: reason.clone(),
                    });
                    self.denied
                        .insert(declaration.server_id.clone(), reason.clone());
                    denied.push(Denial {
                        server: declaration.server_id.clone(),
                        path: declaration.path.clone(),
                        reason,
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
                    diagnostics.push(Diagnostic {
                        server: declaration.server_id.clone(),
                        path: declaration.path.clone(),
                        message,
                    });
                }
                Outcome::Failed {
                    declaration,
                    message,
                } => {
                    diagnostics.push(self.fail(&declaration, message, now, ttl));
                }
            }
        }

        let result = self.build_turn(&core, turn, &kept, diagnostics, denied);
        if let Ok(catalog) = &result {
            self.emit(EventKind::TurnPrepared {
                turn,
                tools: catalog.tools().len(),
                failed: catalog.diagnostics().len(),
                denied: catalog.denied().len(),
            });
        }
        let _ = reply.send(result);
        self.preparing = false;
    }

    fn fail(
        &mut self,
        declaration: &Declaration,
        message: String,
        now: Instant,
        ttl: std::time::Duration,
    ) -> Diagnostic {
        self.failures.insert(
            declaration.server_id.clone(),
            Failure {
                fingerprint: declaration.fingerprint,
                message: message.clone(),
                until: now + ttl,
            },
        );
        self.emit(EventKind::ServerFailed {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            message: message.clone(),
            cached_for_ms: ttl.as_millis() as u64,
        });
        Diagnostic {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            message,
        }
    }

    fn build_turn(
        &mut self,
        core: &AgentCore,
        turn: u64,
        kept: &std::collections::HashSet<String>,
        mut diagnostics: Vec<Diagnostic>,
        denied: Vec<Denial>,
    ) -> Result<TurnCatalog, PrepareError> {
        let connected: Vec<&Arc<Declaration>> = core
            .enabled()
            .filter(|d| self.live.contains_key(&d.server_id))
            .collect();
        for decl in &connected {
            for note in &self.live[&decl.server_id].notes {
                diagnostics.push(Diagnostic {
                    server: decl.server_id.clone(),
                    path: decl.path.clone(),
                    message: note.clone(),
                });
            }
        }
        // Same servers, same tool lists, same declarations: the entries of the last turn
        // are still right; share them instead of filtering, renaming and rebuilding.
        let key: Vec<(String, usize, Fingerprint)> = connected
            .iter()
            .map(|d| {
                (
                    d.server_id.clone(),
                    Arc::as_ptr(&self.live[&d.server_id].tools) as usize,
                    d.fingerprint,
                )
            })
            .collect();
        if let Some((last_key, entries, index)) = &self.last_entries
            && *last_key == key
        {
            return Ok(TurnCatalog::from_parts(
                Arc::clone(&self.shared),
                self.identity.session.clone(),
                self.catalog_id,
                turn,
                self.identity.policy,
                (Arc::clone(entries), Arc::clone(index)),
                diagnostics,
                denied,
            ));
        }
        let mut servers = Vec::new();
        for decl in &connected {
            let l = &self.live[&decl.server_id];
            let tools: Vec<&str> = l
                .tools
                .iter()
                .map(|t| t.name.as_ref())
                .filter(|name| naming::filter_allows(&decl.tools, name))
                .collect();
            servers.push(ServerTools {
                server_id: &decl.server_id,
                tools,
                kept: kept.contains(&decl.server_id),
            });
        }
        let names = naming::assign(&servers, &self.names);

        let mut entries = Vec::new();
        for server in &servers {
            let l = &self.live[server.server_id];
            let call_allowed = self.capabilities.allows(&l.declaration.call_capability);
            for tool in l
                .tools
                .iter()
                .filter(|t| naming::filter_allows(&l.declaration.tools, &t.name))
            {
                let key = (server.server_id.to_string(), tool.name.to_string());
                let Some(name) = names.tools.get(&key) else {
                    continue;
                };
                if let Some(host) = self
                    .shared
                    .config
                    .host_tools
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                {
                    return Err(PrepareError::Collision(format!(
                        "tool name `{name}` is claimed by {} and mcp:{}:{}/{}; rename one of them or filter the MCP tool out",
                        host.provenance, l.declaration.path, server.server_id, tool.name
                    )));
                }
                entries.push(ToolEntry {
                    name: name.clone(),
                    server: server.server_id.to_string(),
                    tool: tool.name.to_string(),
                    description: tool.description.as_deref().unwrap_or_default().to_string(),
                    input_schema: Arc::clone(&tool.input_schema),
                    binding: Binding {
                        session: self.identity.session.clone(),
                        catalog_id: self.catalog_id,
                        actor: l.actor.clone(),
                        declaration: Arc::clone(&l.declaration),
                        redactor: l.redactor.clone(),
                        dispatch: l.dispatch.clone(),
                        call_allowed,
                    },
                });
            }
        }
        self.names = names;
        let index: HashMap<String, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let shared_entries = (Arc::new(entries), Arc::new(index));
        self.last_entries = Some((
            key,
            Arc::clone(&shared_entries.0),
            Arc::clone(&shared_entries.1),
        ));
        Ok(TurnCatalog::from_parts(
            Arc::clone(&self.shared),
            self.identity.session.clone(),
            self.catalog_id,
            turn,
            self.identity.policy,
            shared_entries,
            diagnostics,
            denied,
        ))
    }

    fn connection_ended(&mut self, cell: &ActorCell, reason: &str) {
        let Some(id) = self
            .live
            .iter()
            .find(|(_, l)| l.actor.get_id() == cell.get_id())
            .map(|(id, _)| id.clone())
        else {
            return;
        };
        let Some(l) = self.live.remove(&id) else {
            return;
        };
        if let Some(message) = reason.strip_prefix(FAILED) {
            let message = l.redactor.text(message, View::Durable);
            let now = self.shared.now();
            let ttl = self.shared.config.failure_ttl;
            self.fail(&l.declaration, message, now, ttl);
        }
    }

    async fn close_all(&mut self, reason: &str) -> usize {
        let live: Vec<(String, Live)> = self.live.drain().collect();
        let count = live.len();
        let grace = self.shared.config.close_grace;
        let waits = live.into_iter().map(|(id, l)| {
            self.emit(EventKind::ServerClosed {
                server: id,
                reason: reason.to_string(),
            });
            async move {
                let _ = l
                    .actor
                    .stop_and_wait(Some(format!("closed: {reason}")), Some(grace * 4))
                    .await;
            }
        });
        let waits: Vec<_> = waits.collect();
        futures::future::join_all(waits).await;
        count
    }

    fn status(&self) -> Vec<ServerStatus> {
        let now = self.shared.now();
        let mut out: Vec<ServerStatus> = self
            .live
            .iter()
            .map(|(id, l)| ServerStatus {
                server: id.clone(),
                state: ServerState::Connected {
                    pid: l.pid,
                    tools: l.tools.len(),
                },
            })
            .collect();
        out.extend(self.failures.iter().map(|(id, f)| ServerStatus {
            server: id.clone(),
            state: ServerState::Failed {
                message: f.message.clone(),
                retry_in_ms: f.until.saturating_duration_since(now).as_millis() as u64,
            },
        }));
        out.extend(self.denied.iter().map(|(id, r)| ServerStatus {
            server: id.clone(),
            state: ServerState::Denied { reason: r.clone() },
        }));
        out.sort_by(|a, b| a.server.cmp(&b.server));
        out
    }

    fn emit(&self, kind: EventKind) {
        self.shared.hub.emit(self.session(), kind);
    }

    fn resolve_context(&self) -> ResolveContext {
        ResolveContext {
            shared: Arc::clone(&self.shared),
            policy: self.identity.policy,
            session: self.session().to_string(),
            capabilities: self.capabilities.clone(),
            workspace: self.identity.workspace.clone(),
        }
    }
}

/// Closes clients that no catalog will own (eviction raced the preparation).
async fn close_orphans(ctx: &ResolveContext, outcomes: Vec<Outcome>) {
    let closes = outcomes.into_iter().filter_map(|o| match o {
        Outcome::Connected {
            declaration,
            client,
            redactor,
            ..
        } => Some(async move {
            let report = client.close(ctx.shared.config.close_grace).await;
            if let Some(stderr) = report.stderr {
                let _ = append_stderr_log(
                    &ctx.shared.config.home,
                    &declaration.server_id,
                    &ctx.session,
                    &stderr,
                    &redactor,
                );
            }
        }),
        _ => None,
    });
    futures::future::join_all(closes).await;
}

/// What the preparation task needs; no actor state.
struct ResolveContext {
    shared: Arc<Shared>,
    policy: crate::authority::HostPolicy,
    session: String,
    capabilities: CapabilitySet,
    workspace: PathBuf,
}

impl ResolveContext {
    /// Authorizes and connects one server, in the order of decisions.md section 2.
    async fn resolve(&self, declaration: Arc<Declaration>) -> Outcome {
        let denied = |reason: String| Outcome::Denied {
            declaration: Arc::clone(&declaration),
            reason,
        };
        // 1. connect capability.
        let connect = declaration.connect_capability();
        if !self.capabilities.allows(&connect) {
            return denied(format!(
                "missing capability {connect}; grant it under capabilities.defaults in agent.yaml"
            ));
        }
        // 2. cwd inside the workspace, resolved once.
        let (command, args, env, cwd) = match &declaration.endpoint {
            Endpoint::Stdio {
                command,
                args,
                env,
                cwd,
            } => (command, args, env, cwd),
            Endpoint::StreamableHttp { url, headers } => {
                let (url, headers) = (url.clone(), headers.clone());
                return self.resolve_http(declaration, &url, &headers).await;
            }
        };
        let cwd = match resolve_cwd(&self.workspace, cwd.as_deref()) {
            Ok(p) => p,
            Err(reason) => return denied(reason),
        };
        // 3. connect approval (never weaker than prompt).
        if !self.approve_connect(&declaration, Some(&cwd), &[]).await {
            return denied("connect approval denied".into());
        }
        // 4. interpolation, only now.
        let declared_env = match self.interpolated(&declaration, env) {
            Ok(values) => values,
            Err(skipped) => return skipped,
        };
        let redactor = connection_redactor(&declared_env, &Default::default(), args).with_secrets(
            env.values()
                .flat_map(|v| referenced_values(v, &self.shared.config.host_env)),
        );
        let home = self.shared.server_home();
        if let Err(e) = private_dir(&home) {
            return Outcome::Failed {
                declaration: Arc::clone(&declaration),
                message: format!("cannot prepare the servers' home: {e}"),
            };
        }
        let launch = StdioLaunch {
            command: command.clone(),
            args: args.clone(),
            env: child_environment(&self.shared.config.host_env, &home, &declared_env),
            cwd,
        };
        // 5. spawn, initialize and list under a discovery permit.
        let _permit = match self.start_connecting(&declaration).await {
            Ok(permit) => permit,
            Err(failed) => return failed,
        };
        let signals = Arc::new(ServerSignals::default());
        match connect_stdio(
            &launch,
            Arc::clone(&signals),
            declaration.connect_timeout,
            self.shared.config.close_grace,
            &self.shared.processes,
        )
        .await
        {
            Ok((client, listed)) => Outcome::Connected {
                declaration,
                client,
                listed,
                redactor,
                signals,
            },
            Err((mut message, stderr)) => {
                if let Some(stderr) = stderr.filter(|s| !s.text.is_empty()) {
                    let home = &self.shared.config.home;
                    if append_stderr_log(
                        home,
                        &declaration.server_id,
                        &self.session,
                        &stderr,
                        &redactor,
                    )
                    .is_ok()
                    {
                        let log = home.join("logs").join("mcp-stderr.log");
                        message = format!("{message}; its stderr is in {}", log.display());
                    }
                }
                let message = crate::result::cap(&redactor.text(&message, View::Durable));
                Outcome::Failed {
                    declaration,
                    message,
                }
            }
        }
    }
    /// The streamable HTTP part of [`ResolveContext::resolve`]: URL policy before
    /// approval and before any client exists, then approval, header interpolation, and
    /// a pinned client that checks every request again.
    async fn resolve_http(
        &self,
        declaration: Arc<Declaration>,
        url: &str,
        headers: &BTreeMap<String, String>,
    ) -> Outcome {
        let denied = |reason: String| Outcome::Denied {
            declaration: Arc::clone(&declaration),
            reason,
        };
        let server = declaration.server_id.clone();
        // 3. the URL policy on the declared URL (a blocked URL never reaches approval).
        let decision = self.shared.net.check_url(url).await;
        self.emit_decision("connect", &server, &decision);
        if !decision.allowed {
            let target = if decision.target.is_empty() {
                "the declared url".to_string()
            } else {
                decision.target.clone()
            };
            return denied(format!(
                "the URL policy blocks {target} ({})",
                decision.reason
            ));
        }
        // 4. connect approval, showing the origin and the validated addresses.
        if !self
            .approve_connect(&declaration, None, &decision.resolved_addresses)
            .await
        {
            return denied("connect approval denied".into());
        }
        // 5. header interpolation, only now.
        let values = match self.interpolated(&declaration, headers) {
            Ok(values) => values,
            Err(skipped) => return skipped,
        };
        let redactor = connection_redactor(&BTreeMap::new(), &values, &[])
            .with_secrets(url_secrets(url))
            .with_secrets(
                headers
                    .values()
                    .flat_map(|v| referenced_values(v, &self.shared.config.host_env)),
            );
        let _permit = match self.start_connecting(&declaration).await {
            Ok(permit) => permit,
            Err(failed) => return failed,
        };
        let declared = headers
            .keys()
            .filter_map(|h| http::HeaderName::try_from(h.as_str()).ok())
            .collect();
        let (hub, session) = (Arc::clone(&self.shared.hub), self.session.clone());
        let hook_server = server.clone();
        let hook: crate::net::client::DecisionHook = Arc::new(move |d| {
            hub.emit(
                &session,
                EventKind::UrlDecision {
                    phase: "request",
                    server: hook_server.clone(),
                    decision: serde_json::to_value(d).unwrap_or_default(),
                },
            );
        });
        let client = PinnedClient::new(Arc::clone(&self.shared.net), declared, hook);
        let signals = Arc::new(ServerSignals::default());
        match connect_http(
            url,
            &values,
            client,
            Arc::clone(&signals),
            declaration.connect_timeout,
        )
        .await
        {
            Ok((client, listed)) => Outcome::Connected {
                declaration,
                client,
                listed,
                redactor,
                signals,
            },
            Err(message) => Outcome::Failed {
                message: crate::result::cap(&redactor.text(&message, View::Durable)),
                declaration,
            },
        }
    }

    /// Asks the broker for connect approval under the effective (never weaker than
    /// prompt) policy, with the preview of what would start or be reached.
    async fn approve_connect(
        &self,
        declaration: &Declaration,
        cwd: Option<&Path>,
        addresses: &[String],
    ) -> bool {
        let policy = self.policy.connect_policy(declaration);
        let request = ApprovalRequest {
            session: self.session.clone(),
            action: Action::Connect,
            server: declaration.server_id.clone(),
            tool: None,
            preview: ConnectPreview::new(declaration, policy, cwd, addresses),
        };
        self.shared
            .broker
            .decide(request, declaration.fingerprint, policy)
            .await
            .allowed
    }

    /// `${NAME}` interpolation of declared env or headers; a missing variable skips the
    /// server for this turn (not failure-cached).
    // The error is the turn's outcome for this server, returned as is (never `Connected`).
    #[allow(clippy::result_large_err)]
    fn interpolated(
        &self,
        declaration: &Arc<Declaration>,
        map: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, Outcome> {
        interpolate_all(map, &self.shared.config.host_env).map_err(|missing| Outcome::Skipped {
            declaration: Arc::clone(declaration),
            message: missing.to_string(),
        })
    }

    /// Waits for a discovery permit and reports that the server is being reached.
    // The error is the turn's outcome for this server, returned as is (never `Connected`).
    #[allow(clippy::result_large_err)]
    async fn start_connecting(
        &self,
        declaration: &Arc<Declaration>,
    ) -> Result<super::limiter::Permit, Outcome> {
        let permit = self
            .shared
            .limiter
            .acquire()
            .await
            .ok_or_else(|| Outcome::Failed {
                declaration: Arc::clone(declaration),
                message: "the runtime is shutting down".into(),
            })?;
        self.shared.hub.emit(
            &self.session,
            EventKind::ServerConnecting {
                server: declaration.server_id.clone(),
                path: declaration.path.clone(),
            },
        );
        Ok(permit)
    }

    fn emit_decision(&self, phase: &'static str, server: &str, decision: &crate::net::Decision) {
        self.shared.hub.emit(
            &self.session,
            EventKind::UrlDecision {
                phase,
                server: server.to_string(),
                decision: serde_json::to_value(decision).unwrap_or_default(),
            },
        );
    }
}

/// Secrets a URL carries: userinfo and query values.
fn url_secrets(url: &str) -> Vec<(String, String)> {
    let Ok(u) = url::Url::parse(url) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if !u.username().is_empty() {
        out.push(("url_username".to_string(), u.username().to_string()));
    }
    if let Some(p) = u.password() {
        out.push(("url_password".to_string(), p.to_string()));
    }
    out.extend(
        u.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned())),
    );
    out
}

/// The secrets a stdio connection knows: its interpolated env values and the values of
/// secret-bearing options in its args.
pub(crate) fn connection_redactor(
    env: &std::collections::BTreeMap<String, String>,
    headers: &std::collections::BTreeMap<String, String>,
    args: &[String],
) -> Redactor {
    // A header value is a secret, and so is its last word (`Bearer <token>`), in case
    // the token shows up on its own.
    let header_words = headers.iter().filter_map(|(name, value)| {
        let last = value.split_whitespace().last()?;
        (last != value).then(|| (name.clone(), last.to_string()))
    });
    Redactor::new()
        .with_secrets(env.iter().map(|(k, v)| (k.clone(), v.clone())))
        .with_secrets(headers.iter().map(|(k, v)| (k.clone(), v.clone())))
        .with_secrets(header_words)
        .with_secrets(crate::authority::preview::secret_arg_values(args))
}

/// Longest tool description kept (a hostile server could send megabytes).
pub const MAX_DESCRIPTION: usize = 4_096;

/// Tools as the model may see them, and what the listing got wrong as diagnostics.
///
/// A tool whose name carries a secret of this connection (or a secret shape such as
/// `token=...`) is hidden: a name is shown everywhere (catalog, CLI, events, other
/// diagnostics), so it cannot be redacted into something callable. The note says how
/// many, never which. Of tools listed twice the first is kept. Descriptions are capped
/// and redacted, schemas redacted, once per listing (not per turn).
fn shape_listing(
    listed: ListedTools,
    redactor: &Redactor,
    schemas: &SchemaPool,
) -> (Arc<Vec<Tool>>, Vec<String>) {
    let mut notes = Vec::new();
    if listed.truncated {
        notes.push(format!(
            "the tool list was cut at {} tools",
            crate::transport::MAX_TOOLS
        ));
    }
    let total = listed.tools.len();
    // The raw name and the name it becomes (`sk.live.x` is exposed as `sk-live-x`).
    let carries_secret = |name: &str| {
        let exposed = naming::normalize_fragment(name, "tool");
        redactor.text(name, View::Model) != name || redactor.text(&exposed, View::Model) != exposed
    };
    let clean: Vec<Tool> = listed
        .tools
        .into_iter()
        .filter(|t| !carries_secret(&t.name))
        .collect();
    if clean.len() < total {
        notes.push(format!(
            "{} tool(s) hidden: the name contains a secret value; rename the tool on the server",
            total - clean.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut twice: Vec<String> = Vec::new();
    let tools = clean
        .into_iter()
        .filter(|t| {
            let first = seen.insert(t.name.to_string());
            if !first && !twice.iter().any(|n| n == t.name.as_ref()) {
                twice.push(t.name.to_string());
            }
            first
        })
        .map(|mut tool| {
            if let Some(d) = &tool.description {
                tool.description = Some(
                    crate::result::cap_chars(&redactor.text(d, View::Model), MAX_DESCRIPTION)
                        .into(),
                );
            }
            let schema = serde_json::Value::Object(tool.input_schema.as_ref().clone());
            if let serde_json::Value::Object(clean) = redactor.json(&schema, View::Model) {
                tool.input_schema = schemas.intern(clean);
            }
            tool
        })
        .collect();
    if !twice.is_empty() {
        notes.push(format!(
            "tool names listed more than once, later ones ignored: {}",
            twice.join(", ")
        ));
    }
    (Arc::new(tools), notes)
}

/// Identical input schemas shared across connections and sessions: sixty sessions on the
/// same servers hold one copy of each schema, not sixty. Entries are weak, so a schema
/// no connection uses any more is freed.
#[derive(Default)]
pub(crate) struct SchemaPool {
    entries: std::sync::Mutex<HashMap<String, std::sync::Weak<rmcp::model::JsonObject>>>,
}

impl SchemaPool {
    fn intern(&self, schema: rmcp::model::JsonObject) -> Arc<rmcp::model::JsonObject> {
        // serde_json maps are sorted, so equal schemas serialize equally.
        let key = serde_json::to_string(&schema).unwrap_or_default();
        let Ok(mut entries) = self.entries.lock() else {
            return Arc::new(schema);
        };
        if let Some(shared) = entries.get(&key).and_then(std::sync::Weak::upgrade) {
            return shared;
        }
        if entries.len() >= 1024 && entries.len().is_power_of_two() {
            entries.retain(|_, w| w.strong_count() > 0);
        }
        let shared = Arc::new(schema);
        entries.insert(key, Arc::downgrade(&shared));
        shared
    }
}

/// Resolves a declared cwd (relative to the workspace), following symlinks, and checks
/// that it stays inside the workspace.
///
/// # Errors
/// A denial reason naming the fix.
pub(crate) fn resolve_cwd(workspace: &Path, cwd: Option<&str>) -> Result<PathBuf, String> {
    let Some(cwd) = cwd else {
        return Ok(workspace.to_path_buf());
    };
    let joined = workspace.join(cwd);
    let real = joined.canonicalize().map_err(|e| {
        format!(
            "cwd `{cwd}` does not resolve ({e}); create it inside the workspace or fix the path"
        )
    })?;
    if !real.starts_with(workspace) {
        return Err(format!(
            "cwd `{cwd}` resolves outside the workspace; use a directory inside {}",
            workspace.display()
        ));
    }
    if !real.is_dir() {
        return Err(format!("cwd `{cwd}` is not a directory"));
    }
    Ok(real)
}
