//! The MCP server `demiurge serve` is: one handler per client connection, holding one
//! session of the runtime (its own lane, evicted when the connection goes), whose turn
//! catalog it serves. Everything a client gets is the model view: tools as a model is
//! offered them (`TurnCatalog::model_tools`, deferred under a budget), results, resource
//! contents and prompt messages redacted for a model. A refusal is a tool error whose
//! text says how to approve.
//!
//! Adversary: the client (the model behind it): what it may call is exactly what the
//! session's turn allows, under the same connect and call authority as any host.

// Logging (`logging/setLevel`) is deprecated in 2026-07-28 and still part of 2025-11-25,
// which `serve` speaks: accepted, as the demo server does.
#![allow(deprecated)]

use std::sync::Arc;

use demiurge_mcp::redact::View;
use demiurge_mcp::result::{Block, ToolResult};
use demiurge_mcp::{CallError, Runtime, Session, SessionSpec, TurnCatalog};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::ask::Clients;

/// What every handler of one `serve` shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub runtime: Runtime,
    pub spec: SessionSpec,
    pub clients: Clients,
}

/// One client connection's handler: its session (started at its first request) and the
/// turn its calls go through (prepared at a listing, or at the first call).
pub(crate) struct Gateway {
    shared: Shared,
    state: Arc<Mutex<Connection>>,
}

/// Most client connections holding a session at once; past it a new one is refused.
pub(crate) const MAX_SESSIONS: usize = 32;

/// How many connections hold a session now.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

struct Connection {
    session: Option<Session>,
    turn: Option<TurnCatalog>,
    clients: Clients,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The client went away: its session goes, with its servers' process trees, and
        // its route for questions with it.
        if let Some(session) = &self.session {
            LIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            if let Ok(mut clients) = self.clients.lock() {
                clients.remove(session.id());
            }
        }
        if let Some(session) = self.session.take()
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            handle.spawn(async move {
                let _ = session.evict().await;
            });
        }
    }
}

impl Gateway {
    pub(crate) fn new(shared: Shared) -> Self {
        let state = Connection {
            session: None,
            turn: None,
            clients: Arc::clone(&shared.clients),
        };
        Gateway {
            shared,
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// This connection's turn: a new one when `fresh` (a listing) or none yet.
    async fn turn(
        &self,
        fresh: bool,
        peer: &rmcp::Peer<RoleServer>,
    ) -> Result<TurnCatalog, ErrorData> {
        let mut state = self.state.lock().await;
        if let (false, Some(turn)) = (fresh, &state.turn) {
            return Ok(turn.clone());
        }
        if state.session.is_none() {
            use std::sync::atomic::Ordering;
            if LIVE.fetch_add(1, Ordering::SeqCst) >= MAX_SESSIONS {
                LIVE.fetch_sub(1, Ordering::SeqCst);
                return Err(ErrorData::internal_error(
                    "too many clients at once; try again when one has gone",
                    None,
                ));
            }
            let mut spec = self.shared.spec.clone();
            // Its own lane: a client never evicts another client's session.
            spec.lane = format!("serve-{}", unique());
            let started = self.shared.runtime.start_session(spec).await;
            let (session, _) = match started {
                Ok(started) => started,
                Err(e) => {
                    LIVE.fetch_sub(1, Ordering::SeqCst);
                    return Err(unprepared(&e));
                }
            };
            if let Ok(mut clients) = self.shared.clients.lock() {
                clients.insert(session.id().to_string(), peer.clone());
            }
            state.session = Some(session);
        }
        let Some(session) = &state.session else {
            return Err(ErrorData::internal_error("no session", None));
        };
        let turn = session.prepare_turn().await.map_err(|e| unprepared(&e))?;
        for d in turn.diagnostics() {
            // To the operator, never to the client's stdout; the turn's own note (its
            // deferral rule) names no server.
            let about = if d.server.is_empty() {
                "note"
            } else {
                &d.server
            };
            eprintln!(
                "serve: {}: {}",
                demiurge_mcp::text::escape(about),
                demiurge_mcp::text::escape(&d.message)
            );
        }
        state.turn = Some(turn.clone());
        Ok(turn)
    }
}

/// A turn or session that could not be had: the detail (a diagnostic, paths) to the
/// operator's log, a fixed message to the client.
fn unprepared(error: &dyn std::fmt::Display) -> ErrorData {
    eprintln!(
        "serve: no turn: {}",
        demiurge_mcp::text::escape(&error.to_string())
    );
    ErrorData::internal_error(
        "the runtime could not prepare a turn; serve's log says why",
        None,
    )
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn parsed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ErrorData> {
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// The turn's tools as a model is offered them, in MCP's shape.
fn tools_of(turn: &TurnCatalog) -> Value {
    let tools: Vec<Value> = turn
        .model_tools()
        .into_iter()
        .map(|m| {
            let entry = turn.get(&m.name);
            let schema = m.input_schema.map_or_else(
                || json!({"type": "object"}),
                |s| Value::Object((*s).clone()),
            );
            let mut tool = json!({
                "name": m.name,
                "description": m.description,
                "inputSchema": schema,
            });
            if let Some(entry) = entry.filter(|_| !m.deferred) {
                if let Some(title) = &entry.title {
                    tool["title"] = json!(title);
                }
                if let Some(hints) = &entry.annotations {
                    tool["annotations"] = json!({
                        "readOnlyHint": hints.read_only,
                        "destructiveHint": hints.destructive,
                        "idempotentHint": hints.idempotent,
                        "openWorldHint": hints.open_world,
                    });
                }
                if let Some(output) = &entry.output_schema {
                    tool["outputSchema"] = Value::Object((**output).clone());
                }
            }
            tool
        })
        .collect();
    json!({ "tools": tools })
}

/// The downstream server's progress (redacted by the runtime) relayed to the client, in
/// order, when the client asked for progress with a token; at most 64 wait to be sent
/// (past them some are dropped: a later one says as much).
fn progress_to(context: &RequestContext<RoleServer>) -> Option<demiurge_mcp::ProgressSink> {
    let token = context.meta.get_progress_token()?;
    let peer = context.peer.clone();
    let (sender, mut waiting) =
        tokio::sync::mpsc::channel::<rmcp::model::ProgressNotificationParam>(64);
    tokio::spawn(async move {
        while let Some(param) = waiting.recv().await {
            let _ = peer.notify_progress(param).await;
        }
    });
    Some(Arc::new(move |p: demiurge_mcp::Progress| {
        let mut param = json!({"progressToken": token, "progress": p.progress});
        if let Some(total) = p.total {
            param["total"] = json!(total);
        }
        if let Some(message) = p.message {
            param["message"] = json!(message);
        }
        if let Ok(param) = serde_json::from_value(param) {
            let _ = sender.try_send(param);
        }
    }))
}

/// A result's model view in MCP's shape.
fn result_of(result: &ToolResult) -> Value {
    let view = result.view(View::Model);
    let content: Vec<Value> = view
        .blocks
        .iter()
        .map(|block| match block {
            Block::Text { text } => json!({"type": "text", "text": text}),
            Block::Image {
                mime_type,
                data: Some(data),
                ..
            } => json!({"type": "image", "mimeType": mime_type, "data": data.as_ref()}),
            other => {
                json!({"type": "text", "text": serde_json::to_string(other).unwrap_or_default()})
            }
        })
        .collect();
    let mut out = json!({"content": content, "isError": result.is_error});
    if result.output_schema.is_some() && view.data.as_object().is_some_and(|o| !o.is_empty()) {
        out["structuredContent"] = view.data.clone();
    }
    out
}

/// A refusal as the client's tool error: what was refused, and how a person approves.
fn refusal(error: &CallError) -> Value {
    let how = match error {
        CallError::ApprovalDenied { .. }
        | CallError::ApprovalTimedOut { .. }
        | CallError::ApprovalUnavailable { .. } => {
            " To approve it: answer the question this client shows (it needs elicitation), or run `demiurge call` for it at a terminal and answer `always`; `demiurge approvals list` shows what is remembered."
        }
        CallError::ServerUnavailable { .. } => {
            " Why is in serve's log (stderr); when its connect needs an approval, answer the question this client shows (it needs elicitation), or approve it at a terminal (`demiurge call` and `always`)."
        }
        CallError::MissingCapability { .. } => {
            " A grant under capabilities.defaults in agent.yaml gives it."
        }
        _ => "",
    };
    json!({"content": [{"type": "text", "text": format!("{error}.{how}")}], "isError": true})
}

/// The server a URI is read from: the one server that lists it, else the one server
/// whose listed templates could name it (the runtime checks that a template does). Two
/// candidates are refused: a server's template must not capture another's URIs.
fn owner(turn: &TurnCatalog, uri: &str) -> Option<String> {
    let one = |mut servers: Vec<String>| {
        servers.sort();
        servers.dedup();
        (servers.len() == 1).then(|| servers.remove(0))
    };
    let listing: Vec<String> = turn
        .resources()
        .filter(|r| r.uri == uri)
        .map(|r| r.server.clone())
        .collect();
    if !listing.is_empty() {
        return one(listing);
    }
    let naming: Vec<String> = turn
        .resource_templates()
        .filter(|t| {
            let fixed = t.uri_template.split('{').next().unwrap_or_default();
            !fixed.is_empty() && uri.starts_with(fixed)
        })
        .map(|t| t.server.clone())
        .collect();
    one(naming)
}

fn failed(error: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(error.to_string(), None)
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .enable_logging()
                .build(),
        )
        .with_instructions(
            "demiurge serve: the tools, resources and prompts of an Agent Core's MCP servers, under the runtime's authority, approvals and redaction",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let turn = self.turn(true, &context.peer).await?;
        parsed(tools_of(&turn))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let turn = self.turn(false, &context.peer).await?;
        let arguments = request.arguments.map_or(Value::Null, Value::Object);
        let progress = progress_to(&context);
        // A client's cancellation ends the call; dropping it cancels it on the server.
        let called = tokio::select! {
            called = turn.call_with_progress(&request.name, arguments, progress) => called,
            () = context.ct.cancelled() => {
                return Err(ErrorData::internal_error("cancelled by the client", None));
            }
        };
        let answer = match called {
            Ok(result) => result_of(&result),
            Err(refused) => {
                if let CallError::ServerUnavailable { server, reason, .. } = &refused {
                    // To the operator: why a server did not start for this call.
                    eprintln!(
                        "serve: {}: {}",
                        demiurge_mcp::text::escape(server),
                        demiurge_mcp::text::escape(reason)
                    );
                }
                refusal(&refused)
            }
        };
        Ok(parsed::<CallToolResult>(answer)?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let turn = self.turn(true, &context.peer).await?;
        let resources: Vec<Value> = turn
            .resources()
            .map(|r| {
                json!({"uri": r.uri, "name": r.name, "title": r.title,
                       "description": r.description, "mimeType": r.mime_type})
            })
            .collect();
        parsed(json!({ "resources": resources }))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let turn = self.turn(false, &context.peer).await?;
        let templates: Vec<Value> = turn
            .resource_templates()
            .map(|t| {
                json!({"uriTemplate": t.uri_template, "name": t.name,
                       "description": t.description, "mimeType": t.mime_type})
            })
            .collect();
        parsed(json!({ "resourceTemplates": templates }))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let turn = self.turn(false, &context.peer).await?;
        let Some(server) = owner(&turn, &request.uri) else {
            return Err(ErrorData::resource_not_found("no server offers it", None));
        };
        let read = turn
            .read_resource(&server, &request.uri)
            .await
            .map_err(failed)?;
        let view = read.view(View::Model);
        let contents: Vec<Value> = view
            .blocks
            .iter()
            .map(|b| match b {
                Block::Text { text } => json!({"uri": request.uri, "text": text}),
                other => json!({"uri": request.uri, "text": serde_json::to_string(other).unwrap_or_default()}),
            })
            .collect();
        Ok(parsed::<rmcp::model::ReadResourceResult>(json!({ "contents": contents }))?.into())
    }

    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Servers' log messages are the runtime's redacted events (serve's log); the
        // level a client asks for is accepted and changes nothing it is sent.
        Ok(())
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let turn = self.turn(false, &context.peer).await?;
        let Some(server) = owner(&turn, &request.uri) else {
            return Err(ErrorData::resource_not_found("no server offers it", None));
        };
        turn.subscribe_resource(&server, &request.uri)
            .await
            .map_err(failed)
    }

    async fn unsubscribe(
        &self,
        _request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Updates reach serve's log, not the client: there is nothing to stop.
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let turn = self.turn(true, &context.peer).await?;
        let prompts: Vec<Value> = turn
            .prompts()
            .map(|p| {
                let arguments: Vec<Value> = p
                    .arguments
                    .iter()
                    .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
                    .collect();
                json!({"name": p.name, "title": p.title, "description": p.description, "arguments": arguments})
            })
            .collect();
        parsed(json!({ "prompts": prompts }))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let turn = self.turn(false, &context.peer).await?;
        let arguments = request
            .arguments
            .map_or(Value::Null, |a| Value::Object(a.into_iter().collect()));
        let got = turn
            .get_prompt(&request.name, arguments)
            .await
            .map_err(failed)?;
        let messages: Vec<Value> = got
            .messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let result = json!({"description": got.description, "messages": messages});
        Ok(parsed::<rmcp::model::GetPromptResult>(result)?.into())
    }
}
