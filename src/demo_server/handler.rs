//! What the demo server answers beside its tools: initialize, resources and their
//! templates and subscriptions, prompts, the log level, its tool list and calls (with
//! the faults that act there).

#![allow(deprecated)]

use super::*;

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

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        DemoServer::accepted(requested)
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.hold(context).await;
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.tasks
            .get_task(&request.task_id)
            .map(rmcp::model::GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, ErrorData> {
        if self.options.fault == Some(Fault::HangInitialize) {
            std::future::pending::<()>().await;
        }
        if self.options.fault == Some(Fault::LegacyOnly) {
            eprintln!("demo server: refused server/discover");
            return Err(ErrorData::method_not_found::<
                rmcp::model::DiscoverRequestMethod,
            >());
        }
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
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
                .enable_tasks()
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
        let mut prompts = vec![prompt];
        prompts.extend(self.file_prompts());
        Ok(rmcp::model::ListPromptsResult::with_all_items(prompts))
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
        if let Some(answer) = self.modern_answer(&request, &context) {
            return Ok(answer);
        }
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
        if self.file_tools().iter().any(|t| t.name == request.name) {
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
