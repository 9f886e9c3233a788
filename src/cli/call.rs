//! `demiurge call TOOL [--args JSON] [--json]`: one turn, one call, operator view.

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
        Ok::<_, anyhow::Error>(catalog.call(tool, arguments).await)
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
