//! A minimal host embedding the runtime: start it, start a session, prepare a turn, call
//! a tool, evict, shut down.
//!
//! `cargo run --example embed` builds a temporary Agent Core whose server is this very
//! example run as `embed demo-server` (the built-in demo MCP server), so it needs
//! nothing else. Pass a core directory to use your own: `cargo run --example embed -- DIR`.
//!
//! Stdio servers run confined, and the confinement is applied by a launcher: this
//! binary, started in the server's place. So `main` hands over to the launcher first
//! (before any thread exists), and the configuration names this binary as it.

#[path = "support/demo_core.rs"]
mod demo_core;

use demiurge_mcp::events::MemorySink;
use demiurge_mcp::{ApprovalAnswer, FixedApprover, Runtime, RuntimeConfig, SessionSpec};

fn main() -> Result<std::process::ExitCode, Box<dyn std::error::Error + Send + Sync>> {
    if let Some(code) = demiurge_mcp::sandbox::launcher::run_if_invoked() {
        return Ok(code);
    }
    tokio::runtime::Runtime::new()?.block_on(host())?;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn host() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("demo-server") {
        return demiurge_mcp::demo_server::serve_stdio(Default::default()).await;
    }
    let scratch = tempfile::tempdir()?;
    let core = match arg {
        Some(dir) => std::path::PathBuf::from(dir),
        None => demo_core::write(scratch.path())?,
    };

    // A host decides approvals; this one allows everything for the session.
    let events = MemorySink::new();
    let mut config = RuntimeConfig::new(scratch.path().join("home"))
        .with_approver(FixedApprover(ApprovalAnswer::AllowSession))
        .with_events(events.clone());
    config.sandbox_launcher = std::env::current_exe().ok();
    let runtime = Runtime::start(config).await?;

    let (session, _previous) = runtime.start_session(SessionSpec::new(&core)).await?;
    let turn = session.prepare_turn().await?;
    println!("turn {} of session {}:", turn.turn(), session.id());
    for tool in turn.tools() {
        println!("  {}  ({}/{})", tool.name, tool.server, tool.tool);
    }
    for d in turn.diagnostics() {
        println!("  diagnostic {}: {}", d.server, d.message);
    }
    if turn.get("demo__echo").is_some() {
        let result = turn
            .call("demo__echo", serde_json::json!({"message": "hello, host"}))
            .await?;
        // The model view is what a host hands to its model.
        println!(
            "model sees: {}",
            result.view(demiurge_mcp::redact::View::Model).content
        );
    }

    let report = runtime.evict_session(session.id()).await?;
    println!(
        "evicted {} ({} connections closed)",
        report.session, report.connections_closed
    );
    runtime.shutdown().await;
    println!("{} events", events.events().len());
    Ok(())
}
