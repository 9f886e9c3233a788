//! Where there is no inotify (every Unix but Linux), no core is watched: every warm
//! load takes the loader's stat path, which is what a watch falls back to anyway.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use super::AgentCore;

/// A watch that is never set up.
#[derive(Debug)]
pub(super) struct CoreWatch {
    never: std::convert::Infallible,
}

impl CoreWatch {
    /// Always `None`: nothing to watch with.
    pub(super) fn start(_root: &Path, _mcp_root: &str) -> Option<CoreWatch> {
        None
    }

    pub(super) fn vouch(&mut self, _core: &Arc<AgentCore>) {
        match self.never {}
    }

    pub(super) fn since(&self) -> Instant {
        match self.never {}
    }

    pub(super) fn unchanged(&self) -> Option<Arc<AgentCore>> {
        match self.never {}
    }

    pub(super) fn mcp_root(&self) -> &str {
        match self.never {}
    }
}
