//! The resolved catalog of one turn: visible tools bound to their connections, plus
//! diagnostics and denials. Calls go through the entry's own connection; there is no
//! global name index.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ractor::ActorRef;
use rmcp::model::JsonObject;
use serde::Serialize;
use serde_json::Value;

use super::connection::{ConnectionMsg, Dispatch};
use super::shared::Shared;
use crate::authority::{Action, ApprovalRequest};
use crate::authority::{ConnectPreview, HostPolicy};
use crate::core::{ApprovalPolicy, CoreErrors, Declaration};
use crate::events::EventKind;
use crate::redact::{Redactor, View};
use crate::result::ToolResult;
use crate::transport::CallFailure;

/// Why a turn could not be prepared.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The core has load errors.
    #[error(transparent)]
    Core(#[from] CoreErrors),
    /// The session was evicted (or evicted while preparing: eviction wins).
    #[error("the session was evicted; start or resume a session to continue")]
    Evicted,
    /// An MCP tool name collides with a tool of another source.
    #[error("tool name collision: {0}")]
    Collision(String),
    /// The runtime is shutting down or an actor is gone.
    #[error("the runtime is not running: {0}")]
    Unavailable(String),
}

/// Why a call was refused before reaching a server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No tool of that name in this turn's catalog.
    #[error("unknown tool `{0}`; list the tools of this turn to see what is available")]
    UnknownTool(String),
    /// Capability or approval denied.
    #[error("call denied: {0}")]
    Denied(String),
    /// The entry belongs to another session, catalog or a closed connection.
    #[error("invalid catalog entry: {0}")]
    Invalid(String),
    /// The arguments are not a JSON object.
    #[error("tool arguments must be a JSON object")]
    BadArguments,
}

/// A server skipped or failed for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Server id.
    pub server: String,
    /// Declaration path.
    pub path: String,
    /// Redacted message.
    pub message: String,
}

/// A server denied by authority for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// Server id.
    pub server: String,
    /// Declaration path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Where a tool entry's calls go.
#[derive(Clone)]
pub(crate) struct Binding {
    pub session: String,
    pub catalog_id: u64,
    pub actor: ActorRef<ConnectionMsg>,
    pub declaration: Arc<Declaration>,
    pub redactor: Redactor,
    /// The dispatch rights the connection actor granted this catalog.
    pub dispatch: Dispatch,
    /// Whether the catalog's capability snapshot grants the call capability (decided
    /// once per catalog build, not per call).
    pub call_allowed: bool,
}

/// One visible tool, bound to its connection.
#[derive(Clone)]
pub struct ToolEntry {
    /// Exposed name (`server__tool`).
    pub name: String,
    /// Server id.
    pub server: String,
    /// The server's own tool name.
    pub tool: String,
    /// Description from the server.
    pub description: String,
    /// JSON schema of the arguments (shared, not copied per turn).
    pub input_schema: Arc<JsonObject>,
    pub(crate) binding: Binding,
}

impl std::fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEntry")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("tool", &self.tool)
            .finish()
    }
}

/// The catalog of one turn.
#[derive(Clone)]
pub struct TurnCatalog {
    shared: Arc<Shared>,
    session: String,
    catalog_id: u64,
    turn: u64,
    policy: HostPolicy,
    tools: Arc<Vec<ToolEntry>>,
    index: Arc<HashMap<String, usize>>,
    diagnostics: Vec<Diagnostic>,
    denied: Vec<Denial>,
}

impl std::fmt::Debug for TurnCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnCatalog")
            .field("session", &self.session)
            .field("turn", &self.turn)
            .field("tools", &self.tools.len())
            .finish()
    }
}

impl TurnCatalog {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        shared: Arc<Shared>,
        session: String,
        catalog_id: u64,
        turn: u64,
        policy: HostPolicy,
        (tools, index): (Arc<Vec<ToolEntry>>, Arc<HashMap<String, usize>>),
        diagnostics: Vec<Diagnostic>,
        denied: Vec<Denial>,
    ) -> Self {
        TurnCatalog {
            shared,
            session,
            catalog_id,
            turn,
            policy,
            tools,
            index,
            diagnostics,
            denied,
        }
    }

    /// Session id.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Turn number within the session.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// Visible tools, servers in file order, tools in listing order.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.tools
    }

    /// One tool by exposed name.
    pub fn get(&self, name: &str) -> Option<&ToolEntry> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// Servers that failed or were skipped this turn.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Servers denied this turn.
    pub fn denied(&self) -> &[Denial] {
        &self.denied
    }

    /// Calls the tool `name` of this turn with `arguments` (a JSON object or null).
    ///
    /// # Errors
    /// [`CallError`] when the call is refused before reaching a server. Server errors,
    /// timeouts and broken connections are error [`ToolResult`]s.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<ToolResult, CallError> {
        let entry = self
            .get(name)
            .ok_or_else(|| CallError::UnknownTool(name.to_string()))?;
        self.call_entry(entry, arguments).await
    }

    /// Calls a specific entry. An entry from another session, catalog (revision,
    /// authority) is refused as invalid and never reaches a server.
    ///
    /// # Errors
    /// See [`TurnCatalog::call`].
    pub async fn call_entry(
        &self,
        entry: &ToolEntry,
        arguments: Value,
    ) -> Result<ToolResult, CallError> {
        let outcome = self.dispatch(entry, arguments).await;
        if let Err(refused) = &outcome {
            self.shared.hub.emit(
                &self.session,
                EventKind::CallDenied {
                    server: entry.server.clone(),
                    tool: entry.name.clone(),
                    reason: refused.to_string(),
                },
            );
        }
        outcome
    }

    async fn dispatch(&self, entry: &ToolEntry, arguments: Value) -> Result<ToolResult, CallError> {
        let binding = &entry.binding;
        if binding.session != self.session || binding.catalog_id != self.catalog_id {
            return Err(CallError::Invalid(format!(
                "`{}` was resolved for another session or catalog revision; prepare a turn and use its entries",
                entry.name
            )));
        }
        let arguments = match arguments {
            Value::Null => None,
            Value::Object(map) => Some(map),
            _ => return Err(CallError::BadArguments),
        };
        let declaration = &binding.declaration;
        if !binding.call_allowed {
            let capability = &declaration.call_capability;
            return Err(CallError::Denied(format!(
                "missing capability {capability}; grant it under capabilities.defaults in agent.yaml"
            )));
        }
        let policy = self.policy.call_policy(declaration);
        if policy != ApprovalPolicy::Auto {
            let preview = ConnectPreview::new(
                declaration,
                self.policy.connect_policy(declaration),
                None,
                &[],
            );
            let request = ApprovalRequest {
                session: self.session.clone(),
                action: Action::Call,
                server: entry.server.clone(),
                tool: Some(entry.name.clone()),
                preview,
            };
            let approval = self
                .shared
                .broker
                .decide(request, declaration.fingerprint, policy)
                .await;
            if !approval.allowed {
                return Err(CallError::Denied(format!(
                    "call approval denied for `{}`",
                    entry.name
                )));
            }
        }

        let redactor = binding.redactor.with_call_object(arguments.as_ref());
        if binding.actor.get_status() != ractor::ActorStatus::Running {
            return Err(closed(&entry.name));
        }
        let started = Instant::now();
        let result = match binding.dispatch.call(&entry.tool, arguments).await {
            Ok(raw) => ToolResult::from_mcp(&entry.name, &raw, &redactor),
            // A connection closed before the call left is a stale entry; one that dies
            // during the call is that call's error.
            Err(CallFailure::Closed(_))
                if binding.actor.get_status() != ractor::ActorStatus::Running =>
            {
                return Err(closed(&entry.name));
            }
            Err(failure) => ToolResult::error(&entry.name, &failure.to_string(), &redactor),
        };
        self.shared.hub.emit(
            &self.session,
            EventKind::ToolCalled {
                server: entry.server.clone(),
                tool: entry.name.clone(),
                is_error: result.is_error,
                duration_ms: started.elapsed().as_millis() as u64,
                content: result.view(View::Event).content.clone(),
            },
        );
        Ok(result)
    }
}

fn closed(name: &str) -> CallError {
    CallError::Invalid(format!(
        "the connection behind `{name}` is closed (the server failed, changed or the session was evicted); prepare a new turn"
    ))
}
