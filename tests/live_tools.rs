//! `notifications/tools/list_changed`: applied at the next turn boundary, never inside
//! a turn, through the same filters and naming.

mod common;

use std::time::Duration;

use common::{Core, Recorder, demo, eventually, harness, names, pid_of};
use serde_json::json;

#[tokio::test]
async fn a_changed_tool_list_is_applied_at_the_next_turn() {
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &demo("approval_policy: auto\ntools:\n  include: [add_tool, whoami, fresh*]\n"),
    );
    let h = harness(Recorder::allow()).await;
    let (session, turn1) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(names(&turn1), ["d__add_tool", "d__whoami"]);
    let pid = pid_of(&turn1, "d__whoami").await;

    turn1
        .call("d__add_tool", json!({"name": "fresh_tool"}))
        .await
        .unwrap();
    turn1
        .call("d__add_tool", json!({"name": "hidden_tool"}))
        .await
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !h
            .sink
            .of_type("mcp.tools_changed")
            .is_empty())
        .await
    );
    // Inside the turn nothing moves.
    assert_eq!(names(&turn1), ["d__add_tool", "d__whoami"]);
    assert!(turn1.get("d__fresh_tool").is_none());

    let turn2 = session.prepare_turn().await.unwrap();
    assert_eq!(
        names(&turn2),
        ["d__add_tool", "d__whoami", "d__fresh_tool"],
        "filters still apply"
    );
    let r = turn2.call("d__fresh_tool", json!({})).await.unwrap();
    assert_eq!(
        r.view(demiurge_mcp::redact::View::Operator).content,
        "added tool fresh_tool"
    );
    assert_eq!(
        pid_of(&turn2, "d__whoami").await,
        pid,
        "a list change does not reconnect"
    );

    // Unchanged since: the next turn does not relist, and names stay stable.
    let turn3 = session.prepare_turn().await.unwrap();
    assert_eq!(names(&turn3), names(&turn2));
    h.finish().await;
}
