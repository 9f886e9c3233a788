//! Streamable HTTP servers, reached through the [`PinnedClient`] so every request is
//! resolved, checked and pinned by the host's URL policy, each decision reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::client::{ListedTools, McpClient, ServerSignals, StartError};
use super::guard::{EndCause, Guarded};
use super::{ConnectError, ConnectErrorKind};
use crate::core::DeclaredUrl;
use crate::net::{NetContext, PinnedClient, client::DecisionHook};

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

/// Connects, initializes and lists tools within `timeout`.
pub(super) async fn connect(
    launch: HttpLaunch,
    signals: Arc<ServerSignals>,
    timeout: Duration,
) -> Result<(McpClient, ListedTools), ConnectError> {
    let failed = |message: String| ConnectError {
        kind: ConnectErrorKind::Failed,
        message,
        logged: None,
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
    let client = PinnedClient::new(launch.net, declared, launch.on_decision);
    // Userinfo never travels in the URI handed to rmcp: it is a secret of the
    // declaration, not part of any request line.
    let mut uri = launch.url.url().clone();
    let _ = uri.set_username("");
    let _ = uri.set_password(None);
    let config = StreamableHttpClientTransportConfig::with_uri(uri.as_str()).custom_headers(custom);
    let (transport, closed) = Guarded::new(
        StreamableHttpClientTransport::with_client(client, config),
        Arc::default(),
        EndCause::default(),
    );
    let transport = transport.ending_on_send_error();
    match super::client::initialize_and_list(transport, signals, timeout, closed.clone()).await {
        Ok((service, listed)) => Ok((McpClient::new(service, None, closed), listed)),
        Err(StartError::Failed(message)) => Err(failed(message)),
        Err(StartError::TimedOut) => Err(ConnectError {
            kind: ConnectErrorKind::TimedOut,
            message: format!(
                "no answer within the connect timeout of {:.1}s (initialize and tools/list)",
                timeout.as_secs_f64()
            ),
            logged: None,
        }),
    }
}
