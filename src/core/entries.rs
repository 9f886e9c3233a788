//! Reading the declarations of a core's MCP root: which names are declarations, what a
//! server id may be, each file admitted or recorded as broken, each parsed into a
//! declaration.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::cache::{LoadCache, Parsed, Stamp};
use super::{
    Broken, CoreTree, Declaration, EntryKind, Fingerprint, LoadError, MAX_FILE_BYTES,
    refusal_message, tree, yaml,
};

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
pub(super) fn server_id_problem(id: &str) -> Option<&'static str> {
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
pub(super) fn folded_id(id: &str) -> String {
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

pub(super) fn read_declarations(
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
pub(super) fn admit_entry(
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

pub(super) fn broken_entry(
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
pub(super) fn parse_declaration(tree: &dyn CoreTree, rel: &str, id: &str, file: &Path) -> Parsed {
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
