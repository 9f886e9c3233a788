//! The built-in demo MCP server (`demiurge demo-server`), written with rmcp.
//!
//! Small and obviously correct: it is the real server behind `demo`, the integration
//! tests and the benches. Tools: `echo`, `add`, `sleep` (cancellable), `in_flight`,
//! `fail`, `whoami`, `env_names`, `cwd`, `stderr`, `add_tool` (adds a tool and sends
//! `notifications/tools/list_changed`), `progress`, `log`, `roots`, `add_resource`,
//! `touch`, plus `--extra-tools N` generated tools served `--page-size` per page (to
//! exercise pagination). Resources `demo://readme`, `demo://cwd`, `demo://pixel` (binary) and the template
//! `demo://env/{name}`; the prompt `greet`; logging with `logging/setLevel`.

// Roots and logging are deprecated by SEP-2577 for the 2026-07-28 revision; this
// server speaks 2025-11-25, where both are current.
#![allow(deprecated)]
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Whatever stopped the demo server (I/O, the MCP service); printed by the CLI.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

mod faults;
mod forward;
mod handler;
mod rounds;
mod serve;
mod tasks;

pub use faults::Fault;
pub use forward::forward_stdio;
pub use rounds::Asking;
use rounds::Change;
pub use serve::{http_service, serve_http, serve_stdio};

/// How the demo server is shaped.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Generated `extra_<n>` tools on top of the built-in ones.
    pub extra_tools: usize,
    /// Tools per `tools/list` page (0: everything in one page).
    pub page_size: usize,
    /// A JSON file of tools (`[{"name", "description"}]`, with `title`, `inputSchema`
    /// and `annotations` when given; an entry with `prompt` instead of `name` is a
    /// prompt) served after the built-in ones, read anew at every listing: tests
    /// reorder, change or drop tools and prompts between listings with it. A call to one answers `ran <name>`; one with an `elicit`
    /// (`{"message", "requestedSchema"}`) first asks the client that, and answers with
    /// what came back.
    pub tools_file: Option<std::path::PathBuf>,
    /// A way to misbehave, for fault-injection tests.
    pub fault: Option<Fault>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct MessageArgs {
    /// The text.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// Left operand.
    a: f64,
    /// Right operand.
    b: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct SleepArgs {
    /// Milliseconds to sleep.
    ms: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NameArgs {
    /// Name of the tool to add.
    name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct TextArgs {
    /// Text to write.
    text: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ProgressArgs {
    /// How many progress notifications to send.
    steps: u32,
    /// Milliseconds between them.
    ms: u64,
    /// Text added to each progress message.
    label: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct LogArgs {
    /// `debug` .. `emergency`.
    level: String,
    /// The message.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct UriArgs {
    /// A resource URI.
    uri: String,
}

/// The demo server.
#[derive(Clone)]
pub struct DemoServer {
    tool_router: ToolRouter<Self>,
    options: DemoOptions,
    /// Calls of `sleep` in flight, and the most seen at once: lets tests observe
    /// whether the runtime serialized calls without relying on timing.
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    /// Tools added at run time by `add_tool`.
    added: Arc<std::sync::Mutex<Vec<String>>>,
    /// Resources added at run time by `add_resource`.
    added_resources: Arc<std::sync::Mutex<Vec<String>>>,
    /// The open `subscriptions/listen` requests of modern clients.
    listeners: rounds::Listeners,
    /// Calls running as tasks (the tasks extension).
    tasks: rmcp::task_manager::TaskManager,
    /// The least severe level `log` sends (`logging/setLevel`), as its rank.
    log_level: Arc<AtomicUsize>,
}

/// Log levels from least to most severe, as MCP names them.
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

#[tool_router]
impl DemoServer {
    #[tool(description = "Return the message unchanged")]
    async fn echo(&self, Parameters(args): Parameters<MessageArgs>) -> String {
        args.message
    }

    #[tool(
        description = "Return the message as text and, parsed as JSON, as structured content; a JSON list of strings as one text block each"
    )]
    async fn echo_json(&self, Parameters(args): Parameters<MessageArgs>) -> CallToolResult {
        let data = serde_json::from_str(&args.message).unwrap_or(json!({}));
        if let Some(texts) = data.as_array().and_then(|items| {
            items
                .iter()
                .map(|i| i.as_str().map(ContentBlock::text))
                .collect::<Option<Vec<_>>>()
        }) {
            return CallToolResult::success(texts);
        }
        let mut result = CallToolResult::structured(data);
        result.content = vec![ContentBlock::text(args.message)];
        result
    }

    #[tool(description = "Add two numbers")]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }

    #[tool(description = "Sleep for ms milliseconds; reports the most sleep calls seen at once")]
    async fn sleep(
        &self,
        Parameters(SleepArgs { ms }): Parameters<SleepArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let _guard = InFlight::enter(&self.in_flight, &self.max_in_flight);
        // A cancelled request (notifications/cancelled) stops sleeping at once.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            () = context.ct.cancelled() => {
                return CallToolResult::error(vec![ContentBlock::text("cancelled")]);
            }
        }
        CallToolResult::structured(json!({
            "slept_ms": ms,
            "max_concurrent": self.max_in_flight.load(Ordering::SeqCst),
        }))
    }

    #[tool(description = "Report how many sleep calls are running now (cancelled ones are not)")]
    async fn in_flight(&self) -> CallToolResult {
        CallToolResult::structured(json!({ "sleeping": self.in_flight.load(Ordering::SeqCst) }))
    }

    #[tool(description = "Return an error result carrying the message")]
    async fn fail(&self, Parameters(args): Parameters<MessageArgs>) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(args.message)])
    }

    #[tool(
        description = "Return this server's process id, and the W3C trace context its request carried in `_meta` (traceparent, tracestate)"
    )]
    async fn whoami(&self, meta: rmcp::model::RequestMetaObject) -> CallToolResult {
        let mut whoami = json!({ "pid": std::process::id() });
        for key in ["traceparent", "tracestate"] {
            if let Some(value) = meta.0.0.get(key) {
                whoami[key] = value.clone();
            }
        }
        CallToolResult::structured(whoami)
    }

    #[tool(description = "Return the sorted names of this server's environment variables")]
    async fn env_names(&self) -> CallToolResult {
        let mut names: Vec<String> = std::env::vars_os()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        names.sort();
        CallToolResult::structured(json!({ "names": names }))
    }

    #[tool(description = "Return this server's working directory")]
    async fn cwd(&self) -> String {
        std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    #[tool(description = "Add a tool named `name` and send notifications/tools/list_changed")]
    async fn add_tool(
        &self,
        Parameters(NameArgs { name }): Parameters<NameArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        if let Ok(mut added) = self.added.lock() {
            added.push(name.clone());
        }
        self.announce(&context, Change::Tools).await;
        format!("added {name}")
    }

    #[tool(description = "Send `steps` progress notifications `ms` apart, then answer")]
    async fn progress(
        &self,
        Parameters(ProgressArgs { steps, ms, label }): Parameters<ProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        if let Some(token) = context.meta.get_progress_token() {
            for step in 1..=steps {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let note =
                    rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_total(f64::from(steps))
                        .with_message(match &label {
                            Some(label) => format!("step {step} of {steps}: {label}"),
                            None => format!("step {step} of {steps}"),
                        });
                let _ = context.peer.notify_progress(note).await;
            }
        }
        format!("done after {steps} steps")
    }

    #[tool(description = "Send a log message at `level` (if the client's level lets it through)")]
    async fn log(
        &self,
        Parameters(LogArgs { level, message }): Parameters<LogArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        let rank = LEVELS.iter().position(|l| *l == level).unwrap_or(1);
        // A modern client sends its level with each request; a legacy one set it once.
        let floor = if rounds::modern(&context) {
            let asked = context
                .meta
                .log_level()
                .and_then(|l| serde_json::to_value(l).ok());
            asked.map_or(0, |asked| {
                LEVELS.iter().position(|l| asked == *l).unwrap_or(0)
            })
        } else {
            self.log_level.load(Ordering::SeqCst)
        };
        if rank < floor {
            return "below the client's level: not sent".into();
        }
        let sent = serde_json::from_value(json!(level)).map(|level| {
            rmcp::model::LoggingMessageNotificationParam::new(level, json!(message))
                .with_logger("demo")
        });
        match sent {
            Ok(note) => {
                let _ = context.peer.notify_logging_message(note).await;
                "sent".into()
            }
            Err(_) => "unknown level".into(),
        }
    }

    #[tool(description = "Return the URIs of the client's roots, one per line")]
    async fn roots(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        match context.peer.list_roots().await {
            Ok(roots) => {
                let uris: Vec<String> = roots.roots.into_iter().map(|r| r.uri).collect();
                CallToolResult::success(vec![ContentBlock::text(uris.join("\n"))])
            }
            Err(e) => {
                CallToolResult::error(vec![ContentBlock::text(format!("roots/list failed: {e}"))])
            }
        }
    }

    #[tool(description = "Add a resource at `uri` and send notifications/resources/list_changed")]
    async fn add_resource(
        &self,
        Parameters(UriArgs { uri }): Parameters<UriArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        if let Ok(mut added) = self.added_resources.lock() {
            added.push(uri.clone());
        }
        self.announce(&context, Change::Resources).await;
        format!("added {uri}")
    }

    #[tool(description = "Send notifications/resources/updated for `uri`")]
    async fn touch(
        &self,
        Parameters(UriArgs { uri }): Parameters<UriArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        self.announce(&context, Change::Updated(uri.clone())).await;
        format!("touched {uri}")
    }

    #[tool(description = "Write text to this server's stderr")]
    async fn stderr(&self, Parameters(TextArgs { text }): Parameters<TextArgs>) -> String {
        eprintln!("{text}");
        format!("wrote {} characters to stderr", text.chars().count())
    }
}

/// Counts a running `sleep` call; dropping it (completion or cancellation) uncounts it.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(now: &Arc<AtomicUsize>, max: &AtomicUsize) -> Self {
        let current = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(current, Ordering::SeqCst);
        InFlight(Arc::clone(now))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl DemoServer {
    /// A server with these options.
    pub fn new(options: DemoOptions) -> Self {
        DemoServer {
            tool_router: Self::tool_router(),
            options,
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
            added: Arc::default(),
            added_resources: Arc::default(),
            listeners: Arc::default(),
            tasks: rmcp::task_manager::TaskManager::new(),
            log_level: Arc::default(),
        }
    }

    /// The entries of [`DemoOptions::tools_file`] as it reads now (none when unreadable).
    fn file_entries(&self) -> Vec<Value> {
        let Some(path) = &self.options.tools_file else {
            return Vec::new();
        };
        std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// The tools of the tools file: `name`, `description`, and when given `title`,
    /// `inputSchema` and `annotations` as they are.
    fn file_tools(&self) -> Vec<Tool> {
        let empty = json!({"type": "object", "properties": {}});
        self.file_entries()
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?;
                let description = t.get("description").and_then(Value::as_str);
                let schema = t.get("inputSchema").unwrap_or(&empty).clone();
                let mut tool = Tool::new(
                    name.to_string(),
                    description.unwrap_or("From the tools file").to_string(),
                    Arc::new(serde_json::from_value(schema).ok()?),
                );
                tool.title = t.get("title").and_then(Value::as_str).map(str::to_string);
                tool.annotations = t
                    .get("annotations")
                    .and_then(|a| serde_json::from_value(a.clone()).ok());
                Some(tool)
            })
            .collect()
    }

    /// The prompts of the tools file: entries with `prompt` (its name), `description`
    /// and `arguments` (names).
    fn file_prompts(&self) -> Vec<rmcp::model::Prompt> {
        self.file_entries()
            .iter()
            .filter_map(|p| {
                let name = p.get("prompt")?.as_str()?;
                let arguments: Vec<rmcp::model::PromptArgument> = p
                    .get("arguments")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|a| Some(rmcp::model::PromptArgument::new(a.as_str()?)))
                    .collect();
                Some(rmcp::model::Prompt::new(
                    name,
                    p.get("description").and_then(Value::as_str),
                    Some(arguments),
                ))
            })
            .collect()
    }

    /// The elicitation a tools-file tool asks before answering, if it has one.
    fn file_elicitation(&self, tool: &str) -> Option<rmcp::model::ElicitRequestParams> {
        let mut asked = self.file_entry(tool)?.get("elicit")?.clone();
        asked.as_object_mut()?.insert("mode".into(), json!("form"));
        serde_json::from_value(asked).ok()
    }

    /// The tools file's entry for `tool`.
    fn file_entry(&self, tool: &str) -> Option<Value> {
        let path = self.options.tools_file.as_ref()?;
        let listed: Vec<Value> = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        listed
            .into_iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
    }

    fn all_tools(&self) -> Vec<Tool> {
        let mut tools = self.tool_router.list_all();
        let schema = Arc::new(
            serde_json::from_value(json!({"type": "object", "properties": {}})).unwrap_or_default(),
        );
        let added = self.added.lock().map(|a| a.clone()).unwrap_or_default();
        tools.extend(
            added
                .into_iter()
                .map(|name| Tool::new(name, "Added at run time", Arc::clone(&schema))),
        );
        tools.extend(self.file_tools());
        tools.extend((0..self.options.extra_tools).map(|n| {
            Tool::new(
                format!("extra_{n}"),
                format!("Generated tool {n}"),
                Arc::clone(&schema),
            )
        }));
        tools
    }
}

/// About `bytes` of structured records, each with a secret its note repeats; the text
/// content says how many (the records are not repeated as text, so the message stays
/// near `bytes`).
fn huge_structured(bytes: usize) -> CallToolResult {
    const RECORD: usize = 256;
    let records: Vec<Value> = (0..bytes / RECORD)
        .map(|n| {
            let token = format!("tok-{n:08}-{:x}", n.wrapping_mul(2_654_435_761));
            json!({
                "id": n,
                "api_token": token,
                "note": format!("record {n} was signed with {token}"),
                "payload": "x".repeat(RECORD.saturating_sub(120)),
            })
        })
        .collect();
    let mut result = CallToolResult::structured(json!({ "records": records }));
    result.content = vec![ContentBlock::text(format!("{} records", bytes / RECORD))];
    result
}
