//! One actor per live server connection, spawned linked to its catalog.
//!
//! It owns the [`McpClient`] (and so the server's process tree) and watches it: when
//! the process exits or the transport ends, it records why ([`ConnectionEnd`], in a
//! slot its catalog holds) and stops, so the catalog's supervision handler learns the
//! typed cause at once. Closing happens in `post_stop`, so every way the actor ends
//! (eviction, failure, runtime shutdown) closes the tree, logs its stderr and marks
//! every [`Dispatch`] of it closed.
//!
//! Calls never pass through this actor: callers hold a [`Dispatch`] built by the
//! catalog when the connection was made, and send requests themselves.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use rmcp::model::JsonObject;
use tokio::sync::{Semaphore, watch};

use rmcp::model::Tool;

use crate::actors::shared::Shared;
use crate::core::{Declaration, Fingerprint};
use crate::events::{EventHub, EventKind, ListKind};
use crate::offer::{Offered, Shaped};
use crate::redact::Redactor;
use crate::telemetry::{Gauge, Level, TraceHeader};
use crate::transport::{
    CallFailure, CallTiming, CallWatch, Listener, McpClient, PROMPTS, RESOURCES, ServerSignals,
    TOOLS, TransportEnd,
};

/// A server that connected and listed its tools.
pub(crate) struct Connected {
    pub declaration: Arc<Declaration>,
    pub client: McpClient,
    /// Its listing, shaped and checked against its pins.
    pub shaped: Shaped,
    /// Every secret the connection knows.
    pub redactor: Redactor,
    /// Flags its notifications set.
    pub signals: Arc<ServerSignals>,
}

/// A live connection as the planner sees it.
#[derive(Debug, Clone)]
pub(crate) struct LivePeer {
    /// Its server id.
    pub server: String,
    /// The fingerprint of the declaration it was connected with.
    pub fingerprint: Fingerprint,
    /// Whether the server announced a changed tool list since the last turn.
    pub list_changed: bool,
}

/// Why a connection ended on its own (not closed by its catalog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectionEnd {
    /// The server process exited, with this status.
    Exited(String),
    /// The transport ended, for this reason.
    Transport(TransportEnd),
}

impl std::fmt::Display for ConnectionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectionEnd::Exited(status) => write!(f, "the server process exited ({status})"),
            ConnectionEnd::Transport(end) => end.fmt(f),
        }
    }
}

/// Where a connection leaves why it ended, read by its catalog when it stops.
pub(crate) type EndSlot = Arc<OnceLock<ConnectionEnd>>;

/// Messages of a connection actor (from its own watcher task).
pub(crate) enum ConnectionMsg {
    /// The connection ended on its own.
    Ended(ConnectionEnd),
    /// A server's list (tools, resources, prompts) changed (once per change window: the
    /// bit stays set until a turn reads it).
    ListsChanged,
}

#[cfg(feature = "cluster")]
impl ractor::Message for ConnectionMsg {}

/// The right to send requests on one connection, built by the catalog from what it
/// holds (no message to the connection actor): the request handle, the serial permit,
/// the call timeout, and a watch that turns `true` once the connection closed.
#[derive(Clone)]
pub(crate) struct Dispatch {
    peer: rmcp::Peer<rmcp::RoleClient>,
    /// One permit when calls to this server must not overlap.
    serial: Option<Arc<Semaphore>>,
    timing: CallTiming,
    /// `tool_timeouts`: per-tool call timeouts over `timing.timeout`.
    tool_timeouts: Arc<std::collections::BTreeMap<String, Duration>>,
    /// Where the server's progress for a call is routed, and its requests for input
    /// (2026-07-28) are answered.
    signals: Arc<ServerSignals>,
    /// Where a modern connection's resource subscriptions go.
    listener: Option<Arc<Listener>>,
    closed: watch::Receiver<bool>,
}

impl Dispatch {
    /// The dispatch rights on `client`'s connection, and the switch that closes them.
    pub(crate) fn new(
        client: &McpClient,
        declaration: &Declaration,
        signals: Arc<ServerSignals>,
    ) -> (Self, watch::Sender<bool>) {
        let (closer, closed) = watch::channel(false);
        let serial =
            (!declaration.supports_parallel_tool_calls).then(|| Arc::new(Semaphore::new(1)));
        let dispatch = Dispatch {
            peer: client.peer(),
            serial,
            timing: CallTiming {
                timeout: declaration.call_timeout,
                max: declaration.max_call_timeout,
            },
            tool_timeouts: Arc::new(declaration.tool_timeouts.clone()),
            signals,
            listener: client.listener(),
            closed,
        };
        (dispatch, closer)
    }

    /// Whether the connection has closed (the entry is stale).
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// A request handle, for relisting.
    pub(crate) fn peer(&self) -> &rmcp::Peer<rmcp::RoleClient> {
        &self.peer
    }

    /// Sends the call and waits for its result (as `CallToolResult` JSON), holding the
    /// server's serial permit while it runs. On timeout rmcp cancels it on the server.
    ///
    /// # Errors
    /// [`CallFailure`], unredacted.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        watch: CallWatch,
    ) -> Result<serde_json::Value, CallFailure> {
        let _turn = self.serial_turn().await?;
        let mut timing = self.timing;
        if let Some(timeout) = self.tool_timeouts.get(tool) {
            timing.timeout = *timeout;
            timing.max = timing.max.map(|max| max.max(*timeout));
        }
        crate::transport::call_tool(
            &self.peer,
            &self.signals,
            tool,
            arguments,
            timing,
            Some(watch),
        )
        .await
    }

    /// `resources/read`, under the same serial permit and timeout as a call.
    pub(crate) async fn read_resource(
        &self,
        uri: &str,
        trace: Option<TraceHeader>,
    ) -> Result<serde_json::Value, CallFailure> {
        let _turn = self.serial_turn().await?;
        let timeout = self.timing.timeout;
        crate::transport::read_resource(&self.peer, &self.signals, uri, timeout, trace).await
    }

    /// `resources/subscribe` (2025-11-25), or a wider `subscriptions/listen`
    /// (2026-07-28), within the call timeout.
    pub(crate) async fn subscribe(&self, uri: &str) -> Result<(), CallFailure> {
        match &self.listener {
            Some(listener) => listener.subscribe(uri, self.timing.timeout).await,
            None => crate::transport::subscribe(&self.peer, uri, self.timing.timeout).await,
        }
    }

    /// `prompts/get`, under the same serial permit and timeout as a call.
    pub(crate) async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        trace: Option<TraceHeader>,
    ) -> Result<rmcp::model::GetPromptResult, CallFailure> {
        let _turn = self.serial_turn().await?;
        let timeout = self.timing.timeout;
        let prompt = (name, arguments);
        crate::transport::get_prompt(&self.peer, &self.signals, prompt, timeout, trace).await
    }

    async fn serial_turn(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, CallFailure> {
        match &self.serial {
            Some(s) => s
                .acquire()
                .await
                .map(Some)
                .map_err(|_| CallFailure::Closed("connection closed".into())),
            None => Ok(None),
        }
    }
}

/// A live connection as its catalog holds it: the actor, what it listed, and the
/// right to send on it.
pub(crate) struct Live {
    pub actor: ActorRef<ConnectionMsg>,
    pub declaration: Arc<Declaration>,
    pub tools: Arc<Vec<Tool>>,
    /// What the server offers beside tools, shaped (redacted, filtered, capped).
    pub offer: Arc<Offered>,
    /// Tools the server listed, before bounds and filters.
    pub listed: usize,
    /// What listing found wrong (cut lists, hidden or duplicate names): a diagnostic
    /// every turn.
    pub notes: Vec<String>,
    pub redactor: Redactor,
    pub pid: Option<u32>,
    /// Flags the server's notifications set, read and cleared by the next turn.
    pub signals: Arc<ServerSignals>,
    /// The right to send on this connection.
    pub dispatch: Dispatch,
    /// Why the connection ended on its own, left by its actor before it stops.
    pub end: EndSlot,
    /// Changes whenever `tools` does: what the warm-turn cache is keyed by.
    pub generation: u64,
    /// Set while definitions are held back: the pin file whose change relists.
    pub held: Option<crate::pins::Watch>,
}

impl Live {
    /// Puts a new connection under `supervisor` (its catalog): the actor that owns the
    /// client, the dispatch rights, and the tools shaped from its listing.
    ///
    /// # Errors
    /// When the actor cannot start; the client is dropped, and its guard kills the
    /// process group.
    pub(crate) async fn start(
        connected: Connected,
        shared: &Shared,
        session: &str,
        supervisor: ractor::ActorCell,
        generation: u64,
    ) -> Result<Live, String> {
        let Connected {
            declaration,
            client,
            shaped,
            redactor,
            signals,
        } = connected;
        let pid = client.pid();
        let (dispatch, closer) = Dispatch::new(&client, &declaration, Arc::clone(&signals));
        let end = EndSlot::default();
        let args = ConnectionArgs {
            client,
            declaration: Arc::clone(&declaration),
            session: session.to_string(),
            hub: Arc::clone(&shared.hub),
            grace: shared.config.close_grace,
            signals: Arc::clone(&signals),
            end: Arc::clone(&end),
            closer,
            counted: counted(&shared.config.telemetry, pid.is_some()),
        };
        let (actor, _) = Actor::spawn_linked(None, Connection, args, supervisor)
            .await
            .map_err(|e| format!("cannot start the connection actor: {e}"))?;
        Ok(Live {
            actor,
            declaration,
            tools: Arc::new(shaped.tools),
            offer: Arc::new(shaped.offer),
            listed: shaped.listed,
            notes: shaped.notes,
            redactor,
            pid,
            signals,
            dispatch,
            end,
            generation,
            held: shaped.held,
        })
    }
}

impl Live {
    /// A relisting after `tools/list_changed`: the new tools, or the (redacted) reason
    /// the connection must close.
    ///
    /// # Errors
    /// When the listing failed.
    pub(crate) fn relisted(
        &mut self,
        shaped: Result<Shaped, String>,
        generation: u64,
    ) -> Result<(), String> {
        let shaped = shaped.map_err(|e| {
            let e = crate::result::cap(&self.redactor.text(&e, crate::redact::View::Durable));
            format!("relisting failed after a list change: {e}")
        })?;
        self.tools = Arc::new(shaped.tools);
        self.offer = Arc::new(shaped.offer);
        self.notes = shaped.notes;
        self.held = shaped.held;
        self.generation = generation;
        Ok(())
    }

    /// What the planner needs of this connection; reads and clears its tools flag (a
    /// flag the connection's notifications set: reading it costs no message, so a warm
    /// turn touches no other actor).
    pub(crate) fn take_peer(&self) -> LivePeer {
        LivePeer {
            server: self.declaration.server_id.clone(),
            fingerprint: self.declaration.fingerprint,
            // A person approving what this connection holds back (its pin file
            // changed) relists it, like a change the server announced.
            list_changed: self.signals.take_lists_changed() != 0
                || self.held.as_ref().is_some_and(crate::pins::Watch::moved),
        }
    }
}

/// Stops every connection in `live` and waits (bounded by the grace) until each has
/// closed its transport and ended its process tree. Returns how many there were.
pub(crate) async fn close_all(live: Vec<Live>, reason: &str, grace: Duration) -> usize {
    let count = live.len();
    let waits = live.into_iter().map(|l| async move {
        let _ = l
            .actor
            .stop_and_wait(Some(format!("closed: {reason}")), Some(grace * 4))
            .await;
    });
    futures::future::join_all(waits).await;
    count
}

pub(crate) struct ConnectionArgs {
    pub client: McpClient,
    pub declaration: Arc<Declaration>,
    pub session: String,
    pub hub: Arc<EventHub>,
    pub grace: Duration,
    pub signals: Arc<ServerSignals>,
    /// Where the actor leaves why it ended on its own.
    pub end: EndSlot,
    /// Turned on in `post_stop`: every [`Dispatch`] of this connection is closed.
    pub closer: watch::Sender<bool>,
    /// This connection (and its server process) in the gauges, while the actor lives.
    pub counted: [Level; 2],
}

/// A connection's parts of the gauges: one connection, and one process when it has one.
fn counted(telemetry: &crate::telemetry::Telemetry, process: bool) -> [Level; 2] {
    let mut connection = telemetry.gauge(Gauge::Connections);
    connection.set(1);
    let mut processes = telemetry.gauge(Gauge::Processes);
    processes.set(usize::from(process));
    [connection, processes]
}

pub(crate) struct Connection;

pub(crate) struct ConnectionState {
    client: Option<McpClient>,
    signals: Arc<ServerSignals>,
    declaration: Arc<Declaration>,
    session: String,
    hub: Arc<EventHub>,
    grace: Duration,
    end: EndSlot,
    closer: watch::Sender<bool>,
    watcher: tokio::task::JoinHandle<()>,
    _counted: [Level; 2],
}

impl Actor for Connection {
    type Msg = ConnectionMsg;
    type State = ConnectionState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ConnectionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let ConnectionArgs {
            client,
            declaration,
            session,
            hub,
            grace,
            signals,
            end,
            closer,
            counted,
        } = args;
        let watcher = tokio::spawn(watch_connection(&client, Arc::clone(&signals), myself));
        Ok(ConnectionState {
            client: Some(client),
            signals,
            declaration,
            session,
            hub,
            grace,
            end,
            closer,
            watcher,
            _counted: counted,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConnectionMsg::Ended(end) => {
                let _ = state.end.set(end);
                myself.stop(None);
            }
            ConnectionMsg::ListsChanged => {
                let changed = state.signals.take_unannounced();
                let server = || state.declaration.server_id.clone();
                if changed & TOOLS != 0 {
                    state
                        .hub
                        .emit(&state.session, EventKind::ToolsChanged { server: server() });
                }
                for (bit, list) in [
                    (RESOURCES, ListKind::Resources),
                    (PROMPTS, ListKind::Prompts),
                ] {
                    if changed & bit != 0 {
                        state.hub.emit(
                            &state.session,
                            EventKind::ListChanged {
                                server: server(),
                                list,
                            },
                        );
                    }
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.watcher.abort();
        let _ = state.closer.send(true);
        if let Some(client) = state.client.take() {
            // Ends the process tree and logs its stderr.
            client.close(state.grace).await;
        }
        Ok(())
    }
}

/// One task per connection: the process's exit, the transport's end, and the wake-ups
/// of its notification flags, each turned into a message to the actor.
fn watch_connection(
    client: &McpClient,
    signals: Arc<ServerSignals>,
    me: ActorRef<ConnectionMsg>,
) -> impl Future<Output = ()> + Send + 'static {
    let exit = client.exit_watch();
    let mut transport = client.transport_watch();
    let cause = client.transport_watch();
    async move {
        let exited = async move {
            match exit {
                Some(mut exit) => exit
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .map(|s| s.clone().unwrap_or_default()),
                None => std::future::pending().await,
            }
        };
        let closed = async {
            let end = transport
                .wait_for(Option::is_some)
                .await
                .ok()
                .map(|end| end.clone().unwrap_or(TransportEnd::Closed));
            let Some(end) = end else {
                return std::future::pending().await;
            };
            // An exiting process also ends its transport; give the exit status a moment
            // to arrive first, since it says more (unless the runtime ended the stream
            // itself, which says most).
            if !end.on_purpose() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            end
        };
        tokio::pin!(exited, closed);
        loop {
            tokio::select! {
                status = &mut exited => {
                    // A server the runtime cut off exits when its pipes close; the cut
                    // is what to report.
                    let cut = cause.borrow().clone().filter(TransportEnd::on_purpose);
                    let end = match (cut, status) {
                        (Some(end), _) => ConnectionEnd::Transport(end),
                        (None, Some(status)) => ConnectionEnd::Exited(status),
                        (None, None) => return,
                    };
                    let _ = me.cast(ConnectionMsg::Ended(end));
                    return;
                }
                end = &mut closed => {
                    let _ = me.cast(ConnectionMsg::Ended(ConnectionEnd::Transport(end)));
                    return;
                }
                () = signals.changed.notified() => {
                    if me.cast(ConnectionMsg::ListsChanged).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
