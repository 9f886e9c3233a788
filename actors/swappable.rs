//! An actor reference its supervisor can replace: the handles of the runtime-wide
//! helpers (limiter, broker) hold one, so a restarted helper is reached by every holder
//! without anyone re-fetching a handle.

use std::sync::Arc;

/// An actor reference that its supervisor replaces when it restarts the actor; every
/// holder sees the new one at its next use.
pub(crate) struct Swappable<M: ractor::Message>(Arc<std::sync::RwLock<ractor::ActorRef<M>>>);

impl<M: ractor::Message> Clone for Swappable<M> {
    fn clone(&self) -> Self {
        Swappable(Arc::clone(&self.0))
    }
}

impl<M: ractor::Message> Swappable<M> {
    pub(crate) fn new(actor: ractor::ActorRef<M>) -> Self {
        Swappable(Arc::new(std::sync::RwLock::new(actor)))
    }

    /// The current actor.
    pub(crate) fn get(&self) -> ractor::ActorRef<M> {
        match self.0.read() {
            Ok(actor) => actor.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Points every holder at `actor`.
    pub(crate) fn replace(&self, actor: ractor::ActorRef<M>) {
        match self.0.write() {
            Ok(mut current) => *current = actor,
            Err(poisoned) => *poisoned.into_inner() = actor,
        }
    }
}
