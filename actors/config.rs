//! What a host configures, and the context every actor of one runtime shares.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde::Serialize;

use super::approval::BrokerHandle;
use super::limiter::LimiterHandle;
use crate::authority::{ConnectPreview, HostPolicy};
use crate::events::{EventHub, EventSink, NullSink};

use crate::process::HostEnv;

/// A source of time, replaceable in tests (failure cache expiry, approval TTL).
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock {
    base: Instant,
    offset_ms: AtomicU64,
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock {
            base: Instant::now(),
            offset_ms: AtomicU64::new(0),
        }
    }
}

impl ManualClock {
    /// A clock at an arbitrary start.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.base + Duration::from_millis(self.offset_ms.load(Ordering::SeqCst))
    }
}

/// What is being approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Spawning or connecting to a server and listing its tools.
    Connect,
    /// Calling one tool.
    Call,
}

impl Action {
    /// `connect` or `call`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Connect => "connect",
            Action::Call => "call",
        }
    }
}

/// A question for the host's [`Approver`]. It carries no secret values.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRequest {
    /// Session asking.
    pub session: String,
    /// Connect or call.
    pub action: Action,
    /// Server id.
    pub server: String,
    /// Exposed tool name (calls).
    pub tool: Option<String>,
    /// The connect preview (for calls: the preview of the server being called).
    pub preview: ConnectPreview,
}

impl ApprovalRequest {
    /// Text for a terminal prompt, every untrusted field escaped.
    pub fn render(&self) -> String {
        match self.action {
            Action::Connect => self.preview.render(),
            Action::Call => format!(
                "MCP tool `{}` of server `{}` ({}) wants to run\n  risk: {}\n  capability: {}\n",
                crate::text::escape(self.tool.as_deref().unwrap_or("?")),
                crate::text::escape(&self.server),
                crate::text::escape(&self.preview.path),
                self.preview.risk,
                crate::text::escape(&self.preview.call_capability)
            ),
        }
    }
}

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// This time only.
    AllowOnce,
    /// For the rest of the session (until the declaration changes).
    AllowSession,
    /// No.
    Deny,
}

impl ApprovalAnswer {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::AllowOnce => "allow_once",
            ApprovalAnswer::AllowSession => "allow_session",
            ApprovalAnswer::Deny => "deny",
        }
    }
}

/// The host's human (or policy) in the loop. Called one request at a time by the
/// approval broker; it may take as long as a human needs.
pub trait Approver: Send + Sync + 'static {
    /// Decides one request.
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer>;
}

/// Answers every request the same way.
#[derive(Debug, Clone, Copy)]
pub struct FixedApprover(pub ApprovalAnswer);

impl Approver for FixedApprover {
    fn decide(&self, _request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let answer = self.0;
        Box::pin(async move { answer })
    }
}

/// Everything a host sets when starting a runtime.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Runtime home (`~/.demiurge`): logs, event logs, the servers' HOME.
    pub home: PathBuf,
    /// Servers connecting at once, across all sessions.
    pub discovery_limit: usize,
    /// How long a server failure is cached.
    pub failure_ttl: Duration,
    /// How long an allow-for-session answer lasts.
    pub approval_session_ttl: Duration,
    /// Time between closing stdin, SIGTERM and SIGKILL when closing a server.
    pub close_grace: Duration,
    /// The human in the loop.
    pub approver: Arc<dyn Approver>,
    /// Where events go (besides the JSONL log).
    pub events: Arc<dyn EventSink>,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Host environment: the allowlist's source and `${NAME}` values.
    pub host_env: HostEnv,
    /// Approval floors.
    pub host_policy: HostPolicy,
    /// Tools of other sources the host registers; an MCP tool may not take their names.
    pub host_tools: Vec<HostTool>,
    /// The URL policy for streamable HTTP servers (trusted networks come from the host,
    /// never from a manifest).
    pub url_policy: crate::net::UrlPolicy,
    /// Where names are resolved (hickory by default; a static table in tests).
    pub resolver: Arc<dyn crate::net::Resolver>,
    /// Extra TLS root certificates (DER) trusted besides the webpki roots.
    pub extra_roots: Vec<Vec<u8>>,
    /// Make the host process a child subreaper (Linux) so that a process which
    /// double-forks away from its server is adopted by the host and ended with that
    /// server, instead of living on under init. On by default; a host that spawns
    /// daemonizing children of its own and relies on init to reap them may turn it off.
    pub adopt_orphans: bool,
}

/// A tool the host registers from another source (built-in or authored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostTool {
    /// Its exposed name.
    pub name: String,
    /// Where it comes from: `builtin:<name>` or `authored:<path>`.
    pub provenance: String,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("home", &self.home)
            .field("discovery_limit", &self.discovery_limit)
            .field("failure_ttl", &self.failure_ttl)
            .finish_non_exhaustive()
    }
}

impl RuntimeConfig {
    /// Defaults of decisions.md section 12, with `home`, denying every prompt until the
    /// host sets an approver.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            home: home.into(),
            discovery_limit: 4,
            failure_ttl: Duration::from_secs(30),
            approval_session_ttl: Duration::from_secs(8 * 3600),
            close_grace: Duration::from_secs(2),
            approver: Arc::new(FixedApprover(ApprovalAnswer::Deny)),
            events: Arc::new(NullSink),
            clock: Arc::new(SystemClock),
            host_env: HostEnv::from_process(),
            host_policy: HostPolicy::default(),
            host_tools: Vec::new(),
            url_policy: crate::net::UrlPolicy::new(),
            resolver: Arc::new(crate::net::HickoryResolver::from_system()),
            extra_roots: Vec::new(),
            adopt_orphans: true,
        }
    }

    /// The default home: `$DEMIURGE_HOME`, else `~/.demiurge`.
    pub fn default_home(env: &HostEnv) -> PathBuf {
        if let Some(h) = env.get("DEMIURGE_HOME").filter(|h| !h.is_empty()) {
            return PathBuf::from(h);
        }
        PathBuf::from(env.get("HOME").unwrap_or(".")).join(".demiurge")
    }

    /// Sets the approver.
    pub fn with_approver(mut self, approver: impl Approver) -> Self {
        self.approver = Arc::new(approver);
        self
    }

    /// Sets the event sink.
    pub fn with_events(mut self, events: impl EventSink) -> Self {
        self.events = Arc::new(events);
        self
    }

    /// Sets the clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the host environment.
    pub fn with_host_env(mut self, env: HostEnv) -> Self {
        self.host_env = env;
        self
    }
}

/// The context shared by every actor of one runtime.
pub(crate) struct Shared {
    pub config: RuntimeConfig,
    pub hub: Arc<EventHub>,
    pub net: Arc<crate::net::NetContext>,
    /// Parsed declarations reused across turns and sessions while their files are unchanged.
    pub load_cache: Arc<crate::core::LoadCache>,
    /// Live revisions of cores that follow their live ref, kept while the ref is unchanged.
    pub live_revisions: Arc<crate::evolution::LiveRevisions>,
    /// Cores as committed in their live revision (what such sessions run).
    pub live_cores: Arc<crate::evolution::LiveCores>,
    /// Tool input schemas shared by every connection that lists the same one.
    pub schemas: super::catalog::SchemaPool,
    pub limiter: LimiterHandle,
    pub broker: BrokerHandle,
    /// Every process the stdio servers started, and the reaper that outlives the host.
    pub processes: Arc<crate::process::Registry>,
    ids: AtomicU64,
}

impl Shared {
    pub fn new(
        config: RuntimeConfig,
        hub: Arc<EventHub>,
        net: Arc<crate::net::NetContext>,
        limiter: LimiterHandle,
        broker: BrokerHandle,
    ) -> Self {
        let processes =
            crate::process::Registry::new(&config.home.join("mcp-home"), config.adopt_orphans);
        Shared {
            processes,
            config,
            hub,
            net,
            load_cache: Arc::default(),
            live_revisions: Arc::default(),
            live_cores: Arc::default(),
            schemas: Default::default(),
            limiter,
            broker,
            ids: AtomicU64::new(1),
        }
    }

    /// A runtime-unique number (catalog and connection ids).
    pub fn next_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    pub fn now(&self) -> Instant {
        self.config.clock.now()
    }

    /// The dedicated HOME of stdio servers.
    pub fn server_home(&self) -> PathBuf {
        self.config.home.join("mcp-home")
    }
}
