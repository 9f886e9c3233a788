//! The approval broker: applies the effective policy, answers from the
//! allow-for-session cache, and otherwise asks the host's [`Approver`].
//!
//! Questions are queued per session: one at a time within a session (its prompts never
//! interleave), and sessions never wait on each other, so one unanswered prompt stalls
//! only its own session. A question whose requester went away (the turn or call future
//! dropped, the session evicted, the runtime shut down) is withdrawn: dropped from its
//! queue, or, when it is being asked, the approver's future is dropped, which is how
//! the host's [`Approver`] observes it. With `RuntimeConfig::approval_deadline`, a
//! question nobody answered in time is denied ([`ApprovalSource::Deadline`]).
//!
//! The cache key includes the server fingerprint, so a changed declaration asks again.
//! Denials are never cached.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::swappable::Swappable;
use crate::authority::{Action, ApprovalAnswer, ApprovalRequest, ApprovalSource, Approver};
use crate::clock::Clock;
use crate::core::{ApprovalPolicy, Fingerprint};
use crate::events::{EventHub, EventKind};

/// The broker's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

/// A question waiting for its turn in its session's queue.
struct Pending {
    id: u64,
    key: CacheKey,
    request: ApprovalRequest,
    reply: RpcReplyPort<Approval>,
}

/// The question being asked in one session, and the task awaiting the approver's
/// future (aborting it drops that future: the withdrawal the approver sees).
struct Asking {
    pending: Pending,
    task: tokio::task::AbortHandle,
}

/// One session's questions.
#[derive(Default)]
struct Lane {
    asking: Option<Asking>,
    queue: VecDeque<Pending>,
}

/// Messages of the broker.
pub enum BrokerMsg {
    /// Decide one request under `policy`.
    Request {
        /// Names the question for its withdrawal.
        id: u64,
        /// The question (boxed: it carries the whole preview).
        request: Box<ApprovalRequest>,
        /// Fingerprint of the server's declaration (cache key).
        fingerprint: Fingerprint,
        /// The effective policy.
        policy: ApprovalPolicy,
        /// Where the verdict goes.
        reply: RpcReplyPort<Approval>,
    },
    /// The approver answered a session's question in flight; `None` when the approval
    /// deadline passed first.
    Answered {
        /// The session asked.
        session: String,
        /// The question.
        id: u64,
        /// The answer, if one came in time.
        answer: Option<ApprovalAnswer>,
    },
    /// The requester went away: drop the question, or stop asking it.
    Withdraw {
        /// The session that asked.
        session: String,
        /// The question.
        id: u64,
    },
    /// Forget a session's cached answers and withdraw its questions (eviction).
    ForgetSession(String),
}

#[cfg(feature = "cluster")]
impl ractor::Message for BrokerMsg {}

pub(crate) struct Broker;

pub(crate) struct BrokerArgs {
    pub approver: Arc<dyn Approver>,
    pub clock: Arc<dyn Clock>,
    pub ttl: Duration,
    /// How long a question may wait for the approver; `None`: as long as it takes.
    pub deadline: Option<Duration>,
    pub hub: Arc<EventHub>,
    /// Answers a person gave "always" (the runtime home's `approvals.json`).
    pub remembered: crate::authority::RememberedApprovals,
}

impl BrokerArgs {
    /// The broker of a runtime with this configuration and event hub.
    pub(crate) fn new(config: &crate::actors::RuntimeConfig, hub: &Arc<EventHub>) -> Self {
        BrokerArgs {
            approver: Arc::clone(&config.approver),
            clock: Arc::clone(&config.clock),
            ttl: config.approval_session_ttl,
            deadline: config.approval_deadline,
            hub: Arc::clone(hub),
            remembered: crate::authority::RememberedApprovals::open(&config.home),
        }
    }
}

pub(crate) struct BrokerState {
    args: BrokerArgs,
    cache: HashMap<CacheKey, Instant>,
    /// Sessions with a question asked or queued; a lane goes when it empties.
    lanes: HashMap<String, Lane>,
}

impl BrokerState {
    /// Answers at once what the policy or the cache decides; queues the rest in the
    /// session's lane for the approver.
    fn request(
        &mut self,
        myself: &ActorRef<BrokerMsg>,
        id: u64,
        request: ApprovalRequest,
        fingerprint: Fingerprint,
        policy: ApprovalPolicy,
        reply: RpcReplyPort<Approval>,
    ) {
        // A call is keyed by the tool itself (raw name and definition), never by the
        // exposed name, which a server's later listing may give to another tool.
        let tool = match &request.call {
            Some(subject) => Some(subject.identity()),
            None => request.tool.clone(),
        };
        let key = CacheKey {
            session: request.session.clone(),
            action: request.action,
            server: request.server.clone(),
            fingerprint,
            tool,
        };
        let immediate = |allowed, answer, source| {
            Some(Approval {
                allowed,
                answer,
                source,
            })
        };
        let decided = match policy {
            ApprovalPolicy::Deny => immediate(false, ApprovalAnswer::Deny, ApprovalSource::Policy),
            ApprovalPolicy::Auto => {
                immediate(true, ApprovalAnswer::AllowOnce, ApprovalSource::Policy)
            }
            // A changed definition is asked every time it is one: its only memory is
            // the pin file a yes writes.
            ApprovalPolicy::Prompt if request.action == Action::Change => None,
            ApprovalPolicy::Prompt if self.cached(&key) => {
                immediate(true, ApprovalAnswer::AllowSession, ApprovalSource::Cache)
            }
            ApprovalPolicy::Prompt if self.remembered(&key) => immediate(
                true,
                ApprovalAnswer::AllowAlways,
                ApprovalSource::Remembered,
            ),
            ApprovalPolicy::Prompt => None,
        };
        match decided {
            Some(approval) => {
                self.decided(&request, approval);
                let _ = reply.send(approval);
            }
            None => {
                let session = request.session.clone();
                let lane = self.lanes.entry(session.clone()).or_default();
                lane.queue.push_back(Pending {
                    id,
                    key,
                    request,
                    reply,
                });
                self.ask_next(myself, &session);
            }
        }
    }

    /// A session's question in flight was answered (or its deadline passed): cache an
    /// allow-for-session, answer, and ask that session's next.
    fn answered(
        &mut self,
        myself: &ActorRef<BrokerMsg>,
        session: &str,
        id: u64,
        answer: Option<ApprovalAnswer>,
    ) {
        let Some(lane) = self.lanes.get_mut(session) else {
            return;
        };
        if lane.asking.as_ref().is_none_or(|a| a.pending.id != id) {
            return;
        }
        let Some(Asking { pending, .. }) = lane.asking.take() else {
            return;
        };
        let remembers = pending.request.action != Action::Change;
        if remembers
            && matches!(
                answer,
                Some(ApprovalAnswer::AllowSession | ApprovalAnswer::AllowAlways)
            )
        {
            let until = self.args.clock.now() + self.args.ttl;
            self.cache.insert(pending.key.clone(), until);
        }
        if remembers && answer == Some(ApprovalAnswer::AllowAlways) {
            let k = &pending.key;
            let remembered = self.args.remembered.remember(
                k.action,
                &k.server,
                k.tool.as_deref(),
                &k.fingerprint,
            );
            if remembered.is_err() {
                // Still allowed now; the next session asks again.
                tracing::warn!(server = %k.server, "could not store an \"always\" approval");
            }
        }
        let approval = match answer {
            Some(answer) => Approval {
                allowed: answer != ApprovalAnswer::Deny,
                answer,
                source: ApprovalSource::Approver,
            },
            None => Approval {
                allowed: false,
                answer: ApprovalAnswer::Deny,
                source: ApprovalSource::Deadline,
            },
        };
        self.decided(&pending.request, approval);
        let _ = pending.reply.send(approval);
        self.ask_next(myself, session);
    }

    /// The requester of question `id` went away: drop it from its lane, or stop asking
    /// it (dropping the approver's future) and ask the lane's next.
    fn withdraw(&mut self, myself: &ActorRef<BrokerMsg>, session: &str, id: u64) {
        let Some(lane) = self.lanes.get_mut(session) else {
            return;
        };
        lane.queue.retain(|p| p.id != id);
        if lane.asking.as_ref().is_some_and(|a| a.pending.id == id)
            && let Some(asking) = lane.asking.take()
        {
            self.stop_asking(asking);
        }
        self.ask_next(myself, session);
    }

    /// Ends a question being asked: its approver's future is dropped, and the event log
    /// says it was withdrawn.
    fn stop_asking(&self, asking: Asking) {
        asking.task.abort();
        let request = &asking.pending.request;
        self.args.hub.emit(
            &request.session,
            EventKind::ApprovalWithdrawn {
                action: request.action,
                server: request.server.clone(),
                tool: request.tool.clone(),
            },
        );
    }

    /// A session ended: its cached answers go, and so do its questions.
    fn forget_session(&mut self, session: &str) {
        self.cache.retain(|k, _| k.session != session);
        if let Some(lane) = self.lanes.remove(session)
            && let Some(asking) = lane.asking
        {
            self.stop_asking(asking);
        }
    }

    fn remembered(&mut self, key: &CacheKey) -> bool {
        self.args.remembered.covers(
            key.action,
            &key.server,
            key.tool.as_deref(),
            &key.fingerprint,
        )
    }

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

    /// Starts the session's next question if none of its questions is in flight.
    /// Requests answered by the cache in the meantime (an earlier "allow for session")
    /// are answered without asking; requests whose requester left are dropped.
    fn ask_next(&mut self, myself: &ActorRef<BrokerMsg>, session: &str) {
        loop {
            let Some(lane) = self.lanes.get_mut(session) else {
                return;
            };
            if lane.asking.is_some() {
                return;
            }
            let Some(next) = lane.queue.pop_front() else {
                self.lanes.remove(session);
                return;
            };
            if next.reply.is_closed() {
                continue;
            }
            let earlier = if next.request.action == Action::Change {
                None
            } else if self.cached(&next.key) {
                Some((ApprovalAnswer::AllowSession, ApprovalSource::Cache))
            } else if self.remembered(&next.key) {
                Some((ApprovalAnswer::AllowAlways, ApprovalSource::Remembered))
            } else {
                None
            };
            if let Some((answer, source)) = earlier {
                let approval = Approval {
                    allowed: true,
                    answer,
                    source,
                };
                self.decided(&next.request, approval);
                let _ = next.reply.send(approval);
                continue;
            }
            let task = self.ask(myself, &next);
            if let Some(lane) = self.lanes.get_mut(session) {
                lane.asking = Some(Asking {
                    pending: next,
                    task,
                });
            }
        }
    }

    /// Puts `pending` to the approver on a task of its own, bounded by the deadline.
    fn ask(&self, myself: &ActorRef<BrokerMsg>, pending: &Pending) -> tokio::task::AbortHandle {
        let request = &pending.request;
        self.args.hub.emit(
            &request.session,
            EventKind::ApprovalRequested {
                action: request.action,
                server: request.server.clone(),
                tool: request.tool.clone(),
                arguments: request.arguments.clone(),
                preview: Box::new(request.preview.clone()),
            },
        );
        // An approver whose future panics has not approved: it is a denial, and the
        // lane moves on instead of waiting for an answer that never comes.
        // Whether `decide` itself or its future panics, the answer is a denial.
        let approver = Arc::clone(&self.args.approver);
        let asked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            approver.decide(request.clone())
        }));
        let decision = async move {
            match asked {
                Ok(future) => std::panic::AssertUnwindSafe(future)
                    .catch_unwind()
                    .await
                    .unwrap_or(ApprovalAnswer::Deny),
                Err(_) => ApprovalAnswer::Deny,
            }
        };
        let (me, session, id, deadline) = (
            myself.clone(),
            request.session.clone(),
            pending.id,
            self.args.deadline,
        );
        tokio::spawn(async move {
            let answer = match deadline {
                Some(deadline) => tokio::time::timeout(deadline, decision).await.ok(),
                None => Some(decision.await),
            };
            let _ = me.cast(BrokerMsg::Answered {
                session,
                id,
                answer,
            });
        })
        .abort_handle()
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
            lanes: HashMap::new(),
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
                id,
                request,
                fingerprint,
                policy,
                reply,
            } => state.request(&myself, id, *request, fingerprint, policy, reply),
            BrokerMsg::Answered {
                session,
                id,
                answer,
            } => state.answered(&myself, &session, id, answer),
            BrokerMsg::Withdraw { session, id } => state.withdraw(&myself, &session, id),
            BrokerMsg::ForgetSession(session) => state.forget_session(&session),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Shutdown (or a crash): every question being asked is withdrawn.
        let sessions: Vec<String> = state.lanes.keys().cloned().collect();
        for session in sessions {
            state.forget_session(&session);
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
    actor: Swappable<BrokerMsg>,
    /// Names each question, so a requester that goes away can withdraw it.
    ids: Arc<AtomicU64>,
    telemetry: crate::telemetry::Telemetry,
}

/// Withdraws a question when its requester's future is dropped before the verdict.
struct Withdrawal<'a> {
    handle: &'a BrokerHandle,
    session: String,
    id: u64,
    armed: bool,
}

impl Drop for Withdrawal<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.handle.actor.get().cast(BrokerMsg::Withdraw {
                session: std::mem::take(&mut self.session),
                id: self.id,
            });
        }
    }
}

impl BrokerHandle {
    pub(crate) fn new(actor: ActorRef<BrokerMsg>, telemetry: crate::telemetry::Telemetry) -> Self {
        BrokerHandle {
            actor: Swappable::new(actor),
            ids: Arc::default(),
            telemetry,
        }
    }

    /// Points the handle at a restarted broker.
    pub(crate) fn replace(&self, actor: ActorRef<BrokerMsg>) {
        self.actor.replace(actor);
    }

    /// The current broker's id (the root tells its death from a session's).
    pub(crate) fn id(&self) -> ractor::ActorId {
        self.actor.get().get_id()
    }

    /// Stops the current broker (runtime shutdown, after the root).
    pub(crate) fn stop(&self) {
        self.actor.get().stop(Some("shutdown".into()));
    }

    /// Decides `request` under `policy`. Dropping the future withdraws the question.
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
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let (action, asked_at) = (request.action, std::time::Instant::now());
        let mut withdrawal = Withdrawal {
            handle: self,
            session: request.session.clone(),
            id,
            armed: policy == ApprovalPolicy::Prompt,
        };
        let asked = self
            .actor
            .get()
            .call(
                |reply| BrokerMsg::Request {
                    id,
                    request: Box::new(request),
                    fingerprint,
                    policy,
                    reply,
                },
                None,
            )
            .await;
        withdrawal.armed = false;
        match asked {
            Ok(ractor::rpc::CallResult::Success(a)) => {
                self.telemetry.approval_answered(action, a.source, asked_at);
                Ok(a)
            }
            _ => Err(BrokerUnavailable),
        }
    }

    /// Drops a session's cached answers and withdraws its questions.
    pub fn forget_session(&self, session: &str) {
        let forget = BrokerMsg::ForgetSession(session.to_string());
        let _ = self.actor.get().cast(forget);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::ConnectPreview;
    use crate::clock::ManualClock;
    use crate::events::MemorySink;
    use futures::future::BoxFuture;
    use std::time::Duration;
    use tokio::sync::{mpsc, oneshot};

    const TTL: Duration = Duration::from_secs(60);

    /// An approver the test answers by hand: each question arrives on a channel with
    /// the sender of its answer.
    struct Hand(mpsc::UnboundedSender<(ApprovalRequest, oneshot::Sender<ApprovalAnswer>)>);

    impl Approver for Hand {
        fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
            let (tx, rx) = oneshot::channel();
            let _ = self.0.send((request, tx));
            Box::pin(async move { rx.await.unwrap_or(ApprovalAnswer::Deny) })
        }
    }

    /// An approver whose answer panics.
    struct Broken;

    impl Approver for Broken {
        fn decide(&self, _request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
            Box::pin(async { panic!("the approver broke") })
        }
    }

    type Questions = mpsc::UnboundedReceiver<(ApprovalRequest, oneshot::Sender<ApprovalAnswer>)>;

    struct Fixture {
        broker: BrokerHandle,
        clock: Arc<ManualClock>,
        questions: Questions,
        events: MemorySink,
        preview: ConnectPreview,
        _core: tempfile::TempDir,
    }

    async fn fixture_with(approver: Option<Arc<dyn Approver>>) -> Fixture {
        fixture_full(approver, None).await
    }

    async fn fixture_full(
        approver: Option<Arc<dyn Approver>>,
        deadline: Option<Duration>,
    ) -> Fixture {
        let (tx, questions) = mpsc::unbounded_channel();
        let approver = approver.unwrap_or_else(|| Arc::new(Hand(tx)));
        let clock = Arc::new(ManualClock::new());
        let events = MemorySink::new();
        let args = BrokerArgs {
            approver,
            clock: Arc::clone(&clock) as Arc<dyn Clock>,
            ttl: TTL,
            deadline,
            hub: Arc::new(EventHub::new(Arc::new(events.clone()), None)),
            remembered: crate::authority::RememberedApprovals::in_memory(),
        };
        let (actor, _) = Actor::spawn(None, Broker, args).await.unwrap();
        let core = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(core.path().join("agent/mcp")).unwrap();
        std::fs::write(core.path().join("agent.yaml"), "name: t\n").unwrap();
        std::fs::write(core.path().join("agent/mcp/docs.yaml"), "command: docs\n").unwrap();
        let loaded = crate::core::load(core.path()).unwrap();
        let preview =
            ConnectPreview::new(&loaded.declarations[0], ApprovalPolicy::Prompt, None, &[]);
        Fixture {
            broker: BrokerHandle::new(actor, crate::telemetry::Telemetry::default()),
            clock,
            questions,
            events,
            preview,
            _core: core,
        }
    }

    async fn fixture() -> Fixture {
        fixture_with(None).await
    }

    impl Fixture {
        fn request(&self, session: &str, tool: Option<&str>) -> ApprovalRequest {
            ApprovalRequest {
                session: session.into(),
                action: if tool.is_some() {
                    Action::Call
                } else {
                    Action::Connect
                },
                server: "docs".into(),
                tool: tool.map(String::from),
                arguments: None,
                preview: self.preview.clone(),
                call: None,
                change: None,
            }
        }

        /// Asks in the background; the answer comes on the returned receiver.
        fn ask(
            &self,
            request: ApprovalRequest,
            fingerprint: Fingerprint,
        ) -> tokio::task::JoinHandle<Result<Approval, BrokerUnavailable>> {
            let broker = self.broker.clone();
            tokio::spawn(async move {
                broker
                    .decide(request, fingerprint, ApprovalPolicy::Prompt)
                    .await
            })
        }

        async fn next_question(&mut self) -> (ApprovalRequest, oneshot::Sender<ApprovalAnswer>) {
            tokio::time::timeout(Duration::from_secs(10), self.questions.recv())
                .await
                .expect("no question reached the approver")
                .unwrap()
        }

        /// Nothing is asked of the approver for a while (a bound no correct broker
        /// comes near: it asks within microseconds).
        async fn no_question(&mut self) {
            let asked =
                tokio::time::timeout(Duration::from_millis(200), self.questions.recv()).await;
            assert!(
                asked.is_err(),
                "the approver was asked: {:?}",
                asked.map(|q| q.map(|q| q.0.session))
            );
        }
    }

    fn fp(s: &str) -> Fingerprint {
        Fingerprint::of(s.as_bytes())
    }

    #[tokio::test]
    async fn one_question_at_a_time_per_session_in_arrival_order() {
        let mut f = fixture().await;
        let first = f.ask(f.request("s1", None), fp("a"));
        let (q1, answer1) = f.next_question().await;
        let second = f.ask(f.request("s1", Some("docs__search")), fp("a"));
        f.no_question().await;
        assert_eq!(q1.tool, None);
        answer1.send(ApprovalAnswer::AllowOnce).unwrap();
        let (q2, answer2) = f.next_question().await;
        assert_eq!(q2.tool.as_deref(), Some("docs__search"));
        answer2.send(ApprovalAnswer::Deny).unwrap();
        let (a1, a2) = (
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        );
        assert!(a1.allowed && a1.source == ApprovalSource::Approver);
        assert!(!a2.allowed && a2.answer == ApprovalAnswer::Deny);
    }

    #[tokio::test]
    async fn an_unanswered_question_stalls_only_its_own_session() {
        let mut f = fixture().await;
        let _stalled = f.ask(f.request("s1", None), fp("a"));
        let (q1, _never_answered) = f.next_question().await;
        assert_eq!(q1.session, "s1");
        // Three other sessions are asked while s1's question stays open.
        let mut others = Vec::new();
        for session in ["s2", "s3", "s4"] {
            others.push((session, f.ask(f.request(session, None), fp("a"))));
        }
        let mut asked = Vec::new();
        for _ in 0..3 {
            let (q, answer) = f.next_question().await;
            asked.push(q.session.clone());
            answer.send(ApprovalAnswer::AllowOnce).unwrap();
        }
        asked.sort();
        assert_eq!(asked, ["s2", "s3", "s4"]);
        for (session, verdict) in others {
            let verdict = verdict.await.unwrap().unwrap();
            assert!(verdict.allowed, "{session}: {verdict:?}");
        }
    }

    #[tokio::test]
    async fn a_question_whose_requester_left_is_withdrawn_and_the_approver_sees_it() {
        let mut f = fixture().await;
        let asked = f.ask(f.request("s1", None), fp("a"));
        let (_, mut answer) = f.next_question().await;
        let queued = f.ask(f.request("s1", Some("docs__search")), fp("a"));
        // The requester of the question being asked goes away: the approver's future
        // is dropped (its answer channel closes) and the next question is asked.
        asked.abort();
        tokio::time::timeout(Duration::from_secs(10), answer.closed())
            .await
            .expect("the approver's future was not dropped");
        let (next, answer) = f.next_question().await;
        assert_eq!(next.tool.as_deref(), Some("docs__search"));
        // A queued question whose requester left is never asked.
        let third = f.ask(f.request("s1", Some("docs__fetch")), fp("a"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        third.abort();
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer.send(ApprovalAnswer::AllowOnce).unwrap();
        assert!(queued.await.unwrap().unwrap().allowed);
        f.no_question().await;
        assert_eq!(f.events.of_type("approval.withdrawn").len(), 1);
    }

    #[tokio::test]
    async fn forgetting_a_session_withdraws_its_questions() {
        let mut f = fixture().await;
        let asked = f.ask(f.request("s1", None), fp("a"));
        let (_, mut answer) = f.next_question().await;
        f.broker.forget_session("s1");
        tokio::time::timeout(Duration::from_secs(10), answer.closed())
            .await
            .expect("the approver's future was not dropped");
        // The requester is answered by nobody: its verdict never says "allowed".
        let verdict = tokio::time::timeout(Duration::from_secs(10), asked)
            .await
            .expect("the requester was left waiting")
            .unwrap();
        assert!(verdict.is_err(), "{verdict:?}");
    }

    #[tokio::test]
    async fn a_question_past_the_deadline_is_denied_as_such() {
        let mut f = fixture_full(None, Some(Duration::from_millis(100))).await;
        let asked = f.ask(f.request("s1", None), fp("a"));
        let (_, answer) = f.next_question().await;
        let verdict = tokio::time::timeout(Duration::from_secs(10), asked)
            .await
            .expect("the deadline did not end the question")
            .unwrap()
            .unwrap();
        assert!(!verdict.allowed);
        assert_eq!(verdict.source, ApprovalSource::Deadline);
        assert!(
            answer.is_closed(),
            "the approver's future outlived the deadline"
        );
        let decided = f.events.of_type("approval.decided");
        assert_eq!(
            serde_json::to_value(&decided[0]).unwrap()["source"],
            "deadline"
        );
    }

    #[tokio::test]
    async fn allow_for_session_is_cached_per_session_action_tool_and_fingerprint() {
        let mut f = fixture().await;
        let first = f.ask(f.request("s1", Some("docs__search")), fp("a"));
        f.next_question()
            .await
            .1
            .send(ApprovalAnswer::AllowSession)
            .unwrap();
        assert_eq!(
            first.await.unwrap().unwrap().source,
            ApprovalSource::Approver
        );
        let again = f
            .ask(f.request("s1", Some("docs__search")), fp("a"))
            .await
            .unwrap()
            .unwrap();
        assert!(
            again.allowed && again.source == ApprovalSource::Cache,
            "{again:?}"
        );
        // Every other key asks: another tool, another session, a changed declaration.
        for (session, tool, fingerprint) in [
            ("s1", Some("docs__fetch"), "a"),
            ("s2", Some("docs__search"), "a"),
            ("s1", Some("docs__search"), "b"),
            ("s1", None, "a"),
        ] {
            let asked = f.ask(f.request(session, tool), fp(fingerprint));
            f.next_question()
                .await
                .1
                .send(ApprovalAnswer::Deny)
                .unwrap();
            assert_eq!(
                asked.await.unwrap().unwrap().source,
                ApprovalSource::Approver
            );
        }
        assert_eq!(f.events.of_type("approval.decided").len(), 6);
    }

    #[tokio::test]
    async fn denials_are_never_cached() {
        let mut f = fixture().await;
        for _ in 0..2 {
            let asked = f.ask(f.request("s1", None), fp("a"));
            f.next_question()
                .await
                .1
                .send(ApprovalAnswer::Deny)
                .unwrap();
            assert!(!asked.await.unwrap().unwrap().allowed);
        }
    }

    #[tokio::test]
    async fn a_cached_answer_expires_with_the_clock_and_with_the_session() {
        let mut f = fixture().await;
        let asked = f.ask(f.request("s1", None), fp("a"));
        f.next_question()
            .await
            .1
            .send(ApprovalAnswer::AllowSession)
            .unwrap();
        asked.await.unwrap().unwrap();
        f.clock.advance(TTL - Duration::from_secs(1));
        let cached = f
            .ask(f.request("s1", None), fp("a"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cached.source, ApprovalSource::Cache);
        f.clock.advance(Duration::from_secs(2));
        let asked = f.ask(f.request("s1", None), fp("a"));
        f.next_question()
            .await
            .1
            .send(ApprovalAnswer::AllowSession)
            .unwrap();
        assert_eq!(
            asked.await.unwrap().unwrap().source,
            ApprovalSource::Approver
        );
        f.broker.forget_session("s1");
        let asked = f.ask(f.request("s1", None), fp("a"));
        f.next_question()
            .await
            .1
            .send(ApprovalAnswer::AllowOnce)
            .unwrap();
        assert_eq!(
            asked.await.unwrap().unwrap().source,
            ApprovalSource::Approver
        );
    }

    #[tokio::test]
    async fn queued_questions_answered_by_an_earlier_allow_for_session_are_not_asked() {
        let mut f = fixture().await;
        let first = f.ask(f.request("s1", None), fp("a"));
        let (_, answer) = f.next_question().await;
        let second = f.ask(f.request("s1", None), fp("a"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer.send(ApprovalAnswer::AllowSession).unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(second.await.unwrap().unwrap().source, ApprovalSource::Cache);
        f.no_question().await;
    }

    #[tokio::test]
    async fn an_approver_that_panics_denies_and_the_queue_moves_on() {
        let f = fixture_with(Some(Arc::new(Broken))).await;
        let first = f.ask(f.request("s1", None), fp("a"));
        let second = f.ask(f.request("s2", None), fp("a"));
        for asked in [first, second] {
            let answer = tokio::time::timeout(Duration::from_secs(10), asked)
                .await
                .expect("a panicking approver wedged the broker")
                .unwrap()
                .unwrap();
            assert!(!answer.allowed, "{answer:?}");
        }
    }

    #[tokio::test]
    async fn policy_deny_and_auto_never_reach_the_approver() {
        let mut f = fixture().await;
        let deny = f
            .broker
            .decide(f.request("s1", None), fp("a"), ApprovalPolicy::Deny)
            .await
            .unwrap();
        let auto = f
            .broker
            .decide(f.request("s1", None), fp("a"), ApprovalPolicy::Auto)
            .await
            .unwrap();
        assert!(!deny.allowed && deny.source == ApprovalSource::Policy);
        assert!(auto.allowed && auto.source == ApprovalSource::Policy);
        f.no_question().await;
    }
}
