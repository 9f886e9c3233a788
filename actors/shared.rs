//! The context every actor of one runtime shares: the configuration, the event hub,
//! the network context, the caches that outlive sessions, and handles on the helpers.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::broker::BrokerHandle;
use super::config::RuntimeConfig;
use super::limiter::LimiterHandle;
use crate::events::EventHub;
use crate::offer::SchemaPool;

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
    pub schemas: SchemaPool,
    /// What is known of the tools connections list (how they shape, their digests and
    /// flags), worked out once for equal tools.
    pub tools: crate::offer::ToolMemo,
    pub limiter: LimiterHandle,
    pub broker: BrokerHandle,
    /// Every process the stdio servers started, and the reaper that outlives the host.
    pub processes: Arc<crate::process::Registry>,
    /// The sandbox's launchers, some made ahead of the starts that need them (none
    /// when no launcher is set: a confined server then fails closed).
    pub launchers: Option<Arc<crate::sandbox::Launchers>>,
    /// The era each `protocol: auto` server last spoke.
    pub eras: crate::transport::Eras,
    /// What servers served when a person approved them (`<home>/pins/`).
    pub pins: crate::pins::PinStore,
    /// Change sets a person refused, by session: not asked again in that session.
    pub refused_changes: crate::pins::Refused,
    /// The runtime home's real path, resolved when the runtime started (it was created
    /// just before): sessions check their workspace against it.
    pub real_home: std::path::PathBuf,
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
        let launchers = config.sandbox_launcher.clone().map(|path| {
            let dir = config.home.join("sandbox");
            crate::sandbox::Launchers::new(path, dir, config.sandbox_launch_ahead)
        });
        let pins = crate::pins::PinStore::open(&config.home);
        let real_home = config
            .home
            .canonicalize()
            .unwrap_or_else(|_| config.home.clone());
        Shared {
            processes,
            launchers,
            config,
            hub,
            net,
            load_cache: Arc::default(),
            live_revisions: Arc::default(),
            live_cores: Arc::default(),
            schemas: Default::default(),
            tools: Default::default(),
            eras: Default::default(),
            pins,
            refused_changes: Default::default(),
            limiter,
            broker,
            real_home,
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
