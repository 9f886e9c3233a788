//! Typed runtime events, the host's [`EventSink`], and the per-session JSONL log.
//!
//! Events are built already redacted (event view); the JSONL log under
//! `<home>/runtime/session-events/<session>.jsonl` stores the same, durable, view.

use serde::Serialize;

use crate::authority::{Action, ApprovalAnswer, ApprovalSource, ConnectPreview};
use crate::net::AuditView;

mod delivery;
mod log;
mod sinks;

pub(crate) use delivery::FLUSH_WAIT;
pub use delivery::{EventCounter, EventDelivery, EventHub, EventLog, LOG_QUEUE};
pub use log::{LOG_BATCH, MAX_OPEN_LOGS};
pub use sinks::{EventSink, MemorySink, NullSink};

/// When a URL decision was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UrlPhase {
    /// On the declared URL, before approval and before any client exists.
    Connect,
    /// On one HTTP request or redirect hop.
    Request,
    /// OAuth: protected resource metadata.
    OauthResourceMetadata,
    /// OAuth: authorization server metadata.
    OauthServerMetadata,
    /// OAuth: dynamic client registration.
    OauthRegistration,
    /// OAuth: a token request.
    OauthToken,
    /// OAuth: a refresh-token request.
    OauthRefresh,
    /// OAuth: token revocation.
    OauthRevocation,
    /// OAuth: any other request (a client metadata document).
    OauthOther,
    /// A confined stdio server's request through its egress proxy.
    Egress,
}

impl UrlPhase {
    /// The phase of an OAuth request of `step`.
    pub fn of_oauth(step: crate::net::oauth::OAuthStep) -> Self {
        use crate::net::oauth::OAuthStep;
        match step {
            OAuthStep::ResourceMetadata => UrlPhase::OauthResourceMetadata,
            OAuthStep::ServerMetadata => UrlPhase::OauthServerMetadata,
            OAuthStep::Registration => UrlPhase::OauthRegistration,
            OAuthStep::Token => UrlPhase::OauthToken,
            OAuthStep::Refresh => UrlPhase::OauthRefresh,
            OAuthStep::Revocation => UrlPhase::OauthRevocation,
            _ => UrlPhase::OauthOther,
        }
    }
}

/// What a sandbox refusal was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxDenial {
    /// A request through the egress proxy, refused by the URL policy.
    Egress,
    /// A confined server failed, and its stderr reports a refused access: most likely
    /// Landlock's or seccomp's, whose refusals reach no one but the process refused.
    /// The target is never named (the text is the server's); the reason is the kind of
    /// refusal reported (`permission_denied`, `operation_not_permitted`, `read_only`).
    Reported,
}

/// How an elicitation was answered (serialized `accept`, `decline`, `cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitAction {
    /// The person answered, and the answer fit the requested schema.
    Accept,
    /// Declined (by the person, by the host's elicitor, or because the answer did not
    /// fit the schema).
    Decline,
    /// The person dismissed the request.
    Cancel,
}

/// Which of a server's lists changed (serialized `resources`, `prompts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListKind {
    /// Its resources (and resource templates).
    Resources,
    /// Its prompts.
    Prompts,
}

/// How a session became live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Opening {
    /// Started anew (`Runtime::start_session`).
    Start,
    /// Resumed by id.
    Resume,
}

pub use crate::clock::now_ms;

/// What happened, one variant per event type (the `type` field of the JSONL line).
/// Every string in it is already redacted and carries no secret value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum EventKind {
    /// A session started or was resumed.
    #[serde(rename = "mcp.session_started")]
    SessionStarted {
        /// Started or resumed.
        how: Opening,
        /// Principal of the session.
        principal: String,
    },
    /// A session's connections were closed.
    #[serde(rename = "mcp.session_evicted")]
    SessionEvicted {
        /// Why (`replaced`, `explicit`, `shutdown`, `child_finished`, ...).
        reason: String,
        /// How many connections were closed.
        connections_closed: usize,
    },
    /// A tracked eviction did not complete normally.
    #[serde(rename = "mcp.session_eviction_failed")]
    SessionEvictionFailed {
        /// Why it was evicted.
        reason: String,
        /// What went wrong.
        message: String,
    },
    /// A turn's catalog was resolved.
    #[serde(rename = "mcp.turn_prepared")]
    TurnPrepared {
        /// Turn number within the session.
        turn: u64,
        /// Visible tools.
        tools: usize,
        /// Servers with a diagnostic.
        failed: usize,
        /// Servers denied.
        denied: usize,
    },
    /// A turn with a token budget for its tool definitions: the rule's inputs and its
    /// decision (deterministic for the same tools and budget).
    #[serde(rename = "mcp.tools_deferred")]
    ToolsDeferred {
        /// Turn number within the session.
        turn: u64,
        /// The budget, in tokens.
        budget: usize,
        /// How tokens were counted (`bytes/4`).
        estimator: String,
        /// Tools in the turn.
        tools: usize,
        /// Tokens of every tool's whole definition.
        full_tokens: usize,
        /// Whether the turn was deferred (`full_tokens` over `budget`).
        deferred: bool,
        /// Tokens of what the model is offered at the turn's start.
        offered_tokens: usize,
        /// Tools offered as a name and summary only.
        deferred_tools: usize,
        /// Tools offered whole although the turn is deferred.
        always_loaded: usize,
    },
    /// A server was skipped by authority (not cached: asked again next turn).
    #[serde(rename = "mcp.server_denied")]
    ServerDenied {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// The denial in words: the missing capability, the cwd or URL rule, or the
        /// refused approval.
        reason: String,
    },
    /// A server was authorized and is being started or reached.
    #[serde(rename = "mcp.server_connecting")]
    ServerConnecting {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
    },
    /// A server connected and listed its tools.
    #[serde(rename = "mcp.server_connected")]
    ServerConnected {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// Child process id (stdio).
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Tools listed by the server (before filtering).
        tools_listed: usize,
    },
    /// A server failed to start, list, or died; its diagnostic is cached.
    #[serde(rename = "mcp.server_failed")]
    ServerFailed {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// Redacted diagnostic.
        message: String,
        /// Where the transport connect failed (spawn, handshake, timeout); absent for
        /// failures before the transport or after a connection ended.
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<crate::transport::ConnectErrorKind>,
        /// How long the failure is cached, in milliseconds.
        cached_for_ms: u64,
    },
    /// A server was skipped for this turn without a failure cache (missing variable).
    #[serde(rename = "mcp.server_skipped")]
    ServerSkipped {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// What is missing (a `${NAME}` the host does not set), without any value.
        message: String,
    },
    /// A connection was closed.
    #[serde(rename = "mcp.server_closed")]
    ServerClosed {
        /// Server id.
        server: String,
        /// What closed it: a changed or removed declaration, eviction, shutdown.
        reason: String,
    },
    /// A server's tool list changed; applied at the next turn boundary.
    #[serde(rename = "mcp.tools_changed")]
    ToolsChanged {
        /// Server id.
        server: String,
    },
    /// A server serves a definition (tool, resource template, prompt, instructions)
    /// other than the one a person approved, or a new one: held back from the model
    /// (`quarantined`), used under `pinning: warn` (`allowed`), or approved when asked
    /// (`approved`).
    #[serde(rename = "mcp.definition_changed")]
    DefinitionChanged {
        /// Server id.
        server: String,
        /// `tool`, `template`, `prompt` or `instructions`.
        kind: crate::pins::DefinitionKind,
        /// The server's own name of it.
        name: String,
        /// `changed` or `added`.
        change: String,
        /// sha256 of the approved definition (`None` when it is new).
        #[serde(skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        /// sha256 of the definition served now.
        after: String,
        /// `quarantined`, `allowed` or `approved`.
        action: String,
        /// What its text may hide from a person.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        flags: Vec<crate::pins::TextFlag>,
        /// The review diff: redacted, escaped, bounded.
        diff: String,
    },
    /// The host's sink could not keep up: this many events were dropped before this
    /// one (the session log, when on, has them unless its own queue was full too).
    #[serde(rename = "mcp.events_dropped")]
    EventsDropped {
        /// How many.
        count: u64,
    },
    /// A server's resource or prompt list changed; applied at the next turn boundary.
    #[serde(rename = "mcp.list_changed")]
    ListChanged {
        /// Server id.
        server: String,
        /// Which list.
        list: ListKind,
    },
    /// A server sent a log message (`notifications/message`), redacted and capped.
    #[serde(rename = "mcp.server_log")]
    ServerLog {
        /// Server id.
        server: String,
        /// `debug` .. `emergency`.
        level: String,
        /// The server's logger name.
        #[serde(skip_serializing_if = "Option::is_none")]
        logger: Option<String>,
        /// The message's data, event view.
        data: serde_json::Value,
        /// Notices of this server dropped since the last one passed (a flood).
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A server reported progress on a request.
    #[serde(rename = "mcp.progress")]
    Progress {
        /// Server id.
        server: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// The server's message, event view.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Notices of this server dropped since the last one passed.
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A server said a resource changed (`notifications/resources/updated`).
    #[serde(rename = "mcp.resource_updated")]
    ResourceUpdated {
        /// Server id.
        server: String,
        /// The resource, event view.
        uri: String,
        /// Notices of this server dropped since the last one passed.
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A task a call follows (the tasks extension) changed status.
    #[serde(rename = "mcp.task_status")]
    TaskStatus {
        /// Server id.
        server: String,
        /// The server's id of the task, event view.
        task: String,
        /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
        status: String,
        /// The server's status message, event view.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Notices of this server dropped since the last one passed.
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A resource was read.
    #[serde(rename = "mcp.resource_read")]
    ResourceRead {
        /// Server id.
        server: String,
        /// The resource, event view.
        uri: String,
        /// Whether the read failed.
        is_error: bool,
        /// How long it took.
        duration_ms: u64,
    },
    /// A prompt was got.
    #[serde(rename = "mcp.prompt_got")]
    PromptGot {
        /// Server id.
        server: String,
        /// Exposed prompt name.
        prompt: String,
    },
    /// An approval was requested.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Exposed tool name for calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// A call's arguments, event view (redacted).
        #[serde(skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Value>,
        /// The secret-free preview (boxed: it is the largest field of any event).
        preview: Box<ConnectPreview>,
    },
    /// A server asked the user for input (elicitation) and was answered.
    #[serde(rename = "mcp.elicitation")]
    Elicitation {
        /// Server id.
        server: String,
        /// How the request was answered.
        action: ElicitAction,
        /// The fields sent back, event view (redacted as call arguments are).
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<serde_json::Value>,
        /// Why an answer was refused (it did not fit the requested schema).
        #[serde(skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// A question was withdrawn while the approver was being asked: its requester went
    /// away (turn or call dropped, session evicted, runtime shut down).
    #[serde(rename = "approval.withdrawn")]
    ApprovalWithdrawn {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Exposed tool name for calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// An approval was decided.
    #[serde(rename = "approval.decided")]
    ApprovalDecided {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Allow once, allow for the session, or deny.
        decision: ApprovalAnswer,
        /// Who answered: the policy, the allow-for-session cache, the approver.
        source: ApprovalSource,
    },
    /// A tool was called.
    #[serde(rename = "mcp.tool_called")]
    ToolCalled {
        /// Server id.
        server: String,
        /// Exposed name.
        tool: String,
        /// Whether the result was an error.
        is_error: bool,
        /// Wall time of the call.
        duration_ms: u64,
        /// Content, event view.
        content: String,
    },
    /// A call was refused before reaching its server.
    #[serde(rename = "mcp.call_denied")]
    CallDenied {
        /// Server id.
        server: String,
        /// Exposed name.
        tool: String,
        /// The refusal in words (missing capability, approval denied or unavailable).
        reason: String,
    },
    /// The sandbox refused something a confined server tried (`egress`), or a
    /// confined server failed saying it was refused, most likely by the sandbox
    /// (`reported`).
    #[serde(rename = "mcp.sandbox_denied")]
    SandboxDenied {
        /// Server id.
        server: String,
        /// What was refused.
        kind: SandboxDenial,
        /// What it aimed at, in the safe form of its kind (an origin for egress;
        /// empty when reported: the server's words are not repeated).
        target: String,
        /// The rule that refused it (a URL policy block name for egress), or the kind
        /// of refusal reported.
        reason: String,
    },
    /// A URL policy decision for one HTTP request.
    #[serde(rename = "mcp.url_decision")]
    UrlDecision {
        /// Before approval, or for one request.
        phase: UrlPhase,
        /// Server id.
        server: String,
        /// The safe audit view.
        decision: AuditView,
    },
}

/// One event of one session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Session id.
    pub session: String,
    /// The event's type and fields.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event stamped now.
    pub fn new(session: impl Into<String>, kind: EventKind) -> Self {
        Event {
            at_ms: now_ms(),
            session: session.into(),
            kind,
        }
    }

    /// The `type` string (`mcp.server_denied`, ...).
    pub fn type_name(&self) -> String {
        self.kind.type_name().to_string()
    }
}

impl EventKind {
    /// The `type` string of the event's JSONL line (`mcp.server_denied`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::SessionStarted { .. } => "mcp.session_started",
            EventKind::SessionEvicted { .. } => "mcp.session_evicted",
            EventKind::SessionEvictionFailed { .. } => "mcp.session_eviction_failed",
            EventKind::TurnPrepared { .. } => "mcp.turn_prepared",
            EventKind::ToolsDeferred { .. } => "mcp.tools_deferred",
            EventKind::ServerDenied { .. } => "mcp.server_denied",
            EventKind::ServerConnecting { .. } => "mcp.server_connecting",
            EventKind::ServerConnected { .. } => "mcp.server_connected",
            EventKind::ServerFailed { .. } => "mcp.server_failed",
            EventKind::ServerSkipped { .. } => "mcp.server_skipped",
            EventKind::ServerClosed { .. } => "mcp.server_closed",
            EventKind::ToolsChanged { .. } => "mcp.tools_changed",
            EventKind::DefinitionChanged { .. } => "mcp.definition_changed",
            EventKind::EventsDropped { .. } => "mcp.events_dropped",
            EventKind::ListChanged { .. } => "mcp.list_changed",
            EventKind::ServerLog { .. } => "mcp.server_log",
            EventKind::Progress { .. } => "mcp.progress",
            EventKind::ResourceUpdated { .. } => "mcp.resource_updated",
            EventKind::TaskStatus { .. } => "mcp.task_status",
            EventKind::ResourceRead { .. } => "mcp.resource_read",
            EventKind::PromptGot { .. } => "mcp.prompt_got",
            EventKind::ApprovalRequested { .. } => "approval.requested",
            EventKind::Elicitation { .. } => "mcp.elicitation",
            EventKind::ApprovalWithdrawn { .. } => "approval.withdrawn",
            EventKind::ApprovalDecided { .. } => "approval.decided",
            EventKind::ToolCalled { .. } => "mcp.tool_called",
            EventKind::CallDenied { .. } => "mcp.call_denied",
            EventKind::SandboxDenied { .. } => "mcp.sandbox_denied",
            EventKind::UrlDecision { .. } => "mcp.url_decision",
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
