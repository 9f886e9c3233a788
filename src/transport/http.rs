//! Streamable HTTP servers, reached through the [`PinnedClient`] so every request is
//! resolved, checked and pinned by the host's URL policy, each decision reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::client::{McpClient, StartError};
use super::guard::{EndCause, Guarded};
use super::requests::ListedTools;
use super::signals::ServerSignals;
use super::{ConnectError, ConnectErrorKind, StageKind};
use crate::core::DeclaredUrl;
use crate::net::{Challenge, NetContext, PinnedClient, client::DecisionHook};
use rmcp::transport::auth::{AuthClient, AuthorizationManager};

/// Everything needed to reach one streamable HTTP server, already authorized and
/// interpolated.
pub(crate) struct HttpLaunch {
    /// The declared URL (its origin passed the policy; every request is checked again).
    pub url: DeclaredUrl,
    /// The declared headers, interpolated.
    pub headers: BTreeMap<String, String>,
    /// The runtime's policy, resolver and TLS roots.
    pub net: Arc<NetContext>,
    /// Called with the audit view of every request's decision.
    pub on_decision: DecisionHook,
    /// How this connection is authorized when the server asks.
    pub oauth: super::oauth::OAuthLaunch,
    /// The protocol era to speak.
    pub protocol: crate::core::Protocol,
}

impl std::fmt::Debug for HttpLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values are secrets; the URL's Debug shows its origin only.
        f.debug_struct("HttpLaunch")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Connects, initializes and lists tools within `timeout` (each attempt; a user's
/// authorization in between has its own bound). A server that answers 401 is authorized
/// (stored tokens first, then the flow in `oauth.rs`) and reached again with the token;
/// every token the flow stores is learned by the connection's redactor on the way.
pub(super) async fn connect(
    launch: HttpLaunch,
    signals: Arc<ServerSignals>,
    timeout: Duration,
) -> Result<(McpClient, ListedTools), ConnectError> {
    let failed = |message: String| ConnectError {
        kind: ConnectErrorKind::Failed,
        message,
        logged: None,
        stderr_tail: Vec::new(),
    };
    let mut custom = HashMap::new();
    for (name, value) in &launch.headers {
        let header = HeaderName::try_from(name.as_str())
            .map_err(|_| failed(format!("header `{name}` is not a valid name")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| failed(format!("the value of header `{name}` is not valid in HTTP")))?;
        custom.insert(header, value);
    }
    // Declared headers are dropped on a cross-origin redirect, like credentials.
    let declared = custom.keys().cloned().collect();
    let client = PinnedClient::new(
        Arc::clone(&launch.net),
        declared,
        launch.on_decision.clone(),
    );
    // Userinfo never travels in the URI handed to rmcp: it is a secret of the
    // declaration, not part of any request line.
    let mut uri = launch.url.url().clone();
    let _ = uri.set_username("");
    let _ = uri.set_password(None);
    let config = StreamableHttpClientTransportConfig::with_uri(uri.as_str()).custom_headers(custom);
    // The resource OAuth names: no query or fragment (a query value may be a secret of
    // the declaration, and would otherwise travel in `resource=` to the authorization
    // server and into the URL a browser opens).
    let mut resource = uri.clone();
    resource.set_query(None);
    resource.set_fragment(None);
    let base = resource.as_str().to_string();
    // One attempt, with a token (through `StepUp`) or without.
    let attempt = |manager: Option<AuthorizationManager>| {
        let (client, config, signals) = (client.clone(), config.clone(), Arc::clone(&signals));
        let (base, launch) = (base.clone(), &launch);
        async move {
            match manager {
                Some(manager) => {
                    let authorized = super::oauth::StepUp::new(
                        AuthClient::new(client, manager),
                        base.clone(),
                        Arc::clone(&launch.net),
                        launch.oauth.clone(),
                    );
                    start(authorized, config, signals, (launch.protocol, timeout)).await
                }
                None => start(client, config, signals, (launch.protocol, timeout)).await,
            }
        }
    };
    // Boxed, as the authorization below: the OAuth futures are tens of KiB that every
    // connect's future, stdio ones included, would otherwise carry and copy.
    let stored = Box::pin(super::oauth::stored(&base, &launch.net, &launch.oauth));
    let stored = tokio::time::timeout(timeout, stored).await.ok().flatten();
    let first = attempt(stored).await;
    let challenge = match (first, client.take_challenge()) {
        (Ok(connected), _) => return Ok(connected),
        (Err(_), Some(Challenge::Unauthorized(c) | Challenge::InsufficientScope(c))) => c,
        (Err(e), None) => return Err(e),
    };
    let authorize = Box::pin(super::oauth::authorize(
        &base,
        &challenge,
        &launch.net,
        &launch.oauth,
    ));
    let manager = signals
        .stages
        .timed(StageKind::Authorize, authorize)
        .await
        .map_err(|e| ConnectError {
            kind: ConnectErrorKind::Authorization,
            message: e.0,
            logged: None,
            stderr_tail: Vec::new(),
        })?;
    attempt(Some(manager)).await
}

/// One attempt: the transport over `client`, initialize and `tools/list`.
async fn start<C>(
    client: C,
    config: StreamableHttpClientTransportConfig,
    signals: Arc<ServerSignals>,
    (protocol, timeout): (crate::core::Protocol, Duration),
) -> Result<(McpClient, ListedTools), ConnectError>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient
        + Clone
        + Send
        + Sync
        + 'static,
    C::Error: std::error::Error + Send + Sync + 'static,
{
    use crate::core::Protocol;
    if protocol != Protocol::Auto {
        return start_in(client, config, signals, (protocol, timeout))
            .await
            .map_err(|(e, _)| e);
    }
    // `auto` over HTTP: discovery, then `initialize` on a new transport only when the
    // server answered the discovery as a 2025-era server does. Never after silence: a
    // stalled network (DNS, connect, TLS, an authorization step-up) is a failure, not
    // a reason to speak the older era. Both steps share the connect timeout.
    let started = std::time::Instant::now();
    let modern = (Protocol::V2026_07_28, timeout);
    let first = start_in(client.clone(), config.clone(), Arc::clone(&signals), modern).await;
    match first {
        Err((_, true)) => {
            let left = timeout.saturating_sub(started.elapsed());
            start_in(client, config, signals, (Protocol::V2025_11_25, left))
                .await
                .map_err(|(e, _)| e)
        }
        other => other.map_err(|(e, _)| e),
    }
}

/// One start in one era; a failure says whether it was a legacy server's answer to a
/// discovery ([`StartError::Legacy`]).
async fn start_in<C>(
    client: C,
    config: StreamableHttpClientTransportConfig,
    signals: Arc<ServerSignals>,
    (protocol, timeout): (crate::core::Protocol, Duration),
) -> Result<(McpClient, ListedTools), (ConnectError, bool)>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient + Send + Sync + 'static,
    C::Error: std::error::Error + Send + Sync + 'static,
{
    let (transport, closed) = Guarded::new(
        StreamableHttpClientTransport::with_client(client, config),
        Arc::default(),
        EndCause::default(),
    );
    let transport = transport.ending_on_send_error();
    match super::client::initialize_and_list(transport, signals, protocol, timeout, closed.clone())
        .await
    {
        Ok((service, listed, listener)) => {
            Ok((McpClient::new(service, listener, None, closed), listed))
        }
        Err(e) => {
            let legacy = matches!(e, StartError::Legacy(_));
            let (kind, message) = e.described(timeout, "initialize and tools/list");
            let error = ConnectError {
                kind,
                message,
                logged: None,
                stderr_tail: Vec::new(),
            };
            Err((error, legacy))
        }
    }
}
