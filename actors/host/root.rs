//! The runtime root actor: it supervises the sessions and the two runtime-wide helpers
//! (the discovery limiter and the approval broker, restarted when they die), tracks one
//! current session per lane, and schedules the tracked eviction of the previous one
//! when another starts or resumes. With [`LaneClaims`] set (a cluster node), a lane is
//! claimed across nodes before its session opens.
//!
//! Its messages ([`RuntimeMsg`]) are the host protocol: a ractor host sends them itself
//! (`call!`), and the handles in `handles.rs` send the very same ones. Each message has
//! one method here. Nothing the root does waits on a server: an eviction, a turn or a
//! shutdown runs on a task of its own that answers the reply port, so the root keeps
//! taking messages.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{oneshot, watch};

use super::handles::{self, Lanes, Runtime, Session};
use super::{
    Claimed, Eviction, Internal, InternalMsg, OpenReply, Opened, RESUMABLE, RuntimeError,
    RuntimeMsg, SharedSpec, eviction_bound, eviction_worst,
};
use crate::actors::broker::{Broker, BrokerArgs};
use crate::actors::limiter::Limiter;
use crate::actors::session::{
    EvictReason, EvictionReport, SessionActor, SessionArgs, SessionMsg, SessionSpec,
};
use crate::actors::shared::Shared;
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::{EventKind, Opening};

/// The longest a cluster-wide claim waits for the other nodes beside their evictions
/// (each node bounds its own wait by its claim timeout).
const CLAIM_BOUND: Duration = Duration::from_secs(30);

/// One session the root knows of: live (its actor) or ended and resumable.
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

/// What the root was started with: the runtime's shared context, and where the lane
/// claims (if any) are found.
pub(crate) struct RootArgs {
    pub shared: Arc<Shared>,
    pub lanes: Lanes,
}

pub(crate) struct RuntimeActor;

pub(crate) struct RuntimeState {
    shared: Arc<Shared>,
    lanes: Lanes,
    sessions: HashMap<String, Record>,
    /// The current session of each lane.
    current: HashMap<String, String>,
    /// Ended sessions kept for resume, oldest first; bounded by [`RESUMABLE`].
    ended: VecDeque<String>,
    /// Set by the first [`RuntimeMsg::Shutdown`]: nothing starts any more, and every
    /// later shutdown waits for the first one's reports here.
    closing: Option<watch::Receiver<Option<Vec<EvictionReport>>>>,
    /// Sessions waiting for their lane's cluster-wide claim, by id: their lane, and
    /// the latest claim of that lane made elsewhere meanwhile (a later one means the
    /// session does not open).
    pending: HashMap<String, (String, Option<(u64, String)>)>,
    /// Evictions under way, by lane: a release asked for meanwhile waits for them.
    evicting: HashMap<String, (String, watch::Receiver<Option<EvictionReport>>)>,
}

impl Actor for RuntimeActor {
    type Msg = RuntimeMsg;
    type State = RuntimeState;
    type Arguments = RootArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: RootArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RuntimeState {
            shared: args.shared,
            lanes: args.lanes,
            sessions: HashMap::new(),
            current: HashMap::new(),
            ended: VecDeque::new(),
            closing: None,
            pending: HashMap::new(),
            evicting: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RuntimeMsg::StartSession(spec, reply) => {
                state.start_session(&myself, spec, reply).await
            }
            RuntimeMsg::ResumeSession(id, reply) => state.resume_session(&myself, id, reply).await,
            RuntimeMsg::EvictSession(id, reply) => state.evict_session(id, reply),
            RuntimeMsg::PrepareTurn(id, reply) => state.prepare_turn(&id, reply),
            RuntimeMsg::Shutdown(reply) => state.shut_down(&myself, reply),
            RuntimeMsg::Internal(Internal(message)) => match message {
                InternalMsg::StartChild { spec, scope, reply } => {
                    state.start_child(&myself, spec, scope, reply).await;
                }
                InternalMsg::Evict { id, reason, reply } => {
                    let _ = reply.send(state.evict(&id, reason));
                }
                InternalMsg::EvictLane {
                    lane,
                    node,
                    epoch,
                    reply,
                } => state.evict_lane(lane, node, epoch, reply),
                InternalMsg::EvictLanes { reason, reply } => {
                    let _ = reply.send(state.evict_lanes(reason));
                }
                InternalMsg::Claimed {
                    id,
                    how,
                    claimed,
                    reply,
                } => state.claimed(&myself, id, how, claimed, reply).await,
            },
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
        if state.closing.is_none() && state.claims().is_some_and(|c| c.actor() == id) {
            // Its peers now release this node's lanes: so must this node. (Starts
            // fail closed from here: the claims do not answer.)
            tracing::warn!("the cluster lane claims ended; this node's lane sessions are evicted");
            let _ = state.evict_lanes(EvictReason::ClusterDirectoryEnded);
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

fn closed() -> RuntimeError {
    RuntimeError::Unavailable("the runtime is shutting down".into())
}

/// One method per message.
impl RuntimeState {
    /// [`RuntimeMsg::StartSession`]: a new session, its lane claimed first across
    /// nodes when there are lane claims.
    async fn start_session(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        spec: SessionSpec,
        reply: OpenReply,
    ) {
        if self.closing.is_some() {
            let _ = reply.send(Err(closed()));
            return;
        }
        let admitted = self.admit(spec, None);
        match admitted {
            Ok(id) if self.claims().is_some() => self.claim_then(myself, id, Opening::Start, reply),
            Ok(id) => {
                let _ = reply.send(self.activate(myself, &id, Opening::Start).await);
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// [`InternalMsg::StartChild`]: a delegated child session (children take no lane).
    async fn start_child(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        spec: SessionSpec,
        scope: CapabilitySet,
        reply: OpenReply,
    ) {
        let result = match self.closing {
            Some(_) => Err(closed()),
            None => match self.admit(spec, Some(scope)) {
                Ok(id) => self.activate(myself, &id, Opening::Start).await,
                Err(e) => Err(e),
            },
        };
        let _ = reply.send(result);
    }

    /// [`RuntimeMsg::ResumeSession`]: an ended session opens again (its lane claimed
    /// first across nodes when there are lane claims); a live one is made its lane's
    /// current.
    async fn resume_session(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: String,
        reply: OpenReply,
    ) {
        if self.closing.is_some() {
            let _ = reply.send(Err(closed()));
            return;
        }
        let ended_in_lane = self
            .sessions
            .get(&id)
            .is_some_and(|r| r.actor.is_none() && r.scope.is_none());
        if ended_in_lane && self.claims().is_some() {
            self.claim_then(myself, id, Opening::Resume, reply);
            return;
        }
        let _ = reply.send(self.resume(myself, &id).await);
    }

    /// [`RuntimeMsg::EvictSession`]: answered once the eviction is done.
    fn evict_session(
        &mut self,
        id: String,
        reply: RpcReplyPort<Result<EvictionReport, RuntimeError>>,
    ) {
        let eviction = self.evict(&id, EvictReason::Explicit);
        tokio::spawn(async move {
            let report = match eviction {
                Some(eviction) => eviction.wait().await,
                None => Err(RuntimeError::UnknownSession(id)),
            };
            let _ = reply.send(report);
        });
    }

    /// [`RuntimeMsg::PrepareTurn`]: the session's turn, prepared on a task; a caller
    /// that gave up (timed out, dropped) cancels it, as dropping `prepare_turn` does:
    /// its connects end at once.
    fn prepare_turn(&self, id: &str, reply: RpcReplyPort<Result<TurnCatalog, PrepareError>>) {
        let live = self
            .sessions
            .get(id)
            .and_then(|r| Some((r.actor.clone()?, Arc::clone(&r.spec))));
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            let Some((actor, spec)) = live else {
                let _ = reply.send(Err(PrepareError::Evicted));
                return;
            };
            tokio::select! {
                turn = handles::prepare_turn(&shared, &actor, &spec, None) => {
                    let _ = reply.send(turn);
                }
                () = abandoned(&reply) => {}
            }
        });
    }

    /// [`RuntimeMsg::Shutdown`]: every session evicted, then [`finish_shutdown`] on a
    /// task; a later shutdown answers with the first one's reports.
    fn shut_down(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        reply: RpcReplyPort<Vec<EvictionReport>>,
    ) {
        if let Some(first) = &self.closing {
            let mut first = first.clone();
            tokio::spawn(async move {
                let reports = first.wait_for(Option::is_some).await;
                let reports = reports.ok().and_then(|r| r.clone()).unwrap_or_default();
                let _ = reply.send(reports);
            });
            return;
        }
        let (done, waiting) = watch::channel(None);
        self.closing = Some(waiting);
        let ids: Vec<String> = self.sessions.keys().cloned().collect();
        let evictions: Vec<Eviction> = ids
            .iter()
            .filter_map(|id| self.evict(id, EvictReason::Shutdown))
            .collect();
        let (shared, myself) = (Arc::clone(&self.shared), myself.clone());
        tokio::spawn(async move {
            let reports = finish_shutdown(&shared, &myself, evictions).await;
            let _ = done.send(Some(reports.clone()));
            let _ = reply.send(reports);
            myself.stop(Some("shutdown".into()));
        });
    }

    /// [`InternalMsg::EvictLane`]: another node claimed `lane`; this node's session
    /// there is evicted, and one of it still waiting for its claim does not open.
    fn evict_lane(
        &mut self,
        lane: String,
        node: String,
        epoch: u64,
        reply: RpcReplyPort<Option<Eviction>>,
    ) {
        let stamp = (epoch, node.clone());
        for (_, revoked) in self.pending.values_mut().filter(|(l, _)| *l == lane) {
            if revoked.as_ref().is_none_or(|r| stamp > *r) {
                *revoked = Some(stamp.clone());
            }
        }
        let current = self.current.get(&lane).cloned();
        let reason = EvictReason::ReplacedOnNode(node);
        let eviction = match current.and_then(|id| self.evict(&id, reason)) {
            Some(eviction) => Some(eviction),
            // A session of the lane still closing: the release waits for it.
            None => self.evicting.get(&lane).and_then(Eviction::following),
        };
        let _ = reply.send(eviction);
    }

    /// [`InternalMsg::Claimed`]: the cluster-wide claim of a session's lane came back:
    /// open the session, or refuse.
    async fn claimed(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: String,
        how: Opening,
        claimed: Result<Claimed, RuntimeError>,
        reply: OpenReply,
    ) {
        let (lane, revoked) = self.pending.remove(&id).unwrap_or_default();
        // Claimed later elsewhere while this claim was under way: the later one stands.
        let claimed = match (claimed, revoked) {
            (Ok(ours), Some(later)) if later > ours.stamp => Err(RuntimeError::LaneContended {
                lane: lane.clone(),
                node: later.1,
            }),
            (claimed, _) => claimed.map(|ours| ours.eviction),
        };
        let result = match (&self.closing, claimed) {
            (Some(_), _) => Err(closed()),
            // Nobody waits for it any more (timed out, dropped): it does not open.
            (None, Ok(_)) if reply.is_closed() => Err(self.not_opened(&id, how, closed())),
            (None, Err(e)) => Err(self.not_opened(&id, how, e)),
            (None, Ok(remote)) => self.activate(myself, &id, how).await.map(|mut o| {
                o.eviction = o.eviction.or(remote);
                o
            }),
        };
        let _ = reply.send(result);
    }
}

impl RuntimeState {
    /// The lane claims, when this runtime is a cluster node.
    fn claims(&self) -> Option<Arc<dyn super::LaneClaims>> {
        self.lanes.read().ok().and_then(|l| l.clone())
    }

    /// The host's handle on session `id` (its record and live actor).
    fn handle(
        &self,
        myself: &ActorRef<RuntimeMsg>,
        id: &str,
        actor: ActorRef<SessionMsg>,
        record: &Record,
    ) -> Session {
        let runtime = Runtime::from_parts(
            myself.clone(),
            Arc::clone(&self.shared),
            Arc::clone(&self.lanes),
        );
        Session::from_parts(
            id.to_string(),
            actor,
            Arc::clone(&record.spec),
            record.scope.clone(),
            runtime,
        )
    }

    /// `error`, after forgetting a session started for a claim that did not take.
    fn not_opened(&mut self, id: &str, how: Opening, error: RuntimeError) -> RuntimeError {
        if how == Opening::Start {
            self.sessions.remove(id);
        }
        error
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

    /// Evicts every live session that holds a lane.
    fn evict_lanes(&mut self, reason: EvictReason) -> Vec<Eviction> {
        let ids: Vec<String> = self.current.values().cloned().collect();
        ids.iter()
            .filter_map(|id| self.evict(id, reason.clone()))
            .collect()
    }

    /// Claims the lane of session `id` cluster-wide on a task (the root goes on taking
    /// messages), then opens it (`InternalMsg::Claimed`).
    fn claim_then(
        &mut self,
        myself: &ActorRef<RuntimeMsg>,
        id: String,
        how: Opening,
        reply: OpenReply,
    ) {
        let (Some(claims), Some(record)) = (self.claims(), self.sessions.get(&id)) else {
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
            let claimed = claims.claim(&lane, proceed, bound).await;
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
        handles::home_outside(&self.shared.config.home, &workspace, &spec.core_root)?;
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
        let previous = self.current.insert(lane.to_string(), id.to_string())?;
        if previous == id {
            return None;
        }
        self.evict(&previous, EvictReason::Replaced)
    }

    /// Schedules the tracked eviction of live session `id`; `None` when it is not live.
    fn evict(&mut self, id: &str, reason: EvictReason) -> Option<Eviction> {
        let record = self.sessions.get_mut(id)?;
        let actor = record.actor.take()?;
        let published = record.scope.is_none().then(|| {
            let lane = record.lane();
            let (tx, rx) = watch::channel(None);
            // Finished ones go (their sender is dropped or has sent).
            self.evicting
                .retain(|_, (_, rx)| rx.borrow().is_none() && rx.has_changed().is_ok());
            self.evicting.insert(lane, (id.to_string(), rx));
            tx
        });
        self.ended.push_back(id.to_string());
        self.current.retain(|_, current| current != id);
        let (tx, rx) = oneshot::channel();
        let (shared, session) = (Arc::clone(&self.shared), id.to_string());
        tokio::spawn(async move {
            let report = evict_actor(&shared, &session, actor, reason).await;
            if let Some(report) = report {
                if let Some(published) = &published {
                    let _ = published.send(Some(report.clone()));
                }
                let _ = tx.send(report);
            }
        });
        Some(Eviction {
            session: id.to_string(),
            rx,
        })
    }
}

/// Asks session `actor` to evict itself, within the eviction's bound; one that does not
/// answer in time is stopped (its catalog still closes in `post_stop`), and the host
/// hears of it by an event, the waiter by the report that does not come.
async fn evict_actor(
    shared: &Shared,
    session: &str,
    actor: ActorRef<SessionMsg>,
    reason: EvictReason,
) -> Option<EvictionReport> {
    let grace = shared.config.close_grace;
    let outcome = actor
        .call(
            |reply| SessionMsg::Evict {
                reason: reason.clone(),
                reply,
            },
            Some(eviction_bound(grace)),
        )
        .await;
    if let Ok(ractor::rpc::CallResult::Success(report)) = outcome {
        return Some(report);
    }
    shared.hub.emit(
        session,
        EventKind::SessionEvictionFailed {
            reason: reason.to_string(),
            message: "the session did not close in time; it was stopped".into(),
        },
    );
    let _ = actor
        .stop_and_wait(Some("eviction timed out".into()), Some(grace * 8))
        .await;
    None
}

/// How long a shutdown waits for the evictions, and then for the sessions it stops.
pub(super) fn shutdown_bound(shared: &Shared) -> Duration {
    shared.config.close_grace * 10 + Duration::from_secs(10)
}

/// What [`RuntimeMsg::Shutdown`] does once every session's eviction is scheduled (and
/// what a handle does itself when the root is gone): waits for them (bounded), stops
/// whatever session is still there, flushes the event log, stops the helpers and ends
/// every server process left.
pub(super) async fn finish_shutdown(
    shared: &Shared,
    root: &ActorRef<RuntimeMsg>,
    evictions: Vec<Eviction>,
) -> Vec<EvictionReport> {
    let bound = shutdown_bound(shared);
    let waited = tokio::time::timeout(
        bound,
        futures::future::join_all(evictions.into_iter().map(Eviction::wait)),
    )
    .await;
    let reports = waited
        .map(|all| all.into_iter().filter_map(Result::ok).collect())
        .unwrap_or_default();
    // A session whose eviction overran is stopped now, before the last flush and the
    // last sweep, so that what it closes is logged and nothing it left escapes. (The
    // helpers stop too; a closing root does not restart them.)
    root.stop_children_and_wait(Some("shutdown".into()), Some(bound))
        .await;
    let hub = Arc::clone(&shared.hub);
    let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
    shared.limiter.stop();
    shared.broker.stop();
    // Launchers made ahead for starts that will not come; whatever a server left behind
    // (orphans, a tree a stopped session did not end) ends here; then the reaper goes.
    if let Some(launchers) = &shared.launchers {
        launchers.close().await;
    }
    let processes = Arc::clone(&shared.processes);
    let _ = tokio::task::spawn_blocking(move || processes.shutdown()).await;
    reports
}

/// Resolves once whoever waits on `reply` has gone (dropped it, or timed out).
async fn abandoned<T>(reply: &RpcReplyPort<T>) {
    while !reply.is_closed() {
        tokio::time::sleep(Duration::from_millis(25)).await;
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
