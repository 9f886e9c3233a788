//! A hostile server cannot grow the host's memory (threat model, adversary 2). Servers
//! that flood requests the client cannot read, valid `ping`s, or requests during
//! connect, over stdio and over streamable HTTP, and one that floods notifications for
//! the whole 10 s, all beside a healthy server. The host is a real `demiurge` shell
//! process: its RSS stays bounded, the healthy server keeps answering, each flooder that
//! piles up requests is failed and its process gone.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http::{Behaviour, serve};
use common::{Core, demo, demo_fault, exe};

/// Resident set of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Each flooder and what its diagnostic says. (`cancelled` withdraws each request
/// at once, so rmcp usually drops the answer before it is written: whether it is failed
/// depends on that race; what matters is that nothing piles up either way.)
const FLOODERS: [(&str, &str); 6] = [
    ("unreadable", "without taking the answers"),
    ("pings", "without taking the answers"),
    ("at_connect", "without taking the answers"),
    ("http_pings", "without taking the answers"),
    ("same_id", "reused the id of a request still in flight"),
    ("long_ids", "longer than 128 bytes"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flooding_servers_cannot_grow_the_host() {
    let http = serve("127.0.0.1:0", Behaviour::PingFlood, None).await;
    let core = Core::new()
        .server("healthy", &demo("approval_policy: auto\n"))
        .server("unreadable", &demo_fault("flood-unreadable", ""))
        .server("pings", &demo_fault("flood-pings", ""))
        .server("at_connect", &demo_fault("flood-at-connect", ""))
        .server("chatty", &demo_fault("flood-notifications", ""))
        .server("same_id", &demo_fault("flood-same-id", ""))
        .server("cancelled", &demo_fault("flood-cancelled", ""))
        .server("long_ids", &demo_fault("flood-long-ids", ""))
        .server(
            "http_pings",
            &format!(
                "transport: streamable_http\nurl: http://127.0.0.1:{}/mcp\n",
                http.port()
            ),
        )
        .grant(&["mcp.connect:*", "mcp.call:healthy"]);
    let home = tempfile::tempdir().unwrap();
    let mut host = Command::new(exe())
        .args([
            "--yes",
            "--trust-network",
            "127.0.0.0/8",
            "--provider",
            "fake",
        ])
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = host.id();
    let mut stdin = host.stdin.take().unwrap();
    let stdout = BufReader::new(host.stdout.take().unwrap());
    let reader =
        std::thread::spawn(move || stdout.lines().map_while(Result::ok).collect::<Vec<_>>());

    let started = Instant::now();
    let mut peak = 0;
    writeln!(stdin, "/tools").unwrap();
    // For 10 s: a call to the healthy server every 50 ms, the host's RSS sampled.
    let mut calls = 0;
    while started.elapsed() < Duration::from_secs(10) {
        writeln!(
            stdin,
            "/call healthy__echo {{\"message\": \"still here {calls}\"}}"
        )
        .unwrap();
        calls += 1;
        for _ in 0..5 {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    writeln!(stdin, "/servers").unwrap();
    writeln!(stdin, "/quit").unwrap();
    drop(stdin);
    // Responsive to the end: the floods take no thread from the close path.
    let deadline = Instant::now() + Duration::from_secs(15);
    while host.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the host did not quit within 15 s"
        );
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = reader.join().unwrap();
    let text = out.join("\n");

    let answered = (0..calls)
        .filter(|n| out.iter().any(|l| l == &format!("still here {n}")))
        .count();
    assert_eq!(
        answered, calls,
        "the healthy server answered every call:\n{text}"
    );
    for (flooder, why) in FLOODERS {
        let line = out
            .iter()
            .rfind(|l| l.starts_with(flooder))
            .unwrap_or_else(|| panic!("{flooder} missing from /servers:\n{text}"));
        assert!(line.contains("failed") && line.contains(why), "{line}");
    }
    let cancelled = out.iter().rfind(|l| l.starts_with("cancelled")).unwrap();
    assert!(
        cancelled.contains("connected") || cancelled.contains("without taking the answers"),
        "{cancelled}"
    );
    let chatty = out.iter().rfind(|l| l.starts_with("chatty")).unwrap();
    assert!(
        chatty.contains("connected"),
        "notifications ask for nothing back: {chatty}"
    );
    // Generous: the unbounded runtime reached 900 MB in 16 s.
    assert!(peak < 64 * 1024, "the host's RSS peaked at {peak} KiB");
    eprintln!("flood: host RSS peak {peak} KiB over {calls} healthy calls");
    // Nothing the servers started outlived the host.
    let clean = common::eventually(Duration::from_secs(5), || {
        common::servers_of(home.path()).is_empty()
    })
    .await;
    assert!(clean, "{:?}", common::servers_of(home.path()));
}
