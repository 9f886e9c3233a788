//! Agent Cores: `agent.yaml` and the MCP declarations under its MCP root.
//!
//! [`load`] reads a core from disk into an [`AgentCore`]; [`load_report`] keeps going
//! after errors so `demiurge init --check` can list every problem at once. Nothing here
//! starts processes or touches the network.

mod cache;
mod declaration;
mod entries;
mod oauth;
mod tree;
mod validate;

#[cfg(not(target_os = "linux"))]
#[path = "watch_stat.rs"]
mod watch;
#[cfg(target_os = "linux")]
mod watch;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use crate::process::{UnsupportedReference, check_references};
pub use declaration::{
    ApprovalPolicy, DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Declaration, DeclaredUrl,
    Endpoint, Fingerprint, LogLevel, Pinning, Protocol, Risk, Start, ToolFilter, TransportKind,
    fingerprint, is_env_name, is_header_name,
};
pub use oauth::{OAuthDeclared, OAuthGrant, SigningAlgorithm, TokenAuthMethod};
pub use tree::{CoreTree, DirEntry, EntryKind, FsTree, MemoryTree, ReadRefusal};
pub use yaml::{MAX_BLOCK_DEPTH, MAX_FLOW_DEPTH, YamlError};

use cache::ManifestRead;
pub use cache::{LoadCache, MAX_WATCHED_CORES, Stamp};
pub(crate) use entries::declaration_extension;
use entries::read_declarations;
pub use entries::{broken_digest, parse_declaration_text};

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
