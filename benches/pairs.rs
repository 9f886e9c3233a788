//! The runtime against bare rmcp on the same server, pair by pair (`cargo bench --bench
//! pairs`). Each pair is a criterion bench of each side, then a paired figure: rounds
//! of both alternate (one first, then the other), and the ratio of their medians is
//! printed, which a drift of the machine between two benches cannot skew.
//!
//! - `connect/raw_rmcp_1` vs `prepare/cold_1`: bare rmcp spawns the demo server,
//!   initializes and lists what it offers (tools, resources, templates, prompts, at
//!   once); the runtime prepares a new session's first turn of the same server (load
//!   the core, capability, approval from policy, spawn, initialize, list, name,
//!   catalog). Target: at most 1.25x.
//! - `connect/raw_rmcp_16_limit4` vs `prepare/cold_16`: the same for 16 servers, at
//!   most 4 starting at once on both sides. Target: at most 1.10x.
//! - `connect/http_raw_rmcp_1` vs `prepare/http_cold_1`: the same over streamable HTTP
//!   (rmcp's reqwest client; the runtime's pinned client under a URL policy trusting
//!   loopback) to one demo server process. Target: at most 1.25x.
//! - `call/http_raw_rmcp` vs `call/http_runtime`: sequential `echo` calls over HTTP,
//!   connections reused (the server's sockets are counted after the run). Target: at
//!   most 1.10x.
//! - `call/raw_rmcp_parallel_64` vs `call/parallel_64`: 64 concurrent `echo` calls to
//!   one server (declared `supports_parallel_tool_calls: true`). Target: throughput at
//!   least 0.9x (time at most 1.11x).
//!
//! Cold rounds exclude teardown on both sides (the runtime's eviction, rmcp's cancel).

#[path = "common.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, list_everything, raw_stdio, runtime_cold};
use criterion::{Criterion, criterion_group, criterion_main};
use demiurge_mcp::{Runtime, SessionSpec, TurnCatalog};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::json;

/// Rounds of each paired figure.
const COLD_ROUNDS: usize = 30;
const CALL_ROUNDS: usize = 40;
/// Calls per round of a sequential call pair.
const CALLS: u32 = 100;

async fn raw_http(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_string()))
        .await
        .unwrap()
}

/// `servers` bare clients connected and listed, at most `limit` at once; the time it
/// took, and the clients (to close outside the measured time).
async fn raw_cold(servers: usize, limit: usize, http: Option<&str>) -> (Duration, Vec<Client>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limit));
    let started = Instant::now();
    let clients = futures::future::join_all((0..servers).map(|_| {
        let permits = permits.clone();
        async move {
            let _permit = permits.acquire().await.unwrap();
            let client = match http {
                Some(url) => raw_http(url).await,
                None => raw_stdio().await,
            };
            list_everything(&client).await;
            client
        }
    }))
    .await;
    (started.elapsed(), clients)
}

async fn close(clients: Vec<Client>) {
    futures::future::join_all(clients.into_iter().map(|c| c.cancel())).await;
}

fn cold(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let server = rt.block_on(common::http_server());
    let http_core = common::http_core(dir.path(), &server.url);
    let runtime = rt.block_on(common::runtime(&dir.path().join("home"), 4));
    let cores: Vec<_> = [1, 16]
        .iter()
        .map(|&n| (n, common::core(dir.path(), n, 0, false)))
        .collect();
    let lanes = std::sync::atomic::AtomicUsize::new(0);
    let lane = || {
        format!(
            "cold-{}",
            lanes.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    };

    let mut group = c.benchmark_group("connect");
    group.sample_size(10);
    for (name, servers, http) in [
        ("raw_rmcp_1", 1, None),
        ("raw_rmcp_16_limit4", 16, None),
        ("http_raw_rmcp_1", 1, Some(server.url.as_str())),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (took, clients) = raw_cold(servers, 4, http).await;
                    total += took;
                    close(clients).await;
                }
                total
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("prepare");
    group.sample_size(10);
    let http_cold = ("http_cold_1", http_core.clone(), common::DEMO_TOOLS);
    for (name, core, tools) in [
        ("cold_1", cores[0].1.clone(), common::DEMO_TOOLS),
        ("cold_16", cores[1].1.clone(), 16 * common::DEMO_TOOLS),
        http_cold,
    ] {
        let (runtime, lane) = (&runtime, &lane);
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let core = core.clone();
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += runtime_cold(runtime, &core, lane(), tools).await;
                    }
                    total
                }
            })
        });
    }
    group.finish();

    rt.block_on(async {
        for (name, servers, http, core, target) in [
            (
                "connect/raw_rmcp_1 vs prepare/cold_1",
                1,
                None,
                &cores[0].1,
                "1.25x",
            ),
            (
                "connect/raw_rmcp_16_limit4 vs prepare/cold_16",
                16,
                None,
                &cores[1].1,
                "1.10x",
            ),
            (
                "connect/http_raw_rmcp_1 vs prepare/http_cold_1",
                1,
                Some(server.url.as_str()),
                &http_core,
                "1.25x",
            ),
        ] {
            let tools = servers * common::DEMO_TOOLS;
            common::paired(
                name,
                target,
                COLD_ROUNDS,
                || async {
                    let (took, clients) = raw_cold(servers, 4, http).await;
                    close(clients).await;
                    took
                },
                || runtime_cold(&runtime, core, lane(), tools),
            )
            .await;
        }
        runtime.shutdown().await;
    });
}

/// A warm catalog of `core`'s servers.
async fn warm(runtime: &Runtime, core: &std::path::Path, lane: &str) -> TurnCatalog {
    let mut spec = SessionSpec::new(core);
    spec.lane = lane.into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
    turn
}

fn echo(client: &Client) -> impl std::future::Future<Output = ()> + '_ {
    let args = json!({"message": "ping"}).as_object().cloned().unwrap();
    async move {
        client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
            .await
            .unwrap();
    }
}

/// 64 bare calls at once on one client; the time they took.
async fn raw_fan_out(client: &Client) -> Duration {
    let started = Instant::now();
    futures::future::join_all((0..64).map(|_| echo(client))).await;
    started.elapsed()
}

fn calls(c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let server = rt.block_on(common::http_server());
    let http_core = common::http_core(dir.path(), &server.url);
    let parallel_core = common::core(dir.path(), 1, 0, true);
    let runtime = rt.block_on(common::runtime(&dir.path().join("home"), 4));
    let (raw_http, http_turn, raw_stdio, parallel) = rt.block_on(async {
        (
            raw_http(&server.url).await,
            warm(&runtime, &http_core, "http").await,
            raw_stdio().await,
            warm(&runtime, &parallel_core, "parallel").await,
        )
    });
    let value = json!({"message": "ping"});
    let sequential = |tool: &'static str, turn: &TurnCatalog| {
        let (turn, value) = (turn.clone(), value.clone());
        async move {
            let started = Instant::now();
            for _ in 0..CALLS {
                turn.call(tool, value.clone()).await.unwrap();
            }
            started.elapsed() / CALLS
        }
    };
    let fan_out = |turn: &TurnCatalog| {
        let (turn, value) = (turn.clone(), value.clone());
        async move {
            let started = Instant::now();
            futures::future::join_all((0..64).map(|_| turn.call("s0__echo", value.clone()))).await;
            started.elapsed()
        }
    };
    let mut group = c.benchmark_group("call");
    group.bench_function("http_raw_rmcp", |b| {
        b.to_async(&rt).iter(|| echo(&raw_http))
    });
    group.bench_function("http_runtime", |b| {
        b.to_async(&rt)
            .iter(|| async { http_turn.call("s0__echo", value.clone()).await.unwrap() })
    });
    group.bench_function("raw_rmcp_parallel_64", |b| {
        b.to_async(&rt).iter(|| raw_fan_out(&raw_stdio))
    });
    group.bench_function("parallel_64", |b| {
        b.to_async(&rt).iter(|| fan_out(&parallel))
    });
    group.finish();

    rt.block_on(async {
        common::paired(
            "call/http_raw_rmcp vs call/http_runtime",
            "1.10x",
            CALL_ROUNDS,
            || async {
                let started = Instant::now();
                for _ in 0..CALLS {
                    echo(&raw_http).await;
                }
                started.elapsed() / CALLS
            },
            || sequential("s0__echo", &http_turn),
        )
        .await;
        println!(
            "call/http_*: the server holds {} sockets (its listener and one connection per client: reused)",
            common::sockets(server.pid)
        );
        let ratio = common::paired(
            "call/raw_rmcp_parallel_64 vs call/parallel_64 (time)",
            "1.11x, throughput 0.9x",
            CALL_ROUNDS,
            || raw_fan_out(&raw_stdio),
            || fan_out(&parallel),
        )
        .await;
        println!("call/parallel_64: throughput {:.3}x bare rmcp's (target 0.9x)", 1.0 / ratio);
        let _ = raw_http.cancel().await;
        let _ = raw_stdio.cancel().await;
        runtime.shutdown().await;
    });
}

/// A modern bare client of the demo server over stdio, or over HTTP at `url`.
async fn raw_modern_demo(http: Option<&str>) -> Client {
    match http {
        Some(url) => {
            common::raw_modern(StreamableHttpClientTransport::from_uri(url.to_string())).await
        }
        None => common::raw_modern_stdio().await,
    }
}

/// The 2026-07-28 pairs: the runtime with `protocol: 2026-07-28` against rmcp's own
/// modern client, cold (connect and list everything) and warm (sequential calls), over
/// stdio and HTTP; targets as for the legacy pairs.
fn modern(_c: &mut Criterion) {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let server = rt.block_on(common::http_server());
    let modern = "protocol: 2026-07-28\n";
    let stdio_core = common::core_with(
        dir.path(),
        "modern-stdio",
        &[common::stdio_yaml("--extra-tools, \"0\"", false).replace(common::LEGACY, modern)],
    );
    let http_core = common::core_with(
        dir.path(),
        "modern-http",
        &[format!(
            "transport: http\nurl: {}\napproval_policy: auto\n{modern}",
            server.url
        )],
    );
    let runtime = rt.block_on(common::runtime(&dir.path().join("home"), 4));
    let lanes = std::sync::atomic::AtomicUsize::new(0);
    let lane = || {
        format!(
            "modern-{}",
            lanes.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        )
    };
    rt.block_on(async {
        for (name, http, core) in [
            (
                "connect/modern_raw_rmcp_1 vs prepare/modern_cold_1",
                None,
                &stdio_core,
            ),
            (
                "connect/modern_http_raw_rmcp_1 vs prepare/modern_http_cold_1",
                Some(server.url.as_str()),
                &http_core,
            ),
        ] {
            common::paired(
                name,
                "1.25x",
                COLD_ROUNDS,
                || async {
                    let started = Instant::now();
                    let client = raw_modern_demo(http).await;
                    list_everything(&client).await;
                    let took = started.elapsed();
                    let _ = client.cancel().await;
                    took
                },
                || runtime_cold(&runtime, core, lane(), common::DEMO_TOOLS),
            )
            .await;
        }
        for (name, http, core) in [
            (
                "call/modern_raw_rmcp vs call/modern_runtime",
                None,
                &stdio_core,
            ),
            (
                "call/modern_http_raw_rmcp vs call/modern_http_runtime",
                Some(server.url.as_str()),
                &http_core,
            ),
        ] {
            let client = raw_modern_demo(http).await;
            let turn = warm(&runtime, core, &lane()).await;
            let identity = turn.servers().next().map(|s| s.protocol.clone());
            assert_eq!(identity.as_deref(), Some("2026-07-28"));
            let value = json!({"message": "ping"});
            common::paired(
                name,
                "1.10x",
                CALL_ROUNDS,
                || async {
                    let started = Instant::now();
                    for _ in 0..CALLS {
                        echo(&client).await;
                    }
                    started.elapsed() / CALLS
                },
                || {
                    let (turn, value) = (turn.clone(), value.clone());
                    async move {
                        let started = Instant::now();
                        for _ in 0..CALLS {
                            turn.call("s0__echo", value.clone()).await.unwrap();
                        }
                        started.elapsed() / CALLS
                    }
                },
            )
            .await;
            let _ = client.cancel().await;
        }
        runtime.shutdown().await;
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = cold, calls, modern
}
criterion_main!(benches);
