//! The demo server's tasks (the `io.modelcontextprotocol/tasks` extension): a
//! tools-file tool with `"task": {"ms": N}` runs as a task for a modern client that
//! declares the extension, after asking its `elicit` question (if it has one) as the
//! task's input request. It answers `ran NAME as a task` (with the answer), or fails
//! when `"fail": true`; a task cancelled by the client says so on stderr.

use std::time::Duration;

use rmcp::model::{CreateTaskResult, InputRequest};
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};

use super::*;

impl DemoServer {
    /// The task a modern call of a tools-file tool with `task` runs as, for a client
    /// that declared the extension; `None` otherwise.
    pub(super) fn as_task(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResponse> {
        let declared = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !declared || !super::rounds::modern(context) {
            return None;
        }
        let entry = self.file_entry(&request.name)?;
        let task = entry.get("task")?;
        let ms = task.get("ms").and_then(Value::as_u64).unwrap_or(100);
        let fail = task.get("fail").and_then(Value::as_bool).unwrap_or(false);
        // How many times it asks its question (each a round of its own).
        let rounds = task.get("rounds").and_then(Value::as_u64).unwrap_or(1);
        let arguments = serde_json::to_string(&request.arguments).unwrap_or_default();
        let question = self.file_elicitation(&request.name).and_then(|asked| {
            serde_json::from_value::<InputRequest>(
                json!({"method": "elicitation/create", "params": asked}),
            )
            .ok()
        });
        let work = Work {
            name: request.name.to_string(),
            arguments,
            time: Duration::from_millis(ms),
            fail,
            question,
            rounds,
        };
        let options = TaskOptions::new().with_poll_interval_ms(100);
        let task = self
            .tasks
            .spawn(options, move |context| Box::pin(run(context, work)));
        Some(CallToolResponse::Task(CreateTaskResult::new(task)))
    }
}

/// What a task does.
struct Work {
    name: String,
    /// The call's arguments, as JSON: repeated in the status message (a server that
    /// echoes what it was given).
    arguments: String,
    time: Duration,
    fail: bool,
    question: Option<InputRequest>,
    rounds: u64,
}

async fn run(context: TaskContext, work: Work) -> Result<CallToolResult, TaskExit> {
    let Work {
        name,
        arguments,
        time,
        fail,
        question,
        rounds,
    } = work;
    let mut answer = None;
    if let Some(question) = question {
        for round in 0..rounds {
            let key = format!("ask-{round}");
            answer = Some(context.request_input(key, question.clone()).await?);
        }
    }
    context.set_status_message(format!("working on {name} with {arguments}"));
    tokio::select! {
        () = tokio::time::sleep(time) => {}
        () = context.cancelled() => {
            eprintln!("demo server: task cancelled");
            return Err(TaskExit::Cancelled);
        }
    }
    if fail {
        return Err(TaskExit::Error(ErrorData::internal_error(
            format!("{name} failed as asked"),
            None,
        )));
    }
    let mut text = format!("ran {name} as a task");
    if let Some(answer) = answer {
        text.push_str(&format!(": {answer}"));
    }
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}
