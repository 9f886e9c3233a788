//! Servers as values: a host gives a session declarations in memory, validated exactly
//! as files are, named by the provenance the host chose, beside a core's or instead of
//! any core on disk.

mod common;

use std::sync::Arc;

use common::{Core, Recorder, demo, harness};
use demiurge_mcp::actors::InlineServers;
use demiurge_mcp::authority::CapabilitySet;
use serde_json::json;

#[tokio::test]
async fn inline_servers_join_the_core_and_are_checked_like_files() {
    let core = Core::new()
        .grant_servers(&["docs", "mem", "bad"])
        .server("docs", &demo(""));
    let h = harness(Recorder::allow()).await;
    let mut spec = core.spec();
    spec.inline = Some(Arc::new(
        InlineServers::new("host-config")
            .with("mem", demo("approval_policy: auto\n"))
            .with("bad", demo("approval_polcy: auto\n"))
            .with("docs", demo("")),
    ));
    let (_session, catalog) = common::open(&h.runtime, spec).await;
    let names = common::names(&catalog);
    assert!(names.contains(&"mem__echo".to_string()), "{names:?}");
    assert!(names.contains(&"docs__echo".to_string()), "{names:?}");
    let echo = catalog
        .call("mem__echo", json!({"message": "from memory"}))
        .await
        .unwrap();
    assert!(!echo.is_error);
    // The same errors a file would get, naming where the host said they came from.
    let bad = catalog
        .diagnostics()
        .iter()
        .find(|d| d.server == "bad")
        .unwrap_or_else(|| panic!("{:?}", catalog.diagnostics()));
    assert!(
        bad.message.contains("host-config:agent/mcp/bad.yaml"),
        "{}",
        bad.message
    );
    assert!(
        bad.message.contains("did you mean `approval_policy`"),
        "{}",
        bad.message
    );
    // An id the core declares too is refused, the core's kept.
    let twice: Vec<_> = catalog
        .diagnostics()
        .iter()
        .filter(|d| d.server == "docs")
        .collect();
    assert_eq!(twice.len(), 1, "{:?}", catalog.diagnostics());
    assert!(
        twice[0]
            .message
            .contains("the core declares this server id too")
    );
    h.finish().await;
}

#[tokio::test]
async fn inline_servers_alone_need_no_core_on_disk() {
    let workspace = tempfile::tempdir().unwrap();
    let h = harness(Recorder::allow()).await;
    let mut spec = demiurge_mcp::SessionSpec::new(workspace.path());
    spec.inline = Some(Arc::new(
        InlineServers::new("embedder")
            .with("mem", demo("approval_policy: auto\n"))
            .only(),
    ));
    spec.capabilities = Some(CapabilitySet::new([
        "mcp.connect:mem".to_string(),
        "mcp.call:mem".to_string(),
    ]));
    let (_session, catalog) = common::open(&h.runtime, spec).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    let echo = catalog
        .call("mem__echo", json!({"message": "no core"}))
        .await
        .unwrap();
    assert!(!echo.is_error);
    assert!(!workspace.path().join("agent.yaml").exists());
    h.finish().await;
}
