//! Lanes beyond this process: what the root asks of whoever claims a lane for it
//! across nodes (the `cluster` feature's lane directory implements [`LaneClaims`]).
//! Without one, a lane is this runtime's alone, and the root claims nothing.

use std::time::Duration;

use super::{Eviction, RuntimeError};

/// A claim that took: the eviction it caused elsewhere (already done), and its
/// `(epoch, node)`, which a later claim of the lane exceeds.
#[derive(Debug)]
pub(crate) struct Claimed {
    /// The eviction of the lane's session on another node, when there was one.
    pub eviction: Option<Eviction>,
    /// The claim's epoch and node.
    pub stamp: (u64, String),
}

/// Claims of lanes across the nodes of a cluster, as the root makes them.
#[async_trait::async_trait]
pub(crate) trait LaneClaims: Send + Sync + 'static {
    /// Claims `lane` for a session of this node (`proceed`: even when the lane's last
    /// owner cannot be reached), within `bound`.
    ///
    /// # Errors
    /// [`RuntimeError::LaneUnreachable`], [`RuntimeError::LaneContended`], or
    /// [`RuntimeError::Unavailable`] when the claim could not be made.
    async fn claim(
        &self,
        lane: &str,
        proceed: bool,
        bound: Duration,
    ) -> Result<Claimed, RuntimeError>;

    /// The actor that makes the claims, linked under the root: when it ends, this
    /// node's lane sessions are evicted (its peers release its lanes).
    fn actor(&self) -> ractor::ActorId;
}
