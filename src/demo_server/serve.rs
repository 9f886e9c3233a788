//! Serving the demo server: on stdio (with the faults that act at the start), or over
//! streamable HTTP.

use super::faults::{Drip, id_last, serve_raw};
use super::*;

/// Serves the demo server on stdin/stdout until the client closes stdin.
///
/// # Errors
/// When the MCP session cannot be established.
pub async fn serve_stdio(mut options: DemoOptions) -> Result<(), Error> {
    if act_at_start(&mut options)? {
        return serve_raw(options.fault).await;
    }
    if let Some(Fault::HugeResultIdLast(_)) = options.fault {
        // rmcp writes `id` before `result`; a relay moves it to the end of each line.
        let (ours, relay) = tokio::io::duplex(64 * 1024);
        let (relay_read, _) = tokio::io::split(relay);
        tokio::spawn(id_last(relay_read));
        let (read, write) = tokio::io::split(ours);
        drop(read);
        let service = DemoServer::new(options)
            .serve((tokio::io::stdin(), write))
            .await?;
        service.waiting().await?;
        return Ok(());
    }
    if options.fault == Some(Fault::SlowDrip) {
        let service = DemoServer::new(options)
            .serve((tokio::io::stdin(), Drip(tokio::io::stdout())))
            .await?;
        service.waiting().await?;
        return Ok(());
    }
    let ignore_eof = options.fault == Some(Fault::IgnoreEof);
    let modern_only = options.fault == Some(Fault::ModernOnly);
    let service = match DemoServer::new(options)
        .serve(rmcp::transport::stdio())
        .await
    {
        Ok(service) => service,
        Err(e) if modern_only => {
            // Like a modern-only SDK server: it says why on stderr and stays up,
            // waiting for a client that speaks its version.
            eprintln!("legacy initialize refused: {e}");
            std::future::pending::<()>().await;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    service.waiting().await?;
    if ignore_eof {
        // stdin is closed; a well-behaved server would exit now.
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// The faults that act before the server speaks MCP: exit, flood stderr, write garbage
/// to stdout, leave a child behind, list many tools. `true` when the fault needs the
/// raw server instead of rmcp's.
fn act_at_start(options: &mut DemoOptions) -> Result<bool, Error> {
    use std::io::Write;
    match options.fault {
        Some(Fault::ExitAtStart) => {
            eprintln!("demo server: exiting at start, as asked");
            std::process::exit(1);
        }
        Some(Fault::StderrFlood(bytes)) => {
            let chunk = vec![b'e'; 64 * 1024];
            let mut left = bytes;
            let mut err = std::io::stderr().lock();
            while left > 0 {
                let n = left.min(chunk.len());
                err.write_all(&chunk[..n])?;
                left -= n;
            }
        }
        Some(Fault::GarbageStdout) => {
            let mut out = std::io::stdout().lock();
            for line in ["this is not JSON", "{\"half\": ", "Content-Length: 12"] {
                writeln!(out, "{line}")?;
            }
            out.flush()?;
        }
        Some(Fault::ForkChild) => {
            // Deliberately not waited for: the runtime must clean it up.
            let _ = std::process::Command::new("sleep").arg("300").spawn();
        }
        Some(Fault::HugeTools(n)) => {
            options.extra_tools = n;
            options.page_size = 100;
        }
        Some(
            Fault::HostileTools
            | Fault::OddElicitations
            | Fault::BadSchema
            | Fault::FloodUnreadable
            | Fault::FloodPings
            | Fault::FloodNotifications
            | Fault::FloodSameId
            | Fault::FloodCancelled
            | Fault::FloodLongIds
            | Fault::FloodAtConnect,
        ) => return Ok(true),
        _ => {}
    }
    Ok(false)
}

/// The demo server as a streamable HTTP tower service (mount it at `/mcp` or anywhere;
/// it answers every path). `allowed_hosts` widens rmcp's Host-header check (by default
/// only `localhost`, `127.0.0.1` and `::1` are accepted, against DNS rebinding).
pub fn http_service(
    options: DemoOptions,
    allowed_hosts: Vec<String>,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    DemoServer,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    let mut config = StreamableHttpServerConfig::default();
    if !allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(allowed_hosts);
    }
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(DemoServer::new(options.clone())),
        Arc::default(),
        config,
    )
}

/// Serves the demo server over streamable HTTP on `listener` until the task is dropped.
///
/// # Errors
/// When accepting connections fails.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    options: DemoOptions,
    allowed_hosts: Vec<String>,
) -> Result<(), Error> {
    let service = http_service(options, allowed_hosts);
    loop {
        let (stream, _) = listener.accept().await?;
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
        });
    }
}
