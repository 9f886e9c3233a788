//! The step-up of the MCP authorization specification: a 403 `insufficient_scope` asks the
//! user for the broader authorization, once per request, and the request is retried; a
//! 401 on a connection already authorized is authorized again the same way (the
//! server's authorization server may have changed).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthClient;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use crate::net::{NetContext, NetError, PinnedClient};

use super::{OAuthLaunch, authorize, failed};

/// An authorized client that answers a 403 `insufficient_scope` by asking the user for
/// the broader authorization (once per request) and retrying: the step-up of the MCP
/// authorization specification. A 401 with a rejected token is refreshed by rmcp's
/// `AuthClient` inside.
#[derive(Clone)]
pub(crate) struct StepUp {
    inner: AuthClient<PinnedClient>,
    base: String,
    net: Arc<NetContext>,
    launch: OAuthLaunch,
    /// Step-ups of this connection so far, one at a time: a server answering every
    /// request with `insufficient_scope` gets [`MAX_STEP_UPS`], then plain failures.
    ups: Arc<tokio::sync::Mutex<usize>>,
    /// Authorizations this connection got from a step-up: a request refused under an
    /// older one is retried with the newer, not asked again.
    generation: Arc<AtomicUsize>,
    /// Whether the server accepted a request of this connection: only then is a 401
    /// an authorization gone stale (before, the connect's own authorization decides).
    served: Arc<AtomicBool>,
}

/// Most step-up authorizations one connection asks for.
pub const MAX_STEP_UPS: usize = 2;

pub(super) type HttpError = StreamableHttpError<NetError>;

/// An authorization error of a request (a refresh the authorization server refused)
/// in words of ours: rmcp's text can carry the server's `error_description`.
pub(super) fn described(error: HttpError) -> HttpError {
    match error {
        StreamableHttpError::Auth(e) => {
            StreamableHttpError::UnexpectedServerResponse(failed("refresh", &e).0.into())
        }
        other => other,
    }
}

impl StepUp {
    pub(crate) fn new(
        inner: AuthClient<PinnedClient>,
        base: String,
        net: Arc<NetContext>,
        launch: OAuthLaunch,
    ) -> Self {
        StepUp {
            inner,
            base,
            net,
            launch,
            ups: Arc::default(),
            generation: Arc::default(),
            served: Arc::default(),
        }
    }

    /// Authorizes again for `challenge`, unless another request already did since
    /// `before` (the generation its request was sent under).
    async fn step_up(&self, challenge: &str, before: usize) -> Result<(), HttpError> {
        let mut ups = self.ups.lock().await;
        if self.generation.load(Ordering::SeqCst) != before {
            return Ok(());
        }
        if *ups >= MAX_STEP_UPS {
            return Err(StreamableHttpError::UnexpectedServerResponse(
                format!(
                    "the server asked to be authorized again (a broader scope, or after refusing its token) more than {MAX_STEP_UPS} times"
                )
                .into(),
            ));
        }
        *ups += 1;
        let manager = authorize(&self.base, challenge, &self.net, &self.launch)
            .await
            .map_err(|e| StreamableHttpError::UnexpectedServerResponse(e.0.into()))?;
        *self.inner.auth_manager.lock().await = manager;
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

impl StreamableHttpClient for StepUp {
    type Error = NetError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
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
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let send = || {
            self.inner.post_message_with_response_limits(
                Arc::clone(&uri),
                message.clone(),
                session_id.clone(),
                auth_header.clone(),
                custom_headers.clone(),
                limits,
            )
        };
        let before = self.generation.load(Ordering::SeqCst);
        let answered = match send().await {
            Err(StreamableHttpError::InsufficientScope(challenge)) => {
                self.step_up(&challenge.www_authenticate_header, before)
                    .await?;
                send().await
            }
            // A token the server accepted before is refused now, and no refresh helped:
            // authorize again from the server's current metadata (its authorization
            // server may have moved, SEP-2352), under the same budget as a step-up.
            Err(StreamableHttpError::AuthRequired(challenge))
                if self.served.load(Ordering::SeqCst) =>
            {
                self.step_up(&challenge.www_authenticate_header, before)
                    .await?;
                send().await
            }
            answered => answered,
        };
        if answered.is_ok() {
            self.served.store(true, Ordering::SeqCst);
        }
        answered.map_err(described)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(described)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map_err(described)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(described)
    }
}
