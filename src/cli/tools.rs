//! `demiurge tools [--json]`: one session, one turn, the catalog.

use demiurge_mcp::{PrepareError, TurnCatalog};
use serde_json::json;

use super::{Cli, start_runtime};

pub(crate) async fn run(cli: &Cli, as_json: bool) -> anyhow::Result<u8> {
    let runtime = start_runtime(cli).await?;
    let (session, _) = runtime.start_session(cli.session_spec()).await?;
    let prepared = session.prepare_turn().await;
    let code = match prepared {
        Ok(catalog) => {
            if as_json {
                println!("{}", serde_json::to_string_pretty(&catalog_json(&catalog))?);
            } else {
                print_catalog(&catalog);
            }
            0
        }
        Err(PrepareError::Core(errors)) => {
            eprintln!("error: {errors}");
            1
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    };
    runtime.shutdown().await;
    Ok(code)
}

/// The stable JSON shape of `tools --json`.
pub(crate) fn catalog_json(catalog: &TurnCatalog) -> serde_json::Value {
    json!({
        "session": catalog.session(),
        "tools": catalog.tools().iter().map(|t| json!({
            "name": t.name,
            "server": t.server,
            "tool": t.tool,
            "description": t.description,
            "input_schema": t.input_schema.as_ref(),
        })).collect::<Vec<_>>(),
        "diagnostics": catalog.diagnostics(),
        "denied": catalog.denied(),
    })
}

pub(crate) fn print_catalog(catalog: &TurnCatalog) {
    if catalog.tools().is_empty() {
        println!("no tools");
    }
    for t in catalog.tools() {
        let description = t.description.lines().next().unwrap_or_default();
        println!("{:<40} {}", t.name, description);
    }
    for d in catalog.diagnostics() {
        println!("diagnostic: {} ({}): {}", d.server, d.path, d.message);
    }
    for d in catalog.denied() {
        println!("denied: {} ({}): {}", d.server, d.path, d.reason);
    }
}
