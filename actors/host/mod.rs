//! The host's face of the actor system: the root's message protocol ([`RuntimeMsg`])
//! and its replies, the root actor (`root.rs`, one method per message), the handles a
//! host holds (`handles.rs`, each method one message), and the trait through which the
//! root claims lanes beyond this process (`lanes.rs`, implemented by the `cluster`
//! feature). Nothing below this floor knows of it.

use std::time::Duration;

use ractor::RpcReplyPort;
use tokio::sync::oneshot;

use crate::actors::session::SessionSpec;
pub(crate) use crate::actors::session::{EvictReason, EvictionReport};
use crate::actors::turn::{PrepareError, TurnCatalog};
use crate::authority::CapabilitySet;
use crate::events::Opening;

mod handles;
mod lanes;
mod root;
mod shutdown;
mod turn;

pub use handles::{CONTROL_BOUND, ChildSession, Runtime, Session};
pub(crate) use lanes::{Claimed, LaneClaims};

/// How many ended sessions stay resumable; older ones are forgotten.
pub const RESUMABLE: usize = 256;

/// A session's spec and its canonical workspace, shared by its handles and the root's
/// record (read once per turn, and sent with the turn's message).
pub(crate) type SharedSpec = std::sync::Arc<std::sync::RwLock<(SessionSpec, std::path::PathBuf)>>;

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
    pub(crate) rx: oneshot::Receiver<EvictionReport>,
}

impl Eviction {
    /// An eviction under way whose report `published` will carry (`None` when it
    /// already ended).
    pub(crate) fn following(
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
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) fn done(report: EvictionReport) -> Eviction {
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

/// The runtime's message protocol (the root actor's messages). A ractor host drives
/// the runtime with these (`ractor::call!(runtime.actor(), RuntimeMsg::StartSession,
/// spec)`); [`Runtime`]'s methods send the same messages (but `evict_session`, which
/// asks for the eviction and awaits its report itself: the same eviction). Every variant
/// ends with its reply port, and every reply is typed.
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
pub struct Internal(pub(crate) InternalMsg);

#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum InternalMsg {
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
        reason: EvictReason,
        reply: RpcReplyPort<Option<Eviction>>,
    },
    /// From the lane claims: evict this node's session of `lane`, claimed by `node`;
    /// a session of the lane still waiting for its own claim does not open.
    EvictLane {
        lane: String,
        node: String,
        epoch: u64,
        reply: RpcReplyPort<Option<Eviction>>,
    },
    /// Evict every live session that holds a lane (the node leaves the cluster).
    EvictLanes {
        reason: EvictReason,
        reply: RpcReplyPort<Vec<Eviction>>,
    },
    /// The cluster-wide claim of a session's lane came back: open it, or refuse.
    Claimed {
        id: String,
        how: Opening,
        claimed: Result<Claimed, RuntimeError>,
        reply: OpenReply,
    },
}

#[cfg(feature = "cluster")]
impl ractor::Message for RuntimeMsg {}

/// The longest an eviction takes before the root stops the session outright.
pub(crate) fn eviction_bound(grace: Duration) -> Duration {
    grace * 8 + Duration::from_secs(10)
}

/// The longest an eviction can take in all: its bound, then the stop that follows.
pub(crate) fn eviction_worst(grace: Duration) -> Duration {
    eviction_bound(grace) + grace * 8
}
