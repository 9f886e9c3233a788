//! The actor system. The host holds handles (`host/`); every handle method is one
//! typed message to the actor that owns the state. The root's messages
//! ([`RuntimeMsg`]) are public: a ractor host links the root under its own supervisor
//! (`Runtime::start_linked`) and sends them itself.
//!
//! ```text
//!  host ─ Runtime / RuntimeMsg ──start/resume/evict/turn/shutdown──▶ RuntimeActor (root)
//!                                          ├─ linked ─▶ Limiter  (runtime-wide, restarted if it dies)
//!                                          ├─ linked ─▶ Broker   (runtime-wide, restarted if it dies)
//!                                          ├─ linked ─▶ lane directory (feature `cluster`, as LaneClaims)
//!                                          └─ linked ─▶ SessionActor (one per session)
//!  host ─ Session ──PrepareTurn──▶ SessionActor ─ linked ─▶ Catalog (per catalog identity)
//!                                                              │ plan.rs: close / connect / relist
//!                                                              │ task: connect.rs pipeline
//!                                                              │   capability → cwd → approval (Broker)
//!                                                              │   → interpolation → permit (Limiter)
//!                                                              │   → transport::connect → tools/list
//!                                                              └─ linked ─▶ Connection (per server)
//!  host ─ TurnCatalog::call ──(no actor hop)──▶ Dispatch ─▶ rmcp peer ─▶ server
//! ```
//!
//! A call goes straight from the turn's entry to the connection's rmcp peer through the
//! `Dispatch` the catalog built; the connection actor owns the client's lifetime (its
//! `post_stop` closes the transport and ends the process tree) and watches its end.
//! Supervision events carry every end upward: a connection's end is a cached failure of
//! its catalog, a catalog's end is replaced at the session's next turn, a session's end
//! leaves a resumable record at the root.
//!
//! # Floors
//!
//! Each room below uses only rooms on lower floors (and anything of `src/`; `src/`
//! never uses `actors/`); files inside one folder may use each other. Every tie between
//! rooms is a `use` at the top of the file, never an inline path
//! (`tests/floors.rs` reads them and fails on one that goes up or hides inline).
//!
//! | floor | room | what it holds | actor |
//! |---|---|---|---|
//! | 9 | `cluster.rs` | feature `cluster`: a runtime as a node, its lane directory (implements `LaneClaims`) | the directory |
//! | 8 | `host/` | `RuntimeMsg` and its replies, the root (one method per message), the handles, `LaneClaims` | the root |
//! | 7 | `session.rs` | one session: its catalog of the turn's identity, eviction | yes |
//! | 6 | `catalog/` | one catalog identity: plan, preparation, connect pipeline, inbound routes, status | yes |
//! | 5 | `turn/` | `TurnCatalog`: a turn's entries and every effect through it (call, read, subscribe, prompt) | |
//! | 4 | `connection.rs` | one server connection's lifetime, and its `Dispatch` | yes |
//! | 3 | `shared.rs` | what every actor of one runtime shares: configuration, caches, helper handles | |
//! | 2 | `broker.rs`, `limiter.rs` | the approval broker; the discovery limiter (N connects at once) | yes, both |
//! | 1 | `config.rs`, `swappable.rs` | `RuntimeConfig`; an actor reference a supervisor replaces | |
//!
//! A new MCP capability takes a fixed route: its request in `src/transport/requests.rs`,
//! its shaping in `src/offer/`, its effect in `turn/`, its event in `src/events`.

mod broker;
mod catalog;
#[cfg(feature = "cluster")]
pub mod cluster;
mod config;
mod connection;
mod host;
mod limiter;
mod session;
mod shared;
mod swappable;
mod turn;

pub use crate::authority::{
    Action, ApprovalAnswer, ApprovalRequest, Approver, DenyReason, FixedApprover,
};
pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::offer::{
    Offered, PromptArgumentInfo, PromptInfo, PromptMessageView, PromptResult, ResourceInfo,
    ServerIdentity, TemplateInfo,
};
pub use broker::Approval;
pub use catalog::{MAX_NOTICE_TEXT, ServerState, ServerStatus};
pub use config::{HostTool, RuntimeConfig};
pub use host::{
    CONTROL_BOUND, ChildSession, Eviction, OpenReply, Opened, RESUMABLE, Runtime, RuntimeError,
    RuntimeMsg, Session,
};
pub use limiter::{LimiterStats, Permit};
pub use session::{EvictionReport, InlineServers, LIVE_REVISION, SessionSpec};
pub use turn::{
    CallError, DESCRIBE_TOOL, Deferral, Denial, Diagnostic, MAX_LOOKUP, ModelTool, NameCollision,
    PrepareError, SEARCH_TOOLS, StaleReason, ToolEntry, ToolHints, TurnCatalog,
};
