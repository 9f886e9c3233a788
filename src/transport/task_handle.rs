//! The host's hold on the task a call may become (the tasks extension): what the
//! runtime last heard of it, and the right to cancel it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::Notify;

/// A host's hold on the task a call may become: what the runtime last heard of it
/// (redacted with the call's secrets) and the right to cancel it. Made by the host,
/// given to `TurnCatalog::call_with_task`, kept (cloned) to look and cancel.
#[derive(Clone, Default)]
pub struct TaskHandle {
    inner: Arc<HandleInner>,
}

#[derive(Default)]
struct HandleInner {
    seen: Mutex<Option<TaskSeen>>,
    cancelled: AtomicBool,
    wake: Notify,
}

/// A task as its host sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TaskSeen {
    /// The server's id of the task (redacted).
    pub id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The server's status message (redacted, capped).
    pub message: Option<String>,
}

impl TaskHandle {
    /// A handle for a call that has not started.
    pub fn new() -> Self {
        TaskHandle::default()
    }

    /// What the runtime last heard of the task; `None` while the call has not become
    /// one (most calls never do).
    pub fn status(&self) -> Option<TaskSeen> {
        self.inner.seen.lock().ok().and_then(|seen| seen.clone())
    }

    /// Cancels the task on the server (`tasks/cancel`); the call then fails, saying
    /// the host cancelled it. Asked before the call became a task, it is cancelled as
    /// soon as it does.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.inner.wake.notify_waiters();
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the host cancelled.
    pub(super) async fn cancelled(&self) {
        loop {
            let woken = self.inner.wake.notified();
            if self.is_cancelled() {
                return;
            }
            woken.await;
        }
    }

    pub(super) fn saw(&self, seen: TaskSeen) {
        if let Ok(mut slot) = self.inner.seen.lock() {
            *slot = Some(seen);
        }
    }
}
