//! The host's handles: [`Runtime`] on the actor system, [`Session`] on one session,
//! [`ChildSession`] on a delegated run. Each method is one typed message to the actor
//! that owns the state (the root or a session actor): the root's are the public
//! [`RuntimeMsg`] protocol a ractor host may send itself, so the two faces share one
//! implementation. One exception: [`Runtime::evict_session`] asks the root for the
//! eviction itself (an internal message) and awaits its report in the caller, where
//! [`RuntimeMsg::EvictSession`] has the root await it; the eviction is the same. None
//! of them holds a lock across an await. Control-plane calls are bounded by
//! [`CONTROL_BOUND`], so a wedged actor turns into [`RuntimeError::Unavailable`], never
//! a hang.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef, RpcReplyPort};

use crate::actors::broker::{Broker, BrokerArgs, BrokerHandle};
use crate::actors::catalog::ServerStatus;
use crate::actors::config::RuntimeConfig;
use crate::actors::limiter::{Limiter, LimiterHandle, LimiterStats};
use crate::actors::session::{EvictReason, EvictionReport, SessionMsg, SessionSpec};
use crate::actors::shared::Shared;
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::EventHub;

use super::root::{RootArgs, RuntimeActor};
use super::shutdown::{finish_shutdown, shutdown_bound};
use super::turn::{prepare_turn, real_workspace};
use super::{
    Eviction, Internal, InternalMsg, LaneClaims, OpenReply, Opened, RuntimeError, RuntimeMsg,
    SharedSpec, eviction_worst,
};

/// Where the root finds the lane claims of a cluster node (none otherwise), shared by
/// the root and every handle.
pub(super) type Lanes = Arc<std::sync::RwLock<Option<Arc<dyn LaneClaims>>>>;

/// The longest a start, resume or evict request waits for the root actor to take it.
/// The root answers from memory (it never waits on a server), so only a wedged or dead
/// root reaches it.
pub const CONTROL_BOUND: Duration = Duration::from_secs(30);

fn gone() -> RuntimeError {
    RuntimeError::Unavailable("the runtime actor is gone or did not answer in time".into())
}

/// The host's handle on a running runtime.
#[derive(Clone)]
pub struct Runtime {
    actor: ActorRef<RuntimeMsg>,
    shared: Arc<Shared>,
    lanes: Lanes,
}

impl Runtime {
    /// Starts the actor system: the root, the discovery limiter and the approval broker.
    ///
    /// # Errors
    /// When an actor cannot start.
    pub async fn start(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        Runtime::spawn(config, None).await
    }

    /// Starts the actor system with its root linked under `supervisor`, an actor of the
    /// host's: the host hears of the root's end as of any child's
    /// (`SupervisionEvent::ActorTerminated` after a shutdown, `ActorFailed` or a
    /// terminated `killed` otherwise), and whatever the root supervised ends with it
    /// (sessions, connections, their server processes). Drive it through
    /// [`Runtime::actor`] with [`RuntimeMsg`], or through this handle. When the root
    /// ended otherwise than by a shutdown, call [`Runtime::shutdown`] on this handle: it
    /// ends what the root could not (the event log's tail, the process registry).
    ///
    /// # Errors
    /// When an actor cannot start.
    pub async fn start_linked(
        config: RuntimeConfig,
        supervisor: ractor::ActorCell,
    ) -> Result<Runtime, RuntimeError> {
        Runtime::spawn(config, Some(supervisor)).await
    }

    /// The root actor, for hosts that send [`RuntimeMsg`] themselves.
    pub fn actor(&self) -> &ActorRef<RuntimeMsg> {
        &self.actor
    }

    /// The close grace of every server of this runtime.
    pub fn close_grace(&self) -> Duration {
        self.shared.config.close_grace
    }

    /// Makes lanes cluster-wide through `claims` (or local again with `None`): what a
    /// cluster node does when it joins and leaves.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn set_lane_claims(&self, claims: Option<Arc<dyn LaneClaims>>) {
        if let Ok(mut lanes) = self.lanes.write() {
            *lanes = claims;
        }
    }

    pub(super) fn from_parts(
        actor: ActorRef<RuntimeMsg>,
        shared: Arc<Shared>,
        lanes: Lanes,
    ) -> Runtime {
        Runtime {
            actor,
            shared,
            lanes,
        }
    }

    async fn spawn(
        mut config: RuntimeConfig,
        supervisor: Option<ractor::ActorCell>,
    ) -> Result<Runtime, RuntimeError> {
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
        let hub = Arc::new(
            EventHub::with(
                Arc::clone(&config.events),
                Some(log_dir),
                config.event_delivery,
                config.event_log,
            )
            .with_counter(config.telemetry.counter()),
        );
        let limits = (config.discovery_limit, config.telemetry.clone());
        let (limiter, _) = Actor::spawn(None, Limiter, limits)
            .await
            .map_err(unavailable)?;
        let (broker, _) = Actor::spawn(None, Broker, BrokerArgs::new(&config, &hub))
            .await
            .map_err(unavailable)?;
        let (limiter_cell, broker_cell) = (limiter.get_cell(), broker.get_cell());
        let broker = BrokerHandle::new(broker, config.telemetry.clone());
        let shared = Arc::new(Shared::new(
            config,
            hub,
            Arc::new(net),
            LimiterHandle::new(limiter),
            broker,
        ));
        let lanes = Lanes::default();
        let args = RootArgs {
            shared: Arc::clone(&shared),
            lanes: Arc::clone(&lanes),
        };
        let (actor, _) = match supervisor {
            Some(supervisor) => Actor::spawn_linked(None, RuntimeActor, args, supervisor).await,
            None => Actor::spawn(None, RuntimeActor, args).await,
        }
        .map_err(unavailable)?;
        // The root supervises the helpers: one that dies is restarted, and until then
        // its handle answers with a typed "unavailable".
        limiter_cell.link(actor.get_cell());
        broker_cell.link(actor.get_cell());
        Ok(Runtime {
            actor,
            shared,
            lanes,
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
        self.open(|reply| RuntimeMsg::StartSession(spec, reply))
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
        self.open(|reply| RuntimeMsg::ResumeSession(id, reply))
            .await
    }

    async fn open(
        &self,
        msg: impl FnOnce(OpenReply) -> RuntimeMsg,
    ) -> Result<(Session, Option<Eviction>), RuntimeError> {
        match self.actor.call(msg, Some(CONTROL_BOUND)).await {
            Ok(ractor::rpc::CallResult::Success(Ok(Opened { session, eviction }))) => {
                Ok((session, eviction))
            }
            Ok(ractor::rpc::CallResult::Success(Err(e))) => Err(e),
            _ => Err(gone()),
        }
    }

    /// Evicts one session: closes only its connections.
    ///
    /// # Errors
    /// [`RuntimeError::UnknownSession`] when it is not live.
    pub async fn evict_session(&self, id: &str) -> Result<EvictionReport, RuntimeError> {
        // The root starts the eviction and hands it back; its report is awaited here,
        // not on a task of the root's (the eviction bounds itself; this bound is the
        // one the root's answer had).
        let bound = CONTROL_BOUND + eviction_worst(self.shared.config.close_grace);
        let span = self.shared.config.telemetry.trace().span("mcp.evict");
        let evicted =
            tokio::time::timeout(bound, self.evict_with(id, EvictReason::Explicit, bound))
                .await
                .unwrap_or_else(|_| Err(gone()));
        match &evicted {
            Ok(report) => span.set_u64("mcp.connections_closed", report.connections_closed as u64),
            Err(_) => span.fail("unavailable"),
        }
        evicted
    }

    /// Evicts `id` for `reason`, the root given `bound` to hand the eviction back.
    async fn evict_with(
        &self,
        id: &str,
        reason: EvictReason,
        bound: Duration,
    ) -> Result<EvictionReport, RuntimeError> {
        let id = id.to_string();
        let asked = self
            .actor
            .call(
                |reply| {
                    RuntimeMsg::Internal(Internal(InternalMsg::Evict {
                        id: id.clone(),
                        reason,
                        reply,
                    }))
                },
                Some(bound),
            )
            .await;
        match asked {
            // The eviction's own wait is bounded by the root (close grace, then stop).
            Ok(ractor::rpc::CallResult::Success(Some(eviction))) => eviction.wait().await,
            Ok(ractor::rpc::CallResult::Success(None)) => Err(RuntimeError::UnknownSession(id)),
            _ => Err(gone()),
        }
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

    /// Events dropped so far because the host's sink (or the session log) could not
    /// keep up with the runtime.
    pub fn dropped_events(&self) -> u64 {
        self.shared.hub.dropped()
    }

    /// Waits until every event emitted so far reached the sink and the session log.
    pub async fn flush_events(&self) {
        let hub = Arc::clone(&self.shared.hub);
        let _ = tokio::task::spawn_blocking(move || hub.flush()).await;
    }

    /// Evicts every session (closing every connection and child process), then stops
    /// the actors. Bounded: a session that does not close in time is stopped, and its
    /// process groups are killed as their guards drop.
    pub async fn shutdown(&self) {
        let bound = shutdown_bound(&self.shared);
        // The root's part: the evictions' wait and the stop of overrunning sessions
        // (each within `bound`), the log's flushes, the last sweep.
        let answer_bound = bound * 2 + crate::events::FLUSH_WAIT * 3 + Duration::from_secs(30);
        let answered = self
            .actor
            .call(RuntimeMsg::Shutdown, Some(answer_bound))
            .await;
        if !matches!(
            answered,
            Ok(ractor::rpc::CallResult::Success(_) | ractor::rpc::CallResult::Timeout)
        ) {
            // A root that is gone (killed, failed, its supervisor ended) did not finish:
            // whatever it left (the log's tail, helpers, server processes) ends here.
            finish_shutdown(&self.shared, &self.actor, Vec::new()).await;
        }
        // The root stops itself after answering; a root that did not answer is stopped.
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(bound))
            .await;
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
    pub(super) fn from_parts(
        id: String,
        actor: ActorRef<SessionMsg>,
        spec: SharedSpec,
        scope: Option<CapabilitySet>,
        runtime: Runtime,
    ) -> Session {
        Session {
            id,
            actor,
            spec,
            scope,
            runtime,
        }
    }

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
        self.prepare(None).await
    }

    /// A turn of only `servers` (by id): only they are connected, relisted or reported;
    /// the session's other connections are kept as they are. Their tools are named as
    /// in a full turn when every server sharing their name prefix is in `servers`
    /// ([`crate::naming::same_prefix`] finds them).
    ///
    /// # Errors
    /// See [`Session::prepare_turn`].
    pub async fn prepare_turn_for(&self, servers: &[String]) -> Result<TurnCatalog, PrepareError> {
        self.prepare(Some(Arc::new(servers.to_vec()))).await
    }

    async fn prepare(&self, scope: Option<Arc<Vec<String>>>) -> Result<TurnCatalog, PrepareError> {
        prepare_turn(&self.runtime.shared, &self.actor, &self.spec, scope).await
    }

    /// Changes what the session acts with: principal, capabilities, core root and
    /// revision, workspace, policy (the id and lane stay). A change of anything in the
    /// catalog identity closes every connection of the old identity at the next turn.
    ///
    /// # Errors
    /// [`RuntimeError::Workspace`] when the workspace does not exist;
    /// [`RuntimeError::Unavailable`] when the session is gone.
    pub fn update(&self, change: impl FnOnce(&mut SessionSpec)) -> Result<(), RuntimeError> {
        let mut spec = self.spec()?;
        let (id, lane) = (spec.id.clone(), spec.lane.clone());
        change(&mut spec);
        (spec.id, spec.lane) = (id, lane);
        let workspace = real_workspace(&self.runtime.shared, &spec)?;
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
    pub fn spec(&self) -> Result<SessionSpec, RuntimeError> {
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
        let mut spec = self.spec()?;
        spec.id = None;
        spec.lane = format!("child-of:{}", self.id);
        let (session, _) = self
            .runtime
            .open(|reply| {
                RuntimeMsg::Internal(Internal(InternalMsg::StartChild { spec, scope, reply }))
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
        self.session
            .runtime
            .evict_with(&self.session.id, EvictReason::ChildFinished, CONTROL_BOUND)
            .await
    }
}

impl Drop for ChildSession {
    fn drop(&mut self) {
        if !self.finished {
            let _ = self
                .session
                .runtime
                .actor
                .cast(RuntimeMsg::Internal(Internal(InternalMsg::Evict {
                    id: self.session.id.clone(),
                    reason: EvictReason::ChildDropped,
                    reply: dummy_port(),
                })));
        }
    }
}

fn dummy_port<T>() -> RpcReplyPort<T> {
    let (tx, _rx) = ractor::concurrency::oneshot();
    tx.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_root_restarts_a_limiter_that_stopped() {
        let home = tempfile::tempdir().unwrap();
        let runtime = Runtime::start(RuntimeConfig::new(home.path().join("home")))
            .await
            .unwrap();
        let limiter = runtime.shared.limiter.clone();
        let before = limiter.id();
        limiter.stop();
        let mut permit = None;
        for _ in 0..200 {
            if limiter.id() != before
                && let Ok(p) = limiter.acquire().await
            {
                permit = Some(p);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(permit.is_some(), "the limiter was never restarted");
        assert_eq!(runtime.limiter_stats().await.in_use, 1);
        drop(permit);
        runtime.shutdown().await;
    }

    #[tokio::test]
    async fn the_root_restarts_a_broker_that_stopped() {
        let home = tempfile::tempdir().unwrap();
        let mut config = RuntimeConfig::new(home.path().join("home"));
        config.approver = Arc::new(crate::authority::FixedApprover(
            crate::authority::ApprovalAnswer::AllowOnce,
        ));
        let runtime = Runtime::start(config).await.unwrap();
        let broker = runtime.shared.broker.clone();
        let before = broker.id();
        broker.stop();
        let mut restarted = false;
        for _ in 0..200 {
            if broker.id() != before {
                restarted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(restarted, "the broker was never restarted");
        runtime.shutdown().await;
    }
}
