//! Tasks (the `io.modelcontextprotocol/tasks` extension) in the 2026-07-28 era: a tool
//! that answers with a task is followed to its result for the call; its input request
//! goes to the host's elicitor; its statuses are events; a failed or cancelled task is
//! the call's failure; a call that times out cancels its task on the server.

mod common;

use std::sync::Arc;

use demiurge_mcp::authority::{ElicitationAnswer, ElicitationRequest, Elicitor};
use demiurge_mcp::redact::View;
use futures::future::BoxFuture;
use serde_json::json;

use common::{Core, Recorder, harness_with};

const MODERN: &str = "approval_policy: auto\nprotocol: 2026-07-28\n";

struct Answers;

impl Elicitor for Answers {
    fn elicit(&self, _request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        let mut fields = serde_json::Map::new();
        fields.insert("color".into(), json!("amber"));
        Box::pin(async move { ElicitationAnswer::Accept(fields) })
    }
}

fn tools(dir: &std::path::Path) -> std::path::PathBuf {
    let file = dir.join("tools.json");
    let question = json!({"message": "which colour?",
        "requestedSchema": {"type": "object", "properties": {"color": {"type": "string"}}}});
    let listed = json!([
        {"name": "crunch", "task": {"ms": 300}},
        {"name": "asking", "task": {"ms": 100}, "elicit": question},
        {"name": "broken", "task": {"ms": 100, "fail": true}},
        {"name": "endless", "task": {"ms": 600000}},
    ]);
    std::fs::write(&file, listed.to_string()).unwrap();
    file
}

fn content(result: &demiurge_mcp::result::ToolResult) -> String {
    result.view(View::Operator).content.clone()
}

#[tokio::test]
async fn a_task_is_followed_to_its_result_and_its_statuses_are_events() {
    let dir = tempfile::tempdir().unwrap();
    let file = tools(dir.path());
    let core = Core::new().grant_servers(&["t", "old"]);
    let core = core
        .server(
            "t",
            &common::demo_with_tools(&file, &format!("{MODERN}timeout_seconds: 1\n")),
        )
        .server(
            "old",
            &common::demo_with_tools(&file, "approval_policy: auto\nprotocol: 2025-11-25\n"),
        );
    let h = harness_with(Recorder::allow(), |mut c| {
        c.elicitor = Arc::new(Answers);
        c
    })
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    let done = catalog.call("t__crunch", json!({})).await.unwrap();
    assert_eq!(content(&done), "ran crunch as a task");
    // The task's own question went to the elicitor, and its answer to the task.
    let asked = catalog.call("t__asking", json!({})).await.unwrap();
    assert!(content(&asked).contains("amber"), "{}", content(&asked));
    // A legacy connection is never given a task: the same tool answers at once.
    let old = catalog.call("old__crunch", json!({})).await.unwrap();
    assert_eq!(content(&old), "ran crunch");
    let statuses: Vec<String> = h
        .sink
        .of_type("mcp.task_status")
        .iter()
        .map(|e| {
            serde_json::to_value(&e.kind).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(statuses.iter().any(|s| s == "working"), "{statuses:?}");
    assert!(
        statuses.iter().any(|s| s == "input_required"),
        "{statuses:?}"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_failed_task_fails_its_call_and_a_timed_out_call_cancels_its_task() {
    let dir = tempfile::tempdir().unwrap();
    let file = tools(dir.path());
    let core = Core::new().grant_servers(&["t"]).server(
        "t",
        &common::demo_with_tools(&file, &format!("{MODERN}timeout_seconds: 1\n")),
    );
    let h = harness_with(Recorder::allow(), |c| c).await;
    let catalog = common::clean_turn(&h, &core).await;
    let broken = catalog.call("t__broken", json!({})).await;
    let said = broken
        .map(|r| content(&r))
        .unwrap_or_else(|e| e.to_string());
    assert!(
        said.contains("the task failed: broken failed as asked"),
        "{said}"
    );
    let endless = catalog.call("t__endless", json!({})).await;
    let said = endless
        .map(|r| content(&r))
        .unwrap_or_else(|e| e.to_string());
    assert!(said.contains("timed out"), "{said}");
    // The server heard the cancellation (its stderr log says so, once it is closed).
    h.finish().await;
    assert!(
        common::logs_contain(h.home.path(), "demo server: task cancelled"),
        "the task was not cancelled on the server"
    );
}
