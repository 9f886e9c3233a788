//! No server or descendant outlives its host, however the host ends (threat model:
//! adversaries 2 and 5). Servers that ignore EOF and SIGTERM, fork children, start
//! `setsid` grandchildren and double-fork daemons, end their main thread to read as
//! zombies; the host (a real `demiurge` shell)
//! is ended by SIGINT, SIGTERM, SIGHUP and SIGKILL; within 3 s nothing they started is
//! alive, nor the sandbox launcher it made ahead. And a clean close ends a server's whole tree while the host lives on.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Core, Recorder, eventually, exe, harness, shell};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Servers that try every way out: each `sh` execs the demo server, so the children it
/// started before become the server's.
fn hostile_core() -> Core {
    let demo = |fault: &str| format!("'{}' demo-server --fault {fault}", exe());
    // Confined, as the CLI runs an undeclared server (the demo binary readable), but
    // for `newline`: renaming itself writes `/proc`, which a confined server may not.
    let confined = common::sandboxed("", &[], &[]);
    Core::new()
        .grant(&["mcp.connect:*", "mcp.call:*"])
        // Ignores EOF, SIGTERM, SIGHUP and SIGINT (ignored dispositions survive exec).
        .server(
            "stubborn",
            &shell(
                &format!("trap '' TERM HUP INT; exec {}", demo("ignore-eof")),
                &confined,
            ),
        )
        // Children in its own group.
        .server(
            "forker",
            &shell(
                &format!("sleep 301 & sleep 302 & exec {}", demo("ignore-eof")),
                &confined,
            ),
        )
        // A grandchild in a session of its own, ignoring SIGTERM, and one that
        // double-forks away as a daemon.
        .server(
            "escaper",
            &shell(
                &format!(
                    "setsid sh -c 'trap \"\" TERM HUP; i=0; while [ $i -lt 310 ]; do sleep 1; i=$((i + 1)); done' & \
                     (setsid sh -c 'trap \"\" TERM HUP; exec sleep 303' &); \
                     exec {}",
                    demo("ignore-eof")
                ),
                &confined,
            ),
        )
        // Forks when its server ends, as the host dies: a child born after every sweep.
        .server(
            "late",
            &shell(
                &format!(
                    "'{}' demo-server; setsid sh -c 'trap \"\" TERM HUP; exec sleep 305' & sleep 306",
                    exe()
                ),
                &confined,
            ),
        )
        // A child that ends its main thread and runs on in another, which forks: it
        // reads as a zombie, and hides nothing below it for that.
        .server(
            "headless",
            &shell(
                &format!(
                    "'{}' -c '{}' & exec {}",
                    common::python(),
                    common::HEADLESS_PY,
                    demo("ignore-eof")
                ),
                "sandbox: off\n",
            ),
        )
        // A process name with a newline (it breaks a naive reading of /proc/PID/stat).
        .server(
            "newline",
            &shell(
                &format!("printf 'x\\ny' > /proc/$$/comm; '{}' demo-server; sleep 307", exe()),
                "sandbox: off\n",
            ),
        )
}

/// Whether the `sleep` of the `headless` server's child runs (its main thread exited
/// before or after it forked).
fn headless_forked(marker: &std::path::Path) -> bool {
    common::servers_of(marker).iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00310\x00")
    })
}

/// The runtime home whose servers a test watches.
fn runtime_home(home: &std::path::Path) -> std::path::PathBuf {
    home.to_path_buf()
}

#[tokio::test]
async fn no_process_outlives_the_host_whatever_signal_ends_it() {
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGKILL,
    ] {
        let core = hostile_core();
        let home = tempfile::tempdir().unwrap();
        let mut host = Command::new(exe())
            .args(["--yes", "--provider", "fake", "--core"])
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = host.stdin.take().unwrap();
        let mut stdout = BufReader::new(host.stdout.take().unwrap());
        writeln!(stdin, "/tools").unwrap();
        writeln!(stdin, "/servers").unwrap();
        let mut line = String::new();
        let mut connected = 0;
        while connected < 6 {
            line.clear();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "the shell ended early"
            );
            if line.contains("connected (pid") {
                connected += 1;
            }
        }
        let marker = runtime_home(home.path());
        // The servers and everything they started (the daemon may already be gone:
        // it left every tree, and the runtime ends what it cannot attribute).
        assert!(
            eventually(Duration::from_secs(10), || headless_forked(&marker)).await,
            "{signal}: the headless server's child did not fork"
        );
        let started = common::servers_of(&marker);
        assert!(started.len() >= 10, "{signal}: only {started:?}");
        // And the sandbox launcher made ahead of the next confined start.
        assert!(
            eventually(Duration::from_secs(10), || {
                common::launchers_of(&marker).len() == 1
            })
            .await,
            "{signal}: no launcher waits"
        );
        kill(Pid::from_raw(host.id() as i32), signal).unwrap();
        let clean = eventually(Duration::from_secs(3), || {
            common::servers_of(&marker).is_empty() && common::launchers_of(&marker).is_empty()
        })
        .await;
        let left: Vec<String> = common::servers_of(&marker)
            .iter()
            .map(|p| {
                format!(
                    "{p}: {} {:?}",
                    std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default(),
                    std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default()
                )
            })
            .collect();
        assert!(
            clean,
            "{signal}: still alive 3 s after the host was signalled: {left:?} {:?}",
            common::launchers_of(&marker)
        );
        let _ = host.kill();
        let status = host.wait().unwrap();
        assert!(!status.success(), "{signal}: {status}");
        drop(stdin);
    }
}

#[tokio::test]
async fn closing_a_connection_ends_its_whole_tree_while_the_host_lives() {
    let core = hostile_core();
    let h = harness(Recorder::allow()).await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert_eq!(catalog.diagnostics(), [], "{:?}", catalog.diagnostics());
    let marker = runtime_home(h.home.path());
    // Give the sweeps a moment to see every grandchild.
    let all = eventually(Duration::from_secs(5), || {
        common::servers_of(&marker).len() >= 8 && headless_forked(&marker)
    })
    .await;
    assert!(all, "{:?}", common::servers_of(&marker));
    session.evict().await.unwrap();
    let clean = eventually(Duration::from_secs(3), || {
        common::servers_of(&marker).is_empty()
    })
    .await;
    assert!(clean, "left behind: {:?}", common::servers_of(&marker));
    // The runtime lives on: a new session starts the servers again.
    let (again, _) = h.runtime.start_session(core.spec()).await.unwrap();
    assert!(!again.prepare_turn().await.unwrap().tools().is_empty());
    h.finish().await;
}

#[tokio::test]
async fn a_daemon_that_leaves_every_tree_does_not_outlive_its_connection() {
    // Double fork and setsid: the daemon keeps no parent, group or session of its
    // server's. The host adopts it; a sweep that saw it below its server keeps it with
    // that server (it ends when the connection closes), one that did not cannot tell
    // whose it is and ends it at once. Either way nothing is left after the close.
    for round in 0..3 {
        let core = Core::new().grant(&["mcp.connect:*"]).server(
            "daemonizer",
            &shell(
                &format!(
                    "(setsid sh -c 'trap \"\" TERM HUP; exec sleep 304' &); sleep 0.{round}; exec '{}' demo-server",
                    exe()
                ),
                // Every other round confined: its home is its own, and still found.
                &if round == 1 {
                    common::sandboxed("", &[], &[])
                } else {
                    String::new()
                },
            ),
        );
        let h = harness(Recorder::allow()).await;
        let (session, _) = common::open(&h.runtime, core.spec()).await;
        let marker = runtime_home(h.home.path());
        session.evict().await.unwrap();
        let clean = eventually(Duration::from_secs(3), || {
            common::servers_of(&marker).is_empty()
        })
        .await;
        assert!(clean, "round {round}: {:?}", common::servers_of(&marker));
        h.finish().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_runtime_of_the_host_does_not_hide_an_orphan_from_its_own() {
    // Two runtimes on two homes in one host: the first keeps a server alive, so its
    // sweeps look at the host's children every 250 ms, the daemon of the second among
    // them. It is not the first's (another HOME): that must not stop the second from
    // ending it with its connection.
    let keeper = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &common::demo("approval_policy: auto\n"));
    let first = harness(Recorder::allow()).await;
    let (kept, _) = common::open(&first.runtime, keeper.spec()).await;
    let daemonizer = Core::new().grant(&["mcp.connect:*"]).server(
        "daemonizer",
        &shell(
            &format!(
                "(setsid sh -c 'trap \"\" TERM HUP; exec sleep 305' &); exec '{}' demo-server",
                exe()
            ),
            "",
        ),
    );
    let second = harness(Recorder::allow()).await;
    let marker = runtime_home(second.home.path());
    let (session, _) = common::open(&second.runtime, daemonizer.spec()).await;
    // The server and its daemon.
    let orphan = eventually(Duration::from_secs(5), || {
        common::servers_of(&marker).len() >= 2
    })
    .await;
    assert!(orphan, "{:?}", common::servers_of(&marker));
    // Several sweeps of the first runtime pass over the daemon.
    tokio::time::sleep(Duration::from_secs(1)).await;
    session.evict().await.unwrap();
    let clean = eventually(Duration::from_secs(3), || {
        common::servers_of(&marker).is_empty()
    })
    .await;
    assert!(clean, "left behind: {:?}", common::servers_of(&marker));
    kept.evict().await.unwrap();
    second.finish().await;
    first.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_own_children_are_never_ended_or_reaped() {
    // Children the embedding host spawned itself carry no server's HOME: the runtime
    // reads each one's environment once, then only lists it. Whatever servers start
    // and end around them, and however many sweeps pass, they are left alive and left
    // for the host to wait for.
    let mut own: Vec<std::process::Child> = (0..3)
        .map(|_| Command::new("sleep").arg("300").spawn().unwrap())
        .collect();
    let core = Core::new()
        .grant_servers(&["demo"])
        .server("demo", &common::demo("approval_policy: auto\n"));
    let h = harness(Recorder::allow()).await;
    for _ in 0..3 {
        let (session, _) = common::open(&h.runtime, core.spec()).await;
        session.evict().await.unwrap();
    }
    // Sweeps run every 250 ms while a server lives: several pass.
    let (session, _) = common::open(&h.runtime, core.spec()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    session.evict().await.unwrap();
    h.finish().await;
    for child in &mut own {
        // Still running: `try_wait` would fail (ECHILD) had the runtime reaped it.
        assert!(matches!(child.try_wait(), Ok(None)), "{}", child.id());
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
