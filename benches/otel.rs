//! The cost of telemetry (feature `otel`): warm calls of a runtime given providers,
//! against the same calls of a runtime given none, in one run. Two pairs:
//! - the feature on and no exporter: the host passes the global providers, which do
//!   nothing until the host installs providers of an SDK (target: at most 1.02x,
//!   issue 33);
//! - the SDK's providers recording spans and metrics that are exported nowhere: the
//!   SDK's own cost of recording, reported without a target.
//!
//! Each call makes two or three spans (`mcp.call`, `mcp.call.server`, and the approval
//! stage when its policy asks) and counts its event. Run with
//! `cargo bench --features otel-otlp --bench otel`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use demiurge_mcp::telemetry::Telemetry;
use demiurge_mcp::{Runtime, SessionSpec, TurnCatalog};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::json;

const CALLS: usize = 200;
const ROUNDS: usize = 30;

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

/// The pair (ratio of medians), then the same rounds again with each round's pair
/// compared on its own: a machine whose speed drifts between rounds moves both sides
/// of a round together.
async fn pair(name: &str, target: &str, plain: &TurnCatalog, traced: &TurnCatalog) {
    let name = format!("{name} ({CALLS} sequential calls)");
    common::paired(&name, target, ROUNDS, || calls(plain), || calls(traced)).await;
    let mut ratios = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let (base, ours) = if round % 2 == 0 {
            let base = calls(plain).await;
            (base, calls(traced).await)
        } else {
            let ours = calls(traced).await;
            (calls(plain).await, ours)
        };
        ratios.push(ours.as_secs_f64() / base.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "{name}: median of {ROUNDS} round ratios {:.3}x (quartiles {:.3}x to {:.3}x)",
        ratios[ROUNDS / 2],
        ratios[ROUNDS / 4],
        ratios[3 * ROUNDS / 4]
    );
}

fn main() {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 1, 0, false);
    // What a host with the feature and no exporter passes: the global providers.
    let global = Telemetry::new(
        &opentelemetry::global::tracer_provider(),
        &*opentelemetry::global::meter_provider(),
    );
    // Spans recorded and metrics aggregated, exported nowhere.
    let tracers = SdkTracerProvider::builder().build();
    let meters = SdkMeterProvider::builder().build();
    let recorded = Telemetry::new(&tracers, &meters);
    rt.block_on(async {
        let home = |side: &str| dir.path().join(side);
        let (plain_runtime, plain) = turn(&home("plain"), &core, Telemetry::default()).await;
        let (global_runtime, global) = turn(&home("global"), &core, global).await;
        let (recorded_runtime, recorded) = turn(&home("recorded"), &core, recorded).await;
        let no_exporter = "otel/call (no telemetry vs the feature on and no exporter)";
        pair(no_exporter, "at most 1.02x", &plain, &global).await;
        let sdk = "otel/call (no telemetry vs the SDK recording, exported nowhere)";
        pair(sdk, "none: the SDK's own cost", &plain, &recorded).await;
        for runtime in [plain_runtime, global_runtime, recorded_runtime] {
            runtime.shutdown().await;
        }
    });
}
