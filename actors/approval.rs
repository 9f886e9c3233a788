//! The approval broker: applies the effective policy, answers from the
//! allow-for-session cache, and otherwise asks the host's [`Approver`], one question at
//! a time so prompts never interleave.
//!
//! The cache key includes the server fingerprint, so a changed declaration asks again.
//! Denials are never cached.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::authority::{Action, ApprovalAnswer, ApprovalRequest, ApprovalSource, Approver};
use crate::clock::Clock;
use crate::core::{ApprovalPolicy, Fingerprint};
use crate::events::{EventHub, EventKind};

/// The broker's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Approval {
    /// Whether the action may proceed.
    pub allowed: bool,
    /// The answer that decided it.
    pub answer: ApprovalAnswer,
    /// Who decided.
    pub source: ApprovalSource,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    session: String,
    action: Action,
    server: String,
    fingerprint: Fingerprint,
    tool: Option<String>,
}

struct Pending {
    key: CacheKey,
    request: ApprovalRequest,
    reply: RpcReplyPort<Approval>,
}

/// Messages of the broker.
pub enum BrokerMsg {
    /// Decide one request under `policy`.
    Request {
        /// The question (boxed: it carries the whole preview).
        request: Box<ApprovalRequest>,
        /// Fingerprint of the server's declaration (cache key).
        fingerprint: Fingerprint,
        /// The effective policy.
        policy: ApprovalPolicy,
        /// Where the verdict goes.
        reply: RpcReplyPort<Approval>,
    },
    /// The approver answered the question in flight.
    Answered(ApprovalAnswer),
    /// Forget a session's cached answers (eviction).
    ForgetSession(String),
}

pub(crate) struct Broker;

#[derive(Clone)]
pub(crate) struct BrokerArgs {
    pub approver: Arc<dyn Approver>,
    pub clock: Arc<dyn Clock>,
    pub ttl: std::time::Duration,
    pub hub: Arc<EventHub>,
}

pub(crate) struct BrokerState {
    args: BrokerArgs,
    cache: HashMap<CacheKey, Instant>,
    queue: VecDeque<Pending>,
    asking: Option<Pending>,
}

impl BrokerState {
    fn cached(&self, key: &CacheKey) -> bool {
        self.cache
            .get(key)
            .is_some_and(|until| *until > self.args.clock.now())
    }

    fn decided(&self, request: &ApprovalRequest, approval: Approval) {
        self.args.hub.emit(
            &request.session,
            EventKind::ApprovalDecided {
                action: request.action,
                server: request.server.clone(),
                decision: approval.answer,
                source: approval.source,
            },
        );
    }

    /// Starts the next question if none is in flight. Requests answered by the cache in
    /// the meantime (an earlier "allow for session") are answered without asking.
    fn ask_next(&mut self, myself: &ActorRef<BrokerMsg>) {
        while self.asking.is_none() {
            let Some(next) = self.queue.pop_front() else {
                return;
            };
            if next.reply.is_closed() {
                continue;
            }
            if self.cached(&next.key) {
                let approval = Approval {
                    allowed: true,
                    answer: ApprovalAnswer::AllowSession,
                    source: ApprovalSource::Cache,
                };
                self.decided(&next.request, approval);
                let _ = next.reply.send(approval);
                continue;
            }
            self.args.hub.emit(
                &next.request.session,
                EventKind::ApprovalRequested {
                    action: next.request.action,
                    server: next.request.server.clone(),
                    tool: next.request.tool.clone(),
                    preview: next.request.preview.clone(),
                },
            );
            let decision = self.args.approver.decide(next.request.clone());
            let me = myself.clone();
            tokio::spawn(async move {
                let answer = decision.await;
                let _ = me.cast(BrokerMsg::Answered(answer));
            });
            self.asking = Some(next);
        }
    }
}

impl Actor for Broker {
    type Msg = BrokerMsg;
    type State = BrokerState;
    type Arguments = BrokerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: BrokerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(BrokerState {
            args,
            cache: HashMap::new(),
            queue: VecDeque::new(),
            asking: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            BrokerMsg::Request {
                request,
                fingerprint,
                policy,
                reply,
            } => {
                let request = *request;
                let key = CacheKey {
                    session: request.session.clone(),
                    action: request.action,
                    server: request.server.clone(),
                    fingerprint,
                    tool: request.tool.clone(),
                };
                let immediate = match policy {
                    ApprovalPolicy::Deny => Some(Approval {
                        allowed: false,
                        answer: ApprovalAnswer::Deny,
                        source: ApprovalSource::Policy,
                    }),
                    ApprovalPolicy::Auto => Some(Approval {
                        allowed: true,
                        answer: ApprovalAnswer::AllowOnce,
                        source: ApprovalSource::Policy,
                    }),
                    ApprovalPolicy::Prompt if state.cached(&key) => Some(Approval {
                        allowed: true,
                        answer: ApprovalAnswer::AllowSession,
                        source: ApprovalSource::Cache,
                    }),
                    ApprovalPolicy::Prompt => None,
                };
                match immediate {
                    Some(approval) => {
                        state.decided(&request, approval);
                        let _ = reply.send(approval);
                    }
                    None => {
                        state.queue.push_back(Pending {
                            key,
                            request,
                            reply,
                        });
                        state.ask_next(&myself);
                    }
                }
            }
            BrokerMsg::Answered(answer) => {
                if let Some(pending) = state.asking.take() {
                    if answer == ApprovalAnswer::AllowSession {
                        let until = state.args.clock.now() + state.args.ttl;
                        state.cache.insert(pending.key.clone(), until);
                    }
                    let approval = Approval {
                        allowed: answer != ApprovalAnswer::Deny,
                        answer,
                        source: ApprovalSource::Approver,
                    };
                    state.decided(&pending.request, approval);
                    let _ = pending.reply.send(approval);
                }
                state.ask_next(&myself);
            }
            BrokerMsg::ForgetSession(session) => {
                state.cache.retain(|k, _| k.session != session);
            }
        }
        Ok(())
    }
}

/// The broker is not running (it is being restarted by the runtime's root): nothing
/// was decided, and nothing may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the approval broker is restarting; nothing was approved")]
pub struct BrokerUnavailable;

/// Handle of the broker actor; the runtime's root swaps in a new actor when it
/// restarts one that died.
#[derive(Clone)]
pub struct BrokerHandle {
    actor: super::shared::Swappable<BrokerMsg>,
}

impl BrokerHandle {
    pub(crate) fn new(actor: ActorRef<BrokerMsg>) -> Self {
        BrokerHandle {
            actor: super::shared::Swappable::new(actor),
        }
    }

    /// Points the handle at a restarted broker.
    pub(crate) fn replace(&self, actor: ActorRef<BrokerMsg>) {
        self.actor.replace(actor);
    }

    /// Decides `request` under `policy`.
    ///
    /// # Errors
    /// [`BrokerUnavailable`] while the broker is down: the caller fails closed with
    /// that reason, never with an audit record saying the policy denied.
    pub async fn decide(
        &self,
        request: ApprovalRequest,
        fingerprint: Fingerprint,
        policy: ApprovalPolicy,
    ) -> Result<Approval, BrokerUnavailable> {
        match self
            .actor
            .get()
            .call(
                |reply| BrokerMsg::Request {
                    request: Box::new(request),
                    fingerprint,
                    policy,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(a)) => Ok(a),
            _ => Err(BrokerUnavailable),
        }
    }

    /// Drops a session's cached answers.
    pub fn forget_session(&self, session: &str) {
        let _ = self
            .actor
            .get()
            .cast(BrokerMsg::ForgetSession(session.to_string()));
    }
}
