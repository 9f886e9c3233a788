//! `demiurge auth login|logout|status`, and the CLI's authorizer and elicitor.
//!
//! The authorizer prints the authorization URL (escaped), opens a browser when there is
//! a display, and listens on a loopback redirect URI (`http://127.0.0.1:<port>/callback`)
//! for the one redirect that completes the flow. Other commands run it inline on a
//! terminal; without one they fail closed, and the diagnostic names `auth login`.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, OnceLock};

use demiurge_mcp::authority::{
    AuthorizationPrompt, Authorizer, ElicitationAnswer, ElicitationRequest, Elicitor,
};
use demiurge_mcp::core::{Endpoint, load};
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Cli, start_runtime_with, t};

/// The longest request line read from the browser's redirect.
const MAX_REDIRECT_REQUEST: usize = 8 * 1024;

/// Whether this process can ask a person (stdin and stderr are terminals).
pub(crate) fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

pub(crate) struct TerminalAuthorizer {
    ask: bool,
    listener: OnceLock<Option<std::net::TcpListener>>,
}

impl TerminalAuthorizer {
    /// An authorizer that asks when `ask` (a terminal, or `auth login`), else declines.
    pub(crate) fn new(ask: bool) -> Self {
        TerminalAuthorizer {
            ask,
            listener: OnceLock::new(),
        }
    }

    fn listener(&self) -> Option<&std::net::TcpListener> {
        self.listener
            .get_or_init(|| {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
                listener.set_nonblocking(true).ok()?;
                Some(listener)
            })
            .as_ref()
    }
}

impl Authorizer for TerminalAuthorizer {
    fn redirect_uri(&self) -> String {
        let port = self
            .listener()
            .and_then(|l| l.local_addr().ok())
            .map_or(0, |a| a.port());
        format!("http://127.0.0.1:{port}/callback")
    }

    fn authorize(&self, prompt: AuthorizationPrompt) -> BoxFuture<'static, Option<String>> {
        let listener = self
            .ask
            .then(|| self.listener().and_then(|l| l.try_clone().ok()))
            .flatten();
        Box::pin(async move {
            let listener = listener?;
            eprint!("{}", prompt.render());
            open_browser(&prompt.url);
            eprintln!(
                "  waiting for the browser to come back to {} ...",
                t(&prompt.redirect_uri)
            );
            let listener = tokio::net::TcpListener::from_std(listener).ok()?;
            loop {
                let (mut stream, _) = listener.accept().await.ok()?;
                let mut request = vec![0u8; MAX_REDIRECT_REQUEST];
                let n = stream.read(&mut request).await.ok()?;
                let line = String::from_utf8_lossy(&request[..n]);
                let target = line
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("GET "))
                    .and_then(|l| l.split(' ').next())
                    .unwrap_or_default()
                    .to_string();
                if !target.starts_with("/callback") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    continue;
                }
                let body = "Authorized. You can close this window and return to the terminal.";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let base = prompt.redirect_uri.trim_end_matches("/callback");
                return Some(format!("{base}{target}"));
            }
        })
    }
}

/// Opens `url` in a browser when a desktop session is there to show it; quietly does
/// nothing otherwise (the URL is printed either way).
fn open_browser(url: &str) {
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if desktop && std::io::stderr().is_terminal() {
        let _ = std::process::Command::new("xdg-open")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
}

/// On a terminal: shows the server's request and its defaults, and accepts them or
/// declines; without a terminal every request is declined.
pub(crate) struct TerminalElicitor;

impl Elicitor for TerminalElicitor {
    fn elicit(&self, request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        Box::pin(async move {
            if !interactive() {
                eprintln!(
                    "  declined: server `{}` asked for input and there is no terminal",
                    t(&request.server)
                );
                return ElicitationAnswer::Decline;
            }
            eprintln!(
                "MCP server `{}` asks: {}",
                t(&request.server),
                t(&request.message)
            );
            for (name, value) in &request.defaults {
                eprintln!("  {}: {}", t(name), t(&value.to_string()));
            }
            tokio::task::spawn_blocking(|| {
                eprint!("  send these values? [y/N] ");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
                match line.trim() {
                    "y" | "yes" => ElicitationAnswer::Accept(serde_json::Map::new()),
                    _ => ElicitationAnswer::Decline,
                }
            })
            .await
            .unwrap_or(ElicitationAnswer::Decline)
        })
    }
}

/// `auth login SERVER`: connects the core's servers with an authorizer that asks, and
/// reports whether SERVER connected.
pub(crate) async fn login(cli: &Cli, server: &str) -> anyhow::Result<u8> {
    let Some(_) = http_declaration(cli, server)? else {
        return Ok(1);
    };
    let runtime = start_runtime_with(cli, Arc::new(TerminalAuthorizer::new(true))).await?;
    let (session, _) = runtime.start_session(cli.session_spec()).await?;
    let code = match session.prepare_turn().await {
        Ok(turn) => match turn.diagnostics().iter().find(|d| d.server == server) {
            Some(d) => {
                eprintln!("error: {}: {}", t(server), t(&d.message));
                1
            }
            None if turn.denied().iter().any(|d| d.server == server) => {
                eprintln!("error: {}: denied", t(server));
                1
            }
            None => {
                println!("authorized: {}", t(server));
                0
            }
        },
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    };
    runtime.shutdown().await;
    Ok(code)
}

/// `auth logout SERVER`: forgets the stored tokens of SERVER.
pub(crate) fn logout(cli: &Cli, server: &str) -> anyhow::Result<u8> {
    let Some(file) = http_declaration(cli, server)? else {
        return Ok(1);
    };
    match std::fs::remove_file(&file) {
        Ok(()) => println!("logged out: {}", t(server)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("not logged in: {}", t(server));
        }
        Err(e) => return Err(e.into()),
    }
    Ok(0)
}

/// `auth status`: which streamable HTTP servers have stored tokens (never the tokens).
pub(crate) fn status(cli: &Cli) -> anyhow::Result<u8> {
    let core = load(&cli.core_dir()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let home = cli.home_dir(&demiurge_mcp::HostEnv::from_process());
    let mut any = false;
    for d in &core.declarations {
        if let Some(file) = demiurge_mcp::oauth_token_file(&home, PRINCIPAL, d) {
            any = true;
            let state = if file.exists() {
                "tokens stored"
            } else {
                "not logged in"
            };
            println!("{:<24} {state}", t(&d.server_id));
        }
    }
    if !any {
        println!("no streamable HTTP servers");
    }
    Ok(0)
}

/// The principal the CLI's sessions act for.
const PRINCIPAL: &str = "local";

/// The token file of SERVER, when it is a streamable HTTP declaration of the core
/// (otherwise a message says why, and `None`).
fn http_declaration(cli: &Cli, server: &str) -> anyhow::Result<Option<std::path::PathBuf>> {
    let core = load(&cli.core_dir()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(d) = core.declarations.iter().find(|d| d.server_id == server) else {
        eprintln!(
            "error: no server `{}` in {}",
            t(server),
            t(&cli.core_dir().display().to_string())
        );
        return Ok(None);
    };
    if !matches!(d.endpoint, Endpoint::StreamableHttp { .. }) {
        eprintln!(
            "error: `{}` is a stdio server; only streamable HTTP servers authorize",
            t(server)
        );
        return Ok(None);
    }
    let home = cli.home_dir(&demiurge_mcp::HostEnv::from_process());
    Ok(demiurge_mcp::oauth_token_file(&home, PRINCIPAL, d))
}
