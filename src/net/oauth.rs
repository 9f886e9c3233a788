//! Every OAuth request of a connection (metadata discovery, registration, token,
//! refresh, revocation) through the same fail-closed URL policy and DNS-pinned client
//! as its MCP traffic. rmcp's OAuth state machine asks for each request through its
//! `OAuthHttpClient` trait; [`PinnedOAuth`] carries them, so an authorization server
//! named by a protected resource document on a blocked address (cloud metadata, a
//! private network, loopback without trust) is refused before any byte is sent to it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
};

use super::client::{NetContext, NetError, PinnedClient};
use super::policy::AuditView;

/// Most bytes of one OAuth response read.
pub const MAX_OAUTH_RESPONSE: usize = 1024 * 1024;
/// The longest one OAuth request may take when rmcp names no timeout.
pub const OAUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// Which OAuth step a request belongs to, as far as its method, URL and body tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OAuthStep {
    /// Protected resource metadata (RFC 9728).
    ResourceMetadata,
    /// Authorization server metadata (RFC 8414, OpenID discovery).
    ServerMetadata,
    /// Dynamic client registration (RFC 7591).
    Registration,
    /// A token request (authorization code, client credentials).
    Token,
    /// A refresh-token request.
    Refresh,
    /// Token revocation (RFC 7009).
    Revocation,
    /// Anything else (a client metadata document, an authorization URL).
    Other,
}

impl OAuthStep {
    /// The step of `request`.
    pub fn of(method: &http::Method, uri: &str, body: &[u8]) -> Self {
        let path = uri.split(['?', '#']).next().unwrap_or_default();
        if path.contains("/.well-known/oauth-protected-resource") {
            return OAuthStep::ResourceMetadata;
        }
        if path.contains("/.well-known/oauth-authorization-server")
            || path.contains("/.well-known/openid-configuration")
        {
            return OAuthStep::ServerMetadata;
        }
        if method != http::Method::POST {
            return OAuthStep::Other;
        }
        let form = String::from_utf8_lossy(&body[..body.len().min(4096)]);
        if form.contains("grant_type=refresh_token") {
            OAuthStep::Refresh
        } else if form.contains("grant_type=") {
            OAuthStep::Token
        } else if path.ends_with("/revoke") || form.contains("token_type_hint=") {
            OAuthStep::Revocation
        } else if form.trim_start().starts_with('{') {
            OAuthStep::Registration
        } else {
            OAuthStep::Other
        }
    }
}

/// Called with each OAuth request's step and the audit view of its URL decision.
pub type OAuthDecisionHook = Arc<dyn Fn(OAuthStep, &AuditView) + Send + Sync>;

/// rmcp's OAuth requests through the URL policy and pinned addresses.
pub struct PinnedOAuth {
    net: Arc<NetContext>,
    on_decision: OAuthDecisionHook,
    /// The connection's learned secrets: every credential a request sends or an answer
    /// carries (a registered client secret, a code and its verifier, tokens) is one of
    /// them from the moment it passes here.
    learned: Option<Arc<crate::redact::Learned>>,
}

impl PinnedOAuth {
    /// OAuth requests under `net`'s policy, each decision reported with its step.
    pub fn new(net: Arc<NetContext>, on_decision: OAuthDecisionHook) -> Self {
        PinnedOAuth {
            net,
            on_decision,
            learned: None,
        }
    }

    /// These requests, teaching `learned` every credential that passes.
    pub fn learning(mut self, learned: Arc<crate::redact::Learned>) -> Self {
        self.learned = Some(learned);
        self
    }

    /// Learns the credentials of a request's form body or an answer's JSON body.
    fn learn(&self, body: &[u8]) {
        let Some(learned) = &self.learned else {
            return;
        };
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
            learn_json(learned, &value, None, 0);
            return;
        }
        for (key, value) in url::form_urlencoded::parse(body) {
            if is_credential_field(&key) {
                learned.learn("oauth_credential", &value);
            }
        }
    }

    /// The body of a `GET` of `url` that answered 200 (no redirect followed).
    pub async fn get(&self, url: &str) -> Result<Vec<u8>, NetError> {
        let invalid = || NetError::Blocked {
            block: super::policy::Block::InvalidUrl,
            target: String::new(),
        };
        let target = url::Url::parse(url)
            .map_err(|_| invalid())?
            .origin()
            .ascii_serialization();
        let request = http::Request::get(url)
            .body(Vec::new())
            .map_err(|_| invalid())?;
        let response = self.fetch(request, false, OAUTH_TIMEOUT).await?;
        if response.status() != http::StatusCode::OK {
            return Err(NetError::Http {
                target,
                message: format!("answered HTTP {}", response.status().as_u16()),
            });
        }
        Ok(response.into_body())
    }

    async fn execute_request(
        &self,
        request: OAuthHttpRequest,
    ) -> Result<http::Response<Vec<u8>>, NetError> {
        let follow = matches!(request.redirect_policy, OAuthHttpRedirectPolicy::Follow);
        let timeout = request.timeout.unwrap_or(OAUTH_TIMEOUT).min(OAUTH_TIMEOUT);
        self.fetch(request.request, follow, timeout).await
    }

    async fn fetch(
        &self,
        request: http::Request<Vec<u8>>,
        follow: bool,
        timeout: Duration,
    ) -> Result<http::Response<Vec<u8>>, NetError> {
        let (parts, body) = request.into_parts();
        self.learn(&body);
        let uri = parts.uri.to_string();
        let step = OAuthStep::of(&parts.method, &uri, &body);
        let hook = Arc::clone(&self.on_decision);
        // One client per request: each carries its step into the decision events.
        let client = PinnedClient::new(
            Arc::clone(&self.net),
            Vec::new(),
            Arc::new(move |audit| hook(step, audit)),
        );
        // One bound for the whole exchange, the body included: a server that trickles
        // its answer a byte at a time does not hold the connect step.
        let exchange = async move {
            let response = client
                .send_with(parts.method, &uri, parts.headers, Bytes::from(body), follow)
                .await?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::Limited::new(body, MAX_OAUTH_RESPONSE)
                .collect()
                .await
                .map_err(|_| NetError::TooLarge(MAX_OAUTH_RESPONSE))?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body.to_vec()))
        };
        let response = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| NetError::Connect {
                target: String::new(),
                message: format!("no whole answer within {}s", timeout.as_secs()),
            })??;
        self.learn(response.body());
        Ok(response)
    }
}

/// Whether a form or JSON field of an OAuth exchange carries a credential: any
/// sensitive name (`client_secret`, `access_token`, `refresh_token`, `id_token`, ...)
/// and the code, its verifier and assertions.
fn is_credential_field(name: &str) -> bool {
    crate::redact::is_sensitive_field(name)
        || matches!(
            name,
            "code"
                | "code_verifier"
                | "assertion"
                | "client_assertion"
                | "device_code"
                | "user_code"
        )
}

/// Learns every string under a credential field of `value` (at most 16 levels down).
fn learn_json(
    learned: &crate::redact::Learned,
    value: &serde_json::Value,
    under: Option<&str>,
    depth: usize,
) {
    if depth > 16 {
        return;
    }
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                let under =
                    under.or_else(|| is_credential_field(key).then_some("oauth_credential"));
                learn_json(learned, v, under, depth + 1);
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                learn_json(learned, item, under, depth + 1);
            }
        }
        serde_json::Value::String(s) if under.is_some() => learned.learn("oauth_credential", s),
        _ => {}
    }
}

impl OAuthHttpClient for PinnedOAuth {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            self.execute_request(request)
                .await
                .map_err(|e| Box::new(e) as rmcp::transport::auth::OAuthHttpClientError)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_told_apart() {
        let post = http::Method::POST;
        let get = http::Method::GET;
        let cases: &[(&http::Method, &str, &[u8], OAuthStep)] = &[
            (
                &get,
                "https://a.test/.well-known/oauth-protected-resource/mcp",
                b"",
                OAuthStep::ResourceMetadata,
            ),
            (
                &get,
                "https://a.test/.well-known/oauth-authorization-server",
                b"",
                OAuthStep::ServerMetadata,
            ),
            (
                &get,
                "https://a.test/t/.well-known/openid-configuration",
                b"",
                OAuthStep::ServerMetadata,
            ),
            (
                &post,
                "https://a.test/register",
                br#"{"redirect_uris":["x"]}"#,
                OAuthStep::Registration,
            ),
            (
                &post,
                "https://a.test/token",
                b"grant_type=authorization_code&code=c",
                OAuthStep::Token,
            ),
            (
                &post,
                "https://a.test/token",
                b"grant_type=client_credentials",
                OAuthStep::Token,
            ),
            (
                &post,
                "https://a.test/token",
                b"grant_type=refresh_token&refresh_token=r",
                OAuthStep::Refresh,
            ),
            (
                &post,
                "https://a.test/revoke",
                b"token=t&token_type_hint=access_token",
                OAuthStep::Revocation,
            ),
            (&get, "https://a.test/client.json", b"", OAuthStep::Other),
        ];
        for (method, uri, body, step) in cases {
            assert_eq!(OAuthStep::of(method, uri, body), *step, "{uri}");
        }
    }
}
