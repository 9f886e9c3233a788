//! What a server offers besides tools, as the protocol has it: its identity and
//! instructions, resources, resource templates and prompts (each list paged and
//! capped like tools), and the requests that use them (`resources/read`,
//! `prompts/get`, `logging/setLevel`). Listed only when the server advertises the
//! capability; nothing here redacts (the connection's listing shapes it).

// Roots and logging are deprecated by SEP-2577 for the 2026-07-28 revision; this
// client speaks 2025-11-25, where both are current.
#![allow(deprecated)]

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, JsonObject, LoggingLevel,
    PaginatedRequestParams, Prompt, ReadResourceRequestParams, Request, Resource, ResourceTemplate,
    ServerResult, SetLevelRequestParams,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};

use super::client::{Abandoned, CallFailure, MAX_TOOL_PAGES, MAX_TOOLS, classify, service_error};

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
        let (page, next) = fetch(PaginatedRequestParams::default().with_cursor(cursor))
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

/// `resources/read` of `uri`, its answer as JSON, within `timeout`.
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn read_resource(
    peer: &Peer<RoleClient>,
    uri: &str,
    timeout: Duration,
) -> Result<serde_json::Value, CallFailure> {
    let request = ClientRequest::ReadResourceRequest(Request::new(ReadResourceRequestParams::new(
        uri.to_string(),
    )));
    match send(peer, request, timeout).await? {
        ServerResult::ReadResourceResult(result) => {
            serde_json::to_value(result).map_err(|e| CallFailure::Protocol(e.to_string()))
        }
        _ => Err(CallFailure::Protocol(
            "unexpected response to resources/read".into(),
        )),
    }
}

/// `prompts/get` of `name` with `arguments`, within `timeout`.
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn get_prompt(
    peer: &Peer<RoleClient>,
    name: &str,
    arguments: Option<JsonObject>,
    timeout: Duration,
) -> Result<GetPromptResult, CallFailure> {
    let mut params = GetPromptRequestParams::new(name.to_string());
    params.arguments = arguments;
    match send(
        peer,
        ClientRequest::GetPromptRequest(Request::new(params)),
        timeout,
    )
    .await?
    {
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

/// `logging/setLevel`, best effort: a server that refuses it keeps its own level.
pub async fn set_level(peer: &Peer<RoleClient>, level: crate::core::LogLevel, timeout: Duration) {
    let Ok(level) = serde_json::to_value(level).and_then(serde_json::from_value::<LoggingLevel>)
    else {
        return;
    };
    let request = ClientRequest::SetLevelRequest(Request::new(SetLevelRequestParams::new(level)));
    let _ = send(peer, request, timeout).await;
}

async fn send(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<ServerResult, CallFailure> {
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| classify(&e, timeout))?;
    // A caller that drops this future has given up: the server is told.
    let mut abandoned = Abandoned::armed(peer, &handle.id);
    let answer = handle.await_response().await;
    abandoned.disarm();
    answer.map_err(|e| classify(&e, timeout))
}
