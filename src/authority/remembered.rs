//! Approvals a person answered "always": kept in the runtime home
//! (`<home>/approvals.json`, 0600, written through a temporary file), each bound to the
//! server's full declaration fingerprint, so any change of the declaration asks again.
//! Only a person's answer is remembered: a declaration's `auto` never skips the connect
//! prompt. Listed and revoked with `demiurge approvals list|revoke`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::approval::Action;
use crate::core::Fingerprint;

/// Most remembered approvals kept; the oldest go first.
pub const MAX_REMEMBERED: usize = 1_000;

/// One remembered "always".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Remembered {
    /// `connect`, `call`, `read`, `prompt` or `subscribe`.
    pub action: String,
    /// Server id.
    pub server: String,
    /// The tool, resource or prompt, for everything but connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The approval identity (64 hex): the declaration's fingerprint and the file it is
    /// declared in, so neither a changed declaration nor a copy in another core is
    /// covered.
    pub fingerprint: String,
    /// When it was answered (seconds since the epoch).
    pub at: u64,
}

impl Remembered {
    /// A short id for `approvals revoke`: the first 12 hex of a digest of the entry.
    pub fn id(&self) -> String {
        let key = format!(
            "{}\u{0}{}\u{0}{}\u{0}{}",
            self.action,
            self.server,
            self.tool.as_deref().unwrap_or_default(),
            self.fingerprint
        );
        crate::digest::sha256_hex(key.as_bytes())[..12].to_string()
    }

    fn matches(
        &self,
        action: Action,
        server: &str,
        tool: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> bool {
        self.action == action.as_str()
            && self.server == server
            && self.tool.as_deref() == tool
            && self.fingerprint == fingerprint.hex()
    }
}

/// The remembered approvals of one runtime home.
#[derive(Debug, Default)]
pub struct RememberedApprovals {
    path: Option<PathBuf>,
    entries: Vec<Remembered>,
    /// The file's modification time, length and inode when last read: another process
    /// (`approvals revoke`) may change it under a running runtime, and a rename always
    /// brings a new inode.
    seen: Option<(SystemTime, u64, u64)>,
}

impl RememberedApprovals {
    /// The store of `home` (read now; an unreadable or malformed file remembers
    /// nothing, which only means asking again).
    pub fn open(home: &Path) -> Self {
        let mut store = RememberedApprovals {
            path: Some(home.join("approvals.json")),
            ..RememberedApprovals::default()
        };
        store.reload();
        store
    }

    /// A store that remembers in memory only (tests, hosts without a home).
    pub fn in_memory() -> Self {
        RememberedApprovals::default()
    }

    fn reload(&mut self) {
        let Some(path) = &self.path else { return };
        let stamp = stamp_of(path);
        if stamp == self.seen && stamp.is_some() {
            return;
        }
        self.seen = stamp;
        self.entries = stamp
            .filter(|(_, len, _)| *len <= MAX_FILE)
            .and_then(|_| std::fs::read(path).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
    }

    /// Every remembered approval, oldest first.
    pub fn list(&mut self) -> &[Remembered] {
        self.reload();
        &self.entries
    }

    /// Whether a person answered "always" for exactly this.
    pub fn covers(
        &mut self,
        action: Action,
        server: &str,
        tool: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> bool {
        self.reload();
        self.entries
            .iter()
            .any(|e| e.matches(action, server, tool, fingerprint))
    }

    /// Remembers an "always" and writes the file.
    ///
    /// # Errors
    /// IO errors writing the file.
    pub fn remember(
        &mut self,
        action: Action,
        server: &str,
        tool: Option<&str>,
        fingerprint: &Fingerprint,
    ) -> std::io::Result<()> {
        self.reload();
        if self
            .entries
            .iter()
            .any(|e| e.matches(action, server, tool, fingerprint))
        {
            return Ok(());
        }
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        self.entries.push(Remembered {
            action: action.as_str().to_string(),
            server: server.to_string(),
            tool: tool.map(str::to_string),
            fingerprint: fingerprint.hex(),
            at,
        });
        if self.entries.len() > MAX_REMEMBERED {
            let extra = self.entries.len() - MAX_REMEMBERED;
            self.entries.drain(..extra);
        }
        self.save()
    }

    /// Forgets the entries `which` selects; returns how many went.
    ///
    /// # Errors
    /// IO errors writing the file.
    pub fn revoke(&mut self, which: impl Fn(&Remembered) -> bool) -> std::io::Result<usize> {
        self.reload();
        let before = self.entries.len();
        self.entries.retain(|e| !which(e));
        let gone = before - self.entries.len();
        if gone > 0 {
            self.save()?;
        }
        Ok(gone)
    }

    fn save(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let text = serde_json::to_vec_pretty(&self.entries).map_err(std::io::Error::other)?;
        crate::process::write_private(path, &text)?;
        self.seen = stamp_of(path);
        Ok(())
    }
}

/// Most bytes of `approvals.json` read (1,000 entries fit in far less).
const MAX_FILE: u64 = 4 * 1024 * 1024;

use crate::process::file_stamp as stamp_of;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_always_holds_for_its_fingerprint_only_and_survives_a_reopen() {
        let home = tempfile::tempdir().unwrap();
        let (a, b) = (Fingerprint::of(b"one"), Fingerprint::of(b"two"));
        let mut store = RememberedApprovals::open(home.path());
        assert!(!store.covers(Action::Connect, "docs", None, &a));
        store.remember(Action::Connect, "docs", None, &a).unwrap();
        store
            .remember(Action::Call, "docs", Some("docs__search"), &a)
            .unwrap();
        let mut again = RememberedApprovals::open(home.path());
        assert!(again.covers(Action::Connect, "docs", None, &a));
        assert!(!again.covers(Action::Connect, "docs", None, &b));
        assert!(!again.covers(Action::Call, "docs", Some("docs__other"), &a));
        assert!(!again.covers(Action::Connect, "other", None, &a));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(home.path().join("approvals.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Revoked in one handle, gone in the other (it rereads a changed file).
        let id = again.list()[0].id();
        assert_eq!(again.revoke(|e| e.id() == id).unwrap(), 1);
        assert!(!store.covers(Action::Connect, "docs", None, &a));
        assert!(store.covers(Action::Call, "docs", Some("docs__search"), &a));
    }
}
