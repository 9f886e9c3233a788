//! A host that is itself a ractor application: the runtime's root linked under the
//! host's supervisor, driven by the public message protocol (`RuntimeMsg`), and what
//! the host hears and what is left when the root ends.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Core, Recorder, alive, count, demo, eventually, host_env, pid_of};
use demiurge_mcp::authority::CapabilitySet;
use demiurge_mcp::{Runtime, RuntimeConfig, RuntimeError, RuntimeMsg};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent, call, call_t};
use serde_json::json;
use tokio::sync::mpsc;

/// The host's supervisor: tells the test what it hears of its children.
struct Supervisor;

impl Actor for Supervisor {
    type Msg = ();
    type State = mpsc::UnboundedSender<String>;
    type Arguments = mpsc::UnboundedSender<String>;

    async fn pre_start(
        &self,
        _myself: ActorRef<()>,
        heard: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(heard)
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<()>,
        event: SupervisionEvent,
        heard: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let what = match event {
            SupervisionEvent::ActorTerminated(_, _, reason) => {
                format!("terminated: {}", reason.unwrap_or_default())
            }
            SupervisionEvent::ActorFailed(_, e) => format!("failed: {e}"),
            _ => return Ok(()),
        };
        let _ = heard.send(what);
        Ok(())
    }
}

fn config(home: &std::path::Path) -> RuntimeConfig {
    let mut config = RuntimeConfig::new(home)
        .with_approver(Recorder::allow())
        .with_host_env(host_env(&[]));
    // The product confines every undeclared stdio server; these servers are shell
    // scripts that write markers beside the workspace, so they run as declared.
    // The sandbox has its own tests (tests/sandbox.rs, the interop servers).
    config.sandbox_default = None;
    config.close_grace = Duration::from_millis(500);
    config.resolver = Arc::new(demiurge_mcp::net::StaticResolver::new());
    config
}

async fn supervisor() -> (ActorRef<()>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Supervisor, tx).await.unwrap();
    (actor, rx)
}

/// A runtime on `home`, its root linked under a supervisor of its own.
async fn linked(
    home: &std::path::Path,
) -> (Runtime, ActorRef<()>, mpsc::UnboundedReceiver<String>) {
    let (host, rx) = supervisor().await;
    let runtime = Runtime::start_linked(config(home), host.get_cell())
        .await
        .unwrap();
    (runtime, host, rx)
}

async fn heard(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("the supervisor heard of the root in time")
        .expect("the supervisor is alive")
}

#[tokio::test]
async fn a_host_drives_sessions_by_messages_with_typed_replies() {
    let core = Core::new()
        .grant_servers(&["a"])
        .server("a", &demo("approval_policy: auto\n"));
    let home = tempfile::tempdir().unwrap();
    let (runtime, host, mut rx) = linked(home.path()).await;
    let root = runtime.actor().clone();

    let first = call!(root, RuntimeMsg::StartSession, core.spec_in("lane"))
        .unwrap()
        .unwrap();
    assert!(first.eviction.is_none());
    let id = first.session.id().to_string();
    let turn = call!(root, RuntimeMsg::PrepareTurn, id.clone())
        .unwrap()
        .unwrap();
    let echoed = turn
        .call("a__echo", json!({"message": "hi"}))
        .await
        .unwrap();
    assert!(!echoed.is_error);
    let pid = pid_of(&turn, "a__whoami").await;

    // A second session of the lane evicts the first, tracked, by message too.
    let second = call!(root, RuntimeMsg::StartSession, core.spec_in("lane"))
        .unwrap()
        .unwrap();
    let report = second
        .eviction
        .expect("the lane's first session")
        .wait()
        .await;
    let report = report.unwrap();
    assert_eq!(
        (report.session.as_str(), report.connections_closed),
        (id.as_str(), 1)
    );
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);

    // Resuming the first evicts the second; an evicted session prepares no turn.
    let resumed = call!(root, RuntimeMsg::ResumeSession, id.clone())
        .unwrap()
        .unwrap();
    assert_eq!(resumed.session.id(), id);
    let evicted = resumed
        .eviction
        .expect("the second session")
        .wait()
        .await
        .unwrap();
    assert_eq!(evicted.session, second.session.id());
    let stale = call!(
        root,
        RuntimeMsg::PrepareTurn,
        second.session.id().to_string()
    )
    .unwrap();
    assert!(
        matches!(stale, Err(demiurge_mcp::PrepareError::Evicted)),
        "{stale:?}"
    );

    // Unknown sessions are typed errors, not hangs.
    let unknown = call!(root, RuntimeMsg::EvictSession, "nobody".to_string()).unwrap();
    assert!(
        matches!(unknown, Err(RuntimeError::UnknownSession(_))),
        "{unknown:?}"
    );
    let unknown = call!(root, RuntimeMsg::ResumeSession, "nobody".to_string()).unwrap();
    assert!(matches!(unknown, Err(RuntimeError::UnknownSession(_))));

    // The handle and the protocol share one root: what one does, the other sees.
    let by_handle = runtime.evict_session(&id).await.unwrap();
    assert_eq!(by_handle.session, id);
    let again = call!(root, RuntimeMsg::EvictSession, id.clone()).unwrap();
    assert!(
        matches!(again, Err(RuntimeError::UnknownSession(_))),
        "{again:?}"
    );

    // Shutdown answers, then the root stops: the host hears a clean end.
    let again = call!(root, RuntimeMsg::StartSession, core.spec_in("other"))
        .unwrap()
        .unwrap();
    let turn = again.session.prepare_turn().await.unwrap();
    let pid = pid_of(&turn, "a__whoami").await;
    let reports = call!(root, RuntimeMsg::Shutdown).unwrap();
    assert_eq!(reports.len(), 1, "the live session was evicted");
    assert_eq!(heard(&mut rx).await, "terminated: shutdown");
    assert!(!alive(pid), "its server ended before the answer");
    let after = runtime.start_session(core.spec()).await;
    assert!(
        matches!(after, Err(RuntimeError::Unavailable(_))),
        "{after:?}"
    );
    host.stop(None);
}

#[tokio::test]
async fn a_killed_root_ends_every_server_and_a_new_one_serves_the_session_again() {
    let core = Core::new()
        .grant_servers(&["a", "b"])
        .server("a", &demo("approval_policy: auto\n"))
        .server("b", &demo("approval_policy: auto\n"));
    let home = tempfile::tempdir().unwrap();
    let (runtime, host, mut rx) = linked(home.path()).await;
    let (session, turn) = common::open(&runtime, core.spec()).await;
    let pids = [
        pid_of(&turn, "a__whoami").await,
        pid_of(&turn, "b__whoami").await,
    ];
    let (_child, _) = runtime.start_session(core.spec_in("second")).await.unwrap();

    runtime.actor().kill();
    let end = heard(&mut rx).await;
    assert!(
        end.starts_with("terminated") || end.starts_with("failed"),
        "{end}"
    );
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(10), || !alive(pid)).await,
            "server {pid} outlived the root"
        );
    }
    assert!(common::servers_of(home.path()).is_empty());
    // The old handles answer, typed, without hanging.
    let gone = runtime.start_session(core.spec()).await;
    assert!(
        matches!(gone, Err(RuntimeError::Unavailable(_))),
        "{gone:?}"
    );
    let gone = session.prepare_turn().await;
    assert!(gone.is_err());
    runtime.shutdown().await;

    // The host restarts the runtime on the same home; the session id serves again.
    let runtime = Runtime::start_linked(config(home.path()), host.get_cell())
        .await
        .unwrap();
    let mut spec = core.spec();
    spec.id = Some(session.id().to_string());
    let (_again, turn) = common::open(&runtime, spec).await;
    assert!(
        !turn
            .call("a__echo", json!({"message": "back"}))
            .await
            .unwrap()
            .is_error
    );
    runtime.shutdown().await;
    assert_eq!(heard(&mut rx).await, "terminated: shutdown");
    assert!(common::servers_of(home.path()).is_empty());
    host.stop(None);
}

#[tokio::test]
async fn a_second_shutdown_waits_for_the_first_and_nothing_starts_meanwhile() {
    // A server that lingers after its stdin closes and ignores SIGTERM: its close takes
    // the grace and a kill, a window in which the shutdown is under way.
    let script = format!("trap '' TERM; '{}' demo-server; sleep 30", common::exe());
    let core = Core::new()
        .grant_servers(&["slow"])
        .server("slow", &common::shell(&script, "approval_policy: auto\n"));
    let home = tempfile::tempdir().unwrap();
    let (runtime, host, mut rx) = linked(home.path()).await;
    let root = runtime.actor().clone();
    let (session, turn) = common::open(&runtime, core.spec()).await;
    let pid = pid_of(&turn, "slow__whoami").await;

    // Queued before anything below, so the root takes it first.
    let (first, first_reports) = ractor::concurrency::oneshot();
    root.send_message(RuntimeMsg::Shutdown(first.into()))
        .unwrap();
    let late = runtime.start_session(core.spec_in("late")).await;
    assert!(
        matches!(&late, Err(RuntimeError::Unavailable(m)) if m.contains("shutting down")),
        "{late:?}"
    );
    let resumed = runtime.resume_session(session.id()).await;
    assert!(
        matches!(resumed, Err(RuntimeError::Unavailable(_))),
        "{resumed:?}"
    );
    let child = session
        .spawn_child(CapabilitySet::new(["mcp.call:slow".to_string()]))
        .await;
    assert!(
        matches!(child, Err(RuntimeError::Unavailable(_))),
        "a child started"
    );
    let second = call!(root, RuntimeMsg::Shutdown).unwrap();
    let first = first_reports.await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        second, first,
        "the second shutdown answers with the first's reports"
    );
    assert_eq!(heard(&mut rx).await, "terminated: shutdown");
    assert!(eventually(Duration::from_secs(5), || !alive(pid)).await);
    assert!(common::servers_of(home.path()).is_empty());
    runtime.shutdown().await;
    host.stop(None);
}

#[tokio::test]
async fn a_turn_whose_caller_gave_up_ends_its_connects() {
    let marker = tempfile::tempdir().unwrap();
    let pidfile = marker.path().join("pid");
    let late = common::recording_pid(&pidfile, 60, "approval_policy: auto\n");
    let core = Core::new().grant_servers(&["late"]).server("late", &late);
    let home = tempfile::tempdir().unwrap();
    let (runtime, host, _rx) = linked(home.path()).await;
    let root = runtime.actor().clone();
    let (session, _) = runtime.start_session(core.spec()).await.unwrap();
    let gave_up = call_t!(root, RuntimeMsg::PrepareTurn, 300, session.id().to_string());
    assert!(gave_up.is_err(), "the turn cannot have finished");
    assert!(
        eventually(Duration::from_secs(5), || count(&pidfile) == 1).await,
        "the server started"
    );
    let pid = common::first_pid(&pidfile);
    assert!(
        eventually(Duration::from_secs(10), || !alive(pid)).await,
        "the connect of a turn nobody waits for was ended"
    );
    runtime.shutdown().await;
    host.stop(None);
}
