//! OAuth against a local authorization server on loopback (`tests/common/oauth.rs`):
//! the flow, tokens that never leak, persistence across restarts, refresh, the client
//! credentials grant, and an authorization server the URL policy blocks.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::oauth::{AuthOptions, CANARY, Follow, serve};
use common::{Core, Harness, Recorder, harness_with};
use demiurge_mcp::net::{StaticResolver, UrlPolicy};
use serde_json::json;

fn protected(url: &str, extra: &str) -> String {
    format!("transport: streamable_http\nurl: {url}\napproval_policy: auto\n{extra}")
}

async fn runtime_at(home: &std::path::Path, follow: &Follow) -> Harness {
    runtime_with_env(home, follow, &[]).await
}

/// A runtime on `home` trusting loopback, authorizing through `follow`, with these host
/// variables.
async fn runtime_with_env(
    home: &std::path::Path,
    follow: &Follow,
    env: &[(&str, &str)],
) -> Harness {
    let follow = follow.clone();
    let home = home.to_path_buf();
    let env = common::host_env(env);
    harness_with(Recorder::allow(), move |mut c| {
        c.home = home;
        c.url_policy = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
        c.resolver = Arc::new(StaticResolver::new());
        c.authorizer = Arc::new(follow);
        c.with_host_env(env)
    })
    .await
}

/// A fresh runtime (its own home) with server `id` at `url` declared with `extra`, and
/// its first turn.
struct FirstTurn {
    h: Harness,
    follow: Follow,
    catalog: demiurge_mcp::TurnCatalog,
    _home: tempfile::TempDir,
    core: Core,
}

async fn first_turn(url: &str, id: &str, extra: &str, env: &[(&str, &str)]) -> FirstTurn {
    let core = Core::new()
        .grant_servers(&[id])
        .server(id, &protected(url, extra));
    let home = tempfile::tempdir().unwrap();
    let follow = Follow::new();
    let h = runtime_with_env(home.path(), &follow, env).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    FirstTurn {
        h,
        follow,
        catalog,
        _home: home,
        core,
    }
}

/// Everything a host or operator could see: events, event logs, stderr log,
/// diagnostics, results. No token, code or refresh token may appear in any.
fn assert_no_canary(h: &Harness, extra: &[String]) {
    for event in h.sink.events() {
        let text = serde_json::to_string(&event).unwrap();
        assert!(!text.contains(CANARY), "an event carries a token: {text}");
    }
    for entry in walk(h.runtime.home()) {
        if entry.components().any(|c| c.as_os_str() == "oauth") {
            continue;
        }
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        assert!(
            !text.contains(CANARY),
            "{} carries a token",
            entry.display()
        );
    }
    for text in extra {
        assert!(!text.contains(CANARY), "an output carries a token: {text}");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test]
async fn the_flow_runs_once_tokens_never_leak_and_persist_across_restarts() {
    let server = serve(AuthOptions::default()).await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let follow = Follow::new();
    let h = runtime_at(home.path(), &follow).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    assert_eq!(follow.asked.load(Ordering::SeqCst), 1);
    // The server echoes what it is sent: a token in the arguments is hidden too.
    let echoed = catalog
        .call("docs__echo", json!({"message": format!("at-0-{CANARY}")}))
        .await
        .unwrap();
    let mut outputs = vec![serde_json::to_string(&echoed).unwrap()];
    outputs.extend(catalog.diagnostics().iter().map(|d| d.message.clone()));
    // Every OAuth request was decided by the URL policy, with its step named.
    let phases: Vec<String> = h
        .sink
        .of_type("mcp.url_decision")
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["phase"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for phase in [
        "oauth_resource_metadata",
        "oauth_server_metadata",
        "oauth_registration",
        "oauth_token",
    ] {
        assert!(
            phases.iter().any(|p| p == phase),
            "no {phase} decision: {phases:?}"
        );
    }
    h.runtime.flush_events().await;
    assert_no_canary(&h, &outputs);
    // Stored 0600 in the runtime home.
    let stored: Vec<_> = walk(&home.path().join("oauth"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&stored[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    h.runtime.shutdown().await;

    // A new runtime on the same home connects with the stored token: nobody is asked.
    let follow_again = Follow::new();
    let h2 = runtime_at(home.path(), &follow_again).await;
    let _catalog = common::clean_turn(&h2, &core).await;
    assert_eq!(
        follow_again.asked.load(Ordering::SeqCst),
        0,
        "a restart asked again"
    );
    let authorizations = server
        .seen
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /authorize"))
        .count();
    assert_eq!(authorizations, 1);
    h2.finish().await;
}

#[tokio::test]
async fn a_refused_token_is_refreshed_without_asking() {
    let server = serve(AuthOptions::default()).await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let follow = Follow::new();
    let h = runtime_at(home.path(), &follow).await;
    let catalog = common::clean_turn(&h, &core).await;
    server.seen.revoke_all();
    let echoed = catalog
        .call("docs__echo", json!({"message": "after revocation"}))
        .await
        .unwrap();
    assert_eq!(
        echoed.view(demiurge_mcp::redact::View::Operator).content,
        "after revocation",
        "{:?}",
        echoed.view(demiurge_mcp::redact::View::Operator)
    );
    assert!(
        server.seen.grants().iter().any(|g| g == "refresh_token"),
        "{:?}",
        server.seen.grants()
    );
    assert_eq!(
        follow.asked.load(Ordering::SeqCst),
        1,
        "a refresh asks nobody"
    );
    // The refreshed token is a secret of the connection too: echoed, it is hidden.
    let issued: Vec<String> = server.seen.valid.lock().unwrap().iter().cloned().collect();
    assert_eq!(issued.len(), 1, "{issued:?}");
    let echoed = catalog
        .call(
            "docs__echo",
            json!({"message": format!("new token {}", issued[0])}),
        )
        .await
        .unwrap();
    let shown = serde_json::to_string(&echoed).unwrap();
    assert!(
        !shown.contains(CANARY),
        "a refreshed token was shown: {shown}"
    );
    h.finish().await;
}

#[tokio::test]
async fn the_client_credentials_grant_needs_no_user() {
    let server = serve(AuthOptions::default()).await;
    let FirstTurn {
        h,
        follow,
        catalog,
        _home,
        ..
    } = first_turn(
        &server.url(),
        "svc",
        "oauth:\n  client_id: service-7\n  client_secret: \"${SVC_SECRET}\"\n  grant: client_credentials\n",
        &[("SVC_SECRET", "cs-canary7f3e91ab-secret")],
    )
    .await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    assert_eq!(server.seen.grants(), ["client_credentials"]);
    assert_eq!(follow.asked.load(Ordering::SeqCst), 0);
    let echoed = catalog
        .call("svc__echo", json!({"message": "cs-canary7f3e91ab-secret"}))
        .await
        .unwrap();
    h.runtime.flush_events().await;
    assert_no_canary(&h, &[serde_json::to_string(&echoed).unwrap()]);
    h.finish().await;
}

#[tokio::test]
async fn an_authorization_server_the_policy_blocks_is_never_contacted() {
    // The resource metadata names authorization servers on blocked addresses: cloud
    // metadata, a private network, a loopback port that is not trusted by name.
    for blocked in [
        "http://169.254.169.254",
        "http://10.1.2.3",
        "http://metadata.google.internal",
    ] {
        let server = serve(AuthOptions {
            authorization_server: Some(blocked.into()),
            ..AuthOptions::default()
        })
        .await;
        let core = Core::new().grant_servers(&["docs"]).server(
            "docs",
            &protected(&server.url(), "connect_timeout_seconds: 10\n"),
        );
        let home = tempfile::tempdir().unwrap();
        let follow = Follow::new();
        let h = runtime_at(home.path(), &follow).await;
        let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
        assert_eq!(
            catalog.diagnostics().len(),
            1,
            "{blocked}: connected anyway"
        );
        assert_eq!(
            follow.asked.load(Ordering::SeqCst),
            0,
            "{blocked}: a user was asked"
        );
        // Refused before any request: by the URL policy (a blocked decision), or by
        // rmcp's own metadata host check first; never an allowed decision for it.
        let decisions: Vec<serde_json::Value> = h
            .sink
            .of_type("mcp.url_decision")
            .iter()
            .map(|e| serde_json::to_value(e).unwrap()["decision"].clone())
            .collect();
        let host = blocked.trim_start_matches("http://");
        let allowed_there = decisions.iter().any(|d| {
            d["decision"] == "allowed" && d["target"].as_str().unwrap_or("").contains(host)
        });
        assert!(!allowed_there, "{blocked}: {decisions:?}");
        eprintln!("{blocked}: {}", catalog.diagnostics()[0].message);
        assert!(
            !server
                .seen
                .requests()
                .iter()
                .any(|r| r.contains("authorize")),
            "{blocked}: {:?}",
            server.seen.requests()
        );
        h.finish().await;
    }
    // And a server whose challenge cannot be answered fails with a message naming the
    // command that authorizes, once nobody can be asked.
    let server = serve(AuthOptions::default()).await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let h = harness_with(Recorder::allow(), |mut c| {
        c.url_policy = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
        c.resolver = Arc::new(StaticResolver::new());
        c
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let message = &catalog.diagnostics()[0].message;
    assert!(message.contains("demiurge auth login docs"), "{message}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.finish().await;
}

/// `demiurge auth login docs` with `core` and `home`: prints the URL, this helper
/// plays the browser. Answers the status the CLI's callback page gave (after the
/// exchange), the login's output and what it printed on stderr.
async fn cli_login(
    core: &Core,
    home: &std::path::Path,
) -> (u16, std::process::Output, Vec<String>) {
    use tokio::io::AsyncBufReadExt;
    let mut login = cli_command(core, home, &["auth", "login", "docs"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(login.stderr.take().unwrap()).lines();
    let mut url = None;
    let mut seen = Vec::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await
    {
        seen.push(line.clone());
        if line.trim_start().starts_with("http://127.0.0.1") && line.contains("/authorize") {
            url = Some(line.trim().to_string());
            break;
        }
    }
    let url = url.unwrap_or_else(|| panic!("no authorization URL printed: {seen:?}"));
    // The browser: the authorization server redirects to the CLI's loopback listener.
    let (_, redirect) = common::oauth::browse(&url).await.expect("no redirect");
    assert!(redirect.starts_with("http://127.0.0.1:"), "{redirect}");
    let (status, _) = common::oauth::browse(&redirect)
        .await
        .expect("the CLI did not answer");
    let out = tokio::time::timeout(Duration::from_secs(30), login.wait_with_output())
        .await
        .expect("auth login did not finish")
        .unwrap();
    (status, out, seen)
}

fn cli_command(core: &Core, home: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(common::exe());
    c.args(args)
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(["--trust-network", "127.0.0.0/8", "--yes"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    c
}

/// The browser's callback page tells the truth: it answers after the exchange, and a
/// failed exchange is a failure page.
#[tokio::test]
async fn the_cli_callback_page_answers_with_the_exchanges_outcome() {
    let server = serve(AuthOptions {
        unreadable_token_answer: true,
        ..AuthOptions::default()
    })
    .await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let (status, out, _) = cli_login(&core, home.path()).await;
    assert_eq!(status, 400, "the page said it worked");
    assert!(!out.status.success());
}

/// The CLI end to end: `auth login` prints the URL and waits on its loopback redirect
/// (this test plays the browser), `auth status` shows the stored tokens without them,
/// `tools` then connects with no terminal and nobody asked, `auth logout` forgets them.
#[tokio::test]
async fn the_cli_logs_in_through_a_loopback_redirect_and_out_again() {
    let server = serve(AuthOptions::default()).await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| cli_command(&core, home.path(), args);
    let (status, out, seen) = cli_login(&core, home.path()).await;
    assert_eq!(status, 200);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {seen:?}");
    assert!(stdout.contains("authorized: docs"), "{stdout}");
    assert!(!stdout.contains(CANARY) && !seen.iter().any(|l| l.contains(CANARY)));

    let status = cli(&["auth", "status"]).output().await.unwrap();
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        status.contains("docs") && status.contains("tokens stored"),
        "{status}"
    );
    assert!(!status.contains(CANARY));
    // No terminal, no authorizer prompt: the stored tokens are enough.
    let tools = cli(&["tools"]).output().await.unwrap();
    let listed = String::from_utf8_lossy(&tools.stdout).to_string();
    assert!(
        listed.contains("docs__echo"),
        "{listed} {}",
        String::from_utf8_lossy(&tools.stderr)
    );
    let logout = cli(&["auth", "logout", "docs"]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&logout.stdout).contains("logged out: docs"));
    let status = cli(&["auth", "status"]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("not logged in"));
    // Logged out: `tools` lists the server from its last listing, to start when
    // called; with no terminal the call fails closed and names the command.
    let tools = cli(&["tools"]).output().await.unwrap();
    let listed = String::from_utf8_lossy(&tools.stdout).to_string();
    assert!(
        listed.contains("docs__echo") && listed.contains("[starts when called]"),
        "{listed}"
    );
    let call = cli(&["call", "docs__echo", "--args", "{\"message\": \"x\"}"])
        .output()
        .await
        .unwrap();
    let diagnostics = String::from_utf8_lossy(&call.stderr).to_string();
    assert!(!call.status.success());
    assert!(
        diagnostics.contains("demiurge auth login docs"),
        "{diagnostics}"
    );
}

#[tokio::test]
async fn a_pinned_issuer_refuses_any_other_authorization_server() {
    let server = serve(AuthOptions::default()).await;
    let FirstTurn {
        h,
        follow,
        catalog,
        _home,
        ..
    } = first_turn(
        &server.url(),
        "docs",
        "oauth:\n  client_id: c-1\n  client_secret: \"${DOCS_SECRET}\"\n  issuer: https://login.example.test\n",
        &[("DOCS_SECRET", "pinned-secret-value-1")],
    )
    .await;
    let message = &catalog.diagnostics()[0].message;
    assert!(
        message.contains("other than the declared oauth.issuer"),
        "{message}"
    );
    assert_nothing_sent(&follow, &server);
    h.finish().await;
}

/// Nobody was asked to authorize and `server` saw no registration or token request.
fn assert_nothing_sent(follow: &Follow, server: &common::oauth::AuthServer) {
    assert_eq!(follow.asked.load(Ordering::SeqCst), 0);
    let requests = server.seen.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/token") || r.contains("/register")),
        "{requests:?}"
    );
}

/// A P-256 key for the signed client assertion test (made for this test only).
const CLIENT_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDTsqGxAjgr7EdQI7
+YlDdC19WVmpM+IE04dDKTwxIruhRANCAARBLZ+kKvkm+lILV4pcz1Tib6A2o8NA
ehDenpvH7wY8chfBZjbH5DAZABKLPQL2xZUoPMPeOL4gUXWrS30Bz1g0
-----END PRIVATE KEY-----
";
const CLIENT_PUBLIC_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEQS2fpCr5JvpSC1eKXM9U4m+gNqPD
QHoQ3p6bx+8GPHIXwWY2x+QwGQASiz0C9sWVKDzD3ji+IFF1q0t9Ac9YNA==
-----END PUBLIC KEY-----
";

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn a_signed_client_assertion_authenticates_a_headless_service() {
    let server = serve(AuthOptions {
        auth_methods: Some(vec!["private_key_jwt".into()]),
        ..AuthOptions::default()
    })
    .await;
    let FirstTurn {
        h,
        follow,
        catalog,
        _home,
        ..
    } = first_turn(
        &server.url(),
        "svc",
        "oauth:\n  client_id: service-jwt\n  private_key: \"${SVC_KEY}\"\n  signing_algorithm: ES256\n  grant: client_credentials\n",
        &[("SVC_KEY", CLIENT_KEY)],
    )
    .await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    assert_eq!(follow.asked.load(Ordering::SeqCst), 0);
    let forms = server.seen.token_forms();
    assert_eq!(forms.len(), 1, "{forms:?}");
    let form = &forms[0];
    assert_eq!(field(form, "grant_type"), Some("client_credentials"));
    assert_eq!(
        field(form, "client_assertion_type"),
        Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
    );
    // RFC 7523: the assertion names the client; no secret, no Basic header.
    for absent in ["client_secret", "$authorization"] {
        assert_eq!(field(form, absent), None, "{absent}");
    }
    // The assertion verifies with the client's public key, for this authorization
    // server, from this client.
    let origin = format!("http://127.0.0.1:{}", server.addr.port());
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[&origin]);
    validation.set_issuer(&["service-jwt"]);
    let key = jsonwebtoken::DecodingKey::from_ec_pem(CLIENT_PUBLIC_KEY.as_bytes()).unwrap();
    let claims = jsonwebtoken::decode::<serde_json::Value>(
        field(form, "client_assertion").unwrap(),
        &key,
        &validation,
    )
    .unwrap()
    .claims;
    assert_eq!(claims["sub"], "service-jwt");
    // No line of the key comes back out, whatever the server echoes.
    let line = CLIENT_KEY.lines().nth(2).unwrap();
    let echoed = catalog
        .call("svc__echo", json!({"message": format!("key {line}")}))
        .await
        .unwrap();
    h.runtime.flush_events().await;
    let mut outputs = vec![serde_json::to_string(&echoed).unwrap()];
    outputs.extend(
        h.sink
            .events()
            .iter()
            .map(|e| serde_json::to_string(e).unwrap()),
    );
    for text in outputs {
        assert!(!text.contains(line), "a key line leaked: {text}");
    }
    h.finish().await;
}

#[tokio::test]
async fn an_issuer_on_the_servers_own_origin_is_accepted_and_any_other_refused() {
    // 2025-03-26 servers publish their authorization server metadata at their origin;
    // some name an issuer with a path there. That origin is the authorization server
    // either way; an issuer on any other origin is the mix-up RFC 8414 refuses.
    let accepted = serve(AuthOptions {
        legacy: true,
        issuer: Some("/oauth".into()),
        ..AuthOptions::default()
    })
    .await;
    let port = accepted.addr.port();
    let mut servers = vec![(accepted, true)];
    for other in [
        format!("http://127.0.0.2:{port}"),
        format!("http://localhost:{port}/oauth"),
        format!("https://127.0.0.1:{port}/oauth"),
        "http://127.0.0.1:1/oauth".to_string(),
        "https://login.example.test/".to_string(),
    ] {
        let refused = serve(AuthOptions {
            legacy: true,
            issuer: Some(other),
            ..AuthOptions::default()
        })
        .await;
        servers.push((refused, false));
    }
    for (server, ok) in servers {
        let FirstTurn {
            h,
            follow,
            catalog,
            _home,
            core,
        } = first_turn(&server.url(), "docs", "", &[]).await;
        if ok {
            assert!(
                catalog.diagnostics().is_empty(),
                "{:?}",
                catalog.diagnostics()
            );
            assert_eq!(follow.asked.load(Ordering::SeqCst), 1);
            assert!(!catalog.tools().is_empty());
            // Its token is reused after a restart, under the same discovery rules.
            h.finish().await;
            let again = Follow::new();
            let h = runtime_at(_home.path(), &again).await;
            let _catalog = common::clean_turn(&h, &core).await;
            assert_eq!(again.asked.load(Ordering::SeqCst), 0);
            h.finish().await;
            continue;
        } else {
            let message = &catalog.diagnostics()[0].message;
            assert!(message.contains("issuer mismatch"), "{message}");
            assert_nothing_sent(&follow, &server);
        }
        h.finish().await;
    }
}

#[tokio::test]
async fn a_declared_token_endpoint_auth_method_is_used_or_nothing_is_sent() {
    let cases = [
        // (offered, declared, expected Authorization scheme, secret in the form)
        (None, "client_secret_basic", Some("Basic"), false),
        (None, "client_secret_post", None, true),
        (
            Some(vec!["client_secret_basic"]),
            "client_secret_post",
            None,
            false,
        ),
    ];
    for (offered, declared, scheme, in_form) in cases {
        let refused = offered.is_some();
        let server = serve(AuthOptions {
            auth_methods: offered.map(|m| m.into_iter().map(String::from).collect()),
            ..AuthOptions::default()
        })
        .await;
        let FirstTurn {
            h, catalog, _home, ..
        } = first_turn(
            &server.url(),
            "svc",
            &format!("oauth:\n  client_id: service-7\n  client_secret: \"${{SVC_SECRET}}\"\n  grant: client_credentials\n  token_endpoint_auth_method: {declared}\n"),
            &[("SVC_SECRET", "method-secret-1")],
        )
        .await;
        let forms = server.seen.token_forms();
        if refused {
            let message = &catalog.diagnostics()[0].message;
            assert!(message.contains("token_endpoint_auth_method"), "{message}");
            assert!(forms.is_empty(), "{forms:?}");
        } else {
            assert!(
                catalog.diagnostics().is_empty(),
                "{declared}: {:?}",
                catalog.diagnostics()
            );
            assert_eq!(forms.len(), 1);
            assert_eq!(field(&forms[0], "$authorization"), scheme, "{declared}");
            assert_eq!(
                field(&forms[0], "client_secret").is_some(),
                in_form,
                "{declared}"
            );
        }
        h.finish().await;
    }
}

/// The prompt names the issuer whose metadata was fetched; each authorization server
/// gets a redirect URI of its own (its path bound to the issuer), and the flow's
/// outcome is reported once the code was exchanged.
#[tokio::test]
async fn the_prompt_names_the_issuer_and_each_issuer_has_its_own_redirect_uri() {
    let (a, b) = (
        serve(AuthOptions::default()).await,
        serve(AuthOptions::default()).await,
    );
    let core = Core::new()
        .grant_servers(&["a", "b"])
        .server("a", &protected(&a.url(), ""))
        .server("b", &protected(&b.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let follow = Follow::new();
    let h = runtime_at(home.path(), &follow).await;
    let _catalog = common::clean_turn(&h, &core).await;
    let prompts = follow.prompts.lock().unwrap().clone();
    assert_eq!(prompts.len(), 2);
    let mut paths = Vec::new();
    for prompt in &prompts {
        let server = if prompt.server == "a" { &a } else { &b };
        let issuer = format!("http://127.0.0.1:{}", server.addr.port());
        assert_eq!(prompt.issuer, issuer);
        assert!(
            prompt
                .render()
                .contains(&format!("from the issuer {issuer}")),
            "{}",
            prompt.render()
        );
        let path = url::Url::parse(&prompt.redirect_uri)
            .unwrap()
            .path()
            .to_string();
        let tag = path.strip_prefix("/callback/").unwrap_or_default();
        assert!(
            tag.len() == 12 && tag.chars().all(|c| c.is_ascii_hexdigit()),
            "{path}"
        );
        paths.push(path);
    }
    assert_ne!(paths[0], paths[1], "two issuers share a redirect URI");
    assert_eq!(
        *follow.outcomes.lock().unwrap(),
        [demiurge_mcp::authority::AuthorizationOutcome::Authorized; 2]
    );
    h.finish().await;
}

/// An authorization endpoint that is not the issuer's own https page (another scheme,
/// plain http off loopback, another origin without `oauth.issuer`, another local
/// service, credentials in it) is refused before registration, and nothing is opened.
/// (`PORT` is the server's own port.)
#[tokio::test]
async fn authorization_endpoints_other_than_the_issuers_own_page_are_refused() {
    for endpoint in [
        "javascript:alert(document.cookie)",
        "file:///etc/passwd",
        "data:text/html,<script>x</script>",
        "http://127.0.0.2:PORT/authorize",
        "http://localhost:PORT/authorize",
        "https://127.0.0.1:PORT/authorize",
        "http://127.0.0.1:1/authorize",
        "http://login.example.test/authorize",
        "https://login.example.test/authorize",
        "http://169.254.169.254/authorize",
        "http://user:pw@127.0.0.1:PORT/authorize",
        "https://localhost.localdomain:631/admin",
        "http://metadata.google.internal/authorize",
        "http://10.0.0.5/authorize",
    ] {
        let server = serve(AuthOptions {
            authorization_endpoint: Some(endpoint.to_string()),
            ..AuthOptions::default()
        })
        .await;
        let FirstTurn {
            h,
            follow,
            catalog,
            _home,
            ..
        } = first_turn(&server.url(), "docs", "", &[]).await;
        let message = &catalog.diagnostics()[0].message;
        assert!(
            message.contains("authorization endpoint"),
            "{endpoint}: {message}"
        );
        assert_nothing_sent(&follow, &server);
        h.finish().await;
    }
}

/// Another origin's authorization page is allowed when the declaration names the
/// issuer in `oauth.issuer`: the flow gets as far as asking the user.
#[tokio::test]
async fn another_origins_authorization_page_is_allowed_for_a_declared_issuer() {
    let server = serve(AuthOptions {
        authorization_endpoint: Some("https://login.example.test/authorize".into()),
        ..AuthOptions::default()
    })
    .await;
    let issuer = format!("http://127.0.0.1:{}", server.addr.port());
    let FirstTurn {
        h,
        follow,
        catalog,
        _home,
        ..
    } = first_turn(
        &server.url(),
        "docs",
        &format!("oauth:\n  issuer: {issuer}\n"),
        &[],
    )
    .await;
    assert_eq!(
        follow.asked.load(Ordering::SeqCst),
        1,
        "{:?}",
        catalog.diagnostics()
    );
    let prompt = follow.prompts.lock().unwrap()[0].clone();
    assert_eq!(prompt.authorization_server, "https://login.example.test");
    assert!(
        prompt
            .render()
            .contains("its authorization page is at https://login.example.test"),
        "{}",
        prompt.render()
    );
    h.finish().await;
}

/// A redirect that comes back to another flow's redirect URI (a code another
/// authorization server issued) is never sent to this flow's token endpoint.
#[tokio::test]
async fn a_code_for_another_flows_redirect_uri_is_never_exchanged() {
    let server = serve(AuthOptions::default()).await;
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &protected(&server.url(), ""));
    let home = tempfile::tempdir().unwrap();
    let mut follow = Follow::new();
    follow.tamper = Some(|location| {
        let mut url = url::Url::parse(&location).unwrap();
        url.set_path("/callback/000000000000");
        url.to_string()
    });
    let h = runtime_at(home.path(), &follow).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let message = &catalog.diagnostics()[0].message;
    assert!(message.contains("another redirect URI"), "{message}");
    assert!(!server.seen.requests().iter().any(|r| r.contains("/token")));
    assert_eq!(
        *follow.outcomes.lock().unwrap(),
        [demiurge_mcp::authority::AuthorizationOutcome::Failed]
    );
    h.finish().await;
}

/// What an authorization server issues or echoes in a flow (a registered client
/// secret, the code, an answer that is not JSON and repeats them) is a secret of the
/// connection from the moment it arrives: no diagnostic or event quotes it.
#[tokio::test]
async fn an_unreadable_token_answer_is_not_quoted_and_flow_values_stay_secret() {
    let server = serve(AuthOptions {
        unreadable_token_answer: true,
        ..AuthOptions::default()
    })
    .await;
    let FirstTurn {
        h,
        follow,
        catalog,
        _home,
        ..
    } = first_turn(&server.url(), "docs", "", &[]).await;
    let message = &catalog.diagnostics()[0].message;
    assert!(message.contains("token exchange failed"), "{message}");
    assert!(
        !message.contains(CANARY) && !message.contains("html"),
        "{message}"
    );
    assert_eq!(
        *follow.outcomes.lock().unwrap(),
        [demiurge_mcp::authority::AuthorizationOutcome::Failed]
    );
    assert_no_canary(&h, &[format!("{:?}", catalog.diagnostics())]);
    h.finish().await;
}

#[tokio::test]
async fn the_authorization_responses_issuer_must_be_the_one_whose_metadata_was_used() {
    // RFC 9207: an `iss` in the authorization response is compared with the issuer the
    // flow discovered, and one that advertises `iss` must send it. A mix-up (a response
    // from another authorization server) is refused before its code is exchanged.
    let (missing, other) = ("carries no issuer", "names another issuer (`iss`)");
    for (iss, supported, refused) in [
        (Some("ISSUER"), true, None),
        (Some("ISSUER"), false, None),
        (None, false, None),
        (None, true, Some(missing)),
        (Some("http://127.0.0.9:1"), false, Some(other)),
        (Some("ISSUER/other"), true, Some(other)),
        (Some(""), true, Some(other)),
    ] {
        let server = serve(AuthOptions {
            response_iss: iss.map(str::to_string),
            iss_supported: supported,
            ..AuthOptions::default()
        })
        .await;
        let FirstTurn {
            h,
            follow,
            catalog,
            _home,
            ..
        } = first_turn(&server.url(), "docs", "", &[]).await;
        let case = format!("iss {iss:?}, advertised {supported}");
        assert_eq!(follow.asked.load(Ordering::SeqCst), 1, "{case}");
        let exchanged = server
            .seen
            .grants()
            .contains(&"authorization_code".to_string());
        match refused {
            None => {
                assert!(
                    catalog.diagnostics().is_empty(),
                    "{case}: {:?}",
                    catalog.diagnostics()
                );
                assert!(exchanged, "{case}");
            }
            Some(why) => {
                assert!(catalog.tools().is_empty(), "{case}");
                assert!(!exchanged, "{case}: the code was exchanged");
                let message = &catalog.diagnostics()[0].message;
                assert!(message.contains(why), "{case}: {message}");
                assert!(!message.contains("127.0.0.9"), "{case}: {message}");
            }
        }
        assert_no_canary(&h, &[]);
        h.finish().await;
    }
}
