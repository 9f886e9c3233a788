//! What confinement costs (`cargo bench --bench sandbox`), paired in one run:
//!
//! - `prepare/cold_1 unconfined vs confined`: a new session's first turn of one demo
//!   server, the same runtime configuration but for the host's default sandbox (`None`
//!   against `Sandbox::confined_default()`: the launcher, a user and a network
//!   namespace, Landlock, seccomp, the egress proxy's listener), with the launcher made
//!   ahead as a running runtime has it from its second confined start on. Target: at
//!   most 1.15x.
//! - `prepare/cold_1 unconfined vs confined, nothing ahead`: the same with
//!   `sandbox_launch_ahead` off, which is also what the first confined start of a
//!   runtime pays. No target: the figure is the whole cost of confinement.
//! - `egress/direct vs egress/proxy`: one plain HTTP request to a loopback server,
//!   straight or through the egress proxy (its URL policy decision, connect, relay),
//!   on a new connection each time as a confined client makes it. No target: the
//!   figure is the proxy's cost per request.

#[path = "common.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use demiurge_mcp::Runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const COLD_ROUNDS: usize = 30;
const REQUEST_ROUNDS: usize = 60;
/// Requests per round of the egress pair.
const REQUESTS: u32 = 50;

async fn cold(runtime: &Runtime, core: &std::path::Path, lane: String) -> Duration {
    common::runtime_cold(runtime, core, lane, common::DEMO_TOOLS).await
}

/// A loopback HTTP server answering `hello` to every request; its port.
async fn hello() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                    )
                    .await;
            });
        }
    });
    port
}

/// `REQUESTS` requests, each on a new connection to `via`, for `url`; the time taken.
async fn requests(via: u16, request: &str) -> Duration {
    let started = Instant::now();
    for _ in 0..REQUESTS {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", via))
            .await
            .unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        assert!(
            answer.ends_with(b"hello"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    started.elapsed()
}

fn main() {
    let rt = common::rt();
    let dir = tempfile::tempdir().unwrap();
    let core = common::core(dir.path(), 1, 0, false);
    rt.block_on(async {
        let plain = Runtime::start(common::config(&dir.path().join("plain"), 4))
            .await
            .unwrap();
        let confined_config = |name: &str, ahead: bool| {
            let mut config = common::config(&dir.path().join(name), 4);
            config.sandbox_default = Some(demiurge_mcp::sandbox::Sandbox::confined_default());
            config.sandbox_launch_ahead = ahead;
            config
        };
        let confined = Runtime::start(confined_config("confined", true))
            .await
            .unwrap();
        let unprepared = Runtime::start(confined_config("unprepared", false))
            .await
            .unwrap();
        let lanes = std::sync::atomic::AtomicUsize::new(0);
        let lane = || {
            format!(
                "cold-{}",
                lanes.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            )
        };
        common::paired(
            "prepare/cold_1 unconfined vs confined",
            "1.15x",
            COLD_ROUNDS,
            || cold(&plain, &core, lane()),
            || cold(&confined, &core, lane()),
        )
        .await;
        common::paired(
            "prepare/cold_1 unconfined vs confined, nothing ahead",
            "none (the whole cost of confinement)",
            COLD_ROUNDS,
            || cold(&plain, &core, lane()),
            || cold(&unprepared, &core, lane()),
        )
        .await;
        plain.shutdown().await;
        confined.shutdown().await;
        unprepared.shutdown().await;

        let port = hello().await;
        let net = demiurge_mcp::net::NetContext::new(
            demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.0/8".parse().unwrap()]),
            Arc::new(demiurge_mcp::net::StaticResolver::new()),
            &[],
        )
        .unwrap();
        let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_port = proxy.local_addr().unwrap().port();
        let _running = demiurge_mcp::sandbox::egress::serve(
            proxy,
            demiurge_mcp::sandbox::egress::Egress {
                net: Arc::new(net),
                on_decision: Arc::new(|_| {}),
            },
        )
        .unwrap();
        let direct = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_string();
        let proxied = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n");
        let ratio = common::paired(
            "egress/direct vs egress/proxy",
            "none (the proxy's cost)",
            REQUEST_ROUNDS,
            || requests(port, &direct),
            || requests(proxy_port, &proxied),
        )
        .await;
        println!(
            "egress: {REQUESTS} requests a round, each on a new connection ({ratio:.2}x a direct one)"
        );
    });
}
