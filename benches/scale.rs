//! Memory and growth, printed as a report (`cargo bench --bench scale`):
//! - the runtime's own memory per idle connection with 200 connections (child
//!   processes excluded: they are other processes), target under 64 KiB;
//! - the RSS of a whole `demiurge` shell process with 16 connected servers, target
//!   under 15 MB;
//! - how a warm turn grows with tools (50 to 5,000) and with concurrent sessions
//!   (1 to 64): it must be linear or better. Sessions are compared with as many bare
//!   rmcp clients calling at once in the same run, which shows what the machine alone
//!   does with that many server processes.

#[path = "common.rs"]
mod common;
#[path = "counting.rs"]
mod counting;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use demiurge_mcp::SessionSpec;
use serde_json::json;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(memory_per_connection());
    process_rss();
    rt.block_on(tools_growth());
    rt.block_on(sessions_growth());
}

async fn memory_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 200, 0, false);
    let runtime = common::runtime(&dir.path().join("home"), 4).await;
    let me = std::process::id();
    // Warm the allocator and the runtime with one session first, so the delta is the
    // connections' own cost.
    let warm = common::core(dir.path(), 1, 0, false);
    let (s, _) = runtime
        .start_session(SessionSpec::new(&warm))
        .await
        .unwrap();
    s.prepare_turn().await.unwrap();
    let before = common::rss_kib(me);
    let live_before = counting::live();
    let mut spec = SessionSpec::new(&core);
    spec.lane = "many".into();
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let started = Instant::now();
    let turn = session.prepare_turn().await.unwrap();
    let took = started.elapsed();
    assert_eq!(
        turn.tools().len(),
        200 * common::DEMO_TOOLS,
        "{:?}",
        turn.diagnostics().first()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = common::rss_kib(me);
    let live = (counting::live() - live_before) as f64 / 1024.0 / 200.0;
    let per = (after.saturating_sub(before)) as f64 / 200.0;
    println!(
        "memory/idle_connection: {per:.1} KiB RSS per connection ({} KiB for 200, excluding the children; target < 64 KiB: {}), of it {live:.1} KiB live heap; 200 servers connected in {:.2} s",
        after.saturating_sub(before),
        if per < 64.0 { "met" } else { "MISSED" },
        took.as_secs_f64()
    );
    runtime.shutdown().await;
}

fn process_rss() {
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 16, 0, false);
    let mut child = Command::new(common::EXE)
        .arg("--core")
        .arg(&core)
        .arg("--home")
        .arg(dir.path().join("home"))
        .args(["--yes", "--provider", "fake"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"/tools\n/servers\n").unwrap();
    stdin.flush().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut connected = 0;
    while connected < 16 && out.read_line(&mut line).unwrap() > 0 {
        if line.contains("connected (pid") {
            connected += 1;
        }
        line.clear();
    }
    std::thread::sleep(Duration::from_millis(300));
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let rollup =
        std::fs::read_to_string(format!("/proc/{}/smaps_rollup", child.id())).unwrap_or_default();
    let field = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    let rss = field(&status, "VmRSS:");
    println!(
        "memory/process_16: the demiurge process holds {rss:.1} MB RSS with 16 connected servers (target < 15 MB: {}); of it {:.1} MB mapped code and read-only data of the binary and its libraries (the servers run the same binary and share these pages), {:.1} MB anonymous; PSS {:.1} MB",
        if rss < 15.0 { "met" } else { "MISSED" },
        field(&status, "RssFile:"),
        field(&status, "RssAnon:"),
        field(&rollup, "Pss:")
    );
    stdin.write_all(b"/quit\n").unwrap();
    drop(stdin);
    let _ = child.wait();
}

async fn warm_median(session: &demiurge_mcp::Session, rounds: usize) -> f64 {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        session.prepare_turn().await.unwrap();
        samples.push(started.elapsed());
    }
    common::median_p99(samples).0
}

async fn tools_growth() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = common::runtime(&dir.path().join("home"), 4).await;
    let mut rows = Vec::new();
    for tools in [50usize, 500, 5000] {
        let extra = tools - common::DEMO_TOOLS;
        let core = common::core(dir.path(), 1, extra, false);
        let mut spec = SessionSpec::new(&core);
        spec.lane = format!("tools-{extra}");
        let (session, _) = runtime.start_session(spec).await.unwrap();
        let first = Instant::now();
        let turn = session.prepare_turn().await.unwrap();
        let cold = first.elapsed();
        assert_eq!(turn.tools().len(), tools);
        let warm = warm_median(&session, 200).await;
        rows.push((tools, warm, cold));
    }
    for (tools, warm, cold) in &rows {
        println!(
            "growth/tools_{tools}: warm turn {warm:.1} us, first turn {:.1} ms (naming and listing {:.2} us per tool)",
            cold.as_secs_f64() * 1e3,
            cold.as_secs_f64() * 1e6 / *tools as f64
        );
    }
    runtime.shutdown().await;
}

/// `rounds` rounds of `n` bare rmcp clients (each with its own demo server) calling
/// `echo` all at once: what the machine gives without the runtime.
async fn raw_rounds(
    clients: &mut Vec<rmcp::service::RunningService<rmcp::RoleClient, ()>>,
    n: usize,
    rounds: usize,
) -> Duration {
    while clients.len() < n {
        let mut cmd = tokio::process::Command::new(common::EXE);
        cmd.arg("demo-server");
        let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
        clients.push(rmcp::ServiceExt::serve((), transport).await.unwrap());
    }
    let args = json!({"message": "x"}).as_object().cloned().unwrap();
    let started = Instant::now();
    for _ in 0..rounds {
        futures::future::join_all(clients.iter().map(|c| {
            let params =
                rmcp::model::CallToolRequestParams::new("echo").with_arguments(args.clone());
            c.call_tool(params)
        }))
        .await
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
    }
    started.elapsed()
}

async fn sessions_growth() {
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 2, 0, false);
    let runtime = common::runtime(&dir.path().join("home"), 4).await;
    let mut sessions = Vec::new();
    let mut raw_clients = Vec::new();
    for n in [1usize, 8, 64] {
        while sessions.len() < n {
            let mut spec = SessionSpec::new(&core);
            spec.lane = format!("lane-{}", sessions.len());
            let (s, _) = runtime.start_session(spec).await.unwrap();
            s.prepare_turn().await.unwrap();
            sessions.push(s);
        }
        let rounds = 20;
        let started = Instant::now();
        let mut samples = Vec::new();
        for _ in 0..rounds {
            let done = futures::future::join_all(sessions.iter().map(|s| async move {
                let t = Instant::now();
                let turn = s.prepare_turn().await.unwrap();
                turn.call("s0__echo", json!({"message": "x"}))
                    .await
                    .unwrap();
                t.elapsed()
            }))
            .await;
            samples.extend(done);
        }
        let total = started.elapsed();
        let turns = (rounds * n) as f64;
        let (median, p99) = common::median_p99(samples);
        let raw = raw_rounds(&mut raw_clients, n, rounds).await;
        println!(
            "growth/sessions_{n}: {:.0} turns/s (turn + call), {:.1} us of wall time per turn, median {median:.0} us, p99 {p99:.0} us; baseline: {n} bare rmcp clients calling at once, {:.0} calls/s ({:.2}x the runtime's round time)",
            turns / total.as_secs_f64(),
            total.as_secs_f64() * 1e6 / turns,
            turns / raw.as_secs_f64(),
            total.as_secs_f64() / raw.as_secs_f64()
        );
    }
    let stats = runtime.limiter_stats().await;
    assert!(stats.max_in_use <= stats.limit);
    runtime.shutdown().await;
    for client in raw_clients {
        let _ = client.cancel().await;
    }
}
