//! Benches of the actor system against baselines measured in the same run.
//!
//! - `call/raw_rmcp`: sequential `echo` calls with a bare rmcp client to the demo server
//!   over stdio (the baseline).
//! - `call/runtime`: the same calls through a warm catalog (capability check, approval
//!   from policy, bound dispatch through the connection actor, conversion, five views).
//! - `prepare/warm_2`: a turn for a session whose servers are connected and unchanged.
//!
//! Run with `cargo bench`; the ratio of the two `call/*` medians is the runtime's cost.

use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::events::NullSink;
use demiurge_mcp::{ApprovalAnswer, FixedApprover, Runtime, RuntimeConfig, SessionSpec};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

const EXE: &str = env!("CARGO_BIN_EXE_demiurge");

fn core(dir: &std::path::Path, servers: usize) -> std::path::PathBuf {
    let core = dir.join("core");
    std::fs::create_dir_all(core.join("agent/mcp")).unwrap();
    let mut manifest = String::from("capabilities:\n  defaults:\n");
    for i in 0..servers {
        manifest.push_str(&format!(
            "    mcp.connect:s{i}: {{scope: core}}\n    mcp.call:s{i}: {{scope: core}}\n"
        ));
        std::fs::write(
            core.join(format!("agent/mcp/s{i}.yaml")),
            format!(
                "command: {}\nargs: [demo-server]\napproval_policy: auto\n",
                serde_json::to_string(EXE).unwrap()
            ),
        )
        .unwrap();
    }
    std::fs::write(core.join("agent.yaml"), manifest).unwrap();
    core
}

fn calls(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("call");

    let raw = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(EXE);
        cmd.arg("demo-server");
        ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
            .await
            .unwrap()
    });
    let args = json!({"message": "ping"}).as_object().cloned().unwrap();
    group.bench_function("raw_rmcp", |b| {
        b.to_async(&rt).iter(|| async {
            let params = CallToolRequestParams::new("echo").with_arguments(args.clone());
            raw.call_tool(params).await.unwrap()
        })
    });

    let dir = tempfile::tempdir().unwrap();
    let core = core(dir.path(), 1);
    let (runtime, catalog) = rt.block_on(async {
        let config = RuntimeConfig::new(dir.path().join("home"))
            .with_approver(FixedApprover(ApprovalAnswer::AllowSession))
            .with_events(NullSink);
        let runtime = Runtime::start(config).await.unwrap();
        let (session, _) = runtime
            .start_session(SessionSpec::new(&core))
            .await
            .unwrap();
        let catalog = session.prepare_turn().await.unwrap();
        (runtime, catalog)
    });
    let value = json!({"message": "ping"});
    group.bench_function("runtime", |b| {
        b.to_async(&rt)
            .iter(|| async { catalog.call("s0__echo", value.clone()).await.unwrap() })
    });
    group.finish();
    rt.block_on(async {
        runtime.shutdown().await;
        let _ = raw.cancel().await;
    });
}

fn prepare(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let core = core(dir.path(), 2);
    let (runtime, session) = rt.block_on(async {
        let config = RuntimeConfig::new(dir.path().join("home"))
            .with_approver(FixedApprover(ApprovalAnswer::AllowSession))
            .with_events(NullSink);
        let runtime = Runtime::start(config).await.unwrap();
        let (session, _) = runtime
            .start_session(SessionSpec::new(&core))
            .await
            .unwrap();
        session.prepare_turn().await.unwrap();
        (runtime, session)
    });
    c.bench_function("prepare/warm_2", |b| {
        b.to_async(&rt)
            .iter(|| async { session.prepare_turn().await.unwrap() })
    });
    rt.block_on(runtime.shutdown());
}

criterion_group!(benches, calls, prepare);
criterion_main!(benches);
