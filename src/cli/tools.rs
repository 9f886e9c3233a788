//! `demiurge tools [--json]`: one session, one turn, the catalog.

use demiurge_mcp::actors::{DESCRIBE_TOOL, SEARCH_TOOLS};
use demiurge_mcp::{PrepareError, TurnCatalog};
use serde_json::json;

use super::{Cli, start_runtime, t};

pub(crate) async fn run(cli: &Cli, as_json: bool) -> anyhow::Result<u8> {
    let runtime = start_runtime(cli).await?;
    let (session, _) = runtime.start_session(cli.session_spec()).await?;
    let prepared = session.prepare_turn().await;
    let code = match prepared {
        Ok(catalog) => {
            if as_json {
                super::print_json(&catalog_json(&catalog), true);
            } else {
                print_catalog(&catalog, true);
            }
            0
        }
        Err(PrepareError::Core(errors)) => {
            eprintln!("error: {}", t(&errors.to_string()));
            1
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
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
            "title": t.title,
            "annotations": t.annotations,
            "input_schema": t.input_schema.as_ref(),
            "output_schema": t.output_schema.as_deref(),
            "flags": t.flags,
            "tokens": t.tokens,
            "deferred": !catalog.is_loaded(&t.name),
            "deferred_start": t.deferred_start,
        })).collect::<Vec<_>>(),
        "budget": catalog.deferral(),
        "model_tools": catalog.deferral().is_some_and(|d| d.deferred).then(|| catalog.model_tools()),
        "diagnostics": catalog.diagnostics(),
        "denied": catalog.denied(),
    })
}

/// The catalog for a person: names, descriptions and diagnostics come from servers and
/// core authors, so each is escaped before the terminal sees it. Diagnostics and
/// denials go to stderr when `problems_to_stderr` (the `tools` command; the shell and
/// the demo keep one stream).
pub(crate) fn print_catalog(catalog: &TurnCatalog, problems_to_stderr: bool) {
    if catalog.tools().is_empty() {
        println!("no tools");
    }
    let mut rows = Vec::new();
    for tool in catalog.tools() {
        let description = super::summary_line(&tool.description);
        let hints = tool
            .annotations
            .as_ref()
            .map_or("", |a| match (a.read_only, a.destructive) {
                // The server's own claims, labelled as such.
                (_, Some(true)) => "[server: destructive] ",
                (Some(true), _) => "[server: read-only] ",
                _ => "",
            });
        let flagged = if tool.flags.is_empty() {
            ""
        } else {
            "[flagged: see tools --json] "
        };
        let deferred = if catalog.is_loaded(&tool.name) {
            ""
        } else {
            "[deferred] "
        };
        let lazy = if tool.deferred_start {
            "[starts when called] "
        } else {
            ""
        };
        rows.push(vec![
            t(&tool.name).into_owned(),
            format!("{flagged}{deferred}{lazy}{hints}{}", t(description)),
        ]);
    }
    if catalog.deferral().is_some_and(|d| d.deferred) {
        for host in catalog
            .model_tools()
            .iter()
            .filter(|m| m.name == SEARCH_TOOLS || m.name == DESCRIBE_TOOL)
        {
            rows.push(vec![
                host.name.clone(),
                format!("[host] {}", super::summary_line(&host.description)),
            ]);
        }
    }
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    print_problems(catalog, problems_to_stderr);
}

/// Diagnostics and denials of a turn, escaped, to stdout or (`to_stderr`) stderr.
pub(crate) fn print_problems(catalog: &TurnCatalog, to_stderr: bool) {
    let lines = catalog
        .diagnostics()
        .iter()
        .map(|d| ("diagnostic", &d.server, &d.path, &d.message))
        .chain(
            catalog
                .denied()
                .iter()
                .map(|d| ("denied", &d.server, &d.path, &d.reason)),
        );
    for (kind, server, path, message) in lines {
        let line = if path.is_empty() {
            // The turn's own note (its deferral rule), about no server.
            format!("note: {}", t(message))
        } else {
            format!("{kind}: {} ({}): {}", t(server), t(path), t(message))
        };
        if to_stderr {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}
