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
    /// The connect preview (for calls: the preview of the server being called).
    pub preview: ConnectPreview,
}

impl ApprovalRequest {
    /// Text for a terminal prompt, every untrusted field escaped.
    pub fn render(&self) -> String {
        match self.action {
            Action::Connect => self.preview.render(),
            Action::Call => format!(
                "MCP tool `{}` of server `{}` ({}) wants to run\n  risk: {}\n  capability: {}\n",
                crate::text::escape(self.tool.as_deref().unwrap_or("?")),
                crate::text::escape(&self.server),
                crate::text::escape(&self.preview.path),
                self.preview.risk.as_str(),
                crate::text::escape(&self.preview.call_capability)
            ),
        }
    }
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

/// The host's human (or policy) in the loop. Called one request at a time by the
/// approval broker; it may take as long as a human needs.
pub trait Approver: Send + Sync + 'static {
    /// Decides one request.
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
