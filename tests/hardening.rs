//! Hardening, round 3: each class an attacker's review found open, tried with several
//! members against the built-in demo server in real child processes.
//!
//! - labels: what a marker names is a fixed word or a declared name, never text of the
//!   result (a key holding a secret, a shape's name);
//! - counts under sensitive names stay, neighbours of a secret stay;
//! - secrets across content-block joins, and tool names that hold a secret once
//!   normalized;
//! - approvals follow the tool (raw name and definition), not its exposed name, and a
//!   remembered one covers one workspace;
//! - `--json` output escapes what a terminal must not see raw.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Core, Recorder, demo, exe, harness, harness_with, host_env, read_tree};
use demiurge_mcp::authority::{Action, ApprovalAnswer};
use demiurge_mcp::redact::View;
use serde_json::{Value, json};

const DECLARED: &str = "declcanary-5f1e2d";
const REVEALED: &str = "revcanary-77c3a1";

/// A core with one demo server whose env carries [`DECLARED`].
fn secret_core() -> Core {
    Core::new().grant_servers(&["w"]).server(
        "w",
        &demo(&format!(
            "env:\n  API_TOKEN: {DECLARED}\n  SK: sk_live_abcd1234\napproval_policy: auto\n"
        )),
    )
}

fn every_view(result: &demiurge_mcp::result::ToolResult) -> String {
    [
        View::Model,
        View::Operator,
        View::Event,
        View::Durable,
        View::Debug,
    ]
    .iter()
    .map(|v| serde_json::to_string(result.view(*v)).unwrap())
    .collect::<Vec<_>>()
    .join("\n")
}

/// The labels of `text`'s markers (`<redacted:NAME>`, `<redacted:NAME:F16>`), each
/// checked to be a fixed word or a name the core declared; how many there are.
fn fixed_labels(text: &str) -> usize {
    const ALLOWED: &[&str] = &[
        "token",
        "api_key",
        "password",
        "secret",
        "authorization",
        "API_TOKEN",
        "SK",
    ];
    let labels: Vec<&str> = text
        .split("<redacted:")
        .skip(1)
        .filter_map(|rest| rest.split('>').next())
        .map(|label| label.split(':').next().unwrap_or_default())
        .collect();
    for label in &labels {
        assert!(
            ALLOWED.contains(label),
            "label {label} is not a fixed word or a declared name"
        );
    }
    labels.len()
}

/// A key that holds a secret (declared, revealed by the result, or unknown but under a
/// sensitive word) never reaches a label: the values under such keys are shown as
/// `<redacted:WORD>` with WORD from the fixed vocabulary, in results and error results.
#[tokio::test]
async fn a_label_never_repeats_what_it_hides() {
    let core = secret_core();
    let h = harness_with(Recorder::allow(), |c| c.with_host_env(host_env(&[]))).await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let keys = [
        format!("token_{DECLARED}"),
        format!("sessionToken{DECLARED}"),
        format!("X-Api-Key-{DECLARED}"),
        format!("password.{DECLARED}.old"),
        format!("{DECLARED}_secret"),
        format!("token_{REVEALED}"),
    ];
    for key in &keys {
        let data = json!({ key: "under-the-key-9911", "token": REVEALED, "nested": {key: [1, 2]}});
        for tool in ["w__echo_json", "w__fail"] {
            let result = turn
                .call(tool, json!({ "message": data.to_string() }))
                .await
                .unwrap();
            assert_eq!(result.is_error, tool == "w__fail");
            let shown = every_view(&result);
            for leaked in [DECLARED, REVEALED, "under-the-key-9911"] {
                assert!(
                    !shown.contains(leaked),
                    "{tool} with key {key} shows {leaked}:\n{shown}"
                );
            }
            let operator = &result.view(View::Operator);
            assert!(
                fixed_labels(&operator.content) > 0,
                "{tool}: {}",
                operator.content
            );
        }
    }
    // A key that is itself a declared secret is a marker, and neighbours redacted alike
    // keep apart.
    let data = json!({ DECLARED: "a", "<redacted:API_TOKEN>": "b", "ok": "plain" });
    let result = turn
        .call("w__echo_json", json!({ "message": data.to_string() }))
        .await
        .unwrap();
    let operator = result.view(View::Operator);
    // The other channels that write labels: stderr (the durable log), a resource read
    // (a result), the events and the session's event log.
    turn.call(
        "w__stderr",
        json!({ "text": format!("{{\"token_{DECLARED}\": \"under-the-key-9911\"}} --token {REVEALED}") }),
    )
    .await
    .unwrap();
    let read = turn
        .read_resource("w", "demo://env/API_TOKEN")
        .await
        .unwrap();
    assert!(
        read.view(View::Operator)
            .content
            .contains("<redacted:API_TOKEN>"),
        "{:?}",
        read.view(View::Operator)
    );
    assert!(
        operator.data.get("<redacted:API_TOKEN>").is_some(),
        "{:?}",
        operator.data
    );
    assert!(
        operator.data.get("<redacted:API_TOKEN>#2").is_some(),
        "{:?}",
        operator.data
    );
    assert_eq!(operator.data["ok"], "plain");
    drop(turn);
    h.finish().await;
    let mut written = serde_json::to_string(&h.sink.events()).unwrap();
    written.push_str(&read_tree(h.home.path()));
    assert!(
        written.contains("--token <redacted:token>"),
        "the stderr log was not written"
    );
    for leaked in [DECLARED, REVEALED, "under-the-key-9911"] {
        assert!(!written.contains(leaked), "an event or log shows {leaked}");
    }
    fixed_labels(&written);
}

/// A count under a sensitive name is not a secret: `{"token_count": 42}` beside a real
/// token hides the token only, and the count stays wherever it recurs.
#[tokio::test]
async fn counts_under_sensitive_names_and_neighbours_stay() {
    let core = secret_core();
    let h = harness(Recorder::allow()).await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    for (key, count) in [
        ("token_count", 424242),
        ("max_tokens", 8192),
        ("inputTokens", 31337),
        ("expires_in", 3600),
        ("password_length", 12345),
    ] {
        let data = json!({ key: count, "public": "plain-value", "token": REVEALED,
            "note": format!("used {count} of them") });
        let result = turn
            .call("w__echo_json", json!({ "message": data.to_string() }))
            .await
            .unwrap();
        let operator = result.view(View::Operator);
        assert_eq!(operator.data[key], count, "{key}: {:?}", operator.data);
        assert_eq!(operator.data["public"], "plain-value");
        assert_eq!(operator.data["note"], format!("used {count} of them"));
        assert_eq!(operator.data["token"], "<redacted:token>");
        assert!(!every_view(&result).contains(REVEALED));
    }
    // A number under a plain sensitive name is still a secret of the result.
    let data = json!({ "token": 987654321, "echo": "987654321" });
    let result = turn
        .call("w__echo_json", json!({ "message": data.to_string() }))
        .await
        .unwrap();
    assert!(!every_view(&result).contains("987654321"));
    h.finish().await;
}

/// A secret or a shape split across two content blocks is hidden in each block and in
/// the joined text.
#[tokio::test]
async fn secrets_across_content_block_joins_are_hidden() {
    let core = Core::new().grant_servers(&["w"]).server(
        "w",
        &demo("env:\n  PEM: \"line-one-abcdef\\nline-two-ghijkl\"\napproval_policy: auto\n"),
    );
    let h = harness(Recorder::allow()).await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["Authorization:", "Bearer hidden-bearer-77"],
            &["hidden-bearer-77"],
        ),
        (&["{\"password\":", "\"hidden-pw-88\"}"], &["hidden-pw-88"]),
        (
            &["starts line-one-abcdef", "line-two-ghijkl ends"],
            &["abcdef", "ghijkl"],
        ),
        (
            &["a", "Cookie:", "session=hidden-cookie-99"],
            &["hidden-cookie-99"],
        ),
    ];
    for (blocks, hidden) in cases {
        let message = serde_json::to_string(blocks).unwrap();
        let result = turn
            .call("w__echo_json", json!({ "message": message }))
            .await
            .unwrap();
        assert_eq!(result.view(View::Operator).blocks.len(), blocks.len());
        let shown = every_view(&result);
        for h in hidden {
            assert!(!shown.contains(h), "{blocks:?} shows {h}:\n{shown}");
        }
    }
    h.finish().await;
}

/// A tool whose name holds a declared secret once both are normalized as exposed names
/// are (case, `_`, `.`, `-`) is hidden, as one holding it verbatim is.
#[tokio::test]
async fn tool_names_holding_a_normalized_secret_are_hidden() {
    let tools = tempfile::tempdir().unwrap();
    let file = tools.path().join("tools.json");
    let names = [
        "lookup_SK_LIVE_ABCD1234",
        "sk-live-abcd1234",
        "get.sk.live.abcd1234",
        "SK LIVE ABCD1234 x",
        "safe_tool",
    ];
    let listed: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    std::fs::write(&file, serde_json::to_vec(&listed).unwrap()).unwrap();
    let core = Core::new().grant_servers(&["w"]).server(
        "w",
        &format!(
            "command: {}\nargs: [demo-server, --tools-file, {}]\nenv:\n  SK: sk_live_abcd1234\napproval_policy: auto\n",
            serde_json::to_string(exe()).unwrap(),
            serde_json::to_string(&file).unwrap()
        ),
    );
    let h = harness(Recorder::allow()).await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let exposed = common::names(&turn);
    assert!(exposed.contains(&"w__safe_tool".to_string()), "{exposed:?}");
    for name in &exposed {
        assert!(
            !name
                .to_lowercase()
                .replace(['_', '.', ' '], "-")
                .contains("sk-live-abcd1234"),
            "{name} shows the secret"
        );
    }
    assert!(
        turn.diagnostics()
            .iter()
            .any(|d| d.message.contains("4 tool(s) hidden")),
        "{:?}",
        turn.diagnostics()
    );
    h.finish().await;
}

/// A demo server serving `tools` from a file, and the file.
fn tools_server(dir: &Path, tools: &[(&str, &str)]) -> (String, std::path::PathBuf) {
    let file = dir.join("tools.json");
    write_tools(&file, tools);
    let yaml = format!(
        "command: {}\nargs: [demo-server, --tools-file, {}]\n",
        serde_json::to_string(exe()).unwrap(),
        serde_json::to_string(&file).unwrap()
    );
    (yaml, file)
}

fn write_tools(file: &Path, tools: &[(&str, &str)]) {
    let listed: Vec<Value> = tools
        .iter()
        .map(|(n, d)| json!({"name": n, "description": d}))
        .collect();
    std::fs::write(file, serde_json::to_vec(&listed).unwrap()).unwrap();
}

/// What calling `tool` with no arguments answered (operator view).
async fn ran(turn: &demiurge_mcp::TurnCatalog, tool: &str) -> String {
    turn.call(tool, json!({}))
        .await
        .unwrap()
        .view(View::Operator)
        .content
        .clone()
}

/// Calls asked about, by the raw tool name the approver was shown.
fn call_questions(recorder: &Recorder) -> Vec<String> {
    recorder
        .requests()
        .iter()
        .filter(|r| r.action == Action::Call)
        .map(|r| r.call.as_ref().expect("a call names its tool").name.clone())
        .collect()
}

/// Names that collide after sanitizing get the same suffixes however the server orders
/// them, so an exposed name always runs the same tool.
#[tokio::test]
async fn colliding_names_keep_their_tool_whatever_the_listing_order() {
    let dir = tempfile::tempdir().unwrap();
    let colliding = ["a-b", "a.b", "a b", "A/B"];
    let (yaml, file) = tools_server(dir.path(), &[]);
    let core = Core::new()
        .grant_servers(&["w"])
        .server("w", &format!("{yaml}approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let mut first: Option<Vec<(String, String)>> = None;
    let mut order = colliding.to_vec();
    for round in 0..4 {
        order.rotate_left(1);
        if round % 2 == 1 {
            order.reverse();
        }
        let tools: Vec<(&str, &str)> = order.iter().map(|n| (*n, "same")).collect();
        write_tools(&file, &tools);
        let (session, _) = h
            .runtime
            .start_session(core.spec_in(&format!("r{round}")))
            .await
            .unwrap();
        let turn = session.prepare_turn().await.unwrap();
        let mut ran = Vec::new();
        // By the raw names' order: `A/B`, `a b`, `a-b`, `a.b`.
        for (name, raw) in [
            ("w__A-B", "A/B"),
            ("w__a-b-2", "a b"),
            ("w__a-b-3", "a-b"),
            ("w__a-b-4", "a.b"),
        ] {
            let result = turn.call(name, json!({})).await.unwrap();
            assert_eq!(result.view(View::Operator).content, format!("ran {raw}"));
            ran.push((
                name.to_string(),
                result.view(View::Operator).content.clone(),
            ));
        }
        match &first {
            None => first = Some(ran),
            Some(first) => assert_eq!(first, &ran, "listing order {order:?}"),
        }
    }
    h.finish().await;
}

/// An "allow for the session" and an "always" cover the tool they were given for (its
/// raw name and definition): an exposed name that now points at another tool, or a
/// tool whose definition changed, asks again; the prompt names the raw tool.
#[tokio::test]
async fn approvals_follow_the_tool_not_its_exposed_name() {
    let dir = tempfile::tempdir().unwrap();
    let (yaml, file) = tools_server(dir.path(), &[("a-b", "dash"), ("a.b", "dot")]);
    let core = Core::new().grant_servers(&["w"]).server("w", &yaml);
    let h = harness(Recorder::new(|_| ApprovalAnswer::AllowAlways)).await;

    let (_session, turn) = common::open(&h.runtime, core.spec_in("one")).await;
    assert_eq!(ran(&turn, "w__a-b").await, "ran a-b");
    // Allowed for the session and always: asked once.
    turn.call("w__a-b", json!({})).await.unwrap();
    assert_eq!(call_questions(&h.approver), ["a-b"]);
    let asked = h.approver.requests();
    let question = asked.iter().find(|r| r.action == Action::Call).unwrap();
    let shown = question.render();
    assert!(shown.contains("name on the server: a-b"), "{shown}");
    assert!(
        shown.contains("hints (the server's own claims): writes (not said), destructive (not said), open world (not said)"),
        "{shown}"
    );
    assert!(shown.contains("definition: sha256:"), "{shown}");
    drop(turn);

    // The server drops `a-b`: in a new session `w__a-b` is `a.b`, which nobody
    // approved; the "always" given for `a-b` does not cover it.
    write_tools(&file, &[("a.b", "dot")]);
    let (_session2, turn) = common::open(&h.runtime, core.spec_in("two")).await;
    assert_eq!(ran(&turn, "w__a-b").await, "ran a.b");
    assert_eq!(call_questions(&h.approver), ["a-b", "a.b"]);
    drop(turn);

    // Now `a.b` has its "always": a new session does not ask.
    let (session3, _) = h
        .runtime
        .start_session(core.spec_in("three"))
        .await
        .unwrap();
    session3
        .prepare_turn()
        .await
        .unwrap()
        .call("w__a-b", json!({}))
        .await
        .unwrap();
    assert_eq!(call_questions(&h.approver), ["a-b", "a.b"]);

    // `a.b` redefined (its description changed): asked again.
    write_tools(&file, &[("a.b", "dot, now deleting everything")]);
    let (session4, _) = h.runtime.start_session(core.spec_in("four")).await.unwrap();
    session4
        .prepare_turn()
        .await
        .unwrap()
        .call("w__a-b", json!({}))
        .await
        .unwrap();
    assert_eq!(call_questions(&h.approver), ["a-b", "a.b", "a.b"]);
    h.finish().await;
}

/// A remembered "always" covers the workspace it was given in: the same core in
/// another workspace asks again, to connect and to call.
#[tokio::test]
async fn a_remembered_approval_covers_one_workspace() {
    let core = Core::new().grant_servers(&["w"]).server("w", &demo(""));
    let h = harness(Recorder::new(|_| ApprovalAnswer::AllowAlways)).await;
    let other = tempfile::tempdir().unwrap();
    let asked = || h.approver.requests().len();
    for (round, workspace, expected) in [
        (0, None, 2),
        (1, None, 2),
        (2, Some(other.path().canonicalize().unwrap()), 4),
        (3, Some(other.path().canonicalize().unwrap()), 4),
    ] {
        let mut spec = core.spec_in(&format!("lane{round}"));
        spec.workspace = workspace;
        let (_session, turn) = common::open(&h.runtime, spec).await;
        turn.call("w__echo", json!({"message": "hi"}))
            .await
            .unwrap();
        assert_eq!(asked(), expected, "round {round}");
    }
    h.finish().await;
}

/// `--json` output writes C1 controls, bidi isolates and overrides, tag characters and
/// fillers as `\u` escapes: nothing a terminal would act on, and the same JSON.
#[test]
fn json_output_escapes_what_a_terminal_must_not_see() {
    let core = Core::new()
        .grant_servers(&["w"])
        .server("w", &demo("approval_policy: auto\n"));
    let home = tempfile::tempdir().unwrap();
    let message = "a\u{85}b\u{9b}c\u{2066}d\u{202e}e\u{e0041}f\u{3164}g\u{200b}h\u{7f}i";
    let out = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["--yes", "call", "w__echo", "--json", "--args"])
        .arg(json!({ "message": message }).to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    for c in stdout.chars() {
        assert!(
            c == '\n' || !demiurge_mcp::text::is_unsafe(c),
            "raw U+{:04X} in {stdout:?}",
            c as u32
        );
    }
    assert!(
        stdout.contains("\\u202e") && stdout.contains("\\udb40\\udc41"),
        "{stdout}"
    );
    let parsed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(parsed["content"], message);
}

/// An elicitor that records what it is shown and accepts with the defaults.
#[derive(Clone, Default)]
struct ShownElicitations(
    std::sync::Arc<std::sync::Mutex<Vec<demiurge_mcp::authority::ElicitationRequest>>>,
);

impl demiurge_mcp::authority::Elicitor for ShownElicitations {
    fn elicit(
        &self,
        request: demiurge_mcp::authority::ElicitationRequest,
    ) -> futures::future::BoxFuture<'static, demiurge_mcp::authority::ElicitationAnswer> {
        self.0.lock().unwrap().push(request);
        Box::pin(async {
            demiurge_mcp::authority::ElicitationAnswer::Accept(serde_json::Map::new())
        })
    }
}

/// A harness whose elicitor records what it is shown.
async fn eliciting_harness() -> (common::Harness, ShownElicitations) {
    let shown = ShownElicitations::default();
    let elicitor = shown.clone();
    let h = harness_with(Recorder::allow(), move |mut c| {
        c.elicitor = std::sync::Arc::new(elicitor);
        c
    })
    .await;
    (h, shown)
}

/// Everything of an elicitation that a person is shown comes from the server: its
/// message, titles, descriptions, property names, enum labels and defaults are
/// redacted with the connection's secrets before the host's elicitor (and the events)
/// see them; the server still gets its own defaults back.
#[tokio::test]
async fn elicitation_text_is_redacted_before_anyone_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.json");
    let schema = json!({
        "type": "object",
        "properties": {
            format!("field_{DECLARED}"): {"type": "string", "title": format!("Title {DECLARED}"),
                "description": format!("see https://u:{REVEALED}@example.test/x")},
            "choice": {"type": "string", "enum": [format!("opt-{DECLARED}"), "plain"],
                "default": "plain"},
            "password": {"type": "string", "default": "default-pw-6655"},
            "note": {"type": "string", "default": format!("token={REVEALED}")}
        }
    });
    let listed = json!([{"name": "ask", "elicit": {
        "message": format!("need input, key {DECLARED}, Authorization: Bearer {REVEALED}"),
        "requestedSchema": schema
    }}]);
    std::fs::write(&file, listed.to_string()).unwrap();
    let core = Core::new().grant_servers(&["w"]).server(
        "w",
        &format!(
            "command: {}\nargs: [demo-server, --tools-file, {}]\nenv:\n  API_TOKEN: {DECLARED}\napproval_policy: auto\n",
            serde_json::to_string(exe()).unwrap(),
            serde_json::to_string(&file).unwrap()
        ),
    );
    let (h, shown) = eliciting_harness().await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let result = turn.call("w__ask", json!({})).await.unwrap();
    let asked = shown.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{:?}", result.view(View::Operator));
    let seen = serde_json::to_string(&asked[0]).unwrap();
    for leaked in [DECLARED, REVEALED, "default-pw-6655"] {
        assert!(
            !seen.contains(leaked),
            "the elicitor was shown {leaked}: {seen}"
        );
    }
    // The structure a host renders is intact.
    assert_eq!(asked[0].schema["properties"]["choice"]["type"], "string");
    assert_eq!(asked[0].schema["properties"]["choice"]["enum"][1], "plain");
    assert_eq!(asked[0].defaults["choice"], "plain");
    // The server got its own defaults, and the result shows none of them in clear.
    let content = &result.view(View::Operator).content;
    assert!(content.contains("\"accept\""), "{content}");
    assert!(content.contains("plain"), "{content}");
    assert!(!every_view(&result).contains("default-pw-6655"));
    h.finish().await;
    let events = serde_json::to_string(&h.sink.events()).unwrap();
    for leaked in [DECLARED, REVEALED, "default-pw-6655"] {
        assert!(!events.contains(leaked), "an event shows {leaked}");
    }
}

/// Elicitations whose schema rmcp's typed form does not take are still answered as
/// elicitations on the same connection: one without `properties` asks (an empty form),
/// one nested too deep is declined without asking; the connection stays up either way.
#[tokio::test]
async fn odd_elicitation_schemas_are_answered_not_fatal() {
    let core = Core::new().grant_servers(&["odd"]).server(
        "odd",
        &common::demo_fault("odd-elicitations", "approval_policy: auto\n"),
    );
    let (h, shown) = eliciting_harness().await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let reply = |tool: &'static str| {
        let turn = &turn;
        async move {
            let result = turn.call(tool, json!({})).await.unwrap();
            let text = result.view(View::Operator).content.clone();
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text))
        }
    };
    let plain = reply("odd__ask_plain").await;
    assert_eq!(plain["action"], "accept", "{plain}");
    let empty = reply("odd__ask_no_properties").await;
    assert!(empty.get("code").is_none(), "answered as an error: {empty}");
    assert_eq!(empty["action"], "accept", "{empty}");
    let deep = reply("odd__ask_deep").await;
    assert_eq!(deep["action"], "decline", "{deep}");
    // Still connected: the plain one again.
    assert_eq!(reply("odd__ask_plain").await["action"], "accept");
    // Asked: plain, no-properties, plain; the deep one was declined unasked.
    assert_eq!(shown.0.lock().unwrap().len(), 3);
    h.finish().await;
}

/// A resource read approved for the session covers that URI only: another that
/// differs only in a query value (hidden in the prompt) is asked about again.
#[tokio::test]
async fn a_read_approval_covers_its_exact_uri() {
    let core = Core::new().grant_servers(&["w"]).server("w", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (_session, turn) = common::open(&h.runtime, core.spec()).await;
    let reads = || {
        h.approver
            .requests()
            .iter()
            .filter(|r| r.action == Action::Read)
            .count()
    };
    for (uri, asked) in [
        ("demo://env/X?sql=SELECTAAAA", 1),
        ("demo://env/X?sql=SELECTAAAA", 1),
        ("demo://env/X?sql=DROPTABLEX", 2),
        ("demo://env/X?sql=DROPTABLEY", 3),
    ] {
        turn.read_resource("w", uri).await.unwrap();
        assert_eq!(reads(), asked, "{uri}");
    }
    h.finish().await;
}
