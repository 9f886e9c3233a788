//! Where pins live: one file (0600, written through a temporary file) per principal,
//! declaration fingerprint and workspace under `<home>/pins/`, holding the approved
//! definitions and the pending ones (served since, not yet approved). Another process
//! (`demiurge pins approve`) may change a file under a running runtime: a connection
//! holding definitions back watches its file's stamp.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{DefinitionKind, MAX_PIN_FILE, MAX_PINS, Pin};
use crate::core::Fingerprint;

/// Most pin files `PinStore::all` reads.
const MAX_FILES: usize = 4_096;

/// The pins of one server for one principal and workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PinFile {
    /// Server id.
    pub server: String,
    /// Its declaration's path in the core.
    pub path: String,
    /// Who the session acted for.
    pub principal: String,
    /// The workspace (canonical).
    pub workspace: String,
    /// The declaration's fingerprint (64 hex).
    pub fingerprint: String,
    /// Definitions a person approved (or the first listing after the connect approval).
    pub approved: Vec<Pin>,
    /// Definitions served since that differ from the approved ones (changed or new),
    /// waiting for a person.
    #[serde(default)]
    pub pending: Vec<Pin>,
    /// When it was last written (seconds since the epoch).
    #[serde(default)]
    pub at: u64,
}

/// What a pin file says of one definition's approval, after `PinFile::approve`.
pub type Approved = Vec<(DefinitionKind, String, String)>;

impl PinFile {
    /// Approves pending definitions: every one, or those `which` names (`NAME`, or
    /// `KIND:NAME` with kind `tool`, `template`, `prompt`; `instructions`), and of
    /// those only the ones whose digest starts with `digest` when given. Returns what
    /// was approved (kind, name, digest).
    ///
    /// # Errors
    /// A bare NAME that several kinds wait under: which kinds, to be named.
    pub fn approve(
        &mut self,
        which: Option<&str>,
        digest: Option<&str>,
    ) -> Result<Approved, String> {
        let wanted = |p: &Pin| {
            let named = match which.map(|w| w.split_once(':')) {
                None => true,
                Some(None) => which == Some(p.name.as_str()),
                Some(Some((kind, name))) => p.kind.word() == kind && p.name == name,
            };
            named && digest.is_none_or(|d| p.digest.starts_with(d))
        };
        let mut kinds: Vec<&str> = self
            .pending
            .iter()
            .filter(|p| wanted(p))
            .map(|p| p.kind.word())
            .collect();
        kinds.dedup();
        if which.is_some_and(|w| !w.contains(':')) && kinds.len() > 1 {
            return Err(format!(
                "several kinds wait under that name ({}); name one as KIND:NAME",
                kinds.join(", ")
            ));
        }
        let (chosen, kept): (Vec<Pin>, Vec<Pin>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| wanted(p));
        self.pending = kept;
        let approved = chosen
            .iter()
            .map(|p| (p.kind, p.name.clone(), p.digest.clone()))
            .collect();
        self.take(chosen);
        Ok(approved)
    }

    /// `pins` become approved, each replacing the approved definition of its kind and
    /// name.
    pub(crate) fn take(&mut self, pins: Vec<Pin>) {
        let names: std::collections::HashSet<(DefinitionKind, String)> =
            pins.iter().map(|p| (p.kind, p.name.clone())).collect();
        self.approved
            .retain(|a| !names.contains(&(a.kind, a.name.clone())));
        self.approved.extend(pins);
        self.approved
            .sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        self.approved.truncate(MAX_PINS);
    }

    /// A digest of what is approved: a file rewritten with the same approvals (another
    /// session recording what waits) is no approval.
    pub fn approved_digest(&self) -> String {
        let parts: Vec<(&DefinitionKind, &str, &str)> = self
            .approved
            .iter()
            .map(|p| (&p.kind, p.name.as_str(), p.digest.as_str()))
            .collect();
        crate::digest::sha256_json_hex(&parts).0
    }
}

/// A pin file as read.
#[derive(Debug)]
pub enum Loaded {
    /// No file: nothing pinned under this key.
    Absent,
    /// The file, shared with the store's memory of it: a connect that only compares
    /// copies nothing; one that changes it takes its own copy then.
    Found(Arc<PinFile>),
    /// A file that cannot be used (unreadable, malformed, too large): nothing it may
    /// have approved is trusted, and nothing is pinned anew over it without a person
    /// (`demiurge pins reset`).
    Unusable,
}

/// What names one pin file: a digest of the server's lineage (principal, server id,
/// declaration path, workspace: what stays when the declaration is edited), then a
/// digest of the lineage and the declaration's fingerprint. Files of one lineage share
/// the first part, so a changed declaration finds its predecessor by name.
pub fn pin_key(
    principal: &str,
    server: &str,
    path: &str,
    fingerprint: &Fingerprint,
    workspace: &Path,
) -> String {
    let lineage = lineage(principal, server, path, workspace);
    let whole = crate::digest::sha256_hex(format!("{lineage}\n{}", fingerprint.hex()).as_bytes());
    format!("{lineage}-{}", &whole[..32])
}

/// The first 16 hex digits of the sha256 of the JSON array `[principal, server, path,
/// workspace]`, written straight into the digest (pin files already kept are named by
/// exactly these bytes).
fn lineage(principal: &str, server: &str, path: &str, workspace: &Path) -> String {
    let key = (principal, server, path, workspace.to_string_lossy());
    let (digest, _) = crate::digest::sha256_json(&key);
    crate::digest::hex(&digest[..8])
}

/// What identifies one version of a file (modification time, length, inode).
type Stamp = (SystemTime, u64, u64);

/// Files parsed before, by key, with the stamp they had: a connect whose pin file did
/// not change since reads no more than its stamp.
type Parsed = Arc<Mutex<HashMap<String, (Stamp, Arc<PinFile>)>>>;

/// Most parsed files kept; past it the memory starts over.
const MAX_PARSED: usize = 1_024;

/// The pin files of one runtime home.
#[derive(Debug, Clone)]
pub struct PinStore {
    dir: PathBuf,
    parsed: Parsed,
}

impl PinStore {
    /// The store of `home` (`<home>/pins/`).
    pub fn open(home: &Path) -> Self {
        PinStore {
            dir: home.join("pins"),
            parsed: Parsed::default(),
        }
    }

    /// Where the file of `key` is.
    pub fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The file of `key`.
    pub fn load(&self, key: &str) -> Loaded {
        let path = self.path(key);
        let stamp = match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Loaded::Absent,
            Err(_) => None,
            Ok(meta) => crate::process::stamp_of(&meta),
        };
        let Some(stamp) = stamp else {
            return Loaded::Unusable;
        };
        if let Ok(parsed) = self.parsed.lock()
            && let Some((seen, file)) = parsed.get(key)
            && *seen == stamp
        {
            return Loaded::Found(Arc::clone(file));
        }
        let Some(file) = read(&path) else {
            return Loaded::Unusable;
        };
        let file = Arc::new(file);
        if let Ok(mut parsed) = self.parsed.lock() {
            if parsed.len() >= MAX_PARSED {
                parsed.clear();
            }
            parsed.insert(key.to_string(), (stamp, Arc::clone(&file)));
        }
        Loaded::Found(file)
    }

    /// Writes the file of `key` (a definition past the file's budget is kept as its
    /// digest only: comparing needs no more, the diff shows less).
    ///
    /// # Errors
    /// IO errors.
    pub fn save(&self, key: &str, file: &mut PinFile) -> std::io::Result<()> {
        let bytes = encode(file)?;
        crate::process::write_private(&self.path(key), &bytes)
    }

    /// Writes the file of `key` unless one exists (two first listings racing: the
    /// first one written is the pin). `false` when one existed.
    ///
    /// # Errors
    /// IO errors other than the file's existence.
    pub fn create(&self, key: &str, file: &mut PinFile) -> std::io::Result<bool> {
        let bytes = encode(file)?;
        let path = self.path(key);
        let dir = path.parent().unwrap_or(Path::new("."));
        crate::process::private_dir(dir)?;
        let mut temp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut temp, &bytes)?;
        match temp.persist_noclobber(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e.error),
        }
    }

    /// The newest file of `key`'s lineage (same principal, server, declaration path and
    /// workspace) under another fingerprint: what a changed declaration's first listing
    /// is compared with. `Unusable` when one of them cannot be read (nothing it may have
    /// approved or held is trusted), `Absent` when there is none.
    pub fn predecessor(&self, key: &str) -> Loaded {
        let Some((lineage, _)) = key.split_once('-') else {
            return Loaded::Absent;
        };
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Loaded::Absent;
        };
        let mut newest: Option<PinFile> = None;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(other) = name.strip_suffix(".json") else {
                continue;
            };
            if other == key || other.split_once('-').map(|(l, _)| l) != Some(lineage) {
                continue;
            }
            match read(&entry.path()) {
                None => return Loaded::Unusable,
                Some(file) if newest.as_ref().is_none_or(|n| file.at >= n.at) => {
                    newest = Some(file);
                }
                Some(_) => {}
            }
        }
        newest.map_or(Loaded::Absent, |file| Loaded::Found(file.into()))
    }

    /// The keys of pin files that cannot be read (`pins list` shows them, `pins reset`
    /// takes them).
    pub fn unreadable(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let key = name.strip_suffix(".json")?.to_string();
                read(&e.path()).is_none().then_some(key)
            })
            .take(MAX_FILES)
            .collect()
    }

    /// Forgets the file of `key`.
    ///
    /// # Errors
    /// IO errors other than its absence.
    pub fn remove(&self, key: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// What identifies the current version of `key`'s file.
    pub fn stamp(&self, key: &str) -> Option<Stamp> {
        crate::process::file_stamp(&self.path(key))
    }

    /// Every readable pin file, by key, sorted by server id.
    pub fn all(&self) -> Vec<(String, PinFile)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut files: Vec<(String, PinFile)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name.strip_suffix(".json")?.to_string(), e.path()))
            })
            .take(MAX_FILES)
            .filter_map(|(key, path)| Some((key, read(&path)?)))
            .collect();
        files.sort_by(|a, b| (&a.1.server, &a.0).cmp(&(&b.1.server, &b.0)));
        files
    }
}

fn read(path: &Path) -> Option<PinFile> {
    let bytes = crate::process::read_regular(path, MAX_PIN_FILE)?;
    serde_json::from_slice(&bytes).ok()
}

/// What a definition past the file's budget is stored as.
pub(super) const NOT_KEPT: &str = "(too large to keep: only its digest is pinned)";

/// Bytes of definitions one file keeps whole; past them, digests only.
const DEFINITION_BUDGET: usize = 8 * 1024 * 1024;

/// `file` as written: stamped now, bounded, compact.
fn encode(file: &mut PinFile) -> std::io::Result<Vec<u8>> {
    file.approved.truncate(MAX_PINS);
    file.pending.truncate(MAX_PINS);
    file.at = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut spent = 0usize;
    // What was approved is what a diff is read against: it is kept first.
    for pin in file.approved.iter_mut().chain(file.pending.iter_mut()) {
        spent += serde_json::to_vec(&pin.definition).map_or(0, |b| b.len());
        if spent > DEFINITION_BUDGET {
            pin.definition = Value::String(NOT_KEPT.into());
        }
    }
    serde_json::to_vec(file).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pins::DefinitionKind;

    /// Pin files already kept are named by the lineage's bytes: the digest of the JSON
    /// array a `serde_json::Value` of the same four strings writes, whatever they hold.
    #[test]
    fn the_lineage_digests_the_same_bytes_as_a_json_value() {
        use std::os::unix::ffi::OsStrExt;
        let texts = [
            "",
            "local",
            "a \"b\" \\ c",
            "tab\t nl\n \u{1} \u{7f}",
            "é \u{2028} 🐍",
        ];
        let workspaces: Vec<PathBuf> = [&b"/w"[..], b"/a \"b\"/\\", b"/\xff/\xc3(", b""]
            .iter()
            .map(|b| PathBuf::from(std::ffi::OsStr::from_bytes(b)))
            .collect();
        let before = |p: &str, s: &str, path: &str, w: &Path| {
            let key = serde_json::json!([p, s, path, w.to_string_lossy()]);
            crate::digest::sha256_hex(key.to_string().as_bytes())[..16].to_string()
        };
        for p in texts {
            for s in texts {
                for w in &workspaces {
                    assert_eq!(
                        lineage(p, s, "agent/mcp/x.yaml", w),
                        before(p, s, "agent/mcp/x.yaml", w)
                    );
                    assert_eq!(lineage(p, "x", s, w), before(p, "x", s, w));
                }
            }
        }
    }

    #[test]
    fn a_pin_file_is_private_survives_a_reopen_and_approves_by_name() {
        let home = tempfile::tempdir().unwrap();
        let store = PinStore::open(home.path());
        let key_of = |principal: &str, decl: &[u8], w: &str| {
            let fingerprint = Fingerprint::of(decl);
            pin_key(
                principal,
                "docs",
                "agent/mcp/docs.yaml",
                &fingerprint,
                Path::new(w),
            )
        };
        let key = key_of("local", b"decl", "/w");
        assert_ne!(key, key_of("other", b"decl", "/w"));
        assert_ne!(key, key_of("local", b"decl", "/v"));
        let next = key_of("local", b"edited", "/w");
        let lineage = |k: &str| k.split_once('-').unwrap().0.to_string();
        assert_eq!(lineage(&key), lineage(&next), "one lineage");
        let pin = |name: &str, d: &str| {
            Pin::of(
                DefinitionKind::Tool,
                name,
                serde_json::json!({"name": name, "description": d}),
            )
        };
        let mut file = PinFile {
            server: "docs".into(),
            approved: vec![pin("a", "one")],
            pending: vec![pin("a", "two"), pin("b", "new")],
            ..PinFile::default()
        };
        store.save(&key, &mut file).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(store.path(&key))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let Loaded::Found(again) = store.load(&key) else {
            panic!("not found")
        };
        let mut again = Arc::unwrap_or_clone(again);
        assert_eq!(again.approve(Some("b"), None).unwrap().len(), 1);
        assert_eq!(again.pending.len(), 1);
        assert!(
            again.approve(None, Some("ffff")).unwrap().is_empty(),
            "another digest"
        );
        assert_eq!(again.approve(None, None).unwrap().len(), 1);
        assert!(
            again
                .approved
                .iter()
                .any(|p| p.is(DefinitionKind::Tool, "a") && p.definition["description"] == "two")
        );
        assert_eq!(store.all().len(), 1);
        assert!(
            !store.create(&key, &mut again.clone()).unwrap(),
            "never over a file"
        );
        assert!(matches!(store.predecessor(&next), Loaded::Found(_)));
        std::fs::write(store.path(&key), b"{not json").unwrap();
        assert!(matches!(store.load(&key), Loaded::Unusable));
        assert!(
            matches!(store.predecessor(&next), Loaded::Unusable),
            "trusts nothing"
        );
        assert_eq!(store.unreadable(), vec![key.clone()]);
        store.remove(&key).unwrap();
        assert!(matches!(store.load(&key), Loaded::Absent));
        assert!(store.create(&key, &mut again).unwrap());
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn a_name_waiting_under_two_kinds_is_approved_only_when_its_kind_is_named() {
        let pin = |kind, name: &str| Pin::of(kind, name, serde_json::json!({ "name": name }));
        let mut file = PinFile {
            pending: vec![
                pin(DefinitionKind::Tool, "search"),
                pin(DefinitionKind::Prompt, "search"),
            ],
            ..PinFile::default()
        };
        assert!(file.approve(Some("search"), None).is_err());
        let approved = file.approve(Some("prompt:search"), None).unwrap();
        assert_eq!(approved.len(), 1);
        assert_eq!(approved[0].0, DefinitionKind::Prompt);
        assert_eq!(file.pending[0].kind, DefinitionKind::Tool);
    }
}
