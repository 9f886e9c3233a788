//! Helpers shared by the benches: temporary cores declaring the built-in demo server.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use demiurge_mcp::events::NullSink;
use demiurge_mcp::{ApprovalAnswer, FixedApprover, Runtime, RuntimeConfig};

pub const EXE: &str = env!("CARGO_BIN_EXE_demiurge");

/// Tools of the built-in demo server.
pub const DEMO_TOOLS: usize = 16;

/// A core with `servers` demo servers, each offering `DEMO_TOOLS + extra` tools; calls
/// `auto`.
pub fn core(dir: &Path, servers: usize, extra: usize, parallel: bool) -> PathBuf {
    let core = dir.join(format!("core-{servers}-{extra}-{parallel}"));
    std::fs::create_dir_all(core.join("agent/mcp")).unwrap();
    let mut manifest = String::from(
        "capabilities:\n  defaults:\n    mcp.connect:*: {scope: core}\n    mcp.call:*: {scope: core}\n",
    );
    manifest.push('\n');
    for i in 0..servers {
        std::fs::write(
            core.join(format!("agent/mcp/s{i}.yaml")),
            format!(
                "command: {}\nargs: [demo-server, --extra-tools, \"{extra}\"]\napproval_policy: auto\nsupports_parallel_tool_calls: {parallel}\n",
                serde_json::to_string(EXE).unwrap()
            ),
        )
        .unwrap();
    }
    std::fs::write(core.join("agent.yaml"), manifest).unwrap();
    core
}

/// A runtime that approves everything and drops events (no JSONL log cost either).
pub async fn runtime(home: &Path, limit: usize) -> Runtime {
    let mut config = RuntimeConfig::new(home)
        .with_approver(FixedApprover(ApprovalAnswer::AllowSession))
        .with_events(NullSink);
    config.discovery_limit = limit;
    Runtime::start(config).await.unwrap()
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
