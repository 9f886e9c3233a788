//! A connected MCP client, whatever its transport.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientRequest, Implementation,
    InitializeRequestParams, JsonObject, PaginatedRequestParams, ProtocolVersion, Request,
    ServerResult, Tool,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{Peer, RoleClient, ServiceError};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonRpcMessage, RequestId, ServerNotification};
use tokio::sync::{Notify, watch};

use super::stdio::ChildProcess;
use crate::process::CapturedStderr;

/// Most pages of `tools/list` followed for one server.
pub const MAX_TOOL_PAGES: usize = 100;
/// Most tools kept for one server; the rest are dropped with a diagnostic.
pub const MAX_TOOLS: usize = 5_000;

/// What a server told us outside a request, kept as flags so that no number of
/// notifications can queue anything: a storm of `list_changed` sets one flag and wakes
/// the connection once.
#[derive(Debug, Default)]
pub struct ServerSignals {
    /// `notifications/tools/list_changed` arrived since the last turn read it.
    pub tools_changed: AtomicBool,
    /// Woken when a flag goes from clear to set.
    pub changed: Notify,
}

impl ServerSignals {
    /// Sets the tools flag; wakes a waiter only when it was clear.
    pub fn tools_changed(&self) {
        if !self.tools_changed.swap(true, Ordering::AcqRel) {
            self.changed.notify_one();
        }
    }

    /// Reads and clears the tools flag (at a turn boundary).
    pub fn take_tools_changed(&self) -> bool {
        self.tools_changed.swap(false, Ordering::AcqRel)
    }
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
        self.signals.tools_changed();
    }

    fn get_info(&self) -> InitializeRequestParams {
        // 2025-11-25 is what strict third-party servers and checkers expect; newer
        // servers accept it too.
        InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("demiurge-mcp", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// The tools a server listed, capped.
#[derive(Debug, Clone)]
pub struct ListedTools {
    /// Tools in listing order.
    pub tools: Vec<Tool>,
    /// Whether the list was cut at [`MAX_TOOLS`] or [`MAX_TOOL_PAGES`].
    pub truncated: bool,
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// `timeout_seconds` passed; the request was cancelled on the server.
    Timeout(Duration),
    /// The connection is gone (process exited, transport closed).
    Closed(String),
    /// The server answered with a protocol error.
    Protocol(String),
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallFailure::Timeout(d) => write!(
                f,
                "the call timed out after {:.1}s and was cancelled on the server",
                d.as_secs_f64()
            ),
            CallFailure::Closed(m) => write!(f, "the server connection is closed: {m}"),
            CallFailure::Protocol(m) => write!(f, "the server returned an error: {m}"),
        }
    }
}

/// What closing a connection observed.
#[derive(Debug, Clone)]
pub struct CloseReport {
    /// Exit status of the child (stdio), when it could be observed.
    pub exit: Option<String>,
    /// The captured stderr window (stdio).
    pub stderr: Option<CapturedStderr>,
}

/// A live MCP client.
pub struct McpClient {
    service: Option<RunningService<RoleClient, ClientHandler>>,
    peer: Peer<RoleClient>,
    /// Set once the transport has ended, with why (EOF, broken pipe, a flood).
    transport_closed: watch::Receiver<Option<TransportEnd>>,
    pub(crate) process: Option<ChildProcess>,
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
        process: Option<ChildProcess>,
        transport_closed: watch::Receiver<Option<TransportEnd>>,
    ) -> Self {
        let peer = service.peer().clone();
        McpClient {
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

    /// A receiver that yields once the child process has exited (stdio).
    pub fn exit_watch(&self) -> Option<tokio::sync::watch::Receiver<Option<String>>> {
        self.process.as_ref().map(ChildProcess::exit_watch)
    }

    /// Lists every page of tools, capped.
    ///
    /// # Errors
    /// The server's or transport's error, unredacted: the caller redacts.
    pub async fn list_tools(&self) -> Result<ListedTools, String> {
        list_tools(&self.peer).await
    }

    /// Closes the connection: transport first, then the process group (grace period,
    /// SIGTERM, SIGKILL), then reads the stderr window.
    pub async fn close(mut self, grace: Duration) -> CloseReport {
        if let Some(service) = self.service.take() {
            let _ = tokio::time::timeout(grace, service.cancel()).await;
        }
        match self.process.take() {
            Some(process) => process.close(grace).await,
            None => CloseReport {
                exit: None,
                stderr: None,
            },
        }
    }
}

/// Lists every page of tools from `peer`, capped.
///
/// # Errors
/// The server's or transport's error, unredacted.
pub async fn list_tools(peer: &Peer<RoleClient>) -> Result<ListedTools, String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    let mut truncated = false;
    for page in 0.. {
        if page == MAX_TOOL_PAGES {
            truncated = true;
            break;
        }
        let result = peer
            .list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)))
            .await
            .map_err(|e| service_error(&e))?;
        tools.extend(result.tools);
        if tools.len() > MAX_TOOLS {
            tools.truncate(MAX_TOOLS);
            truncated = true;
            break;
        }
        match result.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => break,
        }
    }
    Ok(ListedTools { tools, truncated })
}

/// Calls a tool with a timeout; on timeout rmcp sends `notifications/cancelled`.
///
/// # Errors
/// [`CallFailure`], unredacted.
pub async fn call_tool(
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: Option<JsonObject>,
    timeout: Duration,
) -> Result<serde_json::Value, CallFailure> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments;
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| classify(&e, timeout))?;
    match handle.await_response().await {
        Ok(ServerResult::CallToolResult(result)) => {
            serde_json::to_value(result).map_err(|e| CallFailure::Protocol(e.to_string()))
        }
        Ok(_) => Err(CallFailure::Protocol(
            "unexpected response to tools/call".into(),
        )),
        Err(e) => Err(classify(&e, timeout)),
    }
}

fn classify(e: &ServiceError, timeout: Duration) -> CallFailure {
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

/// Why a transport ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEnd {
    /// The server side ended (EOF, broken pipe, HTTP stream closed).
    Closed,
    /// The server sent more than `limit` of `what` that wait for an answer from us while
    /// not taking our answers: the connection was ended to keep the host bounded.
    Flooded {
        /// What piled up.
        what: &'static str,
        /// The bound.
        limit: usize,
    },
    /// The server broke the protocol in a way that would make the host hold more than
    /// it should (an id reused while in flight, an id too long to echo).
    Refused {
        /// What it did, in words.
        reason: &'static str,
    },
}

impl TransportEnd {
    /// Whether the runtime ended the transport itself (a flood, a refusal), which says
    /// more than anything that follows (the exit of a server whose pipes closed).
    pub fn on_purpose(&self) -> bool {
        !matches!(self, TransportEnd::Closed)
    }
}

impl std::fmt::Display for TransportEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportEnd::Closed => f.write_str("the server closed its side of the connection"),
            TransportEnd::Flooded { what, limit } => write!(
                f,
                "the server sent more than {limit} {what} without taking the answers; the connection was closed to keep the host bounded"
            ),
            TransportEnd::Refused { reason } => {
                write!(f, "the server {reason}; the connection was closed")
            }
        }
    }
}

/// Most requests from a server waiting for our answer at once, answers still being
/// written included (each is a task in rmcp, an answer is a buffer on its way to the
/// server); a well-behaved server has one or two.
pub const MAX_PENDING_SERVER_REQUESTS: usize = 16;

/// Longest request id echoed back: an answer repeats the id, so a server could make
/// each pending answer megabytes long.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// Whether a request id is short enough to echo (see [`MAX_REQUEST_ID_BYTES`]).
pub(crate) fn id_fits(id: &RequestId) -> bool {
    match id {
        rmcp::model::NumberOrString::String(s) => s.len() <= MAX_REQUEST_ID_BYTES,
        rmcp::model::NumberOrString::Number(_) => true,
    }
}

/// Most messages a server may send per second, sustained (bursts of as many pass at
/// once). Past it the runtime reads the server's next message later, so the server's
/// own writes block: one server cannot take the host's threads from the others.
pub const MAX_MESSAGES_PER_SECOND: f64 = 1000.0;

/// A token bucket: `rate` per second, at most `burst` saved up.
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: std::time::Instant,
}

impl Bucket {
    pub(crate) fn new(rate: f64, burst: f64) -> Self {
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: std::time::Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = std::time::Instant::now();
        let earned = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.last = now;
    }

    /// Waits until the bucket holds a token. Cancel-safe: nothing is taken by waiting.
    pub(crate) async fn ready(&mut self) {
        self.refill();
        if self.tokens < 1.0 {
            let wait = (1.0 - self.tokens) / self.rate;
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            self.refill();
        }
    }

    /// Spends `cost` tokens (the balance may go below zero: the next wait is longer).
    pub(crate) fn spend(&mut self, cost: f64) {
        self.tokens -= cost;
    }
}

/// The first reason a transport gave for ending, shared between the layer that saw it
/// (the stdio framing, [`Guarded`]) and whoever reports it.
pub(crate) type EndCause = Arc<OnceLock<TransportEnd>>;

/// What a server's requests hold on our side.
#[derive(Debug, Default)]
struct Held {
    /// Requests received and not yet answered (nor withdrawn by the server).
    open: HashSet<RequestId>,
    /// Answers handed to the transport and not yet written.
    sending: usize,
}

/// Wraps a transport to bound what the server's input can make the host hold, and to
/// report when the server side ends (rmcp's service loop stops quietly on EOF, and a
/// supervisor must know at once, not at the next call).
///
/// Adversary: a server author (threat model 2). rmcp spawns a task for each request a
/// server sends and keeps it until its answer is produced, then a task per answer until
/// it is written; a server that sends requests and never reads its input would grow
/// both without end. A server that sends as fast as it can would take the host's
/// threads: messages are paced at [`MAX_MESSAGES_PER_SECOND`]. Requests are counted from arrival until answered (or withdrawn),
/// answers from being handed over until written; past [`MAX_PENDING_SERVER_REQUESTS`]
/// together, the transport ends with [`TransportEnd::Flooded`]. An id reused while its
/// request is open, or longer than [`MAX_REQUEST_ID_BYTES`], ends it with
/// [`TransportEnd::Refused`]. Either fails the connection.
pub(crate) struct Guarded<T> {
    inner: T,
    held: Arc<Mutex<Held>>,
    /// Messages the server may send before the next is read later.
    pace: Bucket,
    cause: EndCause,
    closed: watch::Sender<Option<TransportEnd>>,
}

impl<T> Guarded<T> {
    pub(crate) fn new(inner: T, cause: EndCause) -> (Self, watch::Receiver<Option<TransportEnd>>) {
        let (closed, rx) = watch::channel(None);
        let guarded = Guarded {
            inner,
            held: Arc::default(),
            pace: Bucket::new(MAX_MESSAGES_PER_SECOND, MAX_MESSAGES_PER_SECOND),
            cause,
            closed,
        };
        (guarded, rx)
    }

    fn end(&self) {
        let cause = self.cause.get().cloned().unwrap_or(TransportEnd::Closed);
        let _ = self.closed.send(Some(cause));
    }

    /// What a request or notification from the server does to what we hold; `Some`
    /// when the transport must end.
    fn admit(&self, message: &RxJsonRpcMessage<RoleClient>) -> Option<TransportEnd> {
        let mut held = self.held.lock().ok()?;
        match message {
            JsonRpcMessage::Request(request) => {
                if !id_fits(&request.id) {
                    return Some(TransportEnd::Refused {
                        reason: "sent a request id longer than 128 bytes",
                    });
                }
                if !held.open.insert(request.id.clone()) {
                    return Some(TransportEnd::Refused {
                        reason: "reused the id of a request still in flight",
                    });
                }
                (held.open.len() + held.sending > MAX_PENDING_SERVER_REQUESTS).then_some(
                    TransportEnd::Flooded {
                        what: "requests",
                        limit: MAX_PENDING_SERVER_REQUESTS,
                    },
                )
            }
            JsonRpcMessage::Notification(n) => {
                // A request the server withdrew gets no answer from rmcp (an answer
                // already handed over still counts until written).
                if let ServerNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    held.open.remove(id);
                }
                None
            }
            _ => None,
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Guarded<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answer = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            _ => None,
        };
        let held = Arc::clone(&self.held);
        if let Some(id) = &answer
            && let Ok(mut h) = held.lock()
        {
            h.open.remove(id);
            h.sending += 1;
        }
        let sent = self.inner.send(item);
        async move {
            let result = sent.await;
            if answer.is_some()
                && let Ok(mut h) = held.lock()
            {
                h.sending = h.sending.saturating_sub(1);
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // Before taking a message: a receive that is cancelled while waiting loses none.
        self.pace.ready().await;
        let Some(message) = self.inner.receive().await else {
            self.end();
            return None;
        };
        self.pace.spend(1.0);
        if let Some(end) = self.admit(&message) {
            let _ = self.cause.set(end);
            self.end();
            return None;
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Why a connection did not get through initialize and `tools/list`.
pub(crate) enum StartError {
    /// The server answered with an error or the transport failed (unredacted).
    Failed(String),
    /// Nothing came back within the connect timeout.
    TimedOut,
}

/// Initializes MCP over `transport` and lists every page of tools, within `timeout`.
/// A transport ended on purpose ([`TransportEnd::Flooded`], seen on `ended`) fails the
/// start at once: rmcp would otherwise wait for answers it can no longer send.
pub(crate) async fn initialize_and_list<T>(
    transport: T,
    signals: Arc<ServerSignals>,
    timeout: Duration,
    mut ended: watch::Receiver<Option<TransportEnd>>,
) -> Result<(RunningService<RoleClient, ClientHandler>, ListedTools), StartError>
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
            started = start(transport, signals) => started,
            Some(end) = flooded => Err(format!("the connection ended: {end}")),
        }
    })
    .await;
    match started {
        Ok(Ok(pair)) => Ok(pair),
        Ok(Err(message)) => {
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

async fn start<T>(
    transport: T,
    signals: Arc<ServerSignals>,
) -> Result<(RunningService<RoleClient, ClientHandler>, ListedTools), String>
where
    T: Transport<RoleClient> + 'static,
{
    {
        let service = rmcp::ServiceExt::serve(ClientHandler::new(signals), transport)
            .await
            .map_err(|e| format!("initialize failed: {e}"))?;
        let listed = list_tools(service.peer())
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        Ok::<_, String>((service, listed))
    }
}
