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
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::Mode;

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

/// A core directory on disk, read through directory descriptors: every component
/// below the root is opened with `O_NOFOLLOW | O_DIRECTORY` from the one above, so a
/// directory swapped for a symlink between a check and a read is refused, never
/// followed.
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

    /// The directory `rel`, opened component by component without following links.
    fn open_dir(&self, rel: &str) -> nix::Result<OwnedFd> {
        let dir = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut fd = nix::fcntl::open(&self.root, dir, Mode::empty())?;
        for part in rel.split('/').filter(|p| !p.is_empty() && *p != ".") {
            fd = nix::fcntl::openat(&fd, part, dir | OFlag::O_NOFOLLOW, Mode::empty())?;
        }
        Ok(fd)
    }
}

/// `rel` split into its directory and its last component.
fn split(rel: &str) -> (&str, &str) {
    match rel.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", rel),
    }
}

fn kind_of_stat(st: &nix::sys::stat::FileStat) -> EntryKind {
    use nix::sys::stat::SFlag;
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFLNK => EntryKind::Symlink,
        SFlag::S_IFDIR => EntryKind::Dir,
        SFlag::S_IFREG => EntryKind::File {
            len: st.st_size.max(0) as u64,
            stamp: Some(Stamp::from_stat(st)),
        },
        SFlag::S_IFIFO => EntryKind::Other("a FIFO"),
        SFlag::S_IFSOCK => EntryKind::Other("a socket"),
        _ => EntryKind::Other("a device"),
    }
}

fn stat_at(dir: &OwnedFd, name: &str) -> EntryKind {
    match nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => kind_of_stat(&st),
        Err(_) => EntryKind::Missing,
    }
}

impl CoreTree for FsTree {
    fn kind(&self, rel: &str) -> EntryKind {
        let (dir, name) = split(rel);
        match self.open_dir(dir) {
            Ok(fd) => stat_at(&fd, name),
            Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) if !dir.is_empty() => {
                // A component above is not a directory (or a symlink): nothing below it.
                EntryKind::Missing
            }
            Err(_) => EntryKind::Missing,
        }
    }

    fn list(&self, rel: &str) -> Result<Vec<DirEntry>, String> {
        use nix::dir::{Dir, Type};
        let fd = self.open_dir(rel).map_err(|e| e.to_string())?;
        let probe = fd.try_clone().map_err(|e| e.to_string())?;
        let mut dir = Dir::from_fd(fd).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for entry in dir.iter().flatten() {
            let raw = entry.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            let name = std::str::from_utf8(raw)
                .map(str::to_string)
                .map_err(|_| String::from_utf8_lossy(raw).into_owned());
            // Only what could be a declaration is statted; the rest needs no syscall.
            let looks_declared = name
                .as_ref()
                .is_ok_and(|n| super::declaration_extension(n).is_some());
            let kind = match entry.file_type() {
                Some(Type::File) if looks_declared => {
                    stat_at(&probe, name.as_deref().unwrap_or_default())
                }
                Some(Type::File) => EntryKind::File {
                    len: 0,
                    stamp: None,
                },
                Some(Type::Symlink) => EntryKind::Symlink,
                Some(Type::Directory) => EntryKind::Dir,
                Some(Type::Fifo) => EntryKind::Other("a FIFO"),
                Some(Type::Socket) => EntryKind::Other("a socket"),
                Some(_) => EntryKind::Other("a device"),
                // Filesystems that do not report the type: ask.
                None => match &name {
                    Ok(n) => stat_at(&probe, n),
                    Err(_) => EntryKind::Missing,
                },
            };
            out.push((name, kind));
        }
        Ok(out)
    }

    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, ReadRefusal> {
        let (dir, name) = split(rel);
        let parent = self
            .open_dir(dir)
            .map_err(|e| ReadRefusal::Io(e.to_string()))?;
        // Never follow a link, never block on a FIFO, never leak the descriptor.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::openat(&parent, name, flags, Mode::empty()).map_err(|e| match e {
            nix::errno::Errno::ELOOP => ReadRefusal::NotAFile(EntryKind::Symlink),
            other => ReadRefusal::Io(other.to_string()),
        })?;
        let file = std::fs::File::from(fd);
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

/// `rel` joined below `dir` (`dir` may be empty for the root).
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() || dir == "." {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// A core held in memory (a host's servers as values): files by `/`-separated path,
/// read through the same [`read_revision`](super::read_revision) as a checkout, so
/// they are validated exactly as files are. Errors name `provenance:path`.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    files: std::collections::BTreeMap<String, Vec<u8>>,
    provenance: String,
}

impl MemoryTree {
    /// An empty tree whose paths are shown as `provenance:path`.
    pub fn new(provenance: impl Into<String>) -> Self {
        MemoryTree {
            files: std::collections::BTreeMap::new(),
            provenance: provenance.into(),
        }
    }

    /// Adds (or replaces) the file at `path`.
    pub fn with_file(mut self, path: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.into(), bytes.into());
        self
    }
}

impl CoreTree for MemoryTree {
    fn kind(&self, rel: &str) -> EntryKind {
        if let Some(bytes) = self.files.get(rel) {
            return EntryKind::File {
                len: bytes.len() as u64,
                stamp: None,
            };
        }
        let dir = format!("{}/", rel.trim_end_matches('/'));
        if rel.is_empty() || self.files.keys().any(|k| k.starts_with(&dir)) {
            EntryKind::Dir
        } else {
            EntryKind::Missing
        }
    }

    fn list(&self, rel: &str) -> Result<Vec<DirEntry>, String> {
        let prefix = if rel.is_empty() {
            String::new()
        } else {
            format!("{}/", rel.trim_end_matches('/'))
        };
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix))
            .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
            .collect();
        names.dedup();
        Ok(names
            .into_iter()
            .map(|name| {
                let kind = self.kind(&format!("{prefix}{name}"));
                (Ok(name), kind)
            })
            .collect())
    }

    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, ReadRefusal> {
        match self.files.get(rel) {
            Some(bytes) if bytes.len() as u64 > max => Err(ReadRefusal::TooLarge { max }),
            Some(bytes) => Ok(bytes.clone()),
            None => Err(ReadRefusal::NotAFile(self.kind(rel))),
        }
    }

    fn display(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("{}:{rel}", self.provenance))
    }
}
