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
        let question = self.file_elicitation(&request.name).and_then(|asked| {
            serde_json::from_value::<InputRequest>(
                json!({"method": "elicitation/create", "params": asked}),
            )
            .ok()
        });
        let name = request.name.to_string();
        let options = TaskOptions::new().with_poll_interval_ms(100);
        let task = self.tasks.spawn(options, move |context| {
            Box::pin(run(
                context,
                name,
                Duration::from_millis(ms),
                fail,
                question,
            ))
        });
        Some(CallToolResponse::Task(CreateTaskResult::new(task)))
    }
}

async fn run(
    context: TaskContext,
    name: String,
    work: Duration,
    fail: bool,
    question: Option<InputRequest>,
) -> Result<CallToolResult, TaskExit> {
    let answer = match question {
        Some(question) => Some(context.request_input("ask", question).await?),
        None => None,
    };
    context.set_status_message(format!("working on {name}"));
    tokio::select! {
        () = tokio::time::sleep(work) => {}
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
