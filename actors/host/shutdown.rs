//! A runtime's shutdown: its bound, and what is left to do once every eviction is scheduled
//! (from the root, or from a handle when the root is gone).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;

use crate::actors::host::{Eviction, RuntimeMsg};
use crate::actors::session::EvictionReport;
use crate::actors::shared::Shared;

/// How long a shutdown waits for the evictions, and then for the sessions it stops.
pub(super) fn shutdown_bound(shared: &Shared) -> Duration {
    shared.config.close_grace * 10 + Duration::from_secs(10)
}

/// What [`RuntimeMsg::Shutdown`] does once every session's eviction is scheduled (and
/// what a handle does itself when the root is gone): waits for them (bounded), stops
/// whatever session is still there, flushes the event log, stops the helpers and ends
/// every server process left.
pub(super) async fn finish_shutdown(
    shared: &Shared,
    root: &ActorRef<RuntimeMsg>,
    evictions: Vec<Eviction>,
) -> Vec<EvictionReport> {
    let bound = shutdown_bound(shared);
    let waited = tokio::time::timeout(
        bound,
        futures::future::join_all(evictions.into_iter().map(Eviction::wait)),
    )
    .await;
    let reports = waited
        .map(|all| all.into_iter().filter_map(Result::ok).collect())
        .unwrap_or_default();
    // A session whose eviction overran is stopped now, before the last flush and the
    // last sweep, so that what it closes is logged and nothing it left escapes. (The
    // helpers stop too; a closing root does not restart them.)
    root.stop_children_and_wait(Some("shutdown".into()), Some(bound))
        .await;
    let hub = Arc::clone(&shared.hub);
    let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
    shared.limiter.stop();
    shared.broker.stop();
    // Launchers made ahead for starts that will not come; whatever a server left behind
    // (orphans, a tree a stopped session did not end) ends here; then the reaper goes.
    if let Some(launchers) = &shared.launchers {
        launchers.close().await;
    }
    let processes = Arc::clone(&shared.processes);
    let _ = tokio::task::spawn_blocking(move || processes.shutdown()).await;
    reports
}
