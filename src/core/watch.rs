//! Knowing that a core did not change without looking at its files.
//!
//! A warm turn used to stat `agent.yaml` and every declaration (17 system calls for 16
//! servers, about 40 µs on the development machine, the largest part of a warm turn).
//! A [`CoreWatch`] is an inotify instance watching every directory from the core root
//! down to its MCP root, set up before the load it vouches for: when one non-blocking
//! read finds no event, nothing in those directories was created, written, renamed,
//! removed or changed in mode since, and that load is reused as it is.
//!
//! Whatever inotify cannot vouch for goes back to the stat path of the loader: any
//! event at all (the watch is then spent), an overflowed queue, a watch that could not
//! be set up, and, to bound what a filesystem without local notifications (NFS, FUSE)
//! could hide, any watch older than [`REVALIDATE`]. Symlinks need no special case: the
//! loader never follows one (a symlinked file is a broken declaration whatever it points
//! to), so every byte a load depends on lives in a watched directory.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::AgentCore;

/// The longest a watch vouches for a core before the files are checked again.
pub const REVALIDATE: Duration = Duration::from_secs(2);

/// A watch over the directories of one core (see the module documentation).
#[derive(Debug)]
pub(super) struct CoreWatch {
    inotify: Inotify,
    /// The MCP root the watched directories lead to.
    mcp_root: String,
    /// The load made after the watch was set up; `None` until then.
    core: Option<Arc<AgentCore>>,
    since: Instant,
}

impl CoreWatch {
    /// Watches `root` and every directory on the way to `root/mcp_root` that exists.
    /// `None` when inotify is unavailable or out of watches.
    pub(super) fn start(root: &Path, mcp_root: &str) -> Option<CoreWatch> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let flags = AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF;
        let mut dir = root.to_path_buf();
        inotify.add_watch(&dir, flags).ok()?;
        for part in Path::new(mcp_root).components() {
            dir.push(part);
            if !dir.is_dir() {
                // Its creation is an event in the directory above, which is watched.
                break;
            }
            inotify.add_watch(&dir, flags).ok()?;
        }
        Some(CoreWatch {
            inotify,
            mcp_root: mcp_root.to_string(),
            core: None,
            since: Instant::now(),
        })
    }

    /// Keeps `core` as the load this watch vouches for, unless it was loaded for another
    /// MCP root (`slots.mcp` changed: the next watch then leads to the new one).
    pub(super) fn vouch(&mut self, core: &Arc<AgentCore>) {
        if core.mcp_root == self.mcp_root {
            self.core = Some(Arc::clone(core));
        }
        self.mcp_root.clone_from(&core.mcp_root);
    }

    /// When the watch was set up.
    pub(super) fn since(&self) -> Instant {
        self.since
    }

    /// The vouched-for core when nothing happened since the watch was set up.
    pub(super) fn unchanged(&self) -> Option<Arc<AgentCore>> {
        let core = self.core.as_ref()?;
        if self.since.elapsed() >= REVALIDATE {
            return None;
        }
        match self.inotify.read_events() {
            Err(nix::errno::Errno::EAGAIN) => Some(Arc::clone(core)),
            // Any event, an overflow, or an error: look at the files.
            _ => None,
        }
    }

    /// The MCP root the next watch should lead to.
    pub(super) fn mcp_root(&self) -> &str {
        &self.mcp_root
    }
}
