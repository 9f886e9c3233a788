//! Connect authority in the order of `docs/design.md#2-authority`: capability, cwd, approval;
//! denials never spawn and are asked again next turn.

mod common;

use common::{Core, Recorder, count, demo, demo_counting, harness, harness_with, names};
use demiurge_mcp::ApprovalAnswer;
use demiurge_mcp::actors::Action;
use demiurge_mcp::core::ApprovalPolicy;

#[tokio::test]
async fn missing_connect_capability_prevents_spawn_and_approval() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let core = Core::new()
        .grant(&["mcp.call:docs"])
        .server("docs", &demo_counting(&started, ""));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.tools().is_empty());
    assert_eq!(catalog.denied()[0].server, "docs");
    assert!(
        catalog.denied()[0].reason.contains("mcp.connect:docs"),
        "{:?}",
        catalog.denied()
    );
    assert_eq!(count(&started), 0, "a denied server must never start");
    assert!(
        h.approver.requests().is_empty(),
        "capability denial comes before approval"
    );
    assert_eq!(h.sink.of_type("mcp.server_denied").len(), 1);
    h.finish().await;
}

#[tokio::test]
async fn denied_approval_prevents_spawn_and_is_asked_again_next_turn() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &demo_counting(&started, ""));
    let h = harness(Recorder::new(|_| ApprovalAnswer::Deny)).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    for turn in 1..=2 {
        let catalog = session.prepare_turn().await.unwrap();
        assert!(catalog.tools().is_empty());
        assert_eq!(catalog.denied().len(), 1);
        assert_eq!(h.approver.asked_for("docs"), turn, "denials are not cached");
    }
    assert_eq!(count(&started), 0);
    h.finish().await;
}

#[tokio::test]
async fn a_grant_added_between_turns_is_picked_up_and_reauthorizes_everything() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let mut core = Core::new()
        .grant_servers(&["ok"])
        .server("ok", &demo_counting(&started, ""))
        .server("late", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (session, first) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(first.denied()[0].server, "late");
    let before = common::pid_of(&first, "ok__whoami").await;

    // The session reads grants from the core each turn: a new snapshot is a new catalog
    // identity, so everything is reauthorized; here we only check the denial is gone.
    core.set_grants(&[
        "mcp.connect:ok",
        "mcp.call:ok",
        "mcp.connect:late",
        "mcp.call:late",
    ]);
    let second = session.prepare_turn().await.unwrap();
    assert!(second.denied().is_empty(), "{:?}", second.denied());
    assert!(names(&second).contains(&"late__echo".to_string()));
    let after = common::pid_of(&second, "ok__whoami").await;
    assert_ne!(before, after, "a capability change must not reuse peers");
    h.finish().await;
}

#[tokio::test]
async fn cwd_outside_the_workspace_is_denied_before_approval() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let outside = tempfile::tempdir().unwrap();
    let core = Core::new().grant_servers(&["esc", "link"]);
    core.write("esc", &demo_counting(&started, "cwd: ../../..\n"));
    std::os::unix::fs::symlink(outside.path(), core.root().join("sneaky")).unwrap();
    core.write("link", &demo_counting(&started, "cwd: sneaky\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(catalog.denied().len(), 2, "{:?}", catalog.denied());
    assert!(
        catalog
            .denied()
            .iter()
            .all(|d| d.reason.contains("outside the workspace"))
    );
    assert!(h.approver.requests().is_empty());
    assert_eq!(count(&started), 0);
    h.finish().await;
}

#[tokio::test]
async fn cwd_inside_the_workspace_is_where_the_server_runs() {
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &demo("cwd: sub/dir\n"));
    std::fs::create_dir_all(core.root().join("sub/dir")).unwrap();
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let result = catalog
        .call("docs__cwd", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        result.view(demiurge_mcp::redact::View::Operator).content,
        core.root().join("sub/dir").display().to_string()
    );
    let preview = &h.approver.requests()[0].preview;
    assert_eq!(
        preview.cwd.as_deref(),
        Some(core.root().join("sub/dir").display().to_string().as_str())
    );
    h.finish().await;
}

#[tokio::test]
async fn connect_is_never_weaker_than_prompt_and_deny_always_denies() {
    let core = Core::new()
        .grant_servers(&["auto", "never"])
        .server("auto", &demo("approval_policy: auto\n"))
        .server("never", &demo("approval_policy: deny\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let asked = h.approver.requests();
    assert_eq!(
        asked.len(),
        1,
        "auto still prompts for connect; deny never asks"
    );
    assert_eq!(asked[0].server, "auto");
    assert_eq!(asked[0].action, Action::Connect);
    assert_eq!(asked[0].preview.effective_policy, ApprovalPolicy::Prompt);
    assert_eq!(asked[0].preview.declared_policy, ApprovalPolicy::Auto);
    assert_eq!(catalog.denied().len(), 1);
    assert_eq!(catalog.denied()[0].server, "never");
    h.finish().await;
}

#[tokio::test]
async fn allow_for_session_is_cached_until_the_declaration_changes() {
    let core = Core::new().grant_servers(&["a"]).server("a", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (session, _) = common::open(&h.runtime, core.spec()).await;
    session.prepare_turn().await.unwrap();
    assert_eq!(h.approver.asked_for("a"), 1);
    core.write("a", &demo("risk: high\n"));
    session.prepare_turn().await.unwrap();
    assert_eq!(
        h.approver.asked_for("a"),
        2,
        "a changed declaration asks again"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_missing_variable_skips_the_server_without_caching_the_failure() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let core = Core::new()
        .grant_servers(&["needs", "fine"])
        .server(
            "needs",
            &demo_counting(&started, "env:\n  TOKEN: \"${NOT_SET_ANYWHERE}\"\n"),
        )
        .server("fine", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    for _ in 0..2 {
        let catalog = session.prepare_turn().await.unwrap();
        let d = catalog
            .diagnostics()
            .iter()
            .find(|d| d.server == "needs")
            .unwrap();
        assert_eq!(d.message, "missing environment variable: NOT_SET_ANYWHERE");
        assert!(names(&catalog).contains(&"fine__echo".to_string()));
    }
    assert_eq!(count(&started), 0);
    assert!(
        h.sink.of_type("mcp.server_failed").is_empty(),
        "a missing variable is not a cached failure"
    );
    assert_eq!(h.sink.of_type("mcp.server_skipped").len(), 2);
    h.finish().await;
}

#[tokio::test]
async fn interpolation_happens_only_after_capability_and_approval() {
    let core = Core::new()
        .grant(&["mcp.connect:denied"])
        .server("nocap", &demo("env:\n  T: \"${MISSING_VAR}\"\n"))
        .server("denied", &demo("env:\n  T: \"${MISSING_VAR}\"\n"));
    let h = harness(Recorder::new(|_| ApprovalAnswer::Deny)).await;
    let catalog = common::clean_turn(&h, &core).await;
    // Both stop before interpolation: neither reports the missing variable.
    let reasons: Vec<(&str, &str)> = catalog
        .denied()
        .iter()
        .map(|d| (d.server.as_str(), d.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 2);
    assert!(reasons.contains(&("denied", "connect approval denied")));
    assert!(
        reasons
            .iter()
            .any(|(s, r)| *s == "nocap" && r.contains("mcp.connect:nocap"))
    );
    h.finish().await;
}

#[tokio::test]
async fn an_approver_that_panics_denies_and_the_broker_lives_on() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let core = Core::new().grant_servers(&["docs"]).server(
        "docs",
        &demo_counting(&started, "approval_policy: prompt\n"),
    );
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&asked);
    // The first question panics in the host's `decide` itself; every later one allows.
    let h = harness(Recorder::new(move |_| {
        if counter.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a host approver with a bug");
        }
        ApprovalAnswer::AllowOnce
    }))
    .await;
    let (session, first) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(first.denied().len(), 1, "{:?}", first.denied());
    assert_eq!(
        first.denied()[0].cause,
        demiurge_mcp::DenyReason::ApprovalDenied,
        "a panicking approver has not approved"
    );
    assert_eq!(count(&started), 0, "nothing starts without an approval");
    assert!(
        h.sink
            .of_type("approval.decided")
            .iter()
            .all(|e| !serde_json::to_string(e).unwrap().contains("\"policy\"")),
        "no audit record may claim the policy decided"
    );
    // The same broker asks again next turn, and the server connects.
    let second = session.prepare_turn().await.unwrap();
    assert!(!second.tools().is_empty(), "{:?}", second.denied());
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    h.finish().await;
}

#[tokio::test]
async fn a_call_approval_shows_the_arguments_redacted_and_the_prompt_escapes_and_cuts_them() {
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &demo("approval_policy: prompt\nenv:\n  DEMO_TOKEN: \"tok-7f3a9c2e1b\"\n"),
    );
    // Connect for the session; calls once, so every call asks.
    let h = harness(Recorder::new(|r| match r.action {
        Action::Connect => ApprovalAnswer::AllowSession,
        _ => ApprovalAnswer::AllowOnce,
    }))
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let long = "x".repeat(5_000);
    let message = format!("fetch https://example.test/a?b=c \u{1b}[2J tok-7f3a9c2e1b {long}");
    let args = serde_json::json!({"message": message, "api_key": "k-99887766"});
    let result = catalog.call("d__echo", args).await.unwrap();
    assert!(
        !result.is_error,
        "{:?}",
        result.view(demiurge_mcp::redact::View::Operator)
    );
    let asked = h.approver.requests();
    let call = asked.iter().find(|r| r.action == Action::Call).unwrap();
    let shown = call
        .arguments
        .as_ref()
        .expect("a call approval carries its arguments");
    let shown_text = shown.to_string();
    assert!(
        shown_text.contains("https://example.test/a?b=c"),
        "{shown_text}"
    );
    for secret in ["tok-7f3a9c2e1b", "k-99887766"] {
        assert!(
            !shown_text.contains(secret),
            "a secret reached the approver: {secret}"
        );
    }
    let prompt = call.render();
    assert!(
        prompt.contains("message: fetch https://example.test/a?b=c"),
        "{prompt}"
    );
    assert!(prompt.contains("api_key: "), "{prompt}");
    assert!(
        !prompt.contains('\u{1b}'),
        "an escape reached the terminal: {prompt:?}"
    );
    assert!(
        prompt.len() < 2_000,
        "a 5,000-character argument was not cut: {}",
        prompt.len()
    );
    let event = h.sink.of_type("approval.requested");
    let event = event
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .find(|e| e["action"] == "call")
        .unwrap();
    assert!(
        event["arguments"]["message"]
            .as_str()
            .unwrap()
            .contains("example.test")
    );
    assert!(!event.to_string().contains("k-99887766"));
    assert!(call.arguments_fit());
    // Too many arguments to show: said so, and not approvable on a terminal; a value
    // hidden in the middle of a long one shows as its head, tail, length and digest.
    let mut many = serde_json::Map::new();
    for i in 0..40 {
        many.insert(format!("k{i:02}"), serde_json::json!(i));
    }
    many.insert("message".into(), serde_json::json!("m"));
    catalog
        .call("d__echo", serde_json::Value::Object(many))
        .await
        .unwrap();
    let asked = h.approver.requests();
    let crowded = asked.iter().rfind(|r| r.action == Action::Call).unwrap();
    assert!(!crowded.arguments_fit());
    assert!(
        crowded.render().contains("41 of them, too many to show"),
        "{}",
        crowded.render()
    );
    assert!(prompt.contains(" characters, sha256:"), "{prompt}");
    h.finish().await;
}

#[tokio::test]
async fn an_always_answer_survives_a_restart_until_the_declaration_changes() {
    let home = tempfile::tempdir().unwrap();
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &demo("approval_policy: auto\n"));
    let at = home.path().to_path_buf();
    let always = harness_with(
        Recorder::new(|_| ApprovalAnswer::AllowAlways),
        move |mut c| {
            c.home = at;
            c
        },
    )
    .await;
    let (session, _) = always.runtime.start_session(core.spec()).await.unwrap();
    assert!(session.prepare_turn().await.unwrap().denied().is_empty());
    assert_eq!(always.approver.asked_for("docs"), 1);
    always.finish().await;
    // A new runtime on the same home: nobody is asked (a deny would refuse).
    let at = home.path().to_path_buf();
    let denying = harness_with(Recorder::new(|_| ApprovalAnswer::Deny), move |mut c| {
        c.home = at;
        c
    })
    .await;
    let (session, catalog) = common::open(&denying.runtime, core.spec()).await;
    assert!(catalog.denied().is_empty(), "{:?}", catalog.denied());
    assert_eq!(denying.approver.asked_for("docs"), 0);
    denying.runtime.flush_events().await;
    let decided = denying.sink.of_type("approval.decided");
    assert!(
        decided
            .iter()
            .any(|e| serde_json::to_value(e).unwrap()["source"] == "remembered"),
        "{decided:?}"
    );
    // Any change of the declaration asks again.
    core.write("docs", &demo("approval_policy: auto\nrisk: high\n"));
    let catalog = session.prepare_turn().await.unwrap();
    assert_eq!(catalog.denied().len(), 1);
    assert_eq!(denying.approver.asked_for("docs"), 1);
    denying.finish().await;
    // The CLI lists it and revokes it.
    let list = std::process::Command::new(common::exe())
        .arg("--home")
        .arg(home.path())
        .args(["approvals", "list", "--json"])
        .output()
        .unwrap();
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = listed["approvals"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(listed["approvals"][0]["approval"]["server"], "docs");
    let revoke = std::process::Command::new(common::exe())
        .arg("--home")
        .arg(home.path())
        .args(["approvals", "revoke", &id])
        .output()
        .unwrap();
    assert!(revoke.status.success());
    assert!(
        demiurge_mcp::authority::RememberedApprovals::open(home.path())
            .list()
            .is_empty()
    );
}

#[tokio::test]
async fn an_always_answer_does_not_cover_a_copy_of_the_declaration_in_another_core() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let home = tempfile::tempdir().unwrap();
    let yaml = demo("");
    let first = Core::new().grant_servers(&["docs"]).server("docs", &yaml);
    let copy = Core::new().grant_servers(&["docs"]).server("docs", &yaml);
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&asked);
    let at = home.path().to_path_buf();
    let h = harness_with(
        Recorder::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            ApprovalAnswer::AllowAlways
        }),
        move |mut c| {
            c.home = at;
            c
        },
    )
    .await;
    let (_one, _) = common::open(&h.runtime, first.spec_in("one")).await;
    let (_two, _) = common::open(&h.runtime, copy.spec_in("two")).await;
    // The same declaration, byte for byte, in another core: asked again.
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    h.finish().await;
}

#[tokio::test]
async fn arguments_are_interpolated_after_approval_and_their_values_are_secrets() {
    let marker = tempfile::tempdir().unwrap();
    let seen = marker.path().join("seen");
    // `sh -c SCRIPT sh A B`: the script records the arguments it was given, then serves.
    let script = format!(
        "printf '%s|%s' \"$1\" \"$2\" > '{}'; exec '{}' demo-server",
        seen.display(),
        common::exe()
    );
    let declared = |extra: &str| {
        format!(
            "command: sh\nargs: [-c, {}, sh, \"${{WHO:-nobody}}\", \"--key=${{ARG_SECRET}}\"]\n{extra}",
            serde_json::to_string(&script).unwrap()
        )
    };
    let core = Core::new()
        .grant_servers(&["args"])
        .server("args", &declared(""));
    // Without the variable: skipped by name, nothing started, no failure cached.
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(
        catalog.diagnostics()[0].message,
        "missing environment variable: ARG_SECRET"
    );
    assert!(!seen.exists());
    h.finish().await;
    // With it: the default and the value reach the process; the value is a secret.
    let value = "argvalue-7c1d2e";
    let h = harness_with(Recorder::allow(), move |c| {
        c.with_host_env(common::host_env(&[("ARG_SECRET", value)]))
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        format!("nobody|--key={value}")
    );
    let preview = &h.approver.requests()[0].preview;
    // The preview names the variables the arguments use, and hashes what is
    // declared, never the value it becomes.
    assert_eq!(preview.arg_variables, ["ARG_SECRET", "WHO"]);
    assert_eq!(
        preview.args[4],
        format!(
            "--key={}",
            demiurge_mcp::authority::preview::value_summary("${ARG_SECRET}")
        )
    );
    let result = catalog
        .call(
            "args__echo",
            serde_json::json!({"message": format!("got {value}")}),
        )
        .await
        .unwrap();
    for view in [
        demiurge_mcp::redact::View::Model,
        demiurge_mcp::redact::View::Operator,
    ] {
        let shown = &result.view(view).content;
        assert!(!shown.contains(value), "{shown}");
    }
    h.finish().await;
    // A form interpolation does not know is a load error naming the argument.
    let bad = Core::new()
        .grant_servers(&["bad"])
        .server("bad", "command: sh\nargs: [-c, \"x\", \"${NOT VALID}\"]\n");
    let report = demiurge_mcp::core::load_report(&bad.root());
    let error = report
        .errors
        .iter()
        .map(|e| e.to_string())
        .collect::<String>();
    assert!(
        error.contains("args[2]") && error.contains("${NAME:-default}"),
        "{error}"
    );
}
