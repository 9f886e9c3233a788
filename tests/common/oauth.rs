//! A protected MCP server and its OAuth authorization server on one loopback port, for
//! the OAuth tests: protected resource metadata, authorization server metadata, dynamic
//! registration, an authorization endpoint that redirects at once, a token endpoint
//! (authorization code, refresh, client credentials), and the demo MCP server behind a
//! bearer check. Tokens carry a canary so tests can look for them in every output.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};

type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// Every token the server issues contains this.
pub const CANARY: &str = "canary7f3e91ab";

/// How the authorization server behaves.
#[derive(Clone, Default)]
pub struct AuthOptions {
    /// The authorization server the resource metadata names; the server itself when
    /// `None`.
    pub authorization_server: Option<String>,
    /// Lifetime of access tokens, in seconds.
    pub expires_in: Option<u64>,
    /// The `issuer` the authorization server metadata names: a path is appended to the
    /// server's origin, a URL taken as it is; the origin when `None`.
    pub issuer: Option<String>,
    /// The 2025-03-26 layout: no protected resource metadata, a challenge that names
    /// none, authorization server metadata at the origin.
    pub legacy: bool,
    /// `token_endpoint_auth_methods_supported`, when not the default three.
    pub auth_methods: Option<Vec<String>>,
    /// The `authorization_endpoint` the metadata names, when not `<origin>/authorize`.
    pub authorization_endpoint: Option<String>,
    /// The token endpoint answers 200 with a body that is not JSON and repeats the code
    /// and the canary (a parse error that quotes its input would show them).
    pub unreadable_token_answer: bool,
    /// The `iss` the authorization response carries (RFC 9207): `ISSUER` stands for the
    /// issuer the metadata names; none when `None`.
    pub response_iss: Option<String>,
    /// Whether the metadata advertises `authorization_response_iss_parameter_supported`.
    pub iss_supported: bool,
}

/// What the server saw.
#[derive(Default)]
pub struct Seen {
    /// `METHOD /path` of every request.
    pub requests: Mutex<Vec<String>>,
    /// Access tokens issued and still valid.
    pub valid: Mutex<HashSet<String>>,
    /// Grant types of token requests, in order.
    pub grants: Mutex<Vec<String>>,
    /// The form fields of every token request.
    pub token_forms: Mutex<Vec<Vec<(String, String)>>>,
    issued: AtomicUsize,
}

impl Seen {
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    pub fn grants(&self) -> Vec<String> {
        self.grants.lock().unwrap().clone()
    }

    pub fn token_forms(&self) -> Vec<Vec<(String, String)>> {
        self.token_forms.lock().unwrap().clone()
    }

    /// Makes every access token issued so far invalid (the server "revokes" them).
    pub fn revoke_all(&self) {
        self.valid.lock().unwrap().clear();
    }
}

/// A running protected server.
pub struct AuthServer {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthServer {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.addr.port())
    }
}

pub async fn serve(options: AuthOptions) -> AuthServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Seen> = Arc::default();
    let mcp = demiurge_mcp::demo_server::http_service(Default::default(), Vec::new());
    let origin = format!("http://127.0.0.1:{}", addr.port());
    let state = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (seen, mcp, origin, options) = (
                Arc::clone(&state),
                mcp.clone(),
                origin.clone(),
                options.clone(),
            );
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (seen, mcp, origin, options) = (
                        Arc::clone(&seen),
                        mcp.clone(),
                        origin.clone(),
                        options.clone(),
                    );
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            answer(req, &seen, mcp, &origin, &options).await,
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            });
        }
    });
    AuthServer { addr, seen, task }
}

fn reply(status: StatusCode, body: Value) -> Response<Body> {
    let mut resp = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    resp
}

fn form(body: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

async fn answer(
    req: Request<Incoming>,
    seen: &Seen,
    mcp: rmcp::transport::streamable_http_server::StreamableHttpService<
        demiurge_mcp::demo_server::DemoServer,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
    origin: &str,
    options: &AuthOptions,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    seen.requests
        .lock()
        .unwrap()
        .push(format!("{} {path}", req.method()));
    let issuer = options
        .authorization_server
        .clone()
        .unwrap_or_else(|| origin.to_string());
    let named_issuer = match options.issuer.as_deref() {
        Some(p) if p.starts_with('/') => format!("{origin}{p}"),
        Some(url) => url.to_string(),
        None => origin.to_string(),
    };
    let methods = options.auth_methods.clone().unwrap_or_else(|| {
        ["none", "client_secret_post", "client_secret_basic"]
            .map(String::from)
            .to_vec()
    });
    match path.as_str() {
        p if p.starts_with("/.well-known/oauth-protected-resource") && !options.legacy => reply(
            StatusCode::OK,
            json!({"resource": format!("{origin}/mcp"), "authorization_servers": [issuer]}),
        ),
        "/.well-known/oauth-authorization-server" => reply(
            StatusCode::OK,
            json!({
                "issuer": named_issuer,
                "authorization_endpoint": options
                    .authorization_endpoint
                    .as_deref()
                    .map(|e| e.replace("PORT", origin.rsplit(':').next().unwrap_or_default()))
                    .unwrap_or_else(|| format!("{origin}/authorize")),
                "token_endpoint": format!("{origin}/token"),
                "registration_endpoint": format!("{origin}/register"),
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": methods,
                "authorization_response_iss_parameter_supported": options.iss_supported,
            }),
        ),
        "/register" => {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let asked: Value = serde_json::from_slice(&body).unwrap_or_default();
            reply(
                StatusCode::CREATED,
                json!({"client_id": "registered-client", "redirect_uris": asked["redirect_uris"],
                    "client_secret": format!("cs-{CANARY}"),
                    "registration_access_token": format!("rat-{CANARY}")}),
            )
        }
        "/authorize" => {
            let query: Vec<(String, String)> =
                url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                    .into_owned()
                    .collect();
            let get = |k: &str| {
                query
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let mut location = url::Url::parse(&get("redirect_uri")).unwrap();
            location
                .query_pairs_mut()
                .append_pair("code", &format!("code-{CANARY}"))
                .append_pair("state", &get("state"));
            if let Some(iss) = &options.response_iss {
                location
                    .query_pairs_mut()
                    .append_pair("iss", &iss.replace("ISSUER", &named_issuer));
            }
            let mut resp = reply(StatusCode::FOUND, json!({}));
            resp.headers_mut()
                .insert(http::header::LOCATION, location.as_str().parse().unwrap());
            resp
        }
        "/token" => {
            // How the client authenticated, beside its form: `$authorization` is the
            // scheme of its Authorization header, if it sent one.
            let scheme = req
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split_whitespace().next())
                .map(|s| ("$authorization".to_string(), s.to_string()));
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let mut fields = form(&body);
            fields.extend(scheme);
            let grant = fields
                .iter()
                .find(|(k, _)| k == "grant_type")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            seen.grants.lock().unwrap().push(grant);
            seen.token_forms.lock().unwrap().push(fields.clone());
            if options.unreadable_token_answer {
                let code = fields
                    .iter()
                    .find(|(k, _)| k == "code")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let mut resp = Response::new(
                    Full::new(Bytes::from(format!("<html>{code} {CANARY}-raw</html>")))
                        .map_err(|never| match never {})
                        .boxed(),
                );
                *resp.status_mut() = StatusCode::OK;
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    "application/json".parse().unwrap(),
                );
                return resp;
            }
            let n = seen.issued.fetch_add(1, Ordering::SeqCst);
            let access = format!("at-{n}-{CANARY}");
            seen.valid.lock().unwrap().insert(access.clone());
            reply(
                StatusCode::OK,
                json!({
                    "access_token": access,
                    "token_type": "Bearer",
                    "expires_in": options.expires_in.unwrap_or(3600),
                    "refresh_token": format!("rt-{n}-{CANARY}"),
                }),
            )
        }
        "/mcp" => {
            let token = req
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_string);
            let valid = token.is_some_and(|t| seen.valid.lock().unwrap().contains(&t));
            if !valid {
                let mut resp = reply(StatusCode::UNAUTHORIZED, json!({"error": "invalid_token"}));
                let challenge = if options.legacy {
                    "Bearer".to_string()
                } else {
                    format!(
                        "Bearer resource_metadata=\"{origin}/.well-known/oauth-protected-resource/mcp\""
                    )
                };
                resp.headers_mut()
                    .insert(http::header::WWW_AUTHENTICATE, challenge.parse().unwrap());
                return resp;
            }
            let svc = hyper_util::service::TowerToHyperService::new(mcp);
            match hyper::service::Service::call(&svc, req).await {
                Ok(resp) => resp.map(|b| {
                    b.map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { Box::new(e) })
                        .boxed()
                }),
                Err(_) => reply(StatusCode::INTERNAL_SERVER_ERROR, json!({})),
            }
        }
        _ => reply(StatusCode::NOT_FOUND, json!({})),
    }
}

/// An authorizer that follows the authorization URL as a browser would (the test
/// authorization server redirects at once), counting how often it was asked.
#[derive(Clone)]
pub struct Follow {
    pub asked: Arc<AtomicUsize>,
    /// Every prompt shown.
    pub prompts: Arc<Mutex<Vec<demiurge_mcp::authority::AuthorizationPrompt>>>,
    /// What each finished flow ended with.
    pub outcomes: Arc<Mutex<Vec<demiurge_mcp::authority::AuthorizationOutcome>>>,
    /// Changes the redirect the browser came back with (another flow's path, say).
    pub tamper: Option<fn(String) -> String>,
}

impl Follow {
    pub fn new() -> Self {
        Follow {
            asked: Arc::default(),
            prompts: Arc::default(),
            outcomes: Arc::default(),
            tamper: None,
        }
    }
}

impl demiurge_mcp::authority::Authorizer for Follow {
    fn redirect_uri(&self) -> String {
        "http://127.0.0.1:9/callback".into()
    }

    fn authorize(
        &self,
        prompt: demiurge_mcp::authority::AuthorizationPrompt,
    ) -> futures::future::BoxFuture<'static, Option<String>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.prompts.lock().unwrap().push(prompt.clone());
        let tamper = self.tamper;
        Box::pin(async move {
            let location = browse(&prompt.url).await.map(|(_, location)| location)?;
            Some(match tamper {
                Some(change) => change(location),
                None => location,
            })
        })
    }

    fn finished(
        &self,
        _redirect_uri: &str,
        outcome: demiurge_mcp::authority::AuthorizationOutcome,
    ) {
        self.outcomes.lock().unwrap().push(outcome);
    }
}

/// GETs `url` as a browser would, answering its status and `Location` header.
pub async fn browse(url: &str) -> Option<(u16, String)> {
    let url = url::Url::parse(url).ok()?;
    let stream = tokio::net::TcpStream::connect((url.host_str()?, url.port_or_known_default()?))
        .await
        .ok()?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .ok()?;
    tokio::spawn(conn);
    let path = format!("{}?{}", url.path(), url.query().unwrap_or(""));
    let req = Request::get(path)
        .header(http::header::HOST, url.host_str()?)
        .body(Full::new(Bytes::new()))
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    let location = resp
        .headers()
        .get(http::header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Some((resp.status().as_u16(), location))
}
