//! The runtime root actor: it supervises the sessions and the two runtime-wide helpers
//! (the discovery limiter and the approval broker, restarted when they die), tracks one
//! current session per lane, and schedules the tracked eviction of the previous one
//! when another starts or resumes.
//!
//! Its messages ([`RuntimeMsg`]) are the host protocol: a ractor host sends them itself
//! (`call!`), and the handles in `handle.rs` send the very same ones. Nothing the root
//! does waits on a server: an eviction, a turn or a shutdown runs on a task of its own
//! that answers the reply port, so the root keeps taking messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::oneshot;

use super::approval::{Broker, BrokerArgs};
use super::handle::{Runtime, Session};
use super::limiter::Limiter;
use super::session::{
    EvictionReport, SessionActor, SessionArgs, SessionMsg, SessionSpec, SharedSpec,
};
use super::shared::Shared;
use super::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::{EventKind, Opening};

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
    /// A cluster node (feature `cluster`) could not claim the lane: the node that last
    /// held it did not answer, so its session may still run there.
    #[error(
        "lane `{lane}` was last held by node `{node}`, which cannot be reached; retry once it is back, or set SessionSpec::proceed_if_owner_unreachable if it is gone"
    )]
    LaneUnreachable {
        /// The lane.
        lane: String,
        /// The node that last held it.
        node: String,
    },
    /// A cluster node (feature `cluster`) claimed the lane at the same time and won.
    #[error(
        "lane `{lane}` was claimed at the same time by node `{node}`, whose claim stands; resume there, or retry"
    )]
    LaneContended {
        /// The lane.
        lane: String,
        /// The node whose claim won.
        node: String,
    },
}

/// A scheduled eviction the host can await.
#[derive(Debug)]
pub struct Eviction {
    /// The session being evicted.
    pub session: String,
    rx: oneshot::Receiver<EvictionReport>,
}

impl Eviction {
    /// An eviction under way whose report `published` will carry (`None` when it
    /// already ended).
    #[cfg(feature = "cluster")]
    pub(super) fn following(
        (session, published): &(String, tokio::sync::watch::Receiver<Option<EvictionReport>>),
    ) -> Option<Eviction> {
        if published.borrow().is_some() {
            return None;
        }
        let mut published = published.clone();
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            if let Ok(report) = published.wait_for(Option::is_some).await
                && let Some(report) = report.clone()
            {
                let _ = tx.send(report);
            }
        });
        Some(Eviction {
            session: session.clone(),
            rx,
        })
    }

    /// An eviction already done elsewhere (on another node), with its report.
    #[cfg(feature = "cluster")]
    pub(super) fn done(report: EvictionReport) -> Eviction {
        let (tx, rx) = oneshot::channel();
        let session = report.session.clone();
        let _ = tx.send(report);
        Eviction { session, rx }
    }

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

/// What starting or resuming a session answers: the session's handle, and the tracked
/// eviction of the lane's previous session when there was one.
pub struct Opened {
    /// The session (clone it freely; it is a handle).
    pub session: Session,
    /// The eviction of the session this one replaced in its lane.
    pub eviction: Option<Eviction>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("session", &self.session.id())
            .field("evicting", &self.eviction.as_ref().map(|e| &e.session))
            .finish()
    }
}

/// The reply port of a start or resume.
pub type OpenReply = RpcReplyPort<Result<Opened, RuntimeError>>;

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

/// The runtime's message protocol (the root actor's messages). A ractor host drives
/// the runtime with these (`ractor::call!(runtime.actor(), RuntimeMsg::StartSession,
/// spec)`); [`Runtime`]'s methods send the same messages. Every variant ends with its
/// reply port, and every reply is typed.
pub enum RuntimeMsg {
    /// Start a session; the lane's previous session is evicted (tracked).
    StartSession(SessionSpec, OpenReply),
    /// Resume a session started earlier in this runtime (evicted or not); the lane's
    /// other session is evicted (tracked).
    ResumeSession(String, OpenReply),
    /// Evict a live session: only its connections close. Answered once the eviction
    /// is done (the root bounds it: the close grace, then a stop).
    EvictSession(String, RpcReplyPort<Result<EvictionReport, RuntimeError>>),
    /// Prepare a turn of a live session (see [`Session::prepare_turn`]).
    PrepareTurn(String, RpcReplyPort<Result<TurnCatalog, PrepareError>>),
    /// Evict every session, flush the event log, end every server process left, then
    /// stop the root; answered with the evictions' reports before the root stops.
    Shutdown(RpcReplyPort<Vec<EvictionReport>>),
    /// Messages only the runtime's own handles send.
    #[doc(hidden)]
    Internal(Internal),
}

/// A message of the runtime to itself (child sessions, evictions with a reason).
#[doc(hidden)]
pub struct Internal(pub(super) InternalMsg);

pub(super) enum InternalMsg {
    /// Start a delegated child session under `scope` (children take no lane).
    StartChild {
        spec: SessionSpec,
        scope: CapabilitySet,
        reply: OpenReply,
    },
    /// Evict one session, the reason recorded in its eviction event
    /// (`child_finished`, `child_dropped`, ...); `None` when it is not live.
    Evict {
        id: String,
        reason: String,
        reply: RpcReplyPort<Option<Eviction>>,
    },
    /// From the lane directory: evict this node's session of `lane`, claimed by
    /// `node`; a session of the lane still waiting for its own claim does not open.
    #[cfg(feature = "cluster")]
    EvictLane {
        lane: String,
        node: String,
        epoch: u64,
        reply: RpcReplyPort<Option<Eviction>>,
    },
    /// Evict every live session that holds a lane (the node leaves the cluster).
    #[cfg(feature = "cluster")]
    EvictLanes {
        reason: String,
        reply: RpcReplyPort<Vec<Eviction>>,
    },
    /// The cluster-wide claim of a session's lane came back: open it, or refuse.
    #[cfg(feature = "cluster")]
    Claimed {
        id: String,
        how: Opening,
        claimed: Result<super::cluster::Claimed, RuntimeError>,
        reply: OpenReply,
    },
}

#[cfg(feature = "cluster")]
impl ractor::Message for RuntimeMsg {}

/// The longest a cluster-wide claim waits for the other nodes beside their evictions
/// (each node bounds its own wait by its claim timeout).
#[cfg(feature = "cluster")]
const CLAIM_BOUND: Duration = Duration::from_secs(30);

/// The longest an eviction takes before the root stops the session outright.
pub(super) fn eviction_bound(grace: Duration) -> Duration {
    grace * 8 + Duration::from_secs(10)
}

/// The longest an eviction can take in all: its bound, then the stop that follows.
pub(super) fn eviction_worst(grace: Duration) -> Duration {
    eviction_bound(grace) + grace * 8
}

/// Resolves once whoever waits on `reply` has gone (dropped it, or timed out).
async fn abandoned<T>(reply: &RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) struct RuntimeActor;

pub(crate) struct RuntimeState {
    shared: Arc<Shared>,
    sessions: HashMap<String, Record>,
    lanes: HashMap<String, String>,
    /// Ended sessions kept for resume, oldest first; bounded by [`RESUMABLE`].
    ended: std::collections::VecDeque<String>,
    /// Set by the first [`RuntimeMsg::Shutdown`]: nothing starts any more, and every
    /// later shutdown waits for the first one's reports here.
    closing: Option<tokio::sync::watch::Receiver<Option<Vec<EvictionReport>>>>,
    /// Sessions waiting for their lane's cluster-wide claim, by id: their lane, and
    /// the latest claim of that lane made elsewhere meanwhile (a later one means the
    /// session does not open).
    #[cfg(feature = "cluster")]
    pending: HashMap<String, (String, Option<(u64, String)>)>,
    /// Evictions under way, by lane: a release asked for meanwhile waits for them.
    #[cfg(feature = "cluster")]
    evicting: HashMap<String, (String, tokio::sync::watch::Receiver<Option<EvictionReport>>)>,
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
            closing: None,
            #[cfg(feature = "cluster")]
            pending: HashMap::new(),
            #[cfg(feature = "cluster")]
            evicting: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let closed = || RuntimeError::Unavailable("the runtime is shutting down".into());
        match message {
            #[cfg(feature = "cluster")]
            RuntimeMsg::StartSession(spec, reply) if state.directory().is_some() => {
                let admitted = match state.closing {
                    Some(_) => Err(closed()),
                    None => state.admit(spec, None),
                };
                match admitted {
                    Ok(id) => state.claim_then(&myself, id, Opening::Start, reply),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            #[cfg(feature = "cluster")]
            RuntimeMsg::ResumeSession(id, reply)
                if state.directory().is_some()
                    && state.closing.is_none()
                    && state
                        .sessions
                        .get(&id)
                        .is_some_and(|r| r.actor.is_none() && r.scope.is_none()) =>
            {
                state.claim_then(&myself, id, Opening::Resume, reply);
            }
            #[cfg(feature = "cluster")]
            RuntimeMsg::Internal(Internal(InternalMsg::Claimed {
                id,
                how,
                claimed,
                reply,
            })) => {
                let (lane, revoked) = state.pending.remove(&id).unwrap_or_default();
                // Claimed later elsewhere while this claim was under way: the later
                // one stands.
                let claimed = match (claimed, revoked) {
                    (Ok(ours), Some(later)) if later > ours.stamp => {
                        Err(RuntimeError::LaneContended {
                            lane: lane.clone(),
                            node: later.1,
                        })
                    }
                    (claimed, _) => claimed.map(|ours| ours.eviction),
                };
                let result = match (&state.closing, claimed) {
                    (Some(_), _) => Err(closed()),
                    // Nobody waits for it any more (timed out, dropped): it does not open.
                    (None, Ok(_)) if reply.is_closed() => {
                        if how == Opening::Start {
                            state.sessions.remove(&id);
                        }
                        Err(closed())
                    }
                    (None, Err(e)) => {
                        if how == Opening::Start {
                            state.sessions.remove(&id);
                        }
                        Err(e)
                    }
                    (None, Ok(remote)) => state.activate(&myself, &id, how).await.map(|mut o| {
                        o.eviction = o.eviction.or(remote);
                        o
                    }),
                };
                let _ = reply.send(result);
            }
            #[cfg(feature = "cluster")]
            RuntimeMsg::Internal(Internal(InternalMsg::EvictLanes { reason, reply })) => {
                let _ = reply.send(state.evict_lanes(&reason));
            }
            #[cfg(feature = "cluster")]
            RuntimeMsg::Internal(Internal(InternalMsg::EvictLane {
                lane,
                node,
                epoch,
                reply,
            })) => {
                let stamp = (epoch, node.clone());
                for (_, revoked) in state.pending.values_mut().filter(|(l, _)| *l == lane) {
                    if revoked.as_ref().is_none_or(|r| stamp > *r) {
                        *revoked = Some(stamp.clone());
                    }
                }
                let current = state.lanes.get(&lane).cloned();
                let reason = format!("replaced_on_node:{node}");
                let eviction = match current.and_then(|id| state.evict(&id, &reason)) {
                    Some(eviction) => Some(eviction),
                    // A session of the lane still closing: the release waits for it.
                    None => state.evicting.get(&lane).and_then(Eviction::following),
                };
                let _ = reply.send(eviction);
            }
            RuntimeMsg::StartSession(spec, reply) => {
                let result = match state.closing {
                    Some(_) => Err(closed()),
                    None => state.start(&myself, spec, None).await,
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::Internal(Internal(InternalMsg::StartChild { spec, scope, reply })) => {
                let result = match state.closing {
                    Some(_) => Err(closed()),
                    None => state.start(&myself, spec, Some(scope)).await,
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::ResumeSession(id, reply) => {
                let result = match state.closing {
                    Some(_) => Err(closed()),
                    None => state.resume(&myself, &id).await,
                };
                let _ = reply.send(result);
            }
            RuntimeMsg::EvictSession(id, reply) => {
                let eviction = state.evict(&id, "explicit");
                tokio::spawn(async move {
                    let report = match eviction {
                        Some(eviction) => eviction.wait().await,
                        None => Err(RuntimeError::UnknownSession(id)),
                    };
                    let _ = reply.send(report);
                });
            }
            RuntimeMsg::Internal(Internal(InternalMsg::Evict { id, reason, reply })) => {
                let _ = reply.send(state.evict(&id, &reason));
            }
            RuntimeMsg::PrepareTurn(id, reply) => {
                let session = state.sessions.get(&id).and_then(|record| {
                    let actor = record.actor.clone()?;
                    Some(state.handle(&myself, &id, actor, record))
                });
                tokio::spawn(async move {
                    let Some(session) = session else {
                        let _ = reply.send(Err(PrepareError::Evicted));
                        return;
                    };
                    // A caller that gave up (timed out, dropped) cancels the turn, as
                    // dropping `prepare_turn` does: its connects end at once.
                    tokio::select! {
                        turn = session.prepare_turn() => {
                            let _ = reply.send(turn);
                        }
                        () = abandoned(&reply) => {}
                    }
                });
            }
            RuntimeMsg::Shutdown(reply) => {
                if let Some(first) = &state.closing {
                    // One shutdown runs; a later one answers with its reports.
                    let mut first = first.clone();
                    tokio::spawn(async move {
                        let reports = first.wait_for(Option::is_some).await;
                        let reports = reports.ok().and_then(|r| r.clone()).unwrap_or_default();
                        let _ = reply.send(reports);
                    });
                    return Ok(());
                }
                let (done, waiting) = tokio::sync::watch::channel(None);
                state.closing = Some(waiting);
                let ids: Vec<String> = state.sessions.keys().cloned().collect();
                let evictions: Vec<Eviction> = ids
                    .iter()
                    .filter_map(|id| state.evict(id, "shutdown"))
                    .collect();
                let runtime = Runtime::from_parts(myself.clone(), Arc::clone(&state.shared));
                tokio::spawn(async move {
                    let reports = runtime.finish_shutdown(evictions).await;
                    let _ = done.send(Some(reports.clone()));
                    let _ = reply.send(reports);
                    myself.stop(Some("shutdown".into()));
                });
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (SupervisionEvent::ActorTerminated(cell, ..) | SupervisionEvent::ActorFailed(cell, _)) =
            event
        else {
            return Ok(());
        };
        let id = cell.get_id();
        #[cfg(feature = "cluster")]
        if state.closing.is_none() && state.directory().is_some_and(|d| d.get_id() == id) {
            // Its peers now release this node's lanes: so must this node. (Starts
            // fail closed from here: the directory does not answer.)
            tracing::warn!(
                "the cluster lane directory ended; this node's lane sessions are evicted"
            );
            let _ = state.evict_lanes("cluster_directory_ended");
            return Ok(());
        }
        if state.closing.is_some() {
            // The shutdown stops the helpers itself: nothing is restarted.
            state.session_ended(id);
        } else if id == state.shared.limiter.id() {
            state.restart_limiter(&myself).await;
        } else if id == state.shared.broker.id() {
            state.restart_broker(&myself).await;
        } else {
            state.session_ended(id);
        }
        Ok(())
    }
}

impl RuntimeState {
    /// The host's handle on session `id` (its record and live actor).
    fn handle(
        &self,
        myself: &ActorRef<RuntimeMsg>,
        id: &str,
        actor: ActorRef<SessionMsg>,
        record: &Record,
    ) -> Session {
        let runtime = Runtime::from_parts(myself.clone(), Arc::clone(&self.shared));
        Session::from_parts(
            id.to_string(),
            actor,
            Arc::clone(&record.spec),
            record.scope.clone(),
            runtime,
        )
    }

    /// A session actor stopped: its record stays, resumable, until forgotten.
    fn session_ended(&mut self, actor: ractor::ActorId) {
        for (id, record) in self.sessions.iter_mut() {
            if record.actor.as_ref().is_some_and(|a| a.get_id() == actor) {
                record.actor = None;
                self.ended.push_back(id.clone());
            }
        }
    }

    /// Respawns the discovery limiter under the root. Permits held against the dead one
    /// release into nothing, so until they are dropped up to twice the limit may be
    /// connecting: a brief overshoot, never a stall.
    async fn restart_limiter(&self, myself: &ActorRef<RuntimeMsg>) {
        let limit = self.shared.config.discovery_limit;
        match Actor::spawn_linked(None, Limiter, limit, myself.get_cell()).await {
            Ok((limiter, _)) => self.shared.limiter.replace(limiter),
            Err(e) => tracing::error!(error = %e, "the discovery limiter could not be restarted"),
        }
        tracing::warn!("the discovery limiter stopped and was restarted");
    }

    /// Respawns the approval broker under the root. Questions in flight were answered
    /// "unavailable" (never allowed) when it died; its allow-for-session cache is gone,
    /// so the next action asks again.
    async fn restart_broker(&self, myself: &ActorRef<RuntimeMsg>) {
        let args = BrokerArgs::new(&self.shared.config, &self.shared.hub);
        match Actor::spawn_linked(None, Broker, args, myself.get_cell()).await {
            Ok((broker, _)) => self.shared.broker.replace(broker),
            Err(e) => tracing::error!(error = %e, "the approval broker could not be restarted"),
        }
        tracing::warn!("the approval broker stopped and was restarted");
    }

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
        let id = self.admit(spec, scope)?;
        self.activate(myself, &id, Opening::Start).await
    }

    /// Evicts every live session that holds a lane.
    #[cfg(feature = "cluster")]
    fn evict_lanes(&mut self, reason: &str) -> Vec<Eviction> {
        let ids: Vec<String> = self.lanes.values().cloned().collect();
        ids.iter().filter_map(|id| self.evict(id, reason)).collect()
    }

    /// The lane directory, when this runtime is a cluster node.
    #[cfg(feature = "cluster")]
    fn directory(&self) -> Option<ActorRef<super::cluster::LaneMsg>> {
        self.shared.lanes.read().ok().and_then(|d| d.clone())
    }

    /// Claims the lane of session `id` cluster-wide on a task (the root goes on taking
    /// messages), then opens it (`InternalMsg::Claimed`).
    #[cfg(feature = "cluster")]
    fn claim_then(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: String,
        how: Opening,
        reply: OpenReply,
    ) {
        let (Some(directory), Some(record)) = (self.directory(), self.sessions.get(&id)) else {
            let _ = reply.send(Err(RuntimeError::UnknownSession(id)));
            return;
        };
        if self.pending.contains_key(&id) || record.actor.is_some() {
            // A start or resume of it is under way (or it is live): one at a time.
            let _ = reply.send(Err(RuntimeError::AlreadyLive(id)));
            return;
        }
        let lane = record.lane();
        self.pending.insert(id.clone(), (lane.clone(), None));
        let proceed = record
            .spec
            .read()
            .is_ok_and(|s| s.0.proceed_if_owner_unreachable);
        let bound = CLAIM_BOUND + eviction_worst(self.shared.config.close_grace);
        let myself = myself.clone();
        tokio::spawn(async move {
            let claimed = super::cluster::claim(&directory, &lane, proceed, bound).await;
            let _ = myself.cast(RuntimeMsg::Internal(Internal(InternalMsg::Claimed {
                id,
                how,
                claimed,
                reply,
            })));
        });
    }

    /// Checks a new session and records it, not yet live; its id.
    fn admit(
        &mut self,
        spec: SessionSpec,
        scope: Option<CapabilitySet>,
    ) -> Result<String, RuntimeError> {
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
        Ok(id)
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
            let mut opened = Opened {
                session: self.handle(myself, id, actor.clone(), record),
                eviction: None,
            };
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
        if record.actor.is_some() {
            return Err(RuntimeError::AlreadyLive(id.to_string()));
        }
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
        let record = &self.sessions[id];
        let mut opened = Opened {
            session: self.handle(myself, id, actor, record),
            eviction: None,
        };
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
        let record = self.sessions.get_mut(id)?;
        let actor = record.actor.take()?;
        #[cfg(feature = "cluster")]
        let published = record.scope.is_none().then(|| {
            let lane = record.lane();
            let (tx, rx) = tokio::sync::watch::channel(None);
            // Finished ones go (their sender is dropped or has sent).
            self.evicting
                .retain(|_, (_, rx)| rx.borrow().is_none() && rx.has_changed().is_ok());
            self.evicting.insert(lane, (id.to_string(), rx));
            tx
        });
        self.ended.push_back(id.to_string());
        self.lanes.retain(|_, current| current != id);
        let (tx, rx) = oneshot::channel();
        let reason = reason.to_string();
        let bound = eviction_bound(self.shared.config.close_grace);
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
                    Some(bound),
                )
                .await;
            if let Ok(ractor::rpc::CallResult::Success(report)) = outcome {
                #[cfg(feature = "cluster")]
                if let Some(published) = &published {
                    let _ = published.send(Some(report.clone()));
                }
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
pub(super) fn home_outside(
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

fn new_session_id(n: u64) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let digest =
        crate::digest::sha256_hex(format!("{nanos}-{n}-{}", std::process::id()).as_bytes());
    format!("s-{}", &digest[..12])
}
