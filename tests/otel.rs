//! Traces and metrics (feature `otel`), exported as a host would: the OpenTelemetry SDK's
//! OTLP/HTTP exporters send to a receiver on loopback, which decodes what it is sent
//! with the official protobuf definitions (`opentelemetry-proto`). Run with
//! `cargo test --features otel-otlp --test otel`.
#![cfg(feature = "otel-otlp")]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{Core, Recorder, demo, harness_with, host_env};
use demiurge_mcp::authority::{Action, ApprovalAnswer};
use demiurge_mcp::net::{StaticResolver, UrlPolicy};
use demiurge_mcp::telemetry::Telemetry;
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer, TracerProvider};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use prost::Message;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// A secret the demo server is given and a call's arguments carry.
const CANARY: &str = "sk_canary_otel_7d21";

/// What the receiver was sent: (path, body) per request.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on loopback: every POST is kept and answered 200.
async fn receiver() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let received = Received::default();
    let kept = Arc::clone(&received);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_otlp(stream, Arc::clone(&kept)));
        }
    });
    (format!("http://{address}"), received)
}

/// One connection's requests (keep-alive: one after another).
async fn serve_otlp(stream: tokio::net::TcpStream, kept: Received) {
    let mut stream = tokio::io::BufReader::new(stream);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            stream.read_line(&mut header).await.unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.unwrap();
        kept.lock().unwrap().push((path, body));
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        stream.get_mut().write_all(answer.as_bytes()).await.unwrap();
    }
}

/// The SDK's providers exporting OTLP/HTTP to `endpoint`.
fn providers(endpoint: &str) -> (SdkTracerProvider, SdkMeterProvider) {
    use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
    let spans = SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{endpoint}/v1/traces"))
        .build()
        .unwrap();
    let metrics = MetricExporter::builder()
        .with_http()
        .with_endpoint(format!("{endpoint}/v1/metrics"))
        .build()
        .unwrap();
    let tracers = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .build();
    let meters = SdkMeterProvider::builder()
        .with_periodic_exporter(metrics)
        .build();
    (tracers, meters)
}

/// The spans in what the receiver was sent.
fn exported_spans(sent: &[(String, Vec<u8>)]) -> Vec<Span> {
    sent.iter()
        .filter(|(path, _)| path == "/v1/traces")
        .flat_map(|(_, body)| {
            ExportTraceServiceRequest::decode(body.as_slice())
                .unwrap()
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|a| a.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(n) => Some(n.to_string()),
        Any::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A host's turn and calls inside its own span: the exported span tree hangs from it
/// (turn, connect and its stages; call, approval, server), the server received the
/// context of its call's span as `traceparent`, the metric points count connects,
/// calls, approvals and denials, and no exported byte carries the secret.
#[test]
fn a_turn_and_its_calls_export_their_span_tree_and_metrics_without_secrets() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (endpoint, received) = rt.block_on(receiver());
    let (tracers, meters) = providers(&endpoint);
    let telemetry = Telemetry::new(&tracers, &meters);
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &demo("env:\n  OTEL_TOKEN: \"${OTEL_TOKEN}\"\napproval_policy: prompt\nsandbox: off\n"),
    );
    // Connects are approved; calls once, except `fail`, which is refused.
    let approver = Recorder::new(|request| match (&request.action, request.tool.as_deref()) {
        (Action::Call, Some("d__fail")) => ApprovalAnswer::Deny,
        _ => ApprovalAnswer::AllowOnce,
    });
    let host = tracers.tracer("host");
    let step = host.start("agent.step");
    let step_id = step.span_context().span_id().to_bytes();
    let cx = opentelemetry::Context::current_with_span(step);
    let whoami = rt.block_on(async {
        use opentelemetry::context::FutureExt;
        let h = harness_with(approver, move |mut c| {
            c.telemetry = telemetry;
            c.host_env = host_env(&[("OTEL_TOKEN", CANARY)]);
            c
        })
        .await;
        let whoami = async {
            let (session, turn) = common::open(&h.runtime, core.spec()).await;
            assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
            let echoed = turn
                .call("d__echo", json!({"message": CANARY}))
                .await
                .unwrap();
            assert!(!echoed.is_error);
            let whoami = turn.call("d__whoami", json!({})).await.unwrap();
            let read = turn.read_resource("d", "demo://readme").await.unwrap();
            assert!(!read.is_error);
            // Collected while the server runs: the gauges count it.
            tokio::task::block_in_place(|| meters.force_flush()).unwrap();
            let refused = turn.call("d__fail", json!({"message": CANARY})).await;
            assert!(refused.is_err());
            session.evict().await.unwrap();
            whoami
        }
        .with_context(cx.clone())
        .await;
        h.finish().await;
        whoami
    });
    cx.span().end();
    tracers.force_flush().unwrap();
    meters.force_flush().unwrap();
    let sent = received.lock().unwrap().clone();

    // Not one exported byte carries the secret.
    assert!(!sent.is_empty());
    for (path, body) in &sent {
        let text = String::from_utf8_lossy(body);
        assert!(!text.contains(CANARY), "{path} carries the secret");
    }

    let spans = exported_spans(&sent);
    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let one = |name: &str| -> &Span {
        let found = named(name);
        assert_eq!(
            found.len(),
            1,
            "{name}: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        found[0]
    };
    let parent_of = |span: &Span| -> String { hex(&span.parent_span_id) };
    let step_span = one("agent.step");
    assert_eq!(hex(&step_span.span_id), hex(&step_id));
    let trace = hex(&step_span.trace_id);
    assert!(
        spans
            .iter()
            .filter(|s| s.name.starts_with("mcp."))
            .all(|s| hex(&s.trace_id) == trace)
    );

    let turn = one("mcp.turn");
    assert_eq!(parent_of(turn), hex(&step_id));
    let connect = one("mcp.connect");
    assert_eq!(parent_of(connect), hex(&turn.span_id));
    assert_eq!(attribute(connect, "mcp.server").as_deref(), Some("d"));
    assert_eq!(
        attribute(connect, "mcp.outcome").as_deref(),
        Some("connected")
    );
    for stage in [
        "mcp.connect.capability",
        "mcp.connect.approval",
        "mcp.connect.permit",
        "mcp.connect.start",
        "mcp.connect.pinning",
    ] {
        assert_eq!(parent_of(one(stage)), hex(&connect.span_id), "{stage}");
    }
    // The transport's stages, drawn after the fact inside the start they ran in.
    let start = one("mcp.connect.start");
    for stage in [
        "mcp.connect.spawn",
        "mcp.connect.initialize",
        "mcp.connect.list",
    ] {
        let span = one(stage);
        assert_eq!(parent_of(span), hex(&start.span_id), "{stage}");
        assert!(
            span.start_time_unix_nano >= start.start_time_unix_nano,
            "{stage}"
        );
        assert!(
            span.end_time_unix_nano <= start.end_time_unix_nano,
            "{stage}"
        );
        assert!(
            span.start_time_unix_nano <= span.end_time_unix_nano,
            "{stage}"
        );
    }
    assert!(
        one("mcp.connect.spawn").end_time_unix_nano
            <= one("mcp.connect.initialize").start_time_unix_nano
    );
    assert!(named("mcp.connect.authorize").is_empty());
    let read = one("mcp.read");
    assert_eq!(attribute(read, "mcp.outcome").as_deref(), Some("ok"));
    assert_eq!(attribute(read, "mcp.server").as_deref(), Some("d"));

    let calls = named("mcp.call");
    assert_eq!(calls.len(), 3);
    let by_tool: HashMap<String, &Span> = calls
        .iter()
        .map(|s| (attribute(s, "mcp.tool").unwrap(), *s))
        .collect();
    for call in &calls {
        assert_eq!(parent_of(call), hex(&step_id));
    }
    let refused = by_tool["d__fail"];
    assert_eq!(attribute(refused, "mcp.outcome").as_deref(), Some("denied"));
    assert_eq!(
        attribute(refused, "error.type").as_deref(),
        Some("approval_denied")
    );
    assert_eq!(
        refused.status.as_ref().map(|s| s.code),
        Some(2),
        "status error"
    );

    // The server got the context of its call's server span, and nothing else of it.
    let whoami_call = by_tool["d__whoami"];
    let server_span = named("mcp.call.server")
        .into_iter()
        .find(|s| s.parent_span_id == whoami_call.span_id)
        .expect("the whoami call's server span");
    let expected = format!("00-{trace}-{}-01", hex(&server_span.span_id));
    let data = whoami
        .view(demiurge_mcp::redact::View::Operator)
        .data
        .clone();
    assert_eq!(data["traceparent"], json!(expected), "{data}");
    let approvals = named("mcp.call.approval");
    assert_eq!(approvals.len(), 3);
    assert!(
        approvals
            .iter()
            .all(|a| by_tool.values().any(|c| c.span_id == a.parent_span_id))
    );
    assert_eq!(named("mcp.evict").len(), 1);

    let metrics: Vec<(String, Points)> = sent
        .iter()
        .filter(|(path, _)| path == "/v1/metrics")
        .flat_map(|(_, body)| {
            ExportMetricsServiceRequest::decode(body.as_slice())
                .unwrap()
                .resource_metrics
        })
        .flat_map(|r| r.scope_metrics)
        .flat_map(|s| s.metrics)
        .map(|m| (m.name.clone(), points(&m)))
        .collect();
    let total = |name: &str, key: &str, value: &str| -> f64 {
        metrics
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, points)| points)
            .filter(|(attributes, _)| attributes.get(key).map(String::as_str) == Some(value))
            .map(|(_, v)| *v)
            .fold(0.0, f64::max)
    };
    assert_eq!(total("mcp.connects", "mcp.outcome", "connected"), 1.0);
    assert_eq!(total("mcp.calls", "mcp.outcome", "ok"), 2.0);
    assert_eq!(total("mcp.calls", "mcp.outcome", "denied"), 1.0);
    assert_eq!(total("mcp.denials", "mcp.action", "call"), 1.0);
    assert_eq!(total("mcp.approvals", "mcp.answer", "deny"), 1.0);
    assert_eq!(
        total("mcp.call.duration", "mcp.outcome", "ok"),
        2.0,
        "histogram count"
    );
    assert!(total("mcp.approval.wait", "mcp.action", "call") >= 3.0);
    // The gauges: one connection and one server process while it ran, none after.
    let gauge = |name: &str| -> Vec<f64> {
        metrics
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, points)| points.iter().map(|(_, v)| *v))
            .collect()
    };
    for name in ["mcp.connections", "mcp.server_processes"] {
        let seen = gauge(name);
        assert_eq!(seen.first(), Some(&1.0), "{name}: {seen:?}");
        assert_eq!(seen.last(), Some(&0.0), "{name}: {seen:?}");
    }
    assert_eq!(gauge("mcp.discovery.queued").last(), Some(&0.0));
}

/// A metric's points: attributes and value (a sum's value, a histogram's count).
type Points = Vec<(HashMap<String, String>, f64)>;

fn points(metric: &opentelemetry_proto::tonic::metrics::v1::Metric) -> Points {
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value as Number;
    let attributes = |list: &[KeyValue]| -> HashMap<String, String> {
        list.iter()
            .filter_map(|kv| {
                let value = match kv.value.as_ref()?.value.as_ref()? {
                    Any::StringValue(s) => s.clone(),
                    Any::BoolValue(b) => b.to_string(),
                    Any::IntValue(n) => n.to_string(),
                    _ => return None,
                };
                Some((kv.key.clone(), value))
            })
            .collect()
    };
    match metric.data.as_ref() {
        Some(Data::Sum(sum)) => sum
            .data_points
            .iter()
            .map(|p| {
                let value = match p.value {
                    Some(Number::AsInt(n)) => n as f64,
                    Some(Number::AsDouble(d)) => d,
                    None => 0.0,
                };
                (attributes(&p.attributes), value)
            })
            .collect(),
        Some(Data::Gauge(gauge)) => gauge
            .data_points
            .iter()
            .map(|p| {
                let value = match p.value {
                    Some(Number::AsInt(n)) => n as f64,
                    Some(Number::AsDouble(d)) => d,
                    None => 0.0,
                };
                (attributes(&p.attributes), value)
            })
            .collect(),
        Some(Data::Histogram(histogram)) => histogram
            .data_points
            .iter()
            .map(|p| (attributes(&p.attributes), p.count as f64))
            .collect(),
        _ => Vec::new(),
    }
}

/// The `demiurge` command exports to the endpoint of the standard
/// `OTEL_EXPORTER_OTLP_ENDPOINT`: a `call` sends its turn's and call's spans, and the
/// server received the context of the call's server span.
#[test]
fn the_command_exports_to_the_standard_otlp_endpoint() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (endpoint, received) = rt.block_on(receiver());
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("sandbox: off\n"));
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["--yes", "call", "d__whoami", "--json"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let spans: Vec<Span> = received
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path == "/v1/traces")
        .flat_map(|(_, body)| {
            ExportTraceServiceRequest::decode(body.as_slice())
                .unwrap()
                .resource_spans
        })
        .flat_map(|r| r.scope_spans)
        .flat_map(|s| s.spans)
        .collect();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"mcp.turn") && names.contains(&"mcp.connect"),
        "{names:?}"
    );
    let server = spans
        .iter()
        .find(|s| s.name == "mcp.call.server")
        .expect("the call's server span");
    let sent = format!("00-{}-{}-01", hex(&server.trace_id), hex(&server.span_id));
    assert!(printed.contains(&sent), "{printed}");
}

/// A server that answers 401 is authorized between two attempts: the connect's start
/// holds the failed first initialize, the authorization, and the second initialize and
/// listing, in that order; the client secret reaches no exported byte.
#[test]
fn an_authorized_connect_traces_its_authorization_between_two_attempts() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (endpoint, received) = rt.block_on(receiver());
    let (tracers, meters) = providers(&endpoint);
    let telemetry = Telemetry::new(&tracers, &meters);
    rt.block_on(async {
        let server = common::oauth::serve(common::oauth::AuthOptions::default()).await;
        let declared = format!(
            "transport: streamable_http\nurl: {}\napproval_policy: auto\noauth:\n  client_id: service-7\n  client_secret: \"${{SVC_SECRET}}\"\n  grant: client_credentials\n",
            server.url()
        );
        let core = Core::new().grant_servers(&["svc"]).server("svc", &declared);
        let h = harness_with(Recorder::allow(), move |mut c| {
            c.telemetry = telemetry;
            c.url_policy = UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
            c.resolver = Arc::new(StaticResolver::new());
            c.authorizer = Arc::new(common::oauth::Follow::new());
            c.with_host_env(host_env(&[("SVC_SECRET", CANARY)]))
        })
        .await;
        let (session, turn) = common::open(&h.runtime, core.spec()).await;
        assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
        assert_eq!(server.seen.grants(), ["client_credentials"]);
        session.evict().await.unwrap();
        h.finish().await;
    });
    tracers.force_flush().unwrap();
    meters.force_flush().unwrap();
    let sent = received.lock().unwrap().clone();
    for (path, body) in &sent {
        assert!(
            !String::from_utf8_lossy(body).contains(CANARY),
            "{path} carries the secret"
        );
    }
    let spans = exported_spans(&sent);
    let start = spans
        .iter()
        .find(|s| s.name == "mcp.connect.start")
        .unwrap();
    let mut stages: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == start.span_id)
        .collect();
    stages.sort_by_key(|s| s.start_time_unix_nano);
    let failed = |s: &Span| s.status.as_ref().is_some_and(|s| s.code == 2);
    let seen: Vec<(&str, bool)> = stages
        .iter()
        .map(|s| (s.name.as_str(), failed(s)))
        .collect();
    assert_eq!(
        seen,
        [
            ("mcp.connect.initialize", true),
            ("mcp.connect.authorize", false),
            ("mcp.connect.initialize", false),
            ("mcp.connect.list", false),
        ]
    );
}

/// `demiurge serve` takes a client's W3C trace context as the parent of the call it
/// asks for; a malformed one is ignored (the call starts a trace of its own).
#[test]
fn serve_hangs_a_clients_call_under_the_clients_trace() {
    use rmcp::ServiceExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (endpoint, received) = rt.block_on(receiver());
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("sandbox: off\n"));
    let home = tempfile::tempdir().unwrap();
    let client_trace = "0af7651916cd43dd8448eb211c80319c";
    let client_span = "b7ad6b7169203331";
    rt.block_on(async {
        let mut command = tokio::process::Command::new(common::exe());
        command
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .args(["--yes", "serve"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .stderr(std::process::Stdio::null());
        let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
        let client = ().serve(transport).await.unwrap();
        let upper = client_trace.to_uppercase();
        let zeros = "0".repeat(32);
        let parents = [
            format!("00-{client_trace}-{client_span}-01"),
            // Malformed: each is ignored, and the call starts a trace of its own.
            format!("00-{client_trace}-{client_span}-1"),
            format!("00-{upper}-{client_span}-01"),
            format!("00-{zeros}-{client_span}-01"),
            format!("ff-{client_trace}-{client_span}-01"),
            format!("00-{client_trace}-{client_span}-01-00"),
            format!("00-{client_trace}{client_span}-01"),
            format!("00-{client_trace}-{}-01", "0".repeat(16)),
            "x".repeat(100_000),
        ];
        for (n, parent) in parents.iter().enumerate() {
            let message = format!("call {n}");
            let mut params = rmcp::model::CallToolRequestParams::new("d__echo")
                .with_arguments(json!({"message": message}).as_object().cloned().unwrap());
            let mut meta = rmcp::model::RequestMetaObject::default();
            meta.0.insert("traceparent".into(), json!(parent));
            params.meta = Some(meta);
            let result = client.call_tool(params).await.unwrap();
            assert_ne!(result.is_error, Some(true));
        }
        client.cancel().await.unwrap();
    });
    let calls = || -> Vec<Span> {
        received
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path == "/v1/traces")
            .flat_map(|(_, body)| {
                ExportTraceServiceRequest::decode(body.as_slice())
                    .unwrap()
                    .resource_spans
            })
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .filter(|s| s.name == "mcp.call")
            .collect()
    };
    // serve flushes what it batched when its client hangs up and it exits.
    let started = std::time::Instant::now();
    while calls().len() < 9 && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let calls = calls();
    assert_eq!(calls.len(), 9);
    let under_client = calls
        .iter()
        .filter(|s| hex(&s.trace_id) == client_trace && hex(&s.parent_span_id) == client_span)
        .count();
    assert_eq!(under_client, 1, "exactly the well-formed context is taken");
}

/// One plain HTTP/1.1 request on loopback: the answer, whole.
async fn get(address: &str, method: &str, host: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "{method} /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// `serve --metrics` answers a scrape with what the run counted, in Prometheus' text
/// format, only for a `Host` naming loopback, and never with a secret.
#[test]
fn serve_answers_a_prometheus_scrape_on_loopback() {
    use rmcp::ServiceExt;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &demo("env:\n  OTEL_TOKEN: \"${OTEL_TOKEN}\"\nsandbox: off\n"),
    );
    let home = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut command = tokio::process::Command::new(common::exe());
        command
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .args(["--yes", "serve", "--metrics", "127.0.0.1:0"])
            .env("OTEL_TOKEN", CANARY);
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(stderr.unwrap()).lines();
        let address = loop {
            let line = lines.next_line().await.unwrap().expect("serve said where");
            if let Some(url) = line.strip_prefix("serve: metrics on http://") {
                break url.trim_end_matches("/metrics").to_string();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let client = ().serve(transport).await.unwrap();
        let params = rmcp::model::CallToolRequestParams::new("d__echo")
            .with_arguments(json!({"message": CANARY}).as_object().cloned().unwrap());
        assert_ne!(client.call_tool(params).await.unwrap().is_error, Some(true));

        let page = get(&address, "GET", &address).await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        assert!(page.contains("# TYPE mcp_calls_total counter"), "{page}");
        assert!(
            page.contains("mcp_calls_total{mcp_outcome=\"ok\",mcp_server=\"d\"} 1"),
            "{page}"
        );
        assert!(page.contains("mcp_connections 1"), "{page}");
        assert!(
            page.contains("mcp_call_duration_milliseconds_count{"),
            "{page}"
        );
        assert!(!page.contains(CANARY));
        // A rebound name, a write, another address of the page: refused.
        for (method, host) in [
            ("GET", "evil.example"),
            ("GET", "localhost.evil.example:80"),
            ("POST", "127.0.0.1"),
        ] {
            let refused = get(&address, method, host).await;
            assert!(
                !refused.starts_with("HTTP/1.1 200"),
                "{method} {host}: {refused}"
            );
            assert!(!refused.contains("mcp_calls_total"));
        }
        client.cancel().await.unwrap();
    });
}
