//! # demiurge-mcp
//!
//! The MCP runtime of the Demiurge agent host as an embeddable actor system. A host
//! starts a [`Runtime`], starts or resumes sessions, prepares a per-turn catalog of MCP
//! tools (authorized, namespaced, filtered, bound to their connections) and calls them.
//!
//! # Layout
//! - [`core`]: `agent.yaml` and `agent/mcp/*.yaml`: raw serde types validated into
//!   [`core::Declaration`]s; the one YAML parse function.
//! - [`authority`]: capability grants, approval policy floors, the connect preview.
//! - [`naming`]: filters and exposed tool names (pure).
//! - [`redact`]: secret detection and the five views (pure).
//! - [`process`]: child environment, interpolation, private files, stderr capture.
//! - [`transport`]: MCP clients (stdio today), list/call/close.
//! - [`result`]: MCP results converted into tool results with their views.
//! - [`text`]: untrusted text escaped before a terminal sees it (pure).
//! - [`events`]: typed events, the host sink, the JSONL session log.
//! - [`actors`] (in `actors/`): the runtime root, sessions, catalogs, connections, the
//!   discovery limiter and the approval broker, behind plain async handles.
//! - [`demo_server`]: the built-in MCP server used by `demo`, the tests and the benches.
//! - `cli` (binary only): the `demiurge` command.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[path = "../actors/mod.rs"]
pub mod actors;
pub mod authority;
pub mod clock;
pub mod core;
pub mod demo_server;
mod digest;
pub mod events;
pub mod evolution;
pub mod naming;
pub mod net;
pub mod process;
pub mod redact;
pub mod result;
pub mod text;
pub mod transport;

pub use actors::{
    ApprovalAnswer, ApprovalRequest, Approver, CallError, ChildSession, Clock, DenyReason,
    Eviction, EvictionReport, FixedApprover, ManualClock, PrepareError, Runtime, RuntimeConfig,
    RuntimeError, Session, SessionSpec, StaleReason, SystemClock, ToolEntry, TurnCatalog,
};
