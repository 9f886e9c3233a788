//! The live revision of a core's repository, and the cores as committed there: cached
//! while what git reads the live ref from is unchanged, and by commit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gix::ObjectId;

use super::{CoreRepo, LIVE_REF};
use crate::core;

/// The current live revision of the repository holding `core`, if any (for catalog
/// identity: a promotion changes it, which reauthorizes catalogs).
pub fn live_revision(core: &Path) -> Option<String> {
    let repo = CoreRepo::open(core).ok()?;
    repo.read_ref(LIVE_REF)
        .ok()
        .flatten()
        .map(|id| id.to_string())
}

/// Live revisions by core, each kept while the two files git reads the live ref from
/// (its loose file and `packed-refs`, in the common git directory) keep their metadata:
/// a warm turn of a core that follows its live ref stats two files instead of opening
/// the repository (about a millisecond). A promotion writes the loose ref through a
/// lock file and a rename, `git pack-refs` removes it and rewrites `packed-refs`: both
/// change a stamp. Refs written within the last second are not cached (see
/// `Stamp::settled`).
#[derive(Debug, Default)]
pub struct LiveRevisions {
    known: std::sync::Mutex<std::collections::HashMap<PathBuf, KnownLive>>,
}

#[derive(Debug)]
struct KnownLive {
    files: [PathBuf; 2],
    stamps: [Option<core::Stamp>; 2],
    revision: Option<String>,
}

impl LiveRevisions {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a revision of `core` is held (it is read from git otherwise).
    pub fn holds(&self, core: &Path) -> bool {
        self.known.lock().is_ok_and(|k| k.contains_key(core))
    }

    /// [`live_revision`] of `core`, from the cache while its ref files are unchanged.
    /// A directory that is not in a repository is not cached (it may become one).
    pub fn get(&self, core: &Path) -> Option<String> {
        if let Ok(known) = self.known.lock()
            && let Some(k) = known.get(core)
            && k.files
                .iter()
                .map(|f| core::Stamp::of(f))
                .eq(k.stamps.iter().cloned())
        {
            return k.revision.clone();
        }
        let repo = CoreRepo::open(core).ok()?;
        let common = repo.repo.common_dir();
        let files = [common.join(LIVE_REF), common.join("packed-refs")];
        // Stamped before reading: a write in between shows as a change next time.
        let stamps = [core::Stamp::of(&files[0]), core::Stamp::of(&files[1])];
        let (revision, direct) = match repo.repo.try_find_reference(LIVE_REF) {
            Ok(Some(mut r)) => {
                let direct = matches!(r.target(), gix::refs::TargetRef::Object(_));
                (r.peel_to_id().ok().map(|id| id.to_string()), direct)
            }
            Ok(None) => (None, true),
            Err(_) => return None,
        };
        // A symbolic live ref depends on another ref's file, and a file changed within
        // the last second may change again without a new stamp: read those every time.
        let settled = stamps.iter().flatten().all(core::Stamp::settled);
        if let Ok(mut known) = self.known.lock() {
            if direct && settled {
                let revision = revision.clone();
                let entry = KnownLive {
                    files,
                    stamps,
                    revision,
                };
                known.insert(core.to_path_buf(), entry);
            } else {
                known.remove(core);
            }
        }
        revision
    }
}

/// Cores as loaded from a commit, by core root and commit id: a commit never changes,
/// so a turn of a session that follows its live revision reads no object twice.
#[derive(Debug, Default)]
pub struct LiveCores {
    cores: std::sync::Mutex<std::collections::HashMap<(PathBuf, String), Arc<core::AgentCore>>>,
}

/// Most (core, commit) pairs kept; a long-lived host that sees many promotions starts
/// over instead of growing.
const MAX_LIVE_CORES: usize = 64;

impl LiveCores {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The core at `root` as committed in `commit` (see [`CoreRepo::load_commit`]).
    ///
    /// # Errors
    /// [`core::CoreErrors`]: the commit's `agent.yaml` does not load, or git failed.
    pub fn load(
        &self,
        root: &Path,
        commit: &str,
    ) -> Result<Arc<core::AgentCore>, core::CoreErrors> {
        let key = (root.to_path_buf(), commit.to_string());
        if let Some(known) = self.cores.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(known);
        }
        let failed = |message: String| {
            core::CoreErrors(vec![core::LoadError::new(
                &root.join("agent.yaml"),
                None,
                None,
                message,
            )])
        };
        let id = ObjectId::from_hex(commit.as_bytes())
            .map_err(|_| failed("the live revision is not a commit id".into()))?;
        let loaded = CoreRepo::open(root)
            .and_then(|repo| repo.load_commit(id, root))
            .map_err(|e| failed(format!("cannot read the live revision ({e})")))??;
        let loaded = Arc::new(loaded);
        if let Ok(mut cores) = self.cores.lock() {
            if cores.len() >= MAX_LIVE_CORES {
                cores.clear();
            }
            cores.insert(key, Arc::clone(&loaded));
        }
        Ok(loaded)
    }
}
