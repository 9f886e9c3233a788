//! `demiurge mcp add|list|get|remove|enable|disable`: manage declarations the way other
//! hosts' `mcp` commands do, without hand-editing YAML. A core is usually committed,
//! so `add` never writes a secret: an env or header value is kept as written only when
//! its name is not sensitive and the value has no secret shape ([`keeps_literal`]);
//! any other becomes a `${NAME}` reference and the command says which host variables
//! to set. Edits of existing files are line edits: the user's comments and order stay.

use std::path::PathBuf;

use demiurge_mcp::core;
use serde_json::json;

mod declared;
mod edits;

use super::{Cli, t};
pub(crate) use declared::{Addition, Declared, declaration, keeps_literal, variable_name};
pub(crate) use edits::{with_enabled, with_grants, without_grants};

/// The declaration file of `name`: any entry at `<name>.yaml` or `.yml` (a symlink or
/// a directory too, so nothing is ever written through one).
fn declaration_path(cli: &Cli, report: &core::LoadReport, name: &str) -> Option<PathBuf> {
    if !is_plain_id(name) {
        return None;
    }
    let dir = cli.core_dir().join(&report.core.mcp_root);
    ["yaml", "yml"]
        .iter()
        .map(|ext| dir.join(format!("{name}.{ext}")))
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// A server id these commands accept: `[A-Za-z0-9_-]`, so it names one file in the MCP
/// root and nothing else.
fn is_plain_id(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The regular file of a declaration that loaded (or is broken), never a link.
fn editable(cli: &Cli, report: &core::LoadReport, name: &str) -> Option<PathBuf> {
    let path = declaration_path(cli, report, name)?;
    std::fs::symlink_metadata(&path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|_| path)
}

/// Replaces `path` with `text` through a temporary file and a rename in its directory:
/// a symlink at `path` is replaced, never written through.
fn replace_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    // The declaration and agent.yaml are ordinary, readable files of the core.
    use std::os::unix::fs::PermissionsExt;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.persist(path).map(drop).map_err(|e| e.error)
}

fn unknown(report: &core::LoadReport, name: &str) -> u8 {
    let ids = report
        .core
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .chain(report.core.broken.iter().map(|b| b.server_id.as_str()));
    let hint = demiurge_mcp::text::closest(name, ids)
        .map(|id| format!("; did you mean `{}`?", t(id)))
        .unwrap_or_default();
    eprintln!("error: no server `{}` is declared{hint}", t(name));
    1
}

/// `demiurge mcp add`.
pub(crate) fn add(cli: &Cli, addition: &Addition<'_>) -> u8 {
    let declared = match declaration(addition) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    match write_declaration(cli, addition.name, &declared.yaml) {
        Ok(path) => {
            println!("added {} and its grants", t(&path.display().to_string()));
            for line in declared.advice() {
                println!("{line}");
            }
            0
        }
        Err(Refused::Usage(e)) => {
            eprintln!("error: {e}");
            2
        }
        Err(Refused::Invalid(errors)) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            1
        }
    }
}

/// Why a declaration was not written.
pub(crate) enum Refused {
    /// A bad id.
    Usage(String),
    /// It exists, the core does not load, or what would be written does not load.
    Invalid(Vec<String>),
}

/// Writes `agent/mcp/<name>.yaml` with `yaml` and grants it in agent.yaml; undone when
/// the result does not load as a turn would read it.
pub(crate) fn write_declaration(cli: &Cli, name: &str, yaml: &str) -> Result<PathBuf, Refused> {
    if !is_plain_id(name) {
        return Err(Refused::Usage(format!(
            "`{}` is not a server id; use letters, digits, `-` and `_`",
            t(name)
        )));
    }
    let report = core::load_report(&cli.core_dir());
    if !report.manifest_errors.is_empty() {
        return Err(Refused::Invalid(vec![
            "agent.yaml does not load; fix it first (`demiurge init --check`)".into(),
        ]));
    }
    if declaration_path(cli, &report, name).is_some()
        || report.core.broken.iter().any(|b| b.server_id == name)
    {
        return Err(Refused::Invalid(vec![format!(
            "`{}` is already declared; `demiurge mcp remove` it first",
            t(name)
        )]));
    }
    let dir = cli.core_dir().join(&report.core.mcp_root);
    let path = dir.join(format!("{name}.yaml"));
    let manifest_path = cli.core_dir().join("agent.yaml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
    let Some(granted) = with_grants(&manifest, name) else {
        return Err(Refused::Invalid(vec![format!(
            "agent.yaml's capabilities are in a shape this command does not edit; add `mcp.connect:{0}` and `mcp.call:{0}` under capabilities.defaults by hand",
            t(name)
        )]));
    };
    let created = std::fs::create_dir_all(&dir).and_then(|()| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?
            .write_all(yaml.as_bytes())
    });
    created
        .and_then(|()| replace_file(&manifest_path, &granted))
        .map_err(|e| {
            Refused::Invalid(vec![format!(
                "cannot write the core: {}",
                t(&e.to_string())
            )])
        })?;
    // What was written must load, exactly as a turn would read it.
    let after = core::load_report(&cli.core_dir());
    let broken = after.core.broken.iter().find(|b| b.server_id == name);
    if broken.is_some() || !after.manifest_errors.is_empty() {
        let _ = std::fs::remove_file(&path);
        let _ = replace_file(&manifest_path, &manifest);
        let errors = match broken {
            Some(b) => b.errors.iter().map(ToString::to_string).collect(),
            None => after
                .manifest_errors
                .iter()
                .map(ToString::to_string)
                .collect(),
        };
        return Err(Refused::Invalid(errors));
    }
    Ok(path)
}

/// `demiurge mcp list [--json]`.
pub(crate) fn list(cli: &Cli, as_json: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let grants = demiurge_mcp::authority::CapabilitySet::new(report.core.grants.iter().cloned());
    let rows: Vec<_> = report
        .core
        .declarations
        .iter()
        .map(|d| super::check::declaration_row(d, &grants))
        .chain(
            report
                .core
                .broken
                .iter()
                .map(|b| json!({"server": b.server_id, "path": b.path, "broken": true})),
        )
        .collect();
    if as_json {
        super::print_json(&json!({ "servers": rows }), true);
        return 0;
    }
    let mut lines = Vec::new();
    for row in &rows {
        let text = |k: &str| row[k].as_str().unwrap_or_default().to_string();
        let state = if row["broken"] == true {
            "broken (see `demiurge init --check`)".to_string()
        } else {
            format!(
                "{}  {}  {}",
                text("transport"),
                if row["enabled"] == true {
                    "enabled"
                } else {
                    "disabled"
                },
                if row["connect_granted"] == true && row["call_granted"] == true {
                    "granted"
                } else {
                    "not granted"
                }
            )
        };
        lines.push(vec![
            t(&text("server")).into_owned(),
            t(&state).into_owned(),
        ]);
    }
    for line in super::aligned(&lines) {
        println!("{line}");
    }
    if rows.is_empty() {
        println!("no MCP servers declared");
    }
    0
}

/// `demiurge mcp get NAME [--json]`: what an approver would see.
pub(crate) fn get(cli: &Cli, name: &str, as_json: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(d) = report
        .core
        .declarations
        .iter()
        .find(|d| d.server_id == name)
    else {
        return unknown(&report, name);
    };
    let policy = demiurge_mcp::authority::HostPolicy::default().connect_policy(d);
    let preview = demiurge_mcp::authority::ConnectPreview::new(d, policy, None, &[]);
    if as_json {
        super::print_json(&preview, true);
    } else {
        print!("{}", preview.render());
    }
    0
}

/// `demiurge mcp remove NAME`: the declaration and its grants.
pub(crate) fn remove(cli: &Cli, name: &str) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(path) = editable(cli, &report, name) else {
        return unknown(&report, name);
    };
    if !report.manifest_errors.is_empty() {
        eprintln!("error: agent.yaml does not load; fix it first (`demiurge init --check`)");
        return 1;
    }
    let manifest_path = cli.core_dir().join("agent.yaml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
    let done = std::fs::remove_file(&path)
        .and_then(|()| replace_file(&manifest_path, &without_grants(&manifest, name)));
    match done {
        Ok(()) => {
            println!("removed {} and its grants", t(&path.display().to_string()));
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

/// `demiurge mcp enable|disable NAME`.
pub(crate) fn set_enabled(cli: &Cli, name: &str, enabled: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(path) = editable(cli, &report, name) else {
        return unknown(&report, name);
    };
    let edited = std::fs::read_to_string(&path)
        .and_then(|yaml| replace_file(&path, &with_enabled(&yaml, enabled)));
    match edited {
        Ok(()) => {
            let state = if enabled { "enabled" } else { "disabled" };
            println!("{} {state}", t(name));
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_added_and_removed_by_line_edits_that_keep_comments() {
        let manifest = "# my agent\nname: a\ncapabilities:\n  defaults:\n    # docs first\n    mcp.connect:docs: {scope: core}\n";
        let added = with_grants(manifest, "git").unwrap();
        assert!(added.starts_with("# my agent\n"));
        assert!(added.contains("# docs first"));
        assert!(added.contains("\"mcp.connect:git\": {scope: core}"));
        assert!(added.contains("\"mcp.call:git\": {scope: core}"));
        let removed = without_grants(&added, "git");
        assert_eq!(removed, manifest);
        // No capabilities yet: a section is appended.
        let fresh = with_grants("name: a\n", "git").unwrap();
        assert!(fresh.ends_with("capabilities:\n  defaults:\n    \"mcp.connect:git\": {scope: core}\n    \"mcp.call:git\": {scope: core}\n"));
        // A block-form grant goes with its nested lines.
        let block = "capabilities:\n  defaults:\n    mcp.call:git:\n      scope: core\n    mcp.call:docs: {scope: core}\n";
        assert_eq!(
            without_grants(block, "git"),
            "capabilities:\n  defaults:\n    mcp.call:docs: {scope: core}\n"
        );
        // A flow-style section is not edited.
        assert!(with_grants("capabilities: {defaults: {}}\n", "git").is_none());
    }

    #[test]
    fn enabling_edits_one_line_and_keeps_its_comment() {
        let yaml = "# docs\nenabled: true   # on\ncommand: x\n";
        assert_eq!(
            with_enabled(yaml, false),
            "# docs\nenabled: false  # on\ncommand: x\n"
        );
        assert_eq!(
            with_enabled("command: x\n", false),
            "enabled: false\ncommand: x\n"
        );
    }
}
