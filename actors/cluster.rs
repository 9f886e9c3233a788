//! Session lanes across machines (feature `cluster`): each runtime joins a cluster as a
//! node ([`ClusterNode`]), and its lane directory keeps the one guarantee that spans
//! sessions cluster-wide: a session started or resumed in a lane evicts the lane's
//! previous incarnation, tracked, wherever it lives. The rules, and what stays per
//! node, are in `docs/scale-out.md`.
//!
//! Adversary: none is trusted more than the host: nodes authenticate with the cluster's
//! cookie (ractor_cluster's handshake) and listen where the host says (loopback in the
//! tests). What a peer sends is bounded: every message is one short JSON string, parsed
//! into a fixed shape, and a lane or node name longer than [`MAX_NAME`] is ignored.
//!
//! The directory of each node is one actor in the process group [`GROUP`]. To claim a
//! lane it asks every other directory to release it (`Release`, answered once that
//! node's eviction is done, with its report) and waits at most the claim timeout. It
//! remembers the last owner of each lane it heard of (node and epoch). When that owner
//! does not answer, the claim fails closed ([`RuntimeError::LaneUnreachable`]) unless
//! the spec says to proceed; when a node comes back it announces its lanes, and a node
//! holding a lane another claimed later evicts its own session there.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorRef, RpcReplyPort};
use ractor_cluster::{NodeServer, NodeServerMessage, RactorClusterMessage};
use serde::{Deserialize, Serialize};

use crate::actors::host::{
    Claimed, EvictReason, Eviction, EvictionReport, Internal, InternalMsg, LaneClaims, Runtime,
    RuntimeError, RuntimeMsg, eviction_worst,
};

mod directory;

use directory::{Directory, DirectoryArgs};

/// The process group every node's lane directory joins is this, then the cluster's
/// name (several clusters may share a network, or a process).
pub const GROUP: &str = "demiurge.lanes.";

/// Longest lane or node name a peer may send; longer ones are ignored.
pub const MAX_NAME: usize = 256;

/// How long a node takes to notice that a peer's directory left while the peer is
/// still connected (its runtime ended: its lanes are released), as opposed to the peer
/// being unreachable (its lanes stay held).
const DEATH_CHECK: Duration = Duration::from_secs(1);

/// How a runtime joins a cluster.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeOptions {
    /// The cluster's name: nodes of other clusters are never asked.
    pub cluster: String,
    /// This node's name, unique in the cluster.
    pub name: String,
    /// The cluster's shared secret (ractor_cluster's cookie): a node without it cannot
    /// join.
    pub cookie: String,
    /// Where this node listens for its peers.
    pub listen: std::net::SocketAddr,
    /// The longest a claim waits for the other nodes to release a lane.
    pub claim_timeout: Duration,
}

impl NodeOptions {
    /// A node `name` of cluster `demiurge` listening on `listen`, with `cookie`;
    /// claims wait 2 s.
    pub fn new(
        name: impl Into<String>,
        cookie: impl Into<String>,
        listen: std::net::SocketAddr,
    ) -> Self {
        NodeOptions {
            cluster: "demiurge".into(),
            name: name.into(),
            cookie: cookie.into(),
            listen,
            claim_timeout: Duration::from_secs(2),
        }
    }
}

/// Why joining or connecting failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The node server or the directory could not start.
    #[error("the cluster node could not start: {0}")]
    Start(String),
    /// A peer could not be reached.
    #[error("cannot connect to the node at {0}: {1}")]
    Connect(String, String),
}

/// A runtime's membership in a cluster: its node server and its lane directory.
/// Dropping the handle leaves the node in the cluster (the runtime's shutdown ends its
/// directory); [`ClusterNode::leave`] takes it out.
pub struct ClusterNode {
    name: String,
    group: String,
    server: ActorRef<NodeServerMessage>,
    directory: ActorRef<LaneMsg>,
    runtime: Runtime,
}

impl ClusterNode {
    /// Makes `runtime` a node of the cluster: starts its node server on
    /// `options.listen` and its lane directory (linked under the runtime's root), and
    /// from then on every lane of the runtime is claimed cluster-wide.
    ///
    /// # Errors
    /// [`ClusterError::Start`].
    pub async fn start(
        runtime: &Runtime,
        options: NodeOptions,
    ) -> Result<ClusterNode, ClusterError> {
        if !node_fits(&options.name) || !node_fits(&options.cluster) {
            return Err(ClusterError::Start(
                "node and cluster names are 1 to 64 of A-Z, a-z, 0-9, '.', '_', '-'".into(),
            ));
        }
        let server = node_server(&options).await?;
        let group = format!("{GROUP}{}", options.cluster);
        let args = DirectoryArgs {
            group: group.clone(),
            node: options.name.clone(),
            root: runtime.actor().clone(),
            server: server.clone(),
            claim_timeout: options.claim_timeout,
            grace: runtime.close_grace(),
        };
        let spawned = Actor::spawn_linked(None, Directory, args, runtime.actor().get_cell()).await;
        let directory = match spawned {
            Ok((directory, _)) => directory,
            Err(e) => {
                server.stop(None);
                return Err(ClusterError::Start(e.to_string()));
            }
        };
        runtime.set_lane_claims(Some(Arc::new(DirectoryClaims {
            directory: directory.clone(),
        })));
        Ok(ClusterNode {
            name: options.name,
            group,
            server,
            directory,
            runtime: runtime.clone(),
        })
    }

    /// This node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Connects to the node listening at `address`; returns once another node's
    /// directory answers this one (or fails after `within`).
    ///
    /// # Errors
    /// [`ClusterError::Connect`] when the peer cannot be reached.
    pub async fn connect(
        &self,
        address: std::net::SocketAddr,
        within: Duration,
    ) -> Result<(), ClusterError> {
        ractor_cluster::client_connect(&self.server, address)
            .await
            .map_err(|e| ClusterError::Connect(address.to_string(), e.to_string()))?;
        if self.sees_within(None, within).await {
            return Ok(());
        }
        Err(ClusterError::Connect(
            address.to_string(),
            "no peer directory answered in time".into(),
        ))
    }

    /// Whether node `peer`'s directory answers this node within `within`. Until it
    /// does, a claim of a lane `peer` held fails closed.
    pub async fn sees(&self, peer: &str, within: Duration) -> bool {
        self.sees_within(Some(peer), within).await
    }

    async fn sees_within(&self, peer: Option<&str>, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            for member in peers(&self.group) {
                let asked = member
                    .call(LaneMsg::Name, Some(Duration::from_millis(500)))
                    .await;
                if let Ok(ractor::rpc::CallResult::Success(name)) = asked
                    && name != self.name
                    && peer.is_none_or(|p| p == name)
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Cuts this node off the cluster (its node server and every peer connection end)
    /// while its runtime and directory go on: what a partition looks like to the
    /// others. [`ClusterNode::rejoin`] connects it again.
    pub async fn disconnect(&self) {
        let _ = self
            .server
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
    }

    /// After [`ClusterNode::disconnect`]: a new node server on `listen`, connected to
    /// the node at `peer`. Both directories then announce their lanes; whichever holds
    /// a lane another claimed later evicts its session there.
    ///
    /// # Errors
    /// As [`ClusterNode::start`] and [`ClusterNode::connect`].
    pub async fn rejoin(
        &mut self,
        options: NodeOptions,
        peer: std::net::SocketAddr,
    ) -> Result<(), ClusterError> {
        let server = node_server(&options).await?;
        self.server = server.clone();
        let _ = self
            .directory
            .cast(LaneMsg::Local(Local(LocalMsg::Server(server))));
        self.connect(peer, Duration::from_secs(10)).await
    }

    /// Leaves the cluster on purpose: this node's lane sessions are evicted first
    /// (waited for, within their bound), then the other nodes drop this node's lanes
    /// (nothing of it is held any more), then the directory and the node server stop.
    pub async fn leave(self) {
        let asked = self
            .runtime
            .actor()
            .call(
                |reply| {
                    RuntimeMsg::Internal(Internal(InternalMsg::EvictLanes {
                        reason: EvictReason::LeftCluster,
                        reply,
                    }))
                },
                Some(Duration::from_secs(10)),
            )
            .await;
        if let Ok(ractor::rpc::CallResult::Success(evictions)) = asked {
            let bound = eviction_worst(self.runtime.close_grace());
            let _ = tokio::time::timeout(
                bound,
                futures::future::join_all(evictions.into_iter().map(Eviction::wait)),
            )
            .await;
        }
        let message = serde_json::to_string(&self.name).unwrap_or_default();
        for peer in peers(&self.group) {
            let _ = peer.cast(LaneMsg::Leaving(message.clone()));
        }
        self.runtime.set_lane_claims(None);
        let _ = self
            .directory
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
        // Casts are sent in order on each connection: give them a moment to leave.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _ = self
            .server
            .stop_and_wait(None, Some(Duration::from_secs(5)))
            .await;
    }
}

/// A node server for `options`, listening on `options.listen` only.
async fn node_server(options: &NodeOptions) -> Result<ActorRef<NodeServerMessage>, ClusterError> {
    let server = NodeServer::new(
        options.listen.port(),
        options.cookie.clone(),
        options.name.clone(),
        options.listen.ip().to_string(),
        None,
        None,
    )
    .with_listen_addr(options.listen.ip());
    let (server, _) = Actor::spawn(None, server, ())
        .await
        .map_err(|e| ClusterError::Start(e.to_string()))?;
    Ok(server)
}

/// Other nodes' directories (this process's own actors excluded).
fn peers(group: &str) -> Vec<ActorRef<LaneMsg>> {
    ractor::pg::get_members(&group.to_string())
        .into_iter()
        .filter(|cell| !cell.get_id().is_local())
        .map(ActorRef::<LaneMsg>::from)
        .collect()
}

/// Whether `name` may name a node or a cluster: 1 to 64 of `[A-Za-z0-9._-]` (a node's
/// name shows in eviction reasons, events and errors).
pub fn node_fits(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Whether `lane` may cross the cluster: at most [`MAX_NAME`] bytes, no control
/// characters.
pub fn lane_fits(lane: &str) -> bool {
    lane.len() <= MAX_NAME && !lane.chars().any(char::is_control)
}

/// Whether a peer's claim of `lane` by `node` at `epoch` is one a node takes (an epoch
/// with room above it: a claim at the top could never be outclaimed).
pub fn claim_fits(lane: &str, node: &str, epoch: u64) -> bool {
    lane_fits(lane) && node_fits(node) && epoch < u64::MAX / 2
}

/// Most lanes a directory remembers; a peer's claim of one more is ignored, and a
/// local claim of one more fails closed.
pub const MAX_LANES: usize = 100_000;

/// A claim of `lane` by `node` at `epoch`: later claims win; ties go to the greater
/// node name.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ClaimOf {
    lane: String,
    node: String,
    epoch: u64,
}

impl ClaimOf {
    /// Whether a peer's claim is one this node takes: a plain node name, a lane name
    /// without controls, an epoch with room above it.
    fn fits(&self) -> bool {
        claim_fits(&self.lane, &self.node, self.epoch)
    }

    fn newer_than(&self, epoch: u64, node: &str) -> bool {
        (self.epoch, self.node.as_str()) > (epoch, node)
    }
}

/// A directory's answer to a release: who answered, and what its eviction closed.
#[derive(Debug, Serialize, Deserialize)]
struct Released {
    node: String,
    report: Option<EvictionReport>,
    /// This node claimed the lane later (a concurrent claim it wins): nothing evicted.
    #[serde(default)]
    refused: bool,
    /// This node could not release the lane (its root did not answer, or the claim
    /// was not one it takes): the claim fails closed.
    #[serde(default)]
    failed: bool,
}

impl Released {
    fn to(node: String, report: Option<EvictionReport>, refused: bool, failed: bool) -> String {
        let answer = Released {
            node,
            report,
            refused,
            failed,
        };
        serde_json::to_string(&answer).unwrap_or_default()
    }

    /// Whether a peer's answer is one this node takes (names and report plain).
    fn fits(&self) -> bool {
        node_fits(&self.node)
            && self.report.as_ref().is_none_or(|r| {
                r.session.len() <= MAX_NAME && lane_fits(&r.reason) && lane_fits(&r.session)
            })
    }
}

/// What a local claim asks.
#[derive(Debug)]
struct ClaimRequest {
    lane: String,
    proceed: bool,
}

/// What a local claim answers.
#[derive(Debug, PartialEq, Eq)]
enum ClaimAnswer {
    /// The eviction it caused elsewhere, and the claim's epoch and node.
    Claimed(Option<EvictionReport>, u64, String),
    Unreachable(String),
    Contended(String),
    /// This node remembers [`MAX_LANES`] lanes already.
    Full,
}

/// Messages of a lane directory. Every field is a JSON string, so that each variant
/// can cross the network (ractor_cluster); `Local` never does.
#[derive(RactorClusterMessage)]
pub enum LaneMsg {
    /// From a peer: release a lane it claims (`ClaimOf`), answered `Released` once this
    /// node's session there is evicted.
    #[rpc]
    Release(String, RpcReplyPort<String>),
    /// From a peer that (re)joined: a lane it holds (`ClaimOf`).
    Announce(String),
    /// From a peer leaving on purpose: its name (a JSON string).
    Leaving(String),
    /// This node's name.
    #[rpc]
    Name(RpcReplyPort<String>),
    /// Bookkeeping of this node, never sent by a peer (it cannot be encoded).
    Local(Local),
}

/// What a directory tells itself (it cannot be built outside this module, and what a
/// peer sends under this name decodes to nothing: a peer cannot make a node claim).
#[doc(hidden)]
pub struct Local(LocalMsg);

enum LocalMsg {
    /// From this node's root: claim a lane.
    Claim(ClaimRequest, RpcReplyPort<ClaimAnswer>),
    /// What a peer's `Local` decodes to: nothing.
    Ignored,
    /// A peer's directory left; if its node is still connected, its runtime ended.
    Left(Vec<ActorCell>),
    /// The node's names of connected peers, after a `Left`: release their lanes.
    Gone(Vec<String>),
    /// A claim of ours did not take: the owner before it, unless another came since.
    Failed(ClaimOf, Option<ClaimOf>),
    /// A new node server (after a rejoin).
    Server(ActorRef<NodeServerMessage>),
}

// Never sent to a peer; one that a peer names decodes to `Ignored`.
impl ractor::BytesConvertable for Local {
    fn into_bytes(self) -> Vec<u8> {
        Vec::new()
    }
    fn from_bytes(_: Vec<u8>) -> Self {
        Local(LocalMsg::Ignored)
    }
}

/// The lane claims of a node, made by its directory.
struct DirectoryClaims {
    directory: ActorRef<LaneMsg>,
}

#[async_trait::async_trait]
impl LaneClaims for DirectoryClaims {
    async fn claim(
        &self,
        lane: &str,
        proceed: bool,
        bound: Duration,
    ) -> Result<Claimed, RuntimeError> {
        if !lane_fits(lane) {
            // Peers would ignore it, and the claim would evict nothing: refuse it here.
            return Err(RuntimeError::Unavailable(format!(
                "a lane name crossing the cluster has at most {MAX_NAME} bytes and no control characters"
            )));
        }
        let request = ClaimRequest {
            lane: lane.to_string(),
            proceed,
        };
        let asked = self
            .directory
            .call(
                |reply| LaneMsg::Local(Local(LocalMsg::Claim(request, reply))),
                Some(bound),
            )
            .await;
        let Ok(ractor::rpc::CallResult::Success(answer)) = asked else {
            return Err(RuntimeError::Unavailable(
                "the lane directory did not answer".into(),
            ));
        };
        match answer {
            ClaimAnswer::Claimed(report, epoch, node) => Ok(Claimed {
                eviction: report.map(Eviction::done),
                stamp: (epoch, node),
            }),
            ClaimAnswer::Unreachable(node) => Err(RuntimeError::LaneUnreachable {
                lane: lane.to_string(),
                node,
            }),
            ClaimAnswer::Contended(node) => Err(RuntimeError::LaneContended {
                lane: lane.to_string(),
                node,
            }),
            ClaimAnswer::Full => Err(RuntimeError::Unavailable(format!(
                "this node's lane directory holds {MAX_LANES} lanes already"
            ))),
        }
    }

    fn actor(&self) -> ractor::ActorId {
        self.directory.get_id()
    }
}
