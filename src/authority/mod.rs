//! Authority: capability grants, approval policy and the connect preview.
//!
//! Pure and synchronous; the approval broker actor and the catalog actor call into it.

mod capability;
mod policy;
pub mod preview;

pub use capability::CapabilitySet;
pub use policy::HostPolicy;
pub use preview::ConnectPreview;
