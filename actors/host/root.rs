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
use tokio::sync::watch;

use crate::actors::session::{EvictReason, EvictionReport, SessionMsg, SessionSpec};
use crate::actors::shared::Shared;
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::Opening;

mod sessions;

use super::handles::Lanes;
use super::shutdown::finish_shutdown;
use super::turn::prepare_turn;
use super::{
    Claimed, Eviction, Internal, InternalMsg, OpenReply, RuntimeError, RuntimeMsg, SharedSpec,
};

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
    /// Ended sessions kept for resume, oldest first; bounded by [`RESUMABLE`]. Each
    /// id at most once, and only while its record has no actor: a resume takes it out.
    ended: VecDeque<String>,
    /// The live session actors, by actor: which session a stopped one was, without a
    /// walk over every record (up to [`RESUMABLE`] ended ones) at each stop.
    live: HashMap<ractor::ActorId, String>,
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
            live: HashMap::new(),
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
                turn = prepare_turn(&shared, &actor, &spec, None) => {
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
