//! Why a request to a server did not produce a result, classified from rmcp's errors.

use std::time::Duration;

use rmcp::ServiceError;

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
