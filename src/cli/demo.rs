//! `demiurge demo`: the main job, with no set-up and no network. A temporary core
//! declares the built-in server twice (once filtered, once without its call grant), a
//! session discovers and calls tools, one call is denied, and the event log is printed.

use std::sync::Arc;

use anyhow::Context;
use demiurge_mcp::events::MemorySink;
use demiurge_mcp::{Runtime, SessionSpec};
use serde_json::json;

use super::Cli;
use super::approver::TerminalApprover;
use super::call::print_result;
use super::tools::print_catalog;

/// A value the demo declares as a secret env entry, to show that it never leaves in clear.
const DEMO_SECRET: &str = "demo-secret-7f3a9c";

pub(crate) async fn run(cli: &Cli) -> anyhow::Result<u8> {
    let scratch = tempfile::tempdir().context("cannot create a temporary directory")?;
    let core = scratch.path().join("core");
    let home = cli
        .home
        .clone()
        .unwrap_or_else(|| scratch.path().join("home"));
    let exe = std::env::current_exe().context("cannot find the demiurge executable")?;
    // The built-in server also runs over streamable HTTP, in this process, on loopback.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on loopback")?;
    let port = listener.local_addr()?.port();
    let web = tokio::spawn(demiurge_mcp::demo_server::serve_http(
        listener,
        Default::default(),
        Vec::new(),
    ));
    write_core(&core, &exe.display().to_string(), port)?;

    println!("== Agent Core: {}", core.display());
    println!("   agent/mcp/demo.yaml      the built-in demo server (all tools)");
    println!("   agent/mcp/filtered.yaml  the same server, include [echo, add], no call grant");
    println!(
        "   agent/mcp/web.yaml       the same server over streamable HTTP on 127.0.0.1:{port}"
    );
    println!("   agent/mcp/metadata.yaml  a cloud metadata URL: refused before any approval");
    println!("   (the host trusts 127.0.0.0/8 for this run, like --trust-network 127.0.0.0/8)\n");

    let sink = MemorySink::new();
    let mut config = cli.config(Arc::new(sink.clone()));
    config.home = home.clone();
    config.approver = Arc::new(TerminalApprover::for_demo());
    config.url_policy = demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.0/8".parse()?]);
    let runtime = Runtime::start(config).await?;
    super::register(&runtime);
    let result = drive(&runtime, &core).await;
    runtime.shutdown().await;
    web.abort();
    let session = result?;

    println!(
        "\n== Event log ({})",
        runtime
            .event_log_path(&session)
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    if let Some(path) = runtime.event_log_path(&session) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in text.lines() {
            let mut event: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
            if let Some(map) = event.as_object_mut() {
                map.remove("at_ms");
                map.remove("session");
                if let Some(preview) = map.get_mut("preview") {
                    *preview = json!("<connect preview, see above>");
                }
            }
            println!("   {}", super::t(&event.to_string()));
        }
    }
    let leaked = sink.events().iter().any(|e| {
        serde_json::to_string(e)
            .unwrap_or_default()
            .contains(DEMO_SECRET)
    });
    println!(
        "\n== Secret `DEMO_SECRET` appears in events: {}",
        if leaked { "YES (bug)" } else { "no" }
    );
    Ok(if leaked { 1 } else { 0 })
}

async fn drive(runtime: &Runtime, core: &std::path::Path) -> anyhow::Result<String> {
    let (session, _) = runtime.start_session(SessionSpec::new(core)).await?;
    println!(
        "== Session {}: preparing turn 1 (connect approvals are printed to stderr)",
        session.id()
    );
    let catalog = session.prepare_turn().await?;
    print_catalog(&catalog, false);

    let calls = [
        ("demo__echo", json!({"message": "hello from the demo"})),
        ("demo__add", json!({"a": 2, "b": 40})),
        ("demo__whoami", json!({})),
        ("demo__fail", json!({"message": "this tool always fails"})),
        (
            "demo__echo",
            json!({"message": format!("the secret is {DEMO_SECRET}")}),
        ),
        (
            "web__echo",
            json!({"message": "hello over streamable HTTP"}),
        ),
        ("filtered__echo", json!({"message": "not allowed"})),
    ];
    for (tool, args) in calls {
        println!("\n> call {tool} {args}");
        match catalog.call(tool, args).await {
            Ok(result) => print_result(&result, false),
            Err(refused) => println!("refused: {}", super::t(&refused.to_string())),
        }
    }

    println!("\n== Turn 2: unchanged declarations keep their connections");
    let again = session.prepare_turn().await?;
    println!(
        "{} tools, same connections: {}",
        again.tools().len(),
        same_pid(&catalog, &again).await
    );
    Ok(session.id().to_string())
}

async fn same_pid(a: &demiurge_mcp::TurnCatalog, b: &demiurge_mcp::TurnCatalog) -> bool {
    let pid = |c: &demiurge_mcp::TurnCatalog| {
        let c = c.clone();
        async move {
            c.call("demo__whoami", json!({}))
                .await
                .ok()
                .map(|r| r.view(demiurge_mcp::redact::View::Operator).data.clone())
        }
    };
    pid(a).await == pid(b).await
}

fn write_core(core: &std::path::Path, exe: &str, port: u16) -> anyhow::Result<()> {
    let mcp = core.join("agent/mcp");
    std::fs::create_dir_all(&mcp)?;
    std::fs::write(
        core.join("agent.yaml"),
        "name: demo\ncapabilities:\n  defaults:\n    mcp.connect:demo: {scope: core}\n    mcp.call:demo: {scope: core}\n    mcp.connect:filtered: {scope: core}\n    mcp.connect:web: {scope: core}\n    mcp.call:web: {scope: core}\n    mcp.connect:metadata: {scope: core}\n",
    )?;
    std::fs::write(
        mcp.join("web.yaml"),
        format!(
            "transport: streamable_http\nurl: http://127.0.0.1:{port}/mcp\nheaders:\n  X-Demo-Token: \"{DEMO_SECRET}\"\nrisk: low\napproval_policy: auto\n"
        ),
    )?;
    std::fs::write(
        mcp.join("metadata.yaml"),
        "transport: streamable_http\nurl: http://169.254.169.254/latest/meta-data/\n",
    )?;
    let quoted = serde_json::to_string(exe)?;
    std::fs::write(
        mcp.join("demo.yaml"),
        format!(
            "transport: stdio\ncommand: {quoted}\nargs: [demo-server]\nenv:\n  DEMO_SECRET: \"{DEMO_SECRET}\"\nrisk: low\napproval_policy: auto\ntimeout_seconds: 10\n"
        ),
    )?;
    std::fs::write(
        mcp.join("filtered.yaml"),
        format!(
            "transport: stdio\ncommand: {quoted}\nargs: [demo-server]\ntools:\n  include: [echo, add]\nrisk: low\n"
        ),
    )?;
    Ok(())
}

/// `demo-server`, as its options ask: the demo server, or the bare relay. Its exit code.
pub(crate) async fn server(command: &super::args::Command) -> u8 {
    let super::args::Command::DemoServer {
        http,
        allowed_hosts,
        extra_tools,
        page_size,
        tools_file,
        fault,
        forward,
    } = command
    else {
        return super::USAGE;
    };
    if *forward {
        return relay().await;
    }
    serve(ServerOptions {
        http: *http,
        allowed_hosts,
        extra_tools: *extra_tools,
        page_size: *page_size,
        tools_file: tools_file.clone(),
        fault,
    })
    .await
}

/// `demo-server --forward`: the bare relay (`demo_server::forward_stdio`). Its exit code.
async fn relay() -> u8 {
    match demiurge_mcp::demo_server::forward_stdio().await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// What `demo-server` was asked for.
struct ServerOptions<'a> {
    /// Streamable HTTP on this address; stdio without.
    pub http: Option<std::net::SocketAddr>,
    /// Host names the HTTP server answers besides loopback.
    pub allowed_hosts: &'a [String],
    /// Tools beyond the built-in ones (`--extra-tools`).
    pub extra_tools: usize,
    /// Tools per `tools/list` page (`--page-size`; 0: one page).
    pub page_size: usize,
    /// Tools read from a file (`--tools-file`).
    pub tools_file: Option<std::path::PathBuf>,
    /// A fault to act out (`--fault MODE [ARG]`).
    pub fault: &'a [String],
}

/// `demo-server`: the built-in MCP server on stdio or streamable HTTP, with a fault
/// acted out when asked. Its exit code.
async fn serve(asked: ServerOptions<'_>) -> u8 {
    use demiurge_mcp::demo_server::{self, DemoOptions, Fault};
    let fault = match asked.fault {
        [] => None,
        [mode, rest @ ..] => match Fault::parse(mode, rest.first().map(String::as_str)) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("error: {e}");
                return super::USAGE;
            }
        },
    };
    if fault == Some(Fault::ExitAtStart) && asked.http.is_some() {
        eprintln!("demo server: exiting at start, as asked");
        return 1;
    }
    let mut options = DemoOptions {
        extra_tools: asked.extra_tools,
        page_size: asked.page_size,
        tools_file: asked.tools_file,
        fault,
    };
    if let Some(Fault::HugeTools(n)) = fault {
        options.extra_tools = n;
        options.page_size = 100;
    }
    let served = match asked.http {
        Some(addr) => match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                let bound = listener
                    .local_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                eprintln!("demo MCP server on http://{bound}/mcp");
                demo_server::serve_http(listener, options, asked.allowed_hosts.to_vec()).await
            }
            Err(e) => Err(format!("cannot listen on {addr}: {e}").into()),
        },
        None => demo_server::serve_stdio(options).await,
    };
    match served {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}
