//! Not a measurement: a loop of cold rounds to run under a profiler (`perf`, callgrind,
//! dhat, strace), one side of `benches/pairs.rs`'s cold_1 pair at a time.
//!
//! ```text
//! cargo bench --bench probe --no-run     # then run the binary it names:
//! SIDE=raw  ROUNDS=50 target/release/deps/probe-<hash>   # bare rmcp
//! SIDE=cold ROUNDS=50 target/release/deps/probe-<hash>   # the runtime
//! SIDE=rawfan|fan ROUNDS=50 ...   # 64 concurrent calls a round, bare rmcp or the runtime
//! ```
//!
//! A round is what the pair's CPU figure counts: bare rmcp spawns the demo server,
//! initializes, lists everything and cancels; the runtime starts a session, prepares its
//! first turn and evicts it. A fan round is 64 concurrent `echo` calls on one warm
//! connection (parallel_64's pair). Two runs with different `ROUNDS` subtract to a round's cost
//! without the process's start. Without `SIDE` (as under `cargo bench`) it does nothing.

#[path = "common.rs"]
mod common;

use std::time::Instant;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

fn main() {
    let Ok(side) = std::env::var("SIDE") else {
        println!("probe: set SIDE (raw, cold, rawfan or fan) to run (see the file's docs)");
        return;
    };
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50);
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 1, 0, false);
    let runtime = rt.block_on(common::runtime(&dir.path().join("home"), 4));
    // The fan-out sides: 64 concurrent `echo` calls a round on one warm connection.
    let (raw_fan, fan) = rt.block_on(async {
        match side.as_str() {
            "rawfan" => {
                let mut cmd = tokio::process::Command::new(common::EXE);
                cmd.arg("demo-server");
                let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
                (Some(client), None)
            }
            "fan" => {
                let core = common::core(dir.path(), 1, 0, true);
                let mut spec = demiurge_mcp::SessionSpec::new(&core);
                spec.lane = "fan".into();
                let (session, _) = runtime.start_session(spec).await.unwrap();
                (None, Some(session.prepare_turn().await.unwrap()))
            }
            _ => (None, None),
        }
    });
    let (started, cpu) = (Instant::now(), common::cpu_time());
    rt.block_on(async {
        for round in 0..rounds {
            match side.as_str() {
                "raw" => {
                    let mut cmd = tokio::process::Command::new(common::EXE);
                    cmd.arg("demo-server");
                    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
                    let peer = client.peer();
                    let (tools, ..) = tokio::join!(
                        peer.list_all_tools(),
                        peer.list_all_resources(),
                        peer.list_all_resource_templates(),
                        peer.list_all_prompts()
                    );
                    assert_eq!(tools.unwrap().len(), common::DEMO_TOOLS);
                    client.cancel().await.unwrap();
                }
                "rawfan" => {
                    let args = serde_json::json!({"message": "ping"});
                    let args = args.as_object().cloned().unwrap();
                    let client = raw_fan.as_ref().unwrap();
                    futures::future::join_all((0..64).map(|_| {
                        let params =
                            CallToolRequestParams::new("echo").with_arguments(args.clone());
                        client.call_tool(params)
                    }))
                    .await;
                }
                "fan" => {
                    let turn = fan.as_ref().unwrap();
                    let value = serde_json::json!({"message": "ping"});
                    futures::future::join_all(
                        (0..64).map(|_| turn.call("s0__echo", value.clone())),
                    )
                    .await;
                }
                "cold" => {
                    let lane = format!("loop-{round}");
                    common::runtime_cold(&runtime, &core, lane, common::DEMO_TOOLS).await;
                }
                other => panic!("SIDE={other}: use raw, cold, rawfan or fan"),
            }
        }
    });
    let (wall, cpu) = (started.elapsed(), common::cpu_time() - cpu);
    println!(
        "{side}: {rounds} rounds, a round: wall {:.0} us, CPU of this process {:.0} us",
        wall.as_secs_f64() * 1e6 / rounds as f64,
        cpu.as_secs_f64() * 1e6 / rounds as f64
    );
}
