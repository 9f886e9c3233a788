//! What a load keeps between reads of a core: each file's stamp (device, inode, size,
//! times) and what it parsed to, bounded in files and cores watched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Broken, Declaration, LoadError, Manifest, watch};

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The metadata of `path` (symlinks followed); `None` when it does not exist.
    pub(crate) fn of(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path)
            .ok()
            .map(|m| Stamp::from_metadata(&m))
    }

    /// The stamp of metadata already read.
    pub(crate) fn from_metadata(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The stamp of a `stat` result.
    pub(crate) fn from_stat(st: &nix::sys::stat::FileStat) -> Stamp {
        Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            len: st.st_size.max(0) as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// Whether the file last changed at least a full second before now. Filesystem
    /// clocks tick coarsely (a few milliseconds), so a file rewritten within one tick to
    /// the same length, possibly in the same inode, can keep its stamp; a change made
    /// after a settled stamp was taken always gets a later time. Only a settled stamp
    /// may vouch for content read with it (git calls the other case "racily clean").
    pub(crate) fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.ctime.0.saturating_add(2) <= now
    }
}

/// What reading one declaration file gave: a declaration or why there is none.
pub(super) type Parsed = Result<Arc<Declaration>, Arc<Broken>>;

/// What reading `agent.yaml` gave.
pub(super) type ManifestRead = Result<Manifest, Vec<LoadError>>;

/// Parsed files reused while their metadata is unchanged. Failures are kept as well as
/// successes: a hostile file costs its parse once, not once per turn.
#[derive(Debug, Default)]
pub struct LoadCache {
    declarations: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, Parsed)>>,
    manifests: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, ManifestRead)>>,
    /// Canonical core roots, resolved once per root.
    roots: std::sync::Mutex<BTreeMap<PathBuf, PathBuf>>,
    /// Watches by canonical core root, at most [`MAX_WATCHED_CORES`].
    pub(super) watches: std::sync::Mutex<HashMap<PathBuf, watch::CoreWatch>>,
}

/// Most cores whose directories are watched at once, one inotify instance each (Linux
/// allows 128 per user by default, shared with every other program); a core beyond them
/// is watched in place of the one watched longest. Without an instance a core is
/// simply statted on every turn.
pub const MAX_WATCHED_CORES: usize = 16;

/// Most files a cache keeps per kind; a core that keeps renaming files cannot grow it.
pub(super) const MAX_CACHED_FILES: usize = 4096;

impl LoadCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn canonical(&self, root: &Path) -> PathBuf {
        if let Some(known) = self.roots.lock().ok().and_then(|m| m.get(root).cloned()) {
            return known;
        }
        let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        if let Ok(mut m) = self.roots.lock() {
            if m.len() >= MAX_CACHED_FILES {
                m.clear();
            }
            m.insert(root.to_path_buf(), real.clone());
        }
        real
    }

    pub(super) fn get(&self, file: &Path, stamp: Stamp) -> Option<Parsed> {
        let map = self.declarations.lock().ok()?;
        let (cached, parsed) = map.get(file)?;
        (*cached == stamp).then(|| parsed.clone())
    }

    pub(super) fn put(&self, file: &Path, stamp: Stamp, parsed: Parsed) {
        if !stamp.settled() {
            return;
        }
        if let Ok(mut map) = self.declarations.lock() {
            if map.len() >= MAX_CACHED_FILES {
                map.clear();
            }
            map.insert(file.to_path_buf(), (stamp, parsed));
        }
    }

    pub(super) fn manifest(&self, file: &Path, stamp: Stamp) -> Option<ManifestRead> {
        let map = self.manifests.lock().ok()?;
        map.get(file)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, m)| m.clone())
    }

    pub(super) fn put_manifest(&self, file: &Path, stamp: Stamp, m: ManifestRead) {
        if !stamp.settled() {
            return;
        }
        if let Ok(mut map) = self.manifests.lock() {
            if map.len() >= MAX_CACHED_FILES {
                map.clear();
            }
            map.insert(file.to_path_buf(), (stamp, m));
        }
    }
}
