//! MCP client connections: starting or reaching a server, listing its tools, calling
//! them, and closing without leaving anything behind.
//!
//! Used only by the connection actor and the catalog's preparation task; nothing here
//! knows about sessions or authority.

mod client;
mod framing;
mod guard;
mod http;
mod stdio;

pub use client::{
    CallFailure, ClientHandler, CloseReport, ListedTools, MAX_TOOL_PAGES, MAX_TOOLS, McpClient,
    ServerSignals, call_tool, list_tools,
};
pub use framing::MAX_MESSAGE_BYTES;
pub use guard::{
    MAX_BYTES_PER_SECOND, MAX_MESSAGES_PER_SECOND, MAX_PENDING_SERVER_REQUESTS,
    MAX_REQUEST_ID_BYTES, TransportEnd,
};
pub use http::connect_http;
pub use stdio::{StdioLaunch, connect_stdio};
