//! The root's record of sessions: admitting, resuming and activating one, the lanes and
//! their claims, evictions and the helpers restarted under supervision.

use std::sync::Arc;

use ractor::{Actor, ActorRef};
use tokio::sync::{oneshot, watch};

use crate::actors::broker::{Broker, BrokerArgs};
use crate::actors::host::LaneClaims;
use crate::actors::host::handles::{Runtime, Session};
use crate::actors::host::turn::real_workspace;
use crate::actors::host::{
    Eviction, Internal, InternalMsg, OpenReply, Opened, RESUMABLE, RuntimeError, RuntimeMsg,
    eviction_bound, eviction_worst,
};
use crate::actors::limiter::Limiter;
use crate::actors::session::{
    EvictReason, EvictionReport, SessionActor, SessionArgs, SessionMsg, SessionSpec,
};
use crate::actors::shared::Shared;
use crate::authority::CapabilitySet;
use crate::events::{EventKind, Opening};

use super::{CLAIM_BOUND, Record, RuntimeState, new_session_id};

impl RuntimeState {
    /// The lane claims, when this runtime is a cluster node.
    pub(super) fn claims(&self) -> Option<Arc<dyn LaneClaims>> {
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
    pub(super) fn not_opened(
        &mut self,
        id: &str,
        how: Opening,
        error: RuntimeError,
    ) -> RuntimeError {
        if how == Opening::Start {
            self.sessions.remove(id);
        }
        error
    }

    /// A session actor stopped: its record stays, resumable, until forgotten. An
    /// evicted one was let go already (its record holds no actor).
    pub(super) fn session_ended(&mut self, actor: ractor::ActorId) {
        let Some(id) = self.live.remove(&actor) else {
            return;
        };
        if let Some(record) = self.sessions.get_mut(&id)
            && record.actor.as_ref().is_some_and(|a| a.get_id() == actor)
        {
            record.actor = None;
            self.ended.push_back(id);
        }
    }

    /// Respawns the discovery limiter under the root. Permits held against the dead one
    /// release into nothing, so until they are dropped up to twice the limit may be
    /// connecting: a brief overshoot, never a stall.
    pub(super) async fn restart_limiter(&self, myself: &ActorRef<RuntimeMsg>) {
        let config = &self.shared.config;
        let args = (config.discovery_limit, config.telemetry.clone());
        match Actor::spawn_linked(None, Limiter, args, myself.get_cell()).await {
            Ok((limiter, _)) => self.shared.limiter.replace(limiter),
            Err(e) => tracing::error!(error = %e, "the discovery limiter could not be restarted"),
        }
        tracing::warn!("the discovery limiter stopped and was restarted");
    }

    /// Respawns the approval broker under the root. Questions in flight were answered
    /// "unavailable" (never allowed) when it died; its allow-for-session cache is gone,
    /// so the next action asks again.
    pub(super) async fn restart_broker(&self, myself: &ActorRef<RuntimeMsg>) {
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
        // Every id in `ended` is of a record without an actor (a resume takes its id
        // out), so the queue is not walked at each admission; a live one found anyway is
        // kept.
        while self.ended.len() >= RESUMABLE {
            if let Some(old) = self.ended.pop_front()
                && self.sessions.get(&old).is_some_and(|r| r.actor.is_none())
            {
                self.sessions.remove(&old);
            }
        }
    }

    /// Evicts every live session that holds a lane.
    pub(super) fn evict_lanes(&mut self, reason: EvictReason) -> Vec<Eviction> {
        let ids: Vec<String> = self.current.values().cloned().collect();
        ids.iter()
            .filter_map(|id| self.evict(id, reason.clone()))
            .collect()
    }

    /// Claims the lane of session `id` cluster-wide on a task (the root goes on taking
    /// messages), then opens it (`InternalMsg::Claimed`).
    pub(super) fn claim_then(
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
    pub(super) fn admit(
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
        let workspace = real_workspace(&self.shared, &spec)?;
        self.forget_oldest_ended();
        let replaced = self.sessions.insert(
            id.clone(),
            Record {
                spec: Arc::new(std::sync::RwLock::new((spec, workspace))),
                scope,
                actor: None,
            },
        );
        if replaced.is_some() {
            // A host's own id used again: its ended record is no more (rare: the walk
            // is paid by the reuse).
            self.ended.retain(|ended| ended != &id);
        }
        Ok(id)
    }

    pub(super) async fn resume(
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
    pub(super) async fn activate(
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
        self.live.insert(actor.get_id(), id.to_string());
        if how == Opening::Resume {
            // Resumable no more while it lives (rare: the walk is paid by a resume).
            self.ended.retain(|ended| ended != id);
        }
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
    pub(super) fn evict(&mut self, id: &str, reason: EvictReason) -> Option<Eviction> {
        let record = self.sessions.get_mut(id)?;
        let actor = record.actor.take()?;
        self.live.remove(&actor.get_id());
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
pub(super) async fn evict_actor(
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
