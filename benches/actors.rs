//! Criterion benches of the actor system, each against a baseline measured in the same
//! run (names are fixed so results compare over time; `cargo bench --bench actors`).
//!
//! - `call/raw_rmcp`: sequential `echo` calls with a bare rmcp client to the demo server
//!   over stdio: the baseline.
//! - `call/runtime`: the same calls through a warm catalog (capability, approval from
//!   policy, bound dispatch through the connection actor, conversion, five views,
//!   event). Target: median at most 1.10x `call/raw_rmcp`. `call/paired` then
//!   alternates batches of both and prints the ratio of their medians, which a drift
//!   of the machine between two benches cannot skew.
//! - `call/parallel_16`, `call/serial_16`: 16 concurrent callers on one server declared
//!   with and without `supports_parallel_tool_calls` (one iteration = 16 calls).
//! - `prepare/warm_16x50_held`: the same with one tool of each server held back for
//!   review (pinning): each warm turn checks 16 pin files.
//! - `prepare/warm_16x50`: a turn for a session whose 16 servers (50 tools each) are all
//!   connected and unchanged. Target: under 100 microseconds.
//! - Cold turns (`prepare/cold_*`) are in `benches/pairs.rs`, each beside bare rmcp
//!   doing the same work.
//! - `stress/sessions_64`: 64 sessions preparing a turn and calling once, all at once;
//!   the limiter bound is asserted after the run.
//! - `stress/host_actor_1000`: a host actor (a ractor actor, the runtime's root linked
//!   under it) sends 1,000 `StartSession` and `ResumeSession` messages over four lanes
//!   of a two-server core, each replacing its lane's session (evicted, tracked); beside
//!   `stress/handle_1000`, the same sequence through the handle API. Throughput and
//!   p99 of each message's round trip are printed.

#[path = "common.rs"]
mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::{Runtime, RuntimeMsg, SessionSpec};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, call};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

/// Batches and calls per batch of the paired raw/runtime comparison.
const PAIRED_BATCHES: u32 = 40;
const PAIRED_CALLS: u32 = 200;

fn calls(c: &mut Criterion) {
    let rt = common::rt();
    let mut group = c.benchmark_group("call");
    let raw = rt.block_on(async {
        let mut cmd = tokio::process::Command::new(common::EXE);
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
    let core = common::core(dir.path(), 2, 0, false);
    let parallel_core = common::core(dir.path(), 1, 0, true);
    let (runtime, catalog, parallel) = rt.block_on(async {
        let runtime = common::runtime(&dir.path().join("home"), 4).await;
        let (session, _) = runtime
            .start_session(SessionSpec::new(&core))
            .await
            .unwrap();
        let catalog = session.prepare_turn().await.unwrap();
        let mut spec = SessionSpec::new(&parallel_core);
        spec.lane = "parallel".into();
        let (p, _) = runtime.start_session(spec).await.unwrap();
        (runtime, catalog, p.prepare_turn().await.unwrap())
    });
    let value = json!({"message": "ping"});
    group.bench_function("runtime", |b| {
        b.to_async(&rt)
            .iter(|| async { catalog.call("s0__echo", value.clone()).await.unwrap() })
    });

    for (name, cat, tool) in [
        ("parallel_16", &parallel, "s0__sleep"),
        ("serial_16", &catalog, "s1__sleep"),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let calls = (0..16).map(|_| cat.call(tool, json!({"ms": 1})));
                futures::future::join_all(calls).await
            })
        });
    }
    group.finish();
    // Paired: batches of raw and runtime calls alternate, so both see the same state
    // of a shared, noisy machine; the ratio of their medians drifts far less between
    // runs than the ratio of two benches measured a minute apart.
    rt.block_on(async {
        let (mut raw_batches, mut runtime_batches) = (Vec::new(), Vec::new());
        for _ in 0..PAIRED_BATCHES {
            let started = Instant::now();
            for _ in 0..PAIRED_CALLS {
                let params = CallToolRequestParams::new("echo").with_arguments(args.clone());
                raw.call_tool(params).await.unwrap();
            }
            raw_batches.push(started.elapsed() / PAIRED_CALLS);
            let started = Instant::now();
            for _ in 0..PAIRED_CALLS {
                catalog.call("s0__echo", value.clone()).await.unwrap();
            }
            runtime_batches.push(started.elapsed() / PAIRED_CALLS);
        }
        let (raw_us, _) = common::median_p99(raw_batches);
        let (runtime_us, _) = common::median_p99(runtime_batches);
        println!(
            "call/paired: raw_rmcp {raw_us:.1} us, runtime {runtime_us:.1} us per call: {:.3}x ({PAIRED_BATCHES} alternating batches of {PAIRED_CALLS}; target 1.10x)",
            runtime_us / raw_us
        );
    });
    rt.block_on(async {
        let seen = |c: &demiurge_mcp::TurnCatalog, tool: &'static str| {
            let c = c.clone();
            async move { c.call(tool, json!({"ms": 0})).await.unwrap().view(demiurge_mcp::redact::View::Operator).data["max_concurrent"].as_u64().unwrap() }
        };
        let (serial, par) = (seen(&catalog, "s1__sleep").await, seen(&parallel, "s0__sleep").await);
        println!("call/serial_16: the server saw at most {serial} call(s) at once (must be 1)");
        println!("call/parallel_16: the server saw at most {par} calls at once (parallel scales with the server)");
        assert_eq!(serial, 1, "serial calls overlapped");
        runtime.shutdown().await;
        let _ = raw.cancel().await;
    });
}

fn prepare(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let warm_core = common::core(dir.path(), 16, 50 - common::DEMO_TOOLS, false);
    let (runtime, session) = rt.block_on(async {
        let runtime = common::runtime(&dir.path().join("home"), 4).await;
        let (session, _) = runtime
            .start_session(SessionSpec::new(&warm_core))
            .await
            .unwrap();
        let turn = session.prepare_turn().await.unwrap();
        assert_eq!(turn.tools().len(), 16 * 50);
        (runtime, session)
    });
    let mut group = c.benchmark_group("prepare");
    group.bench_function("warm_16x50", |b| {
        b.to_async(&rt)
            .iter(|| async { session.prepare_turn().await.unwrap() })
    });

    let (held_runtime, held_session) = rt.block_on(held_turns(dir.path(), &warm_core));
    group.bench_function("warm_16x50_held", |b| {
        b.to_async(&rt)
            .iter(|| async { held_session.prepare_turn().await.unwrap() })
    });
    group.finish();
    rt.block_on(runtime.shutdown());
    rt.block_on(held_runtime.shutdown());
}

/// Refuses every changed definition, approves the rest.
struct NoChanges;

impl demiurge_mcp::Approver for NoChanges {
    fn decide(
        &self,
        request: demiurge_mcp::ApprovalRequest,
    ) -> futures::future::BoxFuture<'static, demiurge_mcp::ApprovalAnswer> {
        let answer = match request.action {
            demiurge_mcp::actors::Action::Change => demiurge_mcp::ApprovalAnswer::Deny,
            _ => demiurge_mcp::ApprovalAnswer::AllowSession,
        };
        Box::pin(async move { answer })
    }
}

/// A session of `core` whose 16 servers each hold one tool back (its pin removed after
/// the first listing, so it comes back as new and is refused): its warm turns check
/// every server's pin file.
async fn held_turns(
    dir: &std::path::Path,
    core: &std::path::Path,
) -> (demiurge_mcp::Runtime, demiurge_mcp::Session) {
    let home = dir.join("home-held");
    let mut config = common::config(&home, 4);
    config.approver = std::sync::Arc::new(NoChanges);
    let runtime = demiurge_mcp::Runtime::start(config).await.unwrap();
    let (first, _) = runtime.start_session(SessionSpec::new(core)).await.unwrap();
    first.prepare_turn().await.unwrap();
    let store = demiurge_mcp::pins::PinStore::open(&home);
    for (key, mut file) in store.all() {
        file.approved.retain(|p| p.name != "extra_0");
        store.save(&key, &mut file).unwrap();
    }
    let mut spec = SessionSpec::new(core);
    spec.lane = "held".into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    assert_eq!(turn.tools().len(), 16 * 49, "{:?}", turn.diagnostics());
    (runtime, session)
}

fn stress(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 2, 0, true);
    let (runtime, sessions) = rt.block_on(async {
        let runtime = common::runtime(&dir.path().join("home"), 4).await;
        let mut sessions = Vec::new();
        for i in 0..64 {
            let mut spec = SessionSpec::new(&core);
            spec.lane = format!("stress-{i}");
            sessions.push(runtime.start_session(spec).await.unwrap().0);
        }
        (runtime, sessions)
    });
    let latencies = std::sync::Mutex::new(Vec::new());
    let mut group = c.benchmark_group("stress");
    group.sample_size(10);
    group.bench_function("sessions_64", |b| {
        b.to_async(&rt).iter(|| async {
            let turns = sessions.iter().map(|s| async move {
                let started = Instant::now();
                let turn = s.prepare_turn().await.unwrap();
                turn.call("s0__echo", json!({"message": "x"}))
                    .await
                    .unwrap();
                started.elapsed()
            });
            let done = futures::future::join_all(turns).await;
            latencies.lock().unwrap().extend(done);
        })
    });
    group.finish();
    let samples = latencies.into_inner().unwrap();
    let count = samples.len();
    if count == 0 {
        rt.block_on(runtime.shutdown());
        return;
    }
    let total: Duration = samples.iter().sum();
    let (median, p99) = common::median_p99(samples);
    let stats = rt.block_on(runtime.limiter_stats());
    println!(
        "stress/sessions_64: {count} turns, median {median:.0} us, p99 {p99:.0} us, {:.0} turns/s per session lane; limiter max in use {} of {}",
        count as f64 / total.as_secs_f64(),
        stats.max_in_use,
        stats.limit
    );
    assert!(
        stats.max_in_use <= stats.limit,
        "the discovery limit was exceeded"
    );
    rt.block_on(runtime.shutdown());
}

/// Messages of one `host_actor_1000` / `handle_1000` round.
const HOST_MESSAGES: usize = 1000;
const HOST_LANES: usize = 4;

/// What the `n`th message of a round is: a start in lane `n % 4`, or every other time
/// the resume of that lane's session before last.
enum Step {
    Start(SessionSpec),
    Resume(String),
}

fn step(n: usize, core: &std::path::Path, lanes: &[Vec<String>]) -> Step {
    let lane = n % HOST_LANES;
    let history = &lanes[lane];
    match (n / HOST_LANES % 2, history.len()) {
        (1, len) if len >= 2 => Step::Resume(history[len - 2].clone()),
        _ => {
            let mut spec = SessionSpec::new(core);
            spec.lane = format!("host-{lane}");
            Step::Start(spec)
        }
    }
}

/// A host written as a ractor actor: it owns the runtime (root linked under it) and
/// drives a round of sessions by messages when asked.
struct Host;

enum HostMsg {
    Round(std::path::PathBuf, RpcReplyPort<Vec<Duration>>),
}

impl Actor for Host {
    type Msg = HostMsg;
    type State = Runtime;
    type Arguments = demiurge_mcp::RuntimeConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<HostMsg>,
        config: Self::Arguments,
    ) -> Result<Runtime, ActorProcessingErr> {
        Ok(Runtime::start_linked(config, myself.get_cell()).await?)
    }

    async fn handle(
        &self,
        _myself: ActorRef<HostMsg>,
        HostMsg::Round(core, reply): HostMsg,
        runtime: &mut Runtime,
    ) -> Result<(), ActorProcessingErr> {
        let root = runtime.actor().clone();
        let mut lanes = vec![Vec::new(); HOST_LANES];
        let mut took = Vec::with_capacity(HOST_MESSAGES);
        for n in 0..HOST_MESSAGES {
            let started = Instant::now();
            let opened = match step(n, &core, &lanes) {
                Step::Start(spec) => call!(root, RuntimeMsg::StartSession, spec),
                Step::Resume(id) => call!(root, RuntimeMsg::ResumeSession, id),
            }?
            .map_err(|e| e.to_string())?;
            took.push(started.elapsed());
            if !lanes[n % HOST_LANES].contains(&opened.session.id().to_string()) {
                lanes[n % HOST_LANES].push(opened.session.id().to_string());
            }
        }
        let _ = reply.send(took);
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<HostMsg>,
        runtime: &mut Runtime,
    ) -> Result<(), ActorProcessingErr> {
        runtime.shutdown().await;
        Ok(())
    }
}

/// The same round through the handle API.
async fn handle_round(runtime: &Runtime, core: &std::path::Path) -> Vec<Duration> {
    let mut lanes = vec![Vec::new(); HOST_LANES];
    let mut took = Vec::with_capacity(HOST_MESSAGES);
    for n in 0..HOST_MESSAGES {
        let started = Instant::now();
        let (session, _) = match step(n, core, &lanes) {
            Step::Start(spec) => runtime.start_session(spec).await,
            Step::Resume(id) => runtime.resume_session(&id).await,
        }
        .unwrap();
        took.push(started.elapsed());
        if !lanes[n % HOST_LANES].contains(&session.id().to_string()) {
            lanes[n % HOST_LANES].push(session.id().to_string());
        }
    }
    took
}

fn host(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 2, 0, false);
    let (host, runtime) = rt.block_on(async {
        let config = common::config(&dir.path().join("host-home"), 4);
        let (host, _) = Actor::spawn(None, Host, config).await.unwrap();
        (host, common::runtime(&dir.path().join("home"), 4).await)
    });
    let (by_host, by_handle) = (
        std::sync::Mutex::new(Vec::new()),
        std::sync::Mutex::new(Vec::new()),
    );
    let mut group = c.benchmark_group("stress");
    group.sample_size(10);
    group.bench_function("host_actor_1000", |b| {
        b.to_async(&rt).iter(|| async {
            let took = call!(host, HostMsg::Round, core.clone()).unwrap();
            by_host.lock().unwrap().extend(took);
        })
    });
    group.bench_function("handle_1000", |b| {
        b.to_async(&rt).iter(|| async {
            let took = handle_round(&runtime, &core).await;
            by_handle.lock().unwrap().extend(took);
        })
    });
    group.finish();
    for (name, samples) in [
        ("host_actor_1000", by_host.into_inner().unwrap()),
        ("handle_1000", by_handle.into_inner().unwrap()),
    ] {
        let count = samples.len();
        if count == 0 {
            continue;
        }
        let total: Duration = samples.iter().sum();
        let (median, p99) = common::median_p99(samples);
        println!(
            "stress/{name}: {count} start/resume messages, {:.0} a second, median {median:.0} us, p99 {p99:.0} us",
            count as f64 / total.as_secs_f64()
        );
    }
    host.stop(None);
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        runtime.shutdown().await;
    });
}

criterion_group!(benches, calls, prepare, stress, host);
criterion_main!(benches);
