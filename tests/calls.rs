//! Calls: capability, approval, bound dispatch, timeouts, result conversion.

mod common;

use std::time::{Duration, Instant};

use common::{Core, Recorder, demo, harness, pid_of};
use demiurge_mcp::actors::Action;
use demiurge_mcp::{ApprovalAnswer, CallError, StaleReason};
use serde_json::json;

#[tokio::test]
async fn each_entry_calls_its_own_connection() {
    let core = Core::new()
        .grant_servers(&["one", "two"])
        .server("one", &demo(""))
        .server("two", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let (p1, p2) = (
        pid_of(&catalog, "one__whoami").await,
        pid_of(&catalog, "two__whoami").await,
    );
    assert_ne!(p1, p2);
    let connected: Vec<(String, u64)> = h
        .sink
        .of_type("mcp.server_connected")
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap();
            (
                v["server"].as_str().unwrap().to_string(),
                v["pid"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        connected.contains(&("one".into(), p1 as u64))
            && connected.contains(&("two".into(), p2 as u64))
    );
    h.finish().await;
}

#[tokio::test]
async fn results_are_converted() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let echo = catalog
        .call("d__echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert!(!echo.is_error);
    assert_eq!(echo.view(demiurge_mcp::redact::View::Model).content, "hi");
    let sum = catalog
        .call("d__add", json!({"a": 2, "b": 3}))
        .await
        .unwrap();
    assert_eq!(sum.view(demiurge_mcp::redact::View::Model).content, "5");
    let fail = catalog
        .call("d__fail", json!({"message": "nope"}))
        .await
        .unwrap();
    assert!(fail.is_error);
    assert_eq!(
        fail.view(demiurge_mcp::redact::View::Operator).content,
        "nope"
    );
    let bad = catalog.call("d__add", json!({"a": "x"})).await.unwrap();
    assert!(
        bad.is_error,
        "invalid arguments come back as a tool error: {:?}",
        bad.view(demiurge_mcp::redact::View::Operator)
    );
    assert_eq!(h.sink.of_type("mcp.tool_called").len(), 4);
    h.finish().await;
}

#[tokio::test]
async fn a_call_without_the_call_capability_never_reaches_the_server() {
    let core = Core::new()
        .grant(&["mcp.connect:d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let err = catalog
        .call("d__stderr", json!({"text": "reached"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CallError::MissingCapability { capability, .. } if capability == "mcp.call:d"),
        "{err}"
    );
    h.finish().await;
    let log =
        std::fs::read_to_string(h.home.path().join("logs/mcp-stderr.log")).unwrap_or_default();
    assert!(
        !log.contains("reached"),
        "the server must not have run the tool"
    );
    assert_eq!(h.sink.of_type("mcp.call_denied").len(), 1);
}

#[tokio::test]
async fn a_custom_call_capability_is_honoured() {
    let core = Core::new()
        .grant(&["mcp.connect:d", "tools.docs:*"])
        .server(
            "d",
            &demo("capability: tools.docs:read\napproval_policy: auto\n"),
        );
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog
            .call("d__echo", json!({"message": "x"}))
            .await
            .is_ok()
    );
    h.finish().await;
}

#[tokio::test]
async fn call_approval_follows_the_manifest_policy() {
    let core = Core::new()
        .grant_servers(&["ask", "auto"])
        .server("ask", &demo(""))
        .server("auto", &demo("approval_policy: auto\n"));
    let approver = Recorder::new(|r| {
        if r.action == Action::Call {
            ApprovalAnswer::Deny
        } else {
            ApprovalAnswer::AllowSession
        }
    });
    let h = harness(approver).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let denied = catalog
        .call("ask__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(denied, CallError::ApprovalDenied { .. }),
        "{denied}"
    );
    assert!(
        catalog
            .call("auto__echo", json!({"message": "x"}))
            .await
            .is_ok()
    );
    let calls: Vec<_> = h
        .approver
        .requests()
        .into_iter()
        .filter(|r| r.action == Action::Call)
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool.as_deref(), Some("ask__echo"));
    h.finish().await;
}

#[tokio::test]
async fn a_call_timeout_ends_the_call_and_keeps_the_server() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\ntimeout_seconds: 1\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let started = Instant::now();
    let slow = catalog
        .call("d__sleep", json!({"ms": 30_000}))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        slow.is_error
            && slow
                .view(demiurge_mcp::redact::View::Operator)
                .content
                .contains("timed out"),
        "{:?}",
        slow.view(demiurge_mcp::redact::View::Operator)
    );
    let echo = catalog
        .call("d__echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert_eq!(
        echo.view(demiurge_mcp::redact::View::Operator).content,
        "still here"
    );
    // The timed-out request was cancelled on the server, not left running.
    let mut sleeping = u64::MAX;
    common::eventually_async(Duration::from_secs(5), async || {
        let r = catalog.call("d__in_flight", json!({})).await.unwrap();
        sleeping = r.view(demiurge_mcp::redact::View::Operator).data["sleeping"]
            .as_u64()
            .unwrap();
        sleeping == 0
    })
    .await;
    assert_eq!(sleeping, 0, "the server still runs the timed-out call");
    h.finish().await;
}

#[tokio::test]
async fn unknown_tools_and_entries_of_other_sessions_are_refused() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (sa, _) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
    let (sb, _) = h.runtime.start_session(core.spec_in("b")).await.unwrap();
    let ca = sa.prepare_turn().await.unwrap();
    let cb = sb.prepare_turn().await.unwrap();
    assert!(matches!(
        ca.call("d__nope", json!({})).await,
        Err(CallError::UnknownTool(_))
    ));
    let foreign = cb.get("d__echo").unwrap().clone();
    let err = ca
        .call_entry(&foreign, json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Stale {
                reason: StaleReason::OtherCatalog,
                ..
            }
        ),
        "{err}"
    );
    h.finish().await;
}

#[tokio::test]
async fn serial_servers_never_overlap_calls_and_parallel_ones_do() {
    let core = Core::new()
        .grant_servers(&["serial", "parallel"])
        .server("serial", &demo("approval_policy: auto\n"))
        .server(
            "parallel",
            &demo("approval_policy: auto\nsupports_parallel_tool_calls: true\n"),
        );
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let burst = |tool: &'static str| {
        let c = catalog.clone();
        async move {
            let calls = (0..4).map(|_| c.call(tool, json!({"ms": 300})));
            let results = futures::future::join_all(calls).await;
            results
                .into_iter()
                .map(|r| {
                    r.unwrap().view(demiurge_mcp::redact::View::Operator).data["max_concurrent"]
                        .as_u64()
                        .unwrap()
                })
                .max()
                .unwrap()
        }
    };
    assert_eq!(
        burst("serial__sleep").await,
        1,
        "the server must never see two calls at once"
    );
    assert!(
        burst("parallel__sleep").await > 1,
        "parallel calls must overlap on the server"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_collision_with_a_host_tool_names_both_provenances() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = common::harness_with(Recorder::allow(), |mut c| {
        c.host_tools.push(demiurge_mcp::actors::HostTool::new(
            "D__Echo",
            "builtin:echo",
        ));
        c
    })
    .await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let err = session.prepare_turn().await.unwrap_err().to_string();
    assert!(
        err.contains("builtin:echo") && err.contains("mcp:agent/mcp/d.yaml:d/echo"),
        "{err}"
    );
    h.finish().await;
}
