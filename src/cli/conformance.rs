//! `demiurge conformance-client URL` (hidden): the runtime as the client under test of
//! the public MCP conformance package. It declares one streamable HTTP server at URL
//! in a temporary core, trusts loopback and answers `localhost` itself (the harness
//! serves there; no resolver is asked), and acts
//! out the scenario named by `MCP_CONFORMANCE_SCENARIO`: every scenario initializes and
//! lists tools; `tools_call` and `sse-retry` also call every listed tool with arguments
//! made from its schema. Exit 0 when every step succeeded.

use std::sync::Arc;

use anyhow::Context;
use demiurge_mcp::events::{EventKind, MemorySink};
use demiurge_mcp::net::UrlPolicy;
use demiurge_mcp::{ApprovalAnswer, FixedApprover, Runtime, SessionSpec};
use serde_json::{Map, Value, json};

use super::Cli;

pub(crate) async fn run(cli: &Cli, url: &str) -> anyhow::Result<u8> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let core = scratch.path().join("core");
    std::fs::create_dir_all(core.join("agent/mcp"))?;
    std::fs::write(
        core.join("agent.yaml"),
        "capabilities:\n  defaults:\n    mcp.connect:server: {scope: core}\n    mcp.call:server: {scope: core}\n",
    )?;
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or_default();
    let (oauth, secrets) = oauth_section(&scenario, &context);
    std::fs::write(
        core.join("agent/mcp/server.yaml"),
        format!(
            "transport: streamable_http\nurl: {}\nprotocol: auto\napproval_policy: auto\nconnect_timeout_seconds: 20\ntimeout_seconds: 20\n{oauth}",
            serde_json::to_string(url)?
        ),
    )?;
    let events = MemorySink::new();
    let mut config = cli.config(Arc::new(events.clone()));
    config.home = scratch.path().join("home");
    config.approver = Arc::new(FixedApprover(ApprovalAnswer::AllowSession));
    config.host_env.0.extend(secrets);
    let mut trusted: Vec<ipnet::IpNet> = vec!["127.0.0.0/8".parse()?, "::1/128".parse()?];
    trusted.extend(cli.trust_network.iter().copied());
    config.url_policy = UrlPolicy::with_trusted(trusted);
    // The harness serves on `localhost`; answer it here rather than asking any resolver.
    let resolver = demiurge_mcp::net::StaticResolver::new();
    resolver.set("localhost", ["127.0.0.1".parse()?, "::1".parse()?]);
    config.resolver = Arc::new(resolver);
    config.authorizer = Arc::new(Headless::new(&config)?);
    // Elicitations are accepted as offered: every field its default (SEP-1034).
    config.elicitor = Arc::new(AcceptDefaults);
    let runtime = Runtime::start(config).await?;
    super::register(&runtime);
    let outcome = act(&runtime, &core, &scenario, &context, &events).await;
    runtime.shutdown().await;
    outcome
}

/// Requests a connection makes before its first call: initialize, the initialized
/// notification, `tools/list`, and the GET that opens the standalone SSE stream.
const REQUESTS_BEFORE_CALLS: usize = 4;

async fn act(
    runtime: &Runtime,
    core: &std::path::Path,
    scenario: &str,
    context: &Value,
    events: &MemorySink,
) -> anyhow::Result<u8> {
    let (session, _) = runtime.start_session(SessionSpec::new(core)).await?;
    let turn = session.prepare_turn().await?;
    if let Some(d) = turn.diagnostics().first() {
        eprintln!("server failed: {}", super::t(&d.message));
        return Ok(1);
    }
    if let Some(d) = turn.denied().first() {
        eprintln!("server denied: {}", super::t(&d.reason));
        return Ok(1);
    }
    eprintln!("scenario {scenario}: {} tools", turn.tools().len());
    if scenario == "initialize" {
        return Ok(0);
    }
    // rmcp opens the standalone SSE stream (a GET) on its own task after initialize. The
    // sse-retry harness answers a pending call on whichever GET comes next, so a GET
    // delayed past the first call (a loaded machine) would be taken for the reconnection
    // it is testing. Call only once that GET was decided (URL policy) and sent.
    let started = std::time::Instant::now();
    while events
        .of_type("mcp.url_decision")
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::UrlDecision {
                    phase: demiurge_mcp::events::UrlPhase::Request,
                    ..
                }
            )
        })
        .count()
        < REQUESTS_BEFORE_CALLS
        && started.elapsed() < std::time::Duration::from_secs(5)
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut code = 0;
    for (name, args) in planned_calls(&turn, scenario, context) {
        match turn.call(&name, args).await {
            Ok(result) if !result.is_error => {
                eprintln!(
                    "{name}: {}",
                    super::t(&result.view(demiurge_mcp::redact::View::Operator).content)
                )
            }
            Ok(result) => {
                eprintln!(
                    "{name}: error {}",
                    super::t(&result.view(demiurge_mcp::redact::View::Operator).content)
                );
                code = 1;
            }
            Err(e) => {
                eprintln!("{name}: refused {}", super::t(&e.to_string()));
                code = 1;
            }
        }
    }
    Ok(code)
}

/// The calls a scenario asks for: the ones its context names (`toolCalls`, with their
/// arguments), none where it only looks at the listing, the focal tool's schema echoed
/// back where it checks what the client kept of it, and otherwise every listed tool
/// with arguments made from its schema.
fn planned_calls(
    turn: &demiurge_mcp::TurnCatalog,
    scenario: &str,
    context: &Value,
) -> Vec<(String, Value)> {
    let exposed = |tool: &str| {
        turn.tools()
            .iter()
            .find(|t| t.tool == tool)
            .map(|t| t.name.clone())
    };
    if let Some(calls) = context.get("toolCalls").and_then(Value::as_array) {
        return calls
            .iter()
            .filter_map(|call| {
                let name = exposed(call.get("name")?.as_str()?)?;
                Some((name, call.get("arguments").cloned().unwrap_or(json!({}))))
            })
            .collect();
    }
    if scenario == "json-schema-ref-no-deref" {
        return Vec::new();
    }
    if scenario == "json-schema-2020-12-preservation" {
        let focal = turn
            .tools()
            .iter()
            .find(|t| t.tool != "json_schema_echo")
            .map(|t| Value::Object((*t.input_schema).clone()));
        return exposed("json_schema_echo")
            .zip(focal)
            .map(|(name, schema)| (name, json!({ "schema": schema })))
            .into_iter()
            .collect();
    }
    turn.tools()
        .iter()
        .map(|tool| (tool.name.clone(), arguments_for(&tool.input_schema)))
        .collect()
}

/// The host variable the conformance client secret is passed in.
const SECRET_VARIABLE: &str = "CONFORMANCE_CLIENT_SECRET";
/// The host variable the conformance client's signing key is passed in.
const KEY_VARIABLE: &str = "CONFORMANCE_PRIVATE_KEY";

/// The `oauth:` section a scenario's context asks for (a pre-registered client, client
/// credentials with a secret or a signing key, a client ID metadata document), and the
/// host variables its references name.
fn oauth_section(scenario: &str, context: &Value) -> (String, Vec<(String, String)>) {
    let text = |k: &str| context.get(k).and_then(Value::as_str).map(str::to_string);
    let mut lines = Vec::new();
    let mut secrets = Vec::new();
    if let Some(id) = text("client_id") {
        lines.push(format!("  client_id: {}", json!(id)));
    }
    if let Some(secret) = text("client_secret") {
        lines.push(format!("  client_secret: \"${{{SECRET_VARIABLE}}}\""));
        secrets.push((SECRET_VARIABLE.to_string(), secret));
    }
    if let Some(key) = text("private_key_pem") {
        lines.push(format!("  private_key: \"${{{KEY_VARIABLE}}}\""));
        let algorithm = text("signing_algorithm").unwrap_or_else(|| "ES256".into());
        lines.push(format!("  signing_algorithm: {}", json!(algorithm)));
        secrets.push((KEY_VARIABLE.to_string(), key));
    }
    if scenario.contains("client-credentials") {
        lines.push("  grant: client_credentials".into());
    }
    if scenario.contains("cimd") {
        lines.push(format!(
            "  client_metadata_url: {}",
            json!(CLIENT_METADATA_URL)
        ));
    }
    if lines.is_empty() {
        return (String::new(), secrets);
    }
    (format!("oauth:\n{}\n", lines.join("\n")), secrets)
}

/// Accepts every elicitation with no input of its own, so the runtime's defaults are
/// what the server gets.
struct AcceptDefaults;

impl demiurge_mcp::authority::Elicitor for AcceptDefaults {
    fn elicit(
        &self,
        _request: demiurge_mcp::authority::ElicitationRequest,
    ) -> futures::future::BoxFuture<'static, demiurge_mcp::authority::ElicitationAnswer> {
        Box::pin(async { demiurge_mcp::authority::ElicitationAnswer::Accept(Map::new()) })
    }
}

/// The client ID metadata document the conformance package expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The conformance harness's authorization server redirects at once: follow its
/// authorization URL (under the same URL policy as everything else), and answer the
/// redirect it sends back.
struct Headless {
    net: Arc<demiurge_mcp::net::NetContext>,
}

impl Headless {
    fn new(config: &demiurge_mcp::RuntimeConfig) -> anyhow::Result<Self> {
        let net = demiurge_mcp::net::NetContext::new(
            config.url_policy.clone(),
            Arc::clone(&config.resolver),
            &config.extra_roots,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        Ok(Headless { net: Arc::new(net) })
    }
}

impl demiurge_mcp::authority::Authorizer for Headless {
    fn redirect_uri(&self) -> String {
        "http://localhost:3000/callback".into()
    }

    fn authorize(
        &self,
        prompt: demiurge_mcp::authority::AuthorizationPrompt,
    ) -> futures::future::BoxFuture<'static, Option<String>> {
        let client = demiurge_mcp::net::PinnedClient::new(
            Arc::clone(&self.net),
            Vec::new(),
            Arc::new(|_| {}),
        );
        Box::pin(async move {
            let response = client
                .send_with(
                    http::Method::GET,
                    &prompt.url,
                    http::HeaderMap::new(),
                    bytes::Bytes::new(),
                    false,
                )
                .await
                .ok()?;
            let location = response
                .headers()
                .get(http::header::LOCATION)?
                .to_str()
                .ok()?;
            let base = url::Url::parse(&prompt.url).ok()?;
            Some(base.join(location).ok()?.to_string())
        })
    }
}

/// Plausible arguments from a JSON schema: numbers 1, 2, 3..., strings "test", booleans
/// true, for every required or listed property.
fn arguments_for(schema: &Map<String, Value>) -> Value {
    let mut args = Map::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (i, (name, prop)) in props.iter().enumerate() {
            let value = match prop.get("type").and_then(Value::as_str) {
                Some("number") | Some("integer") => json!(i + 1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            };
            args.insert(name.clone(), value);
        }
    }
    Value::Object(args)
}
