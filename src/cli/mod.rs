//! The `demiurge` command line: argument parsing and dispatch; one file per subcommand.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use demiurge_mcp::HostEnv;
use demiurge_mcp::events::{Event, EventKind, EventSink};
use demiurge_mcp::{Runtime, RuntimeConfig, SessionSpec};

mod approvals;
mod approver;
mod args;
mod auth;
mod call;
mod check;
mod conformance;
mod demo;
mod elicit;
mod evolution;
mod import;
mod mcp;
#[cfg(feature = "otel-otlp")]
mod otlp;
mod pins;
#[cfg(feature = "otel-otlp")]
mod prometheus;
mod resources;
mod serve;
mod shell;
mod tools;
mod url_check;

pub(crate) use args::Cli;
use args::{ApprovalsAction, AuthAction, Command, McpAction, PinsAction};

/// Untrusted text escaped for the terminal (see [`demiurge_mcp::text`]).
pub(crate) use demiurge_mcp::text::escape as t;

/// Exit code of a usage error.
const USAGE: u8 = 2;

/// The widest a column is padded to; a longer cell overflows its own line only.
const MAX_COLUMN: usize = 64;

/// `rows` of already escaped cells as aligned lines: every column but the last padded
/// to its widest cell (at most [`MAX_COLUMN`] characters), two spaces between columns.
pub(crate) fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
                .min(MAX_COLUMN)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[c].saturating_sub(cell.chars().count());
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

/// The first line of `text` that is not blank, trimmed: what a one-line listing shows
/// of a description (one may start with a newline).
pub(crate) fn summary_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

/// Prints `value` as JSON (pretty or on one line) on stdout, escaped for a terminal as
/// the text output is ([`demiurge_mcp::text::json_safe`]).
pub(crate) fn print_json(value: &impl serde::Serialize, pretty: bool) {
    let json = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    println!(
        "{}",
        demiurge_mcp::text::json_safe(&json.unwrap_or_default())
    );
}

/// Exit status of a command whose output was cut by its reader (as a shell reports a
/// command ended by SIGPIPE).
const BROKEN_PIPE: i32 = 141;

/// A closed stdout (`demiurge mcp list --json | head`) ends the command quietly with
/// [`BROKEN_PIPE`] instead of a panic: `println!` panics on it, and this hook turns
/// that one panic into an exit. Servers started by then are ended by the reaper
/// process, as on any death of the host.
fn quiet_on_closed_pipe() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE);
        }
        previous(info);
    }));
}

/// Parses arguments and runs; exit codes as in the interfaces document.
pub(crate) fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async {
        tokio::select! {
            code = run(cli) => code,
            signal = terminated() => {
                // SIGINT, SIGTERM and SIGHUP run the close path: every runtime of this
                // run shuts down, ending each server's whole tree. A second signal stops
                // waiting; the process reaper still ends what is left.
                eprintln!("demiurge: {} received, closing the servers", signal.1);
                tokio::select! {
                    () = shutdown_all() => {}
                    _ = terminated() => {}
                }
                128 + signal.0
            }
        }
    });
    // Tasks still closing children get a moment; guards kill what is left.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    #[cfg(feature = "otel-otlp")]
    otlp::finish();
    ExitCode::from(code)
}

/// The runtimes this run started, for the close path of a signal.
static RUNTIMES: std::sync::Mutex<Vec<Runtime>> = std::sync::Mutex::new(Vec::new());

/// Keeps `runtime` for [`shutdown_all`].
pub(crate) fn register(runtime: &Runtime) {
    if let Ok(mut all) = RUNTIMES.lock() {
        all.push(runtime.clone());
    }
}

async fn shutdown_all() {
    let all: Vec<Runtime> = RUNTIMES.lock().map(|r| r.clone()).unwrap_or_default();
    futures::future::join_all(all.iter().map(Runtime::shutdown)).await;
}

/// The first of SIGINT, SIGTERM or SIGHUP, with its number and name. Never resolves
/// when the handlers cannot be installed.
async fn terminated() -> (u8, &'static str) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => (2, "SIGINT"),
        _ = term.recv() => (15, "SIGTERM"),
        _ = hup.recv() => (1, "SIGHUP"),
    }
}

/// Diagnostics of the runtime itself go to stderr, `warn` by default
/// (`DEMIURGE_LOG` overrides). rmcp's own logs stay off unless asked for: at debug level
/// they print protocol messages, which may carry tool arguments.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DEMIURGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("demiurge_mcp=warn,rmcp=off"));
    // Whatever was asked for: rmcp's OAuth code logs authorization codes, and its
    // service logs every message (elicitation answers, tool arguments) at debug.
    let filter = ["rmcp::transport::auth=off", "rmcp::service=off"]
        .into_iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, tracing_subscriber::EnvFilter::add_directive);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn run(cli: Cli) -> u8 {
    let result = match &cli.command {
        Some(Command::Review { candidate, json }) => Ok(evolution::review(&cli, candidate, *json)),
        Some(Command::Promote {
            candidate,
            review_token,
        }) => Ok(evolution::promote(&cli, candidate, review_token.as_deref())),
        Some(Command::ConformanceClient { url }) => conformance::run(&cli, url).await,
        Some(Command::UrlCheck { url, resolve, json }) => {
            return url_check::run(&cli, url, resolve, *json).await;
        }
        Some(command @ Command::DemoServer { .. }) => return demo::server(command).await,
        Some(Command::Init { check: true, json }) => Ok(check::run(&cli, *json)),
        Some(Command::Init { check: false, .. }) => Ok(check::create(&cli)),
        Some(Command::Shell) => match cli.provider.as_deref() {
            None | Some("fake") => shell::run(&cli).await,
            Some(other) => return unknown_provider(other),
        },
        Some(Command::Tools { json }) => tools::run(&cli, *json).await,
        Some(Command::Call { tool, args, json }) => call::run(&cli, tool, args, *json).await,
        Some(Command::Resources { json }) => resources::list_resources(&cli, *json).await,
        Some(Command::Read { server, uri, json }) => {
            resources::read(&cli, server, uri, *json).await
        }
        Some(Command::Prompts { json }) => resources::list_prompts(&cli, *json).await,
        Some(Command::Prompt { name, args, json }) => {
            resources::prompt(&cli, name, args, *json).await
        }
        Some(Command::Demo) => demo::run(&cli).await,
        Some(Command::Serve {
            http,
            print_config,
            metrics,
            ..
        }) => serve::run(&cli, *http, print_config.as_deref(), *metrics).await,
        Some(Command::Approvals { action }) => Ok(match action {
            ApprovalsAction::List { json } => approvals::list(&cli, *json),
            ApprovalsAction::Revoke { id, all } => approvals::revoke(&cli, id.as_deref(), *all),
        }),
        Some(Command::Pins { action }) => Ok(pins_command(&cli, action)),
        Some(Command::Mcp { action }) => Ok(mcp_command(&cli, action)),
        Some(Command::Auth { action }) => match action {
            AuthAction::Login { server } => auth::login(&cli, server).await,
            AuthAction::Logout { server } => auth::logout(&cli, server),
            AuthAction::Status => auth::status(&cli),
        },
        None => match cli.provider.as_deref() {
            Some("fake") => shell::run(&cli).await,
            Some(other) => return unknown_provider(other),
            None => {
                // First contact: what the command can do, not an error.
                let _ = <Cli as clap::CommandFactory>::command().print_help();
                println!();
                return 0;
            }
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", t(&format!("{e:#}")));
            1
        }
    }
}

/// `pins ...`: what servers served when approved.
fn pins_command(cli: &Cli, action: &PinsAction) -> u8 {
    match action {
        PinsAction::List { json } => pins::list(cli, *json),
        PinsAction::Show { server, json } => pins::show(cli, server, *json),
        PinsAction::Approve {
            server,
            name,
            digest,
        } => pins::approve(cli, server, name.as_deref(), digest.as_deref()),
        PinsAction::Reset { server } => pins::reset(cli, server),
    }
}

/// `mcp ...`: the declarations of the core.
fn mcp_command(cli: &Cli, action: &McpAction) -> u8 {
    match action {
        McpAction::Add {
            name,
            url,
            env,
            headers,
            command,
        } => mcp::add(
            cli,
            &mcp::Addition {
                name,
                url: url.as_deref(),
                env,
                headers,
                command,
            },
        ),
        McpAction::Import { file } => import::run(cli, file),
        McpAction::List { json } => mcp::list(cli, *json),
        McpAction::Get { name, json } => mcp::get(cli, name, *json),
        McpAction::Remove { name } => mcp::remove(cli, name),
        McpAction::Enable { name } => mcp::set_enabled(cli, name, true),
        McpAction::Disable { name } => mcp::set_enabled(cli, name, false),
    }
}

/// A provider other than `fake`: a usage error.
fn unknown_provider(other: &str) -> u8 {
    eprintln!(
        "error: unknown provider `{}`; the only provider is `fake`",
        t(other)
    );
    USAGE
}

impl Cli {
    pub(crate) fn core_dir(&self) -> PathBuf {
        self.core.clone().unwrap_or_else(|| PathBuf::from("."))
    }

    pub(crate) fn home_dir(&self, env: &HostEnv) -> PathBuf {
        self.home
            .clone()
            .unwrap_or_else(|| RuntimeConfig::default_home(env))
    }

    /// The runtime configuration of this invocation.
    pub(crate) fn config(&self, events: Arc<dyn EventSink>) -> RuntimeConfig {
        let env = HostEnv::from_process();
        let mut config = RuntimeConfig::new(self.home_dir(&env)).with_host_env(env);
        let terminal = approver::terminal();
        config.approver = Arc::new(approver::TerminalApprover::new(
            self.yes,
            self.approve_changes,
            Arc::clone(&terminal),
        ));
        config.authorizer = Arc::new(auth::TerminalAuthorizer::new(auth::interactive()));
        config.elicitor = Arc::new(elicit::TerminalElicitor::new(terminal));
        config.url_policy =
            demiurge_mcp::net::UrlPolicy::with_trusted(self.trust_network.iter().copied());
        config.events = events;
        #[cfg(feature = "otel-otlp")]
        {
            config.telemetry = otlp::telemetry();
        }
        config.tool_budget = self.tool_budget.map(|tokens| {
            let budget = demiurge_mcp::search::ToolBudget::new(tokens);
            self.always_load
                .iter()
                .fold(budget, |b, name| b.always_load(name.clone()))
        });
        config
    }

    pub(crate) fn session_spec(&self) -> SessionSpec {
        let mut spec = SessionSpec::new(self.core_dir());
        spec.workspace = self.workspace.clone();
        // A core under git follows its live revision: a promotion reauthorizes catalogs.
        if demiurge_mcp::evolution::CoreRepo::open(&self.core_dir()).is_ok() {
            spec.core_revision = demiurge_mcp::actors::LIVE_REVISION.into();
        }
        spec
    }
}

/// What the CLI says when a confined server's request was refused by the URL policy:
/// what, why, and what would allow it.
fn sandbox_denial_line(
    server: &str,
    kind: demiurge_mcp::events::SandboxDenial,
    target: &str,
    reason: &str,
) -> String {
    if kind == demiurge_mcp::events::SandboxDenial::Reported {
        return format!(
            "  ! {} failed confined, and its stderr reports a refused access ({}): if it needs a path or network the sandbox withholds, declare it under `sandbox:` in its declaration (`mcp get {}` shows what it gets; never a credential store), reviewed like any change",
            t(server),
            t(reason),
            t(server)
        );
    }
    let allow = match reason {
        "private" | "loopback" | "cgnat" | "localhost" => {
            "to allow it, trust that network (`--trust-network CIDR`, or the host's URL policy)"
        }
        "metadata" | "link_local" => {
            "nothing allows it: cloud metadata and link-local addresses are never reachable"
        }
        _ => "the URL policy refuses it for every server",
    };
    format!(
        "  ! {} was refused {} by the sandbox's egress proxy ({}); {allow}",
        t(server),
        t(target),
        t(reason)
    )
}

/// Starts a runtime with the CLI's approver and a progress sink.
pub(crate) async fn start_runtime(cli: &Cli) -> anyhow::Result<Runtime> {
    let runtime = Runtime::start(cli.config(Arc::new(Progress::new()))).await?;
    register(&runtime);
    Ok(runtime)
}

/// [`start_runtime`] with another authorizer (`auth login` asks even without a
/// terminal on stdin: it was asked to).
pub(crate) async fn start_runtime_with(
    cli: &Cli,
    authorizer: Arc<dyn demiurge_mcp::authority::Authorizer>,
) -> anyhow::Result<Runtime> {
    let mut config = cli.config(Arc::new(Progress::new()));
    config.authorizer = authorizer;
    let runtime = Runtime::start(config).await?;
    register(&runtime);
    Ok(runtime)
}

/// Shows discovery progress on a terminal; silent when stderr is piped.
pub(crate) struct Progress {
    terminal: bool,
}

impl Progress {
    pub(crate) fn new() -> Self {
        use std::io::IsTerminal;
        Progress {
            terminal: std::io::stderr().is_terminal(),
        }
    }
}

impl EventSink for Progress {
    fn emit(&self, event: &Event) {
        // A sandbox refusal is said whether or not stderr is a terminal: it explains a
        // server's failure, with the change that would allow it (never made here).
        if let EventKind::SandboxDenied {
            server,
            kind,
            target,
            reason,
        } = &event.kind
        {
            eprintln!("{}", sandbox_denial_line(server, *kind, target, reason));
            return;
        }
        if !self.terminal {
            return;
        }
        let line = match &event.kind {
            EventKind::ServerConnecting { server, .. } => {
                format!("  \u{2026} {} connecting", t(server))
            }
            EventKind::ServerConnected {
                server,
                pid,
                tools_listed,
                ..
            } => {
                format!(
                    "  \u{2713} {} connected (pid {}, {tools_listed} tools)",
                    t(server),
                    pid.map_or("-".into(), |p| p.to_string())
                )
            }
            EventKind::ServerFailed {
                server, message, ..
            } => format!("  \u{2717} {} failed: {}", t(server), t(message)),
            EventKind::ServerDenied { server, reason, .. } => {
                format!("  - {} denied: {}", t(server), t(reason))
            }
            EventKind::ServerSkipped {
                server, message, ..
            } => format!("  - {} skipped: {}", t(server), t(message)),
            _ => return,
        };
        eprintln!("{line}");
    }
}
