//! A bare relay (`demo-server --forward`): rmcp's server in front of rmcp's client of a
//! demo server it starts as its child, passing `tools/list` and `tools/call` through as
//! they are. No authority, approval, redaction or view: what any gateway built on rmcp
//! costs at the least, the baseline `demiurge serve` is measured against (`benches/reach.rs`).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

use super::Error;

/// The relay's handler: the child demo server's client.
struct Relay {
    downstream: RunningService<RoleClient, ()>,
}

fn relayed(error: rmcp::ServiceError) -> ErrorData {
    ErrorData::internal_error(error.to_string(), None)
}

impl ServerHandler for Relay {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.downstream.list_tools(request).await.map_err(relayed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = self.downstream.call_tool(request).await.map_err(relayed)?;
        Ok(result.into())
    }
}

/// Starts a demo server (this executable, `demo-server`) and relays stdin/stdout to it
/// until the client closes stdin; the child ends with the relay.
///
/// # Errors
/// When the child cannot start or either MCP session cannot be established.
pub async fn forward_stdio() -> Result<(), Error> {
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    command.arg("demo-server").kill_on_drop(true);
    let downstream = ().serve(rmcp::transport::TokioChildProcess::new(command)?).await?;
    let service = Relay { downstream }.serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
