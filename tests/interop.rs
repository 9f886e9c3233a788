//! Interoperability with third-party MCP software from npm: the reference "everything"
//! server in streamable HTTP mode, and the public conformance package's client
//! scenarios `initialize`, `tools_call` and `sse-retry`, with this runtime as the client.
//! Skipped, with a message, where Node or npm is absent.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{Core, Recorder, eventually, harness_with};
use demiurge_mcp::net::UrlPolicy;
use serde_json::json;

const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";
const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.1.16";

/// Installs the packages once per test run under the target directory.
fn npm_prefix() -> Option<&'static Path> {
    static PREFIX: OnceLock<Option<PathBuf>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let works = |tool: &str| {
                Command::new(tool)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            if !works("node") || !works("npm") {
                eprintln!("SKIPPED: interoperability tests need node and npm on PATH");
                return None;
            }
            let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm-interop");
            let ready = prefix.join("node_modules/.bin/conformance").exists()
                && prefix
                    .join("node_modules/.bin/mcp-server-everything")
                    .exists();
            if !ready {
                std::fs::create_dir_all(&prefix).ok()?;
                let out = Command::new("npm")
                    .args([
                        "install",
                        "--no-audit",
                        "--no-fund",
                        "--loglevel=error",
                        "--prefix",
                    ])
                    .arg(&prefix)
                    .args([EVERYTHING, CONFORMANCE])
                    .output()
                    .ok()?;
                if !out.status.success() {
                    panic!(
                        "npm install failed (the registry is reachable in CI): {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            Some(prefix)
        })
        .as_deref()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn the_reference_everything_server_works_end_to_end() {
    let Some(prefix) = npm_prefix() else { return };
    let port = free_port();
    let mut server = tokio::process::Command::new("node")
        .arg(prefix.join("node_modules/.bin/mcp-server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up = eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
    .await;
    assert!(up, "the everything server did not start");

    let core = Core::new().grant_servers(&["everything"]).server(
        "everything",
        &format!(
            "transport: streamable_http\nurl: http://127.0.0.1:{port}/mcp\napproval_policy: auto\n"
        ),
    );
    let h = harness_with(Recorder::allow(), |mut c| {
        c.url_policy = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
        c.resolver = Arc::new(demiurge_mcp::net::StaticResolver::new());
        c
    })
    .await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let catalog = session.prepare_turn().await.unwrap();
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    assert!(catalog.tools().len() >= 5, "{:?}", common::names(&catalog));
    let echo = catalog
        .call("everything__echo", json!({"message": "interop"}))
        .await
        .unwrap();
    assert!(
        !echo.is_error && echo.views.operator.content.contains("interop"),
        "{:?}",
        echo.views.operator
    );
    h.finish().await;
    server.kill().await.ok();
}

fn conformance(scenario: &str) {
    let Some(prefix) = npm_prefix() else { return };
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/register.mjs");
    let out = Command::new("node")
        .arg("--import")
        .arg(&shim)
        .arg(prefix.join("node_modules/.bin/conformance"))
        .args([
            "client",
            "--scenario",
            scenario,
            "--timeout",
            "60000",
            "--command",
        ])
        .arg(format!(
            "{} conformance-client",
            env!("CARGO_BIN_EXE_demiurge")
        ))
        .output()
        .unwrap();
    let output = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scenario {scenario}:\n{output}");
    assert!(
        output.contains("OVERALL: PASSED") && !output.contains("FAILURE"),
        "scenario {scenario}:\n{output}"
    );
}

#[test]
fn conformance_initialize() {
    conformance("initialize");
}

#[test]
fn conformance_tools_call() {
    conformance("tools_call");
}

#[test]
fn conformance_sse_retry() {
    conformance("sse-retry");
}
