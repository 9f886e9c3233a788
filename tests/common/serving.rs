//! `demiurge serve --http` as a test starts and stops it.

use std::path::Path;
use std::time::Duration;

use super::{Core, eventually};

/// `demiurge serve --http` on a free loopback port for `core` (with `extra` options
/// before `serve`), and its MCP endpoint.
pub async fn serve_http(
    core: &Core,
    home: &Path,
    extra: &[&str],
) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut serve = tokio::process::Command::new(super::exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(extra)
        .args(["serve", "--http", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(serve.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("serve said where it listens");
        if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
            break url.to_string();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (serve, url)
}

/// Ends `serve` as a person would (SIGTERM) and checks nothing it started is left.
pub async fn stop_serving(mut serve: tokio::process::Child, home: &Path) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = serve.wait().await;
    assert!(
        eventually(Duration::from_secs(10), || super::servers_of(home)
            .is_empty())
        .await
    );
}
