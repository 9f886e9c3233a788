//! `demiurge serve`: the runtime in front of an MCP client written with rmcp (a client
//! of the same SDK family as most hosts), over stdio: the catalog's tools served under
//! their exposed names, calls answered in the model view (a server's secret redacted),
//! approvals refused closed when nobody can answer (with how to approve), answered by
//! `--yes`, and every server process gone when the client goes.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Core, demo, eventually, servers_of};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use serde_json::json;

/// The secret the demo server is given, which a resource read returns.
const CANARY: &str = "sk_canary_serve_51f0";

async fn client(
    core: &Core,
    home: &Path,
    yes: bool,
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    client_with(core, home, yes, &[]).await
}

async fn client_with(
    core: &Core,
    home: &Path,
    yes: bool,
    options: &[&str],
) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    let mut command = tokio::process::Command::new(common::exe());
    command
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .arg("serve")
        .env("SERVE_TOKEN", CANARY)
        .stderr(std::process::Stdio::null());
    if yes {
        command.arg("--yes");
    }
    command.args(options);
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    ().serve(transport).await.unwrap()
}

fn core() -> Core {
    Core::new().grant_servers(&["d"]).server(
        "d",
        &demo("env:\n  SERVE_TOKEN: \"${SERVE_TOKEN}\"\nsandbox: off\n"),
    )
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_string(&result.content).unwrap()
}

#[tokio::test]
async fn a_client_lists_and_calls_through_serve_in_the_model_view() {
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let served = client(&core, home.path(), true).await;
    let tools = served.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"d__echo".to_string()), "{names:?}");
    assert_eq!(names.len(), 16);
    let params = CallToolRequestParams::new("d__add")
        .with_arguments(json!({"a": 2, "b": 3}).as_object().cloned().unwrap());
    let added = served.call_tool(params).await.unwrap();
    assert_ne!(added.is_error, Some(true));
    assert!(text(&added).contains('5'), "{}", text(&added));

    // A server's secret reaches the client redacted, as it would reach a model.
    let read = served
        .read_resource(ReadResourceRequestParams::new("demo://env/SERVE_TOKEN"))
        .await
        .unwrap();
    let read = serde_json::to_string(&read).unwrap();
    assert!(!read.contains(CANARY), "{read}");

    // An unknown tool is the client's tool error, not a protocol failure.
    let unknown = served
        .call_tool(CallToolRequestParams::new("d__nope"))
        .await
        .unwrap();
    assert_eq!(unknown.is_error, Some(true));
    served.cancel().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || servers_of(home.path())
            .is_empty())
        .await,
        "a server outlived its client"
    );
}

#[tokio::test]
async fn without_anyone_to_ask_serve_refuses_and_says_how_to_approve() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: prompt\nsandbox: off\n"));
    let home = tempfile::tempdir().unwrap();
    // A first run with `--yes` connects (and keeps the listing); the next client cannot
    // answer a question: the call's connect and call approvals are refused.
    let first = client(&core, home.path(), true).await;
    assert_eq!(first.list_all_tools().await.unwrap().len(), 16);
    first.cancel().await.unwrap();
    let served = client(&core, home.path(), false).await;
    let tools = served.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 16, "listed from the last listing");
    let refused = served
        .call_tool(
            CallToolRequestParams::new("d__echo")
                .with_arguments(json!({"message": "x"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let said = text(&refused);
    assert!(
        said.contains("not available") && said.contains("approve"),
        "{said}"
    );
    served.cancel().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || servers_of(home.path())
            .is_empty())
        .await
    );
}

#[test]
fn print_config_gives_each_client_its_lines() {
    let core = core();
    for (client, needle) in [
        ("claude", "\"mcpServers\""),
        ("vscode", "\"servers\""),
        ("codex", "[mcp_servers.demiurge]"),
    ] {
        let out = std::process::Command::new(common::exe())
            .arg("--core")
            .arg(core.root())
            .args(["serve", "--print-config", client])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(needle),
            "{client}: {stdout}"
        );
        assert!(
            stdout.contains("serve") && stdout.contains("--stdio"),
            "{stdout}"
        );
    }
    let bad = std::process::Command::new(common::exe())
        .args(["serve", "--print-config", "emacs"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// A client that counts the progress and the tool-list changes it hears.
#[derive(Clone, Default)]
struct Heard(
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

impl rmcp::ClientHandler for Heard {
    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_downstream_servers_progress_reaches_the_client_that_asked_for_it() {
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(common::exe());
    command
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["--yes", "serve"])
        .env("SERVE_TOKEN", CANARY)
        .stderr(std::process::Stdio::null());
    let heard = Heard::default();
    let served = heard
        .clone()
        .serve(rmcp::transport::TokioChildProcess::new(command).unwrap())
        .await
        .unwrap();
    served.list_all_tools().await.unwrap();
    let mut params = CallToolRequestParams::new("d__progress")
        .with_arguments(json!({"steps": 3, "ms": 10}).as_object().cloned().unwrap());
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.set_progress_token(rmcp::model::ProgressToken(
        rmcp::model::NumberOrString::Number(7),
    ));
    params.meta = Some(meta);
    let answered = served.call_tool(params).await.unwrap();
    // Progress sent just before the answer may lose the race with it (the runtime
    // routes progress to a call only while it is in flight); some arrives, none extra.
    assert_ne!(answered.is_error, Some(true), "{}", text(&answered));
    assert!(
        eventually(Duration::from_secs(5), || heard
            .0
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1)
        .await,
        "heard {}",
        heard.0.load(std::sync::atomic::Ordering::SeqCst)
    );
    // A downstream server's changed tool list reaches the client, which lists again.
    let added = served
        .call_tool(
            CallToolRequestParams::new("d__add_tool")
                .with_arguments(json!({"name": "fresh"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_ne!(added.is_error, Some(true), "{}", text(&added));
    let changed = || heard.1.load(std::sync::atomic::Ordering::SeqCst) > 0;
    assert!(eventually(Duration::from_secs(5), changed).await);
    let names: Vec<String> = served
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // The new tool is a definition nobody approved: held back (`pinning: strict`),
    // through serve as anywhere; `--yes` never approves it.
    assert!(names.contains(&"d__echo".to_string()), "{names:?}");
    assert!(!names.contains(&"d__fresh".to_string()), "{names:?}");
    let held = served
        .call_tool(CallToolRequestParams::new("d__fresh"))
        .await
        .unwrap();
    assert_eq!(held.is_error, Some(true));
    assert!(text(&held).contains("pins approve"), "{}", text(&held));
    // A downstream server's changed tool list reaches the client, which lists again.
    let added = served
        .call_tool(
            CallToolRequestParams::new("d__add_tool")
                .with_arguments(json!({"name": "fresh"}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    assert_ne!(added.is_error, Some(true), "{}", text(&added));
    let changed = || heard.1.load(std::sync::atomic::Ordering::SeqCst) > 0;
    assert!(eventually(Duration::from_secs(5), changed).await);
    let names: Vec<String> = served
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    // The new tool is a definition nobody approved: held back (`pinning: strict`),
    // through serve as anywhere; `--yes` never approves it.
    assert!(names.contains(&"d__echo".to_string()), "{names:?}");
    assert!(!names.contains(&"d__fresh".to_string()), "{names:?}");
    let held = served
        .call_tool(CallToolRequestParams::new("d__fresh"))
        .await
        .unwrap();
    assert_eq!(held.is_error, Some(true));
    assert!(text(&held).contains("pins approve"), "{}", text(&held));
    assert!(heard.0.load(std::sync::atomic::Ordering::SeqCst) <= 3);
    served.cancel().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || servers_of(home.path())
            .is_empty())
        .await
    );
}

#[tokio::test]
async fn under_a_tool_budget_a_client_searches_describes_then_calls() {
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let served = client_with(&core, home.path(), true, &["--tool-budget", "100"]).await;
    let tools = served.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names.len(), 18, "{names:?}");
    assert!(
        names.contains(&"search_tools".to_string()) && names.contains(&"describe_tool".to_string())
    );
    let echo = |message: &str| {
        CallToolRequestParams::new("d__echo")
            .with_arguments(json!({"message": message}).as_object().cloned().unwrap())
    };
    let early = served.call_tool(echo("early")).await.unwrap();
    assert_eq!(early.is_error, Some(true));
    assert!(text(&early).contains("describe_tool"), "{}", text(&early));
    let found = served
        .call_tool(
            CallToolRequestParams::new("search_tools").with_arguments(
                json!({"query": "return the message unchanged"})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert!(text(&found).contains("d__echo"), "{}", text(&found));
    served
        .call_tool(
            CallToolRequestParams::new("describe_tool")
                .with_arguments(json!({"names": ["d__echo"]}).as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    let called = served.call_tool(echo("described")).await.unwrap();
    assert_ne!(called.is_error, Some(true), "{}", text(&called));
    assert!(text(&called).contains("described"));
    served.cancel().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || servers_of(home.path())
            .is_empty())
        .await
    );
}
