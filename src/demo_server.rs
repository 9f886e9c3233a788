//! The built-in demo MCP server (`demiurge demo-server`), written with rmcp.
//!
//! Small and obviously correct: it is the real server behind `demo`, the integration
//! tests and the benches. Tools: `echo`, `add`, `sleep` (cancellable), `in_flight`,
//! `fail`, `whoami`, `env_names`, `cwd`, `stderr`, `add_tool` (adds a tool and sends
//! `notifications/tools/list_changed`), plus `--extra-tools N` generated tools served
//! `--page-size` per page (to exercise pagination).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use serde_json::json;

/// How the demo server is shaped.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Generated `extra_<n>` tools on top of the built-in ones.
    pub extra_tools: usize,
    /// Tools per `tools/list` page (0: everything in one page).
    pub page_size: usize,
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
}

#[tool_router]
impl DemoServer {
    #[tool(description = "Return the message unchanged")]
    async fn echo(&self, Parameters(args): Parameters<MessageArgs>) -> String {
        args.message
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
        }
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
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_instructions(
            "The demiurge demo server: echo, add, sleep, fail, whoami, env_names, cwd, stderr",
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
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

/// Serves the demo server on stdin/stdout until the client closes stdin.
///
/// # Errors
/// When the MCP session cannot be established.
pub async fn serve_stdio(options: DemoOptions) -> anyhow::Result<()> {
    let service = DemoServer::new(options)
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
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
) -> anyhow::Result<()> {
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
