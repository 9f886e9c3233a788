//! The pinned HTTP client behind every streamable HTTP connection.
//!
//! For every request and every redirect hop (at most [`MAX_REDIRECTS`]) it resolves the
//! name with our [`Resolver`], checks every answer with the [`UrlPolicy`], reports the
//! decision, then connects to a validated address while keeping the URL's hostname in
//! the `Host` header and in TLS SNI. Connections are pooled per (origin, validated
//! address), so a later, rebinding answer can neither reuse nor redirect a pooled
//! socket. Cross-origin hops drop `Authorization`, cookies and the declared headers.
//! Proxy environment variables are never read. Response bodies and SSE events are
//! bounded.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, COOKIE, HOST, LOCATION, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};
use tokio::net::TcpStream;

use super::policy::{Answer, AuditView, Block, Host, Target, UrlPolicy, Verdict};
use super::resolver::Resolver;

/// Most redirect hops followed for one request.
pub const MAX_REDIRECTS: usize = 10;
/// Bound on establishing one TCP (and TLS) connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest JSON response body accepted.
pub const MAX_JSON_RESPONSE: usize = 16 * 1024 * 1024;
/// Largest single SSE event accepted.
pub const MAX_SSE_EVENT: usize = 4 * 1024 * 1024;
/// Bytes of an error body kept for the diagnostic.
const MAX_ERROR_BODY: usize = 4 * 1024;
/// Idle connections kept per (origin, address).
const POOL_PER_KEY: usize = 8;

const SESSION_HEADER: &str = "mcp-session-id";
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// Why a request did not produce a response.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The URL policy refused the target of this request or redirect hop.
    #[error("blocked by the URL policy ({}) for {target}", .block.as_str())]
    Blocked {
        /// The policy rule that refused it (typed, so hosts need not parse text).
        block: Block,
        /// The origin, never more of the URL.
        target: String,
    },
    /// No validated address accepted a connection.
    #[error("cannot connect to {target}: {message}")]
    Connect {
        /// `scheme://host[:port]`: never a path, query or credential.
        target: String,
        /// The socket or TLS error, in words.
        message: String,
    },
    /// HTTP framing or protocol failure.
    #[error("HTTP failure talking to {target}: {message}")]
    Http {
        /// `scheme://host[:port]`: never a path, query or credential.
        target: String,
        /// The HTTP or framing error, in words.
        message: String,
    },
    /// More than [`MAX_REDIRECTS`] hops.
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    /// A redirect without a usable `Location`.
    #[error("a redirect without a usable Location header")]
    BadRedirect,
    /// A body or event over its limit.
    #[error("the response exceeded {0} bytes")]
    TooLarge(usize),
}

impl From<NetError> for StreamableHttpError<NetError> {
    fn from(e: NetError) -> Self {
        StreamableHttpError::Client(e)
    }
}

/// What every pinned client of a runtime shares: policy, resolver, TLS roots.
pub struct NetContext {
    /// The host's URL policy.
    pub policy: UrlPolicy,
    /// Where names are resolved.
    pub resolver: Arc<dyn Resolver>,
    /// TLS configuration (webpki roots plus any host roots).
    pub tls: Arc<rustls::ClientConfig>,
}

impl NetContext {
    /// A context trusting the webpki roots plus `extra_roots` (DER certificates).
    ///
    /// # Errors
    /// When a root is not a valid certificate or rustls rejects the configuration.
    pub fn new(
        policy: UrlPolicy,
        resolver: Arc<dyn Resolver>,
        extra_roots: &[Vec<u8>],
    ) -> Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for der in extra_roots {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| format!("invalid extra root certificate: {e}"))?;
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(NetContext {
            policy,
            resolver,
            tls: Arc::new(tls),
        })
    }

    /// Resolves and decides one target.
    pub async fn check(&self, target: &Target) -> Verdict {
        let answer = match &target.host {
            Host::Ip(ip) => Answer::Addresses(vec![*ip]),
            Host::Name(name) => self.resolver.resolve(name).await,
        };
        self.policy.decide(target, &answer)
    }

    /// Parses, resolves and decides a URL.
    pub async fn check_url(&self, url: &str) -> Verdict {
        match self.policy.target(url) {
            Ok(target) => self.check(&target).await,
            Err(verdict) => verdict,
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    scheme: &'static str,
    host: Host,
    port: u16,
    addr: IpAddr,
}

/// Called with the audit view of every decision, in order (`mcp.url_decision` events).
pub type DecisionHook = Arc<dyn Fn(&AuditView) + Send + Sync>;

/// A hyper client that resolves, checks and pins every request.
#[derive(Clone)]
pub struct PinnedClient {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    net: Arc<NetContext>,
    /// Header names the declaration added; dropped on cross-origin hops.
    declared: Vec<HeaderName>,
    on_decision: DecisionHook,
    pool: Mutex<HashMap<PoolKey, Vec<SendRequest<Full<Bytes>>>>>,
    /// The last authorization challenge a server answered with (401, or 403 with
    /// `insufficient_scope`): the connect step that runs the OAuth flow reads it.
    challenge: Mutex<Option<Challenge>>,
}

/// A server's `WWW-Authenticate` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// 401: authorization is required (or the token was refused).
    Unauthorized(String),
    /// 403 `insufficient_scope`: a broader authorization is required.
    InsufficientScope(String),
}

impl PinnedClient {
    /// A client for one connection.
    pub fn new(net: Arc<NetContext>, declared: Vec<HeaderName>, on_decision: DecisionHook) -> Self {
        PinnedClient {
            inner: Arc::new(ClientInner {
                net,
                declared,
                on_decision,
                pool: Mutex::new(HashMap::new()),
                challenge: Mutex::new(None),
            }),
        }
    }

    /// Takes the last authorization challenge a server answered with.
    pub fn take_challenge(&self) -> Option<Challenge> {
        self.inner.challenge.lock().ok()?.take()
    }

    fn record_challenge(&self, challenge: Challenge) {
        if let Ok(mut slot) = self.inner.challenge.lock() {
            *slot = Some(challenge);
        }
    }

    /// Sends a request, following redirects under the policy.
    ///
    /// # Errors
    /// [`NetError`].
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, NetError> {
        self.send_with(method, url, headers, body, true).await
    }

    /// Sends a request; with `follow`, redirects are followed under the policy (each
    /// hop checked), without it a redirect is returned as it came.
    ///
    /// # Errors
    /// [`NetError`].
    pub async fn send_with(
        &self,
        method: Method,
        url: &str,
        mut headers: HeaderMap,
        body: Bytes,
        follow: bool,
    ) -> Result<Response<Incoming>, NetError> {
        let mut url = url::Url::parse(url).map_err(|_| NetError::Blocked {
            block: Block::InvalidUrl,
            target: String::new(),
        })?;
        let mut method = method;
        let mut body = body;
        let mut previous: Option<Target> = None;
        let mut first: Option<Target> = None;
        for hop in 0..=MAX_REDIRECTS {
            let (target, addresses) = self.checked(&url, previous.as_ref(), &mut headers).await?;
            previous = Some(target.clone());
            let first = first.get_or_insert_with(|| target.clone());
            let path = match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_string(),
            };
            let mut response = self
                .dispatch(&target, &addresses, &method, &path, &headers, body.clone())
                .await?;
            if !follow
                || !response.status().is_redirection()
                || response.status() == StatusCode::NOT_MODIFIED
            {
                // A session id belongs to the origin that issued it: one a redirect
                // target hands out would be sent to the original origin next.
                if !first.same_origin(&target) {
                    response
                        .headers_mut()
                        .remove(HeaderName::from_static(SESSION_HEADER));
                }
                return Ok(response);
            }
            if hop == MAX_REDIRECTS {
                return Err(NetError::TooManyRedirects);
            }
            let location = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|l| url.join(l).ok())
                .ok_or(NetError::BadRedirect)?;
            // 301, 302 and 303 after a POST go on as a GET without its body.
            if matches!(
                response.status(),
                StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER
            ) && method == Method::POST
            {
                method = Method::GET;
                body = Bytes::new();
                headers.remove(CONTENT_TYPE);
            }
            url = location;
        }
        Err(NetError::TooManyRedirects)
    }

    /// The URL policy's verdict on `url` (reported as a decision), with DNS pinned:
    /// the target and the addresses to connect to. Leaving `previous`'s origin strips
    /// what must not follow a redirect from `headers`.
    async fn checked(
        &self,
        url: &url::Url,
        previous: Option<&Target>,
        headers: &mut HeaderMap,
    ) -> Result<(Target, Vec<std::net::IpAddr>), NetError> {
        let verdict = match self.inner.net.policy.target(url.as_str()) {
            Ok(target) => {
                if previous.is_some_and(|prev| !prev.same_origin(&target)) {
                    self.strip_credentials(headers);
                }
                self.inner.net.check(&target).await
            }
            Err(refused) => refused,
        };
        let audit = verdict.audit();
        (self.inner.on_decision)(&audit);
        match verdict {
            Verdict::Allowed { target, addresses } => Ok((target, addresses)),
            Verdict::Blocked { block, .. } => Err(NetError::Blocked {
                block,
                target: audit.target,
            }),
        }
    }

    /// What must not follow a redirect to another origin: credentials, declared headers,
    /// and the MCP session id (a bearer of the session on the original server).
    fn strip_credentials(&self, headers: &mut HeaderMap) {
        headers.remove(AUTHORIZATION);
        headers.remove(COOKIE);
        headers.remove(HeaderName::from_static("proxy-authorization"));
        headers.remove(HeaderName::from_static(SESSION_HEADER));
        headers.remove(HeaderName::from_static("last-event-id"));
        for name in &self.inner.declared {
            headers.remove(name);
        }
    }

    async fn dispatch(
        &self,
        target: &Target,
        addrs: &[IpAddr],
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Response<Incoming>, NetError> {
        let mut last_error = None;
        for &addr in addrs {
            let key = PoolKey {
                scheme: target.scheme,
                host: target.host.clone(),
                port: target.port,
                addr,
            };
            let mut sender = match self.pooled(&key) {
                Some(s) => s,
                None => match self.connect(target, addr).await {
                    Ok(s) => s,
                    Err(e) => {
                        last_error = Some(e);
                        continue;
                    }
                },
            };
            let mut request = Request::builder().method(method.clone()).uri(path);
            if let Some(h) = request.headers_mut() {
                h.extend(headers.clone());
                h.insert(
                    HOST,
                    HeaderValue::from_str(&target.host_header())
                        .map_err(|e| http_error(target, e))?,
                );
            }
            let request = request
                .body(Full::new(body.clone()))
                .map_err(|e| http_error(target, e))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| http_error(target, e))?;
            self.put_back(key, sender);
            return Ok(response);
        }
        Err(last_error.unwrap_or_else(|| NetError::Connect {
            target: target.origin(),
            message: "no validated address".into(),
        }))
    }

    /// A ready pooled connection, if any. Busy ones (a streaming response) stay.
    fn pooled(&self, key: &PoolKey) -> Option<SendRequest<Full<Bytes>>> {
        let mut pool = self.inner.pool.lock().ok()?;
        let senders = pool.get_mut(key)?;
        senders.retain(|s| !s.is_closed());
        let ready = senders.iter().position(SendRequest::is_ready)?;
        Some(senders.swap_remove(ready))
    }

    fn put_back(&self, key: PoolKey, sender: SendRequest<Full<Bytes>>) {
        if let Ok(mut pool) = self.inner.pool.lock() {
            let senders = pool.entry(key).or_default();
            if senders.len() < POOL_PER_KEY {
                senders.push(sender);
            }
        }
    }

    async fn connect(
        &self,
        target: &Target,
        addr: IpAddr,
    ) -> Result<SendRequest<Full<Bytes>>, NetError> {
        let origin = target.origin();
        let fail = |message: String| NetError::Connect {
            target: origin.clone(),
            message,
        };
        let tcp = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(addr, target.port)),
        )
        .await
        .map_err(|_| fail("connect timed out".into()))?
        .map_err(|e| fail(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let tcp = QuickAck(tcp);
        if target.scheme == "https" {
            let name = rustls::pki_types::ServerName::try_from(target.server_name())
                .map_err(|e| fail(e.to_string()))?;
            let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.inner.net.tls));
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
                .await
                .map_err(|_| fail("TLS handshake timed out".into()))?
                .map_err(|e| fail(format!("TLS handshake failed: {e}")))?;
            handshake(stream, target).await
        } else {
            handshake(tcp, target).await
        }
    }
}

/// A TCP stream that acknowledges what it reads at once. A server that leaves Nagle's
/// algorithm on (hyper's and axum's default) holds each small write until the previous
/// one is acknowledged; a client delaying its ACKs (Linux: up to 40 ms) would then wait
/// that long for every SSE event after the first. Linux clears the flag as it goes, so
/// it is set again after every read.
struct QuickAck(TcpStream);

impl QuickAck {
    fn acknowledge_at_once(&self) {
        #[cfg(target_os = "linux")]
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }
}

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.acknowledge_at_once();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, data)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

async fn handshake<S>(stream: S, target: &Target) -> Result<SendRequest<Full<Bytes>>, NetError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_error(target, e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn http_error(target: &Target, e: impl std::fmt::Display) -> NetError {
    NetError::Http {
        target: target.origin(),
        message: e.to_string(),
    }
}

fn header_map(
    custom: HashMap<HeaderName, HeaderValue>,
    session: Option<&str>,
    auth: Option<String>,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in custom {
        headers.insert(k, v);
    }
    if let Some(sid) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert(HeaderName::from_static(SESSION_HEADER), sid);
    }
    if let Some(token) = auth.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
        headers.insert(AUTHORIZATION, token);
    }
    headers
}

fn is_media(value: Option<&HeaderValue>, media: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(media))
}

async fn read_limited(body: Incoming, max: usize) -> Result<Bytes, NetError> {
    Limited::new(body, max)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|_| NetError::TooLarge(max))
}

/// The body as SSE events, none larger than `max` bytes.
fn bounded_sse(body: Incoming, max: usize) -> BoxStream<'static, Result<Sse, sse_stream::Error>> {
    let mut since_boundary = 0usize;
    let mut last = 0u8;
    let bytes = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| NetError::Http {
            target: String::new(),
            message: e.to_string(),
        })?;
        for &b in chunk.iter() {
            // An event ends at a blank line; `\r` is ignored so CRLF works too.
            if b == b'\n' && last == b'\n' {
                since_boundary = 0;
            } else if b != b'\r' {
                since_boundary += 1;
                if since_boundary > max {
                    return Err(NetError::TooLarge(max));
                }
            }
            if b != b'\r' {
                last = b;
            }
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

type HttpResult<T> = Result<T, StreamableHttpError<NetError>>;

/// Longest `WWW-Authenticate` header kept.
const MAX_CHALLENGE: usize = 2_048;

/// The value of `name=` (quoted or not) in a `WWW-Authenticate` header.
fn challenge_param(header: &str, name: &str) -> Option<String> {
    let lower = header.to_ascii_lowercase();
    let key = format!("{name}=");
    let mut from = 0;
    while let Some(at) = lower[from..].find(&key) {
        let start = from + at;
        // A whole parameter name: at the start, or after a space or a comma.
        let whole = start == 0 || matches!(lower.as_bytes()[start - 1], b' ' | b',');
        let rest = &header[start + key.len()..];
        if whole {
            return Some(match rest.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next().unwrap_or_default().to_string(),
                None => rest
                    .split([',', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
        from = start + key.len();
    }
    None
}

impl PinnedClient {
    /// What an unsuccessful answer to a POST means. A JSON-RPC error is passed on as
    /// the answer only when it names the request that was sent: an error without an id
    /// (a server refusing a session it forgot with 400 and `"id": null`) would
    /// otherwise answer nothing, and the request would wait for its timeout.
    /// A 401 or a 403 `insufficient_scope` as rmcp's typed errors, recorded for the
    /// connect step that authorizes; `None` for any other answer.
    fn challenge_of<T>(&self, response: &Response<Incoming>) -> Option<HttpResult<T>> {
        let status = response.status();
        let header = response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(|h| crate::result::cap_chars(h, MAX_CHALLENGE));
        match (status, header) {
            (StatusCode::UNAUTHORIZED, header) => {
                let header = header.unwrap_or_else(|| "Bearer".into());
                self.record_challenge(Challenge::Unauthorized(header.clone()));
                Some(Err(StreamableHttpError::AuthRequired(
                    AuthRequiredError::new(header),
                )))
            }
            (StatusCode::FORBIDDEN, Some(header))
                if header.to_ascii_lowercase().contains("insufficient_scope") =>
            {
                self.record_challenge(Challenge::InsufficientScope(header.clone()));
                let scope = challenge_param(&header, "scope");
                Some(Err(StreamableHttpError::InsufficientScope(
                    InsufficientScopeError::new(header, scope),
                )))
            }
            _ => None,
        }
    }

    async fn error_for(
        &self,
        response: Response<Incoming>,
        session_attached: bool,
        sent: Option<&RequestId>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let status = response.status();
        if let Some(challenged) = self.challenge_of(&response) {
            return challenged;
        }
        if status == StatusCode::NOT_FOUND && session_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let is_json = is_media(response.headers().get(CONTENT_TYPE), JSON);
        let body = read_limited(response.into_body(), MAX_JSON_RESPONSE).await?;
        let parsed = is_json
            .then(|| serde_json::from_slice::<ServerJsonRpcMessage>(&body).ok())
            .flatten();
        if let Some(ServerJsonRpcMessage::Error(error)) = &parsed {
            if sent.is_some() && error.id.as_ref() == sent {
                return Ok(StreamableHttpPostResponse::Json(
                    ServerJsonRpcMessage::Error(error.clone()),
                    None,
                ));
            }
            // Whole: the call's error result redacts it first, then caps it.
            let message = crate::text::escape(&error.error.message);
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {message}"),
            )));
        }
        let text = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
        Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
            format!("HTTP {status}: {text}"),
        )))
    }
}

impl StreamableHttpClient for PinnedClient {
    type Error = NetError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let body = serde_json::to_vec(&message)?;
        let mut headers = header_map(custom_headers, session_id.as_deref(), auth_header);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let response = self
            .send(Method::POST, &uri, headers, Bytes::from(body))
            .await?;
        let status = response.status();
        if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if !status.is_success() {
            let sent = match &message {
                ClientJsonRpcMessage::Request(request) => Some(&request.id),
                _ => None,
            };
            return self.error_for(response, session_id.is_some(), sent).await;
        }
        // A notification or response expects nothing back; some servers still answer
        // 200 with a body (even one that is not JSON-RPC). Drain it, bounded, move on.
        if !matches!(message, ClientJsonRpcMessage::Request(_)) {
            let _ = read_limited(response.into_body(), MAX_JSON_RESPONSE).await;
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let session = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let content_type = response.headers().get(CONTENT_TYPE).cloned();
        if is_media(content_type.as_ref(), EVENT_STREAM) {
            let max = limits.max_sse_event_size.min(MAX_SSE_EVENT);
            return Ok(StreamableHttpPostResponse::Sse(
                bounded_sse(response.into_body(), max),
                session,
            ));
        }
        if is_media(content_type.as_ref(), JSON) {
            let max = limits.max_json_response_size.min(MAX_JSON_RESPONSE);
            let body = read_limited(response.into_body(), max).await?;
            let message: ServerJsonRpcMessage = serde_json::from_slice(&body)?;
            return Ok(StreamableHttpPostResponse::Json(message, session));
        }
        Err(StreamableHttpError::UnexpectedContentType(
            content_type.and_then(|v| v.to_str().ok().map(str::to_string)),
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        let headers = header_map(custom_headers, Some(&session_id), auth_header);
        let response = self
            .send(Method::DELETE, &uri, headers, Bytes::new())
            .await?;
        let status = response.status();
        let _ = read_limited(response.into_body(), MAX_ERROR_BODY).await;
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportDeleteSession);
        }
        Ok(())
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<BoxStream<'static, Result<Sse, sse_stream::Error>>> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            MAX_SSE_EVENT,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<BoxStream<'static, Result<Sse, sse_stream::Error>>> {
        let mut headers = header_map(custom_headers, session_id.as_deref(), auth_header);
        headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            headers.insert(HeaderName::from_static(LAST_EVENT_ID), id);
        }
        let response = self.send(Method::GET, &uri, headers, Bytes::new()).await?;
        let status = response.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if status == StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if let Some(challenged) = self.challenge_of(&response) {
            return challenged;
        }
        if !status.is_success() {
            let body = read_limited(response.into_body(), MAX_ERROR_BODY)
                .await
                .unwrap_or_default();
            let text = String::from_utf8_lossy(&body).into_owned();
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {text}"),
            )));
        }
        if !is_media(response.headers().get(CONTENT_TYPE), EVENT_STREAM) {
            return Err(StreamableHttpError::UnexpectedContentType(
                response
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok().map(str::to_string)),
            ));
        }
        Ok(bounded_sse(
            response.into_body(),
            max_sse_event_size.min(MAX_SSE_EVENT),
        ))
    }
}
