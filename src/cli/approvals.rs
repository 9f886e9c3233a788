//! `demiurge approvals list [--json]` and `demiurge approvals revoke ID|--all`: the
//! "always" answers kept in the runtime home.

use demiurge_mcp::authority::RememberedApprovals;

use super::{Cli, t};

/// `approvals list [--json]`.
pub(crate) fn list(cli: &Cli, as_json: bool) -> u8 {
    let mut store =
        RememberedApprovals::open(&cli.home_dir(&demiurge_mcp::HostEnv::from_process()));
    let entries = store.list();
    if as_json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| serde_json::json!({"id": e.id(), "approval": e}))
            .collect();
        super::print_json(&serde_json::json!({ "approvals": rows }), true);
        return 0;
    }
    if entries.is_empty() {
        println!("no remembered approvals");
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.id(),
                e.action.to_string(),
                t(&e.server).into_owned(),
                t(&shown_tool(e.tool.as_deref())).into_owned(),
                format!(
                    "(declaration {})",
                    t(&e.fingerprint.chars().take(12).collect::<String>())
                ),
            ]
        })
        .collect();
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    0
}

/// `approvals revoke ID|--all`.
pub(crate) fn revoke(cli: &Cli, id: Option<&str>, all: bool) -> u8 {
    let mut store =
        RememberedApprovals::open(&cli.home_dir(&demiurge_mcp::HostEnv::from_process()));
    let revoked = match (id, all) {
        (_, true) => store.revoke(|_| true),
        (Some(id), false) => store.revoke(|e| e.id() == id),
        (None, false) => {
            eprintln!(
                "error: name the approval to revoke (its id from `demiurge approvals list`) or pass --all"
            );
            return super::USAGE;
        }
    };
    match revoked {
        Ok(0) => {
            eprintln!(
                "error: no remembered approval `{}`",
                t(id.unwrap_or_default())
            );
            1
        }
        Ok(n) => {
            println!("revoked {n} approval(s)");
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

/// A remembered approval's tool as a person reads it: `name (definition <12 hex>)` for
/// a call bound to a tool's definition, `-` for a connect.
fn shown_tool(tool: Option<&str>) -> String {
    match tool.map(|t| t.rsplit_once("#sha256:")) {
        Some(Some((name, digest))) => {
            let short: String = digest.chars().take(12).collect();
            format!("{name} (definition {short})")
        }
        Some(None) => tool.unwrap_or_default().to_string(),
        None => "-".into(),
    }
}
