//! File modes whatever the umask. This binary holds one test because it changes the
//! process umask (shared by every thread of the process).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{Core, Recorder, demo, harness_with};
use nix::sys::stat::{Mode, umask};
use serde_json::json;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn private_files_and_directories_ignore_a_permissive_umask() {
    umask(Mode::empty());
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    // A home that does not exist yet: every directory the runtime creates is private.
    let fresh = tempfile::tempdir().unwrap();
    let fresh_home = fresh.path().join("new/home");
    let h = harness_with(Recorder::allow(), |mut c| {
        c.home = fresh_home.clone();
        c
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    catalog
        .call("d__stderr", json!({"text": "to the log"}))
        .await
        .unwrap();
    h.finish().await;
    let home = fresh_home.as_path();
    assert_eq!(mode(home), 0o700);
    assert_eq!(mode(&home.join("runtime")), 0o700);
    assert_eq!(mode(&fresh.path().join("new")), 0o700);
    assert_eq!(mode(&home.join("mcp-home")), 0o700);
    assert_eq!(mode(&home.join("logs")), 0o700);
    assert_eq!(mode(&home.join("logs/mcp-stderr.log")), 0o600);
    let events = home.join("runtime/session-events");
    assert_eq!(mode(&events), 0o700);
    let log = std::fs::read_dir(&events)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(mode(&log), 0o600);
    assert!(
        std::fs::read_to_string(home.join("logs/mcp-stderr.log"))
            .unwrap()
            .contains("to the log")
    );
}
