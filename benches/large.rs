//! Large results against bare rmcp, in time and in peak heap (`cargo bench --bench
//! large`; this binary counts its allocations, see `counting.rs`).
//!
//! - `call/raw_rmcp_large_4mib` vs `call/large_4mib`: one call answered with 4 MiB, as
//!   text (`text`) and as `structuredContent` of 16,384 records, each with a sensitive
//!   key whose value its note repeats (`structured`). Bare rmcp receives and parses
//!   the answer; the runtime also converts it, collects the result's secrets and
//!   makes the view a model is shown (redacted, capped). Targets: time at most 1.5x,
//!   CPU at most 1.5x (text) and 2x (structured), and the most heap the runtime holds
//!   during the call at most 3x the result's size (the result kept). The other four
//!   views are made after the pair, once; their heap and CPU are printed beside it.

#[path = "common.rs"]
mod common;
#[path = "counting.rs"]
mod counting;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::SessionSpec;
use demiurge_mcp::redact::View;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

const SIZE: usize = 4 * 1024 * 1024;
const ROUNDS: usize = 12;

fn large(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runtime = rt.block_on(common::runtime(&dir.path().join("home"), 4));
    let mut group = c.benchmark_group("call");
    group.sample_size(10);
    for (kind, fault) in [("text", "huge-result"), ("structured", "huge-structured")] {
        let args = format!("--fault, {fault}, \"{SIZE}\"");
        let core = common::core_with(dir.path(), kind, &[common::stdio_yaml(&args, false)]);
        let (raw, turn) = rt.block_on(async {
            let mut cmd = tokio::process::Command::new(common::EXE);
            cmd.args(["demo-server", "--fault", fault, &SIZE.to_string()]);
            let raw =
                ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
                    .await
                    .unwrap();
            let mut spec = SessionSpec::new(&core);
            spec.lane = kind.into();
            let (session, _) = runtime.start_session(spec).await.unwrap();
            let turn = session.prepare_turn().await.unwrap();
            (raw, turn)
        });
        let raw_call = || async {
            let started = Instant::now();
            let result = raw
                .call_tool(
                    CallToolRequestParams::new("echo")
                        .with_arguments(json!({"message": "x"}).as_object().cloned().unwrap()),
                )
                .await
                .unwrap();
            (started.elapsed(), result)
        };
        let call = || async {
            let started = Instant::now();
            let result = turn
                .call("s0__echo", json!({"message": "x"}))
                .await
                .unwrap();
            // What a host hands its model is part of the call.
            assert!(!result.view(View::Model).content.is_empty());
            (started.elapsed(), result)
        };
        group.bench_function(format!("raw_rmcp_large_4mib/{kind}"), |b| {
            b.to_async(&rt).iter(|| async { raw_call().await.1 })
        });
        group.bench_function(format!("large_4mib/{kind}"), |b| {
            b.to_async(&rt).iter(|| async { call().await.1 })
        });
        rt.block_on(async {
            let (raw_peak, peak) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
            common::paired(
                &format!("call/raw_rmcp_large_4mib vs call/large_4mib ({kind}, time)"),
                "1.5x",
                ROUNDS,
                || async {
                    let before = counting::reset_peak();
                    let (took, result) = raw_call().await;
                    raw_peak.set(raw_peak.get().max(counting::peak() - before));
                    drop(result);
                    took
                },
                || async {
                    let before = counting::reset_peak();
                    let (took, result) = call().await;
                    peak.set(peak.get().max(counting::peak() - before));
                    drop(result);
                    took
                },
            )
            .await;
            // Then every view made too (an operator reading it whole, the log): outside
            // the pair, whose CPU is the call's and its model view's, as a host's turn.
            let before = counting::reset_peak();
            let (_, result) = call().await;
            assert!(!result.is_error, "{:?}", result.view(View::Operator).content);
            let cpu = common::cpu_time();
            let _ = result.views();
            let views_cpu = common::cpu_time().saturating_sub(cpu);
            let every_view = counting::peak() - before;
            drop(result);
            let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
            println!(
                "call/large_4mib ({kind}, peak heap): bare rmcp {:.1} MiB, runtime {:.1} MiB: {:.2}x the result's 4 MiB (target 3x), {:.2}x bare rmcp's; with all five views made: {:.1} MiB, the four other views {:.1} ms of CPU",
                mib(raw_peak.get()),
                mib(peak.get()),
                peak.get() as f64 / SIZE as f64,
                peak.get() as f64 / raw_peak.get() as f64,
                mib(every_view),
                views_cpu.as_secs_f64() * 1e3
            );
        });
        rt.block_on(async {
            let _ = raw.cancel().await;
        });
    }
    group.finish();
    rt.block_on(allocations_per_call(&runtime, dir.path()));
    rt.block_on(runtime.shutdown());
}

/// Allocations of one small `echo` call, bare rmcp's and the runtime's (the result's
/// model view made), from this process's counter: what per-call CPU is mostly made of.
async fn allocations_per_call(runtime: &demiurge_mcp::Runtime, dir: &std::path::Path) {
    const CALLS: usize = 200;
    let core = common::core(dir, 1, 0, false);
    let mut cmd = tokio::process::Command::new(common::EXE);
    cmd.arg("demo-server");
    let raw = ().serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let mut spec = SessionSpec::new(&core);
    spec.lane = "small".into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    let arguments = json!({"message": "ping"});
    let before = counting::allocations();
    for _ in 0..CALLS {
        let params = CallToolRequestParams::new("echo")
            .with_arguments(arguments.as_object().cloned().unwrap());
        raw.call_tool(params).await.unwrap();
    }
    let bare = (counting::allocations() - before) / CALLS;
    let before = counting::allocations();
    for _ in 0..CALLS {
        let result = turn.call("s0__echo", arguments.clone()).await.unwrap();
        assert!(!result.view(View::Model).content.is_empty());
    }
    let ours = (counting::allocations() - before) / CALLS;
    println!("call/echo allocations per call: bare rmcp {bare}, runtime {ours}");
    let _ = raw.cancel().await;
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = large
}
criterion_main!(benches);
