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
use std::time::Instant;

use demiurge_mcp::redact::View;
use demiurge_mcp::result::Block;
use demiurge_mcp::{Runtime, Session, SessionSpec, TurnCatalog};
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

use super::ask::{Client, Clients};
use super::rounds::{self, Round, Rounds};
use super::traced;
use super::views::{answer, owner, progress_to, tools_of};

/// What every handler of one `serve` shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub runtime: Runtime,
    pub spec: SessionSpec,
    pub clients: Clients,
    pub identities: Identities,
}

/// One client connection's handler: its session (started at its first request) and the
/// turn its calls go through (prepared at a listing, or at the first call). A modern
/// client's request has a handler of its own, and the state of its identity.
pub(crate) struct Gateway {
    shared: Shared,
    state: Arc<Mutex<Connection>>,
}

/// The state of each modern client identity, and when it last made a request.
pub(crate) type Identities =
    Arc<std::sync::Mutex<std::collections::HashMap<String, (Arc<Mutex<Connection>>, Instant)>>>;

/// Drops every identity idle for [`rounds::IDLE`] with no request in flight: its session
/// is evicted (its servers' process trees with it).
pub(crate) fn sweep(identities: &Identities) {
    if let Ok(mut known) = identities.lock() {
        known.retain(|_, (state, last)| {
            last.elapsed() < rounds::IDLE || Arc::strong_count(state) > 1
        });
    }
}

/// Most open subscriptions of one modern client identity.
const MAX_LISTENERS: usize = 8;

/// Most client connections holding a session at once; past it a new one is refused.
pub(crate) const MAX_SESSIONS: usize = 32;

/// How many connections hold a session now.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub(crate) struct Connection {
    session: Option<Session>,
    turn: Option<TurnCatalog>,
    clients: Clients,
    /// A modern identity's questions and waiting calls.
    rounds: Option<Arc<Rounds>>,
    /// The least log level a legacy client asked to hear (`info` until it says).
    level: Arc<std::sync::atomic::AtomicU8>,
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

impl Connection {
    fn new(clients: &Clients, rounds: Option<Arc<Rounds>>) -> Self {
        Connection {
            session: None,
            turn: None,
            clients: Arc::clone(clients),
            rounds,
            level: Arc::new(std::sync::atomic::AtomicU8::new(1)),
        }
    }
}

/// Most modern client identities known at once.
const MAX_IDENTITIES: usize = 64;

impl Gateway {
    pub(crate) fn new(shared: Shared) -> Self {
        let state = Connection::new(&shared.clients, None);
        Gateway {
            shared,
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// The state a request works on: its connection's, or for a modern request its
    /// identity's (made at its first request).
    fn state_of(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<Mutex<Connection>>, ErrorData> {
        if !rounds::modern(context) {
            return Ok(Arc::clone(&self.state));
        }
        let identity = rounds::identity(&context.meta);
        let asks = context
            .meta
            .client_capabilities()
            .and_then(|c| c.elicitation);
        let elicits = asks
            .as_ref()
            .is_some_and(|e| e.form.is_some() || e.url.is_none());
        let opens_urls = asks.as_ref().is_some_and(|e| e.url.is_some());
        let busy = || ErrorData::internal_error("too many clients at once; try again later", None);
        let mut known = self.shared.identities.lock().map_err(|_| busy())?;
        if !known.contains_key(&identity) && known.len() >= MAX_IDENTITIES {
            drop(known);
            sweep(&self.shared.identities);
            known = self.shared.identities.lock().map_err(|_| busy())?;
            if known.len() >= MAX_IDENTITIES {
                return Err(busy());
            }
        }
        let (state, last) = known.entry(identity).or_insert_with(|| {
            let rounds = Arc::new(Rounds::new());
            let state = Connection::new(&self.shared.clients, Some(rounds));
            (Arc::new(Mutex::new(state)), Instant::now())
        });
        *last = Instant::now();
        let state = Arc::clone(state);
        drop(known);
        if let Ok(state) = state.try_lock()
            && let Some(rounds) = &state.rounds
        {
            rounds
                .modern
                .elicits
                .store(elicits, std::sync::atomic::Ordering::SeqCst);
            rounds
                .modern
                .opens_urls
                .store(opens_urls, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(state)
    }

    /// This request's turn: a new one when `fresh` (a listing) or none yet.
    async fn turn(
        &self,
        fresh: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<TurnCatalog, ErrorData> {
        let state = self.state_of(context)?;
        self.turn_in(&state, fresh, context).await
    }

    /// The turn of `state` (the request's, from [`Gateway::state_of`]).
    async fn turn_in(
        &self,
        state: &Mutex<Connection>,
        fresh: bool,
        context: &RequestContext<RoleServer>,
    ) -> Result<TurnCatalog, ErrorData> {
        let mut state = state.lock().await;
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
            let client = match &state.rounds {
                Some(rounds) => Client::Modern(Arc::clone(&rounds.modern)),
                None => Client::Connection {
                    peer: context.peer.clone(),
                    level: Arc::clone(&state.level),
                },
            };
            if let Ok(mut clients) = self.shared.clients.lock() {
                clients.insert(session.id().to_string(), client);
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

/// A result in its rmcp type, marked complete (2026-07-28 requires `resultType`; rmcp
/// drops it again for a 2025-11-25 client).
fn parsed<T: serde::de::DeserializeOwned>(mut value: Value) -> Result<T, ErrorData> {
    if let Some(fields) = value.as_object_mut() {
        fields.insert("resultType".into(), json!("complete"));
    }
    serde_json::from_value(value).map_err(|e| ErrorData::internal_error(e.to_string(), None))
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
        let state = self.state_of(&context)?;
        let turn = self.turn_in(&state, true, &context).await?;
        let mut tools = tools_of(&turn);
        let rounds = state.lock().await.rounds.clone();
        // A server the terminal or `--yes` let connect meanwhile is not asked about.
        let unasked: Vec<String> = rounds
            .and_then(|r| {
                let mut unasked = r.modern.unasked.lock().ok()?;
                unasked.retain(|server| !turn.tools().iter().any(|t| &t.server == server));
                Some(unasked.iter().cloned().collect())
            })
            .unwrap_or_default();
        if let (false, Some(listed)) = (unasked.is_empty(), tools["tools"].as_array_mut()) {
            listed.push(rounds::connect_tool(&unasked));
        }
        parsed(tools)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = self.state_of(&context)?;
        let turn = self.turn_in(&state, false, &context).await?;
        let progress = progress_to(&context);
        let (in_rounds, session) = {
            let state = state.lock().await;
            (state.rounds.clone(), state.session.clone())
        };
        let arguments = request.arguments.clone().map_or(Value::Null, Value::Object);
        let name = request.name.to_string();
        let parent = traced::parent_of(&context.meta);
        let call = move || -> rounds::Call {
            Box::pin(traced::within(parent, async move {
                answer(turn.call_with_progress(&name, arguments, progress).await)
            }))
        };
        // A client's cancellation ends the call; dropping it cancels it on the server.
        let answer = match (in_rounds, session) {
            (Some(rounds), Some(session)) if request.name == rounds::CONNECT_TOOL => {
                let modern = Arc::clone(&rounds.modern);
                let connect = move || rounds::connect_servers(session, modern);
                let driven = rounds::drive(&rounds, &request, connect, context.ct.cancelled());
                match driven.await? {
                    Round::Asked(round) => return Ok(round),
                    Round::Done(answer) => answer,
                }
            }
            (Some(rounds), _) => {
                match rounds::drive(&rounds, &request, call, context.ct.cancelled()).await? {
                    Round::Asked(round) => return Ok(round),
                    Round::Done(answer) => answer,
                }
            }
            (None, _) => tokio::select! {
                answer = call() => answer,
                () = context.ct.cancelled() => {
                    return Err(ErrorData::internal_error("cancelled by the client", None));
                }
            },
        };
        Ok(parsed::<CallToolResult>(answer)?.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let turn = self.turn(true, &context).await?;
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
        let turn = self.turn(false, &context).await?;
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
        let turn = self.turn(false, &context).await?;
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
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Servers' log messages reach the client (their event view) at or above it.
        let state = self.state_of(&context)?;
        let level = super::ask::rank(request.level);
        state
            .lock()
            .await
            .level
            .store(level, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        // List changes are told; a resource's updates only to a legacy subscription.
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = None;
        Some(accepted)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        // A modern client's open subscription hears its identity's list changes.
        let state = self.state_of(context.request_context())?;
        let Some(rounds) = state.lock().await.rounds.clone() else {
            return Ok(());
        };
        let sink = context.sink().clone();
        let id = sink.id().clone();
        if let Ok(mut listeners) = rounds.modern.listeners.lock() {
            if listeners.len() >= MAX_LISTENERS {
                return Err(ErrorData::internal_error(
                    "too many open subscriptions",
                    None,
                ));
            }
            listeners.push(sink);
        }
        context.cancelled().await;
        if let Ok(mut listeners) = rounds.modern.listeners.lock() {
            listeners.retain(|sink| *sink.id() != id);
        }
        Ok(())
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let turn = self.turn(false, &context).await?;
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
        let turn = self.turn(true, &context).await?;
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
        let turn = self.turn(false, &context).await?;
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
