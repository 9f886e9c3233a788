//! A stdio server's process: spawned in its own process group with exactly the
//! environment it was given, recorded in the [`Registry`], its stderr captured, and
//! closed so that its whole tree ends and its stderr reaches the private log, once,
//! here and nowhere else.
//!
//! The [`ChildProcess`] guard ends the tree when dropped, so a cancelled connect
//! (timeout, eviction) never leaves a process behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use super::{Registry, StderrCapture, append_stderr_log};
use crate::redact::Redactor;

/// Where a server's stderr goes when it closes: the log of `home`, under a header
/// naming the server and session, redacted with the connection's secrets.
#[derive(Debug, Clone)]
pub struct StderrLog {
    /// Runtime home (the log is `<home>/logs/mcp-stderr.log`).
    pub home: PathBuf,
    /// Server id, for the entry's header.
    pub server: String,
    /// Session id, for the entry's header.
    pub session: String,
    /// The connection's secrets.
    pub redactor: Redactor,
}

impl StderrLog {
    /// The log file.
    pub fn path(&self) -> PathBuf {
        self.home.join("logs").join("mcp-stderr.log")
    }
}

/// What closing a server observed.
#[derive(Debug, Clone, Default)]
pub struct CloseReport {
    /// The log file, when this close appended an entry to it.
    pub logged: Option<PathBuf>,
    /// The last lines of that entry (redacted, escaped, cut), for a diagnostic.
    pub tail: Vec<String>,
}

/// A running server and its process group.
pub(crate) struct ChildProcess {
    pid: u32,
    exit: watch::Receiver<Option<String>>,
    stderr: Option<StderrCapture>,
    log: StderrLog,
    /// Where the server's whole tree is recorded and ended.
    registry: Arc<Registry>,
    /// Set once the tree was ended on purpose; Drop then has nothing to do.
    closed: bool,
    /// The egress proxy of a `network: proxy` server, ended with it.
    _proxy: Option<crate::sandbox::egress::Running>,
}

impl ChildProcess {
    /// Starts `program` in `cwd` with exactly `env`, in a process group of its own,
    /// stdin and stdout piped for MCP, stderr captured.
    ///
    /// # Errors
    /// The spawn's error (the program cannot be started).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn spawn(
        program: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: &Path,
        registry: &Arc<Registry>,
        log: StderrLog,
        sandbox: Option<&crate::sandbox::Confinement>,
        egress: Option<crate::sandbox::egress::Egress>,
    ) -> std::io::Result<(ChildProcess, ChildStdin, ChildStdout)> {
        // Declared first, dropped last: a start that fails ends what it recorded once
        // its spawn is no longer under way (its orphans are then ended at once).
        let recorded = Recorded::new(registry);
        let spawning = registry.spawning();
        let (mut child, listener) = match sandbox {
            None => {
                let mut command = Command::new(program);
                command
                    .args(args)
                    .env_clear()
                    .envs(env)
                    .current_dir(cwd)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .kill_on_drop(true);
                (command.spawn()?, None)
            }
            Some(confinement) => {
                // Recorded at once: a sweep must not take the launcher for an orphan
                // while it confines itself.
                let record = |pid, spawner| recorded.record(pid, spawner);
                crate::sandbox::spawn(confinement, program, args, env, cwd, record).await?
            }
        };
        // The proxy lives as long as the process (its guard drops with it).
        let proxy = match (listener, egress) {
            (Some(listener), Some(egress)) => {
                Some(crate::sandbox::egress::serve(listener, egress)?)
            }
            _ => None,
        };
        let pid = child.id().unwrap_or_default();
        if sandbox.is_none() {
            // On the thread that spawned it: nothing was awaited since.
            recorded.record(pid, super::tree::this_thread());
        }
        drop(spawning);
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (exit_tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("unknown ({e})"),
            };
            let _ = exit_tx.send(Some(status));
        });
        let process = ChildProcess {
            pid,
            exit,
            stderr: stderr.and_then(|s| StderrCapture::start(s).ok()),
            log,
            registry: Arc::clone(registry),
            closed: false,
            _proxy: proxy,
        };
        // From here the process's own drop ends its tree.
        recorded.keep();
        match (stdin, stdout) {
            (Some(stdin), Some(stdout)) => Ok((process, stdin, stdout)),
            _ => Err(std::io::Error::other(
                "the child's stdio pipes were not available",
            )),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn exit_watch(&self) -> watch::Receiver<Option<String>> {
        self.exit.clone()
    }

    /// The exit status if the process has exited.
    pub(crate) fn exited(&self) -> Option<String> {
        self.exit.borrow().clone()
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

    /// Waits up to `wait` for the process to exit on its own; its status if it did.
    pub(crate) async fn exit_within(&mut self, wait: Duration) -> Option<String> {
        self.wait_exit(wait).await;
        self.exited()
    }

    async fn wait_exit(&mut self, wait: Duration) -> bool {
        let mut rx = self.exit.clone();
        tokio::time::timeout(wait, rx.wait_for(Option::is_some))
            .await
            .is_ok()
    }

    /// Records what is below the server now: to be called before its stdin closes (a
    /// server exits at end of input, and its children become orphans then, no longer
    /// below it).
    pub(crate) fn record_tree(&self) {
        self.registry.snapshot(self.pid);
    }

    /// Stops the server, its tree recorded ([`ChildProcess::record_tree`]) before its
    /// stdin was closed: wait for a voluntary exit, SIGTERM to its group, then ends its
    /// whole tree (every descendant, whatever group or session it moved to, and
    /// orphans it left behind), waits for the exit, and appends the redacted stderr
    /// window to the log.
    pub(crate) async fn close(mut self, grace: Duration) -> CloseReport {
        if !self.wait_exit(grace).await {
            self.signal_group(Signal::SIGTERM);
            self.wait_exit(grace).await;
        }
        self.end(grace).await
    }

    /// Ends the tree at once (a server that failed to start gets no grace), what it
    /// started recorded first, while it is still below it.
    pub(crate) async fn kill(self, grace: Duration) -> CloseReport {
        self.registry.snapshot(self.pid);
        self.end(grace).await
    }

    async fn end(mut self, grace: Duration) -> CloseReport {
        // The tree first, while the server may still hold it: killed first, its children
        // would be orphans before the walk, found only by a marker they may have shed.
        self.registry.end(self.pid);
        self.signal_group(Signal::SIGKILL);
        self.wait_exit(grace).await;
        self.closed = true;
        let (mut logged, mut tail) = (None, Vec::new());
        if let Some(capture) = self.stderr.take() {
            let captured = capture.finish(grace).await;
            let l = &self.log;
            match append_stderr_log(&l.home, &l.server, &l.session, &captured, &l.redactor) {
                Ok(Some(last)) => {
                    logged = Some(l.path());
                    tail = last;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("cannot write the MCP stderr log: {e}"),
            }
        }
        CloseReport { logged, tail }
    }
}

/// A server recorded while its start is under way: its tree is ended when the start
/// fails, stops at an error or is cancelled before a [`ChildProcess`] holds it.
struct Recorded<'a> {
    registry: &'a Arc<Registry>,
    pid: std::sync::atomic::AtomicU32,
}

impl<'a> Recorded<'a> {
    fn new(registry: &'a Arc<Registry>) -> Self {
        Recorded {
            registry,
            pid: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Records server `pid`, started from host thread `spawner`.
    fn record(&self, pid: u32, spawner: u32) {
        self.registry.started(pid, spawner);
        self.pid.store(pid, std::sync::atomic::Ordering::Release);
    }

    /// Leaves the tree to the connection.
    fn keep(self) {
        self.pid.store(0, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Recorded<'_> {
    fn drop(&mut self) {
        let pid = self.pid.load(std::sync::atomic::Ordering::Acquire);
        if pid != 0 {
            self.registry.end(pid);
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if !self.closed {
            self.registry.end(self.pid);
            self.signal_group(Signal::SIGKILL);
        }
    }
}
