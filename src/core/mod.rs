//! Agent Cores: `agent.yaml` and the MCP declarations under its MCP root.
//!
//! [`load`] reads a core from disk into an [`AgentCore`]; [`load_report`] keeps going
//! after errors so `demiurge init --check` can list every problem at once. Nothing here
//! starts processes or touches the network.

mod declaration;
mod oauth;
mod tree;
mod validate;
#[cfg(not(target_os = "linux"))]
#[path = "watch_stat.rs"]
mod watch;
#[cfg(target_os = "linux")]
mod watch;
mod yaml;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use crate::process::{UnsupportedReference, check_references};
pub use declaration::{
    ApprovalPolicy, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Declaration, DeclaredUrl,
    Endpoint, Fingerprint, LogLevel, Risk, ToolFilter, TransportKind, fingerprint, is_env_name,
    is_header_name,
};
pub use oauth::{OAuthDeclared, OAuthGrant, SigningAlgorithm, TokenAuthMethod};
pub use tree::{CoreTree, DirEntry, EntryKind, FsTree, MemoryTree, ReadRefusal};
pub use yaml::YamlError;

/// Default MCP root, relative to the core.
pub const DEFAULT_MCP_ROOT: &str = "agent/mcp";

/// One problem in one file. `field` and `message` never repeat a value of the file
/// (only plain key names and the loader's own words); `file` is the core author's file
/// name, escaped when displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file at fault.
    pub file: PathBuf,
    /// The field at fault (dotted path), when known.
    pub field: Option<String>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong and what to do.
    pub message: String,
}

impl LoadError {
    /// An error about `file`; `field` and `message` must hold no value of the file.
    pub fn new(file: &Path, field: Option<&str>, line: Option<usize>, message: String) -> Self {
        LoadError {
            file: file.to_path_buf(),
            field: field.map(str::to_string),
            line,
            message,
        }
    }

    fn from_yaml(file: &Path, err: YamlError) -> Self {
        // serde names our private raw types; say what the user must write instead.
        let message = match err.message.find("expected struct ") {
            Some(at) => format!(
                "{}expected a mapping of fields such as `command:` or `url:`",
                &err.message[..at]
            ),
            None => err.message,
        };
        LoadError {
            file: file.to_path_buf(),
            field: err.field,
            line: err.line,
            message,
        }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The file name is the core author's: shown escaped. Field and message are built
        // from plain names and our own words only.
        write!(
            f,
            "{}",
            crate::text::escape(&self.file.display().to_string())
        )?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Every load error of a core.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the agent core does not load:{}", .0.iter().map(|e| format!("\n  {e}")).collect::<String>())]
pub struct CoreErrors(pub Vec<LoadError>);

/// A loaded Agent Core.
#[derive(Debug, Clone)]
pub struct AgentCore {
    /// Canonical core directory.
    pub root: PathBuf,
    /// MCP root, relative to `root` (`agent/mcp` unless `slots.mcp` says otherwise).
    pub mcp_root: String,
    /// The names under `capabilities.defaults` of agent.yaml (what they grant is
    /// `authority::CapabilitySet`'s to say).
    pub grants: BTreeSet<String>,
    /// Every declaration that loaded, enabled or not, sorted by file name.
    pub declarations: Vec<Arc<Declaration>>,
    /// Declaration files that did not load, in file order: each is a diagnostic of every
    /// turn, and its neighbours load without it.
    pub broken: Vec<Arc<Broken>>,
}

impl AgentCore {
    /// The enabled declarations, in file order.
    pub fn enabled(&self) -> impl Iterator<Item = &Arc<Declaration>> {
        self.declarations.iter().filter(|d| d.enabled)
    }
}

/// A file of the MCP root that is, or looks like, a declaration and did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The file stem (what the server id would have been).
    pub server_id: String,
    /// Path relative to the core root.
    pub path: String,
    /// What is wrong, each naming the file, field and line.
    pub errors: Vec<LoadError>,
    /// sha256 of the bytes read, or of the kind of entry when nothing was read: what the
    /// evolution review's token binds for a file that does not load.
    pub digest: Fingerprint,
}

impl Broken {
    /// A host's in-memory declaration whose id the core declares too.
    pub(crate) fn duplicate_inline(server_id: &str, path: &str, provenance: &str) -> Self {
        let file = PathBuf::from(format!("{provenance}:{path}"));
        Broken {
            server_id: server_id.to_string(),
            path: path.to_string(),
            errors: vec![LoadError::new(
                &file,
                None,
                None,
                "the core declares this server id too; give the host's server another id".into(),
            )],
            digest: Fingerprint::of(format!("inline-duplicate:{server_id}").as_bytes()),
        }
    }
}

/// A core as far as it loaded, plus every error found.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// What loaded; declarations with errors are in `core.broken`.
    pub core: AgentCore,
    /// Every problem, agent.yaml's first, then the declarations' in file order.
    pub errors: Vec<LoadError>,
    /// Problems of `agent.yaml` itself (and of the MCP root it names): any of them stops
    /// the core.
    pub manifest_errors: Vec<LoadError>,
}

#[derive(Debug, Deserialize, Default)]
struct RawManifest {
    #[serde(default)]
    slots: Option<RawSlots>,
    #[serde(default)]
    capabilities: Option<RawCapabilities>,
}

#[derive(Debug, Deserialize, Default)]
struct RawSlots {
    #[serde(default)]
    mcp: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default)]
    defaults: BTreeMap<String, RawGrant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    scope: String,
}

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
type Parsed = Result<Arc<Declaration>, Arc<Broken>>;

/// What reading `agent.yaml` gave.
type ManifestRead = Result<Manifest, Vec<LoadError>>;

/// Parsed files reused while their metadata is unchanged. Failures are kept as well as
/// successes: a hostile file costs its parse once, not once per turn.
#[derive(Debug, Default)]
pub struct LoadCache {
    declarations: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, Parsed)>>,
    manifests: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, ManifestRead)>>,
    /// Canonical core roots, resolved once per root.
    roots: std::sync::Mutex<BTreeMap<PathBuf, PathBuf>>,
    /// Watches by canonical core root, at most [`MAX_WATCHED_CORES`].
    watches: std::sync::Mutex<HashMap<PathBuf, watch::CoreWatch>>,
}

/// Most cores whose directories are watched at once, one inotify instance each (Linux
/// allows 128 per user by default, shared with every other program); a core beyond them
/// is watched in place of the one watched longest. Without an instance a core is
/// simply statted on every turn.
pub const MAX_WATCHED_CORES: usize = 16;

/// Most files a cache keeps per kind; a core that keeps renaming files cannot grow it.
const MAX_CACHED_FILES: usize = 4096;

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

    fn get(&self, file: &Path, stamp: Stamp) -> Option<Parsed> {
        let map = self.declarations.lock().ok()?;
        let (cached, parsed) = map.get(file)?;
        (*cached == stamp).then(|| parsed.clone())
    }

    fn put(&self, file: &Path, stamp: Stamp, parsed: Parsed) {
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

    fn manifest(&self, file: &Path, stamp: Stamp) -> Option<ManifestRead> {
        let map = self.manifests.lock().ok()?;
        map.get(file)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, m)| m.clone())
    }

    fn put_manifest(&self, file: &Path, stamp: Stamp, m: ManifestRead) {
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

/// What the runtime reads from `agent.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// `slots.mcp` as written (unresolved).
    pub mcp_slot: Option<String>,
    /// `capabilities.defaults` names.
    pub grants: BTreeSet<String>,
}

/// Largest `agent.yaml` or declaration read; a larger file is refused before it is read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// Parses the text of `agent.yaml`; problems are added to `errors` and the rest kept.
pub fn parse_manifest(text: &str, file: &Path, errors: &mut Vec<LoadError>) -> Manifest {
    let raw: RawManifest = yaml::parse(text).unwrap_or_else(|e| {
        errors.push(LoadError::from_yaml(file, e));
        RawManifest::default()
    });
    let mut grants = BTreeSet::new();
    for (name, grant) in raw.capabilities.unwrap_or_default().defaults {
        if grant.scope != "core" {
            let field = format!(
                "capabilities.defaults.{}.scope",
                crate::text::plain_name(&name, "<name>")
            );
            errors.push(LoadError::new(
                file,
                Some(&field),
                None,
                "unknown scope; the only scope is `core`".into(),
            ));
        } else {
            grants.insert(name);
        }
    }
    Manifest {
        mcp_slot: raw.slots.and_then(|s| s.mcp),
        grants,
    }
}

/// Loads a core as the runtime does: an `agent.yaml` with errors stops it; a declaration
/// with errors is left out and kept in [`AgentCore::broken`].
///
/// # Errors
/// [`CoreErrors`] with every problem found when `agent.yaml` does not load.
pub fn load(root: &Path) -> Result<AgentCore, CoreErrors> {
    finish(load_report(root))
}

/// Loads a core and collects every error instead of stopping at the first.
pub fn load_report(root: &Path) -> LoadReport {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    read_revision(&FsTree::new(&root), &root, None)
}

/// [`load`] for warm turns. While an inotify watch set up before the last load has seen
/// no event (and for at most two seconds), that load is returned as it is,
/// without a look at any file. Otherwise the core is loaded again, reusing parsed
/// declarations whose file metadata (inode, size, modification and change times) has
/// not changed: the directory is listed and the files statted, and nothing is read or
/// parsed again.
///
/// # Errors
/// As [`load`].
pub fn load_cached(root: &Path, cache: &LoadCache) -> Result<Arc<AgentCore>, CoreErrors> {
    let root = cache.canonical(root);
    let mcp_root = {
        let watches = cache.watches.lock().ok();
        let known = watches.as_ref().and_then(|w| w.get(&root));
        if let Some(core) = known.and_then(watch::CoreWatch::unchanged) {
            return Ok(core);
        }
        known.map_or(DEFAULT_MCP_ROOT.to_string(), |w| w.mcp_root().to_string())
    };
    // Set up before loading: a change made during the load is an event for the next.
    let watch = watch::CoreWatch::start(&root, &mcp_root);
    let report = read_revision(&FsTree::new(&root), &root, Some(cache));
    let Ok(mut watches) = cache.watches.lock() else {
        return finish(report).map(Arc::new);
    };
    watches.remove(&root);
    let core = Arc::new(finish(report)?);
    if let Some(mut watch) = watch {
        watch.vouch(&core);
        if watches.len() >= MAX_WATCHED_CORES
            && let Some(oldest) = watches
                .iter()
                .min_by_key(|(_, w)| w.since())
                .map(|(r, _)| r.clone())
        {
            watches.remove(&oldest);
        }
        watches.insert(root, watch);
    }
    Ok(core)
}

fn finish(report: LoadReport) -> Result<AgentCore, CoreErrors> {
    if report.manifest_errors.is_empty() {
        Ok(report.core)
    } else {
        Err(CoreErrors(report.errors))
    }
}

/// The declarations of one revision of a core: the single definition that the loader
/// (a checkout on disk) and the evolution review (a commit) share, so what a review
/// shows is what the runtime loads.
///
/// - `agent.yaml` must be a regular file (no symlink, FIFO or directory), at most
///   [`MAX_FILE_BYTES`]; any problem with it stops the core.
/// - The MCP root (`agent/mcp`, or `slots.mcp`) is a relative path without `..` whose
///   every component is a real directory: a symlink on the way is refused, so the root
///   never leaves the core. A root that does not exist holds no declarations.
/// - Declarations are the entries of the MCP root named `<id>.yaml` or `<id>.yml`
///   (lowercase extensions), sorted by name; hidden files are not read. Each must be a
///   regular file at most [`MAX_FILE_BYTES`]; anything else with such a name (a
///   symlink, directory, FIFO, submodule) or an upper-case extension is a broken
///   declaration, reported and never followed. Two ids that differ only in case are
///   refused for the later file, as on a case-insensitive checkout they are one file.
///
/// `shown_root` is the path error messages start from. With a `cache`, files are parsed
/// again only when their metadata changed, failures included.
pub fn read_revision(
    tree: &dyn CoreTree,
    shown_root: &Path,
    cache: Option<&LoadCache>,
) -> LoadReport {
    let manifest_path = tree.display("agent.yaml");
    let mut manifest_errors = Vec::new();
    let manifest = read_manifest(tree, &manifest_path, cache).unwrap_or_else(|errors| {
        manifest_errors = errors;
        Manifest::default()
    });
    let mcp_root = match mcp_root_of(tree, manifest.mcp_slot.as_deref()) {
        Ok(root) => root,
        Err(message) => {
            let field = manifest.mcp_slot.as_ref().map(|_| "slots.mcp");
            manifest_errors.push(LoadError::new(&manifest_path, field, None, message));
            None
        }
    };
    let mut errors = manifest_errors.clone();
    let (declarations, broken) = match &mcp_root {
        Some(dir) => read_declarations(tree, dir, cache),
        None => (Vec::new(), Vec::new()),
    };
    errors.extend(broken.iter().flat_map(|b| b.errors.iter().cloned()));
    LoadReport {
        core: AgentCore {
            root: shown_root.to_path_buf(),
            mcp_root: mcp_root.unwrap_or_else(|| DEFAULT_MCP_ROOT.to_string()),
            grants: manifest.grants,
            declarations,
            broken,
        },
        errors,
        manifest_errors,
    }
}

fn read_manifest(tree: &dyn CoreTree, shown: &Path, cache: Option<&LoadCache>) -> ManifestRead {
    let refused = |message: String| vec![LoadError::new(shown, None, None, message)];
    let stamp = match tree.kind("agent.yaml") {
        EntryKind::File { stamp, .. } => stamp,
        EntryKind::Missing => {
            return Err(refused(
                "there is no agent.yaml; run in an Agent Core or pass --core DIR".into(),
            ));
        }
        other => {
            return Err(refused(format!(
                "agent.yaml is {}; it must be a regular file in the core",
                other.describe()
            )));
        }
    };
    if let (Some(c), Some(st)) = (cache, stamp)
        && let Some(known) = c.manifest(shown, st)
    {
        return known;
    }
    let parsed = match tree.read("agent.yaml", MAX_FILE_BYTES) {
        Ok(bytes) => {
            let mut errors = Vec::new();
            let m = parse_manifest(&String::from_utf8_lossy(&bytes), shown, &mut errors);
            if errors.is_empty() {
                Ok(m)
            } else {
                Err(errors)
            }
        }
        Err(refusal) => Err(refused(refusal_message("agent.yaml", &refusal))),
    };
    if let (Some(c), Some(st)) = (cache, stamp) {
        c.put_manifest(shown, st, parsed.clone());
    }
    parsed
}

fn refusal_message(what: &str, refusal: &ReadRefusal) -> String {
    match refusal {
        ReadRefusal::NotAFile(kind) => {
            format!("{what} is {}; it must be a regular file", kind.describe())
        }
        ReadRefusal::TooLarge { max } => format!(
            "{what} is larger than {} KiB; a declaration needs a few hundred bytes",
            max / 1024
        ),
        ReadRefusal::Io(e) => format!("cannot read {what} ({e})"),
    }
}

/// The MCP root named by `slot` (the default when `None`), checked on `tree`: `None`
/// when it does not exist (no declarations), an error message when it is not acceptable.
fn mcp_root_of(tree: &dyn CoreTree, slot: Option<&str>) -> Result<Option<String>, String> {
    let root = match slot {
        None => DEFAULT_MCP_ROOT.to_string(),
        Some(slot) => {
            if slot.chars().any(crate::text::is_unsafe) {
                return Err(
                    "the MCP root contains control characters; write a plain relative path".into(),
                );
            }
            if slot.starts_with('/') {
                return Err(
                    "the MCP root must be a path relative to the core, not absolute".into(),
                );
            }
            let parts: Vec<&str> = slot
                .split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .collect();
            if parts.contains(&"..") {
                return Err(
                    "the MCP root may not contain `..`; write the path inside the core without it"
                        .into(),
                );
            }
            if parts.is_empty() {
                return Err(
                    "the MCP root must be a directory below the core root, such as `agent/mcp`"
                        .into(),
                );
            }
            parts.join("/")
        }
    };
    let mut walked = String::new();
    for part in root.split('/') {
        walked = tree::join(&walked, part);
        match tree.kind(&walked) {
            EntryKind::Dir => {}
            EntryKind::Missing => return Ok(None),
            other => {
                return Err(format!(
                    "`{}` on the way to the MCP root is {}; the MCP root must be a real directory inside the core",
                    crate::text::escape(&walked),
                    other.describe()
                ));
            }
        }
    }
    Ok(Some(root))
}

/// `.yaml` or `.yml` when `name` ends with one (in any case), with whether it is the
/// lowercase spelling the loader accepts.
pub(crate) fn declaration_extension(name: &str) -> Option<(&str, bool)> {
    let lower = name.to_ascii_lowercase();
    for ext in [".yaml", ".yml"] {
        if lower.ends_with(ext) && name.len() > ext.len() {
            let stem = &name[..name.len() - ext.len()];
            return Some((stem, name.ends_with(ext)));
        }
    }
    None
}

/// What makes a file stem unusable as a server id, if anything.
fn server_id_problem(id: &str) -> Option<&'static str> {
    if id.chars().any(crate::text::is_unsafe) {
        Some("the file name contains control or invisible characters; rename it to plain text")
    } else if id.trim() != id || id.is_empty() {
        Some("the file name starts or ends with spaces; rename it")
    } else if !unicode_normalization::is_nfc(id) {
        Some(
            "the file name is not in Unicode normal form C (it could look like another id); rename it, typing it anew",
        )
    } else {
        None
    }
}

/// What two server ids are compared by: NFKC, lowercased, NFKC again (a
/// compatibility form and case folding), so a look-alike spelling (`ｄｏｃｓ`, `DOCS`,
/// `ﬁles` beside `files`) is the same id and refused as a duplicate.
fn folded_id(id: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    // Lowercasing is not all of case folding: `ß` folds to `ss`, final sigma to sigma.
    let lowered = id
        .nfkc()
        .collect::<String>()
        .to_lowercase()
        .replace('ß', "ss")
        .replace('ς', "σ");
    lowered.nfkc().collect()
}

fn read_declarations(
    tree: &dyn CoreTree,
    dir: &str,
    cache: Option<&LoadCache>,
) -> (Vec<Arc<Declaration>>, Vec<Arc<Broken>>) {
    let mut declarations = Vec::new();
    let mut broken = Vec::new();
    let Ok(entries) = tree.list(dir) else {
        return (declarations, broken);
    };
    let mut entries: Vec<(String, EntryKind)> = entries
        .into_iter()
        .filter_map(|(name, kind)| match name {
            Ok(name) => Some((name, kind)),
            Err(lossy) => {
                let rel = tree::join(dir, &lossy);
                broken.push(Arc::new(broken_entry(
                    tree,
                    &rel,
                    lossy,
                    "the file name is not valid UTF-8; rename it".into(),
                    format!("invalid-name:{rel}").as_bytes(),
                )));
                None
            }
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen: HashMap<String, String> = HashMap::new();
    for (name, kind) in entries {
        if name.starts_with('.') {
            continue;
        }
        let Some((stem, lowercase)) = declaration_extension(&name) else {
            continue;
        };
        let rel = tree::join(dir, &name);
        let stamp = match admit_entry(tree, &rel, stem, lowercase, &kind, &mut seen) {
            Ok(stamp) => stamp,
            Err(refused) => {
                broken.push(refused);
                continue;
            }
        };
        let file = tree.display(&rel);
        let parsed = match (cache, stamp) {
            (Some(c), Some(st)) => c.get(&file, st),
            _ => None,
        };
        let parsed = parsed.unwrap_or_else(|| {
            let parsed = parse_declaration(tree, &rel, stem, &file);
            if let (Some(c), Some(st)) = (cache, stamp) {
                c.put(&file, st, parsed.clone());
            }
            parsed
        });
        match parsed {
            Ok(d) => declarations.push(d),
            Err(b) => broken.push(b),
        }
    }
    (declarations, broken)
}

/// Whether the declaration file `rel` (server id `id`) is read: a lowercase extension,
/// a usable server id, a regular file, an id not `seen` already (compared without
/// case or compatibility forms). Its stamp when it is; the refusal otherwise.
fn admit_entry(
    tree: &dyn CoreTree,
    rel: &str,
    id: &str,
    lowercase: bool,
    kind: &EntryKind,
    seen: &mut HashMap<String, String>,
) -> Result<Option<Stamp>, Arc<Broken>> {
    let refuse = |message: String, what: &str| {
        Arc::new(broken_entry(
            tree,
            rel,
            id.to_string(),
            message,
            format!("{what}:{rel}").as_bytes(),
        ))
    };
    if !lowercase {
        return Err(refuse(
            "declaration files end in lowercase `.yaml` or `.yml`; rename the file".into(),
            "extension",
        ));
    }
    if let Some(problem) = server_id_problem(id) {
        return Err(refuse(problem.into(), "name"));
    }
    let stamp = match kind {
        EntryKind::File { stamp, .. } => *stamp,
        other => {
            return Err(refuse(
                format!(
                    "this declaration is {}; only regular files are read (commit the declaration itself, not a link to it)",
                    other.describe()
                ),
                other.describe(),
            ));
        }
    };
    if let Some(first) = seen.get(&folded_id(id)) {
        let same = if first == rel {
            ""
        } else {
            " (compared without case or compatibility forms)"
        };
        return Err(refuse(
            format!(
                "server id `{}` is declared twice{same} ({} and {}); rename or remove one",
                crate::text::escape(id),
                crate::text::escape(first),
                crate::text::escape(rel),
            ),
            "duplicate",
        ));
    }
    seen.insert(folded_id(id), rel.to_string());
    Ok(stamp)
}

fn broken_entry(
    tree: &dyn CoreTree,
    rel: &str,
    server_id: String,
    message: String,
    identity: &[u8],
) -> Broken {
    Broken {
        server_id,
        path: rel.to_string(),
        errors: vec![LoadError::new(&tree.display(rel), None, None, message)],
        digest: broken_digest(identity),
    }
}

/// The digest a broken file is bound by in a review token: sha256 of its bytes (or of
/// what it is, when it could not be read), domain-separated from every other digest.
pub fn broken_digest(bytes: &[u8]) -> Fingerprint {
    let mut input = b"demiurge-mcp-broken/v1\n".to_vec();
    input.extend_from_slice(bytes);
    Fingerprint::of(&input)
}

/// Reads and validates one declaration file.
fn parse_declaration(tree: &dyn CoreTree, rel: &str, id: &str, file: &Path) -> Parsed {
    let bytes = match tree.read(rel, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(refusal) => {
            return Err(Arc::new(broken_entry(
                tree,
                rel,
                id.to_string(),
                refusal_message("the declaration", &refusal),
                format!("unreadable:{rel}").as_bytes(),
            )));
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    parse_declaration_text(&text, id.to_string(), rel.to_string(), file)
        .map(Arc::new)
        .map_err(|errors| {
            Arc::new(Broken {
                server_id: id.to_string(),
                path: rel.to_string(),
                errors,
                digest: broken_digest(&bytes),
            })
        })
}

/// Validates the text of one declaration. `rel` is its path relative to the core, `file`
/// what error messages name.
///
/// # Errors
/// Every problem found, each naming `file`, the field and the line.
pub fn parse_declaration_text(
    text: &str,
    server_id: String,
    rel: String,
    file: &Path,
) -> Result<Declaration, Vec<LoadError>> {
    let raw = yaml::parse(text).map_err(|e| vec![LoadError::from_yaml(file, e)])?;
    // The same text parsed again as plain data: the canonical input of the fingerprint.
    let canonical: serde_json::Value =
        yaml::parse(text).map_err(|e| vec![LoadError::from_yaml(file, e)])?;
    Declaration::from_raw(raw, server_id, rel, file.to_path_buf(), &canonical)
}
