//! Streamable HTTP servers, reached through the [`PinnedClient`] so every request is
//! resolved, checked and pinned by the host's URL policy.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use std::sync::Arc;

use super::client::{ListedTools, McpClient, ServerSignals, StartError};
use super::guard::{EndCause, Guarded};
use crate::net::PinnedClient;

/// Connects, initializes and lists tools within `timeout`.
///
/// `url` must already have passed the policy (it is checked again for every request);
/// `headers` are the declared headers after interpolation.
///
/// # Errors
/// An unredacted message (the caller redacts it).
pub async fn connect_http(
    url: &str,
    headers: &BTreeMap<String, String>,
    client: PinnedClient,
    signals: Arc<ServerSignals>,
    timeout: Duration,
) -> Result<(McpClient, ListedTools), String> {
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| format!("header `{name}` is not a valid name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header `{name}` is not valid in HTTP"))?;
        custom.insert(name, value);
    }
    // Userinfo never travels in the URI handed to rmcp: it is a secret of the
    // declaration, not part of any request line.
    let mut uri = url::Url::parse(url).map_err(|e| format!("invalid url: {e}"))?;
    let _ = uri.set_username("");
    let _ = uri.set_password(None);
    let config = StreamableHttpClientTransportConfig::with_uri(uri.as_str()).custom_headers(custom);
    let (transport, closed) = Guarded::new(
        StreamableHttpClientTransport::with_client(client, config),
        Arc::default(),
        EndCause::default(),
    );
    match super::client::initialize_and_list(transport, signals, timeout, closed.clone()).await {
        Ok((service, listed)) => Ok((McpClient::new(service, None, closed), listed)),
        Err(StartError::Failed(message)) => Err(message),
        Err(StartError::TimedOut) => Err(format!(
            "no answer within the connect timeout of {:.1}s (initialize and tools/list)",
            timeout.as_secs_f64()
        )),
    }
}
