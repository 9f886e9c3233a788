//! Discovery: naming and filters, pagination, connect timeouts, the runtime-wide limit,
//! the failure cache and its expiry.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Core, Recorder, count, demo, demo_counting, harness, harness_with, names, pid_of};
use demiurge_mcp::ManualClock;

#[tokio::test]
async fn tools_are_prefixed_filtered_and_ordered() {
    let core = Core::new()
        .grant_servers(&["b-docs", "a.search"])
        .server(
            "b-docs",
            &demo("tools:\n  include: [e*, add]\n  exclude: [env_names, echo_json]\n"),
        )
        .server("a.search", &demo("tools:\n  include: [whoami]\n"));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    // Servers in file order (a.search < b-docs), tools in listing order.
    assert_eq!(
        names(&catalog),
        ["a-search__whoami", "b-docs__add", "b-docs__echo"]
    );
    let entry = catalog.get("a-search__whoami").unwrap();
    assert_eq!(
        (entry.server.as_str(), entry.tool.as_str()),
        ("a.search", "whoami")
    );
    h.finish().await;
}

#[tokio::test]
async fn every_page_of_tools_is_listed() {
    let core = Core::new().grant_servers(&["big"]).server(
        "big",
        &common::demo("").replace(
            "[demo-server]",
            "[demo-server, --extra-tools, \"120\", --page-size, \"7\"]",
        ),
    );
    let h = harness(Recorder::allow()).await;
    let catalog = common::clean_turn(&h, &core).await;
    assert_eq!(catalog.tools().len(), 120 + common::DEMO_TOOLS);
    let result = catalog
        .call("big__extra_119", serde_json::json!({}))
        .await
        .unwrap();
    assert_eq!(
        result.view(demiurge_mcp::redact::View::Operator).content,
        "extra tool 119"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_hung_server_times_out_without_delaying_its_healthy_peer() {
    let core = Core::new()
        .grant_servers(&["hung", "healthy"])
        .server(
            "hung",
            "command: sleep\nargs: [\"60\"]\nconnect_timeout_seconds: 1\n",
        )
        .server("healthy", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let started = Instant::now();
    let catalog = session.prepare_turn().await.unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the 1 s timeout must end the turn, took {took:?}"
    );
    assert!(names(&catalog).contains(&"healthy__echo".to_string()));
    let d = &catalog.diagnostics()[0];
    assert_eq!(d.server, "hung");
    assert!(d.message.contains("connect timeout"), "{}", d.message);
    let failed = h.sink.of_type("mcp.server_failed");
    assert_eq!(failed.len(), 1);
    h.finish().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_is_a_diagnostic() {
    let core = Core::new()
        .grant_servers(&["missing", "quits"])
        .server("missing", "command: /nonexistent/definitely-not-here\n")
        .server(
            "quits",
            "command: sh\nargs: [-c, \"echo boom >&2; exit 3\"]\n",
        );
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let msg = |id: &str| {
        catalog
            .diagnostics()
            .iter()
            .find(|d| d.server == id)
            .unwrap()
            .message
            .clone()
    };
    assert!(
        msg("missing").contains("cannot start"),
        "{}",
        msg("missing")
    );
    assert!(msg("quits").contains("initialize"), "{}", msg("quits"));
    let log = std::fs::read_to_string(h.home.path().join("logs/mcp-stderr.log")).unwrap();
    assert!(
        log.contains("mcp server quits") && log.contains("boom"),
        "{log}"
    );
    h.finish().await;
}

#[tokio::test]
async fn discovery_never_exceeds_the_runtime_wide_limit_across_sessions() {
    let core = Core::new();
    let mut ids = Vec::new();
    for i in 0..6 {
        let id = format!("s{i}");
        // Each server takes a moment to start so that connects overlap.
        let script = format!("sleep 0.3; exec '{}' demo-server", common::exe());
        core.write(&id, &common::shell(&script, ""));
        ids.push(id);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let core = core.grant_servers(&refs);
    let h = harness(Recorder::allow()).await;
    let (sa, _) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
    let (sb, _) = h.runtime.start_session(core.spec_in("b")).await.unwrap();
    let (ca, cb) = tokio::join!(sa.prepare_turn(), sb.prepare_turn());
    assert_eq!(ca.unwrap().tools().len(), 6 * common::DEMO_TOOLS);
    assert_eq!(cb.unwrap().tools().len(), 6 * common::DEMO_TOOLS);
    let stats = h.runtime.limiter_stats().await;
    assert_eq!(stats.granted, 12);
    assert_eq!(stats.in_use, 0);
    assert_eq!(
        stats.max_in_use, 4,
        "12 slow starts at once must fill, and never exceed, 4 permits"
    );
    h.finish().await;
}

#[tokio::test]
async fn the_limit_is_host_configurable() {
    let core = Core::new();
    for i in 0..3 {
        let script = format!("sleep 0.2; exec '{}' demo-server", common::exe());
        core.write(&format!("s{i}"), &common::shell(&script, ""));
    }
    let core = core.grant_servers(&["s0", "s1", "s2"]);
    let h = harness_with(Recorder::allow(), |mut c| {
        c.discovery_limit = 1;
        c
    })
    .await;
    let (_session, _) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(h.runtime.limiter_stats().await.max_in_use, 1);
    h.finish().await;
}

#[tokio::test]
async fn failures_are_cached_per_server_then_retried_alone() {
    let marker = tempfile::tempdir().unwrap();
    let attempts = marker.path().join("attempts");
    let script = format!("echo try >> '{}'; exit 1", attempts.display());
    let core = Core::new()
        .grant_servers(&["flaky", "steady"])
        .server("flaky", &common::shell(&script, ""))
        .server("steady", &demo(""));
    let clock = Arc::new(ManualClock::new());
    let c2 = Arc::clone(&clock);
    let h = harness_with(Recorder::allow(), move |c| c.with_clock(c2)).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();

    let first = session.prepare_turn().await.unwrap();
    let steady = pid_of(&first, "steady__whoami").await;
    assert_eq!(count(&attempts), 1);
    let message = first.diagnostics()[0].message.clone();

    clock.advance(Duration::from_secs(29));
    let second = session.prepare_turn().await.unwrap();
    assert_eq!(
        count(&attempts),
        1,
        "within 30 s the cached diagnostic is reused"
    );
    assert_eq!(second.diagnostics()[0].message, message);
    assert_eq!(pid_of(&second, "steady__whoami").await, steady);

    clock.advance(Duration::from_secs(2));
    let third = session.prepare_turn().await.unwrap();
    assert_eq!(
        count(&attempts),
        2,
        "after expiry only the failed server is retried"
    );
    assert_eq!(
        pid_of(&third, "steady__whoami").await,
        steady,
        "the healthy peer stays published"
    );
    assert_eq!(
        h.approver.asked_for("flaky"),
        1,
        "the allow-for-session answer still holds"
    );
    let decided_for_flaky = h
        .sink
        .of_type("approval.decided")
        .iter()
        .filter(|e| serde_json::to_value(e).unwrap()["server"] == "flaky")
        .count();
    assert_eq!(
        decided_for_flaky, 2,
        "the retry is approved again (from the session cache)"
    );
    h.finish().await;
}

#[tokio::test]
async fn disabled_declarations_are_skipped_entirely() {
    let marker = tempfile::tempdir().unwrap();
    let started = marker.path().join("started");
    let core = Core::new()
        .grant_servers(&["off", "on"])
        .server("off", &demo_counting(&started, "enabled: false\n"))
        .server("on", &demo(""));
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.diagnostics().is_empty() && catalog.denied().is_empty());
    assert!(names(&catalog).iter().all(|n| n.starts_with("on__")));
    assert_eq!(count(&started), 0);
    assert_eq!(h.approver.asked_for("off"), 0);
    h.finish().await;
}
