//! Not a criterion bench: one side of a pair of `benches/pairs.rs` at a time, in a
//! loop, to run under a profiler (`perf`, callgrind, dhat, strace).
//!
//! ```text
//! cargo bench --bench probe --no-run     # then run the binary it names:
//! SIDE=raw    ROUNDS=50 target/release/deps/probe-<hash>   # cold_1, bare rmcp
//! SIDE=cold   ROUNDS=50 target/release/deps/probe-<hash>   # cold_1, the runtime
//! SIDE=rawfan ROUNDS=50 target/release/deps/probe-<hash>   # parallel_64, bare rmcp
//! SIDE=fan    ROUNDS=50 target/release/deps/probe-<hash>   # parallel_64, the runtime
//! SIDE=rawmodern ROUNDS=50 ...   # modern_cold_1 (MCP 2026-07-28, stdio), bare rmcp
//! SIDE=modern    ROUNDS=50 ...   # modern_cold_1, the runtime
//! THREADS=1 SIDE=... ...          # also what each thread ran a round
//! ```
//!
//! A cold round is what cold_1's CPU figure counts: bare rmcp spawns the demo server,
//! initializes, lists everything and cancels; the runtime starts a session, prepares its
//! first turn and evicts it. A fan round is 64 concurrent `echo` calls on one warm
//! connection. The figures it prints (wall, and CPU split into user and system time)
//! leave set-up out; a profiler counts the whole
//! process, so two runs with different `ROUNDS`, subtracted, give a round's cost. Without
//! `SIDE` (as under `cargo bench`) it does nothing.

#[path = "common.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Client, list_everything, raw_stdio};
use demiurge_mcp::{Runtime, SessionSpec, TurnCatalog};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

/// A cold round of bare rmcp: spawn, initialize (or, `modern`, discover), list
/// everything, cancel.
async fn raw_cold(modern: bool) {
    let client = if modern {
        common::raw_modern_stdio().await
    } else {
        raw_stdio().await
    };
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
async fn warm(runtime: &Runtime, dir: &Path) -> TurnCatalog {
    let mut spec = SessionSpec::new(common::core(dir, 1, 0, true));
    spec.lane = "fan".into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let turn = session.prepare_turn().await.unwrap();
    assert!(turn.diagnostics().is_empty(), "{:?}", turn.diagnostics());
    turn
}

/// A side and what its rounds run on, made before them.
enum Side {
    Raw { modern: bool },
    Cold(Runtime, PathBuf),
    RawFan(Client),
    Fan(Runtime, TurnCatalog),
}

impl Side {
    async fn new(name: &str, dir: &Path) -> Side {
        let home = dir.join("home");
        match name {
            "raw" => Side::Raw { modern: false },
            "rawmodern" => Side::Raw { modern: true },
            "cold" => Side::Cold(
                common::runtime(&home, 4).await,
                common::core(dir, 1, 0, false),
            ),
            "modern" => {
                let yaml = common::stdio_yaml("--extra-tools, \"0\"", false)
                    .replace(common::LEGACY, "protocol: 2026-07-28\n");
                let core = common::core_with(dir, "modern-stdio", &[yaml]);
                Side::Cold(common::runtime(&home, 4).await, core)
            }
            "rawfan" => Side::RawFan(raw_stdio().await),
            "fan" => {
                let runtime = common::runtime(&home, 4).await;
                let turn = warm(&runtime, dir).await;
                Side::Fan(runtime, turn)
            }
            other => panic!("SIDE={other}: use one of raw, cold, rawfan, fan, rawmodern, modern"),
        }
    }

    async fn round(&self, round: usize) {
        match self {
            Side::Raw { modern } => raw_cold(*modern).await,
            Side::Cold(runtime, core) => {
                let lane = format!("probe-{round}");
                common::runtime_cold(runtime, core, lane, common::DEMO_TOOLS).await;
            }
            Side::RawFan(client) => raw_fan(client).await,
            Side::Fan(_, turn) => fan(turn).await,
        }
    }

    /// Ends what the side started: no server outlives the probe.
    async fn end(self) {
        match self {
            Side::Raw { .. } => {}
            Side::Cold(runtime, _) => runtime.shutdown().await,
            Side::RawFan(client) => {
                let _ = client.cancel().await;
            }
            Side::Fan(runtime, turn) => {
                drop(turn);
                runtime.shutdown().await;
            }
        }
    }
}

/// The CPU this process has used so far in user space and in the kernel.
fn user_system() -> (Duration, Duration) {
    use nix::sys::resource::{UsageWho, getrusage};
    let time = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec().max(0) as u64)
            + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    getrusage(UsageWho::RUSAGE_SELF)
        .map(|u| (time(u.user_time()), time(u.system_time())))
        .unwrap_or_default()
}

/// Each thread of this process (by id) with its name and the CPU it has run so far, in
/// nanoseconds (`/proc/self/task/*/schedstat`, the scheduler's own count: finer than
/// `getrusage`'s ticks).
fn thread_times() -> std::collections::BTreeMap<u32, (String, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let read = |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
        let ran = read("schedstat")
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok());
        out.insert(tid, (read("comm").trim().to_string(), ran.unwrap_or(0)));
    }
    out
}

fn main() {
    let Ok(name) = std::env::var("SIDE") else {
        println!(
            "probe: set SIDE (raw, cold, rawfan, fan, rawmodern or modern) to run; see benches/probe.rs"
        );
        return;
    };
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
    let side = rt.block_on(Side::new(&name, dir.path()));
    let threads = thread_times();
    let (started, cpu, split) = (Instant::now(), common::cpu_time(), user_system());
    rt.block_on(async {
        for round in 0..rounds {
            side.round(round).await;
        }
    });
    let (wall, cpu) = (started.elapsed(), common::cpu_time() - cpu);
    let (user, system) = user_system();
    let ran = thread_times();
    let per_round = |d: Duration| d.as_secs_f64() * 1e6 / rounds as f64;
    println!(
        "{name}: {rounds} rounds, a round: wall {:.0} us, CPU of this process {:.0} us (user {:.0}, system {:.0})",
        per_round(wall),
        per_round(cpu),
        per_round(user.saturating_sub(split.0)),
        per_round(system.saturating_sub(split.1))
    );
    // With THREADS=1, what each thread that ran during the rounds spent a round (one
    // that ended meanwhile is missing).
    if std::env::var("THREADS").is_ok_and(|v| v == "1") {
        for (tid, (comm, ran)) in ran {
            let before = threads.get(&tid).map_or(0, |(_, r)| *r);
            let us = ran.saturating_sub(before) as f64 / 1e3 / rounds as f64;
            println!("  thread {tid} {comm}: {us:.0} us a round");
        }
    }
    rt.block_on(side.end());
}
