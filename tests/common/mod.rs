//! Helpers shared by the integration tests: temporary Agent Cores declaring the real
//! demo server, runtimes with recording approvers and sinks, process checks.
#![allow(dead_code)]

pub mod http;
pub mod oauth;
pub mod serving;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use demiurge_mcp::HostEnv;
use demiurge_mcp::events::MemorySink;
use demiurge_mcp::{
    ApprovalAnswer, ApprovalRequest, Approver, Runtime, RuntimeConfig, SessionSpec,
};
use futures::future::BoxFuture;

/// Tools of the built-in demo server.
pub const DEMO_TOOLS: usize = 16;

/// The `demiurge` binary built for these tests.
pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_demiurge")
}

/// A declaration of the built-in demo server plus `extra` YAML lines.
pub fn demo(extra: &str) -> String {
    format!(
        "command: {}\nargs: [demo-server]\n{extra}",
        serde_json::to_string(exe()).unwrap()
    )
}

/// A declaration of the demo server serving the tools of `tools` (a JSON file, read at
/// every listing) beside its own, plus `extra` YAML lines.
pub fn demo_with_tools(tools: &Path, extra: &str) -> String {
    format!(
        "command: {}\nargs: [demo-server, --tools-file, {}]\n{extra}{}",
        serde_json::to_string(exe()).unwrap(),
        serde_json::to_string(tools).unwrap(),
        sandboxed(extra, &[tools.parent().unwrap()], &[])
    )
}

/// The `sandbox:` line a test server needs when it runs confined (the product's
/// default, as the CLI runs it): `read` and `write` trees beside the workspace, and the
/// demo binary's directory. Nothing when `extra` declares one itself.
pub fn sandboxed(extra: &str, read: &[&Path], write: &[&Path]) -> String {
    if extra.contains("sandbox:") {
        return String::new();
    }
    let list = |paths: Vec<&Path>| {
        paths
            .iter()
            .map(|p| serde_json::to_string(p).unwrap())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut read = read.to_vec();
    read.push(Path::new(exe()).parent().unwrap());
    let mut writable = vec![Path::new(".")];
    writable.extend(write);
    format!(
        "sandbox: {{filesystem: {{read: [{}], write: [{}]}}}}\n",
        list(read),
        list(writable)
    )
}

/// A declaration of the demo server misbehaving as `fault` (`MODE [N]`), plus `extra`.
pub fn demo_fault(fault: &str, extra: &str) -> String {
    let args: Vec<String> = fault
        .split_whitespace()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    format!(
        "command: {}\nargs: [demo-server, --fault, {}]\n{extra}",
        serde_json::to_string(exe()).unwrap(),
        args.join(", ")
    )
}

/// A declaration that records each start in `marker` (one line per spawn), then runs
/// the demo server.
pub fn demo_counting(marker: &Path, extra: &str) -> String {
    let script = format!(
        "echo started >> '{}'; exec '{}' demo-server",
        marker.display(),
        exe()
    );
    let extra = format!(
        "{extra}{}",
        sandboxed(extra, &[], &[marker.parent().unwrap()])
    );
    shell(&script, &extra)
}

/// A declaration that records its pid in `pidfile`, pauses `secs`, and only then
/// becomes the demo server: a connect that is under way for that long.
pub fn recording_pid(pidfile: &Path, secs: u32, extra: &str) -> String {
    let script = format!(
        "echo $$ >> '{}'; sleep {secs}; exec '{}' demo-server",
        pidfile.display(),
        exe()
    );
    shell(&script, extra)
}

/// The pid on the first line of `pidfile`.
pub fn first_pid(pidfile: &Path) -> u32 {
    std::fs::read_to_string(pidfile)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A declaration running `script` with `sh -c`, followed by `extra` fields.
pub fn shell(script: &str, extra: &str) -> String {
    format!(
        "command: sh\nargs: [-c, {}]\n{extra}",
        serde_json::to_string(script).unwrap()
    )
}

/// A Python program that leaves its group and session, then ends its main thread while
/// another runs and forks `sleep 310`: it reads as a zombie (`Z`) while it runs, and no
/// signal to its parent's group reaches it. It ends on its own after 310 s, so a failing
/// test leaks it no longer than that. No single quote, for `sh -c '...'`.
pub const HEADLESS_PY: &str = "import ctypes, os, subprocess, threading, time
os.setsid()
def run():
    subprocess.Popen([\"sleep\", \"310\"])
    time.sleep(310)
threading.Thread(target=run).start()
ctypes.CDLL(None).pthread_exit(None)
";

/// The absolute path of this machine's Python (a server's `PATH` may not find it, and a
/// version manager's shim needs the operator's `HOME`).
pub fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed by this test");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Lines in a marker file (0 when absent).
pub fn count(marker: &Path) -> usize {
    std::fs::read_to_string(marker)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// A temporary Agent Core.
pub struct Core {
    pub dir: tempfile::TempDir,
    grants: Vec<String>,
}

impl Core {
    pub fn new() -> Self {
        let core = Core {
            dir: tempfile::tempdir().unwrap(),
            grants: Vec::new(),
        };
        std::fs::create_dir_all(core.mcp_dir()).unwrap();
        core.write_manifest();
        core
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    pub fn mcp_dir(&self) -> PathBuf {
        self.dir.path().join("agent/mcp")
    }

    /// Grants `caps` (rewrites agent.yaml).
    pub fn grant(mut self, caps: &[&str]) -> Self {
        self.grants.extend(caps.iter().map(|c| c.to_string()));
        self.write_manifest();
        self
    }

    /// Grants connect and call for each server id.
    pub fn grant_servers(self, ids: &[&str]) -> Self {
        let caps: Vec<String> = ids
            .iter()
            .flat_map(|id| [format!("mcp.connect:{id}"), format!("mcp.call:{id}")])
            .collect();
        let refs: Vec<&str> = caps.iter().map(String::as_str).collect();
        self.grant(&refs)
    }

    pub fn set_grants(&mut self, caps: &[&str]) {
        self.grants = caps.iter().map(|c| c.to_string()).collect();
        self.write_manifest();
    }

    fn write_manifest(&self) {
        let mut text = String::from("name: test\ncapabilities:\n  defaults:\n");
        for g in &self.grants {
            text.push_str(&format!("    {g:?}: {{scope: core}}\n"));
        }
        if self.grants.is_empty() {
            text = "name: test\n".into();
        }
        std::fs::write(self.dir.path().join("agent.yaml"), text).unwrap();
    }

    /// Writes `agent/mcp/<id>.yaml`.
    pub fn server(self, id: &str, yaml: &str) -> Self {
        self.write(id, yaml);
        self
    }

    pub fn write(&self, id: &str, yaml: &str) {
        std::fs::write(self.mcp_dir().join(format!("{id}.yaml")), yaml).unwrap();
    }

    pub fn remove(&self, id: &str) {
        std::fs::remove_file(self.mcp_dir().join(format!("{id}.yaml"))).unwrap();
    }

    pub fn spec(&self) -> SessionSpec {
        SessionSpec::new(self.root())
    }

    /// A spec in its own lane, so it does not evict the sessions of other lanes.
    pub fn spec_in(&self, lane: &str) -> SessionSpec {
        let mut spec = self.spec();
        spec.lane = lane.to_string();
        spec
    }
}

/// An approver that records every request and answers with `answer(request)`.
#[derive(Clone)]
pub struct Recorder {
    pub asked: Arc<Mutex<Vec<ApprovalRequest>>>,
    answer: Arc<dyn Fn(&ApprovalRequest) -> ApprovalAnswer + Send + Sync>,
}

impl Recorder {
    pub fn new(
        answer: impl Fn(&ApprovalRequest) -> ApprovalAnswer + Send + Sync + 'static,
    ) -> Self {
        Recorder {
            asked: Arc::default(),
            answer: Arc::new(answer),
        }
    }

    pub fn allow() -> Self {
        Self::new(|_| ApprovalAnswer::AllowSession)
    }

    pub fn requests(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap().clone()
    }

    pub fn asked_for(&self, server: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.server == server)
            .count()
    }
}

impl Approver for Recorder {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let answer = (self.answer)(&request);
        self.asked.lock().unwrap().push(request);
        Box::pin(async move { answer })
    }
}

/// A host environment with PATH only (tests never touch the process environment).
pub fn host_env(extra: &[(&str, &str)]) -> HostEnv {
    let mut map = BTreeMap::new();
    map.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    );
    for (k, v) in extra {
        map.insert(k.to_string(), v.to_string());
    }
    HostEnv(map)
}

/// A runtime harness: home, approver, sink.
pub struct Harness {
    pub home: tempfile::TempDir,
    pub runtime: Runtime,
    pub approver: Recorder,
    pub sink: MemorySink,
}

pub async fn harness(approver: Recorder) -> Harness {
    harness_with(approver, |c| c).await
}

/// One session's first turn of `core`, which must have no diagnostics.
pub async fn clean_turn(h: &Harness, core: &Core) -> demiurge_mcp::TurnCatalog {
    let (_session, catalog) = open(&h.runtime, core.spec()).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    catalog
}

pub async fn harness_with(
    approver: Recorder,
    tweak: impl FnOnce(RuntimeConfig) -> RuntimeConfig,
) -> Harness {
    let home = tempfile::tempdir().unwrap();
    let sink = MemorySink::new();
    let mut config = RuntimeConfig::new(home.path())
        .with_approver(approver.clone())
        .with_events(sink.clone())
        .with_host_env(host_env(&[]));
    // The product confines every undeclared stdio server; these servers are shell
    // scripts that write markers beside the workspace, so they run as declared.
    // The sandbox has its own tests (tests/sandbox.rs, the interop servers).
    config.sandbox_default = None;
    config.close_grace = Duration::from_millis(500);
    // Tests read the sink right after what they do: deliver on the emitting task. The
    // queued default has its own test (tests/events.rs).
    config.event_delivery = demiurge_mcp::events::EventDelivery::Direct;
    // Tests never ask real DNS: names resolve only where a test says so.
    config.resolver = Arc::new(demiurge_mcp::net::StaticResolver::new());
    // These tests check what a connect does, turn by turn: every server starts with its
    // turn. Servers started when first used (the product's default) have their own
    // tests (tests/deferred.rs), and the CLI tests run the product's defaults.
    config.start = demiurge_mcp::core::Start::Eager;
    let runtime = Runtime::start(tweak(config)).await.unwrap();
    Harness {
        home,
        runtime,
        approver,
        sink,
    }
}

impl Harness {
    /// Shuts the runtime down and checks that no process it started (children and
    /// grandchildren carry `HOME=<home>/mcp-home`) is still alive.
    pub async fn finish(&self) {
        self.runtime.shutdown().await;
        let mut leaked = Vec::new();
        let clean = eventually(Duration::from_secs(5), || {
            leaked = servers_of(self.runtime.home());
            leaked.is_empty()
        })
        .await;
        assert!(clean, "processes outlived the runtime: {leaked:?}");
    }
}

/// Live processes whose environment contains `entry` exactly.
pub fn processes_with_env(entry: &str) -> Vec<u32> {
    processes_where(|kv| kv == entry.as_bytes())
}

/// Live processes with an environment entry for which `matches` holds. A process whose
/// leader thread exited while others run has its environment read from one of them.
fn processes_where(matches: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| environ(pid).split(|&b| b == 0).any(&matches) && alive(pid))
        .collect()
}

/// The environment of `pid`: its leader's, else the first of its threads that reads.
fn environ(pid: u32) -> Vec<u8> {
    let leader = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    if !leader.is_empty() {
        return leader;
    }
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|task| std::fs::read(task.ok()?.path().join("environ")).ok())
        .find(|env| !env.is_empty())
        .unwrap_or_default()
}

/// Live server processes of the runtime home `home`: unconfined ones carry
/// `HOME=<home>/mcp-home`, confined ones `HOME=<home>/sandbox/<server>/home`.
pub fn servers_of(home: &Path) -> Vec<u32> {
    let mut found = processes_with_env(&format!("HOME={}", home.join("mcp-home").display()));
    found.extend(processes_with_env_prefix(&format!(
        "HOME={}/",
        home.join("sandbox").display()
    )));
    found
}

/// Live processes with an environment entry that starts with `prefix`.
pub fn processes_with_env_prefix(prefix: &str) -> Vec<u32> {
    processes_where(|kv| kv.starts_with(prefix.as_bytes()))
}

/// Live sandbox launchers of the runtime home `home` that wait for their server: their
/// command line is still `LAUNCHER __demiurge-sandbox NAME SPACES` (one that became its
/// server has the server's), and they wait in `<home>/sandbox`.
pub fn launchers_of(home: &Path) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let waits_in = home.join("sandbox").canonicalize().unwrap_or_default();
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                line.split(|&b| b == 0).nth(1) == Some(&b"__demiurge-sandbox"[..])
            }) && std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == waits_in)
                && alive(pid)
        })
        .collect()
}

/// Whether a process is alive (a zombie counts as dead, unless only its leader thread
/// is).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let fields: Vec<&str> = stat
                .rsplit(')')
                .next()
                .map(|rest| rest.split_whitespace().collect())
                .unwrap_or_default();
            // A zombie runs as long as threads other than its leader do (field 20).
            match fields.first() {
                Some(&"X") | None => false,
                Some(&"Z") => fields.get(17).and_then(|t| t.parse::<u64>().ok()) > Some(1),
                Some(_) => true,
            }
        }
        Err(_) => false,
    }
}

/// Polls `f` until it holds or `within` passes.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    eventually_async(within, async || f()).await
}

/// Polls the async check `f` (a call, a turn, the limiter's stats) until it holds or
/// `within` passes, `every` apart.
pub async fn eventually_every(
    within: Duration,
    every: Duration,
    mut f: impl AsyncFnMut() -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(every).await;
    }
}

/// [`eventually_every`] at the usual pace (20 ms).
pub async fn eventually_async(within: Duration, f: impl AsyncFnMut() -> bool) -> bool {
    eventually_every(within, Duration::from_millis(20), f).await
}

/// A session started on `runtime` with `spec`, and its first turn (both must succeed).
pub async fn open(
    runtime: &Runtime,
    spec: SessionSpec,
) -> (demiurge_mcp::Session, demiurge_mcp::TurnCatalog) {
    let (session, _) = runtime.start_session(spec).await.unwrap();
    let catalog = session.prepare_turn().await.unwrap();
    (session, catalog)
}

/// The pid a demo-server tool reports through `whoami`.
pub async fn pid_of(catalog: &demiurge_mcp::TurnCatalog, whoami: &str) -> u32 {
    let result = catalog.call(whoami, serde_json::json!({})).await.unwrap();
    assert!(
        !result.is_error,
        "{:?}",
        result.view(demiurge_mcp::redact::View::Operator)
    );
    result.view(demiurge_mcp::redact::View::Operator).data["pid"]
        .as_u64()
        .unwrap() as u32
}

/// Tool names of a catalog.
pub fn names(catalog: &demiurge_mcp::TurnCatalog) -> Vec<String> {
    catalog.tools().iter().map(|t| t.name.clone()).collect()
}

/// Runs git in `dir` with a private configuration; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every file under `dir`, concatenated (event logs, the stderr log, token files).
#[allow(dead_code)]
pub fn read_tree(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.push_str(&read_tree(&path));
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            out.push_str(&text);
        }
    }
    out
}

/// Whether any file under `dir` (a runtime home: the servers' stderr logs) contains
/// `needle`.
pub fn logs_contain(dir: &Path, needle: &str) -> bool {
    logs_count(dir, needle) > 0
}

/// How many times the files under `dir` contain `needle`, in all.
pub fn logs_count(dir: &Path, needle: &str) -> usize {
    let mut count = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                count += text.matches(needle).count();
            }
        }
    }
    count
}
