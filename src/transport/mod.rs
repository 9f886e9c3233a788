//! MCP client connections: starting or reaching a server, listing its tools, calling
//! them, and closing without leaving anything behind.
//!
//! One entry point, [`connect`], over a [`Launch`] of either transport, with one error
//! type. Used only by the actors' connect pipeline and connection actors; nothing here
//! knows about sessions or authority.

mod client;
mod eras;
mod failure;
mod framing;
mod guard;
mod http;
mod listen;
mod notices;
mod oauth;
mod requests;
mod rounds;
mod signals;
mod stdio;
mod task_handle;
mod tasks;
mod trace;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use client::McpClient;
pub use eras::{Eras, MAX_REMEMBERED_ERAS};
pub use failure::CallFailure;
pub use framing::MAX_MESSAGE_BYTES;
pub use guard::{
    MAX_BYTES_PER_SECOND, MAX_MESSAGES_PER_SECOND, MAX_PENDING_SERVER_REQUESTS,
    MAX_REQUEST_ID_BYTES, TransportEnd,
};
pub(crate) use http::HttpLaunch;
pub(crate) use listen::Listener;
pub use listen::MAX_RESOURCE_SUBSCRIPTIONS;
pub use notices::{
    CallWatch, NOTICE_BURST, NOTICES_PER_SECOND, Notice, NoticeRoute, Notices, Progress,
    ProgressSink,
};
pub(crate) use oauth::OAuthLaunch;
pub use oauth::{
    AUTHORIZATION_TIMEOUT, MAX_STEP_UPS, OAUTH_PHASE_TIMEOUT, token_file, token_files_of,
};
pub use requests::{
    CallTiming, Identity, ListedTools, MAX_TOOL_PAGES, MAX_TOOLS, Offer, call_tool, get_prompt,
    list_tools, read_resource, set_level, subscribe,
};
pub use rounds::{
    MAX_INPUT_KEY_BYTES, MAX_INPUT_REQUESTS, MAX_INPUT_ROUNDS, MAX_REQUEST_STATE_BYTES,
};
pub use signals::{ElicitRoute, ServerSignals};
pub(crate) use signals::{PROMPTS, RESOURCES, TOOLS};
pub(crate) use stdio::StdioLaunch;
pub use task_handle::{TaskHandle, TaskSeen};
pub use tasks::{MAX_TASK_ID_BYTES, MAX_TASK_POLL, MIN_TASK_POLL};
pub use trace::{Stage, StageKind, Stages, TraceHeader};

/// How to reach one server, authorized and interpolated.
#[derive(Debug)]
pub(crate) enum Launch {
    /// Start a child process.
    Stdio(StdioLaunch),
    /// Reach a streamable HTTP endpoint.
    Http(HttpLaunch),
}

/// Why a connect did not end with a listed server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConnectErrorKind {
    /// The program could not be started.
    Spawn,
    /// The server or the transport failed during initialize or `tools/list`.
    Failed,
    /// Nothing came back within the connect timeout.
    TimedOut,
    /// The server needs authorization that could not be obtained (declined, no way to
    /// ask, or the OAuth flow failed).
    Authorization,
}

impl ConnectErrorKind {
    /// Its name in events and spans (`spawn`, `failed`, `timed_out`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ConnectErrorKind::Spawn => "spawn",
            ConnectErrorKind::Failed => "failed",
            ConnectErrorKind::TimedOut => "timed_out",
            ConnectErrorKind::Authorization => "authorization",
        }
    }
}

/// A connect that failed, with what the server left behind.
#[derive(Debug, Clone)]
pub struct ConnectError {
    /// What kind of failure.
    pub kind: ConnectErrorKind,
    /// What happened, in words (not yet redacted: the caller knows the secrets).
    pub message: String,
    /// The stderr log, when the failed server's stderr was appended to it.
    pub logged: Option<PathBuf>,
    /// The last lines of that stderr (redacted, escaped, cut): often the reason
    /// (`. is not a valid Git repository`, a traceback's last line).
    pub stderr_tail: Vec<String>,
}

/// Starts or reaches the server, initializes MCP and lists every page of tools, all
/// within `timeout`; notifications go to `signals`. A stdio server that fails is ended
/// (its whole tree) and its stderr logged before this returns.
///
/// # Errors
/// [`ConnectError`].
pub(crate) async fn connect(
    launch: Launch,
    signals: Arc<ServerSignals>,
    timeout: Duration,
    grace: Duration,
) -> Result<(McpClient, ListedTools), ConnectError> {
    match launch {
        Launch::Stdio(launch) => stdio::connect(launch, signals, timeout, grace).await,
        Launch::Http(launch) => http::connect(launch, signals, timeout).await,
    }
}
