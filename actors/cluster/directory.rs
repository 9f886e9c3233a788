//! The directory actor of one node: the lanes it holds, claims asked of its peers,
//! releases, and the pure verdict that settles two claims of one lane.

use std::collections::HashMap;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use ractor_cluster::NodeServerMessage;

use crate::actors::host::{Eviction, Internal, InternalMsg, RuntimeMsg, eviction_worst};

use super::{
    ClaimAnswer, ClaimOf, ClaimRequest, DEATH_CHECK, LaneMsg, Local, LocalMsg, MAX_LANES, Released,
    node_fits, peers,
};

pub(super) struct Directory;

pub(super) struct DirectoryArgs {
    pub(super) group: String,
    pub(super) node: String,
    pub(super) root: ActorRef<RuntimeMsg>,
    pub(super) server: ActorRef<NodeServerMessage>,
    pub(super) claim_timeout: Duration,
    pub(super) grace: Duration,
}

pub(super) struct DirectoryState {
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
pub(super) async fn ask_release(group: &str, claim: &ClaimOf, bound: Duration) -> Vec<Released> {
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
pub(super) fn verdict(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::host::EvictionReport;

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
