//! stdio servers: a child process in its own process group, with a cleared environment,
//! stdin/stdout carrying MCP, stderr captured.
//!
//! The [`ChildProcess`] guard kills the whole group when dropped, so a cancelled connect
//! (timeout, eviction) can never leave a process behind.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::sync::Arc;
use tokio::process::Command;

use tokio::sync::watch;

use super::client::{CloseReport, ListedTools, McpClient, ServerSignals, StartError};
use super::framing::StdioTransport;
use super::guard::{EndCause, Guarded, Traffic};
use crate::process::{CapturedStderr, Registry, StderrCapture};

/// Everything needed to start one stdio server, already authorized and interpolated.
#[derive(Clone)]
pub struct StdioLaunch {
    /// Program.
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// The complete environment (allowlist, HOME, declared entries).
    pub env: BTreeMap<String, String>,
    /// The checked working directory (resolved once, used as is).
    pub cwd: PathBuf,
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

/// A running child and its process group.
pub(crate) struct ChildProcess {
    pid: u32,
    exit: watch::Receiver<Option<String>>,
    stderr: Option<StderrCapture>,
    /// Where the server's whole tree is recorded and ended.
    registry: Arc<Registry>,
    /// Set once the tree was ended on purpose; Drop then has nothing to do.
    closed: bool,
}

impl ChildProcess {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit.clone()
    }

    fn signal_group(&self, signal: Signal) {
        // Never signal group 0 or 1: `killpg(0)` is our own group. (A spawned child
        // always has a pid; this only guards against an impossible zero.)
        if self.pid <= 1 || self.pid > i32::MAX as u32 {
            return;
        }
        // ESRCH (group already gone) is the expected outcome after a clean exit.
        let _ = killpg(Pid::from_raw(self.pid as i32), signal);
    }

    async fn wait_exit(&mut self, wait: Duration) -> bool {
        let mut rx = self.exit.clone();
        tokio::time::timeout(wait, rx.wait_for(Option::is_some))
            .await
            .is_ok()
    }

    /// Stops the server: wait for a voluntary exit (stdin is already closed), SIGTERM to
    /// its group, then ends its whole tree (every descendant, whatever group or session
    /// it moved to, and orphans it left behind) and waits for the exit.
    pub(crate) async fn close(mut self, grace: Duration) -> CloseReport {
        // Recorded before the server may exit: its children become orphans then.
        self.registry.snapshot(self.pid);
        if !self.wait_exit(grace).await {
            self.signal_group(Signal::SIGTERM);
            self.wait_exit(grace).await;
        }
        self.signal_group(Signal::SIGKILL);
        self.registry.end(self.pid);
        self.wait_exit(grace).await;
        self.closed = true;
        let exit = self.exit.borrow().clone();
        let stderr = match self.stderr.take() {
            Some(capture) => Some(capture.finish(grace).await),
            None => None,
        };
        CloseReport { exit, stderr }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if !self.closed {
            self.signal_group(Signal::SIGKILL);
            self.registry.end(self.pid);
        }
    }
}

/// Starts the server, initializes MCP and lists its tools, all within `timeout`.
///
/// On failure the process group is killed and the stderr captured so far is returned
/// with the (unredacted) message, so the caller can log it.
///
/// # Errors
/// The message and the stderr window.
pub async fn connect_stdio(
    launch: &StdioLaunch,
    signals: Arc<ServerSignals>,
    timeout: Duration,
    grace: Duration,
    registry: &Arc<Registry>,
) -> Result<(McpClient, ListedTools), (String, Option<CapturedStderr>)> {
    let mut command = Command::new(&launch.command);
    command
        .args(&launch.args)
        .env_clear()
        .envs(&launch.env)
        .current_dir(&launch.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let spawning = registry.spawning();
    let mut child = command
        .spawn()
        .map_err(|e| (format!("cannot start `{}`: {e}", launch.command), None))?;
    let pid = child.id().unwrap_or_default();
    registry.started(pid);
    drop(spawning);
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let (exit_tx, exit_rx) = watch::channel(None);
    tokio::spawn(async move {
        let status = match child.wait().await {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        let _ = exit_tx.send(Some(status));
    });
    let process = ChildProcess {
        pid,
        exit: exit_rx,
        stderr: stderr.and_then(|s| StderrCapture::start(s).ok()),
        registry: Arc::clone(registry),
        closed: false,
    };
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        let report = process.close(grace).await;
        return Err((
            "the child's stdio pipes were not available".into(),
            report.stderr,
        ));
    };

    let (cause, traffic) = (EndCause::default(), Arc::new(Traffic::default()));
    let framing = StdioTransport::new(stdout, stdin, Arc::clone(&traffic), Arc::clone(&cause));
    let (transport, transport_closed) = Guarded::new(framing, traffic, Arc::clone(&cause));
    let started =
        super::client::initialize_and_list(transport, signals, timeout, transport_closed.clone())
            .await;
    match started {
        Ok((service, listed)) => Ok((
            McpClient::new(service, Some(process), transport_closed),
            listed,
        )),
        Err(StartError::Failed(message)) => {
            let exited = process.exit.borrow().clone();
            let report = close_failed(process, grace).await;
            let message = match (cause.get(), exited.or(report.exit)) {
                (Some(end), _) if end.on_purpose() => message,
                (_, Some(status)) => format!("{message} (process exited: {status})"),
                (_, None) => message,
            };
            Err((message, report.stderr))
        }
        Err(StartError::TimedOut) => {
            let report = close_failed(process, grace).await;
            Err((
                format!(
                    "no answer within the connect timeout of {:.1}s (start, initialize and tools/list)",
                    timeout.as_secs_f64()
                ),
                report.stderr,
            ))
        }
    }
}

async fn close_failed(process: ChildProcess, grace: Duration) -> CloseReport {
    // A server that failed to start gets no grace for a voluntary exit; what it started
    // is recorded first, while it is still below it.
    process.registry.snapshot(process.pid);
    process.signal_group(Signal::SIGKILL);
    process.close(grace).await
}
