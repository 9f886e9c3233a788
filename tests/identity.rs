//! Server fingerprints and catalog identity: what reconnects one server, what
//! reauthorizes everything, and which entries stay callable.

mod common;

use common::{Core, Recorder, alive, demo, eventually, harness, pid_of};
use demiurge_mcp::authority::{CapabilitySet, HostPolicy};
use demiurge_mcp::core::ApprovalPolicy;
use demiurge_mcp::{CallError, Session, StaleReason, TurnCatalog};
use serde_json::json;
use std::time::Duration;

fn two_servers() -> Core {
    Core::new()
        .grant_servers(&["a", "b"])
        .server("a", &demo("approval_policy: auto\n"))
        .server("b", &demo("approval_policy: auto\n"))
}

async fn pids(c: &TurnCatalog) -> (u32, u32) {
    (pid_of(c, "a__whoami").await, pid_of(c, "b__whoami").await)
}

#[tokio::test]
async fn a_changed_declaration_reconnects_only_that_server() {
    let core = two_servers();
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let (a1, b1) = pids(&session.prepare_turn().await.unwrap()).await;
    core.write("a", &demo("approval_policy: auto\nrisk: high\n"));
    let (a2, b2) = pids(&session.prepare_turn().await.unwrap()).await;
    assert_ne!(a1, a2, "the changed server reconnects");
    assert_eq!(b1, b2, "its healthy peer keeps its process");
    assert!(eventually(Duration::from_secs(5), || !alive(a1)).await);
    assert_eq!(
        h.approver.asked_for("a"),
        2,
        "the changed server is approved again"
    );
    assert_eq!(h.approver.asked_for("b"), 1);
    h.finish().await;
}

/// Applies one authority change and checks that no peer survives it.
async fn everything_reconnects_after(change: impl FnOnce(&mut demiurge_mcp::SessionSpec)) {
    let core = two_servers();
    let h = harness(Recorder::allow()).await;
    let (session, first) = common::open(&h.runtime, core.spec()).await;
    let (a1, b1) = pids(&first).await;
    session.update(change).unwrap();
    let second = session.prepare_turn().await.unwrap();
    let (a2, b2) = pids(&second).await;
    assert!(
        a1 != a2 && b1 != b2,
        "no peer may be reused across an identity change"
    );
    assert!(eventually(Duration::from_secs(5), || !alive(a1) && !alive(b1)).await);
    // Entries of the stale catalog are refused, never dispatched.
    let stale = first.get("a__echo").unwrap().clone();
    let err = second
        .call_entry(&stale, json!({"message": "x"}))
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
    let err = first
        .call("a__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Stale {
                reason: StaleReason::Closed,
                ..
            }
        ),
        "{err}"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_principal_change_reauthorizes_everything() {
    everything_reconnects_after(|s| s.principal = "someone-else".into()).await;
}

#[tokio::test]
async fn a_core_revision_change_reauthorizes_everything() {
    everything_reconnects_after(|s| s.core_revision = "abc123".into()).await;
}

#[tokio::test]
async fn a_workspace_change_reauthorizes_everything() {
    let other = tempfile::tempdir().unwrap();
    let path = other.path().to_path_buf();
    everything_reconnects_after(move |s| s.workspace = Some(path)).await;
}

#[tokio::test]
async fn a_tighter_connect_policy_reauthorizes_everything() {
    everything_reconnects_after(|s| {
        s.policy = Some(HostPolicy {
            connect_floor: ApprovalPolicy::Prompt,
            call_floor: ApprovalPolicy::Prompt,
        })
    })
    .await;
}

#[tokio::test]
async fn a_capability_snapshot_change_reauthorizes_everything() {
    let caps = [
        "mcp.connect:a",
        "mcp.call:a",
        "mcp.connect:b",
        "mcp.call:b",
        "other:x",
    ];
    everything_reconnects_after(move |s| {
        s.capabilities = Some(CapabilitySet::new(caps.map(String::from)))
    })
    .await;
}

#[tokio::test]
async fn the_same_authority_keeps_every_peer_across_turns() {
    let core = two_servers();
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let first = pids(&session.prepare_turn().await.unwrap()).await;
    session
        .update(|s| s.lane = "ignored: the lane of a live session does not change".into())
        .unwrap();
    let catalog = session.prepare_turn().await.unwrap();
    assert_eq!(pids(&catalog).await, first);
    // An entry of an earlier turn of the same catalog stays valid.
    assert!(
        catalog
            .call("a__echo", json!({"message": "x"}))
            .await
            .is_ok()
    );
    h.finish().await;
}

#[tokio::test]
async fn a_tighter_session_policy_applies_to_calls() {
    let core = two_servers();
    let h = harness(Recorder::new(|r| {
        if r.action == demiurge_mcp::actors::Action::Call {
            demiurge_mcp::ApprovalAnswer::Deny
        } else {
            demiurge_mcp::ApprovalAnswer::AllowSession
        }
    }))
    .await;
    let (session, _): (Session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let open = session.prepare_turn().await.unwrap();
    assert!(
        open.call("a__echo", json!({"message": "x"})).await.is_ok(),
        "auto calls need no prompt"
    );
    session
        .update(|s| {
            s.policy = Some(HostPolicy {
                connect_floor: ApprovalPolicy::Prompt,
                call_floor: ApprovalPolicy::Prompt,
            })
        })
        .unwrap();
    let strict = session.prepare_turn().await.unwrap();
    let err = strict
        .call("a__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::ApprovalDenied { .. }),
        "the host may tighten a manifest's auto: {err}"
    );
    h.finish().await;
}
