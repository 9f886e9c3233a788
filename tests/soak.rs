//! Soak: 1,000 session start/resume/evict cycles with several servers each and faults
//! mixed in. Ignored by default (`cargo test --release -- --ignored soak`); it prints
//! the figures it measured and fails on a leaked process or descriptor or on memory that
//! keeps growing.

mod common;

use std::time::{Duration, Instant};

use common::{Core, Recorder, demo, eventually};
use serde_json::json;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "soak: run with `cargo test --release -- --ignored soak`"]
async fn soak_cycles_leave_nothing_behind() {
    let cycles: usize = std::env::var("SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let fault = |mode: &str| {
        format!(
            "command: {}\nargs: [demo-server, --fault, {mode}]\napproval_policy: auto\nconnect_timeout_seconds: 2\ntimeout_seconds: 2\n",
            serde_json::to_string(common::exe()).unwrap()
        )
    };
    let core = Core::new()
        .grant_servers(&["a", "b", "c", "flaky", "crashy"])
        .server("a", &demo("approval_policy: auto\n"))
        .server(
            "b",
            &demo("approval_policy: auto\nsupports_parallel_tool_calls: true\n"),
        )
        .server("c", &demo("approval_policy: auto\n"))
        .server("flaky", &fault("exit-at-start"))
        .server("crashy", &fault("crash-on-call"));
    let baseline_fds = fds();
    // Drop events and record no approvals: the harness's own memory must not count.
    let h = common::harness_with(Recorder::allow(), |mut c| {
        c.events = std::sync::Arc::new(demiurge_mcp::events::NullSink);
        c.approver = std::sync::Arc::new(demiurge_mcp::FixedApprover(
            demiurge_mcp::ApprovalAnswer::AllowSession,
        ));
        c
    })
    .await;
    let started = Instant::now();
    let mut ids: Vec<String> = Vec::new();
    let mut rss_at_100 = 0;
    for cycle in 0..cycles {
        // Start, resume an earlier one now and then, evict, all with real processes.
        let (session, eviction) = if cycle % 5 == 4 && !ids.is_empty() {
            h.runtime
                .resume_session(&ids[cycle % ids.len()])
                .await
                .unwrap()
        } else {
            h.runtime.start_session(core.spec()).await.unwrap()
        };
        if let Some(e) = eviction {
            e.wait().await.unwrap();
        }
        let turn = session.prepare_turn().await.unwrap();
        turn.call("a__echo", json!({"message": "soak"}))
            .await
            .unwrap();
        if cycle % 7 == 0 {
            let _ = turn.call("crashy__echo", json!({"message": "boom"})).await;
        }
        if cycle % 3 == 0 {
            session.evict().await.unwrap();
        }
        ids.push(session.id().to_string());
        if ids.len() > 50 {
            ids.remove(0);
        }
        if cycle == 100 {
            rss_at_100 = rss_kib();
        }
    }
    let took = started.elapsed();
    let rss_end = rss_kib();
    h.finish().await;
    assert!(common::servers_of(h.home.path()).is_empty());
    drop(h);
    let mut now = 0;
    let fds_back = eventually(Duration::from_secs(10), || {
        now = fds();
        now <= baseline_fds
    })
    .await;
    println!(
        "soak: {cycles} cycles in {:.1} s; RSS {rss_at_100} KiB at cycle 100, {rss_end} KiB at the end; descriptors {baseline_fds} before, {now} after; no process left",
        took.as_secs_f64()
    );
    assert!(fds_back, "descriptors leaked: {baseline_fds} -> {now}");
    if cycles >= 1000 {
        // Flat: the last 900 cycles may not add more than 25% (allocator noise).
        assert!(
            rss_end < rss_at_100 + rss_at_100 / 4 + 4096,
            "memory grew: {rss_at_100} -> {rss_end} KiB"
        );
    }
}
