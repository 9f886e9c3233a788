//! Session lanes across nodes (feature `cluster`): two runtimes in this process, each a
//! node of a loopback cluster (ractor_cluster over TCP on 127.0.0.1). Run with
//! `cargo test --features cluster --test cluster`.
//!
//! The tests run one at a time: ractor's process groups are one registry per process,
//! and each node connection advertises every group of it, so the nodes of two tests
//! running at once would reach each other's directories (in a deployment a process is
//! one node, and this cannot happen).
#![cfg(feature = "cluster")]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{Core, Recorder, alive, demo, eventually, host_env, pid_of};
use demiurge_mcp::actors::cluster::{
    ClusterNode, MAX_NAME, NodeOptions, claim_fits, lane_fits, node_fits,
};
use demiurge_mcp::events::{EventKind, MemorySink};
use demiurge_mcp::{Runtime, RuntimeConfig, RuntimeError};

const COOKIE: &str = "loopback-test-cookie";

/// Held by each test for its whole run (see the module documentation).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A free loopback port (bound, then released for the node server to take).
fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

struct Node {
    runtime: Runtime,
    node: ClusterNode,
    options: NodeOptions,
    sink: MemorySink,
    _home: tempfile::TempDir,
}

/// A node of `cluster` (each test its own: this process's nodes share one registry).
async fn node(cluster: &str, name: &str) -> Node {
    let home = tempfile::tempdir().unwrap();
    let sink = MemorySink::new();
    let mut config = RuntimeConfig::new(home.path())
        .with_approver(Recorder::allow())
        .with_events(sink.clone())
        .with_host_env(host_env(&[]));
    // The product confines every undeclared stdio server; these servers are shell
    // scripts that write markers beside the workspace, so they run as declared.
    // The sandbox has its own tests (tests/sandbox.rs, the interop servers).
    config.sandbox_default = None;
    config.close_grace = Duration::from_millis(500);
    config.event_delivery = demiurge_mcp::events::EventDelivery::Direct;
    config.resolver = Arc::new(demiurge_mcp::net::StaticResolver::new());
    let runtime = Runtime::start(config).await.unwrap();
    let mut options = NodeOptions::new(name, COOKIE, free_port());
    options.cluster = cluster.to_string();
    let node = ClusterNode::start(&runtime, options.clone()).await.unwrap();
    Node {
        runtime,
        node,
        options,
        sink,
        _home: home,
    }
}

async fn pair(cluster: &str) -> (Node, Node) {
    let (a, b) = (node(cluster, "a").await, node(cluster, "b").await);
    b.node
        .connect(a.options.listen, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(a.node.sees("b", Duration::from_secs(10)).await);
    assert!(b.node.sees("a", Duration::from_secs(10)).await);
    (a, b)
}

/// Both nodes leave the cluster (their node servers stop), then both runtimes end.
async fn finish(a: Node, b: Node) {
    let (ra, rb) = (a.runtime.clone(), b.runtime.clone());
    a.node.leave().await;
    b.node.leave().await;
    ra.shutdown().await;
    rb.shutdown().await;
}

/// A session of `lane` on `node` with its server connected, and the server's pid.
async fn serving(node: &Node, core: &Core, lane: &str) -> (demiurge_mcp::Session, u32) {
    let (session, _) = node
        .runtime
        .start_session(core.spec_in(lane))
        .await
        .unwrap();
    let pid = pid_of(&session.prepare_turn().await.unwrap(), "s__whoami").await;
    (session, pid)
}

fn core() -> Core {
    Core::new()
        .grant_servers(&["s"])
        .server("s", &demo("approval_policy: auto\n"))
}

fn evicted(sink: &MemorySink, session: &str) -> Option<String> {
    sink.events().into_iter().find_map(|e| match e.kind {
        EventKind::SessionEvicted { reason, .. } if e.session == session => Some(reason),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_on_another_node_evicts_the_lane_there_with_its_report() {
    let _serial = SERIAL.lock().await;
    let (a, b) = pair("evicts").await;
    let core = core();
    let (on_a, pid) = serving(&a, &core, "agent").await;

    let (on_b, eviction) = b
        .runtime
        .start_session(core.spec_in("agent"))
        .await
        .unwrap();
    let report = eviction
        .expect("the lane's session on a")
        .wait()
        .await
        .unwrap();
    assert_eq!(report.session, on_a.id());
    assert_eq!(report.connections_closed, 1);
    assert_eq!(report.reason, "replaced_on_node:b");
    assert!(!alive(pid), "a's server ended before b's session opened");
    assert_eq!(
        evicted(&a.sink, on_a.id()).as_deref(),
        Some("replaced_on_node:b")
    );
    assert!(on_a.prepare_turn().await.is_err(), "a's session is evicted");
    // Other lanes are untouched, and the lane goes back the same way.
    let (other, none) = a
        .runtime
        .start_session(core.spec_in("other"))
        .await
        .unwrap();
    assert!(none.is_none());
    let (back, eviction) = a.runtime.resume_session(on_a.id()).await.unwrap();
    assert_eq!(back.id(), on_a.id());
    let report = eviction.expect("b's session").wait().await.unwrap();
    assert_eq!(report.session, on_b.id());
    assert!(other.prepare_turn().await.is_ok());
    finish(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_owner_fails_the_claim_closed_and_evicts_itself_when_it_rejoins() {
    let _serial = SERIAL.lock().await;
    let (mut a, b) = pair("partition").await;
    let core = core();
    // b claims first, then a: both now know a holds the lane.
    let (first, _) = b
        .runtime
        .start_session(core.spec_in("agent"))
        .await
        .unwrap();
    let (on_a, eviction) = a
        .runtime
        .start_session(core.spec_in("agent"))
        .await
        .unwrap();
    assert!(eviction.is_some());
    let pid = pid_of(&on_a.prepare_turn().await.unwrap(), "s__whoami").await;

    a.node.disconnect().await;
    let refused = b.runtime.start_session(core.spec_in("agent")).await;
    match refused {
        Err(RuntimeError::LaneUnreachable { lane, node }) => {
            assert_eq!((lane.as_str(), node.as_str()), ("agent", "a"));
        }
        other => panic!("expected LaneUnreachable, got {other:?}"),
    }
    assert!(alive(pid), "nothing reached a");
    // A refused claim leaves the owner as it was: refused again, and a resume of b's
    // own evicted session the same way.
    let again = b.runtime.start_session(core.spec_in("agent")).await;
    assert!(
        matches!(again, Err(RuntimeError::LaneUnreachable { .. })),
        "{again:?}"
    );
    let resumed = b.runtime.resume_session(first.id()).await;
    assert!(
        matches!(resumed, Err(RuntimeError::LaneUnreachable { .. })),
        "{resumed:?}"
    );
    assert!(alive(pid), "nothing reached a");
    // The host knows better: it proceeds.
    let mut spec = core.spec_in("agent");
    spec.proceed_if_owner_unreachable = true;
    let (on_b, eviction) = b.runtime.start_session(spec).await.unwrap();
    assert!(eviction.is_none(), "nothing could be evicted");

    // a comes back and sees b's newer claim: its own session of the lane goes.
    let mut options = a.options.clone();
    options.listen = free_port();
    a.node.rejoin(options, b.options.listen).await.unwrap();
    assert!(
        eventually(Duration::from_secs(15), || !alive(pid)).await,
        "a evicted its session once it heard of b's claim"
    );
    assert!(evicted(&a.sink, on_a.id()).is_some());
    let turn = on_b.prepare_turn().await;
    assert!(turn.is_ok(), "b's session is the lane's: {:?}", turn.err());
    finish(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_leaves_or_whose_runtime_dies_releases_its_lanes() {
    let _serial = SERIAL.lock().await;
    let core = core();
    // Leaving on purpose.
    let (a, b) = pair("leaves").await;
    let (on_a, pid) = serving(&a, &core, "agent").await;
    a.node.leave().await;
    assert!(
        !alive(pid),
        "leaving evicts this node's lane sessions first"
    );
    assert_eq!(evicted(&a.sink, on_a.id()).as_deref(), Some("left_cluster"));
    a.runtime.shutdown().await;
    let started = b.runtime.start_session(core.spec_in("agent")).await;
    assert!(started.is_ok(), "{:?}", started.err());
    b.node.leave().await;
    b.runtime.shutdown().await;

    // A runtime that dies while its node stays connected takes its sessions along, and
    // the others see its directory go while its node still answers.
    let (a, b) = pair("dies").await;
    let (_on_a, pid) = serving(&a, &core, "agent").await;
    a.runtime.actor().kill();
    assert!(eventually(Duration::from_secs(10), || !alive(pid)).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let started = loop {
        let started = b.runtime.start_session(core.spec_in("agent")).await;
        if started.is_ok() || tokio::time::Instant::now() > deadline {
            break started;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(started.is_ok(), "{:?}", started.err());
    finish(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_of_one_lane_leave_one_session() {
    let _serial = SERIAL.lock().await;
    let (a, b) = pair("concurrent").await;
    let core = core();
    for round in 0..5 {
        let lane = format!("lane-{round}");
        let (on_a, on_b) = tokio::join!(
            a.runtime.start_session(core.spec_in(&lane)),
            b.runtime.start_session(core.spec_in(&lane))
        );
        for refused in [&on_a, &on_b].into_iter().filter_map(|r| r.as_ref().err()) {
            assert!(
                matches!(refused, RuntimeError::LaneContended { .. }),
                "{refused:?}"
            );
        }
        let mut live = 0;
        for (session, eviction) in [on_a, on_b].into_iter().flatten() {
            if let Some(eviction) = eviction {
                eviction.wait().await.unwrap();
            }
            live += usize::from(session.prepare_turn().await.is_ok());
        }
        assert_eq!(live, 1, "round {round}: one session holds the lane");
    }
    finish(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opens_once_however_often_it_is_resumed_at_once() {
    let _serial = SERIAL.lock().await;
    let (a, b) = pair("resumes").await;
    let core = core();
    let (on_a, _) = a
        .runtime
        .start_session(core.spec_in("agent"))
        .await
        .unwrap();
    a.runtime.evict_session(on_a.id()).await.unwrap();
    let (first, second, third) = tokio::join!(
        a.runtime.resume_session(on_a.id()),
        a.runtime.resume_session(on_a.id()),
        a.runtime.resume_session(on_a.id())
    );
    let opened: Vec<_> = [first, second, third].into_iter().collect();
    let refused = opened
        .iter()
        .filter(|r| matches!(r, Err(RuntimeError::AlreadyLive(_))))
        .count();
    let ok = opened.iter().filter(|r| r.is_ok()).count();
    assert_eq!((ok, refused), (1, 2), "{opened:?}");
    // The one that opened is the lane's, and b's start evicts exactly it.
    let (_, eviction) = b
        .runtime
        .start_session(core.spec_in("agent"))
        .await
        .unwrap();
    let report = eviction.unwrap().wait().await.unwrap();
    assert_eq!(report.session, on_a.id());
    finish(a, b).await;
}

#[tokio::test]
async fn names_and_claims_from_peers_are_checked() {
    for good in ["a", "node-1.eu_west", &"n".repeat(64)] {
        assert!(node_fits(good), "{good}");
    }
    for bad in ["", "a@b", "a b", "\u{1b}[2J", "ä", &"n".repeat(65)] {
        assert!(!node_fits(bad), "{bad:?}");
    }
    assert!(lane_fits("agent: main/2"));
    assert!(!lane_fits("agent\u{7}"));
    assert!(!lane_fits(&"l".repeat(MAX_NAME + 1)));
    assert!(claim_fits("agent", "a", 7));
    assert!(!claim_fits("agent", "a", u64::MAX), "no epoch at the top");
    assert!(!claim_fits("agent", "a\n", 1));
    let home = tempfile::tempdir().unwrap();
    let runtime = Runtime::start(RuntimeConfig::new(home.path()))
        .await
        .unwrap();
    let options = NodeOptions::new("bad name", COOKIE, free_port());
    assert!(ClusterNode::start(&runtime, options).await.is_err());
    runtime.shutdown().await;
}
