//! The streamable HTTP transport of MCP over a pinned client: POST, GET and DELETE as
//! rmcp's client interface asks, the session header, challenges and error answers read
//! within bounds.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use http::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderName, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpClient, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::wire::{bounded_sse, header_map, is_media, read_limited};
use super::{
    Challenge, EVENT_STREAM, JSON, LAST_EVENT_ID, MAX_ERROR_BODY, MAX_JSON_RESPONSE, MAX_SSE_EVENT,
    NetError, PinnedClient, SESSION_HEADER,
};

pub(super) type HttpResult<T> = Result<T, StreamableHttpError<NetError>>;

/// Longest `WWW-Authenticate` header kept.
pub(super) const MAX_CHALLENGE: usize = 2_048;

/// The value of `name=` (quoted or not) in a `WWW-Authenticate` header.
pub(super) fn challenge_param(header: &str, name: &str) -> Option<String> {
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

/// What a 400 to `server/discover` without a challenge and without an error naming the
/// request means: a 2025-era server, which refuses the unknown protocol version in the
/// request's headers that way (the TypeScript SDK names no request in its error). It
/// becomes an error that names the discovery, so that `auto` falls back to
/// `initialize`: a version mismatch, the only failure a fallback may follow. A modern
/// server's own 400 names the request and is passed on as it is; a 401, a 403, a 400
/// with a challenge, a redirect the policy refuses, DNS or TLS fail the server.
fn legacy_answer(id: RequestId) -> StreamableHttpPostResponse {
    let error = ErrorData::invalid_request(
        "the server answered server/discover with HTTP 400: it speaks an older MCP",
        None,
    );
    StreamableHttpPostResponse::Json(ServerJsonRpcMessage::error(error, Some(id)), None)
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
        discovery: bool,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let status = response.status();
        if let Some(challenged) = self.challenge_of(&response) {
            return challenged;
        }
        // A 400 to `server/discover` may be a legacy server's (see `legacy_answer`);
        // one that carries a challenge is an authorization failure, never that. Any
        // other status to a discovery (a 403, a 5xx) is a failure whatever its body
        // says: only these statuses may carry the server's own answer to it.
        let answerable =
            status == StatusCode::BAD_REQUEST && !response.headers().contains_key(WWW_AUTHENTICATE);
        let legacy = discovery && answerable && !session_attached;
        if status == StatusCode::NOT_FOUND && session_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let is_json = is_media(response.headers().get(CONTENT_TYPE), JSON);
        let body = read_limited(response.into_body(), MAX_JSON_RESPONSE).await?;
        let parsed = is_json
            .then(|| serde_json::from_slice::<ServerJsonRpcMessage>(&body).ok())
            .flatten();
        if let Some(ServerJsonRpcMessage::Error(error)) = &parsed
            && sent.is_some()
            && error.id.as_ref() == sent
            && (!discovery || answerable)
        {
            // A modern server's own rejection (a header mismatch, a missing capability,
            // another version) names the request: rmcp decides on it.
            return Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::Error(error.clone()),
                None,
            ));
        }
        if legacy && let Some(id) = sent {
            return Ok(legacy_answer(id.clone()));
        }
        if let Some(ServerJsonRpcMessage::Error(error)) = &parsed {
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
            let discovery = matches!(&message, ClientJsonRpcMessage::Request(request)
                if matches!(request.request, ClientRequest::DiscoverRequest(_)));
            return self
                .error_for(response, session_id.is_some(), sent, discovery)
                .await;
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
