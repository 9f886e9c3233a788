//! Interoperability with third-party MCP software from npm: the reference "everything"
//! server over stdio and streamable HTTP (restarted under a session) and beyond tools
//! (roots, progress, logging, resources, prompts), the reference filesystem server
//! learning its directories from roots, and the client scenarios of the public
//! conformance package (0.1.16 and the 0.2.0-alpha.12 pre-release), with this runtime as
//! the client; the Python reference servers and `uvx` from PyPI; echo servers on the
//! TypeScript and Python SDKs in both protocol eras, over stdio and streamable HTTP.
//! Skipped, with a message, where Node or npm is absent.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::serving::{serve_http, stop_serving};
use common::{Core, Recorder, eventually, harness_with};
use demiurge_mcp::RuntimeConfig;
use demiurge_mcp::net::UrlPolicy;
use demiurge_mcp::result::Block;
use serde_json::json;

const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";
const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The pre-release whose client scenarios test MCP 2026-07-28 too.
const CONFORMANCE_NEXT: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
const MEMORY: &str = "@modelcontextprotocol/server-memory@2026.8.31";
/// The TypeScript SDK of both eras (`tests/interop/ts_echo.mjs` runs on it).
const TS_SDK: &str = "@modelcontextprotocol/server@2.4.0";
/// The TypeScript SDK's client (`tests/interop/ts_serve_client.mjs` runs on it).
const TS_CLIENT: &str = "@modelcontextprotocol/client@2.4.0";
/// The MCP Inspector's command line.
const INSPECTOR_CLI: &str = "@modelcontextprotocol/inspector-cli@1.0.3";
const ZOD: &str = "zod@4.6.7";

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
                // Straight to the terminal: the test harness would hide an `eprintln!`
                // of a passing test.
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: tests/interop.rs needs node and npm on PATH; its tests pass without running"
                );
                return None;
            }
            let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm-interop");
            let ready = [
                "conformance",
                "mcp-server-everything",
                "mcp-server-filesystem",
                "mcp-server-memory",
            ]
            .iter()
            .all(|bin| prefix.join("node_modules/.bin").join(bin).exists())
                && prefix
                    .join("node_modules/@modelcontextprotocol/server/package.json")
                    .exists()
                && prefix
                    .join("node_modules/@modelcontextprotocol/client/package.json")
                    .exists()
                && prefix
                    .join("node_modules/@modelcontextprotocol/inspector-cli/package.json")
                    .exists();
            if !ready {
                std::fs::create_dir_all(&prefix).ok()?;
                let mut npm = Command::new("npm");
                npm.args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                ])
                .arg(&prefix)
                .args([
                    EVERYTHING,
                    CONFORMANCE,
                    FILESYSTEM,
                    MEMORY,
                    TS_SDK,
                    TS_CLIENT,
                    INSPECTOR_CLI,
                    ZOD,
                ]);
                install(npm, "npm install");
            }
            // Beside its packages, so that node resolves them from it.
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ts_echo.mjs");
            std::fs::copy(script, prefix.join("ts_echo.mjs")).ok()?;
            let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ts_serve_client.mjs");
            std::fs::copy(client, prefix.join("ts_serve_client.mjs")).ok()?;
            Some(prefix)
        })
        .as_deref()
}

const TIME: &str = "mcp-server-time==2026.10.19";
const GIT: &str = "mcp-server-git==2026.10.19";
const UV: &str = "uv==0.13.9";

/// A virtual environment with the Python reference servers (from PyPI), made once per
/// test run under the target directory; `None` (the tests pass without running) when
/// this machine has no `python3` with `venv`.
fn pypi_prefix() -> Option<&'static Path> {
    static PREFIX: OnceLock<Option<PathBuf>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pypi-interop");
            let ready = ["mcp-server-time", "mcp-server-git", "uvx"]
                .iter()
                .all(|bin| prefix.join("bin").join(bin).exists());
            if ready {
                return Some(prefix);
            }
            let venv = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&prefix)
                .output();
            if !venv.is_ok_and(|o| o.status.success()) {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: the PyPI servers of tests/interop.rs need python3 with venv"
                );
                return None;
            }
            let mut pip = Command::new(prefix.join("bin/pip"));
            pip.args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                TIME,
                GIT,
                UV,
            ]);
            install(pip, "pip install");
            Some(prefix)
        })
        .as_deref()
}

/// Runs a package installer; a failure fails the test (the registries are reachable
/// in CI), with what the installer said.
fn install(mut command: Command, what: &str) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed (the registry is reachable in CI): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A declaration running the npm package binary `bin` under node with `args` (one
/// argument or none), approved without asking, plus `extra` lines.
fn node_server(prefix: &Path, bin: &str, args: &str, extra: &str) -> String {
    let path = serde_json::to_string(&prefix.join("node_modules/.bin").join(bin)).unwrap();
    let args = if args.is_empty() {
        path
    } else {
        format!("{path}, {args}")
    };
    format!(
        "command: node\nargs: [{args}]\napproval_policy: auto\nconnect_timeout_seconds: 60\n{extra}"
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The exposed name of the everything server's tool `raw`.
fn exposed(catalog: &demiurge_mcp::TurnCatalog, raw: &str) -> String {
    catalog
        .tools()
        .iter()
        .find(|t| t.tool == raw)
        .unwrap_or_else(|| panic!("no tool {raw}: {:?}", common::names(catalog)))
        .name
        .clone()
}

/// What a host routes and renders, from a server written with the TypeScript SDK
/// (which writes each answer's `id` after its `result`): tool hints and output schemas
/// on the entries; images, resource links, embedded resources and structured content
/// as typed results; provenance on every result.
async fn exercise_everything(catalog: &demiurge_mcp::TurnCatalog) {
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    let echo_entry = catalog.tools().iter().find(|t| t.tool == "echo").unwrap();
    let hints = echo_entry.annotations.as_ref().expect("echo is annotated");
    assert_eq!(
        (hints.read_only, hints.destructive),
        (Some(true), Some(false))
    );
    let echo = catalog
        .call(&echo_entry.name.clone(), json!({"message": "interop"}))
        .await
        .unwrap();
    assert!(
        !echo.is_error
            && echo
                .view(demiurge_mcp::redact::View::Operator)
                .content
                .contains("interop"),
        "{:?}",
        echo.view(demiurge_mcp::redact::View::Operator)
    );
    assert_eq!(echo.provenance.server, "everything");
    assert_eq!(echo.provenance.tool, "echo");
    assert!(echo.provenance.started);

    let image = catalog
        .call(&exposed(catalog, "get-tiny-image"), json!({}))
        .await
        .unwrap();
    let found = image
        .view(demiurge_mcp::redact::View::Model)
        .blocks
        .iter()
        .find_map(|b| match b {
            Block::Image {
                mime_type,
                data: Some(data),
                ..
            } => Some((mime_type.clone(), data.len())),
            _ => None,
        });
    let (mime, len) = found.unwrap_or_else(|| {
        panic!(
            "no image: {:?}",
            image.view(demiurge_mcp::redact::View::Operator)
        )
    });
    assert_eq!(mime, "image/png");
    assert!(len > 100, "the image data was dropped");
    assert!(
        image
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .contains("[image image/png]")
    );

    let links = catalog
        .call(&exposed(catalog, "get-resource-links"), json!({"count": 2}))
        .await
        .unwrap();
    let uris: Vec<&str> = links
        .view(demiurge_mcp::redact::View::Model)
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::ResourceLink { uri, .. } => Some(uri.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        uris.len(),
        2,
        "{:?}",
        links.view(demiurge_mcp::redact::View::Model).blocks
    );
    assert!(uris.iter().all(|u| u.starts_with("demo://")), "{uris:?}");

    let reference = catalog
        .call(&exposed(catalog, "get-resource-reference"), json!({}))
        .await
        .unwrap();
    let embedded = reference.view(demiurge_mcp::redact::View::Model).blocks.iter().any(
        |b| matches!(b, Block::Resource { uri, text: Some(_), .. } if uri.starts_with("demo://")),
    );
    assert!(
        embedded,
        "{:?}",
        reference.view(demiurge_mcp::redact::View::Model).blocks
    );

    let name = exposed(catalog, "get-structured-content");
    assert!(catalog.get(&name).unwrap().output_schema.is_some());
    let weather = catalog
        .call(&name, json!({"location": "Chicago"}))
        .await
        .unwrap();
    assert!(
        weather.view(demiurge_mcp::redact::View::Model).data["temperature"].is_number(),
        "{:?}",
        weather.view(demiurge_mcp::redact::View::Model)
    );
    assert!(weather.output_schema.is_some());
    // Text and structured content both: the model reads the server's text.
    assert!(
        !weather
            .view(demiurge_mcp::redact::View::Model)
            .content
            .contains("\n  "),
        "{}",
        weather.view(demiurge_mcp::redact::View::Model).content
    );
}

/// The everything server over stdio with `extra` declaration lines, exercised; its
/// harness, for what the caller checks after.
async fn everything_over_stdio(prefix: &Path, extra: &str, confined: bool) -> common::Harness {
    let core = Core::new().grant_servers(&["everything"]).server(
        "everything",
        &node_server(prefix, "mcp-server-everything", "stdio", extra),
    );
    let h = harness_with(Recorder::allow(), |c| product_sandbox(c, confined)).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    exercise_everything(&catalog).await;
    h
}

#[tokio::test]
async fn the_reference_everything_server_over_stdio() {
    let Some(prefix) = npm_prefix() else { return };
    everything_over_stdio(prefix, "", false)
        .await
        .finish()
        .await;
}

/// The product's sandbox for undeclared servers when `confined`, else none (the
/// harness's own default: its shell servers write beside the workspace).
fn product_sandbox(mut config: RuntimeConfig, confined: bool) -> RuntimeConfig {
    if confined {
        config.sandbox_default = Some(demiurge_mcp::sandbox::Sandbox::confined_default());
    }
    config
}

/// The same server under the default sandbox (its network through the egress proxy)
/// and with no network at all: written by others, it still starts, lists and answers,
/// reading only its install, the system and the workspace.
#[tokio::test]
async fn the_everything_server_works_confined() {
    let Some(prefix) = npm_prefix() else { return };
    for (extra, shown) in [
        ("", "network through the egress proxy"),
        ("sandbox: {network: none}\n", "network none"),
    ] {
        let h = everything_over_stdio(prefix, extra, true).await;
        let preview = h.approver.requests()[0].preview.render();
        assert!(
            preview.contains("sandbox: confined") && preview.contains(shown),
            "{preview}"
        );
        h.finish().await;
    }
}

/// The reference memory server, confined by default, keeps its graph in the file it
/// is told (in the workspace): it creates an entity and reads it back.
#[tokio::test]
async fn the_memory_server_works_confined() {
    let Some(prefix) = npm_prefix() else { return };
    let core = Core::new().grant_servers(&["memory"]);
    let file = core.root().join("memory.jsonl");
    core.write(
        "memory",
        &node_server(
            prefix,
            "mcp-server-memory",
            "",
            &format!(
                "env:\n  MEMORY_FILE_PATH: {}\n",
                serde_json::to_string(&file).unwrap()
            ),
        ),
    );
    let (h, catalog) = confined_turn(&core).await;
    let created = catalog
        .call(
            &exposed(&catalog, "create_entities"),
            json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}),
        )
        .await
        .unwrap();
    assert!(
        !created.is_error,
        "{:?}",
        created.view(demiurge_mcp::redact::View::Operator)
    );
    let graph = catalog
        .call(&exposed(&catalog, "read_graph"), json!({}))
        .await
        .unwrap();
    let text = graph
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(text.contains("wrote the first program"), "{text}");
    assert!(
        std::fs::read_to_string(&file).unwrap().contains("Ada"),
        "the graph is in the workspace"
    );
    h.finish().await;
}

/// The everything server beyond tools, over stdio: its roots tool sees the workspace,
/// a long operation's progress reaches the caller, simulated logging becomes events,
/// its resources and templates are listed and read, its prompts listed and got.
#[tokio::test]
async fn the_everything_server_beyond_tools() {
    let Some(prefix) = npm_prefix() else { return };
    let core = Core::new().grant_servers(&["everything"]).server(
        "everything",
        &node_server(
            prefix,
            "mcp-server-everything",
            "stdio",
            "log_level: debug\n",
        ),
    );
    let h = harness_with(Recorder::allow(), |c| c).await;
    let catalog = common::clean_turn(&h, &core).await;

    // Roots: registered only for a client that advertises them.
    let workspace = url::Url::from_directory_path(core.root()).unwrap();
    let mut roots = String::new();
    common::eventually_every(
        Duration::from_secs(5),
        Duration::from_millis(100),
        async || {
            let listed = catalog
                .call(&exposed(&catalog, "get-roots-list"), json!({}))
                .await
                .unwrap();
            roots = listed
                .view(demiurge_mcp::redact::View::Operator)
                .content
                .clone();
            roots.contains(workspace.as_str().trim_end_matches('/'))
        },
    )
    .await;
    assert!(
        roots.contains(workspace.as_str().trim_end_matches('/')),
        "{roots}"
    );

    // Progress to the caller.
    let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&steps);
    let long = catalog
        .call_with_progress(
            &exposed(&catalog, "trigger-long-running-operation"),
            json!({"duration": 1, "steps": 3}),
            Some(Arc::new(move |p: demiurge_mcp::Progress| {
                sink.lock().unwrap().push(p.progress);
            })),
        )
        .await
        .unwrap();
    assert!(
        !long.is_error,
        "{:?}",
        long.view(demiurge_mcp::redact::View::Operator)
    );
    assert_eq!(*steps.lock().unwrap(), [1.0, 2.0, 3.0]);

    // Logging: one message at once after the toggle.
    catalog
        .call(&exposed(&catalog, "toggle-simulated-logging"), json!({}))
        .await
        .unwrap();
    let logged = eventually(Duration::from_secs(10), || {
        !h.sink.of_type("mcp.server_log").is_empty()
    })
    .await;
    assert!(logged, "no log message became an event");

    // Resources and templates.
    let resources: Vec<String> = catalog.resources().map(|r| r.uri.clone()).collect();
    let document = resources
        .iter()
        .find(|u| u.starts_with("demo://resource/static/document/"))
        .unwrap_or_else(|| panic!("{resources:?}"))
        .clone();
    let read = catalog
        .read_resource("everything", &document)
        .await
        .unwrap();
    assert!(
        !read.is_error,
        "{:?}",
        read.view(demiurge_mcp::redact::View::Operator)
    );
    assert!(
        read.view(demiurge_mcp::redact::View::Model)
            .blocks
            .iter()
            .any(|b| matches!(b, Block::Resource { uri, .. } if *uri == document)),
        "{:?}",
        read.view(demiurge_mcp::redact::View::Model).blocks
    );
    assert!(
        catalog
            .resource_templates()
            .any(|t| t.uri_template == "demo://resource/dynamic/text/{resourceId}")
    );
    let dynamic = catalog
        .read_resource("everything", "demo://resource/dynamic/text/7")
        .await
        .unwrap();
    assert!(
        !dynamic.is_error,
        "{:?}",
        dynamic.view(demiurge_mcp::redact::View::Operator)
    );

    // Prompts, with and without arguments.
    let names: Vec<String> = catalog.prompts().map(|p| p.name.clone()).collect();
    let simple = names
        .iter()
        .find(|n| n.ends_with("__simple-prompt"))
        .unwrap_or_else(|| panic!("{names:?}"));
    let got = catalog.get_prompt(simple, json!({})).await.unwrap();
    assert_eq!(
        got.messages[0].content["text"],
        "This is a simple prompt without arguments."
    );
    let with_args = catalog
        .prompts()
        .find(|p| p.arguments.iter().any(|a| a.required))
        .unwrap_or_else(|| panic!("no prompt with a required argument: {names:?}"));
    let args: serde_json::Map<String, serde_json::Value> = with_args
        .arguments
        .iter()
        .map(|a| (a.name.clone(), json!("Paris")))
        .collect();
    let got = catalog
        .get_prompt(&with_args.name.clone(), serde_json::Value::Object(args))
        .await
        .unwrap();
    assert!(!got.messages.is_empty());
    h.finish().await;
}

/// The reference filesystem server started without a directory learns its allowed
/// directories from the client's roots: the workspace, and only it. It runs under the
/// default sandbox, which it never notices.
#[tokio::test]
async fn the_filesystem_server_sees_the_workspace_through_roots() {
    let Some(prefix) = npm_prefix() else { return };
    let core = Core::new()
        .grant_servers(&["fs"])
        // Confined by the default: reading and writing the workspace is all it needs.
        .server("fs", &node_server(prefix, "mcp-server-filesystem", "", ""));
    let file = core.root().join("hello.txt");
    std::fs::write(&file, "hello from the workspace\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("elsewhere.txt");
    std::fs::write(&secret, "not yours").unwrap();
    let (h, catalog) = confined_turn(&core).await;
    let read = exposed(&catalog, "read_text_file");
    // The server asks for the roots after initialize; give it a moment.
    let mut text = String::new();
    for _ in 0..100 {
        let result = catalog
            .call(&read, json!({"path": file.display().to_string()}))
            .await
            .unwrap();
        text = result
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .clone();
        if !result.is_error {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(text.contains("hello from the workspace"), "{text}");
    let denied = catalog
        .call(&read, json!({"path": secret.display().to_string()}))
        .await
        .unwrap();
    assert!(
        denied.is_error,
        "{:?}",
        denied.view(demiurge_mcp::redact::View::Operator)
    );
    assert!(
        !denied
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .contains("not yours")
    );
    h.finish().await;
}

async fn start_everything(prefix: &Path, port: u16) -> tokio::process::Child {
    let server = tokio::process::Command::new("node")
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
    server
}

#[tokio::test]
async fn the_reference_everything_server_over_http_and_its_restart() {
    let Some(prefix) = npm_prefix() else { return };
    let port = free_port();
    let mut server = start_everything(prefix, port).await;
    let core = Core::new().grant_servers(&["everything"]).server(
        "everything",
        &format!(
            "transport: streamable_http\nurl: http://127.0.0.1:{port}/mcp\napproval_policy: auto\n"
        ),
    );
    let h = harness_with(Recorder::allow(), |mut c| {
        c.url_policy = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
        c.resolver = Arc::new(demiurge_mcp::net::StaticResolver::new());
        c.failure_ttl = Duration::from_millis(200);
        c
    })
    .await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    exercise_everything(&catalog).await;

    // The server restarts and forgets its sessions: a call is answered (a new session)
    // or fails at once, never waits for its timeout; the next turns recover.
    server.kill().await.ok();
    let _ = server.wait().await;
    let mut server = start_everything(prefix, port).await;
    let echo = exposed(&catalog, "echo");
    let started = std::time::Instant::now();
    let after = catalog
        .call(&echo, json!({"message": "after restart"}))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call waited {:?} after the restart",
        started.elapsed()
    );
    let answered = after.as_ref().is_ok_and(|r| !r.is_error);
    if !answered {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let recovered = common::eventually_every(
            Duration::from_secs(5),
            Duration::from_millis(100),
            async || {
                let next = session.prepare_turn().await.unwrap();
                let r = next.call(&echo, json!({"message": "after restart"})).await;
                r.is_ok_and(|r| !r.is_error)
            },
        )
        .await;
        assert!(
            recovered,
            "the runtime never reconnected after the restart: {after:?}"
        );
    }
    h.finish().await;
    server.kill().await.ok();
}

/// The conformance pre-release in a prefix of its own (its binary has the same name
/// as 0.1.16's), installed once per test run; `None` without node and npm.
fn next_prefix() -> Option<&'static Path> {
    static PREFIX: OnceLock<Option<PathBuf>> = OnceLock::new();
    PREFIX
        .get_or_init(|| {
            npm_prefix()?;
            let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm-conformance-next");
            if !prefix.join("node_modules/.bin/conformance").exists() {
                std::fs::create_dir_all(&prefix).ok()?;
                let mut npm = Command::new("npm");
                npm.args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    "--prefix",
                ])
                .arg(&prefix)
                .arg(CONFORMANCE_NEXT);
                install(npm, "npm install");
            }
            Some(prefix)
        })
        .as_deref()
}

fn conformance(scenario: &str) {
    let Some(prefix) = npm_prefix() else { return };
    conformance_in(prefix, scenario);
}

/// A client scenario of the conformance pre-release (0.2.0-alpha.12).
fn conformance_next(scenario: &str) {
    let Some(prefix) = next_prefix() else { return };
    conformance_in(prefix, scenario);
}

fn conformance_in(prefix: &Path, scenario: &str) {
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

/// The authorization scenarios: OAuth 2.1 through the runtime's own code paths (the
/// pinned client under the URL policy, rmcp's state machine, the conformance client's
/// headless authorizer following the harness's redirect).
macro_rules! conformance_auth {
    ($($name:ident => $scenario:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                conformance($scenario);
            }
        )*
    };
}

conformance_auth! {
    conformance_auth_metadata_default => "auth/metadata-default",
    conformance_auth_metadata_var1 => "auth/metadata-var1",
    conformance_auth_metadata_var2 => "auth/metadata-var2",
    conformance_auth_metadata_var3 => "auth/metadata-var3",
    conformance_auth_basic_cimd => "auth/basic-cimd",
    conformance_auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    conformance_auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    conformance_auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    conformance_auth_scope_step_up => "auth/scope-step-up",
    conformance_auth_scope_retry_limit => "auth/scope-retry-limit",
    conformance_auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    conformance_auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    conformance_auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    conformance_auth_pre_registration => "auth/pre-registration",
    conformance_auth_2025_03_26_oauth_metadata_backcompat => "auth/2025-03-26-oauth-metadata-backcompat",
    conformance_auth_2025_03_26_oauth_endpoint_fallback => "auth/2025-03-26-oauth-endpoint-fallback",
    conformance_auth_resource_mismatch => "auth/resource-mismatch",
    conformance_auth_offline_access_scope => "auth/offline-access-scope",
    conformance_auth_offline_access_not_supported => "auth/offline-access-not-supported",
    conformance_auth_client_credentials_basic => "auth/client-credentials-basic",
    conformance_auth_client_credentials_jwt => "auth/client-credentials-jwt",
    conformance_elicitation_sep1034_client_defaults => "elicitation-sep1034-client-defaults",
}

/// The client scenarios of the conformance pre-release that test MCP 2026-07-28 and
/// the extensions beside the 0.1.16 ones: every one but the four authorization
/// extensions the runtime does not implement (README, "Conformance").
macro_rules! conformance_next {
    ($($name:ident => $scenario:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                conformance_next($scenario);
            }
        )*
    };
}

conformance_next! {
    next_initialize => "initialize",
    next_tools_call => "tools_call",
    next_elicitation_defaults => "elicitation-sep1034-client-defaults",
    next_sse_retry => "sse-retry",
    next_request_metadata => "request-metadata",
    next_auth_metadata_default => "auth/metadata-default",
    next_auth_metadata_var1 => "auth/metadata-var1",
    next_auth_metadata_var2 => "auth/metadata-var2",
    next_auth_metadata_var3 => "auth/metadata-var3",
    next_auth_basic_cimd => "auth/basic-cimd",
    next_auth_scope_from_www_authenticate => "auth/scope-from-www-authenticate",
    next_auth_scope_from_scopes_supported => "auth/scope-from-scopes-supported",
    next_auth_scope_omitted_when_undefined => "auth/scope-omitted-when-undefined",
    next_auth_scope_step_up => "auth/scope-step-up",
    next_auth_scope_retry_limit => "auth/scope-retry-limit",
    next_auth_token_endpoint_auth_basic => "auth/token-endpoint-auth-basic",
    next_auth_token_endpoint_auth_post => "auth/token-endpoint-auth-post",
    next_auth_token_endpoint_auth_none => "auth/token-endpoint-auth-none",
    next_auth_pre_registration => "auth/pre-registration",
    next_auth_oauth_metadata_backcompat => "auth/2025-03-26-oauth-metadata-backcompat",
    next_auth_oauth_endpoint_fallback => "auth/2025-03-26-oauth-endpoint-fallback",
    next_auth_resource_mismatch => "auth/resource-mismatch",
    next_auth_offline_access_scope => "auth/offline-access-scope",
    next_auth_offline_access_not_supported => "auth/offline-access-not-supported",
    next_auth_authorization_server_migration => "auth/authorization-server-migration",
    next_auth_iss_supported => "auth/iss-supported",
    next_auth_iss_not_advertised => "auth/iss-not-advertised",
    next_auth_iss_supported_missing => "auth/iss-supported-missing",
    next_auth_iss_wrong_issuer => "auth/iss-wrong-issuer",
    next_auth_iss_unexpected => "auth/iss-unexpected",
    next_auth_iss_normalized => "auth/iss-normalized",
    next_auth_metadata_issuer_mismatch => "auth/metadata-issuer-mismatch",
    next_auth_client_credentials_jwt => "auth/client-credentials-jwt",
    next_auth_client_credentials_basic => "auth/client-credentials-basic",
    next_sep_2322_client_request_state => "sep-2322-client-request-state",
    next_http_standard_headers => "http-standard-headers",
    next_http_custom_headers => "http-custom-headers",
    next_http_invalid_tool_headers => "http-invalid-tool-headers",
    next_json_schema_ref_no_deref => "json-schema-ref-no-deref",
    next_json_schema_2020_12_preservation => "json-schema-2020-12-preservation",
    next_sep_2640_client_no_prefetch => "sep-2640-client-no-prefetch",
    next_sep_2640_client_verify_digest => "sep-2640-client-verify-digest",
    next_sep_2640_client_verify_size => "sep-2640-client-verify-size",
    next_sep_2640_client_verify_frontmatter => "sep-2640-client-verify-frontmatter",
}

/// One turn of `core` under the default sandbox, with no diagnostics; its harness and
/// catalog.
async fn confined_turn(core: &Core) -> (common::Harness, demiurge_mcp::TurnCatalog) {
    let h = harness_with(Recorder::allow(), |c| product_sandbox(c, true)).await;
    let catalog = common::clean_turn(&h, core).await;
    (h, catalog)
}

/// The Python reference time server (PyPI), confined by default: its interpreter lives
/// in a virtual environment whose Python is found through its `#!` line.
#[tokio::test]
async fn the_python_time_server_works_confined() {
    let Some(venv) = pypi_prefix() else { return };
    let core = Core::new().grant_servers(&["time"]).server(
        "time",
        &format!(
            "command: {}\nargs: [--local-timezone, UTC]\napproval_policy: auto\nconnect_timeout_seconds: 60\n",
            serde_json::to_string(&venv.join("bin/mcp-server-time")).unwrap()
        ),
    );
    let (h, catalog) = confined_turn(&core).await;
    let now = catalog
        .call(
            &exposed(&catalog, "get_current_time"),
            json!({"timezone": "Europe/Paris"}),
        )
        .await
        .unwrap();
    let text = now
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(!now.is_error && text.contains("Europe/Paris"), "{text}");
    h.finish().await;
}

/// The diagnostic of `server`, a modern-only server spoken to in 2025-11-25.
fn refusal(catalog: &demiurge_mcp::TurnCatalog, server: &str) -> String {
    catalog
        .diagnostics()
        .iter()
        .find(|d| d.server == server)
        .expect("a diagnostic for the modern-only server spoken to in 2025-11-25")
        .message
        .clone()
}

/// That `server` of `catalog` connected in `era` and its `echo` answers.
async fn speaks_and_echoes(catalog: &demiurge_mcp::TurnCatalog, server: &str, era: &str) {
    let identity = catalog.servers().find(|s| s.server == server);
    assert_eq!(
        identity.map(|i| i.protocol.as_str()),
        Some(era),
        "{server}: {:?}",
        catalog.diagnostics()
    );
    let echoed = catalog
        .call(
            &format!("{server}__echo"),
            json!({"message": "from both eras"}),
        )
        .await
        .unwrap();
    let text = echoed
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(
        !echoed.is_error && text.contains("from both eras"),
        "{server}: {text}"
    );
}

/// `core` with the Python SDK echo server declared twice: `modern` (the default `auto`)
/// and `legacy` (`protocol: 2025-11-25`); the script lives in the workspace, which a
/// confined server reads.
fn with_sdk_echo(core: Core, venv: &Path) -> Core {
    let script = core.root().join("sdk_echo.py");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_echo.py"),
        &script,
    )
    .unwrap();
    let python = serde_json::to_string(&venv.join("bin/python")).unwrap();
    let script = serde_json::to_string(&script).unwrap();
    core
        .server(
            "modern",
            &format!("command: {python}\nargs: [{script}]\napproval_policy: auto\nconnect_timeout_seconds: 60\n"),
        )
        .server(
            "legacy",
            &format!("command: {python}\nargs: [{script}]\napproval_policy: auto\nprotocol: 2025-11-25\nconnect_timeout_seconds: 60\n"),
        )
}

/// An echo server on the Python MCP SDK (`mcp` 2.3 from PyPI, dual-era by default),
/// confined: the default (`auto`) speaks 2026-07-28 with it, `protocol: 2025-11-25` the
/// legacy era.
#[tokio::test]
async fn the_python_sdk_server_speaks_the_era_each_declaration_asks_for() {
    let Some(venv) = pypi_prefix() else { return };
    let core = with_sdk_echo(Core::new().grant_servers(&["modern", "legacy"]), venv);
    let (h, catalog) = confined_turn(&core).await;
    for (server, era) in [("modern", "2026-07-28"), ("legacy", "2025-11-25")] {
        speaks_and_echoes(&catalog, server, era).await;
    }
    h.finish().await;
}

/// Answers every elicitation with the colour teal.
struct Teal;

impl demiurge_mcp::authority::Elicitor for Teal {
    fn elicit(
        &self,
        _request: demiurge_mcp::authority::ElicitationRequest,
    ) -> futures::future::BoxFuture<'static, demiurge_mcp::authority::ElicitationAnswer> {
        let mut fields = serde_json::Map::new();
        fields.insert("color".into(), json!("teal"));
        Box::pin(async move { demiurge_mcp::authority::ElicitationAnswer::Accept(fields) })
    }
}

/// The Python SDK's own resolvers ask the runtime for input: an elicitation through the
/// host's elicitor and the roots of the declaration, in the 2026-07-28 era as
/// `input_required` rounds (the default `auto`) and in the 2025-11-25 era as requests
/// of the server's own; both answer the same.
#[tokio::test]
async fn the_python_sdk_server_asks_for_input_in_both_eras() {
    let Some(venv) = pypi_prefix() else { return };
    let core = Core::new().grant_servers(&["modern", "legacy"]);
    let root = url::Url::from_directory_path(core.root())
        .unwrap()
        .to_string();
    let core = with_sdk_echo(core, venv);
    let h = harness_with(Recorder::allow(), |c| {
        let mut c = product_sandbox(c, true);
        c.elicitor = Arc::new(Teal);
        c
    })
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    for server in ["modern", "legacy"] {
        let text = |result: demiurge_mcp::result::ToolResult| {
            result
                .view(demiurge_mcp::redact::View::Operator)
                .content
                .clone()
        };
        let colour = catalog
            .call(&format!("{server}__favourite"), json!({}))
            .await;
        assert_eq!(text(colour.unwrap()), "teal", "{server}");
        let roots = catalog
            .call(&format!("{server}__root_uris"), json!({}))
            .await;
        assert_eq!(
            text(roots.unwrap()).trim_end_matches('/'),
            root.trim_end_matches('/'),
            "{server}"
        );
    }
    let spoken: Vec<_> = catalog
        .servers()
        .map(|s| (s.server.clone(), s.protocol.clone()))
        .collect();
    assert!(
        spoken.contains(&("modern".into(), "2026-07-28".into())),
        "{spoken:?}"
    );
    h.finish().await;
}

/// An echo server on the TypeScript SDK (`@modelcontextprotocol/server` 2.4 from npm),
/// confined, in its default mode (both eras) and modern-only: the default (`auto`)
/// speaks 2026-07-28 with both; `protocol: 2025-11-25` speaks the legacy era with the
/// first and tells what to declare for the second.
#[tokio::test]
async fn the_typescript_sdk_server_speaks_both_eras_and_modern_only() {
    let Some(prefix) = npm_prefix() else { return };
    let script = serde_json::to_string(&prefix.join("ts_echo.mjs")).unwrap();
    let readable = serde_json::to_string(prefix).unwrap();
    let declare = |mode: &str, protocol: &str| {
        format!(
            "command: node\nargs: [{script}{mode}]\napproval_policy: auto\n{protocol}connect_timeout_seconds: 60\nsandbox:\n  filesystem:\n    read: [{readable}]\n"
        )
    };
    let core = Core::new()
        .grant_servers(&["dual", "dualauto", "modern", "modernlegacy"])
        .server("dual", &declare("", "protocol: 2025-11-25\n"))
        .server("dualauto", &declare("", ""))
        .server("modern", &declare(", --modern-only", ""))
        .server(
            "modernlegacy",
            &declare(", --modern-only", "protocol: 2025-11-25\n"),
        );
    let h = harness_with(Recorder::allow(), |c| product_sandbox(c, true)).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    for (server, era) in [
        ("dual", "2025-11-25"),
        ("dualauto", "2026-07-28"),
        ("modern", "2026-07-28"),
    ] {
        speaks_and_echoes(&catalog, server, era).await;
    }
    let refused = refusal(&catalog, "modernlegacy");
    assert!(
        refused.contains("declare `protocol: 2026-07-28`"),
        "{refused}"
    );
    h.finish().await;
}

/// A server of an SDK started over streamable HTTP on a free loopback port (`--http
/// PORT` after `args`), once it accepts connections; killed when dropped.
async fn http_sdk_server(program: &Path, args: &[&Path]) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(program)
        .args(args)
        .args(["--http", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let up = common::eventually_async(Duration::from_secs(60), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(up, "{} did not listen on {port}", program.display());
    (child, port)
}

/// The SDK echo servers over streamable HTTP: the TypeScript SDK in its default mode
/// (2025-era requests served statelessly) and modern-only, the Python SDK in its
/// default mode (it has no modern-only switch). The default `auto` speaks 2026-07-28
/// with each; `protocol: 2025-11-25` speaks the legacy era where the server serves it,
/// and the modern-only one refuses it, naming the version it requires.
#[tokio::test]
async fn the_sdk_servers_speak_both_eras_over_http() {
    let (Some(prefix), Some(venv)) = (npm_prefix(), pypi_prefix()) else {
        return;
    };
    let ts = prefix.join("ts_echo.mjs");
    let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/sdk_echo.py");
    let node = Path::new("node");
    let (_dual, dual) = http_sdk_server(node, &[&ts]).await;
    let (_modern, modern) = http_sdk_server(node, &[&ts, Path::new("--modern-only")]).await;
    let (_python, python) = http_sdk_server(&venv.join("bin/python"), &[&py]).await;
    let declare = |port: u16, protocol: &str| {
        format!(
            "transport: streamable_http\nurl: http://127.0.0.1:{port}/mcp\napproval_policy: auto\n{protocol}connect_timeout_seconds: 60\n"
        )
    };
    let legacy = "protocol: 2025-11-25\n";
    let core = Core::new()
        .grant_servers(&[
            "tsdual",
            "tsduallegacy",
            "tsmodern",
            "tsmodernlegacy",
            "py",
            "pylegacy",
        ])
        .server("tsdual", &declare(dual, ""))
        .server("tsduallegacy", &declare(dual, legacy))
        .server("tsmodern", &declare(modern, ""))
        .server("tsmodernlegacy", &declare(modern, legacy))
        .server("py", &declare(python, ""))
        .server("pylegacy", &declare(python, legacy));
    let h = harness_with(Recorder::allow(), |mut c| {
        c.url_policy =
            demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]);
        c
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    for (server, era) in [
        ("tsdual", "2026-07-28"),
        ("tsduallegacy", "2025-11-25"),
        ("tsmodern", "2026-07-28"),
        ("py", "2026-07-28"),
        ("pylegacy", "2025-11-25"),
    ] {
        speaks_and_echoes(&catalog, server, era).await;
    }
    let refused = refusal(&catalog, "tsmodernlegacy");
    assert!(refused.contains("2026-07-28"), "{refused}");
    h.finish().await;
}

/// The Python reference git server (PyPI), confined by default, reads the workspace's
/// repository through the `git` it runs.
#[tokio::test]
async fn the_python_git_server_works_confined() {
    let Some(venv) = pypi_prefix() else { return };
    let core = Core::new().grant_servers(&["git"]);
    let repo = core.root();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
            .args(args)
            .current_dir(&repo)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if !repo.join(".git").exists() {
        git(&["init", "-q"]);
    }
    std::fs::write(repo.join("notes.txt"), "first\n").unwrap();
    git(&["add", "notes.txt"]);
    git(&["commit", "-q", "-m", "the first note"]);
    core.write(
        "git",
        &format!(
            "command: {}\nargs: [--repository, {}]\napproval_policy: auto\nconnect_timeout_seconds: 60\n",
            serde_json::to_string(&venv.join("bin/mcp-server-git")).unwrap(),
            serde_json::to_string(&repo).unwrap()
        ),
    );
    let (h, catalog) = confined_turn(&core).await;
    let log = catalog
        .call(
            &exposed(&catalog, "git_log"),
            json!({"repo_path": repo.display().to_string()}),
        )
        .await
        .unwrap();
    let text = log
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(!log.is_error && text.contains("the first note"), "{text}");
    h.finish().await;
}

/// An npm registry on loopback serving one package, `demiurge-probe`, whose program
/// runs the demo server (named by `DEMO`): its port and a count of the requests served.
fn probe_registry(dir: &Path) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let package = dir.join("package");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::write(
        package.join("package.json"),
        r#"{"name": "demiurge-probe", "version": "1.0.0", "bin": {"demiurge-probe": "index.js"}}"#,
    )
    .unwrap();
    std::fs::write(
        package.join("index.js"),
        "#!/usr/bin/env node\nconst c = require('child_process').spawn(process.env.DEMO, ['demo-server'], {stdio: 'inherit'});\nc.on('exit', (code) => process.exit(code ?? 1));\n",
    )
    .unwrap();
    let packed = Command::new("npm")
        .args(["pack", "--json", "--silent", "--pack-destination"])
        .arg(dir)
        .current_dir(&package)
        .output()
        .unwrap();
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    let packed: serde_json::Value = serde_json::from_slice(&packed.stdout).unwrap();
    let integrity = packed[0]["integrity"].as_str().unwrap().to_string();
    let tarball = std::fs::read(dir.join(packed[0]["filename"].as_str().unwrap())).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let meta = json!({
        "name": "demiurge-probe",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {
            "name": "demiurge-probe",
            "version": "1.0.0",
            "bin": {"demiurge-probe": "index.js"},
            "dist": {
                "tarball": format!("http://127.0.0.1:{port}/demiurge-probe/-/demiurge-probe-1.0.0.tgz"),
                "integrity": integrity,
            }
        }}
    });
    let served = serve_files(
        listener,
        vec![
            (
                "/demiurge-probe",
                "application/json",
                meta.to_string().into_bytes(),
            ),
            (
                "/demiurge-probe/-/demiurge-probe-1.0.0.tgz",
                "application/octet-stream",
                tarball,
            ),
        ],
    );
    (port, served)
}

/// Serves `files` (path, content type, body; a trailing `/` of a request is ignored)
/// on `listener`, one request per connection, `HEAD` too: a count of the requests.
fn serve_files(
    listener: std::net::TcpListener,
    files: Vec<(&'static str, &'static str, Vec<u8>)>,
) -> Arc<std::sync::atomic::AtomicUsize> {
    use std::io::{Read, Write};
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 8192];
            let n = stream.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]).to_string();
            let mut words = head.split(' ');
            let method = words.next().unwrap_or_default().to_string();
            // Absolute-form (through a proxy) or origin-form.
            let target = words.next().unwrap_or_default();
            let path = target
                .strip_prefix("http://")
                .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
                .unwrap_or(target)
                .trim_end_matches('/')
                .to_string();
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let found = files.iter().find(|(p, _, _)| *p == path);
            let (status, kind, body) = match found {
                Some((_, kind, body)) => ("200 OK", *kind, body.as_slice()),
                None => ("404 Not Found", "text/plain", &[][..]),
            };
            let _ = stream.write_all(
                format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            if method != "HEAD" {
                let _ = stream.write_all(body);
            }
        }
    });
    served
}

/// `npx -y` under the default sandbox fetches its package through the egress proxy:
/// from a registry the URL policy allows (a trusted loopback network here) it starts
/// the server; with the same registry untrusted, the proxy refuses it, the start fails,
/// and the refusal is an event.
#[tokio::test]
async fn npx_fetches_through_the_egress_proxy_only_what_the_policy_allows() {
    if npm_prefix().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (port, served) = probe_registry(dir.path());
    let core = Core::new().grant_servers(&["npx"]).server(
        "npx",
        &format!(
            "command: npx\nargs: [-y, --registry, \"http://127.0.0.1:{port}/\", demiurge-probe]\nenv:\n  DEMO: {exe}\n  npm_config_fetch_retries: \"0\"\n  npm_config_audit: \"false\"\nsandbox: {{filesystem: {{read: [{bin}]}}}}\napproval_policy: auto\nconnect_timeout_seconds: 60\n",
            exe = serde_json::to_string(common::exe()).unwrap(),
            bin = serde_json::to_string(Path::new(common::exe()).parent().unwrap()).unwrap(),
        ),
    );
    fetched_through_the_proxy_only_when_trusted(&core, port, &served, "registry").await;
}

/// A PyPI-style simple index on loopback serving one wheel, `demiurge-probe`, whose
/// console script runs the demo server (named by `DEMO`): its port and a count of the
/// requests served. The wheel is written (and its digest told) by `python`.
fn probe_index(dir: &Path, python: &Path) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    const WHEEL: &str = "demiurge_probe-1.0.0-py3-none-any.whl";
    const MAKE: &str = r#"
import base64, hashlib, sys, zipfile
info = "demiurge_probe-1.0.0.dist-info"
files = {
    "demiurge_probe/__init__.py": "import os\ndef main():\n    exe = os.environ['DEMO']\n    os.execv(exe, [exe, 'demo-server'])\n",
    info + "/METADATA": "Metadata-Version: 2.1\nName: demiurge-probe\nVersion: 1.0.0\n",
    info + "/WHEEL": "Wheel-Version: 1.0\nGenerator: demiurge-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    info + "/entry_points.txt": "[console_scripts]\ndemiurge-probe = demiurge_probe:main\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for path, text in files.items():
        data = text.encode()
        wheel.writestr(path, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(info + "/RECORD,,")
    wheel.writestr(info + "/RECORD", "\n".join(record) + "\n")
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())
"#;
    let wheel = dir.join(WHEEL);
    let made = Command::new(python)
        .args(["-c", MAKE])
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let wheel = std::fs::read(&wheel).unwrap();
    let digest = String::from_utf8_lossy(&made.stdout).trim().to_string();
    let page =
        format!("<html><body><a href=\"/files/{WHEEL}#sha256={digest}\">{WHEEL}</a></body></html>");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = serve_files(
        listener,
        vec![
            ("/simple/demiurge-probe", "text/html", page.into_bytes()),
            (
                "/files/demiurge_probe-1.0.0-py3-none-any.whl",
                "application/octet-stream",
                wheel,
            ),
        ],
    );
    (port, served)
}

/// `uvx` under the default sandbox fetches its package through the egress proxy: from
/// an index the URL policy allows (a trusted loopback network here) it installs into
/// the server's own home and starts the server; untrusted, nothing reaches the index.
#[tokio::test]
async fn uvx_fetches_through_the_egress_proxy_only_what_the_policy_allows() {
    let Some(venv) = pypi_prefix() else { return };
    let dir = tempfile::tempdir().unwrap();
    // The interpreter uv builds the tool's environment on, and the install it needs.
    let python = venv.join("bin/python3").canonicalize().unwrap();
    let install = python.parent().and_then(Path::parent).unwrap();
    let (port, served) = probe_index(dir.path(), &python);
    let core = Core::new().grant_servers(&["uvx"]).server(
        "uvx",
        &format!(
            "command: {uvx}\nargs: [--index-url, \"http://127.0.0.1:{port}/simple/\", demiurge-probe]\nenv:\n  DEMO: {exe}\n  UV_PYTHON: {python}\n  UV_HTTP_RETRIES: \"0\"\nsandbox: {{filesystem: {{read: [{bin}, {install}]}}}}\napproval_policy: auto\nconnect_timeout_seconds: 60\n",
            uvx = serde_json::to_string(&venv.join("bin/uvx")).unwrap(),
            exe = serde_json::to_string(common::exe()).unwrap(),
            python = serde_json::to_string(&python).unwrap(),
            bin = serde_json::to_string(Path::new(common::exe()).parent().unwrap()).unwrap(),
            install = serde_json::to_string(install).unwrap(),
        ),
    );
    fetched_through_the_proxy_only_when_trusted(&core, port, &served, "index").await;
}

/// The fetch half of the package-runner tests: with the registry's loopback network
/// trusted, the server `core` declares starts through the proxy (at least two allowed
/// egress decisions for `port`, two requests `served`) and answers; untrusted (the
/// policy's default for loopback), its start fails with one diagnostic, the refusal of
/// `port` is an event, and nothing reaches the `registry`.
async fn fetched_through_the_proxy_only_when_trusted(
    core: &Core,
    port: u16,
    served: &Arc<std::sync::atomic::AtomicUsize>,
    registry: &str,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let egress = |h: &common::Harness, allowed: bool| {
        h.sink
            .of_type("mcp.url_decision")
            .into_iter()
            .filter(|e| {
                matches!(&e.kind, demiurge_mcp::events::EventKind::UrlDecision {
                    phase: demiurge_mcp::events::UrlPhase::Egress,
                    decision,
                    ..
                } if decision.allowed == allowed && decision.port == port)
            })
            .count()
    };
    let h = harness_with(Recorder::allow(), |c| {
        let mut c = product_sandbox(c, true);
        c.url_policy = UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]);
        c
    })
    .await;
    let catalog = common::clean_turn(&h, core).await;
    let echo = catalog
        .call(&exposed(&catalog, "echo"), json!({"message": "fetched"}))
        .await
        .unwrap();
    assert!(!echo.is_error);
    assert!(
        egress(&h, true) >= 2,
        "the {registry}'s metadata and the package went through the proxy"
    );
    assert!(served.load(Relaxed) >= 2);
    h.finish().await;
    let before = served.load(Relaxed);
    let h = harness_with(Recorder::allow(), |c| product_sandbox(c, true)).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(
        catalog.diagnostics().len(),
        1,
        "{:?}",
        catalog.diagnostics()
    );
    assert!(egress(&h, false) >= 1);
    let denied = h.sink.of_type("mcp.sandbox_denied");
    assert!(
        denied.iter().any(|e| matches!(&e.kind,
            demiurge_mcp::events::EventKind::SandboxDenied { target, .. }
                if target.contains(&format!("127.0.0.1:{port}")))),
        "the {registry} was refused: {denied:?}"
    );
    assert_eq!(
        served.load(Relaxed),
        before,
        "nothing reached the {registry}"
    );
    h.finish().await;
}

/// What servers written by others serve is pinned stably: a second connection of the
/// everything server (npm) and of the Python SDK server in both eras (PyPI) changes
/// nothing; a pin that no longer matches what one serves (as after a rug pull) holds
/// that definition back, and only it.
#[tokio::test]
async fn what_servers_written_by_others_serve_is_pinned_and_held_when_it_moves() {
    let (Some(prefix), Some(venv)) = (npm_prefix(), pypi_prefix()) else {
        return;
    };
    let core = with_sdk_echo(
        Core::new().grant_servers(&["everything", "modern", "legacy"]),
        venv,
    )
    .server(
        "everything",
        &node_server(prefix, "mcp-server-everything", "stdio", ""),
    );
    let no_changes = Recorder::new(|r| match r.action {
        demiurge_mcp::actors::Action::Change => demiurge_mcp::ApprovalAnswer::Deny,
        _ => demiurge_mcp::ApprovalAnswer::AllowSession,
    });
    let h = harness_with(no_changes, |c| product_sandbox(c, true)).await;
    let first = common::clean_turn(&h, &core).await;
    let tools = first.tools().len();
    assert!(tools > 10, "{tools}");
    let (_s, again) = common::open(&h.runtime, core.spec_in("again")).await;
    assert!(again.diagnostics().is_empty(), "{:?}", again.diagnostics());
    assert_eq!(again.tools().len(), tools);
    assert!(h.sink.of_type("mcp.definition_changed").is_empty());

    // Each server's first tool pin no longer matches what it serves.
    let store = demiurge_mcp::pins::PinStore::open(h.runtime.home());
    let mut moved = Vec::new();
    for (key, mut file) in store.all() {
        let pin = file
            .approved
            .iter_mut()
            .find(|p| p.kind == demiurge_mcp::pins::DefinitionKind::Tool)
            .unwrap();
        pin.digest = "0".repeat(64);
        moved.push(format!("{}__{}", file.server, pin.name));
        store.save(&key, &mut file).unwrap();
    }
    assert_eq!(moved.len(), 3);
    let (_s, held) = common::open(&h.runtime, core.spec_in("held")).await;
    assert_eq!(held.tools().len(), tools - 3, "{:?}", held.diagnostics());
    for name in &moved {
        let exposed = name.replace('_', "-").replacen("--", "__", 1);
        assert!(
            held.get(name).is_none() && held.get(&exposed).is_none(),
            "{name} is held"
        );
    }
    assert_eq!(h.sink.of_type("mcp.definition_changed").len(), 3);
    h.finish().await;
}

/// Five servers written by others (three from npm, two from PyPI), declared
/// in one core whose workspace is a git repository (52 tools in these versions).
fn reach_core(npm: &Path, venv: &Path) -> Core {
    let core = Core::new().grant_servers(&["everything", "filesystem", "memory", "time", "git"]);
    let repo = core.root();
    let out = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .output();
    assert!(out.is_ok_and(|o| o.status.success()));
    let python = |bin: &str, args: &str| {
        format!(
            "command: {}\nargs: [{args}]\napproval_policy: auto\nconnect_timeout_seconds: 60\n",
            serde_json::to_string(&venv.join("bin").join(bin)).unwrap()
        )
    };
    core.server(
        "everything",
        &node_server(npm, "mcp-server-everything", "stdio", ""),
    )
    .server(
        "filesystem",
        &node_server(npm, "mcp-server-filesystem", "", ""),
    )
    .server("memory", &node_server(npm, "mcp-server-memory", "", ""))
    .server("time", &python("mcp-server-time", "--local-timezone, UTC"))
    .server(
        "git",
        &python(
            "mcp-server-git",
            &format!("--repository, {}", serde_json::to_string(&repo).unwrap()),
        ),
    )
}

/// A new session's first turn of `core`: how long it took, and the turn.
async fn timed_first_turn(
    h: &common::Harness,
    core: &Core,
    budget: Option<usize>,
) -> (Duration, demiurge_mcp::TurnCatalog) {
    let mut spec = core.spec();
    spec.tool_budget = budget.map(demiurge_mcp::search::ToolBudget::new);
    let (session, _) = h.runtime.start_session(spec).await.unwrap();
    let started = std::time::Instant::now();
    let turn = session.prepare_turn().await.unwrap();
    (started.elapsed(), turn)
}

/// Twenty requests a model might make of those servers, in its own words, and the
/// tool that answers each.
const QUERIES: [(&str, &str); 20] = [
    ("what time is it in Tokyo", "time__get_current_time"),
    (
        "convert 3pm in New York to London time",
        "time__convert_time",
    ),
    (
        "show uncommitted changes in the working directory",
        "git__git_diff_unstaged",
    ),
    ("list the commit history", "git__git_log"),
    ("switch to another branch", "git__git_checkout"),
    ("stage a file for the next commit", "git__git_add"),
    ("create a new branch", "git__git_create_branch"),
    ("read a text file", "filesystem__read_text_file"),
    ("rename a file", "filesystem__move_file"),
    ("create a new directory", "filesystem__create_directory"),
    (
        "find files matching a glob pattern",
        "filesystem__search_files",
    ),
    (
        "file size and modification time",
        "filesystem__get_file_info",
    ),
    ("add two numbers", "everything__get-sum"),
    ("echo a message back", "everything__echo"),
    ("show the environment variables", "everything__get-env"),
    (
        "compress a file with gzip",
        "everything__gzip-file-as-resource",
    ),
    ("add observations to an entity", "memory__add_observations"),
    ("search the knowledge graph", "memory__search_nodes"),
    (
        "delete a relation between entities",
        "memory__delete_relations",
    ),
    (
        "a long running operation that reports progress",
        "everything__trigger-long-running-operation",
    ),
];

/// The deferred catalog and lazy start over servers written by others: what a turn's
/// definitions cost a model with and without a budget, how long a second session's
/// first turn takes with lazy start against eager start, and whether `search_tools`
/// finds the tool each of twenty requests means (in its top three for at least 18).
#[tokio::test]
async fn many_servers_by_others_are_searched_deferred_and_started_when_used() {
    let (Some(npm), Some(venv)) = (npm_prefix(), pypi_prefix()) else {
        return;
    };
    let core = reach_core(npm, venv);
    let lazy = harness_with(Recorder::allow(), |mut c| {
        c.start = demiurge_mcp::core::Start::Lazy;
        c
    })
    .await;
    let (_, first) = timed_first_turn(&lazy, &core, None).await;
    let tools = first.tools().len();
    assert!(
        tools >= 50,
        "{:?} {:?}",
        first.diagnostics(),
        common::names(&first)
    );
    let listings = lazy.runtime.home().join("listings");
    assert!(
        eventually(Duration::from_secs(10), || std::fs::read_dir(&listings)
            .is_ok_and(|d| d.count() == 5))
        .await
    );
    let (lazy_took, second) = timed_first_turn(&lazy, &core, None).await;
    assert_eq!(second.tools().len(), tools);
    assert!(second.tools().iter().all(|t| t.deferred_start));

    let eager = harness_with(Recorder::allow(), |c| c).await;
    timed_first_turn(&eager, &core, None).await;
    let (eager_took, _) = timed_first_turn(&eager, &core, None).await;
    println!(
        "reach: a second session's first turn over 5 servers by others: lazy {lazy_took:?}, eager {eager_took:?} ({:.3}x)",
        lazy_took.as_secs_f64() / eager_took.as_secs_f64()
    );
    assert!(lazy_took < eager_took, "{lazy_took:?} {eager_took:?}");

    let (_, budgeted) = timed_first_turn(&lazy, &core, Some(2_000)).await;
    let rule = budgeted.deferral().unwrap().clone();
    assert!(rule.deferred);
    println!(
        "reach: {tools} tools by others take {} tokens whole ({}); deferred under a budget of {}: {} tokens",
        rule.full_tokens, rule.estimator, rule.budget, rule.offered_tokens
    );
    assert!(rule.offered_tokens * 2 < rule.full_tokens, "{rule:?}");

    let mut found = 0;
    for (query, expected) in QUERIES {
        let answer = budgeted
            .call("search_tools", json!({"query": query, "limit": 3}))
            .await
            .unwrap();
        let data = answer.view(demiurge_mcp::redact::View::Model).data.clone();
        let top: Vec<&str> = data["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        if top.contains(&expected) {
            found += 1;
        } else {
            println!("reach: search missed {expected} for {query:?}: {top:?}");
        }
    }
    println!("reach: search_tools put the expected tool in its top 3 for {found} of 20 requests");
    assert!(found >= 18, "{found} of 20");

    // A deferred, dormant tool: described, then called, which starts its server.
    let name = "time__get_current_time";
    budgeted
        .call("describe_tool", json!({"names": [name]}))
        .await
        .unwrap();
    let now = budgeted
        .call(name, json!({"timezone": "Europe/Paris"}))
        .await
        .unwrap();
    let text = now
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(!now.is_error && text.contains("Europe/Paris"), "{text}");
    lazy.finish().await;
    eager.finish().await;
}

/// The Python SDK client (`tests/interop/serve_client.py`) driving `demiurge serve` at
/// `where` (`stdio` and the command, or `http` and the URL), answering its questions with
/// `answers`; what it printed.
fn python_client(venv: &Path, where_: &[String], answers: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/serve_client.py");
    let out = Command::new(venv.join("bin/python"))
        .arg(script)
        .args(where_)
        .arg("--")
        .args(answers)
        .output()
        .unwrap();
    last_json_line(&out)
}

/// A core whose demo server asks before each connect and call.
fn asking_core() -> Core {
    Core::new().grant_servers(&["d"]).server(
        "d",
        &format!(
            "command: {}\nargs: [demo-server]\napproval_policy: prompt\nsandbox: off\n",
            serde_json::to_string(common::exe()).unwrap()
        ),
    )
}

/// `demiurge serve` in front of a client written by others (the Python SDK), over stdio:
/// the runtime's connect and call questions reach the client's person by elicitation;
/// a yes lets the call through, a no is the client's tool error saying how to approve.
#[tokio::test]
async fn a_python_sdk_client_drives_serve_and_answers_its_questions() {
    let Some(venv) = pypi_prefix() else { return };
    let core = asking_core();
    let home = tempfile::tempdir().unwrap();
    let stdio = |core: &Core| -> Vec<String> {
        vec![
            "stdio".into(),
            common::exe().into(),
            "--core".into(),
            core.root().display().to_string(),
            "--home".into(),
            home.path().display().to_string(),
            "serve".into(),
        ]
    };
    let allowed = python_client(venv, &stdio(&core), &["once", "once"]);
    assert_eq!(allowed["is_error"], false, "{allowed}");
    assert!(allowed["text"].as_str().unwrap().contains("through serve"));
    assert_eq!(allowed["tools"].as_array().unwrap().len(), 16);
    let asked: Vec<&str> = allowed["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(asked[0].contains("wants to connect") && asked[1].contains("wants to run"));

    // The server is listed from its last listing now; the call's connect is answered
    // yes, the call itself no.
    let refused = python_client(venv, &stdio(&core), &["once", "no"]);
    assert_eq!(refused["is_error"], true, "{refused}");
    let said = refused["text"].as_str().unwrap();
    assert!(
        said.contains("denied") && said.contains("demiurge approvals"),
        "{said}"
    );
    // "always" outlives the session: a person's to give at a terminal, never a
    // client's; answered anyway, it refuses.
    let always = python_client(venv, &stdio(&core), &["always"]);
    assert_eq!(always["is_error"], true, "{always}");
    assert!(
        eventually(Duration::from_secs(10), || common::servers_of(home.path())
            .is_empty())
        .await
    );
}

/// The same client over streamable HTTP, `serve --http` on loopback.
#[tokio::test]
async fn a_python_sdk_client_drives_serve_over_http() {
    let Some(venv) = pypi_prefix() else { return };
    let core = asking_core();
    let home = tempfile::tempdir().unwrap();
    let (serve, url) = serve_http(&core, home.path(), &[]).await;
    let answered = python_client(venv, &["http".into(), url], &["once", "once"]);
    assert_eq!(answered["is_error"], false, "{answered}");
    assert!(answered["text"].as_str().unwrap().contains("through serve"));
    assert_eq!(answered["asked"].as_array().unwrap().len(), 2);
    stop_serving(serve, home.path()).await;
}

/// The server scenarios of both conformance packages that a server fronted by `serve`
/// can pass: those about the protocol and the HTTP face, not about the conformance
/// package's own reference tools, resources and prompts (which `serve` would name
/// `server__tool`, and which the fronted demo server does not have; the README lists
/// them).
const SERVER_SCENARIOS: [&str; 10] = [
    "server-initialize",
    "logging-set-level",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
];
const SERVER_SCENARIOS_NEXT: [&str; 16] = [
    "server-initialize",
    "server-session-lifecycle",
    "logging-set-level",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "sep-2164-resource-not-found",
    "sep-2640-skills-directory",
    "sep-2640-skills-enumeration",
    "sep-2640-skills-manifest",
    "prompts-list",
    "dns-rebinding-protection",
    "tasks-status-notifications",
];

/// One server scenario of the conformance package at `prefix` against `url`.
fn conformance_server(prefix: &Path, url: &str, scenario: &str) -> Result<(), String> {
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/register.mjs");
    let out = Command::new("node")
        .arg("--import")
        .arg(&shim)
        .arg(prefix.join("node_modules/.bin/conformance"))
        .args(["server", "--url", url, "--scenario", scenario])
        .output()
        .unwrap();
    let output = String::from_utf8_lossy(&out.stdout).to_string();
    let passed = output
        .lines()
        .any(|l| l.starts_with("Passed:") && l.contains(" 0 failed"));
    if passed {
        Ok(())
    } else {
        Err(format!("{scenario}:\n{output}"))
    }
}

/// The conformance package's server scenarios (0.1.16 and 0.2.0-alpha.12) against
/// `demiurge serve --http` fronting the built-in demo server.
#[tokio::test]
async fn conformance_server_scenarios_pass_against_serve() {
    let (Some(old), Some(next)) = (npm_prefix(), next_prefix()) else {
        return;
    };
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &format!(
            "command: {}\nargs: [demo-server]\nsandbox: off\n",
            serde_json::to_string(common::exe()).unwrap()
        ),
    );
    let home = tempfile::tempdir().unwrap();
    let (serve, url) = serve_http(&core, home.path(), &["--yes"]).await;
    let mut failed = Vec::new();
    let runs = [
        (old, &SERVER_SCENARIOS[..]),
        (next, &SERVER_SCENARIOS_NEXT[..]),
    ];
    for (prefix, scenarios) in runs {
        for scenario in scenarios {
            let (prefix, url) = (prefix.to_path_buf(), url.clone());
            let scenario = scenario.to_string();
            let ran =
                tokio::task::spawn_blocking(move || conformance_server(&prefix, &url, &scenario));
            if let Err(why) = ran.await.unwrap() {
                failed.push(why);
            }
        }
    }
    stop_serving(serve, home.path()).await;
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The TypeScript SDK's client (npm) driving `demiurge serve` over stdio, answering its
/// connect and call questions by elicitation: a yes lets the call through, a no is the
/// client's tool error that says how to approve.
#[tokio::test]
async fn a_typescript_sdk_client_drives_serve_and_answers_its_questions() {
    let Some(prefix) = npm_prefix() else { return };
    let core = asking_core();
    let home = tempfile::tempdir().unwrap();
    let (exe, root, home_dir) = (
        common::exe().to_string(),
        core.root().display().to_string(),
        home.path().display().to_string(),
    );
    let stdio = [exe.as_str(), "--core", &root, "--home", &home_dir, "serve"];
    let run = |answers: &[&str]| ts_client(prefix, "", &stdio, answers);
    let allowed = run(&["once", "once"]);
    assert_eq!(allowed["is_error"], false, "{allowed}");
    assert!(allowed["text"].as_str().unwrap().contains("from ts"));
    assert_eq!(allowed["tools"].as_array().unwrap().len(), 16);
    assert_eq!(allowed["asked"].as_array().unwrap().len(), 2);
    let refused = run(&["once", "no"]);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert!(
        refused["text"]
            .as_str()
            .unwrap()
            .contains("demiurge approvals")
    );
    assert!(
        eventually(Duration::from_secs(10), || common::servers_of(home.path())
            .is_empty())
        .await
    );
}

/// A client's report: the last line it printed, as JSON, once it exited well.
fn last_json_line(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// The TypeScript SDK's client (`TS_ERA` empty: 2025-11-25) with `where` (a command or
/// `http URL`), answering with `answers`: its JSON line.
fn ts_client(prefix: &Path, era: &str, where_: &[&str], answers: &[&str]) -> serde_json::Value {
    let out = Command::new("node")
        .arg(prefix.join("ts_serve_client.mjs"))
        .args(where_)
        .arg("--")
        .args(answers)
        .env("TS_ERA", era)
        .output()
        .unwrap();
    last_json_line(&out)
}

/// The TypeScript SDK's client over streamable HTTP, in both eras: a client pinned to
/// 2026-07-28 gets its questions as `input_required` rounds of its calls (its first
/// listing, which cannot ask, offers `connect_servers`), which the SDK answers with its
/// elicitation handler and sends the call again; a 2025-11-25 client is asked by
/// `elicitation/create`. A yes lets the call through; a no refuses it.
#[tokio::test]
async fn a_typescript_sdk_client_drives_serve_over_http_in_both_eras() {
    let Some(prefix) = npm_prefix() else { return };
    let core = asking_core();
    let home = tempfile::tempdir().unwrap();
    let (serve, url) = serve_http(&core, home.path(), &[]).await;
    // The server has never listed: the modern listing cannot ask about its connect and
    // offers `connect_servers`, whose call asks; then the call is asked.
    let modern = ts_client(prefix, "2026-07-28", &["http", &url], &["once", "once"]);
    assert_eq!(modern["protocol"], "2026-07-28", "{modern}");
    assert_eq!(modern["connect"], true, "{modern}");
    assert_eq!(modern["tools"].as_array().unwrap().len(), 16, "{modern}");
    assert_eq!(modern["is_error"], false, "{modern}");
    assert!(modern["text"].as_str().unwrap().contains("from ts"));
    let asked: Vec<&str> = modern["asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(asked.len(), 2, "{modern}");
    assert!(asked[0].contains("wants to connect") && asked[1].contains("wants to run"));

    let legacy = ts_client(prefix, "", &["http", &url], &["once", "once"]);
    assert_eq!(legacy["protocol"], "2025-11-25", "{legacy}");
    assert_eq!(legacy["is_error"], false, "{legacy}");
    assert!(legacy["text"].as_str().unwrap().contains("from ts"));
    assert_eq!(legacy["asked"].as_array().unwrap().len(), 2, "{legacy}");

    // Its session outlives the request (one per client identity): the server is
    // connected; the call is asked again ("once"), and refused.
    let refused = ts_client(prefix, "2026-07-28", &["http", &url], &["no"]);
    assert_eq!(refused["is_error"], true, "{refused}");
    assert_eq!(refused["asked"].as_array().unwrap().len(), 1, "{refused}");
    assert!(
        refused["text"].as_str().unwrap().contains("denied"),
        "{refused}"
    );
    stop_serving(serve, home.path()).await;
}

/// The MCP Inspector's command line (npm) as a client of `demiurge serve` over stdio:
/// it lists and calls; it cannot answer a question, so without `--yes` the call is its
/// tool error, saying how to approve.
#[test]
fn the_inspector_cli_lists_and_calls_through_serve() {
    let Some(prefix) = npm_prefix() else { return };
    let core = asking_core();
    let home = tempfile::tempdir().unwrap();
    // Its build reads its own package.json relative to the working directory.
    let build = prefix.join("node_modules/@modelcontextprotocol/inspector-cli/build");
    let inspect = |yes: bool, method: &[&str]| -> serde_json::Value {
        let mut command = Command::new("node");
        command
            .current_dir(&build)
            .arg("index.js")
            .arg(common::exe())
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path());
        if yes {
            command.arg("--yes");
        }
        let out = command.arg("serve").args(method).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&stdout).unwrap()
    };
    let listed = inspect(true, &["--method", "tools/list"]);
    assert_eq!(listed["tools"].as_array().unwrap().len(), 16, "{listed}");
    let call = [
        "--method",
        "tools/call",
        "--tool-name",
        "d__echo",
        "--tool-arg",
        "message=inspected",
    ];
    let called = inspect(true, &call);
    assert_eq!(called["isError"], false, "{called}");
    assert!(called.to_string().contains("inspected"));
    let refused = inspect(false, &call);
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused.to_string().contains("approve"), "{refused}");
}
