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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use ractor_cluster::{NodeServer, NodeServerMessage, RactorClusterMessage};
use serde::{Deserialize, Serialize};

use crate::actors::host::{
    Claimed, EvictReason, Eviction, EvictionReport, Internal, InternalMsg, LaneClaims, Runtime,
    RuntimeError, RuntimeMsg, eviction_worst,
};

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

struct Directory;

struct DirectoryArgs {
    group: String,
    node: String,
    root: ActorRef<RuntimeMsg>,
    server: ActorRef<NodeServerMessage>,
    claim_timeout: Duration,
    grace: Duration,
}

struct DirectoryState {
    args: DirectoryArgs,
    /// The latest claim heard of for each lane (ours included).
    owners: HashMap<String, ClaimOf>,
}

impl DirectoryState {
    /// Whether this node holds `lane` under a claim older than `claim`.
    fn outclaimed(&self, claim: &ClaimOf) -> bool {
        self.owners.get(&claim.lane).is_some_and(|ours| {
            ours.node == self.args.node && claim.newer_than(ours.epoch, &ours.node)
        })
    }

    fn record(&mut self, claim: ClaimOf) {
        if !self.owners.contains_key(&claim.lane) && self.owners.len() >= MAX_LANES {
            return;
        }
        let newer = self
            .owners
            .get(&claim.lane)
            .is_none_or(|known| claim.newer_than(known.epoch, &known.node));
        if newer {
            self.owners.insert(claim.lane.clone(), claim);
        }
    }

    /// Evicts this node's session of `lane` (if any) on behalf of `claimant`.
    async fn evict_local(&self, claim: &ClaimOf) -> Result<Option<Eviction>, ()> {
        let (lane, node, epoch) = (claim.lane.clone(), claim.node.clone(), claim.epoch);
        match self
            .args
            .root
            .call(
                |reply| {
                    RuntimeMsg::Internal(Internal(InternalMsg::EvictLane {
                        lane,
                        node,
                        epoch,
                        reply,
                    }))
                },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(eviction)) => Ok(eviction),
            _ => Err(()),
        }
    }
}

/// One method per message.
impl DirectoryState {
    /// [`LocalMsg::Claim`]: asks every peer to release the lane, on a task, and answers
    /// with the [`verdict`]. The claim is recorded at once: a concurrent claim of
    /// another node that is older is refused from now on.
    fn claim(
        &mut self,
        myself: &ActorRef<LaneMsg>,
        request: ClaimRequest,
        reply: RpcReplyPort<ClaimAnswer>,
    ) {
        let known = self.owners.get(&request.lane).cloned();
        if known.is_none() && self.owners.len() >= MAX_LANES {
            let _ = reply.send(ClaimAnswer::Full);
            return;
        }
        let claim = ClaimOf {
            lane: request.lane.clone(),
            node: self.args.node.clone(),
            epoch: known.as_ref().map_or(0, |k| k.epoch).saturating_add(1),
        };
        self.owners.insert(claim.lane.clone(), claim.clone());
        let bound = self.args.claim_timeout + eviction_worst(self.args.grace);
        let (group, myself) = (self.args.group.clone(), myself.clone());
        tokio::spawn(async move {
            let answers = ask_release(&group, &claim, bound).await;
            let owner = known.as_ref().map(|k| k.node.clone());
            let answer = verdict(owner, &claim, request.proceed, answers);
            if !matches!(answer, ClaimAnswer::Claimed(..)) {
                // A claim that did not take leaves the lane's owner as it was.
                let failed = LocalMsg::Failed(claim, known);
                let _ = myself.cast(LaneMsg::Local(Local(failed)));
            }
            let _ = reply.send(answer);
        });
    }

    /// [`LaneMsg::Release`]: a peer claims a lane; this node's session there is
    /// evicted, unless this node's own claim of it is the later one.
    async fn release(&mut self, claim: &str, reply: RpcReplyPort<String>) {
        let me = self.args.node.clone();
        let Some(claim) = serde_json::from_str::<ClaimOf>(claim)
            .ok()
            .filter(ClaimOf::fits)
        else {
            // Answered, so the claimant does not wait out its bound.
            let _ = reply.send(Released::to(me, None, false, true));
            return;
        };
        if claim.node == me {
            let _ = reply.send(Released::to(me, None, false, false));
            return;
        }
        if self
            .owners
            .get(&claim.lane)
            .is_some_and(|ours| ours.node == me && !claim.newer_than(ours.epoch, &ours.node))
        {
            // Our own claim of the lane is the later one: it stands.
            let _ = reply.send(Released::to(me, None, true, false));
            return;
        }
        let Ok(eviction) = self.evict_local(&claim).await else {
            // The root did not answer: nothing is known to be released.
            let _ = reply.send(Released::to(me, None, false, true));
            return;
        };
        self.record(claim);
        tokio::spawn(async move {
            let report = match eviction {
                Some(eviction) => eviction.wait().await.ok(),
                None => None,
            };
            let _ = reply.send(Released::to(me, report, false, false));
        });
    }

    /// [`LaneMsg::Announce`]: a peer that (re)joined holds a lane; a session of this
    /// node there under an older claim goes.
    async fn announced(&mut self, claim: &str) {
        let Some(claim) = serde_json::from_str::<ClaimOf>(claim)
            .ok()
            .filter(ClaimOf::fits)
        else {
            return;
        };
        if claim.node != self.args.node {
            if self.outclaimed(&claim) {
                // Claimed elsewhere while we could not hear it: ours goes.
                let _ = self.evict_local(&claim).await;
            }
            self.record(claim);
        }
    }

    /// [`LaneMsg::Leaving`]: a peer left on purpose; its lanes are no longer held.
    fn leaving(&mut self, node: &str) {
        if let Ok(node) = serde_json::from_str::<String>(node)
            && node_fits(&node)
            && node != self.args.node
        {
            self.owners.retain(|_, claim| claim.node != node);
        }
    }

    /// [`LocalMsg::Left`]: peers' directories left; a moment later, those whose node
    /// is still connected had their runtime end ([`LocalMsg::Gone`]).
    fn left(&self, myself: &ActorRef<LaneMsg>, cells: Vec<ActorCell>) {
        let (server, myself) = (self.args.server.clone(), myself.clone());
        tokio::spawn(async move {
            tokio::time::sleep(DEATH_CHECK).await;
            let Ok(sessions) = ractor::call_t!(server, NodeServerMessage::GetSessions, 2000) else {
                return;
            };
            let gone = cells
                .iter()
                .filter_map(|cell| match cell.get_id() {
                    ractor::ActorId::Remote { node_id, .. } => sessions.get(&node_id),
                    ractor::ActorId::Local(_) => None,
                })
                // ractor_cluster names a peer `name@host`.
                .filter_map(|info| info.peer_name.as_ref())
                .filter_map(|n| n.name.split('@').next().map(str::to_string))
                .collect::<Vec<_>>();
            if !gone.is_empty() {
                let _ = myself.cast(LaneMsg::Local(Local(LocalMsg::Gone(gone))));
            }
        });
    }

    /// [`LocalMsg::Failed`]: a claim of ours did not take; the owner before it stands,
    /// unless another claim came since.
    fn claim_failed(&mut self, failed: ClaimOf, before: Option<ClaimOf>) {
        let ours = self.owners.get(&failed.lane).is_some_and(|now| {
            (now.node.as_str(), now.epoch) == (failed.node.as_str(), failed.epoch)
        });
        if ours {
            match before {
                Some(before) => self.owners.insert(failed.lane.clone(), before),
                None => self.owners.remove(&failed.lane),
            };
        }
    }
}

/// Asks every peer of `group` to release the lane `claim` names, each within `bound`;
/// the answers that came and fit.
async fn ask_release(group: &str, claim: &ClaimOf, bound: Duration) -> Vec<Released> {
    let message = serde_json::to_string(claim).unwrap_or_default();
    let asked = peers(group).into_iter().map(|peer| {
        let message = message.clone();
        async move {
            let answer = peer
                .call(|r| LaneMsg::Release(message, r), Some(bound))
                .await;
            match answer {
                Ok(ractor::rpc::CallResult::Success(answer)) => {
                    serde_json::from_str::<Released>(&answer)
                        .ok()
                        .filter(Released::fits)
                }
                _ => None,
            }
        }
    });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// What a claim of this node comes to, given the lane's last known `owner` and the
/// peers' `answers`: a peer that could not release fails it (unreachable), a peer whose
/// own claim is later wins it (contended), an owner on another node that did not answer
/// fails it unless the claim may `proceed`; otherwise it took, with the eviction one
/// peer reported.
fn verdict(
    owner: Option<String>,
    claim: &ClaimOf,
    proceed: bool,
    answers: Vec<Released>,
) -> ClaimAnswer {
    let owner = owner.filter(|node| node != &claim.node);
    if let Some(failed) = answers.iter().find(|a| a.failed) {
        return ClaimAnswer::Unreachable(failed.node.clone());
    }
    if let Some(refused) = answers.iter().find(|a| a.refused) {
        return ClaimAnswer::Contended(refused.node.clone());
    }
    match owner {
        Some(node) if !proceed && !answers.iter().any(|a| a.node == node) => {
            ClaimAnswer::Unreachable(node)
        }
        _ => ClaimAnswer::Claimed(
            answers.into_iter().find_map(|a| a.report),
            claim.epoch,
            claim.node.clone(),
        ),
    }
}

impl Actor for Directory {
    type Msg = LaneMsg;
    type State = DirectoryState;
    type Arguments = DirectoryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LaneMsg>,
        args: DirectoryArgs,
    ) -> Result<DirectoryState, ActorProcessingErr> {
        ractor::pg::join(args.group.clone(), vec![myself.get_cell()]);
        ractor::pg::monitor(args.group.clone(), myself.get_cell());
        Ok(DirectoryState {
            args,
            owners: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<LaneMsg>,
        message: LaneMsg,
        state: &mut DirectoryState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LaneMsg::Release(claim, reply) => state.release(&claim, reply).await,
            LaneMsg::Announce(claim) => state.announced(&claim).await,
            LaneMsg::Name(reply) => {
                let _ = reply.send(state.args.node.clone());
            }
            LaneMsg::Leaving(node) => state.leaving(&node),
            LaneMsg::Local(Local(local)) => match local {
                LocalMsg::Claim(request, reply) => state.claim(&myself, request, reply),
                LocalMsg::Left(cells) => state.left(&myself, cells),
                LocalMsg::Gone(nodes) => {
                    // Connected, but its directory is gone: that node's runtime ended,
                    // and its sessions (and their servers) with it.
                    state.owners.retain(|_, claim| !nodes.contains(&claim.node));
                }
                LocalMsg::Failed(failed, before) => state.claim_failed(failed, before),
                LocalMsg::Server(server) => state.args.server = server,
                LocalMsg::Ignored => {}
            },
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<LaneMsg>,
        event: SupervisionEvent,
        state: &mut DirectoryState,
    ) -> Result<(), ActorProcessingErr> {
        use ractor::pg::GroupChangeMessage;
        let SupervisionEvent::ProcessGroupChanged(change) = event else {
            return Ok(());
        };
        match change {
            GroupChangeMessage::Join(_, _, cells) => {
                // A peer (re)joined: tell it the lanes this node holds.
                let mine: Vec<String> = state
                    .owners
                    .values()
                    .filter(|claim| claim.node == state.args.node)
                    .filter_map(|claim| serde_json::to_string(claim).ok())
                    .collect();
                for cell in cells.into_iter().filter(|c| !c.get_id().is_local()) {
                    let peer = ActorRef::<LaneMsg>::from(cell);
                    for claim in &mine {
                        let _ = peer.cast(LaneMsg::Announce(claim.clone()));
                    }
                }
            }
            GroupChangeMessage::Leave(_, _, cells) => {
                let remote: Vec<ActorCell> = cells
                    .into_iter()
                    .filter(|c| !c.get_id().is_local())
                    .collect();
                if !remote.is_empty() {
                    let _ = myself.cast(LaneMsg::Local(Local(LocalMsg::Left(remote))));
                }
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> ClaimOf {
        ClaimOf {
            lane: "main".into(),
            node: "a".into(),
            epoch: 3,
        }
    }

    fn answer(node: &str, refused: bool, failed: bool, evicted: bool) -> Released {
        Released {
            node: node.into(),
            report: evicted.then(|| EvictionReport {
                session: "s-1".into(),
                reason: "replaced_on_node:a".into(),
                connections_closed: 1,
            }),
            refused,
            failed,
        }
    }

    #[test]
    fn a_claim_takes_only_when_every_peer_released_and_the_owner_answered() {
        // Nobody else ever held it: it takes, and nothing was evicted.
        assert_eq!(
            verdict(None, &claim(), false, vec![]),
            ClaimAnswer::Claimed(None, 3, "a".into())
        );
        // Our own last claim counts as no other owner.
        assert_eq!(
            verdict(Some("a".into()), &claim(), false, vec![]),
            ClaimAnswer::Claimed(None, 3, "a".into())
        );
        // The owner answered and evicted its session: that eviction is reported.
        let took = verdict(
            Some("b".into()),
            &claim(),
            false,
            vec![
                answer("c", false, false, false),
                answer("b", false, false, true),
            ],
        );
        assert!(
            matches!(took, ClaimAnswer::Claimed(Some(_), 3, _)),
            "{took:?}"
        );
        // The owner did not answer: unreachable, unless the claim may proceed.
        assert_eq!(
            verdict(
                Some("b".into()),
                &claim(),
                false,
                vec![answer("c", false, false, false)]
            ),
            ClaimAnswer::Unreachable("b".into())
        );
        assert!(matches!(
            verdict(Some("b".into()), &claim(), true, vec![]),
            ClaimAnswer::Claimed(None, 3, _)
        ));
        // A peer that could not release fails it before one that refused; a refusal
        // (its own claim is later) wins over proceeding.
        assert_eq!(
            verdict(
                None,
                &claim(),
                true,
                vec![
                    answer("c", true, false, false),
                    answer("d", false, true, false)
                ]
            ),
            ClaimAnswer::Unreachable("d".into())
        );
        assert_eq!(
            verdict(None, &claim(), true, vec![answer("c", true, false, false)]),
            ClaimAnswer::Contended("c".into())
        );
    }
}
