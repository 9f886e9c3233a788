//! Agent Cores: `agent.yaml` and the MCP declarations under its MCP root.
//!
//! [`load`] reads a core from disk into an [`AgentCore`]; [`load_report`] keeps going
//! after errors so `demiurge init --check` can list every problem at once. Nothing here
//! starts processes or touches the network.

mod declaration;
mod yaml;

use std::collections::{BTreeMap, BTreeSet};
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
    let report = load_report(root);
    if report.errors.is_empty() {
        Ok(report.core)
    } else {
        Err(CoreErrors(report.errors))
    }
}

/// Loads a core and collects every error instead of stopping at the first.
pub fn load_report(root: &Path) -> LoadReport {
    let mut errors = Vec::new();
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let manifest_path = root.join("agent.yaml");
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => parse_manifest(&text, &manifest_path, &mut errors),
        Err(e) => {
            errors.push(LoadError::new(
                &manifest_path,
                None,
                None,
                format!("cannot read agent.yaml ({e}); run in an Agent Core or pass --core DIR"),
            ));
            Manifest::default()
        }
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

    let declarations = load_declarations(&root, &mcp_root, &mut errors);
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
) -> Vec<Arc<Declaration>> {
    let dir = root.join(mcp_root);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
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
        match parse_declaration(&file, server_id, rel) {
            Ok(d) => out.push(Arc::new(d)),
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
