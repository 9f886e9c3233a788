//! Where a core's files come from: a directory on disk, or a commit of its repository.
//!
//! The loader reads a checkout through [`FsTree`]; the evolution review reads a commit
//! through its git tree. Both answer the same three questions through [`CoreTree`], and
//! one function, [`super::read_revision`], turns the answers into the declarations of
//! the revision, so what a review shows and what the runtime loads cannot differ.
//!
//! Nothing here follows a symlink: an entry is what it is at its own path. A file is
//! read only when it is a regular file, no larger than the cap, opened without
//! following links and without blocking (a FIFO named `agent.yaml` cannot hang a load).

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::Stamp;

/// What an entry of a core is, seen without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing at that path.
    Missing,
    /// A regular file of this many bytes; `stamp` identifies its content on disk (none in
    /// a commit, where nothing is cached).
    File {
        /// Size in bytes.
        len: u64,
        /// Metadata that changes whenever the content may have (on disk only).
        stamp: Option<Stamp>,
    },
    /// A directory.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else: a FIFO, socket, device, or a git submodule.
    Other(&'static str),
}

impl EntryKind {
    /// How an error message names this kind of entry.
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::Missing => "missing",
            EntryKind::File { .. } => "a regular file",
            EntryKind::Dir => "a directory",
            EntryKind::Symlink => "a symlink",
            EntryKind::Other(what) => what,
        }
    }
}

/// Why a file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadRefusal {
    /// Not a regular file (checked again on the open file, so a swap is caught).
    NotAFile(EntryKind),
    /// Larger than the cap.
    TooLarge {
        /// The cap, in bytes.
        max: u64,
    },
    /// The read failed.
    Io(String),
}

/// One entry of a directory: its name (lossily decoded in `Err` when it is not UTF-8)
/// and its kind.
pub type DirEntry = (Result<String, String>, EntryKind);

/// The files of one revision of a core, addressed by `/`-separated paths relative to
/// the core root.
pub trait CoreTree {
    /// The entry at `rel`, without following a symlink at `rel` itself. Callers check
    /// every directory on the way down, so no symlink above `rel` is ever followed.
    fn kind(&self, rel: &str) -> EntryKind;

    /// The entries of the directory `rel`, in any order. `Err` when it cannot be
    /// listed; a name that is not UTF-8 comes back lossily decoded in `Err` of its own.
    fn list(&self, rel: &str) -> Result<Vec<DirEntry>, String>;

    /// The bytes of the regular file `rel`, refusing anything else or more than `max`.
    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, ReadRefusal>;

    /// The path error messages name for `rel` (absolute on disk, relative in a commit).
    fn display(&self, rel: &str) -> PathBuf;
}

/// A core directory on disk.
#[derive(Debug, Clone)]
pub struct FsTree {
    root: PathBuf,
}

impl FsTree {
    /// The tree under `root` (already canonical: the root itself may be reached through
    /// a symlink of the host's choosing, nothing below it).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsTree { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        if rel.is_empty() || rel == "." {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }
}

fn kind_of(meta: &std::fs::Metadata) -> EntryKind {
    let t = meta.file_type();
    if t.is_symlink() {
        EntryKind::Symlink
    } else if t.is_dir() {
        EntryKind::Dir
    } else if t.is_file() {
        EntryKind::File {
            len: meta.len(),
            stamp: Some(Stamp::from_metadata(meta)),
        }
    } else if t.is_fifo() {
        EntryKind::Other("a FIFO")
    } else if t.is_socket() {
        EntryKind::Other("a socket")
    } else {
        EntryKind::Other("a device")
    }
}

impl CoreTree for FsTree {
    fn kind(&self, rel: &str) -> EntryKind {
        match std::fs::symlink_metadata(self.path(rel)) {
            Ok(meta) => kind_of(&meta),
            Err(_) => EntryKind::Missing,
        }
    }

    fn list(&self, rel: &str) -> Result<Vec<DirEntry>, String> {
        let entries = std::fs::read_dir(self.path(rel)).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            // Only what could be a declaration is statted; the rest needs no syscall.
            let looks_declared = name
                .to_str()
                .is_some_and(|n| super::declaration_extension(n).is_some());
            let kind = match entry.file_type() {
                // `metadata` of a directory entry does not follow a symlink.
                Ok(t) if looks_declared && t.is_file() => match entry.metadata() {
                    Ok(meta) => kind_of(&meta),
                    Err(_) => EntryKind::Missing,
                },
                Ok(t) if t.is_symlink() => EntryKind::Symlink,
                Ok(t) if t.is_dir() => EntryKind::Dir,
                Ok(t) if t.is_file() => EntryKind::File {
                    len: 0,
                    stamp: None,
                },
                Ok(t) if t.is_fifo() => EntryKind::Other("a FIFO"),
                Ok(t) if t.is_socket() => EntryKind::Other("a socket"),
                Ok(_) => EntryKind::Other("a device"),
                Err(_) => EntryKind::Missing,
            };
            let name = name
                .into_string()
                .map_err(|raw| raw.to_string_lossy().into_owned());
            out.push((name, kind));
        }
        Ok(out)
    }

    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, ReadRefusal> {
        let path = self.path(rel);
        // Never follow a link, never block on a FIFO, never leak the descriptor.
        let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits())
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                    ReadRefusal::NotAFile(EntryKind::Symlink)
                }
                _ => ReadRefusal::Io(e.to_string()),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| ReadRefusal::Io(e.to_string()))?;
        if !meta.file_type().is_file() {
            return Err(ReadRefusal::NotAFile(kind_of(&meta)));
        }
        if meta.size() > max {
            return Err(ReadRefusal::TooLarge { max });
        }
        let mut bytes = Vec::with_capacity(meta.size() as usize);
        // One byte more than the cap tells a file that grew since the check.
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ReadRefusal::Io(e.to_string()))?;
        if bytes.len() as u64 > max {
            return Err(ReadRefusal::TooLarge { max });
        }
        Ok(bytes)
    }

    fn display(&self, rel: &str) -> PathBuf {
        self.path(rel)
    }
}

/// `rel` joined below `dir` (`dir` may be empty for the root).
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir == "." {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}
