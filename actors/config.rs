//! What a host configures when it starts a runtime.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::authority::{ApprovalAnswer, Approver, FixedApprover, HostPolicy};
use crate::clock::{Clock, SystemClock};
use crate::events::{EventSink, NullSink};
use crate::process::HostEnv;

/// Everything a host sets when starting a runtime.
#[derive(Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Runtime home (`~/.demiurge`): logs, event logs, the servers' HOME.
    pub home: PathBuf,
    /// Servers connecting at once, across all sessions.
    pub discovery_limit: usize,
    /// How long a server failure is cached.
    pub failure_ttl: Duration,
    /// How long an allow-for-session answer lasts.
    pub approval_session_ttl: Duration,
    /// Who lets a user authorize a remote server (OAuth); by default nobody, and a
    /// server that needs authorization fails naming `demiurge auth login`.
    pub authorizer: Arc<dyn crate::authority::Authorizer>,
    /// Who answers a server's requests for user input (elicitation); by default
    /// nobody, and every request is declined.
    pub elicitor: Arc<dyn crate::authority::Elicitor>,
    /// How results are shaped: the token cap of the model and event views, and whether
    /// structured content is preferred over text for a view's text.
    pub result_shape: crate::result::ResultShape,
    /// How long one approval question may wait for the approver before it is denied
    /// (fail closed, `ApprovalSource::Deadline`); `None`: as long as a human needs.
    pub approval_deadline: Option<Duration>,
    /// Time between closing stdin, SIGTERM and SIGKILL when closing a server.
    pub close_grace: Duration,
    /// The human in the loop.
    pub approver: Arc<dyn Approver>,
    /// Where events go (besides the JSONL log).
    pub events: Arc<dyn EventSink>,
    /// How events reach `events`: through a bounded queue on a thread of its own by
    /// default (a slow host loses events, counted, rather than slowing calls).
    pub event_delivery: crate::events::EventDelivery,
    /// The JSONL session logs: on, rotated at 16 MiB, by default.
    pub event_log: crate::events::EventLog,
    /// What the failure cache and the allow-for-session cache read the time from (a
    /// [`crate::ManualClock`] makes their expiry testable).
    pub clock: Arc<dyn Clock>,
    /// Host environment: the allowlist's source and `${NAME}` values.
    pub host_env: HostEnv,
    /// The weakest approval policy any declaration gets, for connects and for calls
    /// (a declaration can ask for stricter, never for weaker).
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
    /// The confinement of a stdio server whose declaration has no `sandbox:`: by
    /// default [`crate::sandbox::Sandbox::confined_default`]; `None` or `Sandbox::Off`
    /// runs such a server unconfined (`docs/sandbox.md`).
    pub sandbox_default: Option<crate::sandbox::Sandbox>,
    /// Refuse, before approval, every stdio server that would run unconfined
    /// (`sandbox: off`, or none declared and no default): the floor declarations
    /// cannot go below.
    pub require_sandbox: bool,
    /// The binary that confines a stdio server and then becomes it: one whose `main`
    /// calls [`crate::sandbox::launcher::run_if_invoked`] first (the `demiurge`
    /// and `demiurge-sandbox` binaries do). Default [`crate::sandbox::launcher_path`]:
    /// a `demiurge-sandbox` beside this binary, else this binary when it is `demiurge`,
    /// else a `demiurge` beside it. `None`: a confined server fails closed.
    pub sandbox_launcher: Option<PathBuf>,
    /// Make a launcher ahead of the next confined start of each kind once one was
    /// needed (on by default): it waits with its namespaces and the rules every server
    /// gets already in force, so that later starts pay only for the server's own
    /// rules. It holds nothing of any server and ends with the runtime. Off: every
    /// confined start makes its launcher then, and no launcher waits.
    pub sandbox_launch_ahead: bool,
    /// What a server serves is pinned how: the default of declarations without
    /// `pinning:` (`strict`) and the floor none goes below (`off`) (`docs/design.md`).
    pub pinning: crate::pins::PinningPolicy,
    /// When a declaration without `start:` is started: `lazy` (the default) lists it
    /// from its last listing and starts it at its first call, read or prompt; `eager`
    /// starts every server for every turn.
    pub start: crate::core::Start,
    /// How long a server's last listing may stand in for it (`start: lazy`); past it,
    /// the server is started to list again (default one day).
    pub listing_ttl: Duration,
    /// The token budget of a turn's tool definitions; `None` (the default) offers every
    /// definition whole. A session's own budget (`SessionSpec::tool_budget`) wins.
    pub tool_budget: Option<crate::search::ToolBudget>,
    /// Where traces and metrics go (feature `otel`: the host's OpenTelemetry
    /// providers, `Telemetry::new`); nowhere by default.
    pub telemetry: crate::telemetry::Telemetry,
}

/// A tool the host registers from another source (built-in or authored).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostTool {
    /// Its exposed name.
    pub name: String,
    /// Where it comes from: `builtin:<name>` or `authored:<path>`.
    pub provenance: String,
}

impl HostTool {
    /// A host tool named `name`, from `provenance` (`builtin:<name>`, `authored:<path>`).
    pub fn new(name: impl Into<String>, provenance: impl Into<String>) -> Self {
        HostTool {
            name: name.into(),
            provenance: provenance.into(),
        }
    }
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
    /// Defaults of `docs/design.md#8-defaults`, with `home`, denying every prompt until the
    /// host sets an approver.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        RuntimeConfig {
            home: home.into(),
            discovery_limit: 4,
            failure_ttl: Duration::from_secs(30),
            approval_session_ttl: Duration::from_secs(8 * 3600),
            approval_deadline: None,
            result_shape: crate::result::ResultShape::default(),
            authorizer: Arc::new(crate::authority::NoAuthorizer),
            elicitor: Arc::new(crate::authority::DeclineElicitor),
            close_grace: Duration::from_secs(2),
            approver: Arc::new(FixedApprover(ApprovalAnswer::Deny)),
            events: Arc::new(NullSink),
            event_delivery: crate::events::EventDelivery::default(),
            event_log: crate::events::EventLog::default(),
            clock: Arc::new(SystemClock),
            host_env: HostEnv::from_process(),
            host_policy: HostPolicy::default(),
            host_tools: Vec::new(),
            url_policy: crate::net::UrlPolicy::new(),
            resolver: Arc::new(crate::net::HickoryResolver::from_system()),
            extra_roots: Vec::new(),
            adopt_orphans: true,
            sandbox_default: Some(crate::sandbox::Sandbox::confined_default()),
            require_sandbox: false,
            sandbox_launcher: crate::sandbox::launcher_path(),
            sandbox_launch_ahead: true,
            pinning: crate::pins::PinningPolicy::default(),
            start: crate::core::Start::Lazy,
            listing_ttl: Duration::from_secs(24 * 3600),
            tool_budget: None,
            telemetry: crate::telemetry::Telemetry::default(),
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

    /// Sets where traces and metrics go (feature `otel`).
    pub fn with_telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.telemetry = telemetry;
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
