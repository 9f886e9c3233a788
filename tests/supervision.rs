//! Supervision and session rules under concurrency: eviction racing a first prepare,
//! delegated children, dead servers and broken transports noticed at once.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Core, Recorder, alive, count, demo, eventually, harness, harness_with, names, pid_of,
};
use demiurge_mcp::authority::CapabilitySet;
use demiurge_mcp::{ManualClock, PrepareError};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

fn caps(names: &[&str]) -> CapabilitySet {
    CapabilitySet::new(names.iter().map(|s| s.to_string()))
}

#[tokio::test]
async fn eviction_racing_a_first_prepare_wins_and_closes_what_was_born() {
    let marker = tempfile::tempdir().unwrap();
    let pidfile = marker.path().join("pid");
    let core = Core::new()
        .grant_servers(&["slow"])
        .server("slow", &common::recording_pid(&pidfile, 1, ""));
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let preparing = tokio::spawn({
        let s = session.clone();
        async move { s.prepare_turn().await }
    });
    assert!(
        eventually(Duration::from_secs(5), || count(&pidfile) == 1).await,
        "the server started"
    );
    let pid = common::first_pid(&pidfile);
    h.runtime.evict_session(session.id()).await.unwrap();
    let outcome = preparing.await.unwrap();
    assert!(matches!(outcome, Err(PrepareError::Evicted)), "{outcome:?}");
    assert!(outcome.unwrap_err().to_string().contains("evicted"));
    assert!(
        eventually(Duration::from_secs(10), || !alive(pid)).await,
        "a connection born during the race is closed"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_child_prepares_under_its_narrower_scope_and_releases_on_finish() {
    let core = Core::new()
        .grant_servers(&["a", "b"])
        .server("a", &demo("approval_policy: auto\n"))
        .server("b", &demo("approval_policy: auto\n"))
        .server("c", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (parent, parent_turn) = common::open(&h.runtime, core.spec()).await;
    let parent_a = pid_of(&parent_turn, "a__whoami").await;

    // The scope asks for c too, which the parent does not have: it cannot widen.
    let child = parent
        .spawn_child(caps(&[
            "mcp.connect:a",
            "mcp.call:a",
            "mcp.connect:c",
            "mcp.call:c",
        ]))
        .await
        .unwrap();
    let turn = child.session().prepare_turn().await.unwrap();
    assert!(
        names(&turn).iter().all(|n| n.starts_with("a__")),
        "{:?}",
        names(&turn)
    );
    let denied: Vec<&str> = turn.denied().iter().map(|d| d.server.as_str()).collect();
    assert_eq!(denied, ["b", "c"]);
    let child_a = pid_of(&turn, "a__whoami").await;
    assert_ne!(child_a, parent_a, "the child has its own connections");

    let report = child.finish().await.unwrap();
    assert_eq!(report.connections_closed, 1);
    assert!(!alive(child_a));
    assert!(alive(parent_a), "the parent keeps its connections");
    assert_eq!(pid_of(&parent_turn, "a__whoami").await, parent_a);
    h.finish().await;
}

#[tokio::test]
async fn a_dropped_child_releases_its_connections() {
    let core = Core::new()
        .grant_servers(&["a"])
        .server("a", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (parent, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let child_pid = {
        let child = parent
            .spawn_child(caps(&["mcp.connect:a", "mcp.call:a"]))
            .await
            .unwrap();
        let turn = child.session().prepare_turn().await.unwrap();
        pid_of(&turn, "a__whoami").await
        // The child run fails here: the handle is dropped without finish().
    };
    assert!(eventually(Duration::from_secs(10), || !alive(child_pid)).await);
    h.finish().await;
}

#[tokio::test]
async fn children_do_not_evict_their_parent() {
    let core = Core::new()
        .grant_servers(&["a"])
        .server("a", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (parent, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let pid = pid_of(&parent.prepare_turn().await.unwrap(), "a__whoami").await;
    let c1 = parent.spawn_child(caps(&["mcp.connect:a"])).await.unwrap();
    let c2 = parent.spawn_child(caps(&["mcp.connect:a"])).await.unwrap();
    c1.session().prepare_turn().await.unwrap();
    c2.session().prepare_turn().await.unwrap();
    assert!(alive(pid));
    assert!(parent.prepare_turn().await.is_ok());
    c1.finish().await.unwrap();
    c2.finish().await.unwrap();
    h.finish().await;
}

#[tokio::test]
async fn in_flight_calls_fail_clearly_when_the_server_dies_and_it_reconnects_after_the_ttl() {
    let core = Core::new()
        .grant_servers(&["d", "peer"])
        .server(
            "d",
            &demo("approval_policy: auto\nsupports_parallel_tool_calls: true\n"),
        )
        .server("peer", &demo("approval_policy: auto\n"));
    let clock = Arc::new(ManualClock::new());
    let c2 = Arc::clone(&clock);
    let h = harness_with(Recorder::allow(), move |c| c.with_clock(c2)).await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    let pid = pid_of(&catalog, "d__whoami").await;
    let peer = pid_of(&catalog, "peer__whoami").await;

    let long_call = tokio::spawn({
        let c = catalog.clone();
        async move { c.call("d__sleep", json!({"ms": 60_000})).await }
    });
    // Wait until the server really runs the call, then kill it.
    let running = common::eventually_async(Duration::from_secs(2), async || {
        let r = catalog.call("d__in_flight", json!({})).await.unwrap();
        r.view(demiurge_mcp::redact::View::Operator).data["sleeping"] == 1
    })
    .await;
    assert!(running, "the long call never reached the server");
    let started = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let outcome = long_call.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    match outcome {
        Ok(result) => assert!(
            result.is_error
                && result
                    .view(demiurge_mcp::redact::View::Operator)
                    .content
                    .contains("closed"),
            "{:?}",
            result.view(demiurge_mcp::redact::View::Operator)
        ),
        Err(refused) => assert!(refused.to_string().contains("closed"), "{refused}"),
    }
    assert!(
        eventually(Duration::from_secs(5), || !h
            .sink
            .of_type("mcp.server_failed")
            .is_empty())
        .await
    );

    let during = session.prepare_turn().await.unwrap();
    assert!(during.get("d__echo").is_none());
    assert!(during.diagnostics().iter().any(|d| d.server == "d"));
    assert_eq!(pid_of(&during, "peer__whoami").await, peer);

    clock.advance(Duration::from_secs(31));
    let after = session.prepare_turn().await.unwrap();
    let again = pid_of(&after, "d__whoami").await;
    assert_ne!(again, pid, "reconnected after the failure TTL");
    assert_eq!(pid_of(&after, "peer__whoami").await, peer);
    h.finish().await;
}

#[tokio::test]
async fn a_broken_transport_is_noticed_while_the_process_lives() {
    // The leader shell hands its stdin/stdout to a background server, closes its own
    // copies and lives on: killing the server breaks the transport, not the leader.
    // (An asynchronous list reads /dev/null unless stdin is passed on another fd.)
    let script = format!(
        "exec 3<&0; '{}' demo-server <&3 3<&- & exec 0<&- 1>&- 3<&-; wait; sleep 60",
        common::exe()
    );
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &common::shell(&script, "approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let server = pid_of(&catalog, "d__whoami").await;
    kill(Pid::from_raw(server as i32), Signal::SIGKILL).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !h
            .sink
            .of_type("mcp.server_failed")
            .is_empty())
        .await
    );
    let failed = serde_json::to_value(&h.sink.of_type("mcp.server_failed")[0]).unwrap();
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("closed its side"),
        "{failed}"
    );
    h.finish().await;
}
