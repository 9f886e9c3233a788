//! Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663): a server may answer
//! a `tools/call` with a task instead of a result, and the client follows it with
//! `tasks/get` until it ends. The runtime follows it for the call: the caller still gets
//! the final result (or the task's failure); the task's input requests are answered
//! like a multi round-trip's (the host's elicitor, the declared roots, no model); each
//! change of status is a notice (an event, redacted); the task is cancelled on the
//! server (`tasks/cancel`) when the call times out or its caller goes away, so a task
//! ends with its call, and so with its session and the runtime.
//!
//! The server is the adversary here too: it picks the task id (bounded, never shown
//! unredacted), the poll interval (clamped to [`MIN_TASK_POLL`]..[`MAX_TASK_POLL`]), the status
//! message (redacted and capped by the event route), and how long the task runs (the
//! call's timeout, less the time a person spends answering).

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolResult, CancelTaskParams, ClientRequest, CreateTaskResult, GetTaskParams,
    InputRequests, InputRequiredResult, Request, ServerResult, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use rmcp::{Peer, RoleClient};

use super::failure::{CallFailure, send};
use super::notices::CallWatch;
use super::notices::Notice;
use super::rounds::{MAX_INPUT_ROUNDS, answered};
use super::signals::ServerSignals;
use super::task_handle::{TaskHandle, TaskSeen};

/// Longest task id a server may give.
pub const MAX_TASK_ID_BYTES: usize = 256;
/// The shortest wait between two polls of a task, whatever the server suggests.
pub const MIN_TASK_POLL: Duration = Duration::from_millis(100);
/// The longest wait between two polls of a task.
pub const MAX_TASK_POLL: Duration = Duration::from_secs(5);
/// The wait between polls when the server suggests none.
const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// Follows the task `created` to its end within `left`, the call's remaining time
/// (less the time a person spends answering its input requests). `watch` is the
/// call's: its redactor hides the call's secrets in what is reported, its task handle
/// hears the statuses and may cancel.
///
/// # Errors
/// A timeout (the task is then cancelled), the task's failure or cancellation, the
/// host's cancellation, an id over the bound, too many input rounds, a poll that failed.
pub(crate) async fn followed(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    created: CreateTaskResult,
    left: Duration,
    watch: Option<&CallWatch>,
) -> Result<ServerResult, CallFailure> {
    let task = created.task;
    if task.task_id.len() > MAX_TASK_ID_BYTES {
        return Err(CallFailure::Protocol(format!(
            "the server answered with a task whose id is over {MAX_TASK_ID_BYTES} bytes; it was not followed"
        )));
    }
    let mut follow = Follow {
        peer,
        signals,
        watch,
        id: task.task_id,
        left,
        spent: Duration::ZERO,
        rounds: 0,
        cancel_on_drop: true,
    };
    let mut interval = poll_interval(task.poll_interval_ms);
    let mut status = (task.status, task.status_message);
    let mut reported = None;
    loop {
        if reported.as_ref() != Some(&status) {
            follow.report(status.0, status.1.as_deref());
            reported = Some(status.clone());
        }
        follow.pause(interval).await?;
        let detailed = follow.poll().await?;
        interval = poll_interval(detailed.task.poll_interval_ms);
        status = (detailed.task.status, detailed.task.status_message.clone());
        match detailed.payload {
            TaskPayload::InputRequired { input_requests } => follow.answer(input_requests).await?,
            TaskPayload::Completed { result } => {
                follow.cancel_on_drop = false;
                return serde_json::from_value::<CallToolResult>(serde_json::Value::Object(result))
                    .map(ServerResult::CallToolResult)
                    .map_err(|_| {
                        CallFailure::Protocol("the task's result is not a tool result".into())
                    });
            }
            TaskPayload::Failed { error } => {
                follow.cancel_on_drop = false;
                let message = error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no message");
                return Err(CallFailure::Protocol(format!("the task failed: {message}")));
            }
            TaskPayload::Cancelled => {
                follow.cancel_on_drop = false;
                let by = if follow.host_cancelled() {
                    "the host"
                } else {
                    "the server"
                };
                return Err(CallFailure::Protocol(format!("{by} cancelled the task")));
            }
            _ => {}
        }
    }
}

/// One task being followed, and what it has cost so far.
struct Follow<'a> {
    peer: &'a Peer<RoleClient>,
    signals: &'a ServerSignals,
    watch: Option<&'a CallWatch>,
    id: String,
    left: Duration,
    /// The server's time so far: pauses, polls, updates (not a person's answers).
    spent: Duration,
    /// Input rounds answered, at most [`MAX_INPUT_ROUNDS`].
    rounds: usize,
    /// Whether the task is still to be cancelled when the following stops.
    cancel_on_drop: bool,
}

impl Drop for Follow<'_> {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.cancel_on_drop {
            let (peer, id) = (self.peer.clone(), std::mem::take(&mut self.id));
            runtime.spawn(async move { cancelled(&peer, &id).await });
        }
    }
}

impl Follow<'_> {
    fn remaining(&self) -> Duration {
        self.left.saturating_sub(self.spent)
    }

    fn host_cancelled(&self) -> bool {
        self.watch
            .and_then(|w| w.task.as_ref())
            .is_some_and(TaskHandle::is_cancelled)
    }

    /// A status to the call's events and the host's handle, redacted with the call's
    /// secrets (a status message may repeat an argument).
    fn report(&self, status: TaskStatus, message: Option<&str>) {
        let status = serde_json::to_value(status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let notice = Notice::Task {
            id: self.id.clone(),
            status: status.clone(),
            message: message.map(str::to_string),
        };
        let Some(watch) = self.watch else {
            self.signals.notices.deliver(notice);
            return;
        };
        self.signals.notices.deliver_for(watch, notice);
        if let Some(handle) = &watch.task {
            let shown = |text: &str| {
                crate::result::cap(&watch.redactor.text(text, crate::redact::View::Model))
            };
            handle.saw(TaskSeen {
                id: shown(&self.id),
                status,
                message: message.map(shown),
            });
        }
    }

    /// Waits `interval` (or less, when the time is running out), unless the host
    /// cancels; out of time or cancelled, cancels the task on the server first.
    async fn pause(&mut self, interval: Duration) -> Result<(), CallFailure> {
        let remaining = self.remaining();
        if remaining.is_zero() {
            return Err(self.stop(CallFailure::Timeout(self.left)).await);
        }
        let pause = interval.min(remaining);
        let host = self.watch.and_then(|w| w.task.clone());
        let cancelled = async {
            match &host {
                Some(handle) => handle.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = cancelled => {
                let stopped = CallFailure::Cancelled("the host cancelled the task".into());
                return Err(self.stop(stopped).await);
            }
        }
        self.spent += pause;
        Ok(())
    }

    /// Cancels the task on the server, then gives `failure` (so the server heard it
    /// before the caller hears of it).
    async fn stop(&mut self, failure: CallFailure) -> CallFailure {
        self.cancel_on_drop = false;
        cancelled(self.peer, &self.id).await;
        failure
    }

    async fn poll(&mut self) -> Result<rmcp::model::DetailedTask, CallFailure> {
        let request = ClientRequest::GetTaskRequest(Request::new(GetTaskParams::new(&self.id)));
        match self.timed(request).await? {
            ServerResult::GetTaskResult(result) => Ok(result.task),
            _ => Err(CallFailure::Protocol(
                "unexpected response to tasks/get".into(),
            )),
        }
    }

    /// A request of the following, its time charged, a timeout said as the call's.
    async fn timed(&mut self, request: ClientRequest) -> Result<ServerResult, CallFailure> {
        let sent = Instant::now();
        let answer = send(self.peer, request, self.remaining()).await;
        self.spent += sent.elapsed();
        match answer {
            Err(CallFailure::Timeout(_)) => Err(self.stop(CallFailure::Timeout(self.left)).await),
            other => other,
        }
    }

    /// Answers the task's input requests like a multi round-trip's, at most
    /// [`MAX_INPUT_ROUNDS`] times; a person's time answering is not charged.
    async fn answer(&mut self, input_requests: InputRequests) -> Result<(), CallFailure> {
        self.rounds += 1;
        if self.rounds > MAX_INPUT_ROUNDS {
            let failure = CallFailure::Protocol(format!(
                "the task asked for input more than {MAX_INPUT_ROUNDS} times; it was cancelled"
            ));
            return Err(self.stop(failure).await);
        }
        let asked = InputRequiredResult::new(Some(input_requests), None);
        let (answers, _) = answered(asked, self.signals).await?;
        let params = UpdateTaskParams::new(self.id.clone(), answers.unwrap_or_default());
        self.timed(ClientRequest::UpdateTaskRequest(Request::new(params)))
            .await
            .map(drop)
    }
}

/// The server's suggested interval, clamped.
fn poll_interval(suggested: Option<u64>) -> Duration {
    suggested
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL)
        .clamp(MIN_TASK_POLL, MAX_TASK_POLL)
}

/// How long a `tasks/cancel` may take to be acknowledged.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `tasks/cancel` for task `id`, best effort.
async fn cancelled(peer: &Peer<RoleClient>, id: &str) {
    let request = ClientRequest::CancelTaskRequest(Request::new(CancelTaskParams::new(id)));
    let _ = send(peer, request, CANCEL_TIMEOUT).await;
}
