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

/// How the demo server is shaped.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Generated `extra_<n>` tools on top of the built-in ones.
    pub extra_tools: usize,
    /// Tools per `tools/list` page (0: everything in one page).
    pub page_size: usize,
    /// A JSON file of tools (`[{"name", "description"}]`) served after the built-in
    /// ones, read anew at every listing: tests reorder, change or drop tools between
    /// connections with it. A call to one answers `ran <name>`; one with an `elicit`
    /// (`{"message", "requestedSchema"}`) first asks the client that, and answers with
    /// what came back.
    pub tools_file: Option<std::path::PathBuf>,
    /// A way to misbehave, for fault-injection tests.
    pub fault: Option<Fault>,
}

/// How the demo server misbehaves (`demiurge demo-server --fault MODE [N]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Exit with status 1 before speaking MCP.
    ExitAtStart,
    /// Never answer `initialize`.
    HangInitialize,
    /// Never answer `tools/list`.
    HangList,
    /// Exit in the middle of any tool call.
    CrashOnCall,
    /// Never answer a tool call (and ignore cancellation).
    HangCall,
    /// Write non-JSON lines to stdout before serving.
    GarbageStdout,
    /// Serve N generated tools, 100 per page.
    HugeTools(usize),
    /// Answer every tool call with N bytes of text.
    HugeResult(usize),
    /// `huge-result` written as the TypeScript SDK writes: every message's `id` last.
    HugeResultIdLast(usize),
    /// Answer every tool call with about N bytes of `structuredContent`: records of 256
    /// bytes, each with a sensitive key (`api_token`) whose value its note repeats.
    HugeStructured(usize),
    /// Write N bytes to stderr before serving.
    StderrFlood(usize),
    /// Write every answer one byte at a time.
    SlowDrip,
    /// Start a grandchild (`sleep 300`) and leave it behind.
    ForkChild,
    /// Send `notifications/tools/list_changed` every millisecond once initialized.
    ListChangedStorm,
    /// List tools with control characters in names, 10,000-character descriptions and
    /// duplicate names (a raw JSON-RPC server, not rmcp).
    HostileTools,
    /// List a tool whose input schema is not an object (raw JSON-RPC).
    BadSchema,
    /// Answer tool calls with JSON nested 300 levels deep.
    NestedResult,
    /// After listing tools, stop reading stdin and write requests the client cannot read
    /// (an id and a method, but invalid params), as fast as the pipe takes them.
    FloodUnreadable,
    /// After listing tools, stop reading stdin and send valid `ping` requests without end.
    FloodPings,
    /// Write unreadable requests from the start, never answering `initialize`.
    FloodAtConnect,
    /// After listing tools, send log notifications without end while reading stdin: a
    /// flood that asks for nothing back.
    FloodNotifications,
    /// After listing tools, stop reading stdin and send `ping` requests that all reuse
    /// one id.
    FloodSameId,
    /// After listing tools, stop reading stdin and send each `ping` followed by its own
    /// `notifications/cancelled`.
    FloodCancelled,
    /// After listing tools, send `ping` requests whose ids are a megabyte long.
    FloodLongIds,
    /// Keep running after stdin closes (a server that ignores EOF).
    IgnoreEof,
    /// A raw JSON-RPC server whose tools ask the client for input with odd schemas:
    /// `ask_no_properties` (an object schema without `properties`), `ask_deep` (a
    /// property nested 300 levels deep) and `ask_plain`; each answers with the
    /// client's reply to its elicitation, as JSON text.
    OddElicitations,
    /// Refuse a legacy `initialize` with `-32022` and `2026-07-28` as the only
    /// supported version, as a modern-only server does, and stay up.
    ModernOnly,
}

impl Fault {
    /// Parses `MODE` and its optional size argument.
    ///
    /// # Errors
    /// An unknown mode or a missing/invalid size, with the list of modes.
    pub fn parse(mode: &str, arg: Option<&str>) -> Result<Fault, String> {
        let size = || {
            arg.and_then(|a| a.parse::<usize>().ok()).ok_or_else(|| {
                format!("fault `{mode}` needs a size, for example `--fault {mode} 1000`")
            })
        };
        Ok(match mode {
            "exit-at-start" => Fault::ExitAtStart,
            "hang-initialize" => Fault::HangInitialize,
            "hang-list" => Fault::HangList,
            "crash-on-call" => Fault::CrashOnCall,
            "hang-call" => Fault::HangCall,
            "garbage-stdout" => Fault::GarbageStdout,
            "huge-tools" => Fault::HugeTools(size()?),
            "huge-result" => Fault::HugeResult(size()?),
            "huge-result-id-last" => Fault::HugeResultIdLast(size()?),
            "huge-structured" => Fault::HugeStructured(size()?),
            "stderr-flood" => Fault::StderrFlood(size()?),
            "slow-drip" => Fault::SlowDrip,
            "fork-child" => Fault::ForkChild,
            "list-changed-storm" => Fault::ListChangedStorm,
            "hostile-tools" => Fault::HostileTools,
            "bad-schema" => Fault::BadSchema,
            "nested-result" => Fault::NestedResult,
            "flood-unreadable" => Fault::FloodUnreadable,
            "flood-pings" => Fault::FloodPings,
            "flood-at-connect" => Fault::FloodAtConnect,
            "flood-notifications" => Fault::FloodNotifications,
            "flood-same-id" => Fault::FloodSameId,
            "flood-cancelled" => Fault::FloodCancelled,
            "flood-long-ids" => Fault::FloodLongIds,
            "ignore-eof" => Fault::IgnoreEof,
            "odd-elicitations" => Fault::OddElicitations,
            "modern-only" => Fault::ModernOnly,
            other => {
                return Err(format!(
                    "unknown fault `{other}`; modes: exit-at-start, hang-initialize, hang-list, crash-on-call, hang-call, garbage-stdout, huge-tools N, huge-result BYTES, huge-result-id-last BYTES, huge-structured BYTES, stderr-flood BYTES, slow-drip, fork-child, list-changed-storm, hostile-tools, bad-schema, nested-result, flood-unreadable, flood-pings, flood-notifications, flood-same-id, flood-cancelled, flood-long-ids, flood-at-connect, ignore-eof, odd-elicitations, modern-only"
                ));
            }
        })
    }
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

    #[tool(description = "Return this server's process id")]
    async fn whoami(&self) -> CallToolResult {
        CallToolResult::structured(json!({ "pid": std::process::id() }))
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
        let _ = context.peer.notify_tool_list_changed().await;
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
        if rank < self.log_level.load(Ordering::SeqCst) {
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
        let _ = context.peer.notify_resource_list_changed().await;
        format!("added {uri}")
    }

    #[tool(description = "Send notifications/resources/updated for `uri`")]
    async fn touch(
        &self,
        Parameters(UriArgs { uri }): Parameters<UriArgs>,
        context: RequestContext<RoleServer>,
    ) -> String {
        let note = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
        let _ = context.peer.notify_resource_updated(note).await;
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
            log_level: Arc::default(),
        }
    }

    /// The tools of [`DemoOptions::tools_file`] as it reads now (none when unreadable).
    fn file_tools(&self) -> Vec<(String, String)> {
        let Some(path) = &self.options.tools_file else {
            return Vec::new();
        };
        let listed: Vec<Value> = std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        listed
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?.to_string();
                let description = t.get("description").and_then(Value::as_str);
                Some((
                    name,
                    description.unwrap_or("From the tools file").to_string(),
                ))
            })
            .collect()
    }

    /// The elicitation a tools-file tool asks before answering, if it has one.
    fn file_elicitation(&self, tool: &str) -> Option<rmcp::model::ElicitRequestParams> {
        let path = self.options.tools_file.as_ref()?;
        let listed: Vec<Value> = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let entry = listed
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))?;
        let mut asked = entry.get("elicit")?.clone();
        asked.as_object_mut()?.insert("mode".into(), json!("form"));
        serde_json::from_value(asked).ok()
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
        tools.extend(
            self.file_tools()
                .into_iter()
                .map(|(name, description)| Tool::new(name, description, Arc::clone(&schema))),
        );
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

impl ServerHandler for DemoServer {
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        if self.options.fault == Some(Fault::HangInitialize) {
            std::future::pending::<()>().await;
        }
        if self.options.fault == Some(Fault::ModernOnly) {
            // What a 2026-07-28-only server answers a legacy `initialize`.
            return Err(ErrorData::unsupported_protocol_version(
                request.protocol_version,
                &[rmcp::model::ProtocolVersion::V_2026_07_28],
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if self.options.fault == Some(Fault::ListChangedStorm) {
            tokio::spawn(async move {
                while context.peer.notify_tool_list_changed().await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_prompts()
                .enable_logging()
                .build(),
        )
        .with_instructions(
            "The demiurge demo server: echo, add, sleep, fail, whoami, env_names, cwd, stderr",
        )
    }

    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(request.level).unwrap_or_default();
        let rank = LEVELS
            .iter()
            .position(|l| Some(*l) == level.as_str())
            .unwrap_or(0);
        self.log_level.store(rank, Ordering::SeqCst);
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        let mut resources = vec![
            rmcp::model::Resource::new("demo://readme", "readme")
                .with_description("What this server is")
                .with_mime_type("text/plain"),
            rmcp::model::Resource::new("demo://cwd", "cwd")
                .with_description("The server's working directory"),
            rmcp::model::Resource::new("demo://pixel", "pixel")
                .with_description("A binary resource: eight bytes of image/png")
                .with_mime_type("image/png"),
        ];
        let added = self
            .added_resources
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default();
        resources.extend(
            added
                .into_iter()
                .map(|uri| rmcp::model::Resource::new(uri.clone(), uri)),
        );
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        let template = rmcp::model::ResourceTemplate::new("demo://env/{name}", "env")
            .with_description("The value of one of this server's environment variables");
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            vec![template],
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        if uri == "demo://pixel" {
            // The PNG signature: eight bytes, base64.
            let blob = rmcp::model::ResourceContents::blob("iVBORw0KGgo=", uri.clone())
                .with_mime_type("image/png");
            return Ok(rmcp::model::ReadResourceResult::new(vec![blob]).into());
        }
        let text = if uri == "demo://readme" {
            "The demiurge demo server, written with rmcp.".to_string()
        } else if uri == "demo://cwd" {
            std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        } else if let Some(name) = uri.strip_prefix("demo://env/") {
            std::env::var(name).unwrap_or_default()
        } else if self.added_resources.lock().is_ok_and(|a| a.contains(&uri)) {
            format!("added resource {uri}")
        } else {
            return Err(ErrorData::resource_not_found("no such resource", None));
        };
        let contents = vec![rmcp::model::ResourceContents::text(text, uri)];
        Ok(rmcp::model::ReadResourceResult::new(contents).into())
    }

    async fn subscribe(
        &self,
        _request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        let argument = rmcp::model::PromptArgument::new("name")
            .with_description("Who to greet")
            .with_required(true);
        let prompt =
            rmcp::model::Prompt::new("greet", Some("Greet someone by name"), Some(vec![argument]));
        Ok(rmcp::model::ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        if request.name != "greet" {
            return Err(ErrorData::invalid_params("no such prompt", None));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorData::invalid_params("`name` is required", None))?;
        let message = rmcp::model::PromptMessage::new_text(
            rmcp::model::Role::User,
            format!("Say hello to {name}."),
        );
        Ok(rmcp::model::GetPromptResult::new(vec![message])
            .with_description("A greeting")
            .into())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if self.options.fault == Some(Fault::HangList) {
            std::future::pending::<()>().await;
        }
        let tools = self.all_tools();
        let start: usize = match request.and_then(|r| r.cursor) {
            Some(c) => c
                .parse()
                .map_err(|_| ErrorData::invalid_params("bad cursor", None))?,
            None => 0,
        };
        let size = if self.options.page_size == 0 {
            tools.len().max(1)
        } else {
            self.options.page_size
        };
        let end = (start + size).min(tools.len());
        let page = tools
            .get(start.min(tools.len())..end)
            .unwrap_or_default()
            .to_vec();
        Ok(ListToolsResult {
            result_type: Some(ResultType::COMPLETE),
            tools: page,
            meta: None,
            next_cursor: (end < tools.len()).then(|| end.to_string()),
            ttl_ms: None,
            cache_scope: None,
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match self.options.fault {
            Some(Fault::CrashOnCall) => {
                eprintln!("demo server: crashing in the middle of a call, as asked");
                std::process::exit(3);
            }
            Some(Fault::HangCall) => std::future::pending::<()>().await,
            Some(Fault::HugeResult(bytes) | Fault::HugeResultIdLast(bytes)) => {
                let text = "x".repeat(bytes);
                return Ok(CallToolResponse::Complete(CallToolResult::success(vec![
                    ContentBlock::text(text),
                ])));
            }
            Some(Fault::HugeStructured(bytes)) => {
                return Ok(CallToolResponse::Complete(huge_structured(bytes)));
            }
            Some(Fault::NestedResult) => {
                let mut value = json!("bottom");
                // Deeper than any JSON parser's default limit (serde_json: 128), not so
                // deep that building it overflows this server's own stack.
                for _ in 0..300 {
                    value = json!([value]);
                }
                return Ok(CallToolResponse::Complete(CallToolResult::structured(
                    json!({ "deep": value }),
                )));
            }
            _ => {}
        }
        let added = self
            .added
            .lock()
            .is_ok_and(|a| a.iter().any(|t| *t == request.name));
        if added {
            let result = CallToolResult::success(vec![ContentBlock::text(format!(
                "added tool {}",
                request.name
            ))]);
            return Ok(CallToolResponse::Complete(result));
        }
        if self
            .file_tools()
            .iter()
            .any(|(name, _)| *name == request.name)
        {
            let mut text = format!("ran {}", request.name);
            if let Some(asked) = self.file_elicitation(&request.name) {
                let answer = context.peer.create_elicitation(asked).await;
                text = match answer {
                    Ok(answer) => serde_json::to_string(&answer).unwrap_or_default(),
                    Err(e) => format!("elicitation failed: {e}"),
                };
            }
            let result = CallToolResult::success(vec![ContentBlock::text(text)]);
            return Ok(CallToolResponse::Complete(result));
        }
        if let Some(n) = request.name.strip_prefix("extra_") {
            let result =
                CallToolResult::success(vec![ContentBlock::text(format!("extra tool {n}"))]);
            return Ok(CallToolResponse::Complete(result));
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
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

/// Serves the demo server on stdin/stdout until the client closes stdin.
///
/// # Errors
/// When the MCP session cannot be established.
pub async fn serve_stdio(mut options: DemoOptions) -> Result<(), Error> {
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
        ) => {
            return serve_raw(options.fault).await;
        }
        _ => {}
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

/// Copies JSON lines from `from` to stdout with each message's `"id"` moved last.
async fn id_last(from: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut lines = BufReader::new(from).lines();
    let mut out = tokio::io::stdout();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut text = line.clone();
        if let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&line)
            && let Some(id) = message.remove("id")
        {
            text = Value::Object(message).to_string();
            text.pop();
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(&format!("\"id\":{id}}}"));
        }
        text.push('\n');
        if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// A writer that passes one byte per write: every answer arrives in fragments.
struct Drip<W>(W);

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Drip<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let one = &buf[..buf.len().min(1)];
        match std::pin::Pin::new(&mut self.0).poll_write(cx, one) {
            std::task::Poll::Ready(Ok(n)) => {
                // Flush each byte so it leaves as its own write.
                let _ = std::pin::Pin::new(&mut self.0).poll_flush(cx);
                std::task::Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A hand-written JSON-RPC server over stdio for answers rmcp's types cannot express.
async fn serve_raw(fault: Option<Fault>) -> Result<(), Error> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let tools = match fault {
        Some(Fault::BadSchema) => {
            json!([{ "name": "bad", "description": "schema is a string", "inputSchema": "not an object" }])
        }
        Some(Fault::OddElicitations) => json!([
            { "name": "ask_no_properties", "description": "asks with no properties", "inputSchema": {"type": "object"} },
            { "name": "ask_deep", "description": "asks with a deep schema", "inputSchema": {"type": "object"} },
            { "name": "ask_plain", "description": "asks for a name", "inputSchema": {"type": "object"} },
        ]),
        _ => json!([
            { "name": "bell\u{7}and\nnewline", "description": "control characters in the name", "inputSchema": {"type": "object"} },
            { "name": "long", "description": "d".repeat(10_000), "inputSchema": {"type": "object"} },
            { "name": "twin", "description": "first", "inputSchema": {"type": "object"} },
            { "name": "twin", "description": "second", "inputSchema": {"type": "object"} },
            { "name": "\u{0}", "description": "a NUL name", "inputSchema": {"type": "object"} },
        ]),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    if fault == Some(Fault::FloodAtConnect) {
        return flood(&mut out, Flood::Unreadable).await;
    }
    while let Some(line) = lines.next_line().await? {
        let Ok(request) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(id) = request.get("id").cloned() else {
            continue;
        };
        let result = match request.get("method").and_then(|m| m.as_str()) {
            Some("initialize") => json!({
                "protocolVersion": request["params"]["protocolVersion"].clone(),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"}
            }),
            Some("tools/list") => json!({ "tools": tools }),
            Some("tools/call") if fault == Some(Fault::OddElicitations) => {
                let tool = request["params"]["name"].as_str().unwrap_or_default();
                let reply = odd_elicitation(tool, &mut lines, &mut out).await?;
                json!({ "content": [{"type": "text", "text": reply.to_string()}] })
            }
            Some("tools/call") => {
                json!({ "content": [{"type": "text", "text": "hostile answer"}] })
            }
            _ => json!({}),
        };
        let listed = request.get("method").and_then(|m| m.as_str()) == Some("tools/list");
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
        match fault {
            // stdin is never read again from here on.
            Some(Fault::FloodUnreadable) if listed => {
                return flood(&mut out, Flood::Unreadable).await;
            }
            Some(Fault::FloodPings) if listed => return flood(&mut out, Flood::Pings).await,
            Some(Fault::FloodSameId) if listed => return flood(&mut out, Flood::SameId).await,
            Some(Fault::FloodCancelled) if listed => {
                return flood(&mut out, Flood::Cancelled).await;
            }
            Some(Fault::FloodLongIds) if listed => return flood(&mut out, Flood::LongIds).await,
            Some(Fault::FloodNotifications) if listed => {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return flood(&mut out, Flood::Notifications).await;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Asks the client for input with the schema `tool` names, and returns its reply (the
/// `result` or `error` of the answer to that request).
async fn odd_elicitation(
    tool: &str,
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>,
    out: &mut tokio::io::Stdout,
) -> Result<Value, Error> {
    use tokio::io::AsyncWriteExt;
    let schema = match tool {
        "ask_no_properties" => json!({"type": "object"}),
        "ask_deep" => {
            let mut deep = json!({"type": "string"});
            for _ in 0..300 {
                deep = json!({"type": "object", "properties": {"x": deep}});
            }
            json!({"type": "object", "properties": {"nested": deep}})
        }
        _ => {
            json!({"type": "object", "properties": {"name": {"type": "string", "default": "ann"}}})
        }
    };
    let asked = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
        "params": {"mode": "form", "message": "a question", "requestedSchema": schema}});
    out.write_all(format!("{asked}\n").as_bytes()).await?;
    out.flush().await?;
    while let Some(line) = lines.next_line().await? {
        let Ok(reply) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if reply.get("id") == Some(&json!("ask-1")) {
            return Ok(reply
                .get("result")
                .or_else(|| reply.get("error"))
                .cloned()
                .unwrap_or_default());
        }
    }
    Ok(json!("the client closed"))
}

/// What a flooding server writes.
#[derive(Clone, Copy)]
enum Flood {
    /// Requests with an id and a method but invalid params.
    Unreadable,
    /// Valid `ping` requests.
    Pings,
    /// Valid log notifications.
    Notifications,
    /// `ping` requests that all carry the same id.
    SameId,
    /// Each `ping` followed by its cancellation.
    Cancelled,
    /// `ping` requests with megabyte ids.
    LongIds,
}

/// Writes messages without end, as fast as the pipe takes them.
async fn flood(out: &mut tokio::io::Stdout, kind: Flood) -> Result<(), Error> {
    use tokio::io::AsyncWriteExt;
    for n in 0u64.. {
        let line = match kind {
            Flood::Pings => {
                json!({"jsonrpc": "2.0", "id": format!("flood-{n}"), "method": "ping"})
            }
            Flood::Unreadable => {
                json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": 5})
            }
            Flood::Notifications => json!({
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": format!("log line {n}")}
            }),
            Flood::SameId => json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            Flood::Cancelled => {
                let id = format!("c-{n}");
                let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
                out.write_all(format!("{ping}\n").as_bytes()).await?;
                json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": id}
                })
            }
            Flood::LongIds => {
                json!({"jsonrpc": "2.0", "id": format!("{n}-{}", "x".repeat(1 << 20)), "method": "ping"})
            }
        };
        out.write_all(format!("{line}\n").as_bytes()).await?;
    }
    Ok(())
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
