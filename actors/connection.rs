//! One actor per live server connection, spawned linked to its catalog.
//!
//! It owns the [`McpClient`] (and so the child process group). Calls run on spawned
//! tasks so the mailbox stays free; `supports_parallel_tool_calls: false` serializes
//! them through a one-permit semaphore. When the child exits or the transport breaks,
//! the actor stops at once with a `failed:` reason, which its catalog (the supervisor)
//! turns into a diagnostic and a failure-cache entry. Closing happens in `post_stop`,
//! so every way the actor ends (eviction, failure, runtime shutdown) closes the group
//! and writes the stderr log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use rmcp::model::JsonObject;
use tokio::sync::Semaphore;

use crate::core::Declaration;
use crate::events::{EventHub, EventKind};
use crate::process::append_stderr_log;
use crate::redact::Redactor;
use crate::transport::{CallFailure, McpClient, ServerSignals, TransportEnd};

/// Prefix of a stop reason that means "this connection failed" (vs. closed on purpose).
pub(crate) const FAILED: &str = "failed: ";

/// Messages of a connection actor.
pub enum ConnectionMsg {
    /// Grant dispatch rights for one catalog: the actor checks the binding and that the
    /// connection is open, and answers with what callers need to send requests
    /// themselves. Asked once per connection, so a call costs no actor message; closing
    /// the connection revokes every grant (requests then fail as closed).
    Dispatch {
        /// The catalog this call's entry was bound by; a mismatch is refused.
        catalog_id: u64,
        /// The grant, or why there is none.
        reply: RpcReplyPort<Result<Dispatch, CallFailure>>,
    },
    /// The child process exited.
    ProcessExited(String),
    /// The server side of the transport ended, and why.
    TransportClosed(TransportEnd),
    /// The server's tool list changed (once per change window: the flag stays set
    /// until a turn reads it).
    ToolsChanged,
}

/// The right to send requests on a connection, bound to its catalog.
#[derive(Clone)]
pub struct Dispatch {
    peer: rmcp::Peer<rmcp::RoleClient>,
    /// One permit when calls to this server must not overlap.
    serial: Option<Arc<Semaphore>>,
    timeout: Duration,
}

impl Dispatch {
    /// Sends the call and waits for its result (as `CallToolResult` JSON), holding the
    /// server's serial permit while it runs. On timeout rmcp cancels it on the server.
    ///
    /// # Errors
    /// [`CallFailure`], unredacted.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<serde_json::Value, CallFailure> {
        let _turn = match &self.serial {
            Some(s) => Some(
                s.acquire()
                    .await
                    .map_err(|_| CallFailure::Closed("connection closed".into()))?,
            ),
            None => None,
        };
        crate::transport::call_tool(&self.peer, tool, arguments, self.timeout).await
    }
}

pub(crate) struct ConnectionArgs {
    pub client: McpClient,
    pub declaration: Arc<Declaration>,
    pub catalog_id: u64,
    pub session: String,
    pub redactor: Redactor,
    pub hub: Arc<EventHub>,
    pub home: PathBuf,
    pub grace: Duration,
    pub signals: Arc<ServerSignals>,
}

pub(crate) struct Connection;

pub(crate) struct ConnectionState {
    client: Option<McpClient>,
    declaration: Arc<Declaration>,
    catalog_id: u64,
    session: String,
    redactor: Redactor,
    hub: Arc<EventHub>,
    home: PathBuf,
    grace: Duration,
    /// One permit when calls must not overlap; `None` when they may.
    serial: Option<Arc<Semaphore>>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
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
            catalog_id,
            session,
            redactor,
            hub,
            home,
            grace,
            signals,
        } = args;
        // One watcher task per connection: process exit, transport end, notifications.
        let exit = client.exit_watch();
        let mut transport = client.transport_watch();
        let cause = client.transport_watch();
        let me = myself.clone();
        let watcher = tokio::spawn(async move {
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
                let end = match transport.wait_for(Option::is_some).await {
                    Ok(end) => Some(end.clone().unwrap_or(TransportEnd::Closed)),
                    Err(_) => None,
                };
                let Some(end) = end else {
                    return std::future::pending().await;
                };
                // An exiting process also ends its transport; give the exit status a
                // moment to arrive first, since it says more (unless the runtime ended
                // the stream itself, which says most).
                if end == TransportEnd::Closed {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                end
            };
            tokio::pin!(exited, closed);
            loop {
                tokio::select! {
                    status = &mut exited => {
                        // A server the runtime cut off for flooding exits when its pipes
                        // close; the flood is what to report.
                        let flooded = cause
                            .borrow()
                            .clone()
                            .filter(TransportEnd::on_purpose);
                        let message = match (flooded, status) {
                            (Some(end), _) => ConnectionMsg::TransportClosed(end),
                            (None, Some(status)) => ConnectionMsg::ProcessExited(status),
                            (None, None) => return,
                        };
                        let _ = me.cast(message);
                        return;
                    }
                    end = &mut closed => {
                        let _ = me.cast(ConnectionMsg::TransportClosed(end));
                        return;
                    }
                    () = signals.changed.notified() => {
                        if me.cast(ConnectionMsg::ToolsChanged).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let watchers = vec![watcher];
        let serial =
            (!declaration.supports_parallel_tool_calls).then(|| Arc::new(Semaphore::new(1)));
        Ok(ConnectionState {
            client: Some(client),
            declaration,
            catalog_id,
            session,
            redactor,
            hub,
            home,
            grace,
            serial,
            watchers,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConnectionMsg::Dispatch { catalog_id, reply } => {
                let grant = if catalog_id != state.catalog_id {
                    Err(CallFailure::Closed(
                        "the catalog entry belongs to another catalog".into(),
                    ))
                } else if let Some(client) = &state.client {
                    Ok(Dispatch {
                        peer: client.peer(),
                        serial: state.serial.clone(),
                        timeout: state.declaration.call_timeout,
                    })
                } else {
                    Err(CallFailure::Closed("connection closed".into()))
                };
                let _ = reply.send(grant);
            }
            ConnectionMsg::ProcessExited(status) => {
                myself.stop(Some(format!(
                    "{FAILED}the server process exited ({status})"
                )));
            }
            ConnectionMsg::TransportClosed(end) => {
                myself.stop(Some(format!("{FAILED}{end}")));
            }
            ConnectionMsg::ToolsChanged => {
                state.hub.emit(
                    &state.session,
                    EventKind::ToolsChanged {
                        server: state.declaration.server_id.clone(),
                    },
                );
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for w in state.watchers.drain(..) {
            w.abort();
        }
        if let Some(client) = state.client.take() {
            let report = client.close(state.grace).await;
            if let Some(stderr) = report.stderr
                && let Err(e) = append_stderr_log(
                    &state.home,
                    &state.declaration.server_id,
                    &state.session,
                    &stderr,
                    &state.redactor,
                )
            {
                tracing::warn!("cannot write the MCP stderr log: {e}");
            }
        }
        Ok(())
    }
}
