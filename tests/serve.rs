//! `demiurge serve`: the runtime in front of an MCP client written with rmcp (a client
//! of the same SDK family as most hosts), over stdio: the catalog's tools served under
//! their exposed names, calls answered in the model view (a server's secret redacted),
//! approvals refused closed when nobody can answer (with how to approve), answered by
//! `--yes`, and every server process gone when the client goes.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Core, demo, eventually, eventually_async, servers_of};
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
    let mut command = serve_command(core, home, &["serve"]);
    if yes {
        command.arg("--yes");
    }
    command.args(options);
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    ().serve(transport).await.unwrap()
}

/// `demiurge --core CORE --home HOME ARGS...` with the demo server's secret in its
/// environment and its stderr dropped.
fn serve_command(core: &Core, home: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(common::exe());
    command
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(args)
        .env("SERVE_TOKEN", CANARY)
        .stderr(std::process::Stdio::null());
    command
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

/// A client that gives `serve` socket pairs for stdin and stdout (as Node's does) is
/// served on them as on pipes; when the client hangs up, nothing is left.
#[tokio::test]
async fn a_client_on_socket_pairs_is_served_and_leaves_nothing() {
    use std::os::unix::net::UnixStream;
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let (ours_in, theirs_in) = UnixStream::pair().unwrap();
    let (ours_out, theirs_out) = UnixStream::pair().unwrap();
    let mut command = serve_command(&core, home.path(), &["--yes", "serve"]);
    command
        .stdin(std::os::fd::OwnedFd::from(theirs_in))
        .stdout(std::os::fd::OwnedFd::from(theirs_out))
        .kill_on_drop(true);
    let mut serve = command.spawn().unwrap();
    let stream = |s: UnixStream| {
        s.set_nonblocking(true).unwrap();
        tokio::net::UnixStream::from_std(s).unwrap()
    };
    let (read, _) = tokio::io::split(stream(ours_out));
    let (_, write) = tokio::io::split(stream(ours_in));
    let served = ().serve((read, write)).await.unwrap();
    let params = CallToolRequestParams::new("d__echo").with_arguments(
        json!({"message": "over a socket"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let echoed = served.call_tool(params).await.unwrap();
    assert!(text(&echoed).contains("over a socket"), "{}", text(&echoed));
    served.cancel().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), serve.wait()).await;
    assert!(
        ended.is_ok_and(|status| status.is_ok()),
        "serve outlived its client"
    );
    assert!(
        eventually(Duration::from_secs(10), || servers_of(home.path())
            .is_empty())
        .await,
        "a server outlived its client"
    );
}

/// One socket for stdin and stdout (inetd, `socat EXEC:`): a file description two
/// streams share is left blocking, and the client is served all the same.
#[tokio::test]
async fn a_client_on_one_socket_for_both_streams_is_served() {
    use std::os::unix::net::UnixStream;
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut command = serve_command(&core, home.path(), &["--yes", "serve"]);
    command
        .stdin(std::os::fd::OwnedFd::from(theirs.try_clone().unwrap()))
        .stdout(std::os::fd::OwnedFd::from(theirs))
        .kill_on_drop(true);
    let mut serve = command.spawn().unwrap();
    ours.set_nonblocking(true).unwrap();
    let (read, write) = tokio::io::split(tokio::net::UnixStream::from_std(ours).unwrap());
    let served = ().serve((read, write)).await.unwrap();
    let params = CallToolRequestParams::new("d__echo").with_arguments(
        json!({"message": "one socket"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let echoed = served.call_tool(params).await.unwrap();
    assert!(text(&echoed).contains("one socket"), "{}", text(&echoed));
    served.cancel().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), serve.wait()).await;
    assert!(
        ended.is_ok_and(|status| status.is_ok()),
        "serve outlived its client"
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
    let command = serve_command(&core, home.path(), &["--yes", "serve"]);
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

/// A host's elicitor that answers each question with the next of its answers and
/// records the first line of what it was shown.
#[derive(Clone)]
struct Answering {
    answers: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
    shown: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Answering {
    fn new(answers: Vec<serde_json::Value>) -> Self {
        Answering {
            answers: std::sync::Arc::new(std::sync::Mutex::new(answers)),
            shown: std::sync::Arc::default(),
        }
    }

    fn shown(&self) -> Vec<String> {
        self.shown.lock().unwrap().clone()
    }
}

impl demiurge_mcp::authority::Elicitor for Answering {
    fn elicit(
        &self,
        request: demiurge_mcp::authority::ElicitationRequest,
    ) -> futures::future::BoxFuture<'static, demiurge_mcp::authority::ElicitationAnswer> {
        let first = request
            .message
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        self.shown.lock().unwrap().push(first);
        let mut answers = self.answers.lock().unwrap();
        let answer = (!answers.is_empty()).then(|| answers.remove(0));
        Box::pin(async move {
            match answer {
                Some(serde_json::Value::Object(fields)) => {
                    demiurge_mcp::authority::ElicitationAnswer::Accept(fields)
                }
                _ => demiurge_mcp::authority::ElicitationAnswer::Decline,
            }
        })
    }
}

/// A modern client (this runtime, speaking 2026-07-28 to `serve` over stdio) has no
/// connection to be asked on: `serve` puts each question (the connect and call
/// approvals, then the downstream server's own request for input) to it as an
/// `input_required` round of the call that caused it, and the call goes on with the
/// answer. A refusal in a round refuses the call; a question nobody answers with a
/// choice offered is a refusal; nothing outlives the client.
#[tokio::test]
async fn a_modern_client_answers_serves_questions_in_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    let asks = json!([{"name": "ask", "description": "asks a name", "elicit": {
        "message": "Who is calling?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
    }}]);
    std::fs::write(&tools, asks.to_string()).unwrap();
    let inner = Core::new().grant_servers(&["d"]).server(
        "d",
        &common::demo_with_tools(&tools, "approval_policy: prompt\nsandbox: off\n"),
    );
    let serve_home = tempfile::tempdir().unwrap();
    // A modern listing cannot ask (only a call has rounds): a first client with `--yes`
    // keeps the server's listing, and the modern client's calls start it.
    let first = client(&inner, serve_home.path(), true).await;
    assert!(
        first
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "d__ask")
    );
    first.cancel().await.unwrap();
    let outer = Core::new().grant_servers(&["s"]).server(
        "s",
        &format!(
            "command: {}\nargs: [--core, {}, --home, {}, serve]\nprotocol: \"2026-07-28\"\napproval_policy: auto\nsandbox: off\n",
            serde_json::to_string(common::exe()).unwrap(),
            serde_json::to_string(&inner.root()).unwrap(),
            serde_json::to_string(serve_home.path()).unwrap(),
        ),
    );
    let answers = vec![
        json!({"answer": "once"}),
        json!({"answer": "once"}),
        json!({"name": "Ada"}),
        json!({"answer": "no"}),
        json!({"answer": "always"}),
    ];
    let person = Answering::new(answers);
    let elicitor = person.clone();
    let h = common::harness_with(common::Recorder::allow(), move |mut c| {
        c.elicitor = std::sync::Arc::new(elicitor);
        c
    })
    .await;
    let (_session, turn) = common::open(&h.runtime, outer.spec()).await;
    assert!(
        turn.get("s__d__ask").is_some(),
        "{:?}",
        common::names(&turn)
    );

    let called = turn.call("s__d__ask", json!({})).await.unwrap();
    let said =
        serde_json::to_string(&called.view(demiurge_mcp::redact::View::Model).blocks).unwrap();
    assert!(!called.is_error && said.contains("Ada"), "{said}");
    let shown = person.shown();
    assert_eq!(shown.len(), 3, "{shown:?}");
    assert!(shown[0].contains("wants to connect"), "{shown:?}");
    assert!(shown[1].contains("wants to run"), "{shown:?}");
    assert!(
        shown[2].contains("The MCP server d asks: Who is calling?"),
        "{shown:?}"
    );

    // The next call is asked again ("once"), and refused in its round.
    let refused = turn.call("s__d__ask", json!({})).await.unwrap();
    let said =
        serde_json::to_string(&refused.view(demiurge_mcp::redact::View::Model).blocks).unwrap();
    assert!(refused.is_error && said.contains("denied"), "{said}");
    // An answer outside the choices offered ("always" is a person's at a terminal).
    let refused = turn.call("s__d__ask", json!({})).await.unwrap();
    assert!(refused.is_error);
    assert_eq!(person.shown().len(), 5);
    h.finish().await;
    assert!(
        eventually(Duration::from_secs(10), || servers_of(serve_home.path())
            .is_empty())
        .await,
        "a server of serve outlived its client"
    );
}

/// One JSON-RPC request of a modern client named `client` to `serve --http`, and the
/// body of the answer (JSON or an event stream), as text.
async fn modern_post(url: &str, client: &str, params: serde_json::Value) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = url::Url::parse(url).unwrap();
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    });
    let name = params["name"].as_str().unwrap_or_default().to_string();
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let host = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nmcp-method: tools/call\r\nmcp-name: {name}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        url.path(),
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    let read = stream.read_to_string(&mut answer);
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .unwrap()
        .unwrap();
    answer
}

/// The `requestState` in an answer, if it asked.
fn state_in(answer: &str) -> Option<String> {
    let at = answer.find("\"requestState\":\"")? + "\"requestState\":\"".len();
    Some(answer[at..].split('"').next()?.to_string())
}

/// A modern client's round can be answered only by that client, once, for the same
/// tool: a made-up `requestState`, another client's, one for another tool, or one
/// answered already is refused, and the call it named does not run.
#[tokio::test]
async fn a_rounds_state_answers_only_its_own_call_once() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: prompt\nsandbox: off\n"));
    let home = tempfile::tempdir().unwrap();
    let first = client(&core, home.path(), true).await;
    assert_eq!(first.list_all_tools().await.unwrap().len(), 16);
    first.cancel().await.unwrap();
    let (serve, url) = common::serving::serve_http(&core, home.path(), &[]).await;
    let once = json!({"demiurge-approval": {"action": "accept", "content": {"answer": "once"}}});
    let echo = |state: Option<&str>| {
        let mut params = json!({"name": "d__echo", "arguments": {"message": "marker-7f3"}});
        if let Some(state) = state {
            params["requestState"] = json!(state);
            params["inputResponses"] = once.clone();
        }
        params
    };
    let made_up = modern_post(&url, "alice", echo(Some(&"0".repeat(32)))).await;
    assert!(made_up.contains("names no call waiting"), "{made_up}");

    let asked = modern_post(&url, "alice", echo(None)).await;
    assert!(
        asked.contains("input_required") || asked.contains("inputRequests"),
        "{asked}"
    );
    assert!(asked.contains("wants to connect"), "{asked}");
    let state = state_in(&asked).expect("a requestState");
    assert_eq!(state.len(), 32);
    // Another client (another identity) cannot answer alice's question.
    let other = modern_post(&url, "mallory", echo(Some(&state))).await;
    assert!(other.contains("names no call waiting"), "{other}");
    // Alice answers for another tool: refused, and her waiting call is dropped.
    let mut moved = echo(Some(&state));
    moved["name"] = json!("d__add");
    let moved = modern_post(&url, "alice", moved).await;
    assert!(moved.contains("another tool"), "{moved}");
    let again = modern_post(&url, "alice", echo(Some(&state))).await;
    assert!(again.contains("names no call waiting"), "{again}");
    assert!(!again.contains("marker-7f3") && !moved.contains("marker-7f3"));

    // Answered properly, twice (connect, then the call), the call runs once.
    let asked = modern_post(&url, "alice", echo(None)).await;
    let connect = state_in(&asked).unwrap();
    let asked = modern_post(&url, "alice", echo(Some(&connect))).await;
    assert!(asked.contains("wants to run"), "{asked}");
    let call = state_in(&asked).unwrap();
    let ran = modern_post(&url, "alice", echo(Some(&call))).await;
    assert!(
        ran.contains("marker-7f3") && !ran.contains("isError\":true"),
        "{ran}"
    );
    let replayed = modern_post(&url, "alice", echo(Some(&call))).await;
    assert!(replayed.contains("names no call waiting"), "{replayed}");
    common::serving::stop_serving(serve, home.path()).await;
}

/// Every modern client name is a new identity, each with its own session: a flood of
/// names (one attacker making up clientInfo) gets exactly `serve`'s bound of live
/// sessions (32), every later name is refused, and a client known before the flood keeps
/// its session.
#[tokio::test]
async fn a_flood_of_client_identities_gets_the_bound_and_no_more() {
    // Not granted: each session's turn denies the server, so no process starts.
    let core = Core::new().server("d", &demo("sandbox: off\n"));
    let home = tempfile::tempdir().unwrap();
    let (serve, url) = common::serving::serve_http(&core, home.path(), &[]).await;
    let call = json!({"name": "d__echo", "arguments": {"message": "hi"}});
    let refused = |answer: &str| answer.contains("too many clients");
    let known = modern_post(&url, "known", call.clone()).await;
    assert!(!refused(&known), "{known}");
    let mut admitted = 1;
    for n in 0..79 {
        let answer = modern_post(&url, &format!("made-up-{n}"), call.clone()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        if !refused(&answer) {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 32);
    let again = modern_post(&url, "known", call).await;
    assert!(!refused(&again), "{again}");
    common::serving::stop_serving(serve, home.path()).await;
}

/// A client whose person opens every sign-in link it is sent (in the background, as
/// a browser would) and accepts.
#[derive(Clone, Default)]
struct OpensLinks(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for OpensLinks {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}, "url": {}}},
            "clientInfo": {"name": "opens-links", "version": "1"},
        }))
        .unwrap()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
        let ElicitRequestParams::UrlElicitationParams { url, message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        self.0.lock().unwrap().push(message);
        tokio::spawn(async move {
            // The authorization server redirects at once, to serve's loopback redirect.
            let (_, back) = common::oauth::browse(&url).await.unwrap();
            common::oauth::browse(&back).await;
        });
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

/// A downstream server that needs OAuth: `serve` sends the client's person the
/// authorization link (a URL-mode elicitation); once their browser comes back to
/// serve's loopback redirect, the server is listed and called, and no token reaches
/// the client.
#[tokio::test]
async fn a_downstream_sign_in_reaches_the_client_as_a_link() {
    let server = common::oauth::serve(common::oauth::AuthOptions::default()).await;
    let core = Core::new().grant_servers(&["p"]).server(
        "p",
        &format!(
            "transport: streamable_http\nurl: {}\napproval_policy: auto\n",
            server.url()
        ),
    );
    let home = tempfile::tempdir().unwrap();
    let args = ["--yes", "--trust-network", "127.0.0.0/8", "serve"];
    let command = serve_command(&core, home.path(), &args);
    let person = OpensLinks::default();
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let served = person.clone().serve(transport).await.unwrap();
    let tools = served.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "p__echo"), "{tools:?}");
    let shown = person.0.lock().unwrap().clone();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].contains("MCP server p needs you to sign in"),
        "{shown:?}"
    );
    let params = CallToolRequestParams::new("p__echo").with_arguments(
        json!({"message": "signed in"})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let called = served.call_tool(params).await.unwrap();
    assert!(text(&called).contains("signed in"), "{}", text(&called));
    let everything = format!("{tools:?}{shown:?}{}", text(&called));
    assert!(!everything.contains(common::oauth::CANARY));
    served.cancel().await.unwrap();
}

/// A client that keeps the log messages it hears.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Logs {
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_string(&params).unwrap());
    }
}

/// A downstream server's log messages reach the client at or above the level it set,
/// redacted, under a logger that names the server.
#[tokio::test]
#[allow(deprecated)]
async fn a_downstream_servers_log_reaches_the_client_at_its_level() {
    let core = core();
    let home = tempfile::tempdir().unwrap();
    let command = serve_command(&core, home.path(), &["--yes", "serve"]);
    let heard = Logs::default();
    let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
    let served = heard.clone().serve(transport).await.unwrap();
    served
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Warning,
        ))
        .await
        .unwrap();
    for (level, message) in [
        ("info", "quiet-4c1".to_string()),
        ("error", format!("loud {CANARY}")),
    ] {
        let params = CallToolRequestParams::new("d__log").with_arguments(
            json!({"level": level, "message": message})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let sent = served.call_tool(params).await.unwrap();
        assert!(text(&sent).contains("sent"), "{}", text(&sent));
    }
    assert!(
        eventually(Duration::from_secs(10), || !heard
            .0
            .lock()
            .unwrap()
            .is_empty())
        .await
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logs = heard.0.lock().unwrap().clone();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(
        logs[0].contains("loud") && logs[0].contains("\"logger\":\"d/demo\""),
        "{logs:?}"
    );
    assert!(!logs[0].contains(CANARY), "{logs:?}");
    served.cancel().await.unwrap();
}

/// A modern client's listing cannot ask (only a call carries questions): a server that
/// has never listed and needs a connect approval is left out of that listing, which
/// offers `connect_servers` instead; calling it asks the client in rounds, connects the
/// server, and the next listing has its tools (and no `connect_servers`).
#[tokio::test]
async fn a_modern_clients_first_listing_offers_to_connect_what_it_could_not_ask() {
    let inner = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: prompt\nsandbox: off\n"));
    let serve_home = tempfile::tempdir().unwrap();
    let outer = Core::new().grant_servers(&["s"]).server(
        "s",
        &format!(
            "command: {}\nargs: [--core, {}, --home, {}, serve]\nprotocol: \"2026-07-28\"\napproval_policy: auto\nsandbox: off\n",
            serde_json::to_string(common::exe()).unwrap(),
            serde_json::to_string(&inner.root()).unwrap(),
            serde_json::to_string(serve_home.path()).unwrap(),
        ),
    );
    let person = Answering::new(vec![json!({"answer": "session"})]);
    let elicitor = person.clone();
    let h = common::harness_with(common::Recorder::allow(), move |mut c| {
        c.elicitor = std::sync::Arc::new(elicitor);
        c
    })
    .await;
    let (session, turn) = common::open(&h.runtime, outer.spec()).await;
    let names = common::names(&turn);
    assert_eq!(names, vec!["s__connect_servers".to_string()], "{names:?}");
    assert!(person.shown().is_empty());
    let connect = turn.get("s__connect_servers").unwrap();
    assert!(connect.description.contains("MCP servers d"), "{connect:?}");

    let connected = turn.call("s__connect_servers", json!({})).await.unwrap();
    let said =
        serde_json::to_string(&connected.view(demiurge_mcp::redact::View::Model).blocks).unwrap();
    assert!(
        !connected.is_error && said.contains("d: connected, 16 tools"),
        "{said}"
    );
    assert_eq!(person.shown().len(), 1);
    assert!(person.shown()[0].contains("wants to connect"));
    let listed_again = eventually_async(Duration::from_secs(10), async || {
        let turn = session.prepare_turn().await.unwrap();
        turn.get("s__d__echo").is_some() && turn.get("s__connect_servers").is_none()
    })
    .await;
    assert!(
        listed_again,
        "the server's tools did not reach the next listing"
    );
    h.finish().await;
    assert!(
        eventually(Duration::from_secs(10), || servers_of(serve_home.path())
            .is_empty())
        .await
    );
}
