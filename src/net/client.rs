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

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, COOKIE, HOST, LOCATION};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use tokio::net::TcpStream;

mod streamable;
mod wire;

use super::policy::{Answer, AuditView, Block, Host, Target, UrlPolicy, Verdict};
use super::resolver::Resolver;
use wire::{QuickAck, handshake, http_error};

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
        let tcp = QuickAck::new(tcp);
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
