//! Many sessions preparing and calling at once: the discovery limit holds and every
//! session's calls reach only its own connections.

mod common;

use std::collections::{HashMap, HashSet};

use common::{Core, Recorder, harness, pid_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_sessions_at_once_stay_within_the_limit_and_their_own_connections() {
    let core = Core::new().grant_servers(&["x", "y"]);
    for id in ["x", "y"] {
        let script = format!("sleep 0.05; exec '{}' demo-server", common::exe());
        core.write(id, &common::shell(&script, "approval_policy: auto\n"));
    }
    let h = harness(Recorder::allow()).await;
    let mut sessions = Vec::new();
    for i in 0..16 {
        sessions.push(
            h.runtime
                .start_session(core.spec_in(&format!("lane-{i}")))
                .await
                .unwrap()
                .0,
        );
    }
    let turns = futures::future::join_all(sessions.iter().map(|s| async move {
        let catalog = s.prepare_turn().await.unwrap();
        let (x, y) = tokio::join!(pid_of(&catalog, "x__whoami"), pid_of(&catalog, "y__whoami"));
        (s.id().to_string(), x, y)
    }))
    .await;

    let stats = h.runtime.limiter_stats().await;
    assert_eq!(stats.granted, 32);
    assert!(stats.max_in_use <= 4 && stats.max_in_use >= 2, "{stats:?}");

    // Which pid each session connected, from its own events.
    let mut connected: HashMap<String, HashSet<u64>> = HashMap::new();
    for e in h.sink.of_type("mcp.server_connected") {
        let v = serde_json::to_value(&e).unwrap();
        connected
            .entry(e.session.clone())
            .or_default()
            .insert(v["pid"].as_u64().unwrap());
    }
    let mut all = HashSet::new();
    for (session, x, y) in &turns {
        let own = &connected[session];
        assert!(
            own.contains(&(*x as u64)) && own.contains(&(*y as u64)),
            "{session} reached a foreign connection"
        );
        assert!(
            all.insert(*x) && all.insert(*y),
            "a connection is shared between sessions"
        );
    }
    h.finish().await;
}
