//! What a session reports about its servers (`/servers`, [`Session::servers`]): one
//! state per server of the current catalog, built from the catalog's own tables.
//!
//! [`Session::servers`]: crate::Session::servers

use std::collections::HashMap;
use std::time::Instant;

use super::plan::Failure;
use crate::authority::DenyReason;

/// The state of one server, for `/servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Connected and listed.
    Connected {
        /// Child pid (stdio).
        pid: Option<u32>,
        /// Tools listed (before filtering).
        tools: usize,
    },
    /// Failed; retried after the cache expires.
    Failed {
        /// Redacted diagnostic.
        message: String,
        /// Milliseconds until the retry.
        retry_in_ms: u64,
    },
    /// Denied at the last turn (asked again next turn).
    Denied {
        /// The reason, in words.
        reason: String,
    },
}

/// One server's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerStatus {
    /// Server id.
    pub server: String,
    /// Connected, failed (and when it is retried), or denied at the last turn.
    pub state: ServerState,
}

/// One status per server: connected ones from `live` (id, pid, tools listed), then
/// cached failures and last turn's denials, sorted by server id.
pub(super) fn collect<'a>(
    live: impl Iterator<Item = (&'a str, Option<u32>, usize)>,
    failures: &HashMap<String, Failure>,
    denied: &HashMap<String, DenyReason>,
    now: Instant,
) -> Vec<ServerStatus> {
    let mut out: Vec<ServerStatus> = live
        .map(|(server, pid, tools)| ServerStatus {
            server: server.to_string(),
            state: ServerState::Connected { pid, tools },
        })
        .collect();
    out.extend(failures.iter().map(|(id, f)| {
        ServerStatus {
            server: id.clone(),
            state: ServerState::Failed {
                message: f.message.clone(),
                retry_in_ms: u64::try_from(f.until.saturating_duration_since(now).as_millis())
                    .unwrap_or(u64::MAX),
            },
        }
    }));
    out.extend(denied.iter().map(|(id, r)| ServerStatus {
        server: id.clone(),
        state: ServerState::Denied {
            reason: r.to_string(),
        },
    }));
    out.sort_by(|a, b| a.server.cmp(&b.server));
    out
}
