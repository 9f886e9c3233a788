//! The approval vocabulary: what the runtime asks the host's [`Approver`], and what
//! can come back. The broker actor (`actors/approval.rs`) decides when to ask.

use futures::future::BoxFuture;
use serde::Serialize;

use super::ConnectPreview;

/// What is being approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Spawning or connecting to a server and listing its tools.
    Connect,
    /// Calling one tool.
    Call,
}

impl Action {
    /// `connect` or `call`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Connect => "connect",
            Action::Call => "call",
        }
    }
}

/// A question for the host's [`Approver`]. It carries no secret values.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// Session asking.
    pub session: String,
    /// Connect or call.
    pub action: Action,
    /// Server id.
    pub server: String,
    /// Exposed tool name (calls).
    pub tool: Option<String>,
    /// A call's arguments as the event view shows them (declared secrets and values
    /// under sensitive keys redacted), so the operator sees what will run; `None` for
    /// connects.
    pub arguments: Option<serde_json::Value>,
    /// The connect preview (for calls: the preview of the server being called).
    pub preview: ConnectPreview,
}

impl ApprovalRequest {
    /// Text for a terminal prompt, every untrusted field escaped.
    pub fn render(&self) -> String {
        match self.action {
            Action::Connect => self.preview.render(),
            Action::Call => format!(
                "MCP tool `{}` of server `{}` ({}) wants to run\n  risk: {}\n  capability: {}\n{}",
                crate::text::escape(self.tool.as_deref().unwrap_or("?")),
                crate::text::escape(&self.server),
                crate::text::escape(&self.preview.path),
                self.preview.risk.as_str(),
                crate::text::escape(&self.preview.call_capability),
                render_arguments(self.arguments.as_ref()),
            ),
        }
    }
}

/// Most characters of one argument value a prompt shows.
pub const PROMPT_VALUE_CHARS: usize = 200;
/// Most arguments a prompt lists; the rest are counted.
pub const PROMPT_ARGUMENTS: usize = 12;

/// A call's arguments, one per line: each key and its value as compact JSON, escaped
/// for a terminal and cut at [`PROMPT_VALUE_CHARS`]; at most [`PROMPT_ARGUMENTS`].
fn render_arguments(arguments: Option<&serde_json::Value>) -> String {
    let Some(serde_json::Value::Object(map)) = arguments else {
        return "  arguments: none\n".into();
    };
    if map.is_empty() {
        return "  arguments: none\n".into();
    }
    let mut out = String::from("  arguments:\n");
    for (key, value) in map.iter().take(PROMPT_ARGUMENTS) {
        let value = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let value = crate::result::cap_chars(&value, PROMPT_VALUE_CHARS);
        out.push_str(&format!(
            "    {}: {}\n",
            crate::text::escape(&crate::result::cap_chars(key, 64)),
            crate::text::escape(&value)
        ));
    }
    if map.len() > PROMPT_ARGUMENTS {
        out.push_str(&format!(
            "    ... and {} more\n",
            map.len() - PROMPT_ARGUMENTS
        ));
    }
    out
}

/// Who decided an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalSource {
    /// The effective policy (`auto` or `deny`) decided without asking.
    Policy,
    /// An earlier "allow for this session" answered.
    Cache,
    /// The host's approver was asked.
    Approver,
    /// The approver did not answer within `RuntimeConfig::approval_deadline`: denied.
    Deadline,
}

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// This time only.
    AllowOnce,
    /// For the rest of the session (until the declaration changes).
    AllowSession,
    /// Refused this time; nothing is remembered, the next turn asks again.
    Deny,
}

impl ApprovalAnswer {
    /// The spelling in events and JSON (`allow_once`, `allow_session`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::AllowOnce => "allow_once",
            ApprovalAnswer::AllowSession => "allow_session",
            ApprovalAnswer::Deny => "deny",
        }
    }
}

/// The host's human (or policy) in the loop. Called by the approval broker one request
/// at a time per session (sessions are asked independently, so several futures may be
/// pending at once); it may take as long as a human needs, unless the runtime has an
/// approval deadline.
pub trait Approver: Send + Sync + 'static {
    /// Decides one request. When the requester goes away (its turn or call was dropped,
    /// its session evicted, the runtime shut down) or the deadline passes, the returned
    /// future is dropped unfinished: an approver showing a prompt should take it down
    /// when that happens (a guard in the future, or a oneshot whose sender it holds).
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer>;
}

/// Answers every request the same way.
#[derive(Debug, Clone, Copy)]
pub struct FixedApprover(pub ApprovalAnswer);

impl Approver for FixedApprover {
    fn decide(&self, _request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let answer = self.0;
        Box::pin(async move { answer })
    }
}
