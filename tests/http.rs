//! Streamable HTTP behind the URL policy: real HTTP and HTTPS servers on loopback, a
//! static resolver for names (tests never use real DNS).

mod common;

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::http::{Behaviour, pki, serve};
use common::{Core, Recorder, harness_with, names};
use demiurge_mcp::net::{NetContext, PinnedClient, StaticResolver, UrlPolicy};
use demiurge_mcp::{CallError, RuntimeConfig};
use serde_json::{Value, json};

fn loopback() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

/// A pinned client trusting loopback, resolving nothing.
fn loopback_client(
    declared: Vec<http::HeaderName>,
    hook: demiurge_mcp::net::client::DecisionHook,
) -> PinnedClient {
    let trusted = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
    let net = NetContext::new(trusted, Arc::new(StaticResolver::new()), &[]).unwrap();
    PinnedClient::new(Arc::new(net), declared, hook)
}

fn trusting(
    resolver: StaticResolver,
    nets: &[&str],
) -> impl FnOnce(RuntimeConfig) -> RuntimeConfig {
    let nets: Vec<ipnet::IpNet> = nets.iter().map(|n| n.parse().unwrap()).collect();
    move |mut c| {
        c.url_policy = UrlPolicy::with_trusted(nets);
        c.resolver = Arc::new(resolver);
        c
    }
}

fn decisions(sink: &demiurge_mcp::events::MemorySink, phase: &str) -> Vec<Value> {
    sink.of_type("mcp.url_decision")
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .filter(|v| v["phase"] == phase)
        .map(|v| v["decision"].clone())
        .collect()
}

#[tokio::test]
async fn an_http_server_works_end_to_end_through_the_pinned_client() {
    let server = serve("127.0.0.1:0", Behaviour::Mcp(vec!["mcp.test".into()]), None).await;
    let resolver = StaticResolver::new();
    resolver.set("mcp.test", [loopback()]);
    let url = format!("http://mcp.test:{}/mcp", server.port());
    let core = Core::new()
        .grant_servers(&["web"])
        // The 2025-11-25 era: a session, deleted when the connection closes.
        .server("web", &format!("transport: streamable_http\nurl: {url}\nheaders:\n  X-Api-Key: \"k-${{WEB_KEY}}\"\napproval_policy: auto\nprotocol: 2025-11-25\n"));
    let h = harness_with(Recorder::allow(), |c| {
        trusting(resolver, &["127.0.0.0/8"])(
            c.with_host_env(common::host_env(&[("WEB_KEY", "secret-web-key")])),
        )
    })
    .await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    assert!(names(&catalog).contains(&"web__echo".to_string()));
    let r = catalog
        .call("web__echo", json!({"message": "over http secret-web-key"}))
        .await
        .unwrap();
    assert_eq!(
        r.view(demiurge_mcp::redact::View::Operator).content,
        "over http <redacted:WEB_KEY>"
    );

    // The preview shows the origin and the validated address, no path, no header value.
    let preview = &h.approver.requests()[0].preview;
    assert_eq!(
        preview.origin.as_deref(),
        Some(format!("http://mcp.test:{}", server.port()).as_str())
    );
    assert_eq!(
        preview.url_policy.as_ref().map(|p| p.addresses.clone()),
        Some(vec!["127.0.0.1".to_string()])
    );
    assert_eq!(preview.header_names, ["X-Api-Key"]);

    // Every request was checked and pinned; Host kept the name; the header was sent.
    let requests = server.requests();
    assert!(
        requests.len() >= 3,
        "initialize, initialized, list, call: {}",
        requests.len()
    );
    for r in &requests {
        assert_eq!(r.headers["host"], format!("mcp.test:{}", server.port()));
        assert_eq!(r.headers["x-api-key"], "k-secret-web-key");
    }
    let request_decisions = decisions(&h.sink, "request");
    assert!(
        request_decisions.len() >= requests.len(),
        "one decision per request"
    );
    assert!(
        request_decisions
            .iter()
            .all(|d| d["allowed"] == true && d["resolved_addresses"] == json!(["127.0.0.1"]))
    );
    assert_eq!(decisions(&h.sink, "connect").len(), 1);

    session.evict().await.unwrap();
    assert!(
        server.requests().iter().any(|r| r.method == "DELETE"),
        "closing deletes the MCP session: {:?}",
        server
            .requests()
            .iter()
            .map(|r| r.method.clone())
            .collect::<Vec<_>>()
    );
    h.finish().await;
}

/// The test server leaves Nagle's algorithm on, as hyper and axum do by default: it
/// holds each small SSE write until its previous one is acknowledged. A client that
/// delays its ACKs (Linux: 40 ms) made every call wait that long; the pinned client
/// acknowledges at once. 25 calls took over a second before; the bound is half that.
#[tokio::test]
async fn calls_to_a_server_with_nagle_on_wait_for_no_delayed_ack() {
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Mcp(vec!["127.0.0.1".into()]),
        None,
    )
    .await;
    let url = format!("http://127.0.0.1:{}/mcp", server.port());
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!("transport: http\nurl: {url}\napproval_policy: auto\n"),
    );
    let h = harness_with(
        Recorder::allow(),
        trusting(StaticResolver::new(), &["127.0.0.0/8"]),
    )
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    catalog
        .call("web__echo", json!({"message": "warm"}))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    for _ in 0..25 {
        let r = catalog
            .call("web__echo", json!({"message": "x"}))
            .await
            .unwrap();
        assert!(!r.is_error);
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_millis(500),
        "25 calls took {took:?}"
    );
    h.finish().await;
}

#[tokio::test]
async fn https_connects_to_the_pinned_address_with_the_name_in_sni() {
    let pki = pki(&["mcp.test"]);
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Mcp(vec!["mcp.test".into()]),
        Some(pki.server.clone()),
    )
    .await;
    let resolver = StaticResolver::new();
    resolver.set("mcp.test", [loopback()]);
    let core = Core::new().grant_servers(&["tls"]).server(
        "tls",
        &format!(
            "transport: streamable_http\nurl: https://mcp.test:{}/mcp\napproval_policy: auto\n",
            server.port()
        ),
    );
    let ca = pki.ca_der.clone();
    let h = harness_with(Recorder::allow(), move |c| {
        let mut c = trusting(resolver, &["127.0.0.0/8"])(c);
        c.extra_roots = vec![ca];
        c
    })
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    let r = catalog
        .call("tls__echo", json!({"message": "over tls"}))
        .await
        .unwrap();
    assert_eq!(
        r.view(demiurge_mcp::redact::View::Operator).content,
        "over tls"
    );
    assert!(server.sni.lock().unwrap().iter().all(|n| n == "mcp.test"));
    assert!(!server.sni.lock().unwrap().is_empty());
    h.finish().await;
}

#[tokio::test]
async fn an_untrusted_certificate_fails_the_handshake() {
    let pki = pki(&["mcp.test"]);
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Mcp(vec!["mcp.test".into()]),
        Some(pki.server.clone()),
    )
    .await;
    let resolver = StaticResolver::new();
    resolver.set("mcp.test", [loopback()]);
    let core = Core::new().grant_servers(&["tls"]).server(
        "tls",
        &format!("transport: streamable_http\nurl: https://mcp.test:{}/mcp\nconnect_timeout_seconds: 5\n", server.port()),
    );
    let h = harness_with(Recorder::allow(), trusting(resolver, &["127.0.0.0/8"])).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let d = &catalog.diagnostics()[0];
    assert!(
        d.message.contains("TLS handshake failed")
            || d.message.contains("UnknownIssuer")
            || d.message.contains("certificate"),
        "{}",
        d.message
    );
    assert!(
        server.requests().is_empty(),
        "no HTTP request crossed an unverified TLS session"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_blocked_url_never_reaches_the_approver() {
    let core = Core::new()
        .grant_servers(&["meta", "local", "nodns"])
        .server(
            "meta",
            "transport: streamable_http\nurl: http://169.254.169.254/latest/meta-data\n",
        )
        .server(
            "local",
            "transport: streamable_http\nurl: http://127.0.0.1:9/mcp\n",
        )
        .server(
            "nodns",
            "transport: streamable_http\nurl: https://unknown.test/mcp\n",
        );
    let h = harness_with(Recorder::allow(), trusting(StaticResolver::new(), &[])).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let reason = |id: &str| {
        catalog
            .denied()
            .iter()
            .find(|d| d.server == id)
            .unwrap()
            .reason
            .clone()
    };
    assert!(reason("meta").contains("(metadata)"), "{}", reason("meta"));
    assert!(
        reason("local").contains("(loopback)"),
        "{}",
        reason("local")
    );
    assert!(
        reason("nodns").contains("(dns_error)"),
        "{}",
        reason("nodns")
    );
    // A loopback denial says how to trust the network; a metadata one offers nothing.
    assert!(
        reason("local").contains("--trust-network"),
        "{}",
        reason("local")
    );
    assert!(!reason("meta").contains("trust"), "{}", reason("meta"));
    assert!(h.approver.requests().is_empty());
    let connect = decisions(&h.sink, "connect");
    assert_eq!(connect.len(), 3);
    assert!(connect.iter().all(|d| d["allowed"] == false));
    assert!(
        !serde_json::to_string(&connect)
            .unwrap()
            .contains("meta-data"),
        "no path in the audit view"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_redirect_to_a_name_now_resolving_to_a_blocked_address_is_refused_before_connecting() {
    // The second server sits on 127.0.0.2, which the trusted network does not cover.
    let target = serve(
        "127.0.0.2:0",
        Behaviour::Canned("application/json", Bytes::from_static(b"{}")),
        None,
    )
    .await;
    let first = serve(
        "127.0.0.1:0",
        Behaviour::Redirect(307, format!("http://evil.test:{}/mcp", target.port())),
        None,
    )
    .await;
    let resolver = StaticResolver::new();
    resolver.set("good.test", [loopback()]);
    resolver.set("evil.test", ["127.0.0.2".parse().unwrap()]);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let net = NetContext::new(
        UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]),
        Arc::new(resolver),
        &[],
    )
    .unwrap();
    let client = PinnedClient::new(
        Arc::new(net),
        vec![],
        Arc::new(move |d| record.lock().unwrap().push(d.clone())),
    );
    let url = format!("http://good.test:{}/mcp", first.port());
    let err = client
        .send(
            http::Method::POST,
            &url,
            http::HeaderMap::new(),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
    assert_eq!(
        target.accepted(),
        0,
        "no socket was opened to the blocked address"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one decision per hop, in order");
    assert!(seen[0].allowed && seen[0].hostname == "good.test");
    assert!(
        !seen[1].allowed && seen[1].hostname == "evil.test",
        "the last entry is the final attempted target"
    );
}

#[tokio::test]
async fn cross_origin_redirects_drop_credentials_and_declared_headers() {
    let second = serve(
        "127.0.0.1:0",
        Behaviour::Canned("application/json", Bytes::from_static(b"{}")),
        None,
    )
    .await;
    let first = serve(
        "127.0.0.1:0",
        Behaviour::Redirect(307, format!("http://127.0.0.1:{}/next", second.port())),
        None,
    )
    .await;
    let declared = vec![http::HeaderName::from_static("x-api-key")];
    let client = loopback_client(declared, Arc::new(|_| {}));
    let mut headers = http::HeaderMap::new();
    headers.insert("authorization", "Bearer tok".parse().unwrap());
    headers.insert("cookie", "sid=1".parse().unwrap());
    headers.insert("x-api-key", "k".parse().unwrap());
    headers.insert("x-other", "kept".parse().unwrap());
    headers.insert("mcp-session-id", "session-secret".parse().unwrap());
    headers.insert("last-event-id", "7".parse().unwrap());
    let url = format!("http://127.0.0.1:{}/start", first.port());
    let resp = client
        .send(http::Method::POST, &url, headers, Bytes::from_static(b"{}"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let a = &first.requests()[0].headers;
    assert!(
        a.contains_key("authorization") && a.contains_key("cookie") && a.contains_key("x-api-key")
    );
    let b = &second.requests()[0].headers;
    assert!(a.contains_key("mcp-session-id"));
    assert!(
        !b.contains_key("authorization")
            && !b.contains_key("cookie")
            && !b.contains_key("x-api-key")
            && !b.contains_key("mcp-session-id")
            && !b.contains_key("last-event-id"),
        "{b:?}"
    );
    assert_eq!(b["x-other"], "kept");
    assert_eq!(second.requests()[0].method, "POST", "307 keeps the method");
}

#[tokio::test]
async fn redirect_loops_stop_after_ten_hops() {
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Redirect(302, "/again".into()),
        None,
    )
    .await;
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c2 = Arc::clone(&count);
    let client = loopback_client(
        vec![],
        Arc::new(move |_| {
            c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
    );
    let err = client
        .send(
            http::Method::GET,
            &format!("http://127.0.0.1:{}/", server.port()),
            http::HeaderMap::new(),
            Bytes::new(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("redirects"), "{err}");
    assert_eq!(
        count.load(std::sync::atomic::Ordering::SeqCst),
        11,
        "the first request and ten hops, each checked"
    );
}

#[tokio::test]
async fn dns_rebinding_between_two_requests_of_one_session_is_refused() {
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Mcp(vec!["rebind.test".into()]),
        None,
    )
    .await;
    let resolver = StaticResolver::new();
    resolver.set("rebind.test", [loopback()]);
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!("transport: streamable_http\nurl: http://rebind.test:{}/mcp\napproval_policy: auto\ntimeout_seconds: 5\n", server.port()),
    );
    let h = harness_with(
        Recorder::allow(),
        trusting(resolver.clone(), &["127.0.0.1/32"]),
    )
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog
            .call("web__echo", json!({"message": "first"}))
            .await
            .is_ok()
    );
    let before = server.requests().len();
    // The name now points somewhere the policy forbids: the next request must not go out,
    // not even on the pooled connection to the old address.
    resolver.set("rebind.test", ["169.254.169.254".parse().unwrap()]);
    let outcome = catalog
        .call("web__echo", json!({"message": "second"}))
        .await;
    match outcome {
        Ok(r) => assert!(
            r.is_error,
            "{:?}",
            r.view(demiurge_mcp::redact::View::Operator)
        ),
        Err(e) => assert!(matches!(e, CallError::Stale { .. }), "{e}"),
    }
    assert_eq!(
        server.requests().len(),
        before,
        "nothing reached the server after the rebinding"
    );
    let last = decisions(&h.sink, "request").last().cloned().unwrap();
    assert_eq!(last["allowed"], false);
    assert_eq!(last["reason"], "metadata");
    h.finish().await;
}

#[tokio::test]
async fn oversized_responses_are_refused_at_the_limit() {
    use rmcp::transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpResponseLimits,
    };
    let big = Bytes::from(vec![b' '; 64 * 1024]);
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Canned("application/json", big),
        None,
    )
    .await;
    let client = loopback_client(vec![], Arc::new(|_| {}));
    let message: rmcp::model::ClientJsonRpcMessage =
        serde_json::from_value(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
    let mut limits = StreamableHttpResponseLimits::default();
    limits.max_json_response_size = 1024;
    let url: Arc<str> = format!("http://127.0.0.1:{}/mcp", server.port()).into();
    let err = client
        .post_message_with_response_limits(url, message, None, None, Default::default(), limits)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exceeded 1024 bytes"), "{err}");
}

#[tokio::test]
async fn an_oversized_sse_event_is_refused() {
    use futures::StreamExt;
    use rmcp::transport::streamable_http_client::StreamableHttpClient;
    let mut body = b"data: ".to_vec();
    body.extend(std::iter::repeat_n(b'x', 10_000));
    body.extend(b"\n\n");
    let server = serve(
        "127.0.0.1:0",
        Behaviour::Canned("text/event-stream", Bytes::from(body)),
        None,
    )
    .await;
    let client = loopback_client(vec![], Arc::new(|_| {}));
    let url: Arc<str> = format!("http://127.0.0.1:{}/mcp", server.port()).into();
    let mut stream = client
        .get_stream_with_max_sse_event_size(url, None, None, None, Default::default(), 1024)
        .await
        .unwrap();
    let first = stream.next().await.unwrap();
    assert!(first.is_err(), "a 10 kB event must not pass a 1 kB limit");
}

/// A server restarted under a session: with 404 the client starts a new session and the
/// call goes through; with 400 (not what the specification says, but seen) the call
/// fails at once and the server is marked failed, never a silent wait for the timeout.
#[tokio::test]
async fn a_restarted_server_is_a_new_session_or_a_failure_never_a_hang() {
    for status in [404u16, 400] {
        let mut server = serve("127.0.0.1:0", Behaviour::McpForgetting(status), None).await;
        let url = format!("http://127.0.0.1:{}/mcp", server.port());
        let core = Core::new().grant_servers(&["web"]).server(
            "web",
            // Sessions, which a restart forgets, are of the 2025-11-25 era.
            &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\ntimeout_seconds: 60\nprotocol: 2025-11-25\n"),
        );
        let h = harness_with(Recorder::allow(), |c| {
            let mut c = trusting(StaticResolver::new(), &["127.0.0.0/8"])(c);
            c.failure_ttl = std::time::Duration::from_millis(200);
            c
        })
        .await;
        let (session, catalog) = common::open(&h.runtime, core.spec()).await;
        let first = catalog
            .call("web__echo", json!({"message": "one"}))
            .await
            .unwrap();
        assert_eq!(
            first.view(demiurge_mcp::redact::View::Operator).content,
            "one"
        );
        server.restart().await;
        let started = std::time::Instant::now();
        let again = catalog.call("web__echo", json!({"message": "two"})).await;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{status}: the call waited {:?} after the restart",
            started.elapsed()
        );
        match status {
            404 => {
                let again = again.unwrap();
                assert_eq!(
                    again.view(demiurge_mcp::redact::View::Operator).content,
                    "two",
                    "{status}: {:?}",
                    again.views()
                );
            }
            _ => {
                let failed = match &again {
                    Ok(r) => r.is_error,
                    Err(CallError::Stale { .. }) => true,
                    Err(_) => false,
                };
                assert!(failed, "{status}: {again:?}");
                // The server is failed at once: status says so, the next turns say so,
                // and once the failure expires a new session is made.
                let mut state = Vec::new();
                common::eventually_async(std::time::Duration::from_secs(2), async || {
                    state = session.servers().await;
                    state.iter().any(|s| {
                        !matches!(s.state, demiurge_mcp::actors::ServerState::Connected { .. })
                    })
                })
                .await;
                assert!(
                    state.iter().all(|s| !matches!(
                        s.state,
                        demiurge_mcp::actors::ServerState::Connected { .. }
                    )),
                    "{status}: still connected: {state:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                let next = session.prepare_turn().await.unwrap();
                let r = next
                    .call("web__echo", json!({"message": "three"}))
                    .await
                    .unwrap();
                assert_eq!(
                    r.view(demiurge_mcp::redact::View::Operator).content,
                    "three",
                    "{status}"
                );
            }
        }
        h.finish().await;
    }
}

/// A session id belongs to the origin that issued it: a server that redirects every
/// request to another origin never receives the session id that origin handed out
/// (307 and 308 alike), whether or not the connection then works.
#[tokio::test]
async fn a_redirect_targets_session_id_never_reaches_the_original_origin() {
    for status in [307, 308] {
        let target = serve("127.0.0.1:0", Behaviour::Mcp(Vec::new()), None).await;
        let front = serve(
            "127.0.0.1:0",
            Behaviour::Redirect(status, format!("http://127.0.0.1:{}/mcp", target.port())),
            None,
        )
        .await;
        let url = format!("http://127.0.0.1:{}/mcp", front.port());
        let core = Core::new().grant_servers(&["web"]).server(
            "web",
            &format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\n"),
        );
        let h = harness_with(
            Recorder::allow(),
            trusting(StaticResolver::new(), &["127.0.0.0/8"]),
        )
        .await;
        let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
        if let Ok(catalog) = session.prepare_turn().await
            && catalog.get("web__echo").is_some()
        {
            let _ = catalog.call("web__echo", json!({"message": "hi"})).await;
        }
        let issued = target.requests().iter().any(|r| r.method == "POST");
        assert!(issued, "the redirect target was never reached");
        for request in front.requests() {
            assert!(
                !request.headers.contains_key("mcp-session-id"),
                "{status}: the original origin got the target's session id"
            );
        }
        h.finish().await;
    }
}
