//! The actor system: a runtime root supervising sessions, a catalog actor per
//! session/revision supervising one connection actor per server, the runtime-wide
//! discovery limiter and the approval broker. Hosts use only the handles re-exported
//! here; messages and actors stay private.
//!
//! ```text
//!  host ──start/resume/evict──▶ RuntimeActor ──spawn_linked──▶ SessionActor (per session)
//!                                                                 │ PrepareTurn
//!                                                                 ▼
//!  ApprovalBroker ◀──decide── prep task ◀──spawn── CatalogActor (per session/identity)
//!  Limiter ◀──acquire──┘          │ Resolved                    │ spawn_linked
//!                                 └──────────────▶ CatalogActor ▼
//!  TurnCatalog::call ──Call──▶ ConnectionActor (per server) ──▶ rmcp client ──▶ child
//! ```

mod approval;
mod catalog;
mod config;
mod connect;
mod connection;
mod limiter;
mod listing;
mod plan;
mod runtime;
mod session;
mod shared;
mod turn;

pub use crate::authority::{Action, ApprovalAnswer, ApprovalRequest, Approver, FixedApprover};
pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use approval::Approval;
pub use catalog::{ServerState, ServerStatus};
pub use config::{HostTool, RuntimeConfig};
pub use limiter::{LimiterStats, Permit};
pub use runtime::{ChildSession, Eviction, RESUMABLE, Runtime, RuntimeError, Session};
pub use session::{EvictionReport, LIVE_REVISION, SessionSpec};
pub use connect::DenyReason;
pub use turn::{CallError, Denial, Diagnostic, PrepareError, StaleReason, ToolEntry, TurnCatalog};
