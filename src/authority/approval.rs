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
    /// Reading one resource (`tool` names the server and the URI).
    Read,
    /// Getting one prompt (`tool` is its exposed name).
    Prompt,
    /// Subscribing to one resource's updates (`tool` names the server and the URI).
    Subscribe,
    /// Letting a model see definitions a server changed or added since a person
    /// approved what it served (`change` carries the diff; `tool` names the change set).
    Change,
}

impl Action {
    /// `connect`, `call`, `read` or `prompt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Connect => "connect",
            Action::Call => "call",
            Action::Read => "read",
            Action::Prompt => "prompt",
            Action::Subscribe => "subscribe",
            Action::Change => "change",
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
    /// For a tool call (a prompt, a resource): what its server defines. The approval is bound to
    /// it (an "allow for the session" or an "always" covers this raw name with this
    /// definition, never whatever tool the exposed name points at later).
    pub call: Option<CallSubject>,
    /// For a changed definition: what changed, as the review shows it.
    pub change: Option<ChangeReview>,
}

/// Definitions a server changed or added since a person approved what it served: the
/// question of an [`Action::Change`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChangeReview {
    /// sha256 (hex) of the change set: what an answer is bound to.
    pub set: String,
    /// Each change.
    pub changes: Vec<crate::pins::Change>,
    /// The diff a person reads: escaped, redacted, bounded.
    pub diff: String,
}

/// The tool a call approval is for: its raw name, what it says of itself, and the
/// digest of its whole definition (description, schemas, annotations) as listed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub struct CallSubject {
    /// The server's own name of the tool (the exposed name may differ by a suffix).
    pub name: String,
    /// Its title (redacted, capped), from the tool or its annotations.
    pub title: Option<String>,
    /// Its `readOnlyHint`, when the server gave one.
    pub read_only: Option<bool>,
    /// Its `destructiveHint`.
    pub destructive: Option<bool>,
    /// Its `idempotentHint`.
    pub idempotent: Option<bool>,
    /// Its `openWorldHint`.
    pub open_world: Option<bool>,
    /// sha256 (hex) of the tool's definition as listed.
    pub definition: String,
}

impl CallSubject {
    /// What an approval of this tool is remembered under: raw name and the whole
    /// definition digest (`name#sha256:<64 hex>`; a short digest could be matched by a
    /// second definition a server crafted).
    pub fn identity(&self) -> String {
        format!("{}#sha256:{}", self.name, self.definition)
    }

    /// Lines for a prompt: the raw name and title, the hints (unsaid ones as MCP's
    /// defaults read them), the definition's digest.
    fn render(&self, hints: bool) -> String {
        let hint = |value: Option<bool>, yes: &str, no: &str, default: &str| match value {
            Some(true) => yes.to_string(),
            Some(false) => no.to_string(),
            None => format!("{default} (not said)"),
        };
        let mut out = format!(
            "  name on the server: {}\n",
            crate::text::escape(&shown_value(&self.name))
        );
        if let Some(title) = &self.title {
            out.push_str(&format!(
                "  title: {}\n",
                crate::text::escape(&shown_value(title))
            ));
        }
        if !hints {
            out.push_str(&format!(
                "  definition: sha256:{}\n",
                self.definition.chars().take(12).collect::<String>()
            ));
            return out;
        }
        out.push_str(&format!(
            "  hints (the server's own claims): {}, {}, {}\n  definition: sha256:{}\n",
            hint(self.read_only, "read-only", "writes", "writes"),
            hint(
                self.destructive,
                "destructive",
                "not destructive",
                "destructive"
            ),
            hint(self.open_world, "open world", "closed world", "open world"),
            self.definition.chars().take(12).collect::<String>(),
        ));
        out
    }
}

impl ApprovalRequest {
    /// Text for a terminal prompt, every untrusted field escaped.
    pub fn render(&self) -> String {
        match self.action {
            Action::Connect => self.preview.render(),
            Action::Change => format!(
                "MCP server `{}` ({}) serves definitions that changed since they were approved\n{}  approving lets the model see and call them; refusing keeps them out (review later: demiurge pins show {})\n",
                crate::text::escape(&self.server),
                crate::text::escape(&self.preview.path),
                self.change
                    .as_ref()
                    .map(|c| c.diff.as_str())
                    .unwrap_or_default(),
                crate::text::escape(&self.server),
            ),
            Action::Call | Action::Read | Action::Prompt | Action::Subscribe => format!(
                "MCP {} `{}` of server `{}` ({}) wants to run\n{}  risk: {}\n  capability: {}\n{}",
                match self.action {
                    Action::Read => "resource read",
                    Action::Prompt => "prompt",
                    Action::Subscribe => "resource subscription",
                    _ => "tool",
                },
                crate::text::escape(self.tool.as_deref().unwrap_or("?")),
                crate::text::escape(&self.server),
                crate::text::escape(&self.preview.path),
                self.call
                    .as_ref()
                    .map(|c| c.render(self.action == Action::Call))
                    .unwrap_or_default(),
                self.preview.risk.as_str(),
                crate::text::escape(&self.preview.call_capability),
                render_arguments(self.arguments.as_ref()),
            ),
        }
    }
}

/// Most characters of one argument value a prompt shows whole; a longer value shows
/// its head, its tail, its length and a digest.
pub const PROMPT_VALUE_CHARS: usize = 200;
/// Most arguments a prompt lists; a call with more cannot be shown in full
/// ([`ApprovalRequest::arguments_fit`] is false) and the CLI denies it without asking.
pub const PROMPT_ARGUMENTS: usize = 32;

impl ApprovalRequest {
    /// Whether a prompt can show every argument of this call: at most
    /// [`PROMPT_ARGUMENTS`] of them, and redaction did not fail. An approver that
    /// cannot show what will run should not approve it.
    pub fn arguments_fit(&self) -> bool {
        match &self.arguments {
            None => true,
            Some(serde_json::Value::Object(map)) => map.len() <= PROMPT_ARGUMENTS,
            Some(_) => false,
        }
    }
}

/// A value as a prompt shows it: whole when short, else head … tail with its length
/// and digest, so that what is hidden in the middle is at least visible as being there.
fn shown_value(value: &str) -> String {
    let count = value.chars().count();
    if count <= PROMPT_VALUE_CHARS {
        return value.to_string();
    }
    let head: String = value.chars().take(120).collect();
    let tail: String = value.chars().skip(count - 60).collect();
    let digest = crate::digest::sha256_hex(value.as_bytes());
    format!(
        "{head} … {tail} ({count} characters, sha256:{})",
        &digest[..12]
    )
}

/// A call's arguments, one per line: each key and its value (strings as they are,
/// others as compact JSON), escaped for a terminal; long values shown head and tail.
fn render_arguments(arguments: Option<&serde_json::Value>) -> String {
    let map = match arguments {
        None => return "  arguments: none\n".into(),
        Some(serde_json::Value::Object(map)) if map.is_empty() => {
            return "  arguments: none\n".into();
        }
        Some(serde_json::Value::Object(map)) if map.len() <= PROMPT_ARGUMENTS => map,
        Some(serde_json::Value::Object(map)) => {
            return format!(
                "  arguments: {} of them, too many to show; not approvable here\n",
                map.len()
            );
        }
        Some(_) => return "  arguments: cannot be shown (redaction failed)\n".into(),
    };
    let mut out = String::from("  arguments:\n");
    for (key, value) in map {
        let value = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!(
            "    {}: {}\n",
            crate::text::escape(&shown_value(key)),
            crate::text::escape(&shown_value(&value))
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
    /// A person's earlier "always", for this exact declaration.
    Remembered,
}

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// This time only.
    AllowOnce,
    /// For the rest of the session (until the declaration changes).
    AllowSession,
    /// Always, across sessions and restarts, until the declaration changes or the
    /// operator revokes it (`demiurge approvals revoke`). Only a person should answer it.
    AllowAlways,
    /// Refused this time; nothing is remembered, the next turn asks again.
    Deny,
}

impl ApprovalAnswer {
    /// The spelling in events and JSON (`allow_once`, `allow_session`, `deny`).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::AllowOnce => "allow_once",
            ApprovalAnswer::AllowSession => "allow_session",
            ApprovalAnswer::AllowAlways => "allow_always",
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
