//! The resolved catalog of one turn: visible tools bound to their connections, plus
//! diagnostics and denials, and every effect through it: a tool call (`call.rs`), a
//! resource read or subscription (`resources.rs`), a prompt (`prompts.rs`). Each goes
//! through the entry's own connection; there is no global name index.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::JsonObject;
use serde::Serialize;

use crate::actors::shared::Shared;
use crate::authority::{DenyReason, HostPolicy};
use crate::core::{CoreErrors, Declaration};

mod call;
mod deferred;
mod entries;
mod lazy;
mod prompts;
mod resources;

pub(crate) use deferred::Deferred;
pub use deferred::{DESCRIBE_TOOL, Deferral, MAX_LOOKUP, ModelTool, SEARCH_TOOLS};
pub(crate) use lazy::{Starter, Wakes};

pub(crate) use entries::{Binding, Entries, Entry, Link, ServerEntry, Warm, WarmKey, bind};

/// Why a turn could not be prepared.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// The core has load errors.
    #[error(transparent)]
    Core(#[from] CoreErrors),
    /// The session was evicted (explicitly, replaced in its lane, or by the runtime's
    /// shutdown), before or while this turn was preparing: eviction wins, and the
    /// turn's connects in flight were ended.
    #[error("the session was evicted; start or resume a session to continue")]
    Evicted,
    /// The turn was overtaken before it resolved: a newer turn of the session changed
    /// its catalog identity (principal, capabilities, revision, workspace, policy), and
    /// this turn's connects in flight were ended.
    #[error("the turn was cancelled: a newer turn changed the session's authority; use that turn")]
    Cancelled,
    /// A server declared `required: true` did not connect this turn.
    #[error("required server `{server}` is not available: {reason}")]
    Required {
        /// Server id.
        server: String,
        /// Why (its diagnostic or denial, redacted).
        reason: String,
    },
    /// An MCP tool name collides with a tool of another source.
    #[error("tool name collision: {0}")]
    Collision(NameCollision),
    /// The turn is deferred and the host registers a tool under a name a deferred turn
    /// reserves for its own (`search_tools`, `describe_tool`).
    #[error(
        "the host registers a tool named `{name}` ({host_tool}), a name a deferred turn reserves for its own; rename the host's tool or raise the tool budget"
    )]
    Reserved {
        /// The reserved name.
        name: String,
        /// Where the host's tool comes from.
        host_tool: String,
    },
    /// The runtime is shutting down or an actor is gone.
    #[error("the runtime is not running: {0}")]
    Unavailable(String),
}

/// An MCP tool whose exposed name a host tool already has: neither is renamed, so the
/// turn fails until the core or the host changes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameCollision {
    /// The exposed name both claim.
    pub name: String,
    /// Where the host tool comes from (its provenance, as the host declared it).
    pub host_tool: String,
    /// The declaration file of the MCP server.
    pub path: String,
    /// The MCP server's id.
    pub server: String,
    /// The server's own name for the tool.
    pub tool: String,
}

impl std::fmt::Display for NameCollision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool name `{}` is claimed by {} and mcp:{}:{}/{}; rename one of them or filter the MCP tool out",
            self.name, self.host_tool, self.path, self.server, self.tool
        )
    }
}

/// Why a call was refused before reaching a server: a host tells the cases apart by
/// variant, never by text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No tool of that name in this turn's catalog.
    #[error("unknown tool `{0}`; list the tools of this turn to see what is available")]
    UnknownTool(String),
    /// No tool of that name in this turn, and the server that could own it did not
    /// connect (failed, skipped or denied): the reason is that server's.
    #[error(
        "`{tool}` is not available: server `{server}` did not connect this turn; its diagnostic says why"
    )]
    ServerUnavailable {
        /// The exposed tool name.
        tool: String,
        /// The server that could own it.
        server: String,
        /// Its diagnostic or denial (redacted for a log, not for a model: it is not in
        /// this error's text, which a host may hand a model).
        reason: String,
    },
    /// A tool or prompt its server changed or added since a person approved what it
    /// served: held back from the turn until a person approves the change.
    #[error(
        "`{tool}` is held back: server `{server}` changed or added it since a person approved what it serves; review it with `demiurge pins show {server}`, then `demiurge pins approve {server}`"
    )]
    Quarantined {
        /// The exposed name.
        tool: String,
        /// Its server.
        server: String,
    },
    /// A tool of a deferred turn offered by name and summary only: the model has not
    /// asked for its whole definition.
    #[error(
        "`{0}` is listed by name only in this turn: call describe_tool with its name to get its definition, then call it"
    )]
    NotLoaded(String),
    /// The session does not hold the server's call capability.
    #[error(
        "call denied: missing capability {capability}; grant it under capabilities.defaults in agent.yaml"
    )]
    MissingCapability {
        /// The exposed tool name.
        tool: String,
        /// The capability that is missing.
        capability: String,
    },
    /// The effective call policy is `deny`.
    #[error("call denied: the call policy of `{tool}` is deny")]
    PolicyDenied {
        /// The exposed tool name.
        tool: String,
    },
    /// The approver refused the call.
    #[error("call denied: call approval denied for `{tool}`")]
    ApprovalDenied {
        /// The exposed tool name.
        tool: String,
    },
    /// Nobody answered the call approval within the runtime's approval deadline.
    #[error("call denied: the call approval of `{tool}` was not answered in time")]
    ApprovalTimedOut {
        /// The exposed tool name.
        tool: String,
    },
    /// The approval broker is not running (it is being restarted): nobody could ask.
    #[error("call denied: the approval broker is restarting; call `{tool}` again")]
    ApprovalUnavailable {
        /// The exposed tool name.
        tool: String,
    },
    /// The entry belongs to another session or catalog, or its connection closed.
    #[error("invalid catalog entry: {reason}")]
    Stale {
        /// The exposed tool name.
        tool: String,
        /// What makes it stale.
        reason: StaleReason,
    },
    /// The arguments are not a JSON object.
    #[error("tool arguments must be a JSON object")]
    BadArguments,
    /// A resource the server did not list (nor a listed template names) this turn, or
    /// one the declaration's `resources:` excludes.
    #[error(
        "`{tool}` is not a resource this server offers in this turn; list the resources of a turn to see them"
    )]
    NotOffered {
        /// The server and the URI (redacted).
        tool: String,
    },
    /// The server answered a prompt request with an error (tool calls return error
    /// results instead).
    #[error("`{tool}` failed: {message}")]
    Failed {
        /// The exposed prompt name.
        tool: String,
        /// What the server said, redacted and capped.
        message: String,
    },
}

/// What makes a catalog entry stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StaleReason {
    /// Resolved for another session or catalog (revision, authority).
    #[error(
        "it was resolved for another session or catalog revision; prepare a turn and use its entries"
    )]
    OtherCatalog,
    /// Its server was started for it and now lists it otherwise (or not at all).
    #[error("its server, started for this call, now lists it otherwise; prepare a new turn")]
    Relisted,
    /// Its connection closed (the server failed, changed, or the session was evicted).
    #[error(
        "the connection behind it is closed (the server failed, changed or the session was evicted); prepare a new turn"
    )]
    Closed,
}

/// A server skipped or failed for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Diagnostic {
    /// Server id.
    pub server: String,
    /// Declaration path.
    pub path: String,
    /// Redacted message.
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic about `declaration`.
    pub(crate) fn of(declaration: &Declaration, message: String) -> Self {
        Diagnostic {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            message,
        }
    }

    /// A declaration that did not load: every one of its (value-free) errors.
    pub(crate) fn broken(broken: &crate::core::Broken) -> Self {
        let message = broken
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        Diagnostic {
            server: broken.server_id.clone(),
            path: broken.path.clone(),
            message: message.join("; "),
        }
    }
}

/// The error of a turn whose required server `missing` did not connect, with its
/// diagnostic or denial.
pub(crate) fn required(
    missing: &Declaration,
    diagnostics: &[Diagnostic],
    denied: &[Denial],
) -> PrepareError {
    let id = &missing.server_id;
    let reason = diagnostics
        .iter()
        .find(|d| &d.server == id)
        .map(|d| d.message.clone())
        .or_else(|| {
            denied
                .iter()
                .find(|d| &d.server == id)
                .map(|d| d.reason.clone())
        })
        .unwrap_or_else(|| "it did not connect".into());
    PrepareError::Required {
        server: id.clone(),
        reason,
    }
}

/// A server denied by authority for this turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Denial {
    /// Server id.
    pub server: String,
    /// Declaration path.
    pub path: String,
    /// The reason, in words.
    pub reason: String,
    /// The reason, typed: what a host matches on.
    #[serde(skip)]
    pub cause: DenyReason,
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
    /// sha256 (hex) of the tool's whole definition as listed (name, title,
    /// description, schemas, annotations): what a call approval is bound to.
    pub definition: String,
    /// The server's human-readable title (redacted, capped).
    pub title: Option<String>,
    /// What the server says the tool does to the world. Hints from an untrusted
    /// server: a host may show them and tighten approval on them, never loosen it.
    pub annotations: Option<ToolHints>,
    /// JSON schema of the tool's `structuredContent`, when it declares one.
    pub output_schema: Option<Arc<JsonObject>>,
    /// What its description or title may hide from a person (flagged, not blocked).
    pub flags: Vec<crate::pins::TextFlag>,
    /// Listed from its server's last listing: the server starts (connect approval as
    /// at any connect) when a call first needs it.
    pub deferred_start: bool,
    /// The tokens its whole definition takes ([`crate::search::TOKEN_ESTIMATOR`]).
    pub tokens: usize,
    pub(crate) binding: Binding,
}

/// A tool's annotations as MCP defines them (`ToolAnnotations`), every hint optional:
/// absent means the server did not say (MCP's defaults then apply: not read-only,
/// destructive, not idempotent, open world).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToolHints {
    /// The annotations' own title (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not change its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The tool may destroy or overwrite (meaningful when not read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    /// The tool reaches an open world (the internet), not a closed domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
}

impl ToolHints {
    fn of(a: &rmcp::model::ToolAnnotations) -> Self {
        ToolHints {
            title: a.title.clone(),
            read_only: a.read_only_hint,
            destructive: a.destructive_hint,
            idempotent: a.idempotent_hint,
            open_world: a.open_world_hint,
        }
    }
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
    offers: Arc<Vec<ServerEntry>>,
    diagnostics: Vec<Diagnostic>,
    denied: Vec<Denial>,
    /// Starts this turn's dormant servers; `None` when it has none.
    wakes: Option<Arc<Wakes>>,
    /// Set when a budget applies to the turn's definitions.
    deferred: Option<Arc<Deferred>>,
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
        (tools, index, offers): Entries,
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
            offers,
            diagnostics,
            denied,
            wakes: None,
            deferred: None,
        }
    }

    /// This turn, its dormant servers started through `wakes` and its definitions under
    /// `budget` (the rule's decision a diagnostic when it defers).
    ///
    /// # Errors
    /// A deferred turn whose host registers a tool under a reserved name.
    pub(crate) fn with_reach(
        mut self,
        wakes: Option<Wakes>,
        budget: Option<&crate::search::ToolBudget>,
    ) -> Result<Self, PrepareError> {
        self.wakes = wakes.map(Arc::new);
        if let Some(budget) = budget {
            let rule = Deferral::decide(&self.tools, budget);
            if rule.deferred {
                let reserved = self.shared.config.host_tools.iter().find(|h| {
                    [SEARCH_TOOLS, DESCRIBE_TOOL]
                        .iter()
                        .any(|r| h.name.eq_ignore_ascii_case(r))
                });
                if let Some(host) = reserved {
                    return Err(PrepareError::Reserved {
                        name: host.name.clone(),
                        host_tool: host.provenance.clone(),
                    });
                }
                self.diagnostics.push(Diagnostic {
                    server: String::new(),
                    path: String::new(),
                    message: rule.describe(),
                });
            }
            self.deferred = Some(Arc::new(Deferred::new(rule)));
        }
        Ok(self)
    }

    pub(crate) fn offers(&self) -> &[ServerEntry] {
        &self.offers
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
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

    /// Why `name` (a tool or prompt's exposed name) is not in this turn: its server did
    /// not connect, holds it back for review, or nothing names it.
    pub(crate) fn missing(&self, name: &str) -> CallError {
        if let Some((server, reason)) = self.unavailable(name) {
            return CallError::ServerUnavailable {
                tool: name.to_string(),
                server,
                reason,
            };
        }
        match self.held_back(name) {
            Some(server) => CallError::Quarantined {
                tool: name.to_string(),
                server,
            },
            None => CallError::UnknownTool(name.to_string()),
        }
    }

    /// The server holding back `name` (a tool or prompt's exposed name) until a
    /// person approves its changed definition: a held tool under the name it would
    /// first be given (the servers that could own the prefix, as `unavailable` finds
    /// them), a held prompt under its prompt name.
    pub fn held_back(&self, name: &str) -> Option<String> {
        use crate::pins::DefinitionKind;
        let (prefix, _) = name.split_once("__")?;
        let owners = crate::naming::same_prefix(
            self.offers
                .iter()
                .map(|o| o.binding.declaration.server_id.as_str()),
            name,
        );
        self.offers.iter().find_map(|o| {
            let server = &o.binding.declaration.server_id;
            let prompt_prefix = crate::naming::normalize_fragment(server, "server");
            let holds = o.offered.held.iter().any(|h| match h.kind {
                DefinitionKind::Tool => {
                    owners.contains(server) && crate::naming::is_first_choice(prefix, &h.name, name)
                }
                DefinitionKind::Prompt => {
                    let fragment = crate::naming::normalize_fragment(&h.name, "prompt");
                    name == format!("{prompt_prefix}__{fragment}")
                }
                _ => false,
            });
            holds.then(|| server.clone())
        })
    }

    /// Why a name is missing from this turn when a server that could own it (by its
    /// prefix) did not connect: that server and its diagnostic or denial. `None` when
    /// the name is in the catalog, or every possible owner connected (a plain unknown
    /// name).
    pub fn unavailable(&self, name: &str) -> Option<(String, String)> {
        if self.get(name).is_some() {
            return None;
        }
        let connected = |server: &str| {
            self.offers
                .iter()
                .any(|o| o.binding.declaration.server_id == server)
        };
        let failed = self
            .diagnostics
            .iter()
            .filter(|d| !d.path.is_empty())
            .map(|d| (&d.server, &d.message))
            .chain(self.denied.iter().map(|d| (&d.server, &d.reason)))
            .filter(|(server, _)| !connected(server));
        let owners =
            crate::naming::same_prefix(failed.clone().map(|(server, _)| server.as_str()), name);
        failed
            .filter(|(server, _)| owners.contains(server))
            .map(|(server, reason)| (server.clone(), reason.clone()))
            .next()
    }
}
