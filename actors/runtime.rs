//! The runtime root actor: it supervises sessions, tracks one current session per lane
//! and schedules the tracked eviction of the previous one when another starts or
//! resumes. [`Runtime`] and [`Session`] are the host's handles.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::oneshot;

use super::approval::{Broker, BrokerArgs, BrokerHandle};
use super::catalog::ServerStatus;
use super::config::RuntimeConfig;
use super::limiter::{Limiter, LimiterHandle, LimiterStats};
use super::session::{
    EvictionReport, SessionActor, SessionArgs, SessionMsg, SessionSpec, SharedSpec,
};
use super::shared::Shared;
use super::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::{EventHub, EventKind, Opening};

/// Why a runtime request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// No session with that id was ever started in this runtime.
    #[error("unknown session `{0}`; start a session first")]
    UnknownSession(String),
    /// A session with that id is already live.
    #[error("session `{0}` is already live")]
    AlreadyLive(String),
    /// The workspace does not exist.
    #[error("workspace {0} does not exist; create it or pass another --workspace")]
    Workspace(String),
    /// The runtime is not running.
    #[error("the runtime is not running: {0}")]
    Unavailable(String),
    /// The runtime home cannot be used.
    #[error("the runtime home {0} cannot be used: {1}")]
    Home(String, String),
    /// The runtime home lies inside the session's workspace or core, where the core's
    /// author could plant dotfiles for the servers' dedicated HOME.
    #[error(
        "the runtime home {0} is inside the workspace or the agent core; choose a home outside both (--home DIR or DEMIURGE_HOME)"
    )]
    HomeInsideWorkspace(String),
}

/// A scheduled eviction the host can await.
#[derive(Debug)]
pub struct Eviction {
    /// The session being evicted.
    pub session: String,
    rx: oneshot::Receiver<EvictionReport>,
}

impl Eviction {
    /// Waits for the eviction to complete.
    ///
    /// # Errors
    /// When the session actor vanished without reporting.
    pub async fn wait(self) -> Result<EvictionReport, RuntimeError> {
        self.rx.await.map_err(|_| {
            RuntimeError::Unavailable(format!("the eviction of {} did not report", self.session))
        })
    }
}

/// What starting or resuming a session answers.
pub struct Opened {
    id: String,
    actor: ActorRef<SessionMsg>,
    spec: SharedSpec,
    scope: Option<CapabilitySet>,
    eviction: Option<Eviction>,
}

type OpenReply = RpcReplyPort<Result<Opened, RuntimeError>>;

struct Record {
    spec: SharedSpec,
    scope: Option<CapabilitySet>,
    actor: Option<ActorRef<SessionMsg>>,
}

impl Record {
    fn lane(&self) -> String {
        self.spec
            .read()
            .map(|s| s.0.lane.clone())
            .unwrap_or_default()
    }
}

/// Messages of the runtime actor.
pub enum RuntimeMsg {
    /// Start a session.
    Start {
        /// The spec.
        spec: SessionSpec,
        /// Delegated child scope (children take no lane).
        scope: Option<CapabilitySet>,
        /// The session and the eviction of the lane's previous session.
        reply: OpenReply,
    },
    /// Resume a known session.
    Resume {
        /// Session id.
        id: String,
        /// As for `Start`.
        reply: OpenReply,
    },
    /// Evict one session.
    Evict {
        /// Session id.
        id: String,
        /// Why.
        reason: String,
        /// The eviction, or `None` when the session is not live.
        reply: RpcReplyPort<Option<Eviction>>,
    },
    /// Evict everything and stop.
    Shutdown(RpcReplyPort<Vec<Eviction>>),
}

pub(crate) struct RuntimeActor;

pub(crate) struct RuntimeState {
    shared: Arc<Shared>,
    sessions: HashMap<String, Record>,
    lanes: HashMap<String, String>,
    /// Ended sessions kept for resume, oldest first; bounded by [`RESUMABLE`].
    ended: std::collections::VecDeque<String>,
}

/// How many ended sessions stay resumable; older ones are forgotten.
pub const RESUMABLE: usize = 256;

impl Actor for RuntimeActor {
    type Msg = RuntimeMsg;
    type State = RuntimeState;
    type Arguments = Arc<Shared>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        shared: Arc<Shared>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RuntimeState {
            shared,
            sessions: HashMap::new(),
            lanes: HashMap::new(),
            ended: std::collections::VecDeque::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RuntimeMsg::Start { spec, scope, reply } => {
                let result = state.start(&myself, spec, scope).await;
                let _ = reply.send(result);
            }
            RuntimeMsg::Resume { id, reply } => {
                let result = state.resume(&myself, &id).await;
                let _ = reply.send(result);
            }
            RuntimeMsg::Evict { id, reason, reply } => {
                let _ = reply.send(state.evict(&id, &reason));
            }
            RuntimeMsg::Shutdown(reply) => {
                let ids: Vec<String> = state.sessions.keys().cloned().collect();
                let evictions = ids
                    .iter()
                    .filter_map(|id| state.evict(id, "shutdown"))
                    .collect();
                let _ = reply.send(evictions);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorTerminated(cell, ..)
        | SupervisionEvent::ActorFailed(cell, _) = event
        {
            for (id, record) in state.sessions.iter_mut() {
                if record
                    .actor
                    .as_ref()
                    .is_some_and(|a| a.get_id() == cell.get_id())
                {
                    record.actor = None;
                    state.ended.push_back(id.clone());
                }
            }
        }
        Ok(())
    }
}

impl RuntimeState {
    /// Keeps the table of sessions bounded: live ones stay, ended ones up to
    /// [`RESUMABLE`], oldest forgotten first.
    fn forget_oldest_ended(&mut self) {
        self.ended
            .retain(|id| self.sessions.get(id).is_some_and(|r| r.actor.is_none()));
        while self.ended.len() >= RESUMABLE {
            if let Some(old) = self.ended.pop_front() {
                self.sessions.remove(&old);
            }
        }
    }

    async fn start(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        spec: SessionSpec,
        scope: Option<CapabilitySet>,
    ) -> Result<Opened, RuntimeError> {
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| new_session_id(self.shared.next_id()));
        if self.sessions.get(&id).is_some_and(|r| r.actor.is_some()) {
            return Err(RuntimeError::AlreadyLive(id));
        }
        let workspace_dir = spec
            .workspace
            .clone()
            .unwrap_or_else(|| spec.core_root.clone());
        let workspace = workspace_dir
            .canonicalize()
            .map_err(|_| RuntimeError::Workspace(workspace_dir.display().to_string()))?;
        home_outside(&self.shared.config.home, &workspace, &spec.core_root)?;
        self.forget_oldest_ended();
        self.sessions.insert(
            id.clone(),
            Record {
                spec: Arc::new(std::sync::RwLock::new((spec, workspace))),
                scope,
                actor: None,
            },
        );
        self.activate(myself, &id, Opening::Start).await
    }

    async fn resume(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: &str,
    ) -> Result<Opened, RuntimeError> {
        let record = self
            .sessions
            .get(id)
            .ok_or_else(|| RuntimeError::UnknownSession(id.to_string()))?;
        if let Some(actor) = &record.actor {
            let mut opened = opened(id, actor.clone(), record);
            if record.scope.is_none() {
                let lane = record.lane();
                opened.eviction = self.replace_in_lane(&lane, id);
            }
            return Ok(opened);
        }
        self.activate(myself, id, Opening::Resume).await
    }

    /// Spawns the session actor of a known record and makes it its lane's current one.
    async fn activate(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: &str,
        how: Opening,
    ) -> Result<Opened, RuntimeError> {
        let record = self
            .sessions
            .get(id)
            .ok_or_else(|| RuntimeError::UnknownSession(id.to_string()))?;
        let args = SessionArgs {
            shared: Arc::clone(&self.shared),
            id: id.to_string(),
            spec: Arc::clone(&record.spec),
            scope: record.scope.clone(),
        };
        let is_child = record.scope.is_some();
        let lane = record.lane();
        let principal = record
            .spec
            .read()
            .map(|s| s.0.principal.clone())
            .unwrap_or_default();
        let (actor, _) = Actor::spawn_linked(None, SessionActor, args, myself.get_cell())
            .await
            .map_err(|e| RuntimeError::Unavailable(e.to_string()))?;
        let Some(record) = self.sessions.get_mut(id) else {
            return Err(RuntimeError::UnknownSession(id.to_string()));
        };
        record.actor = Some(actor.clone());
        let mut opened = opened(id, actor, record);
        self.shared
            .hub
            .emit(id, EventKind::SessionStarted { how, principal });
        if !is_child {
            opened.eviction = self.replace_in_lane(&lane, id);
        }
        Ok(opened)
    }

    /// Makes `id` the lane's current session, scheduling the eviction of the previous.
    fn replace_in_lane(&mut self, lane: &str, id: &str) -> Option<Eviction> {
        let previous = self.lanes.insert(lane.to_string(), id.to_string())?;
        if previous == id {
            return None;
        }
        self.evict(&previous, "replaced")
    }

    fn evict(&mut self, id: &str, reason: &str) -> Option<Eviction> {
        let actor = self.sessions.get_mut(id)?.actor.take()?;
        self.ended.push_back(id.to_string());
        self.lanes.retain(|_, current| current != id);
        let (tx, rx) = oneshot::channel();
        let reason = reason.to_string();
        let grace = self.shared.config.close_grace;
        let shared = Arc::clone(&self.shared);
        let session = id.to_string();
        tokio::spawn(async move {
            let outcome = actor
                .call(
                    |reply| SessionMsg::Evict {
                        reason: reason.clone(),
                        reply,
                    },
                    Some(grace * 8 + Duration::from_secs(10)),
                )
                .await;
            if let Ok(ractor::rpc::CallResult::Success(report)) = outcome {
                let _ = tx.send(report);
            } else {
                // Stopping still closes the catalog in post_stop; the waiter learns
                // of the failure by the dropped sender, the host by the event.
                shared.hub.emit(
                    &session,
                    EventKind::SessionEvictionFailed {
                        reason,
                        message: "the session did not close in time; it was stopped".into(),
                    },
                );
                let _ = actor
                    .stop_and_wait(Some("eviction timed out".into()), Some(grace * 8))
                    .await;
            }
        });
        Some(Eviction {
            session: id.to_string(),
            rx,
        })
    }
}

/// Refuses a home inside the workspace or the core: the servers' HOME lives under it,
/// and a core author must not be able to plant its dotfiles (`.npmrc`, `.gitconfig`).
fn home_outside(
    home: &std::path::Path,
    workspace: &std::path::Path,
    core: &std::path::Path,
) -> Result<(), RuntimeError> {
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let core = core.canonicalize().unwrap_or_else(|_| core.to_path_buf());
    if home.starts_with(workspace) || home.starts_with(&core) {
        return Err(RuntimeError::HomeInsideWorkspace(
            home.display().to_string(),
        ));
    }
    Ok(())
}

fn opened(id: &str, actor: ActorRef<SessionMsg>, record: &Record) -> Opened {
    Opened {
        id: id.to_string(),
        actor,
        spec: Arc::clone(&record.spec),
        scope: record.scope.clone(),
        eviction: None,
    }
}

fn new_session_id(n: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest =
        crate::digest::sha256_hex(format!("{nanos}-{n}-{}", std::process::id()).as_bytes());
    format!("s-{}", &digest[..12])
}

/// The host's handle on a running runtime.
#[derive(Clone)]
pub struct Runtime {
    actor: ActorRef<RuntimeMsg>,
    shared: Arc<Shared>,
    helpers: Arc<Vec<ractor::ActorCell>>,
}

impl Runtime {
    /// Starts the actor system: the root, the discovery limiter and the approval broker.
    ///
    /// # Errors
    /// When an actor cannot start.
    pub async fn start(mut config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        let unavailable = |e: ractor::SpawnErr| RuntimeError::Unavailable(e.to_string());
        // A relative home would move with the working directory of whoever looks at it;
        // made absolute once, and created private (0700 whatever the umask).
        let home_error = |e: std::io::Error| {
            RuntimeError::Home(config.home.display().to_string(), e.to_string())
        };
        let home = std::path::absolute(&config.home).map_err(home_error)?;
        crate::process::private_dir(&home.join("runtime")).map_err(home_error)?;
        crate::process::private_dir(&home).map_err(home_error)?;
        config.home = home;
        let net = crate::net::NetContext::new(
            config.url_policy.clone(),
            Arc::clone(&config.resolver),
            &config.extra_roots,
        )
        .map_err(RuntimeError::Unavailable)?;
        let log_dir = config.home.join("runtime").join("session-events");
        let hub = Arc::new(EventHub::new(Arc::clone(&config.events), Some(log_dir)));
        let (limiter, _) = Actor::spawn(None, Limiter, config.discovery_limit)
            .await
            .map_err(unavailable)?;
        let broker_args = BrokerArgs {
            approver: Arc::clone(&config.approver),
            clock: Arc::clone(&config.clock),
            ttl: config.approval_session_ttl,
            hub: Arc::clone(&hub),
        };
        let (broker, _) = Actor::spawn(None, Broker, broker_args)
            .await
            .map_err(unavailable)?;
        let helpers = Arc::new(vec![limiter.get_cell(), broker.get_cell()]);
        let shared = Arc::new(Shared::new(
            config,
            hub,
            Arc::new(net),
            LimiterHandle::new(limiter),
            BrokerHandle::new(broker),
        ));
        let (actor, _) = Actor::spawn(None, RuntimeActor, Arc::clone(&shared))
            .await
            .map_err(unavailable)?;
        Ok(Runtime {
            actor,
            shared,
            helpers,
        })
    }

    /// Starts a session; the previous session of its lane is evicted (tracked).
    ///
    /// # Errors
    /// [`RuntimeError`].
    pub async fn start_session(
        &self,
        spec: SessionSpec,
    ) -> Result<(Session, Option<Eviction>), RuntimeError> {
        self.open(|reply| RuntimeMsg::Start {
            spec,
            scope: None,
            reply,
        })
        .await
    }

    /// Resumes a session started earlier in this runtime (evicted or not); the lane's
    /// other session is evicted (tracked).
    ///
    /// # Errors
    /// [`RuntimeError::UnknownSession`].
    pub async fn resume_session(
        &self,
        id: &str,
    ) -> Result<(Session, Option<Eviction>), RuntimeError> {
        let id = id.to_string();
        self.open(|reply| RuntimeMsg::Resume { id, reply }).await
    }

    async fn open(
        &self,
        msg: impl FnOnce(OpenReply) -> RuntimeMsg,
    ) -> Result<(Session, Option<Eviction>), RuntimeError> {
        match self.actor.call(msg, None).await {
            Ok(ractor::rpc::CallResult::Success(Ok(opened))) => {
                let Opened {
                    id,
                    actor,
                    spec,
                    scope,
                    eviction,
                } = opened;
                let session = Session {
                    id,
                    actor,
                    spec,
                    scope,
                    runtime: self.clone(),
                };
                Ok((session, eviction))
            }
            Ok(ractor::rpc::CallResult::Success(Err(e))) => Err(e),
            _ => Err(RuntimeError::Unavailable(
                "the runtime actor is gone".into(),
            )),
        }
    }

    /// Evicts one session: closes only its connections.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownSession`] when it is not live.
    pub async fn evict_session(&self, id: &str) -> Result<EvictionReport, RuntimeError> {
        let (id, reason) = (id.to_string(), "explicit".to_string());
        let eviction = match self
            .actor
            .call(
                |reply| RuntimeMsg::Evict {
                    id: id.clone(),
                    reason,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(e)) => e,
            _ => {
                return Err(RuntimeError::Unavailable(
                    "the runtime actor is gone".into(),
                ));
            }
        };
        eviction
            .ok_or(RuntimeError::UnknownSession(id))?
            .wait()
            .await
    }

    /// Discovery limiter counters.
    pub async fn limiter_stats(&self) -> LimiterStats {
        self.shared.limiter.stats().await
    }

    /// The runtime home.
    pub fn home(&self) -> &std::path::Path {
        &self.shared.config.home
    }

    /// The JSONL event log of a session.
    pub fn event_log_path(&self, session: &str) -> Option<PathBuf> {
        self.shared.hub.log_path(session)
    }

    /// Waits until every event emitted so far is in the JSONL logs.
    pub async fn flush_events(&self) {
        let hub = Arc::clone(&self.shared.hub);
        let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
    }

    /// Evicts every session (closing every connection and child process), then stops
    /// the actors. Bounded: a session that does not close in time is stopped, and its
    /// process groups are killed as their guards drop.
    pub async fn shutdown(&self) {
        let evictions = match self
            .actor
            .call(RuntimeMsg::Shutdown, Some(Duration::from_secs(10)))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(e)) => e,
            _ => Vec::new(),
        };
        let bound = self.shared.config.close_grace * 10 + Duration::from_secs(10);
        let _ = tokio::time::timeout(
            bound,
            futures::future::join_all(evictions.into_iter().map(Eviction::wait)),
        )
        .await;
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(bound))
            .await;
        self.flush_events().await;
        for helper in self.helpers.iter() {
            helper.stop(Some("shutdown".into()));
        }
        // Whatever a server left behind (orphans, a tree a stopped session did not end)
        // ends here; then the reaper goes.
        let processes = Arc::clone(&self.shared.processes);
        let _ = tokio::task::spawn_blocking(move || processes.shutdown()).await;
    }
}

/// The host's handle on one session.
#[derive(Clone)]
pub struct Session {
    id: String,
    actor: ActorRef<SessionMsg>,
    /// The spec, shared with the session actor and the runtime's record.
    spec: SharedSpec,
    /// The delegated scope of a child session (children of children narrow it further).
    scope: Option<CapabilitySet>,
    runtime: Runtime,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).finish()
    }
}

impl Session {
    /// Session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Loads the core (off the actors, on a blocking thread) and resolves the turn's
    /// catalog.
    ///
    /// # Errors
    /// [`PrepareError`]: load errors, eviction, collisions.
    pub async fn prepare_turn(&self) -> Result<TurnCatalog, PrepareError> {
        let spec = self.spec().await.map_err(|_| PrepareError::Evicted)?;
        let track_live = spec.core_revision == super::session::LIVE_REVISION;
        let root = spec.core_root;
        let cache = Arc::clone(&self.runtime.shared.load_cache);
        // Inline, not on a blocking thread: a warm load reads one inotify descriptor
        // (or at worst lists one directory and stats its files), less than a hop.
        let live = track_live.then(|| self.runtime.shared.live_revisions.get(&root));
        // A core that follows its live revision runs exactly that commit, read as the
        // review read it: nothing in the working tree (untracked, ignored or edited
        // files) runs without a review. Without a live revision yet, the working tree.
        let core = match &live {
            Some(Some(commit)) => {
                let root = cache.canonical(&root);
                self.runtime.shared.live_cores.load(&root, commit)?
            }
            _ => crate::core::load_cached(&root, &cache)?,
        };
        let revision = live.map(|live| format!("live:{}", live.as_deref().unwrap_or("none")));
        match self
            .actor
            .call(
                |reply| SessionMsg::PrepareTurn {
                    core,
                    revision,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            _ => Err(PrepareError::Evicted),
        }
    }

    /// Changes what the session acts with: principal, capabilities, core root and
    /// revision, workspace, policy (the id and lane stay). A change of anything in the
    /// catalog identity closes every connection of the old identity at the next turn.
    ///
    /// # Errors
    /// [`RuntimeError::Workspace`] when the workspace does not exist;
    /// [`RuntimeError::Unavailable`] when the session is gone.
    pub async fn update(&self, change: impl FnOnce(&mut SessionSpec)) -> Result<(), RuntimeError> {
        let mut spec = self.spec().await?;
        let (id, lane) = (spec.id.clone(), spec.lane.clone());
        change(&mut spec);
        (spec.id, spec.lane) = (id, lane);
        let dir = spec
            .workspace
            .clone()
            .unwrap_or_else(|| spec.core_root.clone());
        let workspace = dir
            .canonicalize()
            .map_err(|_| RuntimeError::Workspace(dir.display().to_string()))?;
        home_outside(
            &self.runtime.shared.config.home,
            &workspace,
            &spec.core_root,
        )?;
        let mut shared = self
            .spec
            .write()
            .map_err(|_| RuntimeError::Unavailable("the session spec is poisoned".into()))?;
        *shared = (spec, workspace);
        Ok(())
    }

    /// The session's current spec.
    ///
    /// # Errors
    /// [`RuntimeError::Unavailable`] when the spec lock is poisoned.
    pub async fn spec(&self) -> Result<SessionSpec, RuntimeError> {
        self.spec
            .read()
            .map(|s| s.0.clone())
            .map_err(|_| RuntimeError::Unavailable("the session spec is poisoned".into()))
    }

    /// Per-server state of the current catalog.
    pub async fn servers(&self) -> Vec<ServerStatus> {
        match self
            .actor
            .call(SessionMsg::Status, Some(Duration::from_secs(10)))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(s)) => s,
            _ => Vec::new(),
        }
    }

    /// Starts a delegated child session under `scope` (it can only narrow this
    /// session's capabilities). Its connections are released by
    /// [`ChildSession::finish`], or when the handle is dropped.
    ///
    /// # Errors
    /// [`RuntimeError`].
    pub async fn spawn_child(&self, scope: CapabilitySet) -> Result<ChildSession, RuntimeError> {
        let scope = match &self.scope {
            Some(parent) => parent.narrowed_by(&scope),
            None => scope,
        };
        let mut spec = self.spec().await?;
        spec.id = None;
        spec.lane = format!("child-of:{}", self.id);
        let (session, _) = self
            .runtime
            .open(|reply| RuntimeMsg::Start {
                spec,
                scope: Some(scope),
                reply,
            })
            .await?;
        Ok(ChildSession {
            session,
            finished: false,
        })
    }

    /// Evicts this session.
    ///
    /// # Errors
    /// See [`Runtime::evict_session`].
    pub async fn evict(&self) -> Result<EvictionReport, RuntimeError> {
        self.runtime.evict_session(&self.id).await
    }
}

/// A delegated child session; dropping it releases its connections.
pub struct ChildSession {
    session: Session,
    finished: bool,
}

impl ChildSession {
    /// The child session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Ends the child run and releases its connections.
    ///
    /// # Errors
    /// See [`Runtime::evict_session`].
    pub async fn finish(mut self) -> Result<EvictionReport, RuntimeError> {
        self.finished = true;
        let id = self.session.id.clone();
        let reason = "child_finished".to_string();
        match self
            .session
            .runtime
            .actor
            .call(
                |reply| RuntimeMsg::Evict {
                    id: id.clone(),
                    reason,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(Some(e))) => e.wait().await,
            _ => Err(RuntimeError::UnknownSession(id)),
        }
    }
}

impl Drop for ChildSession {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self.session.runtime.actor.cast(RuntimeMsg::Evict {
                id: self.session.id.clone(),
                reason: "child_dropped".into(),
                reply: dummy_port(),
            });
        }
    }
}

fn dummy_port<T>() -> RpcReplyPort<T> {
    let (tx, _rx) = ractor::concurrency::oneshot();
    tx.into()
}
