//! The actor system. The host holds handles (`handle.rs`); every handle method is one
//! typed message to the actor that owns the state. The root's messages (`RuntimeMsg`)
//! are public: a ractor host links the root under its own supervisor
//! (`Runtime::start_linked`) and sends them itself.
//!
//! ```text
//!  host ─ Runtime / RuntimeMsg ──start/resume/evict/turn/shutdown──▶ RuntimeActor (root)
//!                                          ├─ linked ─▶ Limiter  (runtime-wide, restarted if it dies)
//!                                          ├─ linked ─▶ Broker   (runtime-wide, restarted if it dies)
//!                                          └─ linked ─▶ SessionActor (one per session)
//!  host ─ Session ──PrepareTurn──▶ SessionActor ─ linked ─▶ CatalogActor (per catalog identity)
//!                                                              │ plan.rs: close / connect / relist
//!                                                              │ task: connect.rs pipeline
//!                                                              │   capability → cwd → approval (Broker)
//!                                                              │   → interpolation → permit (Limiter)
//!                                                              │   → transport::connect → tools/list
//!                                                              └─ linked ─▶ ConnectionActor (per server)
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
//! | file | what it holds |
//! |---|---|
//! | `handle.rs` | `Runtime`, `Session`, `ChildSession`: the host's handles |
//! | `runtime.rs` | the root and its public protocol (`RuntimeMsg`): sessions, lanes, tracked evictions, helper restarts |
//! | `session.rs` | one session: its spec, its current catalog, eviction |
//! | `catalog.rs` | one catalog identity: live connections, failure cache, turns |
//! | `plan.rs` | pure: what a turn closes, connects and relists; its entries and names |
//! | `connect.rs` | the connect pipeline, step by step, and its typed denials |
//! | `inbound.rs` | what a server sends outside our requests (elicitation, logs, progress, updates) and the roots it is shown |
//! | `preparation.rs` | a turn's connects on a task, ended at once when its caller or catalog goes |
//! | `connection.rs` | one server connection's lifetime, and its `Dispatch` |
//! | `listing.rs` | a `tools/list` answer made catalog tools (bounds, schema pool) |
//! | `turn.rs` | `TurnCatalog`: a turn's entries, and the call path's checks |
//! | `resources.rs` | what a server offers beside tools (identity, resources, prompts), shaped, and reading and getting them |
//! | `status.rs` | what `/servers` reports |
//! | `approval.rs` | the approval broker: policy, session cache, one question at a time |
//! | `limiter.rs` | the discovery limiter: N connects at once, first come first served |
//! | `shared.rs` | what every actor of one runtime shares |
//! | `swappable.rs` | an actor reference a supervisor replaces on restart |
//! | `config.rs` | `RuntimeConfig` |
//! | `cluster.rs` | feature `cluster`: a runtime as a cluster node, and its lane directory |

mod approval;
mod catalog;
#[cfg(feature = "cluster")]
pub mod cluster;
mod config;
mod connect;
mod connection;
mod handle;
mod inbound;
mod limiter;
mod listing;
mod plan;
mod preparation;
mod resources;
mod runtime;
mod session;
mod shared;
mod status;
mod swappable;
mod turn;

pub use crate::authority::{Action, ApprovalAnswer, ApprovalRequest, Approver, FixedApprover};
pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use approval::Approval;
pub use config::{HostTool, RuntimeConfig};
pub use connect::DenyReason;
pub use handle::{CONTROL_BOUND, ChildSession, Runtime, Session};
pub use limiter::{LimiterStats, Permit};
pub use resources::{
    Offered, PromptArgumentInfo, PromptInfo, PromptMessageView, PromptResult, ResourceInfo,
    ServerIdentity, TemplateInfo,
};
pub use runtime::{Eviction, RESUMABLE, RuntimeError};
pub use runtime::{OpenReply, Opened, RuntimeMsg};
pub use session::{EvictionReport, InlineServers, LIVE_REVISION, SessionSpec};
pub use status::{ServerState, ServerStatus};
pub use turn::{
    CallError, Denial, Diagnostic, PrepareError, StaleReason, ToolEntry, ToolHints, TurnCatalog,
};
