//! Approvals of `demiurge serve` go to the person behind the MCP client that caused
//! them: by elicitation (form mode) when that client supports it, with the same preview
//! text and the same choices as the terminal; otherwise by the terminal when `serve`
//! has one that is not its protocol stream; otherwise they are refused (fail closed),
//! and the refused call's error says how to approve.
//!
//! Adversary: the client (it answers for its own session only: a question is routed by
//! the session that asked it, never to another client), and whatever it sends back (an
//! answer outside the offered choices is a refusal).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use demiurge_mcp::actors::Action;
use demiurge_mcp::{ApprovalAnswer, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::service::Peer;
use serde_json::{Value, json};

/// How long a client's person has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(300);

/// The client connection of each session, by session id.
pub(crate) type Clients = Arc<Mutex<HashMap<String, Peer<RoleServer>>>>;

/// The approver of `serve`.
pub(crate) struct ClientApprover {
    pub clients: Clients,
    /// The terminal's approver, when `serve` has a terminal of its own.
    pub terminal: Option<Arc<dyn Approver>>,
}

impl Approver for ClientApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let peer = self
            .clients
            .lock()
            .ok()
            .and_then(|c| c.get(&request.session).cloned());
        let asks_form = peer.as_ref().is_some_and(|p| {
            p.supported_elicitation_modes()
                .contains(&rmcp::service::ElicitationMode::Form)
        });
        // A changed definition is approved by a person with `demiurge pins approve` (or
        // at `serve`'s terminal), never by a client that may be the model's own.
        let change = request.action == Action::Change;
        match (peer, &self.terminal) {
            (Some(peer), _) if asks_form && !change => Box::pin(ask_client(peer, request)),
            (_, Some(terminal)) => terminal.decide(request),
            _ => Box::pin(async { ApprovalAnswer::Deny }),
        }
    }
}

/// The choices a client is offered: an "always" outlives the session and is a person's
/// to give at a terminal (`demiurge call`, `approvals`), not a client's.
const CHOICES: &[&str] = &["once", "session", "no"];

async fn ask_client(peer: Peer<RoleServer>, request: ApprovalRequest) -> ApprovalAnswer {
    // What cannot be shown whole cannot be approved (as at the terminal).
    if !request.arguments_fit() {
        return ApprovalAnswer::Deny;
    }
    let offered = CHOICES;
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "title": "Allow?",
                "enum": offered,
                "description": "once: this time; session: for the rest of this session (a call: with any arguments); no: refuse",
            }
        },
        "required": ["answer"],
    });
    let Ok(schema) = serde_json::from_value(schema) else {
        return ApprovalAnswer::Deny;
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: request.render(),
        requested_schema: schema,
    };
    let asked = peer
        .create_elicitation_with_timeout(params, Some(ANSWER_WITHIN))
        .await;
    let Ok(answer) = asked else {
        return ApprovalAnswer::Deny;
    };
    if answer.action != ElicitationAction::Accept {
        return ApprovalAnswer::Deny;
    }
    let chosen = answer
        .content
        .as_ref()
        .and_then(|c| c.get("answer"))
        .and_then(Value::as_str)
        .filter(|a| offered.contains(a));
    match chosen {
        Some("once") => ApprovalAnswer::AllowOnce,
        Some("session") => ApprovalAnswer::AllowSession,
        _ => ApprovalAnswer::Deny,
    }
}

/// The events of `serve`: each goes to the CLI's sink; a server's changed tool list
/// (`mcp.tools_changed`) is also told to the client whose session it is in, as
/// `notifications/tools/list_changed` (the client lists again; the change is applied at
/// its next turn).
pub(crate) struct Relay {
    pub clients: Clients,
    pub inner: Arc<dyn demiurge_mcp::events::EventSink>,
    /// Where the notice is sent from (events are delivered on a thread of their own).
    pub runtime: tokio::runtime::Handle,
}

impl demiurge_mcp::events::EventSink for Relay {
    fn emit(&self, event: &demiurge_mcp::events::Event) {
        if let demiurge_mcp::events::EventKind::ToolsChanged { .. } = &event.kind {
            let peer = self
                .clients
                .lock()
                .ok()
                .and_then(|c| c.get(&event.session).cloned());
            if let Some(peer) = peer {
                self.runtime.spawn(async move {
                    let _ = peer.notify_tool_list_changed().await;
                });
            }
        }
        self.inner.emit(event);
    }
}
