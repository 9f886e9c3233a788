//! `demiurge --provider fake`: the interactive shell. Works with piped input too, one
//! command per line, so it can be scripted. Each line is a turn: declaration changes
//! between two lines are picked up.

use std::io::{IsTerminal, Write};

use demiurge_mcp::actors::ServerState;
use demiurge_mcp::{Runtime, Session, TurnCatalog};

use super::call::print_result;
use super::tools::print_catalog;
use super::{Cli, start_runtime, t};

pub(crate) async fn run(cli: &Cli) -> anyhow::Result<u8> {
    let runtime = start_runtime(cli).await?;
    let (session, _) = runtime.start_session(cli.session_spec()).await?;
    let interactive = std::io::stdin().is_terminal();
    println!(
        "session {} (fake provider); /tools /servers /call NAME JSON /resources /read SERVER URI /prompts /events /new /resume ID /help /quit",
        session.id()
    );
    let mut shell = Shell {
        cli,
        runtime,
        session,
    };
    loop {
        if interactive {
            print!("> ");
            let _ = std::io::stdout().flush();
        }
        let Some(line) = read_line().await else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !shell.command(line).await? {
            break;
        }
    }
    shell.runtime.shutdown().await;
    Ok(0)
}

/// The shell's state: its runtime and the session its commands act on.
struct Shell<'a> {
    cli: &'a Cli,
    runtime: Runtime,
    session: Session,
}

impl Shell<'_> {
    /// Acts on one line; `false` when the shell should end.
    async fn command(&mut self, line: &str) -> anyhow::Result<bool> {
        let (command, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        let session = &self.session;
        match command {
            "/quit" | "/exit" => return Ok(false),
            "/help" | "/?" => help(),
            "/tools" => {
                if let Some(catalog) = turn(session).await {
                    print_catalog(&catalog, false);
                }
            }
            "/servers" => servers(session, self.cli).await,
            "/resources" => {
                if let Some(catalog) = turn(session).await {
                    super::resources::print_resources(&catalog);
                }
            }
            "/prompts" => {
                if let Some(catalog) = turn(session).await {
                    super::resources::print_prompts(&catalog);
                }
            }
            "/read" => self.read(rest).await,
            "/call" => self.call(rest).await,
            "/events" => self.events().await,
            "/new" => {
                let (next, eviction) = self.runtime.start_session(self.cli.session_spec()).await?;
                self.session = next;
                println!("session {}", self.session.id());
                report(eviction).await;
            }
            "/resume" => match self.runtime.resume_session(rest).await {
                Ok((next, eviction)) => {
                    self.session = next;
                    println!("session {} resumed", self.session.id());
                    report(eviction).await;
                }
                Err(e) => println!("error: {}", t(&e.to_string())),
            },
            other if other.starts_with('/') => unknown(other),
            _ => {
                if let Some(catalog) = turn(session).await {
                    println!(
                        "fake: I read {} characters and can use {} tools; ask me with /call NAME JSON",
                        line.chars().count(),
                        catalog.tools().len()
                    );
                }
            }
        }
        Ok(true)
    }

    /// `/read SERVER URI`.
    async fn read(&self, rest: &str) {
        let Some((server, uri)) = rest.split_once(char::is_whitespace) else {
            println!("usage: /read SERVER URI");
            return;
        };
        if let Some(catalog) = turn(&self.session).await {
            match catalog.read_resource(server, uri.trim()).await {
                Ok(result) => print_result(&result, false),
                Err(refused) => println!("refused: {}", t(&refused.to_string())),
            }
        }
    }

    /// `/call NAME JSON`: only the servers that can own NAME are asked about and
    /// started.
    async fn call(&self, rest: &str) {
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, "{}"));
        let args = match serde_json::from_str::<serde_json::Value>(args.trim()) {
            Ok(v) if v.is_object() => v,
            _ => {
                println!("usage: /call NAME {{json object}}");
                return;
            }
        };
        let (_, owners) = super::call::owners_of(self.cli, name);
        if let Some(catalog) = turn_for(&self.session, &owners).await {
            // A person named the tool: a deferred one is theirs to call.
            catalog.load(&[name]);
            match catalog.call(name, args).await {
                Ok(result) => print_result(&result, false),
                Err(refused) => println!("refused: {}", t(&refused.to_string())),
            }
        }
    }

    /// `/events`: the session's event log, escaped (JSON escapes C0 controls but not
    /// C1 or bidi characters).
    async fn events(&self) {
        self.runtime.flush_events().await;
        let path = self.runtime.event_log_path(self.session.id());
        let text = path
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default();
        print!("{}", demiurge_mcp::text::escape_lines(&text));
    }
}

/// An unknown `/command`, with the closest known one.
fn unknown(other: &str) {
    let names = COMMANDS
        .iter()
        .map(|(c, _)| c.split(' ').next().unwrap_or(c));
    let hint = demiurge_mcp::text::closest(other, names)
        .map(|c| format!("did you mean {c}? "))
        .unwrap_or_default();
    println!("unknown command {}; {hint}/help lists them", t(other));
}

/// The shell's commands and what each does.
const COMMANDS: &[(&str, &str)] = &[
    ("/tools", "prepare a turn and list its tools"),
    ("/servers", "each declared server's state"),
    (
        "/call NAME JSON",
        "call a tool (starts only the servers that can own NAME)",
    ),
    ("/resources", "the resources and templates of a turn"),
    ("/read SERVER URI", "read a resource"),
    ("/prompts", "the prompts of a turn"),
    ("/events", "this session's event log"),
    ("/new", "start a new session (the previous one is evicted)"),
    ("/resume ID", "resume a session by id"),
    ("/help", "this list"),
    ("/quit", "close every server and exit"),
];

fn help() {
    let rows: Vec<Vec<String>> = COMMANDS
        .iter()
        .map(|(c, what)| vec![format!("  {c}"), (*what).to_string()])
        .collect();
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    println!("  anything else goes to the fake provider, which says what it could use");
}

/// The next command line, from the terminal reader the prompts share (never a read of
/// its own that could outlive it and swallow a prompt's answer, or hold the process).
async fn read_line() -> Option<String> {
    super::approver::terminal().read_line().await
}

/// A turn for `servers` only (every server when empty).
async fn turn_for(session: &Session, servers: &[String]) -> Option<TurnCatalog> {
    if servers.is_empty() {
        return turn(session).await;
    }
    match session.prepare_turn_for(servers).await {
        Ok(c) => Some(c),
        Err(e) => {
            println!("error: {}", t(&e.to_string()));
            None
        }
    }
}

async fn turn(session: &Session) -> Option<TurnCatalog> {
    match session.prepare_turn().await {
        Ok(c) => Some(c),
        Err(e) => {
            println!("error: {}", t(&e.to_string()));
            None
        }
    }
}

async fn report(eviction: Option<demiurge_mcp::Eviction>) {
    if let Some(e) = eviction {
        match e.wait().await {
            Ok(r) => println!(
                "previous session {} evicted ({} connections closed)",
                r.session, r.connections_closed
            ),
            Err(e) => println!("eviction failed: {}", t(&e.to_string())),
        }
    }
}

async fn servers(session: &Session, cli: &Cli) {
    let states = session.servers().await;
    let report = demiurge_mcp::core::load_report(&cli.core_dir());
    let mut rows = Vec::new();
    for d in &report.core.declarations {
        let line = match states
            .iter()
            .find(|s| s.server == d.server_id)
            .map(|s| &s.state)
        {
            _ if !d.enabled => "disabled".to_string(),
            Some(ServerState::Connected { pid, tools }) => {
                format!(
                    "connected (pid {}, {tools} tools)",
                    pid.map_or("-".into(), |p| p.to_string())
                )
            }
            Some(ServerState::Failed {
                message,
                retry_in_ms,
            }) => format!(
                "failed, cached for {:.1}s more: {message}",
                *retry_in_ms as f64 / 1000.0
            ),
            Some(ServerState::Denied { reason }) => format!("denied: {reason}"),
            None => "not connected yet (run /tools)".to_string(),
        };
        rows.push(vec![t(&d.server_id).into_owned(), t(&line).into_owned()]);
    }
    for line in super::aligned(&rows) {
        println!("{line}");
    }
}
