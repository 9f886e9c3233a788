//! What a client of `demiurge serve` is given, in MCP's shapes: the turn's tools as a
//! model is offered them, a result's model view, a refusal that says how to approve,
//! and the downstream server's progress; and which server a URI belongs to.

use std::sync::Arc;

use demiurge_mcp::redact::View;
use demiurge_mcp::result::{Block, ToolResult};
use demiurge_mcp::{CallError, TurnCatalog};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::{Value, json};

/// The turn's tools as a model is offered them, in MCP's shape.
pub(crate) fn tools_of(turn: &TurnCatalog) -> Value {
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
pub(crate) fn progress_to(
    context: &RequestContext<RoleServer>,
) -> Option<demiurge_mcp::ProgressSink> {
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
pub(crate) fn result_of(result: &ToolResult) -> Value {
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
pub(crate) fn refusal(error: &CallError) -> Value {
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
pub(crate) fn owner(turn: &TurnCatalog, uri: &str) -> Option<String> {
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

/// A call's outcome as the client's result: the model view, or a refusal saying how to
/// approve (why a server did not start goes to the operator's log).
pub(crate) fn answer(called: Result<demiurge_mcp::result::ToolResult, CallError>) -> Value {
    match called {
        Ok(result) => result_of(&result),
        Err(refused) => {
            if let CallError::ServerUnavailable { server, reason, .. } = &refused {
                eprintln!(
                    "serve: {}: {}",
                    demiurge_mcp::text::escape(server),
                    demiurge_mcp::text::escape(reason)
                );
            }
            refusal(&refused)
        }
    }
}
