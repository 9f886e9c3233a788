//! One commit of the core's repository read as a core tree, like a checkout.

use std::path::{Path, PathBuf};

use gix::ObjectId;

use crate::core::{self};

/// One commit of the core's repository, read like a checkout (see
/// [`core::read_revision`]). Tree entries carry their kind: a symlink is a `120000`
/// entry (never followed), a submodule a commit entry.
pub(super) struct GitTree<'r> {
    pub(super) repo: &'r gix::Repository,
    pub(super) tree: gix::Tree<'r>,
    pub(super) core_rel: &'r Path,
    /// What error messages name paths from (empty in a review: paths stay relative).
    pub(super) shown: PathBuf,
}

impl GitTree<'_> {
    fn kind_of(&self, mode: gix::object::tree::EntryMode, id: ObjectId) -> core::EntryKind {
        if mode.is_blob() {
            let len = self.repo.find_header(id).map_or(u64::MAX, |h| h.size());
            core::EntryKind::File { len, stamp: None }
        } else if mode.is_tree() {
            core::EntryKind::Dir
        } else if mode.is_link() {
            core::EntryKind::Symlink
        } else {
            core::EntryKind::Other("a git submodule")
        }
    }

    fn lookup(&self, rel: &str) -> Option<gix::object::tree::Entry<'_>> {
        self.tree
            .lookup_entry_by_path(self.core_rel.join(rel))
            .ok()
            .flatten()
    }
}

impl core::CoreTree for GitTree<'_> {
    fn kind(&self, rel: &str) -> core::EntryKind {
        match self.lookup(rel) {
            Some(entry) => self.kind_of(entry.mode(), entry.object_id()),
            None => core::EntryKind::Missing,
        }
    }

    fn list(&self, rel: &str) -> Result<Vec<(Result<String, String>, core::EntryKind)>, String> {
        let entry = self.lookup(rel).ok_or("not in this commit")?;
        if !entry.mode().is_tree() {
            return Err("not a directory".into());
        }
        let dir = entry.object().map_err(|e| e.to_string())?.into_tree();
        let mut out = Vec::new();
        for item in dir.iter() {
            let item = item.map_err(|e| e.to_string())?;
            let name = std::str::from_utf8(item.filename())
                .map(str::to_string)
                .map_err(|_| String::from_utf8_lossy(item.filename()).into_owned());
            out.push((name, self.kind_of(item.mode(), item.oid().to_owned())));
        }
        Ok(out)
    }

    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, core::ReadRefusal> {
        let entry = self
            .lookup(rel)
            .ok_or(core::ReadRefusal::NotAFile(core::EntryKind::Missing))?;
        match self.kind_of(entry.mode(), entry.object_id()) {
            core::EntryKind::File { len, .. } if len > max => {
                Err(core::ReadRefusal::TooLarge { max })
            }
            core::EntryKind::File { .. } => entry
                .object()
                .map(|o| o.detach().data)
                .map_err(|e| core::ReadRefusal::Io(e.to_string())),
            other => Err(core::ReadRefusal::NotAFile(other)),
        }
    }

    fn display(&self, rel: &str) -> PathBuf {
        self.shown.join(rel)
    }
}
