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
    CallToolResult, CancelTaskParams, ClientRequest, CreateTaskResult, GetTaskParams, Request,
    ServerResult, TaskPayload, UpdateTaskParams,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};

use super::failure::{CallFailure, classify};
use super::notices::Notice;
use super::rounds::answered;
use super::signals::ServerSignals;

/// Longest task id a server may give.
pub const MAX_TASK_ID_BYTES: usize = 256;
/// The shortest wait between two polls of a task, whatever the server suggests.
pub const MIN_TASK_POLL: Duration = Duration::from_millis(100);
/// The longest wait between two polls of a task.
pub const MAX_TASK_POLL: Duration = Duration::from_secs(5);
/// The wait between polls when the server suggests none.
const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// Follows the task `created` to its end within `left`, the call's remaining time.
///
/// # Errors
/// A timeout (the task is then cancelled), the task's failure or cancellation, an id
/// over the bound, a poll that failed.
pub(crate) async fn followed(
    peer: &Peer<RoleClient>,
    signals: &ServerSignals,
    created: CreateTaskResult,
    left: Duration,
) -> Result<ServerResult, CallFailure> {
    let task = created.task;
    if task.task_id.len() > MAX_TASK_ID_BYTES {
        return Err(CallFailure::Protocol(format!(
            "the server answered with a task whose id is over {MAX_TASK_ID_BYTES} bytes; it was not followed"
        )));
    }
    let mut cancel = Cancel::armed(peer, &task.task_id);
    let mut spent = Duration::ZERO;
    let mut interval = poll_interval(task.poll_interval_ms);
    let mut reported = None;
    let mut status = (task.status, task.status_message);
    loop {
        if reported.as_ref() != Some(&status) {
            signals.notices.deliver(Notice::Task {
                id: task.task_id.clone(),
                status: serde_json::to_value(status.0)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                message: status.1.clone(),
            });
            reported = Some(status.clone());
        }
        let remaining = left.checked_sub(spent).filter(|r| !r.is_zero());
        let Some(remaining) = remaining else {
            // Cancelled before the call says it timed out, not after.
            cancel.disarm();
            cancelled(peer, &task.task_id).await;
            return Err(CallFailure::Timeout(left));
        };
        let pause = interval.min(remaining);
        tokio::time::sleep(pause).await;
        spent += pause;
        let asked = Instant::now();
        let polled = poll(peer, &task.task_id, left.saturating_sub(spent)).await;
        spent += asked.elapsed();
        let detailed = polled?;
        interval = poll_interval(detailed.task.poll_interval_ms);
        status = (detailed.task.status, detailed.task.status_message.clone());
        match detailed.payload {
            TaskPayload::Working => {}
            TaskPayload::InputRequired { input_requests } => {
                let asked = rmcp::model::InputRequiredResult::new(Some(input_requests), None);
                let (answers, _) = answered(asked, signals).await?;
                let params =
                    UpdateTaskParams::new(task.task_id.clone(), answers.unwrap_or_default());
                let update = ClientRequest::UpdateTaskRequest(Request::new(params));
                send(peer, update, left.saturating_sub(spent)).await?;
            }
            TaskPayload::Completed { result } => {
                cancel.disarm();
                return serde_json::from_value::<CallToolResult>(serde_json::Value::Object(result))
                    .map(ServerResult::CallToolResult)
                    .map_err(|e| CallFailure::Protocol(format!("the task's result: {e}")));
            }
            TaskPayload::Failed { error } => {
                cancel.disarm();
                let message = error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("no message");
                return Err(CallFailure::Protocol(format!("the task failed: {message}")));
            }
            TaskPayload::Cancelled => {
                cancel.disarm();
                return Err(CallFailure::Protocol(
                    "the server cancelled the task".into(),
                ));
            }
            _ => {}
        }
    }
}

/// The server's suggested interval, clamped.
fn poll_interval(suggested: Option<u64>) -> Duration {
    suggested
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL)
        .clamp(MIN_TASK_POLL, MAX_TASK_POLL)
}

async fn poll(
    peer: &Peer<RoleClient>,
    id: &str,
    timeout: Duration,
) -> Result<rmcp::model::DetailedTask, CallFailure> {
    let request = ClientRequest::GetTaskRequest(Request::new(GetTaskParams::new(id)));
    match send(peer, request, timeout).await? {
        ServerResult::GetTaskResult(result) => Ok(result.task),
        _ => Err(CallFailure::Protocol(
            "unexpected response to tasks/get".into(),
        )),
    }
}

async fn send(
    peer: &Peer<RoleClient>,
    request: ClientRequest,
    timeout: Duration,
) -> Result<ServerResult, CallFailure> {
    if timeout.is_zero() {
        return Err(CallFailure::Timeout(timeout));
    }
    let handle = peer
        .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
        .await
        .map_err(|e| classify(&e, timeout))?;
    handle
        .await_response()
        .await
        .map_err(|e| classify(&e, timeout))
}

/// Cancels a task on the server when dropped armed: its call timed out, failed, or its
/// caller went away.
struct Cancel {
    peer: Option<Peer<RoleClient>>,
    id: String,
}

impl Cancel {
    fn armed(peer: &Peer<RoleClient>, id: &str) -> Self {
        Cancel {
            peer: Some(peer.clone()),
            id: id.to_string(),
        }
    }

    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let (Some(peer), Ok(runtime)) = (self.peer.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let id = std::mem::take(&mut self.id);
        runtime.spawn(async move { cancelled(&peer, &id).await });
    }
}

/// How long a `tasks/cancel` may take to be acknowledged.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends `tasks/cancel` for task `id`, best effort.
async fn cancelled(peer: &Peer<RoleClient>, id: &str) {
    let request = ClientRequest::CancelTaskRequest(Request::new(CancelTaskParams::new(id)));
    let _ = send(peer, request, CANCEL_TIMEOUT).await;
}
