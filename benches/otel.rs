//! The cost of telemetry (feature `otel`): warm calls of a runtime given the SDK's
//! providers with no exporter, against the same calls of a runtime given none, in one
//! run (target: at most 1.02x, issue 33). Each call makes three spans (`mcp.call`,
//! `mcp.call.server`, and the approval stage when its policy asks) and counts its event.
//! Run with `cargo bench --features otel-otlp --bench otel`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use demiurge_mcp::telemetry::Telemetry;
use demiurge_mcp::{Runtime, SessionSpec, TurnCatalog};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::json;

const CALLS: usize = 200;

async fn turn(home: &Path, core: &Path, telemetry: Telemetry) -> (Runtime, TurnCatalog) {
    let config = common::config(home, 4).with_telemetry(telemetry);
    let runtime = Runtime::start(config).await.unwrap();
    let (session, _) = runtime.start_session(SessionSpec::new(core)).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
    (runtime, turn)
}

async fn calls(turn: &TurnCatalog) -> Duration {
    let started = Instant::now();
    for _ in 0..CALLS {
        let result = turn
            .call("s0__echo", json!({"message": "ping"}))
            .await
            .unwrap();
        assert!(!result.is_error);
    }
    started.elapsed()
}

fn main() {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 1, 0, false);
    // Spans recorded and metrics aggregated, exported nowhere.
    let tracers = SdkTracerProvider::builder().build();
    let meters = SdkMeterProvider::builder().build();
    let traced = Telemetry::new(&tracers, &meters);
    rt.block_on(async {
        let (plain_runtime, plain) = turn(&dir.path().join("plain"), &core, Telemetry::default()).await;
        let (traced_runtime, traced) = turn(&dir.path().join("traced"), &core, traced).await;
        common::paired(
            &format!("otel/call ({CALLS} sequential calls: no telemetry vs SDK providers without exporter)"),
            "at most 1.02x",
            30,
            || calls(&plain),
            || calls(&traced),
        )
        .await;
        plain_runtime.shutdown().await;
        traced_runtime.shutdown().await;
    });
}
