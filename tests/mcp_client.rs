//! The MCP client beyond tools, against the built-in server: roots, progress (to the
//! caller and as events, extending a call's timeout), logging (events, the declared
//! level, redaction), resources and templates (listed, filtered, read under the call
//! authority, redacted), prompts, list changes, resource updates, server identity.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Core, Recorder, demo, eventually, harness, harness_with};
use demiurge_mcp::{ApprovalAnswer, CallError};
use serde_json::json;

/// A secret the server's environment holds, and the runtime knows as one.
const TOKEN: &str = "tok-5e1f0c3a9d7b42e6";

fn text_of(result: &demiurge_mcp::result::ToolResult) -> String {
    result
        .view(demiurge_mcp::redact::View::Model)
        .content
        .clone()
}

#[tokio::test]
async fn a_server_sees_the_workspace_or_its_declared_roots_inside_it() {
    let core = Core::new().grant_servers(&["ws", "docs"]);
    let root = core.root();
    std::fs::create_dir_all(root.join("docs/a")).unwrap();
    std::fs::write(root.join("notes.txt"), "n").unwrap();
    let core = core
        .grant_servers(&["none"])
        .server("ws", &demo(""))
        .server("docs", &demo("roots: [docs/a, notes.txt]\n"))
        .server("none", &demo("roots: []\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let ws = catalog.call("ws__roots", json!({})).await.unwrap();
    let url = |p: &std::path::Path| url::Url::from_directory_path(p).unwrap().to_string();
    assert_eq!(text_of(&ws), url(&root));
    // The connect question names the declared roots.
    let asked = h.approver.requests();
    let docs_question = asked.iter().find(|r| r.server == "docs").unwrap();
    assert!(
        docs_question.render().contains("roots: docs/a, notes.txt"),
        "{}",
        docs_question.render()
    );
    let docs = catalog.call("docs__roots", json!({})).await.unwrap();
    let file = url::Url::from_file_path(root.join("notes.txt")).unwrap();
    assert_eq!(
        text_of(&docs),
        format!("{}\n{file}", url(&root.join("docs/a")))
    );
    let none = catalog.call("none__roots", json!({})).await.unwrap();
    assert_eq!(text_of(&none), "");
    h.finish().await;
}

#[tokio::test]
async fn a_root_outside_the_workspace_denies_the_server() {
    let core = Core::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), core.root().join("escape")).unwrap();
    // Through a link, or to nothing: denied before any approval.
    let ids = ["link", "missing"];
    let mut core = core.grant_servers(&ids);
    for (id, root) in ids.iter().zip(["escape", "nowhere"]) {
        core = core.server(id, &demo(&format!("roots: [{root:?}]\n")));
    }
    // Absolute or climbing: the declaration does not even load.
    let climbing = ["/etc", "..", "x/../../y"];
    for (i, root) in climbing.iter().enumerate() {
        core = core.server(&format!("climb{i}"), &demo(&format!("roots: [{root:?}]\n")));
    }
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let denied: Vec<&str> = catalog.denied().iter().map(|d| d.server.as_str()).collect();
    assert_eq!(denied, ids, "{:?}", catalog.denied());
    assert!(catalog.tools().is_empty());
    assert!(h.approver.requests().is_empty());
    for i in 0..climbing.len() {
        let id = format!("climb{i}");
        let d = catalog
            .diagnostics()
            .iter()
            .find(|d| d.server == id)
            .unwrap_or_else(|| panic!("{id}: {:?}", catalog.diagnostics()));
        assert!(d.message.contains("roots[0]"), "{}", d.message);
    }
    h.finish().await;
}

#[tokio::test]
async fn progress_reaches_the_caller_and_the_events_and_may_extend_a_call() {
    let core = Core::new()
        .grant_servers(&["slow", "strict"])
        .server(
            "slow",
            &demo("timeout_seconds: 2\nmax_timeout_seconds: 30\n"),
        )
        .server("strict", &demo("timeout_seconds: 2\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    // Five steps 600 ms apart: 3 s in all, longer than the 2 s timeout, each step
    // well inside it.
    let args = json!({"steps": 5, "ms": 600});
    let result = catalog
        .call_with_progress(
            "slow__progress",
            args.clone(),
            Some(Arc::new(move |p: demiurge_mcp::Progress| {
                sink.lock().unwrap().push((p.progress, p.total, p.message));
            })),
        )
        .await
        .unwrap();
    assert!(!result.is_error, "{}", text_of(&result));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(seen[4], (5.0, Some(5.0), Some("step 5 of 5".to_string())));
    h.runtime.flush_events().await;
    assert!(h.sink.of_type("mcp.progress").len() >= 5);
    // Without a declared maximum the same call times out.
    let strict = catalog.call("strict__progress", args).await.unwrap();
    assert!(strict.is_error);
    assert!(
        text_of(&strict).contains("timed out"),
        "{}",
        text_of(&strict)
    );
    // A server echoing a call's sensitive argument in its progress: hidden from the
    // caller and from the events, as it would be in the result.
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&heard);
    catalog
        .call_with_progress(
            "slow__progress",
            json!({"steps": 2, "ms": 10, "label": TOKEN, "api_key": TOKEN}),
            Some(Arc::new(move |p: demiurge_mcp::Progress| {
                sink.lock().unwrap().push(p.message.unwrap_or_default());
            })),
        )
        .await
        .unwrap();
    h.runtime.flush_events().await;
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 2, "{heard:?}");
    let events: Vec<String> = h
        .sink
        .of_type("mcp.progress")
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect();
    for text in heard.iter().chain(&events) {
        assert!(!text.contains(TOKEN), "{text}");
    }
    h.finish().await;
}

#[tokio::test]
async fn log_messages_are_redacted_events_and_the_declared_level_holds() {
    log_messages("").await;
}

/// The same in the 2026-07-28 era, where the level goes with each request.
#[tokio::test]
async fn modern_log_messages_are_redacted_and_the_declared_level_goes_with_each_request() {
    log_messages("protocol: 2026-07-28\n").await;
}

async fn log_messages(era: &str) {
    let env = format!("env:\n  API_TOKEN: \"${{TOKEN}}\"\n{era}");
    let core = Core::new()
        .grant_servers(&["chatty", "quiet"])
        .server("chatty", &demo(&env))
        .server("quiet", &demo(&format!("log_level: error\n{era}")));
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(common::host_env(&[("TOKEN", TOKEN)]))
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let said = catalog
        .call(
            "chatty__log",
            json!({"level": "warning", "message": format!("using {TOKEN} now")}),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&said), "sent");
    let quiet = catalog
        .call("quiet__log", json!({"level": "info", "message": "hello"}))
        .await
        .unwrap();
    assert_eq!(text_of(&quiet), "below the client's level: not sent");
    let logged = eventually(Duration::from_secs(5), || {
        !h.sink.of_type("mcp.server_log").is_empty()
    })
    .await;
    assert!(logged);
    h.runtime.flush_events().await;
    let events = h.sink.of_type("mcp.server_log");
    assert_eq!(events.len(), 1);
    let event = serde_json::to_value(&events[0]).unwrap();
    assert_eq!(event["server"], "chatty");
    assert_eq!(event["level"], "warning");
    assert_eq!(event["logger"], "demo");
    let data = event["data"].as_str().unwrap();
    assert!(
        data.starts_with("using ") && !data.contains(TOKEN),
        "{data}"
    );
    h.finish().await;
}

#[tokio::test]
async fn resources_are_listed_filtered_and_read_through_their_connection_redacted() {
    let core = Core::new()
        .grant_servers(&["demo", "narrow"])
        .server(
            "demo",
            &demo("env:\n  API_TOKEN: \"${TOKEN}\"\napproval_policy: auto\n"),
        )
        .server(
            "narrow",
            &demo("resources:\n  exclude: [\"demo://cwd\", \"demo://pixel\", \"demo://env/*\"]\n"),
        );
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(common::host_env(&[("TOKEN", TOKEN)]))
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let of = |server: &str| -> Vec<String> {
        catalog
            .resources()
            .filter(|r| r.server == server)
            .map(|r| r.uri.clone())
            .collect()
    };
    assert_eq!(of("demo"), ["demo://readme", "demo://cwd", "demo://pixel"]);
    assert_eq!(of("narrow"), ["demo://readme"]);
    let templates: Vec<(String, String)> = catalog
        .resource_templates()
        .map(|t| (t.server.clone(), t.uri_template.clone()))
        .collect();
    assert_eq!(templates, [("demo".into(), "demo://env/{name}".into())]);
    let readme = catalog
        .read_resource("demo", "demo://readme")
        .await
        .unwrap();
    assert!(!readme.is_error);
    assert!(
        text_of(&readme).contains("demo server"),
        "{}",
        text_of(&readme)
    );
    // A template's resource holding a secret comes back redacted in every view.
    let secret = catalog
        .read_resource("demo", "demo://env/API_TOKEN")
        .await
        .unwrap();
    let whole = serde_json::to_string(&secret).unwrap();
    assert!(!whole.contains(TOKEN), "{whole}");
    assert!(
        whole.contains("API_TOKEN") || whole.contains("redacted"),
        "{whole}"
    );
    // Only what the server offers this turn, and the declaration allows, is read: not
    // an unlisted URI, not one `resources:` excludes (listed or named by a template).
    for (server, uri) in [
        ("demo", "demo://nothing"),
        ("narrow", "demo://cwd"),
        ("narrow", "demo://env/API_TOKEN"),
        ("demo", "https://elsewhere.test/x"),
    ] {
        assert!(
            matches!(
                catalog.read_resource(server, uri).await,
                Err(CallError::NotOffered { .. })
            ),
            "{server} {uri}"
        );
    }
    assert!(matches!(
        catalog.read_resource("nobody", "demo://readme").await,
        Err(CallError::UnknownTool(_))
    ));
    // A secret the model puts in a URI is no plainer in the refusal or its event.
    let refused = catalog
        .read_resource("demo", "demo://readme?token=qz-uri-secret-77")
        .await
        .unwrap_err();
    assert!(
        !refused.to_string().contains("qz-uri-secret-77"),
        "{refused}"
    );
    h.runtime.flush_events().await;
    for event in h.sink.events() {
        let text = serde_json::to_string(&event).unwrap();
        assert!(!text.contains("qz-uri-secret-77"), "{text}");
    }
    assert_eq!(h.sink.of_type("mcp.resource_read").len(), 2);
    assert_eq!(h.sink.of_type("mcp.call_denied").len(), 5);
    h.finish().await;
}

#[tokio::test]
async fn reading_and_prompting_need_the_call_capability_and_approval() {
    let core = Core::new()
        .grant(&["mcp.connect:nocall", "mcp.connect:asked", "mcp.call:asked"])
        .server("nocall", &demo(""))
        .server("asked", &demo(""));
    let approver = Recorder::new(|r| match r.action {
        demiurge_mcp::actors::Action::Connect => ApprovalAnswer::AllowSession,
        _ => ApprovalAnswer::Deny,
    });
    let h = harness(approver).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(matches!(
        catalog.read_resource("nocall", "demo://readme").await,
        Err(CallError::MissingCapability { .. })
    ));
    assert!(matches!(
        catalog
            .get_prompt("nocall__greet", json!({"name": "x"}))
            .await,
        Err(CallError::MissingCapability { .. })
    ));
    assert!(matches!(
        catalog.read_resource("asked", "demo://readme").await,
        Err(CallError::ApprovalDenied { .. })
    ));
    assert!(matches!(
        catalog.subscribe_resource("asked", "demo://readme").await,
        Err(CallError::ApprovalDenied { .. })
    ));
    assert!(matches!(
        catalog
            .get_prompt("asked__greet", json!({"name": "x"}))
            .await,
        Err(CallError::ApprovalDenied { .. })
    ));
    let actions: Vec<&str> = h
        .approver
        .requests()
        .iter()
        .map(|r| r.action.as_str())
        .filter(|a| *a != "connect")
        .collect();
    assert_eq!(actions, ["read", "subscribe", "prompt"]);
    h.finish().await;
}

#[tokio::test]
async fn prompts_are_listed_and_got_with_arguments_redacted() {
    let core = Core::new().grant_servers(&["demo"]).server(
        "demo",
        &demo("env:\n  API_TOKEN: \"${TOKEN}\"\napproval_policy: auto\nprompts:\n  include: [greet]\n"),
    );
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(common::host_env(&[("TOKEN", TOKEN)]))
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let prompts: Vec<_> = catalog.prompts().collect();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "demo__greet");
    assert_eq!(prompts[0].arguments[0].name, "name");
    assert!(prompts[0].arguments[0].required);
    let got = catalog
        .get_prompt("demo__greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(got.messages[0].role, "user");
    assert_eq!(got.messages[0].content["text"], "Say hello to Ada.");
    let leaked = catalog
        .get_prompt("demo__greet", json!({"name": TOKEN}))
        .await
        .unwrap();
    assert!(!serde_json::to_string(&leaked).unwrap().contains(TOKEN));
    // The server's own error is typed, never a panic or a hang.
    assert!(matches!(
        catalog.get_prompt("demo__greet", json!({})).await,
        Err(CallError::Failed { .. })
    ));
    assert!(matches!(
        catalog.get_prompt("demo__nothing", json!({})).await,
        Err(CallError::UnknownTool(_))
    ));
    h.finish().await;
}

#[tokio::test]
async fn list_changes_apply_at_the_next_turn_and_updates_become_events() {
    list_changes_and_updates("").await;
}

/// The same in the 2026-07-28 era, where they arrive on `subscriptions/listen`.
#[tokio::test]
async fn modern_list_changes_and_updates_arrive_on_the_connections_subscription() {
    list_changes_and_updates("protocol: 2026-07-28\n").await;
}

async fn list_changes_and_updates(era: &str) {
    let core = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &demo(&format!("approval_policy: auto\n{era}")));
    let h = harness(Recorder::allow()).await;
    let (session, first) = common::open(&h.runtime, core.spec()).await;
    first
        .call("demo__add_resource", json!({"uri": "demo://new"}))
        .await
        .unwrap();
    first
        .subscribe_resource("demo", "demo://readme")
        .await
        .unwrap();
    first
        .call("demo__touch", json!({"uri": "demo://readme"}))
        .await
        .unwrap();
    // The turn in hand keeps its list; the next one has the new resource.
    assert!(!first.resources().any(|r| r.uri == "demo://new"));
    let changed = eventually(Duration::from_secs(5), || {
        !h.sink.of_type("mcp.list_changed").is_empty()
            && !h.sink.of_type("mcp.resource_updated").is_empty()
    })
    .await;
    assert!(changed, "{:?}", h.sink.events());
    if era.is_empty() {
        h.finish().await;
        return;
    }
    // A resource nobody subscribed to is not announced.
    first
        .call("demo__touch", json!({"uri": "demo://cwd"}))
        .await
        .unwrap();
    first
        .call("demo__touch", json!({"uri": "demo://readme"}))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || h
            .sink
            .of_type("mcp.resource_updated")
            .len()
            == 2)
        .await
    );
    let updated = serde_json::to_string(&h.sink.of_type("mcp.resource_updated")).unwrap();
    assert!(!updated.contains("demo://cwd"), "{updated}");
    let next = session.prepare_turn().await.unwrap();
    assert!(next.resources().any(|r| r.uri == "demo://new"));
    let read = next.read_resource("demo", "demo://new").await.unwrap();
    assert_eq!(text_of(&read), "added resource demo://new");
    h.finish().await;
}

#[tokio::test]
async fn each_server_identity_and_instructions_are_on_the_turn() {
    let core = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let servers: Vec<_> = catalog.servers().collect();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0].server, "demo");
    assert!(!servers[0].name.is_empty());
    assert!(
        servers[0]
            .instructions
            .as_deref()
            .is_some_and(|i| i.contains("demo server")),
        "{:?}",
        servers[0]
    );
    h.finish().await;
}
