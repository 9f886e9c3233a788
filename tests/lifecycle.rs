//! Lifecycle: eviction, session replacement and shutdown leave no process behind.

mod common;

use std::time::Duration;

use common::{Core, Recorder, alive, demo, eventually, harness, pid_of};

#[tokio::test]
async fn evicting_a_session_kills_its_servers_only() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (sa, _) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
    let (sb, _) = h.runtime.start_session(core.spec_in("b")).await.unwrap();
    let pa = pid_of(&sa.prepare_turn().await.unwrap(), "d__whoami").await;
    let cb = sb.prepare_turn().await.unwrap();
    let pb = pid_of(&cb, "d__whoami").await;
    let report = h.runtime.evict_session(sa.id()).await.unwrap();
    assert_eq!(report.connections_closed, 1);
    assert!(!alive(pa), "the evicted session's server must be gone");
    assert!(alive(pb), "other sessions keep their servers");
    assert_eq!(pid_of(&cb, "d__whoami").await, pb);
    assert!(
        sa.prepare_turn().await.is_err(),
        "an evicted session prepares no more turns"
    );
    h.finish().await;
    assert!(eventually(Duration::from_secs(5), || !alive(pb)).await);
}

#[tokio::test]
async fn starting_another_session_evicts_the_previous_one_with_a_tracked_handle() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (first, none) = h.runtime.start_session(core.spec()).await.unwrap();
    assert!(none.is_none());
    let p1 = pid_of(&first.prepare_turn().await.unwrap(), "d__whoami").await;
    let (second, eviction) = h.runtime.start_session(core.spec()).await.unwrap();
    let report = eviction
        .expect("the previous session is evicted")
        .wait()
        .await
        .unwrap();
    assert_eq!(report.session, first.id());
    assert_eq!(report.connections_closed, 1);
    assert!(!alive(p1));
    let evicted = h.sink.of_type("mcp.session_evicted");
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].session, first.id());

    // Resuming the first evicts the second, and gets fresh connections.
    let p2 = pid_of(&second.prepare_turn().await.unwrap(), "d__whoami").await;
    let (resumed, eviction) = h.runtime.resume_session(first.id()).await.unwrap();
    assert_eq!(eviction.unwrap().wait().await.unwrap().session, second.id());
    assert!(!alive(p2));
    let p3 = pid_of(&resumed.prepare_turn().await.unwrap(), "d__whoami").await;
    assert!(alive(p3) && p3 != p1);
    h.finish().await;
    assert!(!alive(p3));
}

#[tokio::test]
async fn shutdown_closes_every_server_of_every_session() {
    let core = Core::new()
        .grant_servers(&["x", "y"])
        .server("x", &demo("approval_policy: auto\n"))
        .server("y", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let mut pids = Vec::new();
    for lane in ["a", "b", "c"] {
        let (_s, c) = common::open(&h.runtime, core.spec_in(lane)).await;
        pids.push(pid_of(&c, "x__whoami").await);
        pids.push(pid_of(&c, "y__whoami").await);
    }
    assert!(pids.iter().all(|&p| alive(p)));
    h.finish().await;
    let leaked: Vec<u32> = pids.into_iter().filter(|&p| alive(p)).collect();
    assert!(
        leaked.is_empty(),
        "servers outlived the runtime: {leaked:?}"
    );
}

#[tokio::test]
async fn a_server_that_forks_leaves_no_grandchild_after_close() {
    let marker = tempfile::tempdir().unwrap();
    let pidfile = marker.path().join("grandchild");
    let script = format!(
        "sleep 300 & echo $! > '{}'; exec '{}' demo-server",
        pidfile.display(),
        common::exe()
    );
    let core = Core::new()
        .grant_servers(&["forks"])
        .server("forks", &common::shell(&script, "approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (session, _) = common::open(&h.runtime, core.spec()).await;
    let grandchild: u32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    h.runtime.evict_session(session.id()).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(grandchild)).await,
        "the process group must be killed"
    );
    h.finish().await;
}

#[tokio::test]
async fn removing_every_declaration_closes_the_sessions_connections() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let pid = pid_of(&session.prepare_turn().await.unwrap(), "d__whoami").await;
    core.remove("d");
    let catalog = session.prepare_turn().await.unwrap();
    assert!(catalog.tools().is_empty());
    assert!(eventually(Duration::from_secs(5), || !alive(pid)).await);
    h.finish().await;
}

#[tokio::test]
async fn a_dead_server_is_noticed_by_its_supervisor_at_once() {
    let core = Core::new()
        .grant_servers(&["d", "peer"])
        .server("d", &demo("approval_policy: auto\n"))
        .server("peer", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    let pid = pid_of(&catalog, "d__whoami").await;
    let peer = pid_of(&catalog, "peer__whoami").await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // No call, no turn: the supervisor reports the failure by itself.
    assert!(
        eventually(Duration::from_secs(5), || !h
            .sink
            .of_type("mcp.server_failed")
            .is_empty())
        .await
    );
    let next = session.prepare_turn().await.unwrap();
    assert!(
        next.diagnostics()
            .iter()
            .any(|d| d.server == "d" && d.message.contains("exited")),
        "{:?}",
        next.diagnostics()
    );
    assert_eq!(pid_of(&next, "peer__whoami").await, peer);
    h.finish().await;
}

#[tokio::test]
async fn only_the_latest_ended_sessions_stay_resumable() {
    let core = Core::new();
    let h = harness(Recorder::allow()).await;
    let mut ids = Vec::new();
    for _ in 0..(demiurge_mcp::actors::RESUMABLE + 20) {
        let (s, eviction) = h.runtime.start_session(core.spec()).await.unwrap();
        if let Some(e) = eviction {
            e.wait().await.unwrap();
        }
        ids.push(s.id().to_string());
    }
    let err = h.runtime.resume_session(&ids[0]).await.unwrap_err();
    assert!(
        matches!(err, demiurge_mcp::RuntimeError::UnknownSession(_)),
        "{err}"
    );
    assert!(h.runtime.resume_session(&ids[ids.len() - 5]).await.is_ok());
    h.finish().await;
}

/// A session resumed and evicted again, over and over, is one resumable session: it
/// is never forgotten while it lives however many others end meanwhile, and once it
/// ends it is the newest to resume.
#[tokio::test]
async fn a_resumed_session_stays_while_it_lives_and_is_resumable_once_ended_again() {
    let core = Core::new();
    let h = harness(Recorder::allow()).await;
    let (a, _) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
    let a_id = a.id().to_string();
    for _ in 0..3 {
        // Replaced in its lane, then resumed: ended and live again.
        let (_, eviction) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
        eviction.unwrap().wait().await.unwrap();
        let (_, eviction) = h.runtime.resume_session(&a_id).await.unwrap();
        eviction.unwrap().wait().await.unwrap();
    }
    // More sessions end in another lane than stay resumable.
    let mut others = Vec::new();
    for _ in 0..(demiurge_mcp::actors::RESUMABLE + 20) {
        let (s, eviction) = h.runtime.start_session(core.spec_in("b")).await.unwrap();
        if let Some(e) = eviction {
            e.wait().await.unwrap();
        }
        others.push(s.id().to_string());
    }
    let (live, none) = h.runtime.resume_session(&a_id).await.unwrap();
    assert!(
        none.is_none(),
        "a live session is handed back, nothing evicted"
    );
    live.prepare_turn().await.unwrap();
    // Ended again: the newest ended session, resumable; the oldest of the others not.
    let (_, eviction) = h.runtime.start_session(core.spec_in("a")).await.unwrap();
    eviction.unwrap().wait().await.unwrap();
    let (again, _) = h.runtime.resume_session(&a_id).await.unwrap();
    again.prepare_turn().await.unwrap();
    let err = h.runtime.resume_session(&others[0]).await.unwrap_err();
    assert!(
        matches!(err, demiurge_mcp::RuntimeError::UnknownSession(_)),
        "{err}"
    );
    h.finish().await;
}

/// A host that starts a session under the id of an ended one makes that id live: the
/// ended sessions still resumable are as many as the bound says, the oldest included.
#[tokio::test]
async fn an_id_used_again_does_not_count_as_an_ended_session() {
    let core = Core::new();
    let h = harness(Recorder::allow()).await;
    let ended_in = |lane: &str, id: Option<&str>| {
        let mut spec = core.spec_in(lane);
        spec.id = id.map(str::to_string);
        spec
    };
    let runtime = &h.runtime;
    let start = |spec| async move {
        let (s, eviction) = runtime.start_session(spec).await.unwrap();
        if let Some(e) = eviction {
            e.wait().await.unwrap();
        }
        s.id().to_string()
    };
    // The oldest ended session, then `x` ended behind it, then started again by id.
    let oldest = start(ended_in("e", None)).await;
    start(ended_in("e", None)).await;
    start(ended_in("x", Some("x"))).await;
    start(ended_in("x", None)).await;
    start(ended_in("x", Some("x"))).await;
    // Ended now: the oldest and the one `x` replaced; then sessions of another lane
    // until one admission short of the bound of resumable ones.
    for _ in 0..(demiurge_mcp::actors::RESUMABLE - 1) {
        start(ended_in("b", None)).await;
    }
    let (_, eviction) = h.runtime.resume_session(&oldest).await.unwrap();
    assert!(
        eviction.is_some(),
        "the oldest ended session is still resumable"
    );
    h.finish().await;
}

/// Open files of this process under `dir`.
fn open_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|target| target.starts_with(dir))
        .collect()
}

#[tokio::test]
async fn sessions_replaced_and_resumed_in_their_lane_leave_no_open_file_behind() {
    let core = Core::new()
        .grant_servers(&["d"])
        .server("d", &demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    // Starts, and resumes of the session before last (each replaces the last one).
    let mut ids: Vec<String> = Vec::new();
    for n in 0..400 {
        let (session, _) = match ids.len() {
            len if n % 2 == 1 && len >= 2 => h.runtime.resume_session(&ids[len - 2]).await,
            _ => h.runtime.start_session(core.spec()).await,
        }
        .unwrap();
        if !ids.contains(&session.id().to_string()) {
            ids.push(session.id().to_string());
        }
    }
    // Evictions run on tasks: only the lane's current session keeps its log open.
    let home = h.runtime.home().to_path_buf();
    let mut open = Vec::new();
    let settled = eventually(Duration::from_secs(10), || {
        open = open_under(&home);
        open.len() <= 1
    })
    .await;
    assert!(settled, "{} files still open: {open:?}", open.len());
    h.finish().await;
}
