//! Agent Cores: `agent.yaml` and the MCP declarations under its MCP root.
//!
//! [`load`] reads a core from disk into an [`AgentCore`]; [`load_report`] keeps going
//! after errors so `demiurge init --check` can list every problem at once. Nothing here
//! starts processes or touches the network.

mod declaration;
mod watch;
mod yaml;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use declaration::{
    ApprovalPolicy, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Declaration, Endpoint,
    Fingerprint, Risk, ToolFilter, TransportKind, fingerprint,
};
pub use yaml::YamlError;

use crate::authority::CapabilitySet;

/// Default MCP root, relative to the core.
pub const DEFAULT_MCP_ROOT: &str = "agent/mcp";

/// One problem in one file.
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
    pub(crate) fn new(
        file: &Path,
        field: Option<&str>,
        line: Option<usize>,
        message: String,
    ) -> Self {
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
        write!(f, "{}", self.file.display())?;
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
    /// `capabilities.defaults` of agent.yaml.
    pub grants: CapabilitySet,
    /// Every declaration, enabled or not, sorted by file name.
    pub declarations: Vec<Arc<Declaration>>,
}

impl AgentCore {
    /// The enabled declarations, in file order.
    pub fn enabled(&self) -> impl Iterator<Item = &Arc<Declaration>> {
        self.declarations.iter().filter(|d| d.enabled)
    }
}

/// A core as far as it loaded, plus every error found.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// What loaded; declarations with errors are missing from it.
    pub core: AgentCore,
    /// Problems, in file order.
    pub errors: Vec<LoadError>,
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
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The metadata of `path` (symlinks followed); `None` when it does not exist.
    pub(crate) fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
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

/// Parsed declarations and manifests by file, reused while their metadata is unchanged.
#[derive(Debug, Default)]
pub struct LoadCache {
    declarations: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, Arc<Declaration>)>>,
    manifests: std::sync::Mutex<BTreeMap<PathBuf, (Stamp, Manifest)>>,
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

impl LoadCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn canonical(&self, root: &Path) -> PathBuf {
        if let Some(known) = self.roots.lock().ok().and_then(|m| m.get(root).cloned()) {
            return known;
        }
        let real = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        if let Ok(mut m) = self.roots.lock() {
            m.insert(root.to_path_buf(), real.clone());
        }
        real
    }

    fn get(&self, file: &Path, stamp: Stamp, rel: &str) -> Option<Arc<Declaration>> {
        let map = self.declarations.lock().ok()?;
        let (cached, d) = map.get(file)?;
        (*cached == stamp && d.path == rel).then(|| Arc::clone(d))
    }

    fn put(&self, file: PathBuf, stamp: Stamp, d: Arc<Declaration>) {
        if !stamp.settled() {
            return;
        }
        if let Ok(mut map) = self.declarations.lock() {
            map.insert(file, (stamp, d));
        }
    }

    fn manifest(&self, file: &Path, stamp: Stamp) -> Option<Manifest> {
        let map = self.manifests.lock().ok()?;
        map.get(file)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, m)| m.clone())
    }

    fn put_manifest(&self, file: &Path, stamp: Stamp, m: Manifest) {
        if !stamp.settled() {
            return;
        }
        if let Ok(mut map) = self.manifests.lock() {
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

/// Parses the text of `agent.yaml`; problems are added to `errors` and the rest kept.
pub fn parse_manifest(text: &str, file: &Path, errors: &mut Vec<LoadError>) -> Manifest {
    let raw: RawManifest = yaml::parse(text).unwrap_or_else(|e| {
        errors.push(LoadError::from_yaml(file, e));
        RawManifest::default()
    });
    let mut grants = BTreeSet::new();
    for (name, grant) in raw.capabilities.unwrap_or_default().defaults {
        if grant.scope != "core" {
            errors.push(LoadError::new(
                file,
                Some(&format!("capabilities.defaults.{name}.scope")),
                None,
                format!("unknown scope `{}`; the only scope is `core`", grant.scope),
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

/// Loads a core, failing on the first file with errors reported all together.
///
/// # Errors
/// [`CoreErrors`] with every problem found (file, field, line, fix).
pub fn load(root: &Path) -> Result<AgentCore, CoreErrors> {
    finish(load_report(root))
}

/// Loads a core and collects every error instead of stopping at the first.
pub fn load_report(root: &Path) -> LoadReport {
    load_report_with(root, None)
}

/// [`load`] for warm turns. While an inotify watch set up before the last load has seen
/// no event (and for at most [`watch::REVALIDATE`]), that load is returned as it is,
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
    let report = load_report_with(&root, Some(cache));
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
    if report.errors.is_empty() {
        Ok(report.core)
    } else {
        Err(CoreErrors(report.errors))
    }
}

fn load_report_with(root: &Path, cache: Option<&LoadCache>) -> LoadReport {
    let mut errors = Vec::new();
    let root = match cache {
        Some(c) => c.canonical(root),
        None => root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
    };
    let manifest_path = root.join("agent.yaml");
    // Stamp before reading: a write racing the read then misses the cache next time.
    let manifest_stamp = cache.and_then(|_| Stamp::of(&manifest_path));
    let cached_manifest = cache
        .zip(manifest_stamp)
        .and_then(|(c, st)| c.manifest(&manifest_path, st));
    let manifest = match cached_manifest {
        Some(m) => m,
        None => match std::fs::read_to_string(&manifest_path) {
            Ok(text) => {
                let before = errors.len();
                let m = parse_manifest(&text, &manifest_path, &mut errors);
                if let (Some(c), Some(st)) = (cache, manifest_stamp)
                    && errors.len() == before
                {
                    c.put_manifest(&manifest_path, st, m.clone());
                }
                m
            }
            Err(e) => {
                errors.push(LoadError::new(
                    &manifest_path,
                    None,
                    None,
                    format!(
                        "cannot read agent.yaml ({e}); run in an Agent Core or pass --core DIR"
                    ),
                ));
                Manifest::default()
            }
        },
    };
    let grants = manifest.grants;
    let mcp_root = match manifest.mcp_slot {
        None => DEFAULT_MCP_ROOT.to_string(),
        Some(slot) => match inside_core(&root, &slot) {
            Some(rel) => rel,
            None => {
                errors.push(LoadError::new(
                    &manifest_path,
                    Some("slots.mcp"),
                    None,
                    format!("`{slot}` leaves the agent core; use a relative path inside it"),
                ));
                DEFAULT_MCP_ROOT.to_string()
            }
        },
    };

    let declarations = load_declarations(&root, &mcp_root, &mut errors, cache);
    LoadReport {
        core: AgentCore {
            root,
            mcp_root,
            grants: CapabilitySet::new(grants),
            declarations,
        },
        errors,
    }
}

/// `slot` relative to `root`, normalized, if it stays inside (symlinks followed when the
/// directory exists).
fn inside_core(root: &Path, slot: &str) -> Option<String> {
    let candidate = Path::new(slot);
    if candidate.is_absolute() {
        return None;
    }
    let mut parts: Vec<String> = Vec::new();
    for component in candidate.components() {
        match component {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => return None,
        }
    }
    let joined = root.join(parts.join("/"));
    if let Ok(real) = joined.canonicalize()
        && !real.starts_with(root)
    {
        return None;
    }
    Some(if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    })
}

fn load_declarations(
    root: &Path,
    mcp_root: &str,
    errors: &mut Vec<LoadError>,
    cache: Option<&LoadCache>,
) -> Vec<Arc<Declaration>> {
    let dir = root.join(mcp_root);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter(|e| {
                let p = e.path();
                // The entry's own type needs no syscall; only symlinks are followed.
                let is_file = match e.file_type() {
                    Ok(t) if t.is_symlink() => p.is_file(),
                    Ok(t) => t.is_file(),
                    Err(_) => false,
                };
                is_file && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .map(|e| e.path())
            .collect(),
        Err(_) => return Vec::new(),
    };
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));

    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut out = Vec::new();
    for file in files {
        let Some(server_id) = file
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string)
        else {
            errors.push(LoadError::new(
                &file,
                None,
                None,
                "the file name is not valid UTF-8; rename it".into(),
            ));
            continue;
        };
        if let Some(first) = seen.get(&server_id) {
            errors.push(LoadError::new(
                &file,
                None,
                None,
                format!(
                    "server id `{server_id}` is declared twice ({} and {}); rename or remove one",
                    first.display(),
                    file.display()
                ),
            ));
            continue;
        }
        seen.insert(server_id.clone(), file.clone());
        let rel = format!(
            "{mcp_root}/{}",
            file.file_name().unwrap_or_default().to_string_lossy()
        );
        let rel = rel.trim_start_matches("./").to_string();
        let stamp = cache.and_then(|_| Stamp::of(&file));
        if let (Some(cache), Some(stamp)) = (cache, stamp)
            && let Some(d) = cache.get(&file, stamp, &rel)
        {
            out.push(d);
            continue;
        }
        match parse_declaration(&file, server_id, rel) {
            Ok(d) => {
                let d = Arc::new(d);
                if let (Some(cache), Some(stamp)) = (cache, stamp) {
                    cache.put(file, stamp, Arc::clone(&d));
                }
                out.push(d);
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    out
}

/// Reads and validates one declaration file.
fn parse_declaration(
    file: &Path,
    server_id: String,
    rel: String,
) -> Result<Declaration, Vec<LoadError>> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        vec![LoadError::new(
            file,
            None,
            None,
            format!("cannot read the file ({e})"),
        )]
    })?;
    parse_declaration_text(&text, server_id, rel, file)
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
