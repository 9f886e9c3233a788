//! Not a criterion bench: one side of a pair of `benches/pairs.rs` at a time, in a
//! loop, to run under a profiler (`perf`, callgrind, dhat, strace).
//!
//! ```text
//! cargo bench --bench probe --no-run     # then run the binary it names:
//! SIDE=raw    ROUNDS=50 target/release/deps/probe-<hash>   # cold_1, bare rmcp
//! SIDE=cold   ROUNDS=50 target/release/deps/probe-<hash>   # cold_1, the runtime
//! SIDE=rawfan ROUNDS=50 target/release/deps/probe-<hash>   # parallel_64, bare rmcp
//! SIDE=fan    ROUNDS=50 target/release/deps/probe-<hash>   # parallel_64, the runtime
//! ```
//!
//! A cold round is what cold_1's CPU figure counts: bare rmcp spawns the demo server,
//! initializes, lists everything and cancels; the runtime starts a session, prepares its
//! first turn and evicts it. A fan round is 64 concurrent `echo` calls on one warm
//! connection. The figures it prints leave set-up out; a profiler counts the whole
//! process, so two runs with different `ROUNDS`, subtracted, give a round's cost. Without
//! `SIDE` (as under `cargo bench`) it does nothing.

#[path = "common.rs"]
mod common;

use std::time::Instant;

use common::{Client, list_everything, raw_stdio};
use demiurge_mcp::{Runtime, SessionSpec, TurnCatalog};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

/// A cold round of bare rmcp: spawn, initialize, list everything, cancel.
async fn raw_cold() {
    let client = raw_stdio().await;
    list_everything(&client).await;
    client.cancel().await.unwrap();
}

async fn raw_fan(client: &Client) {
    let args = json!({"message": "ping"}).as_object().cloned().unwrap();
    let calls = (0..64)
        .map(|_| client.call_tool(CallToolRequestParams::new("echo").with_arguments(args.clone())));
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
}

async fn fan(turn: &TurnCatalog) {
    let calls = (0..64).map(|_| turn.call("s0__echo", json!({"message": "ping"})));
    for result in futures::future::join_all(calls).await {
        result.unwrap();
    }
}

/// A warm turn of a core declaring one parallel demo server.
async fn warm(runtime: &Runtime, dir: &std::path::Path) -> TurnCatalog {
    let mut spec = SessionSpec::new(common::core(dir, 1, 0, true));
    spec.lane = "fan".into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
    turn
}

fn main() {
    let Ok(side) = std::env::var("SIDE") else {
        println!("probe: set SIDE (raw, cold, rawfan or fan) to run; see benches/probe.rs");
        return;
    };
    let sides = ["raw", "cold", "rawfan", "fan"];
    assert!(
        sides.contains(&side.as_str()),
        "SIDE={side}: use one of {sides:?}"
    );
    let rounds: usize = match std::env::var("ROUNDS") {
        Ok(n) => n
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .expect("ROUNDS: a count above 0"),
        Err(_) => 50,
    };
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let cold_core = common::core(dir.path(), 1, 0, false);
    let (runtime, raw, turn) = rt.block_on(async {
        let runtime = match side.as_str() {
            "cold" | "fan" => Some(common::runtime(&dir.path().join("home"), 4).await),
            _ => None,
        };
        let raw = match side.as_str() {
            "rawfan" => Some(raw_stdio().await),
            _ => None,
        };
        let turn = match (&runtime, side.as_str()) {
            (Some(runtime), "fan") => Some(warm(runtime, dir.path()).await),
            _ => None,
        };
        (runtime, raw, turn)
    });
    let (started, cpu) = (Instant::now(), common::cpu_time());
    rt.block_on(async {
        for round in 0..rounds {
            match (side.as_str(), &runtime, &raw, &turn) {
                ("raw", ..) => raw_cold().await,
                ("cold", Some(runtime), ..) => {
                    let lane = format!("probe-{round}");
                    common::runtime_cold(runtime, &cold_core, lane, common::DEMO_TOOLS).await;
                }
                ("rawfan", _, Some(client), _) => raw_fan(client).await,
                ("fan", .., Some(turn)) => fan(turn).await,
                _ => unreachable!("every side has what it runs on"),
            }
        }
    });
    let (wall, cpu) = (started.elapsed(), common::cpu_time() - cpu);
    println!(
        "{side}: {rounds} rounds, a round: wall {:.0} us, CPU of this process {:.0} us",
        wall.as_secs_f64() * 1e6 / rounds as f64,
        cpu.as_secs_f64() * 1e6 / rounds as f64
    );
    rt.block_on(async {
        drop(turn);
        if let Some(client) = raw {
            let _ = client.cancel().await;
        }
        if let Some(runtime) = runtime {
            runtime.shutdown().await;
        }
    });
}
