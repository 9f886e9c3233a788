//! Helpers shared by the benches: temporary cores declaring the built-in demo server.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use demiurge_mcp::events::NullSink;
use demiurge_mcp::{ApprovalAnswer, FixedApprover, Runtime, RuntimeConfig};

pub const EXE: &str = env!("CARGO_BIN_EXE_demiurge");

/// Bare rmcp's client, the baseline of the pairs.
pub type Client = rmcp::service::RunningService<rmcp::service::RoleClient, ()>;

/// A bare rmcp client of the modern era (`server/discover`, no handshake) over `transport`.
pub async fn raw_modern<T, E, A>(transport: T) -> Client
where
    T: rmcp::transport::IntoTransport<rmcp::service::RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
    };
    ().serve_with_lifecycle(transport, lifecycle).await.unwrap()
}

/// The demo server as a child process of bare rmcp's.
fn demo_child() -> rmcp::transport::TokioChildProcess {
    let mut cmd = tokio::process::Command::new(EXE);
    cmd.arg("demo-server");
    rmcp::transport::TokioChildProcess::new(cmd).unwrap()
}

/// Bare rmcp's client of a demo server it spawns.
pub async fn raw_stdio() -> Client {
    use rmcp::ServiceExt;
    ().serve(demo_child()).await.unwrap()
}

/// Bare rmcp's modern client ([`raw_modern`]) of a demo server it spawns.
pub async fn raw_modern_stdio() -> Client {
    raw_modern(demo_child()).await
}

/// Lists what the demo server offers, as the runtime does on a first turn.
pub async fn list_everything(client: &Client) {
    let peer = client.peer();
    let (tools, resources, templates, prompts) = tokio::join!(
        peer.list_all_tools(),
        peer.list_all_resources(),
        peer.list_all_resource_templates(),
        peer.list_all_prompts()
    );
    assert_eq!(tools.unwrap().len(), DEMO_TOOLS);
    let _ = (resources.unwrap(), templates.unwrap(), prompts.unwrap());
}

/// Tools of the built-in demo server.
pub const DEMO_TOOLS: usize = 16;

/// A core with `servers` demo servers, each offering `DEMO_TOOLS + extra` tools; calls
/// `auto`.
pub fn core(dir: &Path, servers: usize, extra: usize, parallel: bool) -> PathBuf {
    let yaml = stdio_yaml(&format!("--extra-tools, \"{extra}\""), parallel);
    let yamls = vec![yaml; servers];
    core_with(dir, &format!("core-{servers}-{extra}-{parallel}"), &yamls)
}

/// The era of the pairs against rmcp's legacy client (the modern pairs say theirs).
pub const LEGACY: &str = "protocol: 2025-11-25\n";

/// A demo server's declaration over stdio in the 2025-11-25 era, `args` added after
/// `demo-server`.
pub fn stdio_yaml(args: &str, parallel: bool) -> String {
    format!(
        "command: {}\nargs: [demo-server, {args}]\napproval_policy: auto\nsupports_parallel_tool_calls: {parallel}\n{LEGACY}",
        serde_json::to_string(EXE).unwrap()
    )
}

/// A core named `name` whose servers `s0`, `s1`, ... are declared by `yamls`; every
/// server may connect and be called.
pub fn core_with(dir: &Path, name: &str, yamls: &[String]) -> PathBuf {
    let core = dir.join(name);
    std::fs::create_dir_all(core.join("agent/mcp")).unwrap();
    let manifest = "capabilities:\n  defaults:\n    mcp.connect:*: {scope: core}\n    mcp.call:*: {scope: core}\n";
    for (i, yaml) in yamls.iter().enumerate() {
        std::fs::write(core.join(format!("agent/mcp/s{i}.yaml")), yaml).unwrap();
    }
    std::fs::write(core.join("agent.yaml"), manifest).unwrap();
    core
}

/// The multi-threaded runtime every bench runs on (two workers: the machine's cores).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A core declaring one demo server reached over streamable HTTP at `url`.
pub fn http_core(dir: &Path, url: &str) -> PathBuf {
    let yaml = format!("transport: http\nurl: {url}\napproval_policy: auto\n{LEGACY}");
    core_with(dir, "http", &[yaml])
}

/// The demo server over streamable HTTP in its own process, killed when dropped.
pub struct HttpServer {
    /// Its MCP endpoint.
    pub url: String,
    /// Its process id.
    pub pid: u32,
    _child: tokio::process::Child,
}

/// Starts `demiurge demo-server --http` on a free loopback port.
pub async fn http_server() -> HttpServer {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(EXE)
        .args(["demo-server", "--http", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next_line().await.unwrap().unwrap();
    let url = line.rsplit(' ').next().unwrap().to_string();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let pid = child.id().unwrap();
    HttpServer {
        url,
        pid,
        _child: child,
    }
}

/// Sockets `pid` holds open (its listener included).
pub fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter(|fd| {
                    std::fs::read_link(fd.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// A runtime that approves everything and gives the host no events; each session's
/// JSONL log is written, as by default.
pub async fn runtime(home: &Path, limit: usize) -> Runtime {
    Runtime::start(config(home, limit)).await.unwrap()
}

/// [`runtime`]'s configuration: approves everything, no host events, trusts loopback
/// (for the HTTP benches; stdio servers never meet the URL policy).
pub fn config(home: &Path, limit: usize) -> RuntimeConfig {
    let mut config = RuntimeConfig::new(home)
        .with_approver(FixedApprover(ApprovalAnswer::AllowSession))
        .with_events(NullSink);
    // The pairs compare with bare rmcp, which confines nothing: the sandbox's own
    // cost is its own pair (`sandbox/cold_1`).
    config.sandbox_default = None;
    config.discovery_limit = limit;
    // The pairs measure connects: every server starts with its turn, as bare rmcp's
    // do (lazy start is measured against eager in `benches/reach.rs`).
    config.start = demiurge_mcp::core::Start::Eager;
    config.url_policy =
        demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]);
    config
}

/// A new session's first turn of `core` (lane `lane`), which must list `tools`; the
/// time the turn took (the eviction after it excluded).
pub async fn runtime_cold(runtime: &Runtime, core: &Path, lane: String, tools: usize) -> Duration {
    let mut spec = demiurge_mcp::SessionSpec::new(core);
    spec.lane = lane;
    let (s, _) = runtime.start_session(spec).await.unwrap();
    let started = std::time::Instant::now();
    let turn = s.prepare_turn().await.unwrap();
    let took = started.elapsed();
    assert_eq!(turn.tools().len(), tools, "{:?}", turn.diagnostics());
    s.evict().await.unwrap();
    took
}

/// Alternates `rounds` measurements of a baseline and of the runtime (each closure
/// returns the time it measured, so setup and teardown stay outside), first one then
/// the other first, so both see the same state of a shared, noisy machine; prints the
/// ratio of their medians and returns it.
pub async fn paired<B, BF, S, SF>(
    name: &str,
    target: &str,
    rounds: usize,
    mut baseline: B,
    mut runtime: S,
) -> f64
where
    B: FnMut() -> BF,
    BF: std::future::Future<Output = std::time::Duration>,
    S: FnMut() -> SF,
    SF: std::future::Future<Output = std::time::Duration>,
{
    let (mut base, mut ours) = (Vec::new(), Vec::new());
    // CPU this process spent on each side, rounds summed (setup and teardown included).
    let (mut base_cpu, mut ours_cpu) = (Duration::ZERO, Duration::ZERO);
    for round in 0..rounds {
        for side in [round % 2, 1 - round % 2] {
            let before = cpu_time();
            if side == 0 {
                base.push(baseline().await);
                base_cpu += cpu_time().saturating_sub(before);
            } else {
                ours.push(runtime().await);
                ours_cpu += cpu_time().saturating_sub(before);
            }
        }
    }
    let (base_us, _) = median_p99(base);
    let (ours_us, _) = median_p99(ours);
    let ratio = ours_us / base_us;
    let per_round = |cpu: Duration| cpu.as_secs_f64() * 1e6 / rounds as f64;
    let (base_cpu, ours_cpu) = (per_round(base_cpu), per_round(ours_cpu));
    println!(
        "{name}: wall {ratio:.3}x, CPU {:.2}x (wall: baseline {base_us:.1} us, runtime {ours_us:.1} us, medians of {rounds} alternating rounds, target {target}; CPU of this process a round: baseline {base_cpu:.1} us, runtime {ours_cpu:.1} us)",
        ours_cpu / base_cpu.max(f64::MIN_POSITIVE)
    );
    ratio
}

/// CPU time this process has used, all threads (servers are other processes).
pub fn cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Resident set size of this process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Median and 99th percentile of durations, in microseconds.
pub fn median_p99(mut samples: Vec<std::time::Duration>) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort();
    let at =
        |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e6;
    (at(0.5), at(0.99))
}
