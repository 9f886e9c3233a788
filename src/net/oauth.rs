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

    /// Learns the credentials of a token, refresh or registration exchange: the fields
    /// of [`CREDENTIAL_FIELDS`] at the top of its form or JSON body, strings only, at most
    /// [`MAX_LEARNED_PER_BODY`] a body, with one rebuild of the connection's automaton.
    /// Metadata documents carry no credential of ours and are not read for any (a
    /// server could otherwise make every word it chose a "secret" hidden from
    /// previews, or make each learned value a rebuild).
    fn learn(&self, step: OAuthStep, body: &[u8]) {
        let Some(learned) = &self.learned else {
            return;
        };
        if !matches!(
            step,
            OAuthStep::Token | OAuthStep::Refresh | OAuthStep::Registration
        ) {
            return;
        }
        let mut found: Vec<String> = Vec::new();
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(serde_json::Value::Object(map)) => {
                for (key, value) in map {
                    if let (true, serde_json::Value::String(s)) =
                        (CREDENTIAL_FIELDS.contains(&key.as_str()), value)
                    {
                        found.push(s);
                    }
                }
            }
            Ok(_) => {}
            Err(_) => {
                for (key, value) in url::form_urlencoded::parse(body) {
                    if CREDENTIAL_FIELDS.contains(&key.as_ref()) {
                        found.push(value.into_owned());
                    }
                }
            }
        }
        found.truncate(MAX_LEARNED_PER_BODY);
        learned.learn_all(found.iter().map(|v| ("oauth_credential", v.as_str())));
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
        let uri = parts.uri.to_string();
        let step = OAuthStep::of(&parts.method, &uri, &body);
        self.learn(step, &body);
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
        self.learn(step, response.body());
        Ok(response)
    }
}

/// The fields of a token, refresh or registration exchange that carry a credential.
pub const CREDENTIAL_FIELDS: &[&str] = &[
    "access_token",
    "refresh_token",
    "id_token",
    "client_secret",
    "registration_access_token",
    "code",
    "code_verifier",
    "client_assertion",
    "assertion",
    "device_code",
];

/// Most credentials learned from one OAuth body (a real one carries a handful).
pub const MAX_LEARNED_PER_BODY: usize = 8;

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

    fn learning_client() -> (PinnedOAuth, Arc<crate::redact::Learned>) {
        let net = NetContext::new(
            super::super::UrlPolicy::with_trusted(Vec::<ipnet::IpNet>::new()),
            Arc::new(super::super::StaticResolver::new()),
            &[],
        )
        .unwrap();
        let learned = Arc::new(crate::redact::Learned::default());
        let client =
            PinnedOAuth::new(Arc::new(net), Arc::new(|_, _| {})).learning(Arc::clone(&learned));
        (client, learned)
    }

    /// Only the credential fields of token, refresh and registration exchanges are
    /// learned, at most [`MAX_LEARNED_PER_BODY`] a body: a metadata document of a
    /// hundred thousand "tokens" teaches nothing, and `none`, `Bearer` stay words.
    #[test]
    fn only_credentials_of_exchanges_are_learned() {
        let (client, learned) = learning_client();
        let r = crate::redact::Redactor::new().with_learned(learned);
        let flood: Vec<String> = (0..100_000).map(|n| format!("tok{n:06}")).collect();
        let metadata = serde_json::json!({
            "token_endpoint_auth_methods_supported": flood,
            "access_token": "metadata-access-1",
        });
        let body = serde_json::to_vec(&metadata).unwrap();
        let started = std::time::Instant::now();
        client.learn(OAuthStep::ServerMetadata, &body);
        client.learn(OAuthStep::ResourceMetadata, &body);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(
            r.text("tok000001 metadata-access-1", crate::redact::View::Model),
            "tok000001 metadata-access-1"
        );
        let token = serde_json::json!({
            "access_token": "at-secret-1", "refresh_token": "rt-secret-2",
            "token_type": "Bearer", "scope": "none", "nested": {"id_token": "deep-3333"}
        });
        client.learn(OAuthStep::Token, &serde_json::to_vec(&token).unwrap());
        client.learn(
            OAuthStep::Token,
            b"grant_type=authorization_code&code=code-4444&code_verifier=ver-5555",
        );
        let shown = r.text(
            "at-secret-1 rt-secret-2 code-4444 ver-5555 Bearer none deep-3333",
            crate::redact::View::Model,
        );
        assert_eq!(
            shown,
            "<redacted> <redacted> <redacted> <redacted> Bearer none deep-3333"
        );
    }

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
