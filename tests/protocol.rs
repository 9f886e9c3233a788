//! Both protocol eras: a declaration's `protocol:` (`2025-11-25`, the default;
//! `2026-07-28`; `auto`) decides how a connection starts, against the demo server in
//! its dual, modern-only and legacy-only modes.

mod common;

use serde_json::json;

use common::{Core, Recorder, demo, demo_fault, harness, harness_with};

/// The echo of `tool` in `catalog`, through a real call.
async fn echoes(catalog: &demiurge_mcp::TurnCatalog, tool: &str) -> String {
    let result = catalog
        .call(tool, json!({"message": "both eras"}))
        .await
        .unwrap();
    assert!(
        !result.is_error,
        "{:?}",
        result.view(demiurge_mcp::redact::View::Operator)
    );
    result
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone()
}

#[tokio::test]
async fn a_declared_era_is_spoken_and_auto_finds_what_each_server_speaks() {
    let core = Core::new()
        .grant_servers(&["modern", "auto", "autolegacy", "automodern", "legacy"])
        .server(
            "modern",
            &demo("approval_policy: auto\nprotocol: 2026-07-28\n"),
        )
        .server("auto", &demo("approval_policy: auto\nprotocol: auto\n"))
        .server(
            "autolegacy",
            &demo_fault("legacy-only", "approval_policy: auto\nprotocol: auto\n"),
        )
        .server(
            "automodern",
            &demo_fault("modern-only", "approval_policy: auto\nprotocol: auto\n"),
        )
        .server("legacy", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let catalog = common::clean_turn(&h, &core).await;
    for server in ["modern", "auto", "autolegacy", "automodern", "legacy"] {
        assert_eq!(
            echoes(&catalog, &format!("{server}__echo")).await,
            "both eras"
        );
    }
    h.finish().await;
}

#[tokio::test]
async fn a_pinned_era_the_server_does_not_speak_fails_and_says_what_to_declare() {
    let core = Core::new()
        .grant_servers(&["old", "new"])
        .server(
            "old",
            &demo_fault(
                "legacy-only",
                "approval_policy: auto\nprotocol: 2026-07-28\n",
            ),
        )
        .server(
            "new",
            &demo_fault(
                "modern-only",
                "approval_policy: auto\nprotocol: 2025-11-25\n",
            ),
        );
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let said = |server: &str| {
        catalog
            .diagnostics()
            .iter()
            .find(|d| d.server == server)
            .unwrap_or_else(|| panic!("no diagnostic for {server}: {:?}", catalog.diagnostics()))
            .message
            .clone()
    };
    assert!(
        said("new").contains("declare `protocol: 2026-07-28`"),
        "{}",
        said("new")
    );
    // A legacy server asked for the modern era says so, in words of the discovery.
    assert!(
        said("old").contains("refused server/discover"),
        "{}",
        said("old")
    );
    assert!(catalog.tools().is_empty(), "{:?}", catalog.tools());
    h.finish().await;
}

#[tokio::test]
async fn the_declared_era_is_part_of_the_fingerprint_and_a_wrong_one_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent/mcp/x.yaml");
    let fingerprint = |yaml: &str| {
        demiurge_mcp::core::parse_declaration_text(
            yaml,
            "x".into(),
            "agent/mcp/x.yaml".into(),
            &file,
        )
        .map(|d| d.fingerprint)
    };
    let plain = fingerprint("command: x\n").unwrap();
    let modern = fingerprint("command: x\nprotocol: 2026-07-28\n").unwrap();
    let auto = fingerprint("command: x\nprotocol: auto\n").unwrap();
    assert_ne!(plain, modern);
    assert_ne!(modern, auto);
    for wrong in [
        "protocol: 2024-11-05\n",
        "protocol: latest\n",
        "protocol: [a]\n",
    ] {
        let errors = fingerprint(&format!("command: x\n{wrong}")).unwrap_err();
        let text = format!("{errors:?}");
        assert!(text.contains("protocol"), "{text}");
        assert!(
            !text.contains("latest") && !text.contains("2024-11-05"),
            "{text}"
        );
    }
}

/// A runtime that trusts loopback and resolves `mcp.test` and `evil.test` to it.
async fn http_harness() -> common::Harness {
    let resolver = demiurge_mcp::net::StaticResolver::new();
    resolver.set("mcp.test", ["127.0.0.1".parse().unwrap()]);
    resolver.set("evil.test", ["127.0.0.2".parse().unwrap()]);
    common::harness_with(Recorder::allow(), |mut c| {
        c.url_policy =
            demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]);
        c.resolver = std::sync::Arc::new(resolver);
        c
    })
    .await
}

#[tokio::test]
async fn over_http_auto_speaks_the_modern_era_without_a_session() {
    let server = common::http::serve(
        "127.0.0.1:0",
        common::http::Behaviour::Mcp(vec!["mcp.test".into()]),
        None,
    )
    .await;
    let url = format!("http://mcp.test:{}/mcp", server.port());
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\nprotocol: auto\n"),
    );
    let h = http_harness().await;
    let catalog = common::clean_turn(&h, &core).await;
    assert_eq!(echoes(&catalog, "web__echo").await, "both eras");
    let identity = catalog.servers().find(|s| s.server == "web").unwrap();
    assert_eq!(identity.protocol, "2026-07-28");
    // Stateless: the server never issued a session, so no request carried one.
    for request in server.requests() {
        assert!(
            !request.headers.contains_key("mcp-session-id"),
            "{} {}",
            request.method,
            request.path
        );
    }
    h.finish().await;
}

#[tokio::test]
async fn a_discovery_the_url_policy_refuses_is_never_retried_in_the_older_era() {
    // Every request is redirected to an address the policy refuses: discovery fails on
    // the transport, which is not a version mismatch, so no `initialize` follows.
    let server = common::http::serve(
        "127.0.0.1:0",
        common::http::Behaviour::Redirect(307, "http://evil.test:9/mcp".into()),
        None,
    )
    .await;
    let url = format!("http://mcp.test:{}/mcp", server.port());
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\nprotocol: auto\nconnect_timeout_seconds: 20\n"),
    );
    let h = http_harness().await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let diagnostic = catalog
        .diagnostics()
        .iter()
        .find(|d| d.server == "web")
        .expect("a diagnostic for the refused server")
        .message
        .clone();
    let posts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1, "{diagnostic}: {posts:?}");
    assert_eq!(
        posts[0]
            .headers
            .get("mcp-method")
            .and_then(|v| v.to_str().ok()),
        Some("server/discover"),
        "{posts:?}"
    );
    h.finish().await;
}

#[tokio::test]
async fn the_connect_preview_says_which_era_is_asked_for() {
    let core = Core::new()
        .grant_servers(&["modern", "legacy"])
        .grant_servers(&["default"])
        .server("modern", &demo("protocol: 2026-07-28\n"))
        .server("legacy", &demo("protocol: 2025-11-25\n"))
        .server("default", &demo(""));
    let h = harness(Recorder::allow()).await;
    let _ = common::clean_turn(&h, &core).await;
    let eras = [
        ("modern", "2026-07-28"),
        ("legacy", "2025-11-25"),
        ("default", "auto"),
    ];
    for (server, era) in eras {
        let asked = h.approver.requests();
        let request = asked
            .iter()
            .find(|r| r.server == server)
            .expect("a connect approval");
        assert_eq!(request.preview.protocol.as_str(), era);
        assert!(
            request
                .preview
                .render()
                .contains(&format!("transport: stdio (MCP {era})")),
            "{}",
            request.preview.render()
        );
    }
    h.finish().await;
}

/// How many times the legacy-only demo servers under `home` refused `server/discover`,
/// from their stderr logs.
fn discover_refusals(home: &std::path::Path) -> usize {
    common::logs_count(home, "refused server/discover")
}

#[tokio::test]
async fn auto_remembers_a_servers_era_and_probes_again_when_the_declaration_changes() {
    let declaration = demo_fault("legacy-only", "approval_policy: auto\nprotocol: auto\n");
    let core = Core::new()
        .grant_servers(&["old"])
        .server("old", &declaration);
    let h = harness(Recorder::allow()).await;
    let home = h.runtime.home().to_path_buf();
    // Three sessions, three connections: only the first one asks.
    for _ in 0..3 {
        let (session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert_eq!(echoes(&catalog, "old__echo").await, "both eras");
        session.evict().await.unwrap();
    }
    assert!(
        common::eventually(std::time::Duration::from_secs(5), || discover_refusals(
            &home
        ) == 1)
        .await,
        "discover refused {} times",
        discover_refusals(&home)
    );
    // A changed declaration is another server: it is asked again (its stderr reaches
    // the log when its connection closes, here at shutdown).
    core.write("old", &format!("{declaration}timeout_seconds: 30\n"));
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(echoes(&catalog, "old__echo").await, "both eras");
    h.finish().await;
    assert_eq!(discover_refusals(&home), 2);
}

#[tokio::test]
async fn over_http_a_legacy_servers_answer_to_discovery_falls_back_and_is_remembered() {
    // A 400 naming no request (the TypeScript SDK), and an empty result (a server that
    // answers methods it does not know that way).
    for empty_result in [false, true] {
        legacy_fallback(common::http::Behaviour::McpLegacy { empty_result }).await;
    }
}

async fn legacy_fallback(behaviour: common::http::Behaviour) {
    let server = common::http::serve("127.0.0.1:0", behaviour, None).await;
    let url = format!("http://127.0.0.1:{}/mcp", server.port());
    let core = Core::new().grant_servers(&["old"]).server(
        "old",
        &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\nprotocol: auto\n"),
    );
    let h = http_harness().await;
    for _ in 0..2 {
        let (session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert!(
            catalog.diagnostics().is_empty(),
            "{:?}",
            catalog.diagnostics()
        );
        assert_eq!(echoes(&catalog, "old__echo").await, "both eras");
        let identity = catalog.servers().find(|s| s.server == "old").unwrap();
        assert_eq!(identity.protocol, "2025-11-25");
        session.evict().await.unwrap();
    }
    // One discovery, refused; the second connection went straight to `initialize`.
    let discoveries = server
        .requests()
        .iter()
        .filter(|r| {
            r.headers
                .get("mcp-method")
                .is_some_and(|v| v == "server/discover")
        })
        .count();
    assert_eq!(discoveries, 1);
    h.finish().await;
}

#[tokio::test]
async fn over_http_a_400_that_is_an_authorization_failure_or_a_modern_rejection_is_no_fallback() {
    for challenge in [true, false] {
        let server = common::http::serve(
            "127.0.0.1:0",
            common::http::Behaviour::McpDiscoverRefused { challenge },
            None,
        )
        .await;
        let url = format!("http://127.0.0.1:{}/mcp", server.port());
        let core = Core::new().grant_servers(&["web"]).server(
            "web",
            &format!(
                "transport: streamable_http\nurl: {url}\napproval_policy: auto\nprotocol: auto\n"
            ),
        );
        let h = http_harness().await;
        let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert!(
            catalog.tools().is_empty(),
            "challenge {challenge}: it fell back"
        );
        assert!(
            catalog.diagnostics().iter().any(|d| d.server == "web"),
            "challenge {challenge}"
        );
        let posts = server
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .count();
        assert_eq!(posts, 1, "challenge {challenge}: an initialize followed");
        h.finish().await;
    }
}

/// A 401 or 403 to the discovery, however legacy its body looks (an error naming the
/// request), is an authorization failure: the server fails, and no `initialize` is
/// ever sent.
#[tokio::test]
async fn over_http_an_authorization_failure_of_the_discovery_is_never_a_downgrade() {
    for status in [401, 403] {
        let behaviour = common::http::Behaviour::McpDiscoverStatus(status);
        let server = common::http::serve("127.0.0.1:0", behaviour, None).await;
        let url = format!("http://127.0.0.1:{}/mcp", server.port());
        let core = Core::new().grant_servers(&["web"]).server(
            "web",
            &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\n"),
        );
        let h = http_harness().await;
        let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert!(catalog.tools().is_empty(), "{status}: it fell back");
        assert!(
            catalog.diagnostics().iter().any(|d| d.server == "web"),
            "{status}"
        );
        // Every POST to the endpoint was a discovery: nothing was sent in the older
        // era (a 401 also starts OAuth, whose requests go elsewhere).
        let posts: Vec<_> = server
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == "/mcp")
            .collect();
        assert!(!posts.is_empty(), "{status}");
        let all_discoveries = posts.iter().all(|r| {
            r.headers
                .get("mcp-method")
                .is_some_and(|v| v == "server/discover")
        });
        assert!(
            all_discoveries,
            "{status}: another request followed: {posts:?}"
        );
        h.finish().await;
    }
}

#[tokio::test]
async fn one_workspaces_probe_never_decides_anothers() {
    let declaration = demo_fault("legacy-only", "approval_policy: auto\nprotocol: auto\n");
    let first = Core::new()
        .grant_servers(&["old"])
        .server("old", &declaration);
    let second = Core::new()
        .grant_servers(&["old"])
        .server("old", &declaration);
    let h = harness(Recorder::allow()).await;
    let home = h.runtime.home().to_path_buf();
    for core in [&first, &second, &first, &second] {
        let (session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert_eq!(echoes(&catalog, "old__echo").await, "both eras");
        session.evict().await.unwrap();
    }
    // Each workspace probed once: the same declaration in another workspace is asked
    // again, and each one's answer is kept for its own next session.
    h.finish().await;
    assert_eq!(discover_refusals(&home), 2);
}

#[tokio::test]
async fn over_http_a_discovery_that_never_answers_fails_without_a_fallback() {
    // rmcp's own `auto` falls back after 10 s of silence; over the network silence is
    // what an attacker on the path can make, so it fails the server instead.
    let server = common::http::serve(
        "127.0.0.1:0",
        common::http::Behaviour::McpDiscoverSilent,
        None,
    )
    .await;
    let url = format!("http://127.0.0.1:{}/mcp", server.port());
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\nprotocol: auto\nconnect_timeout_seconds: 12\n"),
    );
    let h = http_harness().await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.tools().is_empty());
    let message = &catalog
        .diagnostics()
        .iter()
        .find(|d| d.server == "web")
        .expect("a diagnostic")
        .message;
    assert!(message.contains("connect timeout"), "{message}");
    let posts = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(posts, 1, "an initialize followed the silence");
    h.finish().await;
}

/// A modern server holds the listen the runtime opened; rmcp's servers wait up to 5 s at
/// end of input for the requests they still answer. Closing cancels the listen first,
/// so the server ends at once, well before even a long grace would send it SIGTERM.
#[tokio::test]
async fn closing_a_modern_connection_cancels_its_listen_and_the_server_exits_at_once() {
    let core = Core::new().grant_servers(&["modern"]).server(
        "modern",
        &demo("approval_policy: auto\nprotocol: 2026-07-28\n"),
    );
    let h = harness_with(Recorder::allow(), |mut config| {
        config.close_grace = std::time::Duration::from_secs(30);
        config
    })
    .await;
    for _ in 0..3 {
        let (session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert_eq!(echoes(&catalog, "modern__echo").await, "both eras");
        let started = std::time::Instant::now();
        session.evict().await.unwrap();
        // Without the cancellation: rmcp's 5 s drain. With it: a few milliseconds.
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    }
    h.finish().await;
}
