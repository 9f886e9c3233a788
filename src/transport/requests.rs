//! Every MCP request the runtime makes of a server, and how its failures are classified:
//! the lists (tools, and beside them identity and instructions, resources, resource
//! templates and prompts; each paged and capped, listed only when the server
//! advertises the capability), `tools/call`, `resources/read`, `resources/subscribe`,
//! `prompts/get`, `logging/setLevel`. Nothing here redacts: the connection's listing
//! (`src/offer`) and the turn's effects shape what comes back.

// Roots and logging are deprecated by SEP-2577 for the 2026-07-28 revision; this
// client speaks 2025-11-25, where both are current.
#![allow(deprecated)]

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, ClientRequest, GetPromptRequestParams, GetPromptResult, JsonObject,
    LoggingLevel, PaginatedRequestParams, Prompt, ReadResourceRequestParams, Request, Resource,
    ResourceTemplate, ServerResult, SetLevelRequestParams, Tool,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};

use super::TraceHeader;
use super::failure::{Abandoned, CallFailure, classify, send, service_error};
use super::notices::{CallWatch, Notices};
use super::rounds::with_rounds;
use super::signals::{ServerSignals, speaks_modern};
use super::tasks::followed;

/// Most pages of `tools/list` followed for one server.
pub const MAX_TOOL_PAGES: usize = 100;
/// Most tools kept for one server; the rest are dropped with a diagnostic.
pub const MAX_TOOLS: usize = 5_000;

/// Who a server says it is, and what it tells its client to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `serverInfo.title`.
    pub title: Option<String>,
    /// `instructions`, for a host's system prompt.
    pub instructions: Option<String>,
    /// The protocol version the connection speaks (the server's answer to `initialize`
    /// or `server/discover`).
    pub protocol: String,
}

/// Everything a server listed beside its tools.
#[derive(Debug, Clone, Default)]
pub struct Offer {
    /// From the initialize result.
    pub identity: Identity,
    /// `resources/list`, every page, capped.
    pub resources: Vec<Resource>,
    /// `resources/templates/list`, every page, capped.
    pub templates: Vec<ResourceTemplate>,
    /// `prompts/list`, every page, capped.
    pub prompts: Vec<Prompt>,
    /// Whether a list was cut at the page or item cap.
    pub truncated: bool,
    /// Whether the server advertised logging.
    pub logging: bool,
    /// Lists that failed (unredacted), for the connection's notes.
    pub failed: Vec<String>,
}

/// Every page of one list, at most [`MAX_TOOL_PAGES`] pages and [`MAX_TOOLS`] items;
/// `true` with the items when a cap cut the list.
pub(crate) async fn paged<T, F, Fut>(mut fetch: F) -> Result<(Vec<T>, bool), String>
where
    F: FnMut(PaginatedRequestParams) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        // Boxed: rmcp's request future is about 4 KiB, and a first turn holds four
        // listings side by side inside each server's connect, which is moved whole.
        let (page, next) = Box::pin(fetch(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| service_error(&e))?;
        items.extend(page);
        if items.len() > MAX_TOOLS {
            items.truncate(MAX_TOOLS);
            return Ok((items, true));
        }
        match next {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok((items, false)),
        }
    }
    Ok((items, true))
}

/// The server's identity and the lists its capabilities advertise.
///
/// # Errors
/// None yet: a failed list is recorded in [`Offer::failed`]; the `Result` keeps the
/// listing's shape one with `tools/list`.
pub async fn list_offer(peer: &Peer<RoleClient>) -> Result<Offer, String> {
    let Some(info) = peer.peer_info() else {
        return Ok(Offer::default());
    };
    let server = info.server_info.as_ref();
    let mut offer = Offer {
        identity: Identity {
            name: server.map(|s| s.name.clone()).unwrap_or_default(),
            version: server.map(|s| s.version.clone()).unwrap_or_default(),
            title: server.and_then(|s| s.title.clone()),
            instructions: info.instructions.clone(),
            protocol: info.protocol_version.to_string(),
        },
        logging: info.capabilities.logging.is_some(),
        ..Offer::default()
    };
    // A list that fails is a note, not the server's failure: its tools still work. The
    // three lists are asked at once.
    let resources = info.capabilities.resources.is_some().then_some(async move {
        let resources = paged(|p| async move {
            let r = peer.list_resources(Some(p)).await?;
            Ok((r.resources, r.next_cursor))
        });
        let templates = paged(|p| async move {
            let r = peer.list_resource_templates(Some(p)).await?;
            Ok((r.resource_templates, r.next_cursor))
        });
        futures::join!(resources, templates)
    });
    let prompts = info.capabilities.prompts.is_some().then(|| {
        paged(|p| async move {
            let r = peer.list_prompts(Some(p)).await?;
            Ok((r.prompts, r.next_cursor))
        })
    });
    let (resources, prompts) = futures::join!(
        futures::future::OptionFuture::from(resources),
        futures::future::OptionFuture::from(prompts)
    );
    if let Some((resources, templates)) = resources {
        match resources {
            Ok((resources, cut)) => (offer.resources, offer.truncated) = (resources, cut),
            Err(e) => offer.failed.push(format!("resources/list failed: {e}")),
        }
        // Templates are optional even for a server with resources.
        if let Ok((templates, cut)) = templates {
            offer.templates = templates;
            offer.truncated |= cut;
        }
    }
    match prompts {
        Some(Ok((prompts, cut))) => {
            offer.prompts = prompts;
            offer.truncated |= cut;
        }
        Some(Err(e)) => offer.failed.push(format!("prompts/list failed: {e}")),
        None => {}
    }
    Ok(offer)
}

/// `resources/read` of `uri`, its answer as JSON, within `timeout` (answering the
/// server's requests for input through `signals`).
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn read_resource(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    uri: &str,
    timeout: Duration,
    trace: Option<TraceHeader>,
) -> Result<serde_json::Value, CallFailure> {
    let params = ReadResourceRequestParams::new(uri.to_string());
    let send = |request, left| send(peer, traced(request, trace.as_ref()), left);
    match with_rounds(signals, params, timeout, send).await?.0 {
        ServerResult::ReadResourceResult(result) => {
            serde_json::to_value(result).map_err(|e| CallFailure::Protocol(e.to_string()))
        }
        _ => Err(CallFailure::Protocol(
            "unexpected response to resources/read".into(),
        )),
    }
}

/// `prompts/get` of `name` with `arguments`, within `timeout` (answering the server's
/// requests for input through `signals`).
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn get_prompt(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    (name, arguments): (&str, Option<JsonObject>),
    timeout: Duration,
    trace: Option<TraceHeader>,
) -> Result<GetPromptResult, CallFailure> {
    let mut params = GetPromptRequestParams::new(name.to_string());
    params.arguments = arguments;
    let send = |request, left| send(peer, traced(request, trace.as_ref()), left);
    match with_rounds(signals, params, timeout, send).await?.0 {
        ServerResult::GetPromptResult(result) => Ok(result),
        _ => Err(CallFailure::Protocol(
            "unexpected response to prompts/get".into(),
        )),
    }
}

/// `resources/subscribe` to `uri`: the server's `notifications/resources/updated` for
/// it become events.
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn subscribe(
    peer: &Peer<RoleClient>,
    uri: &str,
    timeout: Duration,
) -> Result<(), CallFailure> {
    let params = rmcp::model::SubscribeRequestParams::new(uri.to_string());
    send(
        peer,
        ClientRequest::SubscribeRequest(Request::new(params)),
        timeout,
    )
    .await
    .map(drop)
}

/// `logging/setLevel`, best effort: a server that refuses it keeps its own level. In
/// the 2026-07-28 era there is no such request: the level goes with every call, read
/// and prompt in its `_meta` (kept in `signals`).
pub async fn set_level(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    level: crate::core::LogLevel,
    timeout: Duration,
) {
    let Ok(level) = serde_json::to_value(level).and_then(serde_json::from_value::<LoggingLevel>)
    else {
        return;
    };
    if speaks_modern(peer) {
        let _ = signals.log_level.set(level);
        return;
    }
    let request = ClientRequest::SetLevelRequest(Request::new(SetLevelRequestParams::new(level)));
    let _ = send(peer, request, timeout).await;
}

/// What a server listed: its tools, capped, and what it offers beside them.
#[derive(Debug, Clone)]
pub struct ListedTools {
    /// Tools in listing order.
    pub tools: Vec<Tool>,
    /// Whether the list was cut at [`MAX_TOOLS`] or [`MAX_TOOL_PAGES`].
    pub truncated: bool,
    /// Identity, resources, templates, prompts.
    pub offer: Offer,
}

/// Lists every page of tools from `peer`, capped, and what else it offers.
///
/// # Errors
/// The server's or transport's error, unredacted.
pub async fn list_tools(peer: &Peer<RoleClient>) -> Result<ListedTools, String> {
    // The lists are independent requests: asked at once, they cost one round trip.
    let tools = paged(|p| async move {
        let r = peer.list_tools(Some(p)).await?;
        Ok((r.tools, r.next_cursor))
    });
    let (tools, offer) = futures::join!(tools, list_offer(peer));
    let ((tools, truncated), offer) = (tools?, offer?);
    Ok(ListedTools {
        tools,
        truncated,
        offer,
    })
}

/// A request with the runtime's trace context in its `_meta` (never one a server sent).
/// Put where rmcp keeps the progress token, not in the parameters: rmcp serializes
/// parameters' `_meta` to a value and back to merge the two, which cost a traced call
/// more than its spans.
fn traced(mut request: ClientRequest, trace: Option<&TraceHeader>) -> ClientRequest {
    use rmcp::model::GetMeta;
    if let Some(header) = trace {
        header.clone().into_meta(&mut request.get_meta_mut().0.0);
    }
    request
}

/// How long a call may take: `timeout` without news; with `max`, each progress
/// notification restarts `timeout`, up to `max` in all.
#[derive(Debug, Clone, Copy)]
pub struct CallTiming {
    /// The call's timeout (`timeout_seconds`).
    pub timeout: Duration,
    /// The most progress may extend it to (`max_timeout_seconds`).
    pub max: Option<Duration>,
}

/// Calls a tool with a timeout; on timeout rmcp sends `notifications/cancelled`. The
/// server's requests for input (2026-07-28) are answered through `signals`, each round
/// within what is left of the timeout.
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn call_tool(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    tool: &str,
    arguments: Option<JsonObject>,
    timing: CallTiming,
    watch: Option<CallWatch>,
) -> Result<serde_json::Value, CallFailure> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments;
    let budget = timing.max.unwrap_or(timing.timeout);
    let trace = watch.as_ref().and_then(|w| w.trace.as_ref());
    let send = |request, left| {
        let request = traced(request, trace);
        call_round(peer, &signals.notices, request, timing, left, watch.clone())
    };
    let answer = match with_rounds(signals, params, budget, send).await? {
        // A task (the tasks extension) is followed to its end for the call.
        // Boxed: a rare path, and a large future every call would carry otherwise.
        (ServerResult::CreateTaskResult(task), left) => {
            Box::pin(followed(peer, signals, task, left, watch.as_ref())).await?
        }
        (answer, _) => answer,
    };
    match answer {
        ServerResult::CallToolResult(result) => {
            into_json(result).map_err(|e| CallFailure::Protocol(e.to_string()))
        }
        _ => Err(CallFailure::Protocol(
            "unexpected response to tools/call".into(),
        )),
    }
}

/// One round of a call: sent with what is `left` of its time, its progress heard.
async fn call_round(
    peer: &Peer<RoleClient>,
    notices: &Arc<Notices>,
    request: ClientRequest,
    timing: CallTiming,
    left: Duration,
    watch: Option<CallWatch>,
) -> Result<ServerResult, CallFailure> {
    let mut options = PeerRequestOptions::with_timeout(timing.timeout.min(left));
    if timing.max.is_some() {
        options = options.reset_timeout_on_progress();
        options.max_total_timeout = Some(left);
    }
    // rmcp gives every request a progress token; the call's sink hears its progress.
    let handle = peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| match classify(&e, left) {
            CallFailure::Closed(m) => CallFailure::NotSent(m),
            other => other,
        })?;
    let _watching = watch.and_then(|watch| notices.watch(handle.progress_token.clone(), watch));
    // A caller that drops this future has given up on the call: the server is told, as
    // it is on a timeout, instead of working on for nobody.
    let mut abandoned = Abandoned::armed(peer, &handle.id);
    let response = handle.await_response().await;
    abandoned.disarm();
    response.map_err(|e| classify(&e, left))
}

/// A call's result as JSON, its texts and structured content moved rather than
/// copied: a result of megabytes is held once, not twice, while it is converted.
fn into_json(
    mut result: rmcp::model::CallToolResult,
) -> Result<serde_json::Value, serde_json::Error> {
    use rmcp::model::ContentBlock;
    use serde_json::Value;
    let structured = result.structured_content.take();
    let texts: Vec<Option<String>> = result
        .content
        .iter_mut()
        .map(|block| match block {
            ContentBlock::Text(t) => Some(std::mem::take(&mut t.text)),
            _ => None,
        })
        .collect();
    let mut value = serde_json::to_value(&result)?;
    drop(result);
    if let Some(blocks) = value.get_mut("content").and_then(Value::as_array_mut) {
        for (block, text) in blocks.iter_mut().zip(texts) {
            if let (Some(text), Some(block)) = (text, block.as_object_mut()) {
                block.insert("text".into(), Value::String(text));
            }
        }
    }
    if let (Some(structured), Some(object)) = (structured, value.as_object_mut()) {
        object.insert("structuredContent".into(), structured);
    }
    Ok(value)
}
