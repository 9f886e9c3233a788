//! A connected MCP client, whatever its transport.

// Roots and logging are deprecated by SEP-2577 for the 2026-07-28 revision; this
// client speaks 2025-11-25, where both are current.
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, Implementation, InitializeRequestParams, ProtocolVersion};
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use rmcp::model::{
    ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::transport::Transport;
use rmcp::{Peer, RoleClient};
use tokio::sync::watch;

use super::guard::TransportEnd;
use super::listen::Listener;
use super::notices::{Notice, Progress};
use super::requests::{ListedTools, list_tools};
use super::signals::{PROMPTS, RESOURCES, ServerSignals, TOOLS};
use super::{ConnectErrorKind, StageKind};
use crate::core::Protocol;
use crate::process::{ChildProcess, CloseReport};

/// An elicitation's params that rmcp's typed form refused, repaired where the request is
/// still a form: a `requestedSchema` object without `properties` gets an empty one.
fn repaired_elicitation(params: Option<serde_json::Value>) -> Option<ElicitRequestParams> {
    let mut params = params?;
    let object = params.as_object_mut()?;
    object
        .entry("mode")
        .or_insert_with(|| serde_json::Value::String("form".into()));
    let schema = object.get_mut("requestedSchema")?.as_object_mut()?;
    schema
        .entry("properties")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    serde_json::from_value(params).ok()
}

/// Our rmcp client handler: identifies the runtime and records notifications.
#[derive(Clone)]
pub struct ClientHandler {
    signals: Arc<ServerSignals>,
}

impl ClientHandler {
    /// A handler recording server notifications in `signals`.
    pub fn new(signals: Arc<ServerSignals>) -> Self {
        ClientHandler { signals }
    }
}

impl rmcp::ClientHandler for ClientHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signals.list_changed(TOOLS);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signals.list_changed(RESOURCES);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signals.list_changed(PROMPTS);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let level = serde_json::to_value(params.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        self.signals.notices.deliver(Notice::Log {
            level,
            logger: params.logger,
            data: params.data,
        });
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let progress = Progress {
            progress: params.progress,
            total: params.total,
            message: params.message,
        };
        self.signals
            .notices
            .progress(&params.progress_token, progress);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.signals
            .notices
            .deliver(Notice::ResourceUpdated { uri: params.uri });
    }

    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, rmcp::ErrorData> {
        Ok(self.signals.roots_listed())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        Ok(self.signals.elicited(request).await)
    }

    /// An `elicitation/create` whose params rmcp's typed form refused arrives here: one
    /// whose schema names no `properties` is asked as an empty form; any other (a
    /// property that is not a primitive, a schema nested too deep) is declined on this
    /// request alone, never an error that could end the connection. Other methods are
    /// unknown.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CustomResult, rmcp::ErrorData> {
        if request.method != "elicitation/create" {
            return Err(rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ));
        }
        let answer = match repaired_elicitation(request.params) {
            Some(params) => self.signals.elicited(params).await,
            None => ElicitResult::new(ElicitationAction::Decline),
        };
        Ok(rmcp::model::CustomResult::new(
            serde_json::to_value(answer).unwrap_or_default(),
        ))
    }

    fn get_info(&self) -> InitializeRequestParams {
        let mut capabilities = ClientCapabilities::default();
        // A session's workspace is part of its catalog's identity: a changed workspace
        // makes new connections, so no connection's roots ever change.
        capabilities.roots = Some(rmcp::model::RootsCapabilities::default());
        // A call answered with a task is followed to its end (`tasks.rs`).
        capabilities.extensions = Some(
            [(
                rmcp::model::TASKS_EXTENSION_ID.to_string(),
                Default::default(),
            )]
            .into_iter()
            .collect(),
        );
        if self.signals.elicit.is_some() {
            capabilities.elicitation = Some(rmcp::model::ElicitationCapability::new().with_form(
                rmcp::model::FormElicitationCapability::new().with_schema_validation(true),
            ));
        }
        // 2025-11-25 is what strict third-party servers and checkers expect; newer
        // servers accept it too.
        InitializeRequestParams::new(
            capabilities,
            Implementation::new("demiurge-mcp", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// A live MCP client.
pub struct McpClient {
    service: Option<RunningService<RoleClient, ClientHandler>>,
    peer: Peer<RoleClient>,
    /// Set once the transport has ended, with why (EOF, broken pipe, a flood).
    transport_closed: watch::Receiver<Option<TransportEnd>>,
    pub(crate) process: Option<ChildProcess>,
    /// The open `subscriptions/listen` of a modern connection.
    listener: Option<Arc<Listener>>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("pid", &self.pid())
            .finish()
    }
}

impl McpClient {
    pub(crate) fn new(
        service: RunningService<RoleClient, ClientHandler>,
        listener: Option<Arc<Listener>>,
        process: Option<ChildProcess>,
        transport_closed: watch::Receiver<Option<TransportEnd>>,
    ) -> Self {
        let peer = service.peer().clone();
        McpClient {
            listener,
            service: Some(service),
            peer,
            transport_closed,
            process,
        }
    }

    /// A receiver that holds why the transport ended, once it has.
    pub fn transport_watch(&self) -> watch::Receiver<Option<TransportEnd>> {
        self.transport_closed.clone()
    }

    /// The child process id (stdio).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ChildProcess::pid)
    }

    /// A cheap handle for issuing requests from other tasks.
    pub fn peer(&self) -> Peer<RoleClient> {
        self.peer.clone()
    }

    /// The open `subscriptions/listen` of a connection in the 2026-07-28 era.
    pub(crate) fn listener(&self) -> Option<Arc<Listener>> {
        self.listener.clone()
    }

    /// A receiver that yields once the child process has exited (stdio).
    pub fn exit_watch(&self) -> Option<tokio::sync::watch::Receiver<Option<String>>> {
        self.process.as_ref().map(ChildProcess::exit_watch)
    }

    /// Closes the connection: its open listen cancelled, the transport, then the
    /// server's process tree (grace period, SIGTERM, everything ended), its stderr
    /// logged.
    pub async fn close(mut self, grace: Duration) -> CloseReport {
        // Before its input closes: the server may exit at once then, and what it
        // started would no longer be below it.
        if let Some(process) = &self.process {
            process.record_tree();
        }
        if let Some(listener) = self.listener.take() {
            listener.close(grace).await;
        }
        if let Some(service) = self.service.take() {
            let _ = tokio::time::timeout(grace, service.cancel()).await;
        }
        match self.process.take() {
            Some(process) => process.close(grace).await,
            None => CloseReport::default(),
        }
    }
}

/// Why a connection did not get through initialize and `tools/list`.
pub(crate) enum StartError {
    /// The server answered with an error or the transport failed (unredacted).
    Failed(String),
    /// Asked in the 2026-07-28 era only, the server answered `server/discover` as a
    /// 2025-era server does (a JSON-RPC error naming the request that is not one of the
    /// modern era's rejections): a version mismatch, which `auto` may follow.
    Legacy(String),
    /// Nothing came back within the connect timeout.
    TimedOut,
}

impl StartError {
    /// The kind and words of this failure; `stages` names what the connect timeout
    /// covered.
    pub(crate) fn described(self, timeout: Duration, stages: &str) -> (ConnectErrorKind, String) {
        match self {
            StartError::Failed(message) | StartError::Legacy(message) => {
                (ConnectErrorKind::Failed, message)
            }
            StartError::TimedOut => (
                ConnectErrorKind::TimedOut,
                format!(
                    "no answer within the connect timeout of {:.1}s ({stages})",
                    timeout.as_secs_f64()
                ),
            ),
        }
    }
}

/// How a connection in `protocol` starts: `initialize` (2025-11-25), `server/discover`
/// (2026-07-28), or discovery that falls back to `initialize` only when the server
/// answered it as a legacy server does (rmcp's rule: a correlated JSON-RPC error that
/// is not a modern rejection, or no answer in 10 s). A transport failure during
/// discovery fails the start. HTTP never asks for `Auto`: it runs the two eras itself,
/// without the fallback after silence (`http::start`).
fn lifecycle(protocol: Protocol) -> ClientLifecycleMode {
    match protocol {
        Protocol::V2025_11_25 => ClientLifecycleMode::Initialize,
        Protocol::V2026_07_28 => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
        Protocol::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        },
    }
}

/// Initializes MCP over `transport` and lists every page of tools, within `timeout`.
/// A transport ended on purpose ([`TransportEnd::Flooded`], seen on `ended`) fails the
/// start at once: rmcp would otherwise wait for answers it can no longer send.
pub(crate) async fn initialize_and_list<T>(
    transport: T,
    signals: Arc<ServerSignals>,
    protocol: Protocol,
    timeout: Duration,
    mut ended: watch::Receiver<Option<TransportEnd>>,
) -> Result<Started, StartError>
where
    T: Transport<RoleClient> + 'static,
{
    let seen = ended.clone();
    let flooded = async move {
        let end = ended
            .wait_for(|end| end.as_ref().is_some_and(TransportEnd::on_purpose))
            .await
            .ok()
            .and_then(|end| end.clone());
        match end {
            Some(end) => Some(end),
            None => std::future::pending().await,
        }
    };
    let started = tokio::time::timeout(timeout, async {
        tokio::select! {
            started = start(transport, signals, protocol, timeout) => started,
            Some(end) = flooded => Err((format!("the connection ended: {end}"), false)),
        }
    })
    .await;
    match started {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err((message, true))) => Err(StartError::Legacy(message)),
        Ok(Err((message, false))) => {
            // rmcp may see the end first ("connection closed"); the flood is the reason.
            let flooded = seen.borrow().clone().filter(TransportEnd::on_purpose);
            Err(StartError::Failed(match flooded {
                Some(end) => format!("the connection ended: {end}"),
                None => message,
            }))
        }
        Err(_) => Err(StartError::TimedOut),
    }
}

/// Why `initialize` failed, in words: never a dump of what the server sent. A server
/// that speaks only a protocol version this runtime does not gets that said plainly.
/// Not cut here: the caller redacts, then caps (a cut before redaction could leave
/// the prefix of a secret that no longer matches).
fn initialize_failure(error: &rmcp::service::ClientInitializeError, protocol: Protocol) -> String {
    use rmcp::service::ClientInitializeError as E;
    /// Versions a server names, kept only when they look like MCP versions.
    fn versions<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
        let version = |v: &&str| {
            v.len() == 10
                && v.bytes().enumerate().all(|(i, b)| {
                    if i == 4 || i == 7 {
                        b == b'-'
                    } else {
                        b.is_ascii_digit()
                    }
                })
        };
        let mut out: Vec<String> = names.filter(version).take(8).map(str::to_string).collect();
        out.sort();
        out.dedup();
        out
    }
    let ours = protocol.as_str();
    let requires = |supported: Vec<String>| match (supported.is_empty(), protocol) {
        (true, _) => {
            format!("the server refused MCP {ours} and named no version this runtime speaks")
        }
        (false, Protocol::V2025_11_25) => format!(
            "the server requires MCP {}, and this declaration speaks {ours}: declare `protocol: 2026-07-28` (or `protocol: auto`) to speak the newer one",
            supported.join(" or ")
        ),
        (false, _) => format!(
            "the server requires MCP {}, which this runtime does not speak (it asked for {ours})",
            supported.join(" or ")
        ),
    };
    let opening = match protocol {
        Protocol::V2025_11_25 => "initialize",
        Protocol::V2026_07_28 => "server/discover",
        Protocol::Auto => "server/discover and initialize",
    };
    match error {
        E::JsonRpcError(data)
            if data.code == rmcp::model::ErrorCode::UNSUPPORTED_PROTOCOL_VERSION =>
        {
            let named = data
                .data
                .as_ref()
                .and_then(|d| d.get("supported"))
                .and_then(serde_json::Value::as_array)
                .map(|list| versions(list.iter().filter_map(serde_json::Value::as_str)))
                .unwrap_or_default();
            requires(named)
        }
        E::NoCompatibleProtocolVersion {
            server_supported, ..
        } => requires(versions(server_supported.iter().map(|v| v.as_str()))),
        E::JsonRpcError(data) => format!(
            "the server refused {opening}: {} (JSON-RPC error {})",
            crate::text::escape(&data.message),
            data.code.0
        ),
        E::ExpectedInitResponse(_) | E::ExpectedInitResult(_)
            if protocol == Protocol::V2025_11_25 =>
        {
            "initialize failed: the server answered something other than an initialize result"
                .into()
        }
        E::ExpectedInitResponse(_) | E::ExpectedInitResult(_) => format!(
            "{opening} failed: the server answered server/discover with something other than a discovery result, as some 2025-era servers do: declare `protocol: 2025-11-25` to speak that era"
        ),
        // The transport's own error, without rmcp's wrapper (which names Rust types).
        E::TransportError { error, .. } => format!("initialize failed: {}", error.error),
        other => format!("initialize failed: {other}"),
    }
}

/// A start's failure in words, and whether it was a legacy server's answer to a
/// discovery (see [`StartError::Legacy`]).
type Failure = (String, bool);

/// A started connection: the service, its tools, and (2026-07-28) its open listen.
pub(crate) type Started = (
    RunningService<RoleClient, ClientHandler>,
    ListedTools,
    Option<Arc<Listener>>,
);

async fn start<T>(
    transport: T,
    signals: Arc<ServerSignals>,
    protocol: Protocol,
    timeout: Duration,
) -> Result<Started, Failure>
where
    T: Transport<RoleClient> + 'static,
{
    // Boxed, as the listener below: kilobytes each, which every connect's future would
    // otherwise hold and copy each time it is moved.
    let initialize = Box::pin(ClientServiceExt::serve_with_lifecycle(
        ClientHandler::new(Arc::clone(&signals)),
        transport,
        lifecycle(protocol),
    ));
    let stages = &signals.stages;
    let service = stages
        .timed(StageKind::Initialize, initialize)
        .await
        .map_err(|e| {
            (
                initialize_failure(&e, protocol),
                answered_as_legacy(&e, protocol),
            )
        })?;
    // The listen is sent first and the listing beside it, not after it: a round trip
    // less for every modern connect. Over stdio the server reads the listen first; over
    // HTTP the two requests race, so a change made between the server's listing and its
    // acknowledgment of the listen can be missed until the next change.
    let peer = service.peer().clone();
    let (listener, listed) = futures::join!(
        Box::pin(Listener::start(
            peer.clone(),
            Arc::clone(&signals),
            timeout / 4
        )),
        signals.stages.timed(StageKind::List, list_tools(&peer))
    );
    let listed = listed.map_err(|e| (format!("tools/list failed: {e}"), false))?;
    Ok((service, listed, listener))
}

/// Whether a discovery in the 2026-07-28 era failed the way it fails with a 2025-era
/// server: a JSON-RPC error that names the request and is not a modern rejection
/// (rmcp's own rule for its `Auto` mode, which then falls back on the same transport),
/// or a result to it that is not a discovery result (a 2025-era server that answers
/// methods it does not know with an empty result). Either is the server's own answer,
/// correlated with the request, after the URL policy, TLS and authorization passed.
fn answered_as_legacy(error: &rmcp::service::ClientInitializeError, protocol: Protocol) -> bool {
    use rmcp::model::ErrorCode;
    use rmcp::service::ClientInitializeError as E;
    if protocol != Protocol::V2026_07_28 {
        return false;
    }
    let data = match error {
        E::JsonRpcError(data) => data,
        E::ExpectedInitResult(Some(_)) => return true,
        _ => return false,
    };
    !matches!(
        data.code,
        ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH
            | ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
    )
}
