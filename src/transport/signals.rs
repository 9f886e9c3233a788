//! What a server tells its client outside a request, and where its requests to the
//! client go: list-change flags, the elicitation route, notices, roots, the log level.

// Roots are deprecated by SEP-2577 in 2026-07-28 but still answered there.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use futures::future::BoxFuture;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, ListRootsResult, Root};
use rmcp::{Peer, RoleClient};
use tokio::sync::Notify;

use super::notices::Notices;

/// Where a server's `elicitation/create` requests go (the connect pipeline builds it:
/// the host's elicitor, defaults, validation, events).
pub type ElicitRoute =
    Arc<dyn Fn(ElicitRequestParams) -> BoxFuture<'static, ElicitResult> + Send + Sync>;

/// A server's tool list changed (a bit of [`ServerSignals::take_lists_changed`]).
pub(crate) const TOOLS: u8 = 1;
/// A server's resource list changed.
pub(crate) const RESOURCES: u8 = 2;
/// A server's prompt list changed.
pub(crate) const PROMPTS: u8 = 4;

/// What a server told us outside a request, kept as flags so that no number of
/// notifications can queue anything: a storm of `list_changed` sets one bit and wakes
/// the connection once. Also where the server's requests to the user go, the roots it
/// is shown, and where its log messages and progress go.
#[derive(Default)]
pub struct ServerSignals {
    /// Lists ([`TOOLS`], [`RESOURCES`], [`PROMPTS`]) changed since the last turn read them.
    lists: AtomicU8,
    /// Lists changed since the connection last announced them (events).
    unannounced: AtomicU8,
    /// Woken when a list bit goes from clear to set.
    pub changed: Notify,
    /// Elicitation requests; advertised only when set.
    pub elicit: Option<ElicitRoute>,
    /// Log messages, progress, resource updates.
    pub notices: Arc<Notices>,
    /// What `roots/list` answers: the session's workspace, or the declaration's roots
    /// inside it.
    pub roots: Vec<Root>,
    /// The declared `log_level` of a 2026-07-28 connection, sent in each request's
    /// `_meta` (that era has no `logging/setLevel`).
    pub log_level: std::sync::OnceLock<rmcp::model::LoggingLevel>,
    /// When the connect's stages ran (for its trace).
    pub stages: super::Stages,
}

impl std::fmt::Debug for ServerSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSignals")
            .field("lists", &self.lists)
            .field("elicit", &self.elicit.is_some())
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl ServerSignals {
    /// Signals of a connection whose elicitation requests go to `route`, whose notices
    /// go to `notices`, and which is shown `roots`.
    pub fn new(route: ElicitRoute, notices: Notices, roots: Vec<Root>) -> Self {
        ServerSignals {
            elicit: Some(route),
            notices: Arc::new(notices),
            roots,
            ..ServerSignals::default()
        }
    }

    /// Sets a list's bit; wakes a waiter when it was clear.
    pub fn list_changed(&self, list: u8) {
        self.unannounced.fetch_or(list, Ordering::AcqRel);
        if self.lists.fetch_or(list, Ordering::AcqRel) & list == 0 {
            self.changed.notify_one();
        }
    }

    /// Reads and clears the list bits (at a turn boundary).
    pub fn take_lists_changed(&self) -> u8 {
        self.lists.swap(0, Ordering::AcqRel)
    }

    /// The answer to a server's elicitation: the connection's route's, or declined
    /// when the connection has none (elicitation is then not advertised).
    pub(super) async fn elicited(&self, params: ElicitRequestParams) -> ElicitResult {
        match &self.elicit {
            Some(route) => route(params).await,
            None => ElicitResult::new(ElicitationAction::Decline),
        }
    }

    /// The answer to a server's `roots/list`.
    pub(super) fn roots_listed(&self) -> ListRootsResult {
        ListRootsResult::new(self.roots.clone())
    }

    /// Reads and clears the bits not yet announced in an event.
    pub fn take_unannounced(&self) -> u8 {
        self.unannounced.swap(0, Ordering::AcqRel)
    }
}

/// Whether `peer` speaks the 2026-07-28 era (no `initialize`: requests carry their
/// version, and the server's requests come as `input_required` rounds).
pub(crate) fn speaks_modern(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}
