//! Authority: capability grants, approval policy and the connect preview.
//!
//! Pure and synchronous; the approval broker actor and the catalog actor call into it.

mod approval;
mod authorize;
mod capability;
mod cwd;
mod elicit;
mod fetched;
mod policy;
pub mod preview;
mod remembered;

pub use approval::{
    Action, ApprovalAnswer, ApprovalRequest, ApprovalSource, Approver, CallSubject, FixedApprover,
    PROMPT_ARGUMENTS, PROMPT_VALUE_CHARS,
};
pub use authorize::{AuthorizationOutcome, AuthorizationPrompt, Authorizer, NoAuthorizer};
pub use capability::CapabilitySet;
pub use cwd::{resolve_cwd, resolve_root};
pub use elicit::{
    DeclineElicitor, ElicitationAnswer, ElicitationRequest, Elicitor, defaults_of, validate,
    with_defaults,
};
pub use policy::HostPolicy;
pub use preview::ConnectPreview;
pub use remembered::{MAX_REMEMBERED, Remembered, RememberedApprovals};
