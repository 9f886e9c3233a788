//! `demiurge init`: create a core; `demiurge init --check [--json]`: every declaration,
//! every error and warning, exit 0 valid, 1 invalid.

use std::path::Path;

use demiurge_mcp::core;
use serde_json::json;

use super::{Cli, t};

/// The `agent.yaml` `init` writes.
const MANIFEST: &str = "\
# The Agent Core: what this agent may use. Grants name capabilities exactly.
name: my-agent
capabilities:
  defaults:
    # Connecting (start, initialize, list tools) and calling are separate rights.
    # mcp.connect:example: {scope: core}
    # mcp.call:example: {scope: core}
";

/// The example declaration `init` writes (disabled, so nothing runs by surprise).
const EXAMPLE: &str = "\
# One MCP server. Enable it, grant its capabilities in agent.yaml, then run
# `demiurge init --check` and `demiurge tools`.
enabled: false
transport: stdio                 # or streamable_http (alias: http) with `url:`
command: npx
args: [\"-y\", \"@modelcontextprotocol/server-everything\"]
env:
  # API_TOKEN: \"${API_TOKEN}\"    # from the host, only after you approve the connect
approval_policy: prompt          # auto | prompt | deny
timeout_seconds: 60
";

/// Creates `agent.yaml` and `agent/mcp/example.yaml` in the core directory, refusing to
/// overwrite either.
pub(crate) fn create(cli: &Cli) -> u8 {
    let root = cli.core_dir();
    let manifest = root.join("agent.yaml");
    let example = root.join("agent/mcp/example.yaml");
    for path in [&manifest, &example] {
        if std::fs::symlink_metadata(path).is_ok() {
            eprintln!(
                "error: {} exists; `demiurge init` never overwrites (check it with `demiurge init --check`)",
                t(&path.display().to_string())
            );
            return 1;
        }
    }
    let written = std::fs::create_dir_all(root.join("agent/mcp"))
        .and_then(|()| write_new(&manifest, MANIFEST))
        .and_then(|()| write_new(&example, EXAMPLE));
    match written {
        Ok(()) => {
            println!("created {}", t(&manifest.display().to_string()));
            println!("created {}", t(&example.display().to_string()));
            println!("next: edit the example, grant it in agent.yaml, run `demiurge init --check`");
            0
        }
        Err(e) => {
            eprintln!("error: cannot create the core: {}", t(&e.to_string()));
            1
        }
    }
}

fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// What a core has that loads but is likely a mistake: grants that name no declared
/// server, and dotfiles in the MCP root (never loaded).
fn warnings(report: &core::LoadReport) -> Vec<String> {
    let mut out = grant_warnings(report);
    out.extend(oauth_warnings(report));
    out.extend(variable_warnings(report));
    out.extend(file_warnings(report));
    out
}

/// Grants that name no declared server (a typo), with the closest declared one.
fn grant_warnings(report: &core::LoadReport) -> Vec<String> {
    let declared: Vec<&str> = report
        .core
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .chain(report.core.broken.iter().map(|b| b.server_id.as_str()))
        .collect();
    let mut out = Vec::new();
    for grant in &report.core.grants {
        let server = grant
            .strip_prefix("mcp.connect:")
            .or_else(|| grant.strip_prefix("mcp.call:"));
        if let Some(server) = server
            && !server.ends_with('*')
            && !declared.contains(&server)
        {
            let hint = demiurge_mcp::text::closest(server, declared.iter().copied())
                .map(|d| format!("; did you mean `{}`?", t(d)))
                .unwrap_or_default();
            out.push(format!(
                "grant `{}` names no declared server{hint}",
                t(grant)
            ));
        }
    }
    out
}

/// A client registered ahead shares one redirect URI with every authorization server:
/// without a pinned issuer, only an `iss` in the redirect tells them apart.
fn oauth_warnings(report: &core::LoadReport) -> Vec<String> {
    let mut out = Vec::new();
    for d in &report.core.declarations {
        if let demiurge_mcp::core::Endpoint::StreamableHttp {
            oauth: Some(oauth), ..
        } = &d.endpoint
            && (oauth.client_id.is_some() || oauth.client_metadata_url.is_some())
            && oauth.issuer.is_none()
            && oauth.grant != demiurge_mcp::core::OAuthGrant::ClientCredentials
        {
            out.push(format!(
                "{}: oauth declares a client registered ahead but no oauth.issuer; name its authorization server in oauth.issuer, or a server that changes its metadata could have the code redeemed elsewhere (mix-up)",
                t(&d.path)
            ));
        }
    }
    out
}

/// A referenced variable the host lacks skips its server at every turn.
fn variable_warnings(report: &core::LoadReport) -> Vec<String> {
    let mut out = Vec::new();
    for d in report.core.declarations.iter().filter(|d| d.enabled) {
        for (field, name) in d.required_variables() {
            if std::env::var_os(&name).is_none() {
                out.push(format!(
                    "{}: {} references {}, which is not set in this environment; the server is skipped until it is",
                    t(&d.path),
                    t(&field),
                    t(&name)
                ));
            }
        }
    }
    out
}

/// Files beside the declarations that are not declarations: another host's
/// configuration (to import) and dotfiles (ignored).
fn file_warnings(report: &core::LoadReport) -> Vec<String> {
    let mut out = Vec::new();
    let mcp = report.core.root.join(&report.core.mcp_root);
    let mut names: Vec<String> = std::fs::read_dir(&mcp)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let (dotfiles, configs): (Vec<&String>, Vec<&String>) = (
        names.iter().filter(|n| n.starts_with('.')).collect(),
        names
            .iter()
            .filter(|n| n.ends_with(".json") || n.ends_with(".toml"))
            .collect(),
    );
    for name in configs {
        out.push(format!(
            "{} in {} is not a declaration; if it is another host's MCP configuration, `demiurge mcp import` it",
            t(name),
            t(&report.core.mcp_root)
        ));
    }
    for name in dotfiles {
        out.push(format!(
            "{} in {} is ignored (a dotfile is never a declaration)",
            t(name),
            t(&report.core.mcp_root)
        ));
    }
    out
}

pub(crate) fn run(cli: &Cli, as_json: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let grants = demiurge_mcp::authority::CapabilitySet::new(report.core.grants.iter().cloned());
    let warnings = warnings(&report);
    let code = u8::from(!report.errors.is_empty());
    if as_json {
        let declarations: Vec<_> = report
            .core
            .declarations
            .iter()
            .map(|d| declaration_row(d, &grants))
            .collect();
        let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
        let out = json!({
            "valid": code == 0,
            "declarations": declarations,
            "errors": errors,
            "warnings": warnings,
        });
        super::print_json(&out, true);
        return code;
    }
    for d in &report.core.declarations {
        let mark = |cap: &str| {
            if grants.allows(cap) {
                format!("{cap} granted")
            } else {
                format!("{cap} missing")
            }
        };
        println!(
            "{}  {}  {}  {}  {}",
            t(&d.server_id),
            d.transport().as_str(),
            if d.enabled { "enabled" } else { "disabled" },
            t(&mark(&d.connect_capability())),
            t(&mark(&d.call_capability))
        );
    }
    if report.core.declarations.is_empty() && report.errors.is_empty() {
        println!(
            "no MCP servers declared under {}",
            t(&report
                .core
                .root
                .join(&report.core.mcp_root)
                .display()
                .to_string())
        );
    }
    for e in &report.errors {
        println!("error: {e}");
    }
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    if report.errors.is_empty() {
        println!(
            "ok: {} declaration(s) valid",
            report.core.declarations.len()
        );
        0
    } else {
        println!("invalid: {} error(s)", report.errors.len());
        1
    }
}

/// One declaration as `init --check --json` and `mcp list --json` show it.
pub(crate) fn declaration_row(
    d: &core::Declaration,
    grants: &demiurge_mcp::authority::CapabilitySet,
) -> serde_json::Value {
    json!({
        "server": d.server_id,
        "path": d.path,
        "transport": d.transport().as_str(),
        "enabled": d.enabled,
        "connect_granted": grants.allows(&d.connect_capability()),
        "call_granted": grants.allows(&d.call_capability),
    })
}
