//! `demiurge auth login|logout|status`, and the CLI's authorizer and elicitor.
//!
//! The authorizer prints the authorization URL (escaped), opens a browser when there is
//! a display, and listens on a loopback redirect URI (`http://127.0.0.1:<port>/callback`)
//! for the one redirect that completes the flow. Other commands run it inline on a
//! terminal; without one they fail closed, and the diagnostic names `auth login`.

use std::io::IsTerminal;
use std::sync::Arc;

use demiurge_mcp::authority::{AuthorizationOutcome, AuthorizationPrompt, Authorizer};
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
    /// Where a flow's person may be reached instead of this terminal (`serve`: the
    /// MCP client of the session, by a URL-mode elicitation).
    relay: Option<Relay>,
    /// One loopback listener per flow, by port: bound when the flow learns its
    /// redirect URI, taken (and closed afterwards) by that flow's `authorize`.
    listeners: std::sync::Mutex<std::collections::HashMap<u16, std::net::TcpListener>>,
    /// The browser's connection of each flow whose redirect came back, by port: it is
    /// answered once the code was exchanged ([`Authorizer::finished`]), with the outcome.
    waiting: Arc<std::sync::Mutex<std::collections::HashMap<u16, tokio::net::TcpStream>>>,
}

/// How long a browser's redirect waits for the outcome before it is told to look at
/// the terminal.
const OUTCOME_WAIT: std::time::Duration = std::time::Duration::from_secs(90);

/// Answers the browser's redirect with `body`.
async fn answer_browser(mut stream: tokio::net::TcpStream, status: &str, body: &str) {
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Most loopback listeners waiting for their flow's prompt at once.
const MAX_LISTENERS: usize = 8;

/// How long one connection to the redirect listener may take to send its request.
const CALLBACK_READ: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the person behind a flow's session to open its URL, when that person can be
/// reached: `None` when not; else whether they agreed.
pub(crate) type Relay =
    Arc<dyn Fn(&AuthorizationPrompt) -> Option<BoxFuture<'static, bool>> + Send + Sync>;

impl TerminalAuthorizer {
    /// An authorizer that asks when `ask` (a terminal, or `auth login`), else declines.
    pub(crate) fn new(ask: bool) -> Self {
        TerminalAuthorizer {
            ask,
            relay: None,
            listeners: std::sync::Mutex::default(),
            waiting: Arc::default(),
        }
    }

    /// One that first asks through `relay`, then (when `ask`) the terminal.
    pub(crate) fn relayed(ask: bool, relay: Relay) -> Self {
        TerminalAuthorizer {
            relay: Some(relay),
            ..TerminalAuthorizer::new(ask)
        }
    }

    fn may_ask(&self) -> bool {
        self.ask || self.relay.is_some()
    }
}

/// The `state` parameter of a URL's query.
fn state_of(url: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
}

impl Authorizer for TerminalAuthorizer {
    fn redirect_uri(&self) -> String {
        // Nobody will be asked: no listener is bound for a flow that cannot complete.
        // Flows that end before they ask leave theirs here; at most
        // MAX_LISTENERS are kept.
        let full = self
            .listeners
            .lock()
            .map_or(true, |all| all.len() >= MAX_LISTENERS);
        if !self.may_ask() || full {
            return "http://127.0.0.1:0/callback".into();
        }
        let bound = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| {
            l.set_nonblocking(true)?;
            Ok(l)
        });
        let port = match bound {
            Ok(listener) => {
                let port = listener.local_addr().map_or(0, |a| a.port());
                if let Ok(mut all) = self.listeners.lock() {
                    all.insert(port, listener);
                }
                port
            }
            Err(_) => 0,
        };
        format!("http://127.0.0.1:{port}/callback")
    }

    fn finished(&self, redirect_uri: &str, outcome: AuthorizationOutcome) {
        let port = url::Url::parse(redirect_uri)
            .ok()
            .and_then(|u| u.port())
            .unwrap_or_default();
        let stream = self
            .waiting
            .lock()
            .ok()
            .and_then(|mut all| all.remove(&port));
        let Some(stream) = stream else {
            return;
        };
        let (status, body) = match outcome {
            AuthorizationOutcome::Authorized => (
                "200 OK",
                "Authorized. You can close this window and return to the terminal.",
            ),
            _ => (
                "400 Bad Request",
                "Authorization failed: no token was obtained. The terminal says why.",
            ),
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(answer_browser(stream, status, body));
        }
    }

    fn authorize(&self, prompt: AuthorizationPrompt) -> BoxFuture<'static, Option<String>> {
        let port = url::Url::parse(&prompt.redirect_uri)
            .ok()
            .and_then(|u| u.port());
        let listener = port.and_then(|p| self.listeners.lock().ok()?.remove(&p));
        let listener = listener.filter(|_| self.may_ask());
        let waiting = Arc::clone(&self.waiting);
        let relayed = self.relay.as_ref().and_then(|relay| relay(&prompt));
        let terminal = self.ask;
        Box::pin(async move {
            let listener = tokio::net::TcpListener::from_std(listener?).ok()?;
            let expected = state_of(&prompt.url)?;
            match relayed {
                Some(agreed) => agreed.await.then_some(())?,
                None if terminal => {
                    eprint!("{}", prompt.render());
                    open_browser(&prompt.url);
                    eprintln!(
                        "  waiting for the browser to come back to {} ...",
                        t(&prompt.redirect_uri)
                    );
                }
                None => return None,
            }
            loop {
                let (mut stream, _) = listener.accept().await.ok()?;
                let mut request = vec![0u8; MAX_REDIRECT_REQUEST];
                let read = tokio::time::timeout(CALLBACK_READ, stream.read(&mut request)).await;
                let Ok(Ok(n)) = read else { continue };
                let line = String::from_utf8_lossy(&request[..n]);
                let target = line
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("GET "))
                    .and_then(|l| l.split(' ').next())
                    .unwrap_or_default()
                    .to_string();
                let redirect = url::Url::parse(&prompt.redirect_uri).ok()?;
                let url = format!("{}{target}", redirect.origin().ascii_serialization());
                // Only the redirect of this flow completes it (its own path, bound to
                // its authorization server, and its state): another local process, a
                // web page knocking on the port or another flow's redirect is answered
                // and ignored.
                let path_matches = url::Url::parse(&url).is_ok_and(|u| u.path() == redirect.path());
                if !path_matches || state_of(&url).as_deref() != Some(&expected) {
                    let _ = stream
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                    continue;
                }
                // The browser hears the outcome once the code was exchanged; if that
                // never comes, it is told to look at the terminal.
                let port = redirect.port().unwrap_or_default();
                if let Ok(mut all) = waiting.lock() {
                    all.insert(port, stream);
                }
                let late = Arc::clone(&waiting);
                tokio::spawn(async move {
                    tokio::time::sleep(OUTCOME_WAIT).await;
                    let stream = late.lock().ok().and_then(|mut all| all.remove(&port));
                    if let Some(stream) = stream {
                        answer_browser(
                            stream,
                            "200 OK",
                            "The outcome is not known yet; see the terminal.",
                        )
                        .await;
                    }
                });
                return Some(url);
            }
        })
    }
}

/// Opens `url` in a browser when a desktop session is there to show it and the URL is
/// an https one (or http on loopback); otherwise it is only printed. The authorization
/// endpoint comes from the server's metadata: no other scheme is handed to `xdg-open`.
fn open_browser(url: &str) {
    let Ok(parsed) = url::Url::parse(url) else {
        return;
    };
    let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    let safe = parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback);
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if safe && desktop && std::io::stderr().is_terminal() {
        let _ = std::process::Command::new("xdg-open")
            .arg(parsed.as_str())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
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

/// `auth logout SERVER`: forgets every stored token of SERVER (whichever revision of
/// its declaration obtained it).
pub(crate) fn logout(cli: &Cli, server: &str) -> anyhow::Result<u8> {
    if http_declaration(cli, server)?.is_none() {
        return Ok(1);
    }
    let home = cli.home_dir(&demiurge_mcp::HostEnv::from_process());
    let files = demiurge_mcp::oauth_token_files_of(&home, PRINCIPAL, server);
    if files.is_empty() {
        println!("not logged in: {}", t(server));
    }
    for file in &files {
        std::fs::remove_file(file)?;
    }
    if !files.is_empty() {
        println!("logged out: {}", t(server));
    }
    Ok(0)
}

/// `auth status`: which streamable HTTP servers have stored tokens (never the tokens).
pub(crate) fn status(cli: &Cli) -> anyhow::Result<u8> {
    let core = load(&cli.core_dir()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let home = cli.home_dir(&demiurge_mcp::HostEnv::from_process());
    let mut rows = Vec::new();
    for d in &core.declarations {
        let Some(current) = demiurge_mcp::oauth_token_file(&home, PRINCIPAL, d) else {
            continue;
        };
        let all = demiurge_mcp::oauth_token_files_of(&home, PRINCIPAL, &d.server_id);
        let state = match (current.exists(), all.len()) {
            (true, _) => "tokens stored",
            (false, 0) => "not logged in",
            (false, _) => "tokens stored for an earlier declaration (logged in again on use)",
        };
        rows.push(vec![t(&d.server_id).into_owned(), state.to_string()]);
    }
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    if rows.is_empty() {
        println!("no streamable HTTP servers");
    }
    Ok(0)
}

/// The principal the CLI's sessions act for.
pub(super) const PRINCIPAL: &str = "local";

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
