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
        {"name": "chatty", "task": {"ms": 600000}},
        {"name": "pester", "task": {"ms": 100, "rounds": 20}, "elicit": question},
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

/// The host holds the call's task: it sees the task's status (redacted with the call's
/// secrets, which the server repeats in its status message) and cancels it; the call
/// then fails saying so, and the server heard the cancellation.
#[tokio::test]
async fn a_host_sees_its_task_redacted_and_cancels_it() {
    const SECRET: &str = "task-canary-51d0e7";
    let dir = tempfile::tempdir().unwrap();
    let file = tools(dir.path());
    let core = Core::new()
        .grant_servers(&["t"])
        .server("t", &common::demo_with_tools(&file, MODERN));
    let h = harness_with(Recorder::allow(), |c| c).await;
    let catalog = common::clean_turn(&h, &core).await;
    let handle = demiurge_mcp::TaskHandle::new();
    let call = {
        let (catalog, handle) = (catalog.clone(), handle.clone());
        tokio::spawn(async move {
            let args = json!({"password": SECRET});
            catalog.call_with_task("t__chatty", args, handle).await
        })
    };
    let seen = common::eventually(std::time::Duration::from_secs(10), || {
        handle
            .status()
            .and_then(|s| s.message)
            .is_some_and(|m| m.starts_with("working on chatty"))
    })
    .await;
    assert!(seen, "{:?}", handle.status());
    let status = handle.status().unwrap();
    assert_eq!(status.status, "working");
    assert!(!status.message.unwrap().contains(SECRET));
    handle.cancel();
    let ended = call.await.unwrap();
    let said = ended.map(|r| content(&r)).unwrap_or_else(|e| e.to_string());
    assert!(said.contains("the host cancelled the task"), "{said}");
    h.finish().await;
    let events = serde_json::to_string(&h.sink.events()).unwrap();
    assert!(events.contains("mcp.task_status"));
    assert!(!events.contains(SECRET), "an event shows the call's secret");
    assert!(common::logs_contain(
        h.home.path(),
        "demo server: task cancelled"
    ));
}

/// A task that asks for input without end is cancelled at the rounds' bound, however
/// quickly the person answers.
#[tokio::test]
async fn a_task_that_asks_without_end_is_cancelled_at_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let file = tools(dir.path());
    let core = Core::new()
        .grant_servers(&["t"])
        .server("t", &common::demo_with_tools(&file, MODERN));
    let h = harness_with(Recorder::allow(), |mut c| {
        c.elicitor = Arc::new(Answers);
        c
    })
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    let pestered = catalog.call("t__pester", json!({})).await;
    let said = pestered
        .map(|r| content(&r))
        .unwrap_or_else(|e| e.to_string());
    assert!(
        said.contains("asked for input more than 10 times"),
        "{said}"
    );
    h.finish().await;
}
