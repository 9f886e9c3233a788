//! Real HTTP(S) servers on loopback for the transport tests: the demo MCP server behind
//! a recorder (methods, paths, headers, TLS SNI, accepted connections), or canned
//! answers (redirects, oversized bodies).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// What a test server answers.
#[derive(Clone)]
pub enum Behaviour {
    /// The demo MCP server (Host header check widened to these names).
    Mcp(Vec<String>),
    /// The demo MCP server answering a session id it did not issue with this status
    /// (404 as the specification says; 400 as some servers do). After
    /// [`TestServer::restart`] every earlier session is unknown.
    McpForgetting(u16),
    /// A redirect to this absolute URL with this status.
    Redirect(u16, String),
    /// A 200 with this content type and body.
    Canned(&'static str, Bytes),
    /// The demo MCP server as a 2025-era server sees `server/discover`: a 400 whose
    /// JSON-RPC error names no request (as the TypeScript SDK answers an unknown
    /// protocol version), or with `empty_result` a 200 with an empty result (as a server
    /// answering every method it does not know); everything else served.
    McpLegacy { empty_result: bool },
    /// The demo MCP server, but `server/discover` answered 400: with a bearer challenge
    /// (an authorization failure), or with a modern rejection that names the request
    /// (`-32020`, a header mismatch).
    McpDiscoverRefused { challenge: bool },
    /// The demo MCP server, but `server/discover` answered with this status (401, 403)
    /// and a bearer challenge, its body a legacy server's answer naming the request
    /// (method not found): an authorization failure dressed as a legacy answer.
    McpDiscoverStatus(u16),
    /// The demo MCP server, but `server/discover` never answered (a stalled network).
    McpDiscoverSilent,
    /// A hostile MCP server: it answers initialize and tools/list, then floods `ping`
    /// requests on its SSE stream and never answers the POSTs that carry our answers.
    PingFlood,
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
}

/// A running server.
pub struct TestServer {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    pub accepted: Arc<AtomicUsize>,
    pub sni: Arc<Mutex<Vec<String>>>,
    running: Running,
    behaviour: Behaviour,
    tls: Option<Arc<rustls::ServerConfig>>,
}

/// The accept loop and every connection's task; dropping it stops the server.
struct Running {
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.accept.abort();
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

impl TestServer {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops the server (every connection dropped, every session forgotten) and starts
    /// it again on the same address, as a redeployed server would.
    pub async fn restart(&mut self) {
        let stopped = std::mem::replace(
            &mut self.running,
            Running {
                accept: tokio::spawn(async {}),
                connections: Arc::default(),
            },
        );
        drop(stopped);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let TestServer { running, .. } = serve(
            &self.addr.to_string(),
            self.behaviour.clone(),
            self.tls.clone(),
        )
        .await;
        self.running = running;
    }
}

/// A test CA and a server certificate for `names`, signed by it.
pub struct TestPki {
    pub ca_der: Vec<u8>,
    pub server: Arc<rustls::ServerConfig>,
}

pub fn pki(names: &[&str]) -> TestPki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "demiurge test CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf_params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    TestPki {
        ca_der: ca.der().to_vec(),
        server: Arc::new(server),
    }
}

/// Serves `behaviour` on `bind` (plain HTTP, or TLS with `tls`).
pub async fn serve(
    bind: &str,
    behaviour: Behaviour,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> TestServer {
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests: Arc<Mutex<Vec<Recorded>>> = Arc::default();
    let accepted: Arc<AtomicUsize> = Arc::default();
    let sni: Arc<Mutex<Vec<String>>> = Arc::default();
    let mcp = match &behaviour {
        Behaviour::Mcp(hosts) => Some(demiurge_mcp::demo_server::http_service(
            Default::default(),
            hosts.clone(),
        )),
        Behaviour::McpForgetting(_)
        | Behaviour::McpLegacy { .. }
        | Behaviour::McpDiscoverRefused { .. }
        | Behaviour::McpDiscoverStatus(_)
        | Behaviour::McpDiscoverSilent => Some(demiurge_mcp::demo_server::http_service(
            Default::default(),
            Vec::new(),
        )),
        _ => None,
    };
    // Session ids this run of the server issued.
    let issued: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
    let (r, a, s, i, c) = (
        Arc::clone(&requests),
        Arc::clone(&accepted),
        Arc::clone(&sni),
        Arc::clone(&issued),
        Arc::clone(&connections),
    );
    let (kept_behaviour, kept_tls) = (behaviour.clone(), tls.clone());
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            a.fetch_add(1, Ordering::SeqCst);
            let (r, s, i, behaviour, mcp, tls) = (
                Arc::clone(&r),
                Arc::clone(&s),
                Arc::clone(&i),
                behaviour.clone(),
                mcp.clone(),
                tls.clone(),
            );
            let connection = tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    r.lock().unwrap().push(Recorded {
                        method: req.method().to_string(),
                        path: req.uri().path().to_string(),
                        headers: req.headers().clone(),
                    });
                    let (behaviour, mcp, i) = (behaviour.clone(), mcp.clone(), Arc::clone(&i));
                    async move {
                        Ok::<_, std::convert::Infallible>(answer(behaviour, mcp, req, i).await)
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                match tls {
                    Some(config) => {
                        let Ok(stream) =
                            tokio_rustls::TlsAcceptor::from(config).accept(stream).await
                        else {
                            return;
                        };
                        if let Some(name) = stream.get_ref().1.server_name() {
                            s.lock().unwrap().push(name.to_string());
                        }
                        let _ = builder
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    }
                    None => {
                        let _ = builder
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
            c.lock().unwrap().push(connection.abort_handle());
        }
    });
    TestServer {
        addr,
        requests,
        accepted,
        sni,
        running: Running {
            accept,
            connections,
        },
        behaviour: kept_behaviour,
        tls: kept_tls,
    }
}

/// Whether `req` is a 2026-07-28 `server/discover` (rmcp names the method in a header).
fn is_discovery(req: &Request<Incoming>) -> bool {
    req.method() == http::Method::POST
        && req
            .headers()
            .get("mcp-method")
            .is_some_and(|v| v == "server/discover")
}

async fn answer(
    behaviour: Behaviour,
    mcp: Option<
        rmcp::transport::streamable_http_server::StreamableHttpService<
            demiurge_mcp::demo_server::DemoServer,
            rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
        >,
    >,
    req: Request<Incoming>,
    issued: Arc<Mutex<std::collections::HashSet<String>>>,
) -> Response<Body> {
    if let Behaviour::McpDiscoverSilent = behaviour {
        if is_discovery(&req) {
            std::future::pending::<()>().await;
        }
        return Box::pin(answer(Behaviour::Mcp(Vec::new()), mcp, req, issued)).await;
    }
    if let Behaviour::McpDiscoverRefused { challenge } = behaviour {
        if is_discovery(&req) {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .map(|v| v["id"].clone())
                .unwrap_or_default();
            let reply = if challenge {
                serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request"}})
            } else {
                serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32020, "message": "header mismatch"}})
            };
            let mut resp = plain(
                StatusCode::BAD_REQUEST,
                "application/json",
                Bytes::from(reply.to_string()),
            );
            if challenge {
                resp.headers_mut().insert(
                    http::header::WWW_AUTHENTICATE,
                    "Bearer error=\"invalid_request\"".parse().unwrap(),
                );
            }
            return resp;
        }
        return Box::pin(answer(Behaviour::Mcp(Vec::new()), mcp, req, issued)).await;
    }
    if let Behaviour::McpDiscoverStatus(status) = behaviour {
        if is_discovery(&req) {
            // The error names the request, as a server's own answer would.
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .map(|v| v["id"].clone())
                .unwrap_or_default();
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "Method not found"}});
            let mut resp = plain(
                StatusCode::from_u16(status).unwrap(),
                "application/json",
                Bytes::from(reply.to_string()),
            );
            resp.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                "Bearer error=\"invalid_token\"".parse().unwrap(),
            );
            return resp;
        }
        return Box::pin(answer(Behaviour::Mcp(Vec::new()), mcp, req, issued)).await;
    }
    if let Behaviour::McpLegacy { empty_result } = behaviour {
        if is_discovery(&req) && empty_result {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .map(|v| v["id"].clone())
                .unwrap_or_default();
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}});
            return plain(
                StatusCode::OK,
                "application/json",
                Bytes::from(reply.to_string()),
            );
        }
        if is_discovery(&req) {
            let body = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Unsupported protocol version: 2026-07-28 (supported versions: 2025-11-25, 2025-06-18)"},"id":null}"#;
            return plain(
                StatusCode::BAD_REQUEST,
                "application/json",
                Bytes::from_static(body.as_bytes()),
            );
        }
        return Box::pin(answer(Behaviour::Mcp(Vec::new()), mcp, req, issued)).await;
    }
    if let Behaviour::McpForgetting(status) = behaviour {
        let session = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        if let Some(session) = session
            && !issued.lock().unwrap().contains(&session)
        {
            // As the TypeScript SDK answers: a JSON-RPC error that names no request.
            let body = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;
            let status = StatusCode::from_u16(status).unwrap();
            return plain(
                status,
                "application/json",
                Bytes::from_static(body.as_bytes()),
            );
        }
        let resp = Box::pin(answer(
            Behaviour::Mcp(Vec::new()),
            mcp,
            req,
            Arc::clone(&issued),
        ))
        .await;
        if let Some(id) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            issued.lock().unwrap().insert(id.to_string());
        }
        return resp;
    }
    match (behaviour, mcp) {
        (Behaviour::Mcp(_), Some(svc)) => {
            let svc = hyper_util::service::TowerToHyperService::new(svc);
            match hyper::service::Service::call(&svc, req).await {
                Ok(resp) => resp.map(|b| {
                    b.map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })
                        .boxed()
                }),
                Err(_) => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    Bytes::new(),
                ),
            }
        }
        (Behaviour::Redirect(status, location), _) => {
            let mut resp = plain(
                StatusCode::from_u16(status).unwrap(),
                "text/plain",
                Bytes::new(),
            );
            resp.headers_mut()
                .insert(http::header::LOCATION, location.parse().unwrap());
            resp
        }
        (Behaviour::Canned(content_type, body), _) => plain(StatusCode::OK, content_type, body),
        (Behaviour::PingFlood, _) => ping_flood(req).await,
        _ => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            Bytes::new(),
        ),
    }
}

fn plain(status: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(Full::new(body).map_err(|never| match never {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
    resp
}

/// See [`Behaviour::PingFlood`].
async fn ping_flood(req: Request<Incoming>) -> Response<Body> {
    use serde_json::{Value, json};
    if req.method() == http::Method::GET {
        let pings = futures::stream::iter(0u64..).map(|n| {
            let ping = json!({"jsonrpc": "2.0", "id": format!("flood-{n}"), "method": "ping"});
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
                Bytes::from(format!("event: message\ndata: {ping}\n\n")),
            ))
        });
        let mut resp = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(pings)));
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            "text/event-stream".parse().unwrap(),
        );
        return resp;
    }
    if req.method() != http::Method::POST {
        return plain(StatusCode::OK, "text/plain", Bytes::new());
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(id) = message.get("id").cloned() else {
        return plain(StatusCode::ACCEPTED, "text/plain", Bytes::new());
    };
    let result = match message.get("method").and_then(Value::as_str) {
        Some("initialize") => json!({
            "protocolVersion": message["params"]["protocolVersion"].clone(),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "ping-flood", "version": "0"}
        }),
        Some("tools/list") => json!({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}),
        Some(_) => json!({}),
        // Our answer to one of its pings: never answered.
        None => std::future::pending().await,
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut resp = plain(
        StatusCode::OK,
        "application/json",
        Bytes::from(answer.to_string()),
    );
    resp.headers_mut()
        .insert("mcp-session-id", "flood-session".parse().unwrap());
    resp
}
