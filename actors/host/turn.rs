//! Preparing a turn off the root: the session's spec read once, its core loaded (the live
//! revision when it follows one), then the session asked for its catalog.

use std::sync::Arc;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use crate::actors::host::{RuntimeError, SharedSpec};
use crate::actors::session::{InlineServers, LIVE_REVISION, SessionMsg, SessionSpec};
use crate::actors::shared::Shared;
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::core::AgentCore;

/// A turn of the session `actor` whose spec is `spec` (read once here, and sent with
/// the message): the core loaded for it (inline, not on a blocking thread: a warm load
/// reads one inotify descriptor, or at worst lists one directory and stats its files,
/// less than a hop), then the session's catalog of it. Dropping the future cancels the
/// turn: the catalog ends its connects at once (processes killed, permits returned,
/// approvals withdrawn).
pub(super) async fn prepare_turn(
    shared: &Shared,
    actor: &ActorRef<SessionMsg>,
    spec: &SharedSpec,
    scope: Option<Arc<Vec<String>>>,
) -> Result<TurnCatalog, PrepareError> {
    let span = shared.config.telemetry.trace().span("mcp.turn");
    let spec = spec.read().map_err(|_| PrepareError::Evicted)?.clone();
    let (core, revision) = load_turn_core(shared, &spec.0).inspect_err(|_| span.fail("core"))?;
    let cancel = CancellationToken::new();
    let _dropped = cancel.clone().drop_guard();
    let asked = actor
        .call(
            |reply| SessionMsg::PrepareTurn {
                spec: Box::new(spec),
                core,
                revision,
                reply,
                cancel,
                scope,
                trace: span.trace(),
            },
            None,
        )
        .await;
    let prepared = match asked {
        Ok(ractor::rpc::CallResult::Success(result)) => result,
        _ => Err(PrepareError::Evicted),
    };
    match &prepared {
        Ok(turn) => {
            span.set_u64("mcp.turn.number", turn.turn());
            span.set_u64("mcp.tools", turn.tools().len() as u64);
            span.set_u64("mcp.diagnostics", turn.diagnostics().len() as u64);
        }
        Err(_) => span.fail("unprepared"),
    }
    prepared
}

/// The core a turn of `spec` runs, and the revision it read. A core that follows its
/// live revision runs exactly that commit, read as the review read it: nothing in the
/// working tree (untracked, ignored or edited files) runs without a review. Without a
/// live revision yet, the working tree.
pub(super) fn load_turn_core(
    shared: &Shared,
    spec: &SessionSpec,
) -> Result<(Arc<AgentCore>, Option<String>), PrepareError> {
    let root = &spec.core_root;
    let cache = &shared.load_cache;
    let live = (spec.core_revision == LIVE_REVISION).then(|| shared.live_revisions.get(root));
    let inline = spec.inline.as_deref();
    let core = match (inline, &live) {
        (Some(inline), _) if inline.only => Arc::new(inline.merged(None, root)),
        (inline, Some(Some(commit))) => {
            let root = cache.canonical(root);
            let core = shared.live_cores.load(&root, commit)?;
            with_inline(core, inline, &root)
        }
        (inline, _) => with_inline(crate::core::load_cached(root, cache)?, inline, root),
    };
    let revision = live.map(|live| format!("live:{}", live.as_deref().unwrap_or("none")));
    Ok((core, revision))
}

/// `core` with the host's in-memory servers added, when the spec has any.
pub(super) fn with_inline(
    core: Arc<AgentCore>,
    inline: Option<&InlineServers>,
    root: &std::path::Path,
) -> Arc<AgentCore> {
    match inline {
        Some(inline) => Arc::new(inline.merged(Some(&core), root)),
        None => core,
    }
}

/// The real path of `spec`'s workspace (its core when it names none), refused when the
/// runtime home is inside it or inside the core: the servers' HOME lives under the
/// home, and a core author must not be able to plant its dotfiles (`.npmrc`,
/// `.gitconfig`).
pub(super) fn real_workspace(
    shared: &Shared,
    spec: &SessionSpec,
) -> Result<std::path::PathBuf, RuntimeError> {
    let dir = spec.workspace.as_ref().unwrap_or(&spec.core_root);
    let workspace = dir
        .canonicalize()
        .map_err(|_| RuntimeError::Workspace(dir.display().to_string()))?;
    let home = &shared.real_home;
    // The core is the workspace unless the spec names one: resolved once then.
    let core = match &spec.workspace {
        None => workspace.clone(),
        Some(_) => spec
            .core_root
            .canonicalize()
            .unwrap_or_else(|_| spec.core_root.clone()),
    };
    if home.starts_with(&workspace) || home.starts_with(&core) {
        return Err(RuntimeError::HomeInsideWorkspace(
            home.display().to_string(),
        ));
    }
    Ok(workspace)
}
