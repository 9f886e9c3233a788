//! Reach: what a deferred catalog saves a model, and what lazy start saves a session.
//!
//! - `reach/second_session_{eager,lazy}_11`: the first turn of a new session of a core
//!   declaring eleven demo servers (20 tools each), when a session before it listed
//!   them: every server started for the turn (`start: eager`) against every server
//!   listed from its last listing (`start: lazy`, the default). Paired in one run and
//!   printed as a ratio (target: lazy under 0.10x eager).
//! - The tokens of that turn's definitions, whole and under a budget (printed): what a
//!   model is offered at the turn's start with and without the deferral.
//! - `reach/search_tools`: one `search_tools` call over those 220 tools.
//! - `serve/call`: a call through `demiurge serve` (stdio, fronting one demo server)
//!   against the same call made to the demo server directly, both from rmcp's client;
//!   paired and printed as a ratio (target: at most 1.25x; a no-op call through any
//!   process in between costs a second round trip, about 2x by itself).
//! - `serve/relay`: the same call through `serve` against the same call through a bare
//!   rmcp relay (`demo-server --forward`: rmcp's server in front of rmcp's client, nothing
//!   else), both one process in front of a demo server: what this runtime adds to a
//!   gateway's hop, paired and printed as a ratio (target: at most 1.25x).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::core::Start;
use demiurge_mcp::search::ToolBudget;
use demiurge_mcp::{Runtime, SessionSpec};
use serde_json::json;

const SERVERS: usize = 11;
const TOOLS: usize = 20;

async fn runtime(home: &Path, start: Start) -> Runtime {
    let mut config = common::config(home, 4);
    config.start = start;
    Runtime::start(config).await.unwrap()
}

/// A new session's first turn (the eviction of the one before it excluded).
async fn first_turn(runtime: &Runtime, core: &Path, lazy: bool) -> Duration {
    let (session, _) = runtime.start_session(SessionSpec::new(core)).await.unwrap();
    let started = Instant::now();
    let turn = session.prepare_turn().await.unwrap();
    let took = started.elapsed();
    assert_eq!(
        turn.tools().len(),
        SERVERS * TOOLS,
        "{:?}",
        turn.diagnostics()
    );
    assert!(turn.tools().iter().all(|t| t.deferred_start == lazy));
    session.evict().await.unwrap();
    took
}

fn reach(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), SERVERS, TOOLS - common::DEMO_TOOLS, false);
    let (eager, lazy) = rt.block_on(async {
        let eager = runtime(&dir.path().join("eager"), Start::Eager).await;
        let lazy = runtime(&dir.path().join("lazy"), Start::Lazy).await;
        // The session before: it lists every server, and the lazy runtime keeps them.
        first_turn(&lazy, &core, false).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        (eager, lazy)
    });
    rt.block_on(common::paired(
        "reach/second_session_11 (lazy vs eager)",
        "under 0.10x",
        10,
        || first_turn(&eager, &core, false),
        || first_turn(&lazy, &core, true),
    ));
    tokens(&rt, &lazy, &core);

    let mut group = c.benchmark_group("reach");
    group.sample_size(10);
    group.bench_function("second_session_eager_11", |b| {
        b.to_async(&rt).iter_custom(|n| {
            let (runtime, core) = (&eager, &core);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    total += first_turn(runtime, core, false).await;
                }
                total
            }
        })
    });
    group.bench_function("second_session_lazy_11", |b| {
        b.to_async(&rt).iter_custom(|n| {
            let (runtime, core) = (&lazy, &core);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    total += first_turn(runtime, core, true).await;
                }
                total
            }
        })
    });
    let catalog = rt.block_on(async {
        let mut spec = SessionSpec::new(&core);
        spec.tool_budget = Some(ToolBudget::new(1_000));
        let (session, _) = lazy.start_session(spec).await.unwrap();
        session.prepare_turn().await.unwrap()
    });
    group.bench_function("search_tools", |b| {
        b.to_async(&rt).iter(|| async {
            let found = catalog
                .call(
                    "search_tools",
                    json!({"query": "sleep for milliseconds", "limit": 5}),
                )
                .await
                .unwrap();
            assert!(!found.is_error);
        })
    });
    group.finish();
    rt.block_on(async {
        eager.shutdown().await;
        lazy.shutdown().await;
    });
}

/// Prints the tokens of the turn's definitions whole and under a budget.
fn tokens(rt: &tokio::runtime::Runtime, runtime: &Runtime, core: &Path) {
    let catalog = rt.block_on(async {
        let mut spec = SessionSpec::new(core);
        spec.tool_budget = Some(ToolBudget::new(1_000));
        let (session, _) = runtime.start_session(spec).await.unwrap();
        session.prepare_turn().await.unwrap()
    });
    let rule = catalog.deferral().unwrap();
    println!(
        "reach/tokens ({SERVERS} servers, {} tools): whole definitions {} tokens; deferred (budget {}): {} tokens offered ({:.1}% of whole), estimator {}",
        rule.tools,
        rule.full_tokens,
        rule.budget,
        rule.offered_tokens,
        100.0 * rule.offered_tokens as f64 / rule.full_tokens as f64,
        rule.estimator
    );
}

/// An rmcp client of `demiurge` with `args` over stdio.
async fn stdio_client(args: &[&str]) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    let mut command = tokio::process::Command::new(common::EXE);
    command.args(args).stderr(std::process::Stdio::null());
    ().serve(rmcp::transport::TokioChildProcess::new(command).unwrap())
        .await
        .unwrap()
}

/// `calls` sequential calls of `tool` on `client`: how long they took.
async fn calls(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    calls: usize,
) -> Duration {
    let args = json!({"message": "ping"}).as_object().cloned().unwrap();
    let started = Instant::now();
    for _ in 0..calls {
        let params = rmcp::model::CallToolRequestParams::new(tool).with_arguments(args.clone());
        let result = client.call_tool(params).await.unwrap();
        assert_ne!(result.is_error, Some(true));
    }
    started.elapsed()
}

fn serve(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 1, 0, false);
    let home = dir.path().join("serve-home");
    let (direct, relay, served) = rt.block_on(async {
        let direct = stdio_client(&["demo-server"]).await;
        let relay = stdio_client(&["demo-server", "--forward"]).await;
        let core = core.display().to_string();
        let home = home.display().to_string();
        let args = ["--core", &core, "--home", &home, "--yes", "serve"];
        let served = stdio_client(&args).await;
        let tools = served.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == "s0__echo"));
        (direct, relay, served)
    });
    rt.block_on(common::paired(
        "serve/call (200 sequential echo calls: direct vs through serve)",
        "at most 1.25x",
        20,
        || calls(&direct, "echo", 200),
        || calls(&served, "s0__echo", 200),
    ));
    rt.block_on(common::paired(
        "serve/relay (200 sequential echo calls: bare rmcp relay vs serve)",
        "at most 1.25x",
        20,
        || calls(&relay, "echo", 200),
        || calls(&served, "s0__echo", 200),
    ));
    let mut group = c.benchmark_group("serve");
    group.bench_function("call_direct", |b| {
        b.to_async(&rt).iter(|| calls(&direct, "echo", 1))
    });
    group.bench_function("call_through_relay", |b| {
        b.to_async(&rt).iter(|| calls(&relay, "echo", 1))
    });
    group.bench_function("call_through_serve", |b| {
        b.to_async(&rt).iter(|| calls(&served, "s0__echo", 1))
    });
    group.finish();
    rt.block_on(async {
        let _ = direct.cancel().await;
        let _ = relay.cancel().await;
        let _ = served.cancel().await;
    });
}

criterion_group!(benches, reach, serve);
criterion_main!(benches);
