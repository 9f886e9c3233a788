//! The command line: every command, its options and what each does, as clap reads them.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "demiurge", version, about = "The Demiurge MCP runtime")]
pub(crate) struct Cli {
    /// The Agent Core directory.
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) core: Option<PathBuf>,
    /// The host workspace (default: the core directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) workspace: Option<PathBuf>,
    /// Runtime home (default: $DEMIURGE_HOME, else ~/.demiurge).
    #[arg(long, global = true, value_name = "DIR")]
    pub(super) home: Option<PathBuf>,
    /// Approve every connect/call prompt of this run (previews still go to stderr).
    #[arg(long, global = true)]
    pub(super) yes: bool,
    /// Approve the definitions servers changed or added since a person approved them
    /// (what `--yes` never approves; for scripts).
    #[arg(long = "approve-changes", global = true)]
    pub(super) approve_changes: bool,
    /// A trusted network for the URL policy (repeatable).
    #[arg(long = "trust-network", global = true, value_name = "CIDR")]
    pub(super) trust_network: Vec<ipnet::IpNet>,
    /// A token budget for a turn's tool definitions: past it, tools are offered by name
    /// and summary, with `search_tools` and `describe_tool` (estimated as bytes/4).
    #[arg(long = "tool-budget", global = true, value_name = "TOKENS")]
    pub(super) tool_budget: Option<usize>,
    /// With --tool-budget: a server id or exposed tool name offered whole anyway
    /// (repeatable).
    #[arg(long = "always-load", global = true, value_name = "SERVER_OR_TOOL")]
    pub(super) always_load: Vec<String>,
    /// The model provider of the interactive shell (`fake` only).
    #[arg(long, global = true, value_name = "NAME")]
    pub(super) provider: Option<String>,
    #[command(subcommand)]
    pub(super) command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Create an Agent Core (agent.yaml and an example declaration, commented); with
    /// --check, load agent.yaml and every declaration and report problems.
    Init {
        /// Check the core instead of creating one.
        #[arg(long)]
        check: bool,
        /// Machine-readable output (with --check).
        #[arg(long)]
        json: bool,
    },
    /// The interactive shell (`--provider fake`).
    Shell,
    /// Prepare one turn and list its tools, diagnostics and denials.
    Tools {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Prepare one turn and call a tool by its exposed name.
    Call {
        /// Exposed tool name (`server__tool`).
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Prepare one turn and list the resources and resource templates of its servers.
    Resources {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Read a resource by URI through the server that offers it.
    Read {
        /// Server id.
        server: String,
        /// The resource's URI.
        uri: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Prepare one turn and list the prompts of its servers.
    Prompts {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Get a prompt by its exposed name, with arguments.
    Prompt {
        /// Exposed prompt name (`server__prompt`).
        name: String,
        /// Arguments as a JSON object of strings.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The MCP security diff between the live revision and CANDIDATE, with its token.
    Review {
        /// The candidate commit (default HEAD).
        #[arg(default_value = "HEAD")]
        candidate: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Promote CANDIDATE to live (needs approval and the exact review token).
    Promote {
        /// The candidate commit.
        candidate: String,
        /// The token printed by `demiurge review CANDIDATE`.
        #[arg(long = "review-token", value_name = "TOKEN")]
        review_token: Option<String>,
    },
    /// The approvals a person answered "always": list them or revoke them.
    Approvals {
        #[command(subcommand)]
        action: ApprovalsAction,
    },
    /// What servers serve, pinned at their approval: list, show what changed, approve
    /// it, or forget the pins.
    Pins {
        #[command(subcommand)]
        action: PinsAction,
    },
    /// Manage declarations: add, list, get, remove, enable, disable.
    Mcp {
        #[command(subcommand)]
        action: McpAction,
    },
    /// Authorize streamable HTTP servers that need OAuth, or forget their tokens.
    Auth {
        #[command(subcommand)]
        action: AuthAction,
    },
    /// Run the demo: a temporary core with the built-in server, discovery, calls, events.
    Demo,
    /// The runtime as the client under test of the MCP conformance package.
    #[command(hide = true)]
    ConformanceClient {
        /// The server URL the harness appends.
        url: String,
    },
    /// Print the URL policy's decision for a URL.
    UrlCheck {
        /// The URL to check.
        url: String,
        /// Answer DNS for HOST with these addresses instead of the real resolver.
        #[arg(long, value_name = "HOST=ADDR[,ADDR]")]
        resolve: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Serve the built-in demo MCP server on stdio (or streamable HTTP with --http).
    /// Serve this core's MCP servers to any MCP client, as one MCP server: its tools,
    /// resources and prompts are a session's turn (one session per client connection),
    /// under the runtime's authority, approvals (asked of the client's person) and
    /// redaction.
    Serve {
        /// Serve on stdin/stdout (the default).
        #[arg(long, conflicts_with = "http")]
        stdio: bool,
        /// Serve streamable HTTP on this address (path /mcp); a non-loopback address
        /// needs the bearer token made for it.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Print what to paste into a client's configuration (claude, codex, vscode).
        #[arg(long = "print-config", value_name = "CLIENT")]
        print_config: Option<String>,
        /// Serve the run's metrics in Prometheus' text format at http://ADDR/metrics
        /// (a loopback address; builds with the `otel-otlp` feature).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<std::net::SocketAddr>,
    },
    DemoServer {
        /// Serve streamable HTTP on this address (path /mcp) instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Host header values accepted besides localhost, 127.0.0.1 and ::1 (repeatable).
        #[arg(long = "allowed-host", value_name = "HOST")]
        allowed_hosts: Vec<String>,
        /// Generated extra tools (for pagination and scale tests).
        #[arg(long, default_value_t = 0)]
        extra_tools: usize,
        /// Tools per tools/list page (0: one page).
        #[arg(long, default_value_t = 0)]
        page_size: usize,
        /// More tools, read from this JSON file (`[{"name", "description"}]`) at every listing.
        #[arg(long, value_name = "FILE")]
        tools_file: Option<PathBuf>,
        /// Misbehave for fault-injection tests: MODE, then an optional count N (see the README's fault table).
        #[arg(long, num_args = 1..=2, value_names = ["MODE", "N"])]
        fault: Vec<String>,
        /// Relay to a demo server started as a child, through rmcp alone (the bare
        /// gateway the benches measure `serve` against).
        #[arg(long, conflicts_with_all = ["http", "fault"])]
        forward: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum ApprovalsAction {
    /// Every remembered approval, with its id.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Forget one remembered approval (its id), or every one.
    Revoke {
        /// The id from `approvals list`.
        id: Option<String>,
        /// Every remembered approval.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum PinsAction {
    /// Every server with pins, and how many definitions wait for review.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// What SERVER serves that changed since it was approved (a diff), and what is pinned.
    Show {
        /// Server id.
        server: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Approve what SERVER serves now: every waiting definition, or the one NAME.
    Approve {
        /// Server id.
        server: String,
        /// One definition: its name on the server, or KIND:NAME (tool, template,
        /// prompt; `instructions`).
        name: Option<String>,
        /// Only a definition whose digest (as `pins show` prints it) starts with HEX.
        #[arg(long, value_name = "HEX")]
        digest: Option<String>,
    },
    /// Forget SERVER's pins: its next approved connect pins what it serves then.
    Reset {
        /// Server id.
        server: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum McpAction {
    /// Declare a server (`-- COMMAND ARGS...` or `--url URL`) and grant it; literal env
    /// and header values become `${NAME}` references the host must set.
    Add {
        /// The server id (the file name).
        name: String,
        /// A streamable HTTP server's URL.
        #[arg(long)]
        url: Option<String>,
        /// An environment entry KEY=VALUE (stdio; repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// A header KEY=VALUE (HTTP; repeatable).
        #[arg(long = "header", value_name = "KEY=VALUE")]
        headers: Vec<String>,
        /// The program and its arguments, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Import servers from a Claude Code / Claude Desktop `mcpServers` JSON, a VS Code
    /// `mcp.json` or a Codex `config.toml` (shows what it will write; --yes to write).
    Import {
        /// The configuration file.
        file: PathBuf,
    },
    /// Every declared server.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One server as its connect approval would show it.
    Get {
        /// The server id.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Remove a declaration and its grants.
    Remove {
        /// The server id.
        name: String,
    },
    /// Set `enabled: true`.
    Enable {
        /// The server id.
        name: String,
    },
    /// Set `enabled: false`.
    Disable {
        /// The server id.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum AuthAction {
    /// Run the authorization flow for SERVER (prints the URL, opens a browser when it
    /// can, waits for the redirect on loopback) and store its tokens.
    Login {
        /// The server id.
        server: String,
    },
    /// Forget the stored tokens of SERVER.
    Logout {
        /// The server id.
        server: String,
    },
    /// Which streamable HTTP servers have stored tokens.
    Status,
}
