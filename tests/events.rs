//! Event delivery off the hot path: a slow host sink never slows a call, its queue is
//! bounded, what it loses is counted and announced; the session log rotates at its cap
//! and can be turned off.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Core, Recorder, demo, harness_with};
use demiurge_mcp::events::{Event, EventDelivery, EventLog, EventSink};
use serde_json::json;

/// A sink that takes 20 ms per event until released.
#[derive(Clone, Default)]
struct Slow {
    seen: Arc<Mutex<Vec<String>>>,
    fast: Arc<AtomicUsize>,
}

impl EventSink for Slow {
    fn emit(&self, event: &Event) {
        if self.fast.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let kind = serde_json::to_value(event).unwrap()["type"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.seen.lock().unwrap().push(kind);
    }
}

#[tokio::test]
async fn a_slow_sink_loses_counted_events_and_never_slows_calls() {
    let core = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &demo("approval_policy: auto\n"));
    let sink = Slow::default();
    let events = sink.clone();
    let h = harness_with(Recorder::allow(), move |mut c| {
        c.events = Arc::new(events);
        c.event_delivery = EventDelivery::Queued { capacity: 8 };
        c
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    // 200 calls emit 200+ events; delivered in order they would take 4 s or more.
    let started = Instant::now();
    for _ in 0..200 {
        catalog
            .call("demo__echo", json!({"message": "x"}))
            .await
            .unwrap();
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "calls waited for the sink: {took:?}"
    );
    let dropped = h.runtime.dropped_events();
    assert!(dropped > 0, "a queue of 8 held 200 calls' events");
    sink.fast.store(1, Ordering::SeqCst);
    // The next event tells the sink how many it lost.
    catalog
        .call("demo__echo", json!({"message": "after"}))
        .await
        .unwrap();
    h.runtime.flush_events().await;
    let seen = sink.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|k| k == "mcp.events_dropped"), "{seen:?}");
    assert!(seen.len() < 220, "{}", seen.len());
    h.finish().await;
}

#[tokio::test]
async fn the_session_log_rotates_at_its_cap_or_is_not_written() {
    let core = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &demo("approval_policy: auto\n"));
    let h = harness_with(Recorder::allow(), |mut c| {
        c.event_log = EventLog::On { max_bytes: 4_096 };
        c
    })
    .await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    for _ in 0..50 {
        catalog
            .call("demo__echo", json!({"message": "a line of some length"}))
            .await
            .unwrap();
    }
    h.runtime.flush_events().await;
    let path = h.runtime.event_log_path(session.id()).unwrap();
    let rotated = path.with_extension("jsonl.1");
    assert!(rotated.exists(), "no rotation at 4 KiB");
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    assert!(size(&rotated) < 8_192 && size(&path) < 8_192);
    h.finish().await;

    let off = harness_with(Recorder::allow(), |mut c| {
        c.event_log = EventLog::Off;
        c
    })
    .await;
    let (session, _) = common::open(&off.runtime, core.spec()).await;
    off.runtime.flush_events().await;
    assert!(off.runtime.event_log_path(session.id()).is_none());
    assert!(!off.runtime.home().join("runtime/session-events").exists());
    off.finish().await;
}
