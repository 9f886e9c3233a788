//! Multi round-trip requests (MCP 2026-07-28): a modern server's `input_required`
//! results are answered under the same authority as their legacy forms (the host's
//! elicitor, the declared roots), its `requestState` comes back byte for byte, the time
//! a person answers is not the server's, and a server that breaks a bound (rounds
//! without end, a huge state, too many questions, a long key, a model sample) fails its
//! own request with words that say which, not the connection.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use demiurge_mcp::authority::{ElicitationAnswer, ElicitationRequest, Elicitor};
use demiurge_mcp::redact::View;
use futures::future::BoxFuture;
use serde_json::json;

use common::{Core, Recorder, demo, demo_fault, harness, harness_with};

const MODERN: &str = "approval_policy: auto\nprotocol: 2026-07-28\n";
const SECRET: &str = "mrtr-canary-6cf2a91d";

/// An elicitor that records what it is shown and answers after `pause`.
#[derive(Clone, Default)]
struct Slow {
    shown: Arc<Mutex<Vec<ElicitationRequest>>>,
    pause: Duration,
}

impl Elicitor for Slow {
    fn elicit(&self, request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        self.shown.lock().unwrap().push(request);
        let pause = self.pause;
        Box::pin(async move {
            tokio::time::sleep(pause).await;
            let mut fields = serde_json::Map::new();
            fields.insert("color".into(), json!("teal"));
            ElicitationAnswer::Accept(fields)
        })
    }
}

fn content(result: &demiurge_mcp::result::ToolResult) -> String {
    result.view(View::Operator).content.clone()
}

#[tokio::test]
async fn a_modern_server_sees_the_same_roots_as_a_legacy_one() {
    let core = Core::new().grant_servers(&["old", "new"]);
    std::fs::create_dir_all(core.root().join("docs")).unwrap();
    let roots = "roots: [docs]\n";
    let core = core
        .server("old", &demo(&format!("approval_policy: auto\n{roots}")))
        .server("new", &demo(&format!("{MODERN}{roots}")));
    let h = harness(Recorder::allow()).await;
    let catalog = common::clean_turn(&h, &core).await;
    let old = catalog.call("old__roots", json!({})).await.unwrap();
    let new = catalog.call("new__roots", json!({})).await.unwrap();
    assert!(!new.is_error, "{}", content(&new));
    assert!(content(&new).ends_with("/docs/"), "{}", content(&new));
    assert_eq!(content(&old), content(&new));
    h.finish().await;
}

/// The question goes to the host's elicitor, redacted like a legacy one; the answer
/// goes back with the server's state intact (the demo server checks it); a person who
/// takes longer than the call's timeout to answer does not time the call out.
#[tokio::test]
async fn a_modern_elicitation_goes_through_the_hosts_elicitor_and_its_time_is_not_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tools.json");
    let listed = json!([{"name": "ask", "elicit": {
        "message": format!("favourite colour? key {SECRET}"),
        "requestedSchema": {"type": "object", "properties": {"color": {"type": "string"}}}
    }}]);
    std::fs::write(&file, listed.to_string()).unwrap();
    let extra = format!("{MODERN}timeout_seconds: 1\nenv:\n  API_TOKEN: {SECRET}\n");
    let core = Core::new()
        .grant_servers(&["w"])
        .server("w", &common::demo_with_tools(&file, &extra));
    let slow = Slow {
        pause: Duration::from_millis(1_500),
        ..Slow::default()
    };
    let elicitor = slow.clone();
    let h = harness_with(Recorder::allow(), move |mut c| {
        c.elicitor = Arc::new(elicitor);
        c
    })
    .await;
    let catalog = common::clean_turn(&h, &core).await;
    let result = catalog.call("w__ask", json!({})).await.unwrap();
    assert!(!result.is_error, "{}", content(&result));
    assert!(content(&result).contains("teal"), "{}", content(&result));
    let shown = slow.shown.lock().unwrap().clone();
    assert_eq!(shown.len(), 1);
    assert!(shown[0].message.starts_with("favourite colour?"));
    assert!(!shown[0].message.contains(SECRET), "{}", shown[0].message);
    h.finish().await;
    let events = serde_json::to_string(&h.sink.events()).unwrap();
    assert!(!events.contains(SECRET));
}

/// Each way a server can break the rounds' bounds fails that call with words naming
/// the bound, quoting nothing of the server's; the connection stays up.
#[tokio::test]
async fn a_server_that_breaks_a_rounds_bound_fails_its_own_request() {
    let cases = [
        ("forever", "more than 10 times"),
        ("huge-state", "requestState is 1048576 bytes"),
        ("many", "100 inputs in one round"),
        ("long-key", "key over 256 bytes"),
        ("sampling", "model sample"),
    ];
    let ids: Vec<String> = cases.iter().map(|(m, _)| m.replace('-', "_")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut core = Core::new().grant_servers(&ids);
    for ((mode, _), id) in cases.iter().zip(&ids) {
        core = core.server(id, &demo_fault(&format!("asking {mode}"), MODERN));
    }
    let h = harness(Recorder::allow()).await;
    let catalog = common::clean_turn(&h, &core).await;
    for ((mode, words), id) in cases.iter().zip(&ids) {
        let failed = catalog
            .call(&format!("{id}__echo"), json!({"message": "x"}))
            .await;
        let said = match failed {
            Ok(result) => {
                assert!(result.is_error, "{mode}: {}", content(&result));
                content(&result)
            }
            Err(e) => e.to_string(),
        };
        assert!(said.contains(words), "{mode}: {said}");
        assert!(
            !said.contains("sss") && !said.contains("kkk"),
            "{mode}: {said}"
        );
    }
    // Still connected: the same server answers its next call the same way, not with a
    // closed connection.
    let again = catalog.call("many__echo", json!({"message": "x"})).await;
    let again = again.map(|r| content(&r)).unwrap_or_else(|e| e.to_string());
    assert!(again.contains("100 inputs"), "{again}");
    h.finish().await;
}

/// A server that answers with state only, without end, is asked exactly
/// `MAX_INPUT_ROUNDS` + 1 times (its own stderr log counts the rounds).
#[tokio::test]
async fn rounds_without_end_stop_at_the_bound() {
    let core = Core::new()
        .grant_servers(&["loop"])
        .server("loop", &demo_fault("asking forever", MODERN));
    let h = harness(Recorder::allow()).await;
    let catalog = common::clean_turn(&h, &core).await;
    let _ = catalog.call("loop__echo", json!({"message": "x"})).await;
    h.finish().await;
    let logged = common::logs_count(h.home.path(), "demo server: input round");
    assert_eq!(logged, demiurge_mcp::limits::MAX_INPUT_ROUNDS + 1);
}
