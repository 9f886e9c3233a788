//! `demiurge call TOOL [--args JSON] [--json]`: one turn, one call, operator view.

use std::io::{IsTerminal, Write};

use demiurge_mcp::CallError;
use demiurge_mcp::actors::{DESCRIBE_TOOL, SEARCH_TOOLS};
use demiurge_mcp::redact::View;
use demiurge_mcp::result::ToolResult;
use serde_json::json;

use super::{Cli, start_runtime, t};

/// The enabled servers of the core, and those of them that can own the exposed name
/// `name` (a tool's or a prompt's: those sharing its prefix).
pub(crate) fn owners_of(cli: &Cli, name: &str) -> (Vec<String>, Vec<String>) {
    let ids: Vec<String> = demiurge_mcp::core::load(&cli.core_dir())
        .map(|core| core.enabled().map(|d| d.server_id.clone()).collect())
        .unwrap_or_default();
    let owners = demiurge_mcp::naming::same_prefix(ids.iter().map(String::as_str), name);
    (ids, owners)
}

pub(crate) async fn run(cli: &Cli, tool: &str, args: &str, as_json: bool) -> anyhow::Result<u8> {
    let arguments: serde_json::Value = match serde_json::from_str(args) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(_) | Err(_) => {
            eprintln!(
                "error: --args must be a JSON object, for example --args '{{\"message\": \"hi\"}}'"
            );
            return Ok(super::USAGE);
        }
    };
    // Only the servers that can own TOOL are started (those sharing its name prefix,
    // so it is named as in a full turn); a name no server can own fails at once.
    let host_tool = [SEARCH_TOOLS, DESCRIBE_TOOL].contains(&tool);
    let (ids, owners) = owners_of(cli, tool);
    if owners.is_empty() && !ids.is_empty() && !host_tool {
        let prefix = tool.split_once("__").map_or(tool, |(p, _)| p);
        let hint = demiurge_mcp::text::closest(prefix, ids.iter().map(String::as_str))
            .map(|id| format!("; did you mean a tool of `{}` (`{}__...`)?", t(id), t(id)))
            .unwrap_or_else(|| "; run `demiurge tools` to list them".into());
        eprintln!(
            "error: no declared server owns a tool named `{}`{hint}",
            t(tool)
        );
        return Ok(1);
    }
    let runtime = start_runtime(cli).await?;
    let outcome = async {
        let (session, _) = runtime.start_session(cli.session_spec()).await?;
        let catalog = if owners.is_empty() {
            session.prepare_turn().await?
        } else {
            session.prepare_turn_for(&owners).await?
        };
        super::tools::print_problems(&catalog, true);
        if !callable(&catalog, tool, host_tool) {
            return Ok(Err(None));
        }
        // A person named the tool: its definition is theirs to have read.
        catalog.load(&[tool]);
        let progress = std::io::stderr().is_terminal().then(progress_line);
        let called = catalog.call_with_progress(tool, arguments, progress).await;
        if std::io::stderr().is_terminal() {
            // Clears the progress line, if one was drawn.
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        Ok::<_, anyhow::Error>(called.map_err(Some))
    }
    .await;
    runtime.shutdown().await;
    match outcome? {
        Err(None) => Ok(1),
        Ok(result) => {
            print_result(&result, as_json);
            Ok(if result.is_error { 1 } else { 0 })
        }
        Err(Some(refused)) => {
            if as_json {
                super::print_json(
                    &json!({"tool": tool, "is_error": true, "content": refused.to_string(), "data": {}}),
                    false,
                );
            } else if let CallError::ServerUnavailable { reason, .. } = &refused {
                // A server started for this call that did not start: why (redacted).
                eprintln!("error: {}: {}", t(&refused.to_string()), t(reason));
            } else {
                eprintln!("error: {}", t(&refused.to_string()));
            }
            Ok(1)
        }
    }
}

/// Whether `tool` can be called in `catalog`; else says why on stderr (its server did
/// not connect, it is a host tool of deferred turns only, or no tool has that name).
fn callable(catalog: &demiurge_mcp::TurnCatalog, tool: &str, host_tool: bool) -> bool {
    if let Some((server, _)) = catalog.unavailable(tool) {
        // Its diagnostic or denial was printed before.
        eprintln!(
            "error: `{}` is not available: server `{}` did not connect this turn (the reason is above)",
            t(tool),
            t(&server)
        );
        return false;
    }
    if host_tool && catalog.deferral().is_none_or(|d| !d.deferred) {
        eprintln!(
            "error: `{}` is a tool of a deferred turn only: give a --tool-budget the turn's definitions exceed",
            t(tool)
        );
        return false;
    }
    if catalog.get(tool).is_none() && !host_tool {
        let names = catalog.tools().iter().map(|e| e.name.as_str());
        let hint = demiurge_mcp::text::closest(tool, names)
            .map(|n| format!("; did you mean `{}`?", t(n)))
            .unwrap_or_default();
        eprintln!("error: unknown tool `{}`{hint}", t(tool));
        return false;
    }
    true
}

/// Draws the server's progress on one terminal line (stderr), redrawn in place at most
/// ten times a second by a task of its own: the sink only stores the latest progress,
/// so a slow terminal holds up nothing. The server's message is redacted by the
/// runtime and escaped here.
fn progress_line() -> demiurge_mcp::ProgressSink {
    let (latest, mut seen) = tokio::sync::watch::channel(None::<demiurge_mcp::Progress>);
    tokio::spawn(async move {
        while seen.changed().await.is_ok() {
            let Some(p) = seen.borrow_and_update().clone() else {
                continue;
            };
            let of = p.total.map(|total| format!("/{total}")).unwrap_or_default();
            let message = p.message.as_deref().map(t).unwrap_or_default();
            let line: String = format!("progress {}{of} {message}", p.progress)
                .chars()
                .take(100)
                .collect();
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[K{line}");
            let _ = err.flush();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });
    std::sync::Arc::new(move |p: demiurge_mcp::Progress| {
        let _ = latest.send(Some(p));
    })
}

/// Prints the operator view.
pub(crate) fn print_result(result: &ToolResult, as_json: bool) {
    let view = result.view(View::Operator);
    if as_json {
        let p = &result.provenance;
        super::print_json(
            &json!({
                "tool": result.tool,
                "is_error": result.is_error,
                "content": view.content,
                "data": view.data,
                "blocks": blocks_json(&view.blocks),
                "provenance": {"server": p.server, "tool": p.tool, "duration_ms": p.duration_ms},
            }),
            false,
        );
        return;
    }
    // One line stays one line; more go under a header, indented, so no line of a
    // result can pass for one of the CLI's own.
    let single = !view.content.contains('\n');
    match (result.is_error, single) {
        (true, true) => println!(
            "error from {}: {}",
            t(&result.tool),
            demiurge_mcp::text::indented(&view.content, "")
        ),
        (true, false) => println!(
            "error from {}:\n{}",
            t(&result.tool),
            demiurge_mcp::text::indented(&view.content, "  ")
        ),
        (false, true) => println!("{}", demiurge_mcp::text::indented(&view.content, "")),
        (false, false) => println!(
            "{}:\n{}",
            t(&result.tool),
            demiurge_mcp::text::indented(&view.content, "  ")
        ),
    }
}

/// The blocks of a view for `--json`: as typed, and a binary resource's decoded size
/// beside its base64 data.
fn blocks_json(blocks: &[demiurge_mcp::result::Block]) -> serde_json::Value {
    let mut out = serde_json::to_value(blocks).unwrap_or_default();
    for block in out.as_array_mut().into_iter().flatten() {
        if let Some(blob) = block.get("blob").and_then(serde_json::Value::as_str) {
            let padding = blob.bytes().rev().take_while(|&b| b == b'=').count();
            let size = (blob.len() / 4 * 3).saturating_sub(padding);
            block["size"] = json!(size);
        }
    }
    out
}
