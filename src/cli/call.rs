//! `demiurge call TOOL [--args JSON] [--json]`: one turn, one call, operator view.

use std::io::{IsTerminal, Write};

use demiurge_mcp::redact::View;
use demiurge_mcp::result::ToolResult;
use serde_json::json;

use super::{Cli, start_runtime, t};

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
    let runtime = start_runtime(cli).await?;
    let outcome = async {
        let (session, _) = runtime.start_session(cli.session_spec()).await?;
        let catalog = session.prepare_turn().await?;
        super::tools::print_problems(&catalog, true);
        let progress = std::io::stderr().is_terminal().then(progress_line);
        let called = catalog.call_with_progress(tool, arguments, progress).await;
        if std::io::stderr().is_terminal() {
            // Clears the progress line, if one was drawn.
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
        Ok::<_, anyhow::Error>(called)
    }
    .await;
    runtime.shutdown().await;
    match outcome? {
        Ok(result) => {
            print_result(&result, as_json);
            Ok(if result.is_error { 1 } else { 0 })
        }
        Err(refused) => {
            if as_json {
                println!(
                    "{}",
                    json!({"tool": tool, "is_error": true, "content": refused.to_string(), "data": {}})
                );
            } else {
                eprintln!("error: {}", t(&refused.to_string()));
            }
            Ok(1)
        }
    }
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
        println!(
            "{}",
            json!({"tool": result.tool, "is_error": result.is_error, "content": view.content, "data": view.data})
        );
    } else if result.is_error {
        println!(
            "error from {}: {}",
            t(&result.tool),
            demiurge_mcp::text::escape_lines(&view.content)
        );
    } else {
        println!("{}", demiurge_mcp::text::escape_lines(&view.content));
    }
}
