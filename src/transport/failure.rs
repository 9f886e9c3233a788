//! One request to a server: sent with its timeout, cancelled on the server when its
//! caller goes away, and why it did not produce a result, classified from rmcp's errors.

use std::time::Duration;

use rmcp::model::{CancelledNotificationParam, ClientRequest, RequestId, ServerResult};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};

/// Sends `request` and waits for its answer within `timeout` (none left: not sent).
///
/// # Errors
/// [`CallFailure`], unredacted.
pub(crate) async fn send(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<ServerResult, CallFailure> {
    if timeout.is_zero() {
        return Err(CallFailure::Timeout(timeout));
    }
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| classify(&e, timeout))?;
    // A caller that drops this future has given up: the server is told.
    let mut abandoned = Abandoned::armed(peer, &handle.id);
    let answer = handle.await_response().await;
    abandoned.disarm();
    answer.map_err(|e| classify(&e, timeout))
}

/// Sends `notifications/cancelled` for a request whose caller went away before its
/// answer; disarmed (no peer) once the answer or the timeout came.
pub(crate) struct Abandoned {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Abandoned {
    /// Armed for request `id` on `peer`.
    pub(crate) fn armed(peer: &Peer<RoleClient>, id: &RequestId) -> Self {
        Abandoned {
            peer: Some(peer.clone()),
            id: id.clone(),
        }
    }

    /// The answer or the timeout came: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let (Some(peer), Ok(runtime)) = (self.peer.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the caller abandoned the request".into()),
        );
        runtime.spawn(async move {
            let _ = peer.notify_cancelled(params).await;
        });
    }
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// `timeout_seconds` passed; the request was cancelled on the server.
    Timeout(Duration),
    /// The request could not be sent (the connection was already gone): the server
    /// never saw it.
    NotSent(String),
    /// The connection is gone (process exited, transport closed).
    Closed(String),
    /// The server answered with a protocol error.
    Protocol(String),
    /// The host cancelled it (a task, through its handle); the server was told.
    Cancelled(String),
}

impl CallFailure {
    /// Its kind in one word (`timeout`, `not_sent`, `closed`, `protocol`, `cancelled`),
    /// for a span's error type.
    pub fn kind(&self) -> &'static str {
        match self {
            CallFailure::Timeout(_) => "timeout",
            CallFailure::NotSent(_) => "not_sent",
            CallFailure::Closed(_) => "closed",
            CallFailure::Protocol(_) => "protocol",
            CallFailure::Cancelled(_) => "cancelled",
        }
    }
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallFailure::Timeout(d) => write!(
                f,
                "the call timed out after {:.1}s and was cancelled on the server",
                d.as_secs_f64()
            ),
            CallFailure::Closed(m) | CallFailure::NotSent(m) => {
                write!(f, "the server connection is closed: {m}")
            }
            CallFailure::Protocol(m) => write!(f, "the server returned an error: {m}"),
            CallFailure::Cancelled(m) => write!(f, "{m}; the server was told"),
        }
    }
}

pub(crate) fn classify(e: &ServiceError, timeout: Duration) -> CallFailure {
    match e {
        ServiceError::Timeout { .. } => CallFailure::Timeout(timeout),
        ServiceError::McpError(data) => CallFailure::Protocol(data.message.to_string()),
        ServiceError::TransportClosed
        | ServiceError::TransportSend(_)
        | ServiceError::Cancelled { .. } => CallFailure::Closed(e.to_string()),
        other => CallFailure::Protocol(other.to_string()),
    }
}

pub(crate) fn service_error(e: &ServiceError) -> String {
    match e {
        ServiceError::McpError(data) => data.message.to_string(),
        other => other.to_string(),
    }
}
