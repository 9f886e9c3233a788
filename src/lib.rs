//! # demiurge-mcp
//!
//! The MCP runtime of the Demiurge agent host as an embeddable actor system. A host
//! starts a [`Runtime`], starts or resumes sessions, prepares a per-turn catalog of MCP
//! tools (authorized, namespaced, filtered, bound to their connections) and calls them.
//!
//! # Layout
//! The modules stand on floors, and a module uses only modules on lower floors (two on
//! one floor do not know each other); `src/` never uses `actors/`. `tests/floors.rs`
//! reads every `use` line and fails on a tie that goes up.
//!
//! 1. [`text`], `digest`, [`clock`]: escaping untrusted text for terminals, hex and
//!    SHA-256, the clock the caches read (pure).
//! 2. [`redact`]: known secrets, secret shapes, and the views of a text (pure);
//!    [`search`]: finding tools by what they do (BM25), their one-line summaries, the
//!    token estimate of a deferred turn (pure).
//! 3. [`result`]: MCP results converted into tool results with their views, within
//!    their budget.
//! 4. [`net`]: the URL policy (verdict and audit view), pinned DNS, the HTTP client
//!    every request and redirect goes through.
//! 5. [`sandbox`]: the confinement of stdio servers (`sandbox:`; the rules, the
//!    launcher that applies them, the egress proxy).
//! 6. `process` (crate-private): child environment, interpolation, private files, the
//!    stderr log, process groups, the orphan reaper.
//! 7. [`core`]: an Agent Core read from disk or a git tree, without following links:
//!    `agent.yaml`, `agent/mcp/*.yaml` validated into [`core::Declaration`]s or kept
//!    as broken ones.
//! 8. [`pins`]: what a server serves, pinned at its approval: digests of its
//!    definitions, the pin files, the review diff, flags for text that hides something.
//! 9. [`naming`]: tool filters and exposed names (pure); [`authority`]: capability
//!    sets, policy floors, the cwd rule, the approval vocabulary, the connect preview,
//!    a connection's declared secrets.
//! 10. [`evolution`]: the security review of a changed core and its token, the live
//!     revision of a core repository; `transport` (crate-private): stdio and
//!     streamable HTTP MCP clients behind one `connect`, every MCP request
//!     (`requests.rs`), OAuth, and the bounds on what a server may send ([`limits`]).
//! 11. [`offer`]: what a server offers (tools, resources, templates, prompts, its
//!     identity), shaped once per listing (pure); [`events`]: typed events, delivery
//!     to the host sink, the JSONL session log.
//! 12. `demo_server` (feature `demo-server`): the built-in MCP server used by `demo`,
//!     the tests and the benches.
//! 13. [`actors`] (in `actors/`, floors of its own): the runtime root, sessions,
//!     catalogs, turns, connections, the discovery limiter and the approval broker,
//!     behind the host's handles.
//!
//! The `cli` module (binary only, feature `cli`) is the `demiurge` command, on top.
//!
//! The design rules the code relies on are in `docs/design.md`; what each input path
//! is bounded by, and against whom, in `docs/threats.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[path = "../actors/mod.rs"]
pub mod actors;
pub mod authority;
pub mod clock;
pub mod core;
#[cfg(feature = "demo-server")]
pub mod demo_server;
mod digest;
pub mod events;
pub mod evolution;
pub mod naming;
pub mod net;
pub mod offer;
pub mod pins;
pub(crate) mod process;
pub mod redact;
pub mod result;
pub mod sandbox;
pub mod search;
pub mod telemetry;
pub mod text;
pub(crate) mod transport;

pub use process::HostEnv;
pub use transport::{
    ConnectErrorKind, Progress, ProgressSink, TaskHandle, TaskSeen, token_file as oauth_token_file,
    token_files_of as oauth_token_files_of,
};

/// The bounds the runtime holds every server to, for hosts that document or test them.
/// Each is enforced where its input arrives; `docs/threats.md` names the adversary.
pub mod limits {
    pub use crate::actors::MAX_NOTICE_TEXT;
    pub use crate::core::{MAX_BLOCK_DEPTH, MAX_FILE_BYTES, MAX_FLOW_DEPTH};
    pub use crate::events::{LOG_QUEUE, MAX_OPEN_LOGS};
    pub use crate::offer::{
        MAX_DESCRIPTION, MAX_INSTRUCTIONS, MAX_PROMPT_ARGUMENTS, MAX_PROMPT_MESSAGES,
        MAX_PROMPT_TEXT, MAX_TITLE, MAX_URI,
    };
    pub use crate::process::{
        ENV_ALLOWLIST, STDERR_CAPTURE_CAP, STDERR_TAIL_CHARS, STDERR_TAIL_LINES,
        STDERR_WINDOW_CHARS, SWEEP,
    };
    pub use crate::transport::{
        AUTHORIZATION_TIMEOUT, MAX_BYTES_PER_SECOND, MAX_INPUT_KEY_BYTES, MAX_INPUT_REQUESTS,
        MAX_INPUT_ROUNDS, MAX_MESSAGE_BYTES, MAX_MESSAGES_PER_SECOND, MAX_PENDING_SERVER_REQUESTS,
        MAX_REMEMBERED_ERAS, MAX_REQUEST_ID_BYTES, MAX_REQUEST_STATE_BYTES,
        MAX_RESOURCE_SUBSCRIPTIONS, MAX_STEP_UPS, MAX_TASK_ID_BYTES, MAX_TASK_POLL, MAX_TOOL_PAGES,
        MAX_TOOLS, MIN_TASK_POLL, NOTICE_BURST, NOTICES_PER_SECOND, OAUTH_PHASE_TIMEOUT,
    };
}

pub use actors::{
    ApprovalAnswer, ApprovalRequest, Approver, CallError, ChildSession, Clock, Deferral,
    DenyReason, Eviction, EvictionReport, FixedApprover, ManualClock, ModelTool, NameCollision,
    OpenReply, Opened, PrepareError, Runtime, RuntimeConfig, RuntimeError, RuntimeMsg, Session,
    SessionSpec, StaleReason, SystemClock, ToolEntry, ToolHints, TurnCatalog,
};
