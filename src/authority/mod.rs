//! Authority: capability grants, approval policy, the connect preview, why a server
//! was denied, and the secrets a connection knows.
//!
//! Pure and synchronous; the approval broker actor and the catalog actor call into it.

mod approval;
mod authorize;
mod capability;
mod cwd;
mod deny;
mod elicit;
mod fetched;
mod policy;
pub mod preview;
mod remembered;
mod secrets;

pub use approval::{
    Action, ApprovalAnswer, ApprovalRequest, ApprovalSource, Approver, CallSubject, ChangeReview,
    FixedApprover, PROMPT_ARGUMENTS, PROMPT_VALUE_CHARS,
};
pub use authorize::{AuthorizationOutcome, AuthorizationPrompt, Authorizer, NoAuthorizer};
pub use capability::CapabilitySet;
pub use cwd::{resolve_cwd, resolve_root};
pub use deny::DenyReason;
pub use elicit::{
    DeclineElicitor, ElicitationAnswer, ElicitationRequest, Elicitor, defaults_of, validate,
    with_defaults,
};
pub use policy::HostPolicy;
pub use preview::ConnectPreview;
pub use remembered::{MAX_REMEMBERED, Remembered, RememberedApprovals};
pub use secrets::{connection_secrets, uri_secrets};
