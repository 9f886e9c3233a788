//! stdio servers: a child process in its own process group (`process::ChildProcess`),
//! stdin and stdout carrying MCP through our framing, stderr captured.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::client::McpClient;
use super::framing::StdioTransport;
use super::guard::{EndCause, Guarded, Traffic};
use super::requests::ListedTools;
use super::signals::ServerSignals;
use super::{ConnectError, ConnectErrorKind, StageKind};
use crate::process::{ChildProcess, Registry, StderrLog};

/// Everything needed to start one stdio server, already authorized and interpolated.
#[derive(Clone)]
pub(crate) struct StdioLaunch {
    /// The program (looked up on the allowlisted `PATH` when not a path).
    pub command: String,
    /// Its arguments, passed as they are.
    pub args: Vec<String>,
    /// The complete environment (allowlist, HOME, declared entries).
    pub env: BTreeMap<String, String>,
    /// The checked working directory (resolved once, used as is).
    pub cwd: PathBuf,
    /// Where the server's stderr is logged, with the connection's secrets.
    pub log: StderrLog,
    /// The runtime's record of server processes.
    pub registry: Arc<Registry>,
    /// The confinement the launcher applies before it execs the server, when sandboxed.
    pub sandbox: Option<crate::sandbox::Confinement>,
    /// The egress proxy's policy and reporting, for `network: proxy`.
    pub egress: Option<crate::sandbox::egress::Egress>,
    /// The protocol era to speak.
    pub protocol: crate::core::Protocol,
}

impl std::fmt::Debug for StdioLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values of env and args may be secrets: show names and counts only.
        f.debug_struct("StdioLaunch")
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// How long a server that failed to start is given to exit on its own.
const EXIT_WAIT: Duration = Duration::from_millis(250);

/// Starts the server, initializes MCP and lists its tools, all within `timeout`. On
/// failure the tree is ended and its stderr logged before the error returns.
pub(super) async fn connect(
    launch: StdioLaunch,
    signals: Arc<ServerSignals>,
    timeout: Duration,
    grace: Duration,
) -> Result<(McpClient, ListedTools), ConnectError> {
    let spawn = ChildProcess::spawn(
        &launch.command,
        &launch.args,
        &launch.env,
        &launch.cwd,
        &launch.registry,
        launch.log.clone(),
        launch.sandbox.as_ref(),
        launch.egress.clone(),
    );
    let spawned = signals.stages.timed(StageKind::Spawn, spawn).await;
    let (process, stdin, stdout) = spawned.map_err(|e| ConnectError {
        kind: ConnectErrorKind::Spawn,
        message: format!("cannot start `{}`: {e}", launch.command),
        logged: None,
        stderr_tail: Vec::new(),
    })?;
    let (cause, traffic) = (EndCause::default(), Arc::new(Traffic::default()));
    let framing = StdioTransport::new(stdout, stdin, Arc::clone(&traffic), Arc::clone(&cause));
    let (transport, transport_closed) = Guarded::new(framing, traffic, Arc::clone(&cause));
    // The framing waits for the pacing before each line.
    let transport = transport.paced_inside();
    let started = super::client::initialize_and_list(
        transport,
        signals,
        launch.protocol,
        timeout,
        transport_closed.clone(),
    )
    .await;
    if let (Ok(_), Some(confinement)) = (&started, &launch.sandbox) {
        confinement.prepare_next();
    }
    let (kind, message) = match started {
        Ok((service, listed, listener)) => {
            return Ok((
                McpClient::new(service, listener, Some(process), transport_closed),
                listed,
            ));
        }
        Err(e) => e.described(timeout, "start, initialize and tools/list"),
    };
    let mut process = process;
    // A server that failed on its own is usually exiting: a moment for its status,
    // which says more than "connection closed". One that stays up is ended by the
    // runtime, and its status (SIGKILL) would blame the server for what the runtime did.
    let exited = match kind {
        ConnectErrorKind::Failed => process.exit_within(EXIT_WAIT.min(grace)).await,
        _ => process.exited(),
    };
    let report = process.kill(grace).await;
    // The exit status says more than "connection closed", unless the runtime ended
    // the stream itself (a flood), which says most.
    let message = match (cause.get(), exited) {
        (Some(end), _) if end.on_purpose() => message,
        (_, Some(status)) if kind == ConnectErrorKind::Failed => {
            format!("{message} (the server exited: {status})")
        }
        _ => message,
    };
    Err(ConnectError {
        kind,
        message,
        logged: report.logged,
        stderr_tail: report.tail,
    })
}
