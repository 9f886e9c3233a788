//! Authority: capability grants, approval policy and the connect preview.
//!
//! Pure and synchronous; the approval broker actor and the catalog actor call into it.

mod approval;
mod capability;
mod policy;
pub mod preview;

pub use approval::{Action, ApprovalAnswer, ApprovalRequest, Approver, FixedApprover};
pub use capability::CapabilitySet;
pub use policy::HostPolicy;
pub use preview::ConnectPreview;
