//! Typed runtime events, the host's [`EventSink`], and the per-session JSONL log.
//!
//! Events are built already redacted (event view); the JSONL log under
//! `<home>/runtime/session-events/<session>.jsonl` stores the same, durable, view.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

use crate::authority::{Action, ApprovalAnswer, ApprovalSource, ConnectPreview};
use crate::net::AuditView;

/// When a URL decision was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UrlPhase {
    /// On the declared URL, before approval and before any client exists.
    Connect,
    /// On one HTTP request or redirect hop.
    Request,
    /// OAuth: protected resource metadata.
    OauthResourceMetadata,
    /// OAuth: authorization server metadata.
    OauthServerMetadata,
    /// OAuth: dynamic client registration.
    OauthRegistration,
    /// OAuth: a token request.
    OauthToken,
    /// OAuth: a refresh-token request.
    OauthRefresh,
    /// OAuth: token revocation.
    OauthRevocation,
    /// OAuth: any other request (a client metadata document).
    OauthOther,
    /// A confined stdio server's request through its egress proxy.
    Egress,
}

impl UrlPhase {
    /// The phase of an OAuth request of `step`.
    pub fn of_oauth(step: crate::net::oauth::OAuthStep) -> Self {
        use crate::net::oauth::OAuthStep;
        match step {
            OAuthStep::ResourceMetadata => UrlPhase::OauthResourceMetadata,
            OAuthStep::ServerMetadata => UrlPhase::OauthServerMetadata,
            OAuthStep::Registration => UrlPhase::OauthRegistration,
            OAuthStep::Token => UrlPhase::OauthToken,
            OAuthStep::Refresh => UrlPhase::OauthRefresh,
            OAuthStep::Revocation => UrlPhase::OauthRevocation,
            _ => UrlPhase::OauthOther,
        }
    }
}

/// What a sandbox refusal was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SandboxDenial {
    /// A request through the egress proxy, refused by the URL policy.
    Egress,
    /// A confined server failed, and its stderr reports a refused access: most likely
    /// Landlock's or seccomp's, whose refusals reach no one but the process refused.
    /// The target is never named (the text is the server's); the reason is the kind of
    /// refusal reported (`permission_denied`, `operation_not_permitted`, `read_only`).
    Reported,
}

/// How an elicitation was answered (serialized `accept`, `decline`, `cancel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitAction {
    /// The person answered, and the answer fit the requested schema.
    Accept,
    /// Declined (by the person, by the host's elicitor, or because the answer did not
    /// fit the schema).
    Decline,
    /// The person dismissed the request.
    Cancel,
}

/// How a session became live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Opening {
    /// Started anew (`Runtime::start_session`).
    Start,
    /// Resumed by id.
    Resume,
}

pub use crate::clock::now_ms;

/// What happened, one variant per event type (the `type` field of the JSONL line).
/// Every string in it is already redacted and carries no secret value.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
#[non_exhaustive]
pub enum EventKind {
    /// A session started or was resumed.
    #[serde(rename = "mcp.session_started")]
    SessionStarted {
        /// Started or resumed.
        how: Opening,
        /// Principal of the session.
        principal: String,
    },
    /// A session's connections were closed.
    #[serde(rename = "mcp.session_evicted")]
    SessionEvicted {
        /// Why (`replaced`, `explicit`, `shutdown`, `child_finished`, ...).
        reason: String,
        /// How many connections were closed.
        connections_closed: usize,
    },
    /// A tracked eviction did not complete normally.
    #[serde(rename = "mcp.session_eviction_failed")]
    SessionEvictionFailed {
        /// Why it was evicted.
        reason: String,
        /// What went wrong.
        message: String,
    },
    /// A turn's catalog was resolved.
    #[serde(rename = "mcp.turn_prepared")]
    TurnPrepared {
        /// Turn number within the session.
        turn: u64,
        /// Visible tools.
        tools: usize,
        /// Servers with a diagnostic.
        failed: usize,
        /// Servers denied.
        denied: usize,
    },
    /// A server was skipped by authority (not cached: asked again next turn).
    #[serde(rename = "mcp.server_denied")]
    ServerDenied {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// The denial in words: the missing capability, the cwd or URL rule, or the
        /// refused approval.
        reason: String,
    },
    /// A server was authorized and is being started or reached.
    #[serde(rename = "mcp.server_connecting")]
    ServerConnecting {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
    },
    /// A server connected and listed its tools.
    #[serde(rename = "mcp.server_connected")]
    ServerConnected {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// Child process id (stdio).
        #[serde(skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        /// Tools listed by the server (before filtering).
        tools_listed: usize,
    },
    /// A server failed to start, list, or died; its diagnostic is cached.
    #[serde(rename = "mcp.server_failed")]
    ServerFailed {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// Redacted diagnostic.
        message: String,
        /// Where the transport connect failed (spawn, handshake, timeout); absent for
        /// failures before the transport or after a connection ended.
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<crate::transport::ConnectErrorKind>,
        /// How long the failure is cached, in milliseconds.
        cached_for_ms: u64,
    },
    /// A server was skipped for this turn without a failure cache (missing variable).
    #[serde(rename = "mcp.server_skipped")]
    ServerSkipped {
        /// Server id.
        server: String,
        /// Declaration path.
        path: String,
        /// What is missing (a `${NAME}` the host does not set), without any value.
        message: String,
    },
    /// A connection was closed.
    #[serde(rename = "mcp.server_closed")]
    ServerClosed {
        /// Server id.
        server: String,
        /// What closed it: a changed or removed declaration, eviction, shutdown.
        reason: String,
    },
    /// A server's tool list changed; applied at the next turn boundary.
    #[serde(rename = "mcp.tools_changed")]
    ToolsChanged {
        /// Server id.
        server: String,
    },
    /// The host's sink could not keep up: this many events were dropped before this
    /// one (the session log, when on, has them unless its own queue was full too).
    #[serde(rename = "mcp.events_dropped")]
    EventsDropped {
        /// How many.
        count: u64,
    },
    /// A server's resource or prompt list changed; applied at the next turn boundary.
    #[serde(rename = "mcp.list_changed")]
    ListChanged {
        /// Server id.
        server: String,
        /// `resources` or `prompts`.
        list: String,
    },
    /// A server sent a log message (`notifications/message`), redacted and capped.
    #[serde(rename = "mcp.server_log")]
    ServerLog {
        /// Server id.
        server: String,
        /// `debug` .. `emergency`.
        level: String,
        /// The server's logger name.
        #[serde(skip_serializing_if = "Option::is_none")]
        logger: Option<String>,
        /// The message's data, event view.
        data: serde_json::Value,
        /// Notices of this server dropped since the last one passed (a flood).
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A server reported progress on a request.
    #[serde(rename = "mcp.progress")]
    Progress {
        /// Server id.
        server: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// The server's message, event view.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Notices of this server dropped since the last one passed.
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A server said a resource changed (`notifications/resources/updated`).
    #[serde(rename = "mcp.resource_updated")]
    ResourceUpdated {
        /// Server id.
        server: String,
        /// The resource, event view.
        uri: String,
        /// Notices of this server dropped since the last one passed.
        #[serde(skip_serializing_if = "is_zero")]
        dropped: u64,
    },
    /// A resource was read.
    #[serde(rename = "mcp.resource_read")]
    ResourceRead {
        /// Server id.
        server: String,
        /// The resource, event view.
        uri: String,
        /// Whether the read failed.
        is_error: bool,
        /// How long it took.
        duration_ms: u64,
    },
    /// A prompt was got.
    #[serde(rename = "mcp.prompt_got")]
    PromptGot {
        /// Server id.
        server: String,
        /// Exposed prompt name.
        prompt: String,
    },
    /// An approval was requested.
    #[serde(rename = "approval.requested")]
    ApprovalRequested {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Exposed tool name for calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// A call's arguments, event view (redacted).
        #[serde(skip_serializing_if = "Option::is_none")]
        arguments: Option<serde_json::Value>,
        /// The secret-free preview (boxed: it is the largest field of any event).
        preview: Box<ConnectPreview>,
    },
    /// A server asked the user for input (elicitation) and was answered.
    #[serde(rename = "mcp.elicitation")]
    Elicitation {
        /// Server id.
        server: String,
        /// How the request was answered.
        action: ElicitAction,
        /// The fields sent back, event view (redacted as call arguments are).
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<serde_json::Value>,
        /// Why an answer was refused (it did not fit the requested schema).
        #[serde(skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
    },
    /// A question was withdrawn while the approver was being asked: its requester went
    /// away (turn or call dropped, session evicted, runtime shut down).
    #[serde(rename = "approval.withdrawn")]
    ApprovalWithdrawn {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Exposed tool name for calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// An approval was decided.
    #[serde(rename = "approval.decided")]
    ApprovalDecided {
        /// Connect or call.
        action: Action,
        /// Server id.
        server: String,
        /// Allow once, allow for the session, or deny.
        decision: ApprovalAnswer,
        /// Who answered: the policy, the allow-for-session cache, the approver.
        source: ApprovalSource,
    },
    /// A tool was called.
    #[serde(rename = "mcp.tool_called")]
    ToolCalled {
        /// Server id.
        server: String,
        /// Exposed name.
        tool: String,
        /// Whether the result was an error.
        is_error: bool,
        /// Wall time of the call.
        duration_ms: u64,
        /// Content, event view.
        content: String,
    },
    /// A call was refused before reaching its server.
    #[serde(rename = "mcp.call_denied")]
    CallDenied {
        /// Server id.
        server: String,
        /// Exposed name.
        tool: String,
        /// The refusal in words (missing capability, approval denied or unavailable).
        reason: String,
    },
    /// The sandbox refused something a confined server tried (`egress`), or a
    /// confined server failed saying it was refused, most likely by the sandbox
    /// (`reported`).
    #[serde(rename = "mcp.sandbox_denied")]
    SandboxDenied {
        /// Server id.
        server: String,
        /// What was refused.
        kind: SandboxDenial,
        /// What it aimed at, in the safe form of its kind (an origin for egress;
        /// empty when reported: the server's words are not repeated).
        target: String,
        /// The rule that refused it (a URL policy block name for egress), or the kind
        /// of refusal reported.
        reason: String,
    },
    /// A URL policy decision for one HTTP request.
    #[serde(rename = "mcp.url_decision")]
    UrlDecision {
        /// Before approval, or for one request.
        phase: UrlPhase,
        /// Server id.
        server: String,
        /// The safe audit view.
        decision: AuditView,
    },
}

/// One event of one session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Session id.
    pub session: String,
    /// The event's type and fields.
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// An event stamped now.
    pub fn new(session: impl Into<String>, kind: EventKind) -> Self {
        Event {
            at_ms: now_ms(),
            session: session.into(),
            kind,
        }
    }

    /// The `type` string (`mcp.server_denied`, ...).
    pub fn type_name(&self) -> String {
        serde_json::to_value(&self.kind)
            .ok()
            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default()
    }
}

/// Where the host receives events. Called on runtime tasks: keep it quick.
pub trait EventSink: Send + Sync + 'static {
    /// One event, already in its event view.
    fn emit(&self, event: &Event);
}

/// A sink that keeps every event in memory: for tests and simple hosts.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<Event>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of everything received so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Events of one type.
    pub fn of_type(&self, type_name: &str) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.type_name() == type_name)
            .collect()
    }
}

impl EventSink for MemorySink {
    fn emit(&self, event: &Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event.clone());
        }
    }
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &Event) {}
}

/// Fans events out to the host sink (synchronously) and the JSONL log of their session
/// (on a writer thread, so no call or turn waits for the disk).
pub struct EventHub {
    sink: Arc<dyn EventSink>,
    log_dir: Option<PathBuf>,
    writer: Option<Writer>,
    /// The sink's own thread and bounded queue, when delivery is queued.
    delivery: Option<Delivery>,
    /// Events the sink or the log never got because a queue was full.
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// How events reach the host's sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventDelivery {
    /// On the emitting task, synchronously (a slow sink slows the runtime; for tests
    /// and sinks that only push to a queue of their own).
    Direct,
    /// Through a bounded queue to a thread of its own: the hot path pays a queue push;
    /// a host slower than the runtime loses events past `capacity`, counted, and told
    /// by an `mcp.events_dropped` event once it catches up.
    Queued {
        /// Most events waiting for the sink.
        capacity: usize,
    },
}

impl Default for EventDelivery {
    fn default() -> Self {
        EventDelivery::Queued { capacity: 10_000 }
    }
}

/// The JSONL session logs under the runtime home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventLog {
    /// No session log is written.
    Off,
    /// One file per session; at `max_bytes` it is renamed `<session>.jsonl.1` (the one
    /// before that goes) and a new file begins.
    On {
        /// The size at which a session's log rotates.
        max_bytes: u64,
    },
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::On {
            max_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Most log operations waiting for the writer thread; past it, events are dropped
/// (and counted) rather than held.
pub const LOG_QUEUE: usize = 65_536;

enum DeliveryOp {
    Event(Box<Event>),
    Flush(std::sync::mpsc::Sender<()>),
}

struct Delivery {
    tx: std::sync::mpsc::SyncSender<DeliveryOp>,
}

/// The writer thread's queue. Senders never wake the thread: it wakes on its own every
/// [`LOG_BATCH`] (or when unparked by a flush), so events on the hot path cost a queue
/// push, not a context switch.
struct Writer {
    tx: std::sync::mpsc::SyncSender<LogOp>,
    thread: std::thread::Thread,
}

/// How long events may wait in memory before reaching the log.
pub const LOG_BATCH: std::time::Duration = std::time::Duration::from_millis(100);

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("log_dir", &self.log_dir)
            .finish()
    }
}

/// What the writer thread is asked to do. Events travel boxed: the queue holds many,
/// and the other operations are small.
enum LogOp {
    Write(Box<Event>),
    Close(String),
    Flush(std::sync::mpsc::Sender<()>),
}

impl EventHub {
    /// A hub writing JSONL under `log_dir` (created 0700) when given.
    pub fn new(sink: Arc<dyn EventSink>, log_dir: Option<PathBuf>) -> Self {
        Self::with(sink, log_dir, EventDelivery::Direct, EventLog::default())
    }

    /// A hub delivering to `sink` as `delivery` says and logging under `log_dir` as
    /// `log` says.
    pub fn with(
        sink: Arc<dyn EventSink>,
        log_dir: Option<PathBuf>,
        delivery: EventDelivery,
        log: EventLog,
    ) -> Self {
        let log_dir = match log {
            EventLog::Off => None,
            EventLog::On { .. } => log_dir,
        };
        let max_bytes = match log {
            EventLog::On { max_bytes } => max_bytes,
            EventLog::Off => u64::MAX,
        };
        let writer = log_dir.clone().and_then(|dir| {
            let (tx, rx) = std::sync::mpsc::sync_channel(LOG_QUEUE);
            std::thread::Builder::new()
                .name("demiurge-event-log".into())
                .stack_size(256 * 1024)
                .spawn(move || write_logs(&dir, rx, max_bytes))
                .ok()
                .map(|handle| Writer {
                    tx,
                    thread: handle.thread().clone(),
                })
        });
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let delivery = match delivery {
            EventDelivery::Direct => None,
            EventDelivery::Queued { capacity } => {
                let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
                let (sink, dropped) = (Arc::clone(&sink), Arc::clone(&dropped));
                std::thread::Builder::new()
                    .name("demiurge-event-sink".into())
                    .stack_size(256 * 1024)
                    .spawn(move || deliver(&*sink, &rx, &dropped))
                    .ok()
                    .map(|_| Delivery { tx })
            }
        };
        EventHub {
            sink,
            log_dir,
            writer,
            delivery,
            dropped,
        }
    }

    /// Events dropped so far because the host's sink (or the log) could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Path of a session's JSONL log.
    pub fn log_path(&self, session: &str) -> Option<PathBuf> {
        self.log_dir
            .as_ref()
            .map(|d| d.join(format!("{}.jsonl", safe_file_name(session))))
    }

    /// Delivers one event: to the sink now, to the log on the writer thread. Log
    /// failures are reported through `tracing`, never raised: an event log must not
    /// take a turn down.
    pub fn emit(&self, session: &str, kind: EventKind) {
        let event = Event::new(session, kind);
        match &self.delivery {
            Some(d) => {
                if d.tx
                    .try_send(DeliveryOp::Event(Box::new(event.clone())))
                    .is_err()
                {
                    self.count_drop();
                }
            }
            None => self.sink.emit(&event),
        }
        if self.writer.is_some() {
            self.send(LogOp::Write(Box::new(event)));
        }
    }

    fn count_drop(&self) {
        self.dropped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn send(&self, op: LogOp) {
        let Some(w) = &self.writer else { return };
        match op {
            LogOp::Flush(_) => {
                // A flush waits for room, but only so long: a writer stuck on a slow
                // disk must not hold the caller (or anyone else) for ever.
                let _ = send_within(&w.tx, op, FLUSH_WAIT);
                w.thread.unpark();
            }
            op => {
                if w.tx.try_send(op).is_err() {
                    self.count_drop();
                }
            }
        }
    }

    /// Closes a session's log file handle (the file stays).
    pub fn close_session(&self, session: &str) {
        self.send(LogOp::Close(session.to_string()));
    }

    /// Waits (at most five seconds each) until everything emitted so far reached the
    /// sink and is on disk.
    pub fn flush(&self) {
        if let Some(d) = &self.delivery {
            let (tx, rx) = std::sync::mpsc::channel();
            if send_within(&d.tx, DeliveryOp::Flush(tx), FLUSH_WAIT) {
                let _ = rx.recv_timeout(FLUSH_WAIT);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(LogOp::Flush(tx));
        let _ = rx.recv_timeout(FLUSH_WAIT);
    }
}

/// The longest a flush waits, for room in a queue and then for its answer.
pub(crate) const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends `op` when the queue has room within `wait`; `false` when it never had.
fn send_within<T>(
    tx: &std::sync::mpsc::SyncSender<T>,
    mut op: T,
    wait: std::time::Duration,
) -> bool {
    let until = std::time::Instant::now() + wait;
    loop {
        match tx.try_send(op) {
            Ok(()) => return true,
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
            Err(std::sync::mpsc::TrySendError::Full(back)) => {
                if std::time::Instant::now() >= until {
                    return false;
                }
                op = back;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// How long the sink's thread rests after draining its queue before blocking again.
const DELIVERY_REST: std::time::Duration = std::time::Duration::from_millis(1);

/// The sink's thread: delivers queued events in order, telling the sink first how many
/// were dropped since the last one it got.
fn deliver(
    sink: &dyn EventSink,
    rx: &std::sync::mpsc::Receiver<DeliveryOp>,
    dropped: &std::sync::atomic::AtomicU64,
) {
    let mut told = 0;
    let mut drained = false;
    loop {
        // After a burst is drained the thread rests a moment before it blocks again: a
        // sender only wakes a thread blocked in `recv`, so a burst of events costs a
        // wake a millisecond at most, not a context switch each (on two cores, those
        // were taken from the calls themselves).
        let op = match rx.try_recv() {
            Ok(op) => op,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            Err(std::sync::mpsc::TryRecvError::Empty) if drained => {
                drained = false;
                std::thread::sleep(DELIVERY_REST);
                continue;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => match rx.recv() {
                Ok(op) => op,
                Err(_) => return,
            },
        };
        drained = true;
        match op {
            DeliveryOp::Event(event) => {
                let now = dropped.load(std::sync::atomic::Ordering::Relaxed);
                if now > told {
                    let note = Event::new(
                        &event.session,
                        EventKind::EventsDropped { count: now - told },
                    );
                    sink.emit(&note);
                    told = now;
                }
                sink.emit(&event);
            }
            DeliveryOp::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// The writer thread: appends events to their session's file, flushing after each
/// batch; a file that reaches `max_bytes` is rotated to `<name>.1`.
fn write_logs(dir: &std::path::Path, rx: std::sync::mpsc::Receiver<LogOp>, max_bytes: u64) {
    /// A session's log file while it is open.
    struct Open {
        file: std::io::BufWriter<File>,
        path: PathBuf,
        size: u64,
    }
    let mut files: HashMap<String, Open> = HashMap::new();
    let mut waiting: Vec<std::sync::mpsc::Sender<()>> = Vec::new();
    // One buffer for every line: an event costs no allocation here once it has grown.
    let mut line: Vec<u8> = Vec::new();
    loop {
        std::thread::park_timeout(LOG_BATCH);
        let mut op = match rx.try_recv() {
            Ok(op) => Some(op),
            Err(std::sync::mpsc::TryRecvError::Empty) => continue,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
        };
        while let Some(current) = op.take() {
            match current {
                LogOp::Write(event) => {
                    if !files.contains_key(&event.session) {
                        let path = dir.join(format!("{}.jsonl", safe_file_name(&event.session)));
                        match crate::process::open_private_append(&path) {
                            Ok(f) => {
                                let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                                let file = std::io::BufWriter::new(f);
                                files.insert(event.session.clone(), Open { file, path, size });
                            }
                            Err(e) => {
                                tracing::warn!("cannot open event log {}: {e}", path.display())
                            }
                        }
                    }
                    line.clear();
                    if let (Some(open), Ok(())) = (
                        files.get_mut(&event.session),
                        serde_json::to_writer(&mut line, &event),
                    ) {
                        line.push(b'\n');
                        if let Err(e) = open.file.write_all(&line) {
                            tracing::warn!("cannot write event log {}: {e}", open.path.display());
                        }
                        open.size += line.len() as u64;
                        if open.size >= max_bytes
                            && let Some(mut full) = files.remove(&event.session)
                        {
                            // Rotate: the full file becomes `.1`, the next event opens anew.
                            let _ = full.file.flush();
                            let _ =
                                std::fs::rename(&full.path, full.path.with_extension("jsonl.1"));
                        }
                    }
                    // A line of a huge event is not kept for the next one.
                    if line.capacity() > 64 * 1024 {
                        line = Vec::new();
                    }
                }
                LogOp::Close(session) => {
                    if let Some(mut open) = files.remove(&session) {
                        let _ = open.file.flush();
                    }
                }
                LogOp::Flush(done) => waiting.push(done),
            }
            op = rx.try_recv().ok();
        }
        for open in files.values_mut() {
            let _ = open.file.flush();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

fn safe_file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
