//! `demiurge serve [--stdio | --http ADDR] [--print-config claude|codex|vscode]`: the
//! runtime in front of any MCP client, as one MCP server (`gateway.rs`) whose tools,
//! resources and prompts are a session's turn catalog, one session per client
//! connection; approvals go to the person behind the client (`ask.rs`).
//!
//! The HTTP face binds loopback by default. Any other address needs the bearer token
//! (generated once, kept 0600 in the home, printed when made) on every request; a
//! request whose `Host` is not loopback (or the bound address), or whose `Origin` is not
//! a loopback origin, is refused (DNS rebinding); bodies are bounded by rmcp (4 MiB).

mod ask;
mod gateway;
mod pipes;
mod rounds;
mod traced;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::{Cli, register, t};
use ask::{ClientApprover, ClientElicitor, Clients};
use gateway::{Gateway, Shared};

/// Most HTTP connections open at once; past it a new one is closed at once.
const MAX_CONNECTIONS: usize = 128;

/// `serve`'s entry.
pub(crate) async fn run(
    cli: &Cli,
    http: Option<SocketAddr>,
    print_config: Option<&str>,
    metrics: Option<SocketAddr>,
) -> anyhow::Result<u8> {
    if let Some(client) = print_config {
        return Ok(match config_snippet(cli, client, http) {
            Some(snippet) => {
                println!("{snippet}");
                0
            }
            None => {
                eprintln!("error: --print-config takes claude, codex or vscode");
                super::USAGE
            }
        });
    }
    if cli.yes && http.is_some_and(|a| !a.ip().is_loopback()) {
        eprintln!(
            "error: --yes with a non-loopback --http would approve every question of every client that reaches it; serve on loopback, or let clients answer"
        );
        return Ok(super::USAGE);
    }
    if cli.yes && http.is_some() {
        eprintln!(
            "serve: --yes approves the connects and calls of every client of this address, any local process included"
        );
    }
    let scrapes = match metrics.map(metrics_endpoint) {
        None => None,
        Some(started) => match started.await {
            Ok(scrapes) => Some(scrapes),
            Err(code) => return Ok(code),
        },
    };
    let clients: Clients = Arc::default();
    let config = asking_clients(cli, &clients, http.is_some());
    let runtime = demiurge_mcp::Runtime::start(config).await?;
    register(&runtime);
    let shared = Shared {
        runtime: runtime.clone(),
        spec: cli.session_spec(),
        clients,
        identities: Arc::default(),
    };
    // Modern clients have no connection to end: an identity idle long enough goes.
    let identities = Arc::clone(&shared.identities);
    let sweeper = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            gateway::sweep(&identities);
        }
    });
    let served = match http {
        None => serve_stdio(shared).await,
        Some(addr) => serve_http(cli, addr, shared).await,
    };
    sweeper.abort();
    if let Some(scrapes) = scrapes {
        scrapes.abort();
    }
    runtime.shutdown().await;
    served.map(|()| 0)
}

/// The runtime's configuration for `serve`: its questions (approvals, a server's input
/// requests, OAuth sign-ins) go to the client of the session that caused them, or to a
/// terminal when serving HTTP from one.
fn asking_clients(cli: &Cli, clients: &Clients, over_http: bool) -> demiurge_mcp::RuntimeConfig {
    let relay = ask::Relay {
        clients: Arc::clone(clients),
        inner: Arc::new(super::Progress::new()),
        runtime: tokio::runtime::Handle::current(),
    };
    let mut config = cli.config(Arc::new(relay));
    // Over stdio the terminal is the protocol stream: only the client can be asked
    // (or `--yes` answers, as for any command).
    let terminal = over_http && std::io::IsTerminal::is_terminal(&std::io::stdin());
    // `--yes` answers every question itself, as for any command; otherwise the client
    // is asked first.
    if !cli.yes {
        let terminal_approver = terminal.then(|| Arc::clone(&config.approver));
        config.approver = Arc::new(ClientApprover {
            clients: Arc::clone(clients),
            terminal: terminal_approver,
        });
    }
    let for_auth = Arc::clone(clients);
    config.authorizer = Arc::new(super::auth::TerminalAuthorizer::relayed(
        terminal,
        Arc::new(move |prompt| ask::authorization(&for_auth, prompt)),
    ));
    config.elicitor = Arc::new(ClientElicitor {
        clients: Arc::clone(clients),
        terminal: terminal.then(|| Arc::clone(&config.elicitor)),
    });
    config
}

/// `--metrics ADDR`: the Prometheus page of this run's metrics, served on a task; or
/// the exit code of why not (not loopback, cannot listen, a build without telemetry).
async fn metrics_endpoint(addr: SocketAddr) -> Result<tokio::task::JoinHandle<()>, u8> {
    if !addr.ip().is_loopback() {
        eprintln!("error: --metrics serves on loopback only (127.0.0.1 or ::1)");
        return Err(super::USAGE);
    }
    #[cfg(not(feature = "otel-otlp"))]
    {
        eprintln!(
            "error: --metrics needs a build with telemetry: cargo install --path . --features otel-otlp"
        );
        Err(super::USAGE)
    }
    #[cfg(feature = "otel-otlp")]
    {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("error: cannot listen on {addr}: {e}");
                return Err(1);
            }
        };
        let bound = listener.local_addr().map_err(|_| 1u8)?;
        let page = super::prometheus::Page::default();
        let Some(meters) = super::otlp::with_page(page.clone()) else {
            return Err(1);
        };
        eprintln!("serve: metrics on http://{bound}/metrics");
        Ok(tokio::spawn(super::prometheus::serve(
            listener, page, meters,
        )))
    }
}

async fn serve_stdio(shared: Shared) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let service = Gateway::new(shared).serve(pipes::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// The token a non-loopback `serve --http` requires, made (and printed) when absent.
fn bearer_token(cli: &Cli) -> anyhow::Result<String> {
    let env = demiurge_mcp::HostEnv::from_process();
    let path = cli.home_dir(&env).join("serve-token");
    if let Some(token) = read_token(&path) {
        return Ok(token);
    }
    let token = ask::random_hex(32)?;
    write_token(&path, &token)?;
    eprintln!(
        "serve: a bearer token was made for this address (shown once; kept in {}): {token}",
        t(&path.display().to_string())
    );
    Ok(token)
}

/// The kept token, when the file is one this user wrote for it: a regular file (never
/// through a link, never waited on), owned by this user, private (no group or other
/// bits), of a token's length. Anything else is replaced by a new token.
fn read_token(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let own = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.file_type().is_file() || !own || meta.mode() & 0o077 != 0 || meta.len() > 128 {
        return None;
    }
    let mut token = String::new();
    file.take(128).read_to_string(&mut token).ok()?;
    let token = token.trim();
    (token.len() >= 32 && token.bytes().all(|b| b.is_ascii_hexdigit())).then(|| token.to_string())
}

/// Writes a new token file, 0600 in a 0700 directory, never through a link.
fn write_token(path: &std::path::Path, token: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    file.write_all(token.as_bytes())
}

async fn serve_http(cli: &Cli, addr: SocketAddr, shared: Shared) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let token = if addr.ip().is_loopback() {
        None
    } else {
        Some(bearer_token(cli)?)
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    hosts.push(bound.ip().to_string());
    let config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts);
    let sessions: Arc<
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > = Arc::default();
    let service =
        StreamableHttpService::new(move || Ok(Gateway::new(shared.clone())), sessions, config);
    eprintln!("serve: MCP over streamable HTTP at http://{bound}/mcp");
    let token: Option<Arc<str>> = token.map(Into::into);
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, or a connection reset before it was taken: the
                // listener stays; the next accept is tried after a pause.
                eprintln!("serve: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            // Past the bound a connection is closed at once.
            drop(stream);
            continue;
        };
        let (service, token) = (service.clone(), token.clone());
        let guarded =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let (service, token) = (service.clone(), token.clone());
                async move {
                    if let Some(refused) = refuse(&request, token.as_deref()) {
                        return Ok::<_, std::convert::Infallible>(refused);
                    }
                    Ok(service.handle(request).await)
                }
            });
        tokio::spawn(async move {
            let mut builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10));
            let _ = builder
                .serve_connection(hyper_util::rt::TokioIo::new(stream), guarded)
                .await;
            drop(permit);
        });
    }
}

type Response =
    hyper::Response<http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>>;

/// Why `request` is refused before rmcp sees it: a missing or wrong bearer token (when
/// one is required), or an `Origin` that is not a loopback origin.
fn refuse<B>(request: &hyper::Request<B>, token: Option<&str>) -> Option<Response> {
    let answer = |status: u16, text: &str| {
        let mut response = hyper::Response::new(Full::new(Bytes::from(text.to_string())).boxed());
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
        response
    };
    if let Some(token) = token {
        let given = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let same = given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()));
        if !same {
            return Some(answer(
                401,
                "a bearer token is required: the operator finds it in the runtime home's serve-token file",
            ));
        }
    }
    if let Some(origin) = request.headers().get(hyper::header::ORIGIN) {
        let loopback = origin
            .to_str()
            .ok()
            .and_then(|o| url::Url::parse(o).ok())
            .and_then(|u| u.host_str().map(str::to_string))
            .is_some_and(|h| matches!(h.as_str(), "localhost" | "127.0.0.1" | "[::1]"));
        if !loopback {
            return Some(answer(403, "requests from that origin are refused"));
        }
    }
    None
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What to paste into `client`'s configuration to use this core through `serve`.
fn config_snippet(cli: &Cli, client: &str, http: Option<SocketAddr>) -> Option<String> {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "demiurge".into());
    let core = cli.core_dir().display().to_string();
    let args = ["--core", core.as_str(), "serve", "--stdio"];
    let url = http.map(|a| format!("http://{a}/mcp"));
    let snippet = match (client, url) {
        ("claude", None) => serde_json::to_string_pretty(&serde_json::json!({
            "mcpServers": {"demiurge": {"command": exe, "args": args}}
        }))
        .ok()?,
        ("claude", Some(url)) => serde_json::to_string_pretty(&serde_json::json!({
            "mcpServers": {"demiurge": {"type": "http", "url": url}}
        }))
        .ok()?,
        ("vscode", None) => serde_json::to_string_pretty(&serde_json::json!({
            "servers": {"demiurge": {"type": "stdio", "command": exe, "args": args}}
        }))
        .ok()?,
        ("vscode", Some(url)) => serde_json::to_string_pretty(&serde_json::json!({
            "servers": {"demiurge": {"type": "http", "url": url}}
        }))
        .ok()?,
        ("codex", None) => format!(
            "[mcp_servers.demiurge]\ncommand = {}\nargs = {}",
            serde_json::to_string(&exe).ok()?,
            serde_json::to_string(&args).ok()?
        ),
        ("codex", Some(url)) => format!(
            "[mcp_servers.demiurge]\nurl = {}",
            serde_json::to_string(&url).ok()?
        ),
        _ => return None,
    };
    Some(snippet)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> hyper::Request<()> {
        let mut builder = hyper::Request::builder().uri("/mcp");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn status(refused: Option<Response>) -> Option<u16> {
        refused.map(|r| r.status().as_u16())
    }

    #[test]
    fn a_token_when_required_and_only_loopback_origins_pass() {
        let token = "a".repeat(64);
        let ok = format!("Bearer {token}");
        assert_eq!(status(refuse(&request(&[]), None)), None);
        assert_eq!(status(refuse(&request(&[]), Some(&token))), Some(401));
        for wrong in ["Bearer ", "bearer x", "Basic abc", "Bearer aaaa"] {
            let r = request(&[("authorization", wrong)]);
            assert_eq!(status(refuse(&r, Some(&token))), Some(401), "{wrong}");
        }
        assert_eq!(
            status(refuse(&request(&[("authorization", &ok)]), Some(&token))),
            None
        );
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert_eq!(
                status(refuse(&request(&[("origin", origin)]), None)),
                None,
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "null",
            "file://",
        ] {
            let r = request(&[("origin", origin)]);
            assert_eq!(status(refuse(&r, None)), Some(403), "{origin}");
        }
    }
}
