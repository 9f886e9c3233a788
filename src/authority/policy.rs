//! Approval policy: what the host applies on top of what a declaration asks for.
//!
//! Pure and synchronous. A manifest can tighten, never loosen: connecting is never
//! weaker than `prompt`, and the host may raise either floor further.

use crate::core::{ApprovalPolicy, Declaration};

/// The host's floors for approvals. The effective policy is the strictest of the floor
/// and the declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostPolicy {
    /// Minimum policy for connecting (never below `prompt`, whatever is set here).
    pub connect_floor: ApprovalPolicy,
    /// Minimum policy for calls (`auto` lets the manifest decide).
    pub call_floor: ApprovalPolicy,
}

impl Default for HostPolicy {
    fn default() -> Self {
        HostPolicy {
            connect_floor: ApprovalPolicy::Prompt,
            call_floor: ApprovalPolicy::Auto,
        }
    }
}

impl HostPolicy {
    /// The policy applied to connecting to `decl`.
    pub fn connect_policy(&self, decl: &Declaration) -> ApprovalPolicy {
        decl.approval_policy
            .max(ApprovalPolicy::Prompt)
            .max(self.connect_floor)
    }

    /// The policy applied to calling a tool of `decl`.
    pub fn call_policy(&self, decl: &Declaration) -> ApprovalPolicy {
        decl.approval_policy.max(self.call_floor)
    }
}
