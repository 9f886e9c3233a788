//! Many servers, little context: a turn over its token budget offers tools by name and
//! summary with `search_tools` and `describe_tool` (the rule exact at its edge, the
//! search limited to what the turn could call, a described tool callable); and a server
//! listed from its last listing starts only when first used, asked for its connect
//! approval then, while a changed declaration, an expired listing, moved pins or a
//! failed start each fall back to starting it with the turn.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Core, Harness, Recorder, demo, demo_with_tools, harness_with, shell};
use demiurge_mcp::actors::{Action, DESCRIBE_TOOL, SEARCH_TOOLS};
use demiurge_mcp::core::Start;
use demiurge_mcp::redact::View;
use demiurge_mcp::search::ToolBudget;
use demiurge_mcp::{ApprovalAnswer, CallError, SessionSpec, TurnCatalog};
use serde_json::{Value, json};

/// The canary secret a declaration passes its server, which a description repeats.
const CANARY: &str = "sk_canary_deferred_7e21";

async fn runtime(approver: Recorder, start: Start) -> Harness {
    harness_with(approver, |mut c| {
        c.start = start;
        c.host_env = common::host_env(&[("DEFER_TOKEN", CANARY)]);
        c
    })
    .await
}

fn with_budget(spec: SessionSpec, budget: ToolBudget) -> SessionSpec {
    let mut spec = spec;
    spec.tool_budget = Some(budget);
    spec
}

async fn turn(h: &Harness, spec: SessionSpec) -> TurnCatalog {
    common::open(&h.runtime, spec).await.1
}

fn text(result: &demiurge_mcp::result::ToolResult) -> String {
    result.view(View::Model).content.clone()
}

fn data(result: &demiurge_mcp::result::ToolResult) -> Value {
    result.view(View::Model).data.clone()
}

fn two_demo_servers() -> Core {
    Core::new()
        .grant_servers(&["d", "e"])
        .server("d", &demo("approval_policy: auto\n"))
        .server("e", &demo("approval_policy: auto\n"))
}

#[tokio::test]
async fn the_rule_defers_exactly_past_the_budget_and_says_so() {
    let h = runtime(Recorder::allow(), Start::Eager).await;
    let core = two_demo_servers();
    let whole = turn(&h, core.spec()).await;
    assert!(whole.deferral().is_none());
    let total: usize = whole.tools().iter().map(|t| t.tokens).sum();
    assert!(total > 0);

    // At the budget: nothing changes.
    let at = turn(&h, with_budget(core.spec(), ToolBudget::new(total))).await;
    let rule = at.deferral().unwrap();
    assert!(!rule.deferred, "{rule:?}");
    assert_eq!((rule.full_tokens, rule.offered_tokens), (total, total));
    let offered = at.model_tools();
    assert_eq!(offered.len(), at.tools().len());
    assert!(
        offered
            .iter()
            .all(|m| m.input_schema.is_some() && !m.deferred)
    );
    assert!(at.diagnostics().is_empty(), "{:?}", at.diagnostics());

    // One token under: deferred, and the rule is a diagnostic and an event.
    let under = turn(&h, with_budget(core.spec(), ToolBudget::new(total - 1))).await;
    let rule = under.deferral().unwrap().clone();
    assert!(rule.deferred);
    assert_eq!(rule.deferred_tools, under.tools().len());
    assert!(rule.offered_tokens < total, "{rule:?}");
    let offered = under.model_tools();
    assert_eq!(offered.len(), under.tools().len() + 2);
    let names: Vec<&str> = offered
        .iter()
        .filter(|m| m.input_schema.is_some())
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, [SEARCH_TOOLS, DESCRIBE_TOOL]);
    let note = under
        .diagnostics()
        .iter()
        .find(|d| d.path.is_empty())
        .expect("the rule is a diagnostic");
    assert!(
        note.message.contains(&total.to_string()),
        "{}",
        note.message
    );
    let events = h.sink.of_type("mcp.tools_deferred");
    let last = serde_json::to_value(&events.last().unwrap().kind).unwrap();
    assert_eq!(last["deferred"], true);
    assert_eq!(last["full_tokens"], total);
    assert_eq!(last["budget"], total - 1);

    // The same inputs decide the same way.
    let again = turn(&h, with_budget(core.spec(), ToolBudget::new(total - 1))).await;
    assert_eq!(again.deferral().unwrap(), &rule);

    // What the host always loads is offered whole: a server, or one tool.
    let budget = ToolBudget::new(1).always_load("e").always_load("d__add");
    let marked = turn(&h, with_budget(core.spec(), budget)).await;
    let rule = marked.deferral().unwrap();
    let e_tools = marked.tools().iter().filter(|t| t.server == "e").count();
    assert_eq!(rule.always_loaded.len(), e_tools + 1);
    assert!(marked.is_loaded("d__add") && marked.is_loaded("e__echo"));
    assert!(!marked.is_loaded("d__echo"));
    h.finish().await;
}

#[tokio::test]
async fn describe_tool_makes_a_deferred_tool_callable_in_its_turn_only() {
    let h = runtime(Recorder::allow(), Start::Eager).await;
    let core = two_demo_servers();
    let spec = || with_budget(core.spec(), ToolBudget::new(1));
    let catalog = turn(&h, spec()).await;
    let refused = catalog.call("d__echo", json!({"message": "hi"})).await;
    assert!(
        matches!(refused, Err(CallError::NotLoaded(ref n)) if n == "d__echo"),
        "{refused:?}"
    );
    assert!(
        refused.unwrap_err().to_string().contains("describe_tool"),
        "the refusal says what to do"
    );

    let found = catalog
        .call(
            SEARCH_TOOLS,
            json!({"query": "return the message unchanged", "limit": 3}),
        )
        .await
        .unwrap();
    assert!(!found.is_error, "{}", text(&found));
    let first = data(&found)["tools"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(first.ends_with("__echo"), "{}", text(&found));

    let described = catalog
        .call(
            DESCRIBE_TOOL,
            json!({"names": ["d__echo", "nope__missing"]}),
        )
        .await
        .unwrap();
    let definitions = data(&described);
    assert_eq!(definitions["tools"][0]["name"], "d__echo");
    assert!(definitions["tools"][0]["input_schema"]["properties"]["message"].is_object());
    assert_eq!(definitions["unknown"], json!(["nope__missing"]));
    assert!(catalog.is_loaded("d__echo"));
    let model = catalog.model_tools();
    let echo = model.iter().find(|m| m.name == "d__echo").unwrap();
    assert!(echo.input_schema.is_some() && !echo.deferred);

    let called = catalog
        .call("d__echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert!(!called.is_error && text(&called).contains("hi"));

    // Bad arguments are the tool's error, for the model to read; not a refusal.
    let bad = catalog
        .call(SEARCH_TOOLS, json!({"limit": 2}))
        .await
        .unwrap();
    assert!(bad.is_error && text(&bad).contains("query"));

    // The next turn starts over: described in one turn is not loaded in the next.
    let next = turn(&h, spec()).await;
    assert!(!next.is_loaded("d__echo"));
    // A turn that fits its budget has no host tools.
    let roomy = turn(&h, with_budget(core.spec(), ToolBudget::new(usize::MAX))).await;
    assert!(matches!(
        roomy.call(SEARCH_TOOLS, json!({"query": "echo"})).await,
        Err(CallError::UnknownTool(_))
    ));
    h.finish().await;
}

#[tokio::test]
async fn search_shows_only_what_the_turn_could_call_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.json");
    std::fs::write(
        &file,
        serde_json::to_vec(&json!([
            {"name": "vault_lookup", "description": format!("Looks up a vault entry with key {CANARY}. More text.")},
        ]))
        .unwrap(),
    )
    .unwrap();
    let core = Core::new()
        .grant_servers(&["d"])
        // `e` may connect but not be called.
        .grant(&["mcp.connect:e"])
        .server(
            "d",
            &demo_with_tools(
                &file,
                "approval_policy: auto\nenv:\n  DEFER_TOKEN: \"${DEFER_TOKEN}\"\n",
            ),
        )
        .server("e", &demo("approval_policy: auto\n"));
    let h = runtime(Recorder::allow(), Start::Eager).await;
    let catalog = turn(&h, with_budget(core.spec(), ToolBudget::new(1))).await;
    assert!(
        catalog.get("e__echo").is_some(),
        "{:?}",
        catalog.diagnostics()
    );
    for query in [
        "echo",
        "return the message unchanged",
        "add two numbers",
        "vault",
    ] {
        let found = catalog
            .call(SEARCH_TOOLS, json!({"query": query, "limit": 20}))
            .await
            .unwrap();
        let names: Vec<String> = data(&found)["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert!(!names.is_empty(), "{query}");
        assert!(
            names.iter().all(|n| n.starts_with("d__")),
            "{query}: {names:?}"
        );
        let whole = serde_json::to_string(&found.view(View::Model)).unwrap();
        assert!(!whole.contains(CANARY), "{query}");
    }
    let described = catalog
        .call(
            DESCRIBE_TOOL,
            json!({"names": ["e__echo", "d__vault_lookup"]}),
        )
        .await
        .unwrap();
    assert_eq!(data(&described)["unknown"], json!(["e__echo"]));
    assert!(
        !serde_json::to_string(&described.view(View::Model))
            .unwrap()
            .contains(CANARY)
    );
    for tool in catalog.model_tools() {
        assert!(!tool.description.contains(CANARY));
        assert!(!tool.description.contains('\n'));
    }
    h.finish().await;
}

/// An approver that allows connects and calls once (never remembered), counting the
/// connect questions.
fn counting_approver(connects: &Arc<AtomicUsize>) -> Recorder {
    let connects = Arc::clone(connects);
    Recorder::new(move |r| {
        if r.action == Action::Connect {
            connects.fetch_add(1, Ordering::SeqCst);
        }
        ApprovalAnswer::AllowOnce
    })
}

/// A first session that connects `d` (and keeps its listing), then closes.
async fn listed_by_a_first_session(h: &Harness, core: &Core) {
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.tools().iter().all(|t| !t.deferred_start));
    assert!(
        catalog.get("d__echo").is_some(),
        "{:?}",
        catalog.diagnostics()
    );
    session.evict().await.unwrap();
    // The listing is written off the turn's path.
    let listings = h.runtime.home().join("listings");
    assert!(
        common::eventually(Duration::from_secs(5), || std::fs::read_dir(&listings)
            .is_ok_and(|mut d| d.next().is_some()))
        .await
    );
}

#[tokio::test]
async fn a_lazy_server_is_listed_without_starting_and_asked_for_at_its_first_call() {
    let connects = Arc::new(AtomicUsize::new(0));
    let h = runtime(counting_approver(&connects), Start::Lazy).await;
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: prompt\n"));
    listed_by_a_first_session(&h, &core).await;
    assert_eq!(connects.load(Ordering::SeqCst), 1);
    let connected = h.sink.of_type("mcp.server_connected").len();

    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    let echo = catalog
        .get("d__echo")
        .expect("listed from its last listing");
    assert!(echo.deferred_start);
    assert!(catalog.prompts().any(|p| p.name == "d__greet"));
    assert!(catalog.resources().any(|r| r.uri == "demo://readme"));
    assert_eq!(
        connects.load(Ordering::SeqCst),
        1,
        "nothing asked at the turn"
    );
    assert_eq!(h.sink.of_type("mcp.server_connected").len(), connected);
    assert!(common::servers_of(h.runtime.home()).is_empty());

    // The first call starts it: its connect approval, then its call approval.
    let before = h.approver.requests().len();
    let called = catalog
        .call("d__echo", json!({"message": "woken"}))
        .await
        .unwrap();
    assert!(!called.is_error && text(&called).contains("woken"));
    let asked: Vec<Action> = h.approver.requests()[before..]
        .iter()
        .map(|r| r.action)
        .collect();
    assert_eq!(asked, [Action::Connect, Action::Call]);
    assert_eq!(h.sink.of_type("mcp.server_connected").len(), connected + 1);

    // The prompt and the resource of the same turn use that one start.
    let prompt = catalog
        .get_prompt("d__greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert!(serde_json::to_string(&prompt).unwrap().contains("Ada"));
    let read = catalog.read_resource("d", "demo://readme").await.unwrap();
    assert!(!read.is_error);
    assert_eq!(connects.load(Ordering::SeqCst), 2);
    assert_eq!(h.sink.of_type("mcp.server_connected").len(), connected + 1);

    // The session's next turn uses the live connection.
    let next = session.prepare_turn().await.unwrap();
    assert!(!next.get("d__echo").unwrap().deferred_start);
    assert_eq!(connects.load(Ordering::SeqCst), 2);
    h.finish().await;
}

#[tokio::test]
async fn a_refused_lazy_start_refuses_the_call_and_nothing_runs() {
    let h = runtime(
        Recorder::new(|r| match r.action {
            Action::Connect if r.session.ends_with("-2") => ApprovalAnswer::Deny,
            _ => ApprovalAnswer::AllowOnce,
        }),
        Start::Lazy,
    )
    .await;
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    listed_by_a_first_session(&h, &core).await;
    let mut spec = core.spec();
    spec.id = Some("deny-2".into());
    let (_session, catalog) = common::open(&h.runtime, spec).await;
    assert!(catalog.get("d__echo").unwrap().deferred_start);
    let refused = catalog.call("d__echo", json!({"message": "x"})).await;
    assert!(
        matches!(refused, Err(CallError::ServerUnavailable { ref server, .. }) if server == "d"),
        "{refused:?}"
    );
    assert!(common::servers_of(h.runtime.home()).is_empty());
    h.finish().await;
}

#[tokio::test]
async fn a_lazy_server_without_its_call_capability_is_not_started_for_a_call() {
    let h = runtime(Recorder::allow(), Start::Lazy).await;
    let mut core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    listed_by_a_first_session(&h, &core).await;
    core.set_grants(&["mcp.connect:d"]);
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.get("d__echo").unwrap().deferred_start);
    let refused = catalog.call("d__echo", json!({})).await;
    assert!(
        matches!(refused, Err(CallError::MissingCapability { .. })),
        "{refused:?}"
    );
    assert!(h.sink.of_type("mcp.server_connected").len() == 1);
    h.finish().await;
}

#[tokio::test]
async fn a_changed_declaration_expired_listing_or_moved_pins_start_with_the_turn() {
    // A changed declaration: another fingerprint, so its listing is not this one's.
    let h = runtime(Recorder::allow(), Start::Lazy).await;
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    listed_by_a_first_session(&h, &core).await;
    core.write("d", &demo("approval_policy: auto\ntimeout_seconds: 31\n"));
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(!catalog.get("d__echo").unwrap().deferred_start);
    session.evict().await.unwrap();
    // ... and the one after it, listed under the new declaration, starts lazily.
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.get("d__echo").unwrap().deferred_start);
    session.evict().await.unwrap();

    // Pins reset: what was listed is no longer what a person approved.
    for (key, _) in demiurge_mcp::pins::PinStore::open(h.runtime.home()).all() {
        demiurge_mcp::pins::PinStore::open(h.runtime.home())
            .remove(&key)
            .unwrap();
    }
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(!catalog.get("d__echo").unwrap().deferred_start);
    h.finish().await;

    // An expired listing (a listing TTL of zero expires every one).
    let h = harness_with(Recorder::allow(), |mut c| {
        c.start = Start::Lazy;
        c.listing_ttl = Duration::ZERO;
        c
    })
    .await;
    listed_by_a_first_session(&h, &core).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(!catalog.get("d__echo").unwrap().deferred_start);
    h.finish().await;
}

#[tokio::test]
async fn a_failed_lazy_start_forgets_the_listing_and_the_next_turns_start_as_before() {
    let h = runtime(Recorder::allow(), Start::Lazy).await;
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken");
    let script = format!(
        "if [ -e {} ]; then exit 3; fi; exec {} demo-server",
        broken.display(),
        common::exe()
    );
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &shell(&script, "approval_policy: auto\n"));
    listed_by_a_first_session(&h, &core).await;
    std::fs::write(&broken, "").unwrap();
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.get("d__echo").unwrap().deferred_start);
    let failed = catalog.call("d__echo", json!({})).await;
    assert!(
        matches!(failed, Err(CallError::ServerUnavailable { ref server, .. }) if server == "d"),
        "{failed:?}"
    );
    // A second call of the same turn gets the same answer without another start.
    let starts = h.sink.of_type("mcp.server_failed").len();
    assert!(
        catalog
            .call("d__add", json!({"a": 1, "b": 2}))
            .await
            .is_err()
    );
    assert_eq!(h.sink.of_type("mcp.server_failed").len(), starts);
    session.evict().await.unwrap();
    // The listing is gone: the next session starts it with its turn, and reports why.
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.get("d__echo").is_none());
    assert!(catalog.diagnostics().iter().any(|d| d.server == "d"));
    h.finish().await;
}

#[tokio::test]
async fn a_start_from_a_turn_whose_declaration_changed_since_is_stale_and_starts_nothing() {
    let h = runtime(Recorder::allow(), Start::Lazy).await;
    let core = Core::new()
        .grant_servers(&["d", "e"])
        .server("d", &demo("approval_policy: auto\n"))
        .server("e", &demo("approval_policy: auto\n"));
    listed_by_a_first_session(&h, &core).await;
    let (session, old) = common::open(&h.runtime, core.spec()).await;
    assert!(old.get("d__echo").unwrap().deferred_start);
    // The core changes d; the session's next turn starts it under its new declaration
    // (no listing stands in for a declaration nobody listed).
    core.write("d", &demo("approval_policy: auto\ntimeout_seconds: 33\n"));
    let new = session.prepare_turn().await.unwrap();
    assert!(!new.get("d__echo").unwrap().deferred_start);
    let connected = h.sink.of_type("mcp.server_connected").len();
    // The old turn's entry cannot start d under the declaration the core no longer has.
    let stale = old.call("d__echo", json!({"message": "old"})).await;
    assert!(matches!(stale, Err(CallError::Stale { .. })), "{stale:?}");
    // e is declared as it was: the old turn may still start it, and the start closes
    // nothing the new turn uses.
    let e = old.call("e__echo", json!({"message": "e"})).await.unwrap();
    assert!(!e.is_error);
    assert_eq!(h.sink.of_type("mcp.server_connected").len(), connected + 1);
    let again = new
        .call("d__echo", json!({"message": "new"}))
        .await
        .unwrap();
    assert!(!again.is_error, "the new turn's connection is still open");
    h.finish().await;
}

#[tokio::test]
async fn a_host_tool_under_a_reserved_name_fails_a_deferred_turn_closed() {
    let h = harness_with(Recorder::allow(), |mut c| {
        c.host_tools = vec![demiurge_mcp::actors::HostTool::new(
            "search_tools",
            "builtin:search_tools",
        )];
        c
    })
    .await;
    let core = two_demo_servers();
    let fits = turn(&h, with_budget(core.spec(), ToolBudget::new(usize::MAX))).await;
    assert!(!fits.deferral().unwrap().deferred);
    let (session, _) = h
        .runtime
        .start_session(with_budget(core.spec(), ToolBudget::new(1)))
        .await
        .unwrap();
    let refused = session.prepare_turn().await;
    assert!(
        matches!(refused, Err(demiurge_mcp::PrepareError::Reserved { ref name, .. }) if name == "search_tools"),
        "{refused:?}"
    );
    h.finish().await;
}

#[tokio::test]
async fn what_a_model_sends_the_host_tools_is_bounded_and_answered_as_a_tool_error() {
    let h = runtime(Recorder::allow(), Start::Eager).await;
    let core = two_demo_servers();
    let catalog = turn(&h, with_budget(core.spec(), ToolBudget::new(1))).await;
    let huge = "add ".repeat(300_000);
    let queries = [
        json!({"query": huge}),
        json!({"query": "\u{1b}[8m\u{202e}add\u{0}", "limit": 1_000_000_000u64}),
        json!({"query": "the a of to", "limit": -3}),
        json!({"query": "", "limit": 0}),
        json!({"query": "数字 add"}),
    ];
    for query in queries {
        let found = catalog.call(SEARCH_TOOLS, query).await.unwrap();
        assert!(!found.is_error);
        let listed = data(&found)["tools"].as_array().unwrap().len();
        assert!(listed <= demiurge_mcp::actors::MAX_LOOKUP);
        assert!(!text(&found).contains('\u{1b}'));
    }
    for bad in [
        json!({}),
        json!({"query": 7}),
        json!({"query": ["add"]}),
        json!({"names": "d__add"}),
    ] {
        let tool = if bad.get("names").is_some() {
            DESCRIBE_TOOL
        } else {
            SEARCH_TOOLS
        };
        let answered = catalog.call(tool, bad).await.unwrap();
        assert!(answered.is_error);
    }
    // A thousand names, long ones and non-strings among them: twenty are looked at, an
    // unknown one is echoed cut.
    let mut names: Vec<Value> = (0..1_000)
        .map(|n| json!(format!("x{n}__{}", "y".repeat(5_000))))
        .collect();
    names.insert(3, json!(42));
    names.insert(5, json!({"name": "d__add"}));
    let described = catalog
        .call(DESCRIBE_TOOL, json!({"names": names}))
        .await
        .unwrap();
    let unknown = data(&described)["unknown"].as_array().unwrap().clone();
    assert_eq!(unknown.len(), 18);
    assert!(
        unknown
            .iter()
            .all(|u| u.as_str().unwrap().chars().count() <= 81)
    );
    assert!(!catalog.is_loaded("d__add"));
    h.finish().await;
}
