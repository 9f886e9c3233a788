//! Authority: capability grants, approval policy and the connect preview.
//!
//! Pure and synchronous; the approval broker actor and the catalog actor call into it.

mod approval;
mod capability;
mod cwd;
mod policy;
pub mod preview;

pub use approval::{
    Action, ApprovalAnswer, ApprovalRequest, ApprovalSource, Approver, FixedApprover,
};
pub use capability::CapabilitySet;
pub use cwd::resolve_cwd;
pub use policy::HostPolicy;
pub use preview::ConnectPreview;
