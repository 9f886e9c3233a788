//! A turn's catalog assembled from the connections that answered and the servers listed
//! from their last listing (dormant): the last turn's entries reused when nothing they
//! depend on changed, else each server's tools filtered, named and bound to its
//! connection (or marked to start at their first use).

use std::collections::HashSet;
use std::sync::Arc;

use ractor::{ActorId, ActorRef};

use rmcp::model::Tool;

use crate::actors::connection::Live;
use crate::actors::turn::{
    Binding, Denial, Diagnostic, Entries, Link, PrepareError, ServerEntry, TurnCatalog, Wakes,
    Warm, WarmKey, bind, required,
};
use crate::core::{AgentCore, Declaration};
use crate::events::EventKind;
use crate::naming::Names;
use crate::offer::Offered;
use crate::redact::Redactor;
use crate::search::ToolBudget;

use super::dormant::{CatalogStarter, Dormant};
use super::{CatalogMsg, CatalogState, plan};

/// A server a turn offers: connected, or dormant (listed from its last listing).
pub(super) struct Served<'a> {
    declaration: &'a Arc<Declaration>,
    tools: &'a [Tool],
    offer: &'a Arc<Offered>,
    notes: &'a [String],
    redactor: Redactor,
    link: Link,
    actor: Option<ActorId>,
    generation: u64,
}

impl<'a> Served<'a> {
    fn live(l: &'a Live) -> Self {
        Served {
            declaration: &l.declaration,
            tools: &l.tools,
            offer: &l.offer,
            notes: &l.notes,
            redactor: l.redactor.clone(),
            link: Link::Live(l.dispatch.clone()),
            actor: Some(l.actor.get_id()),
            generation: l.generation,
        }
    }

    fn dormant(d: &'a Dormant) -> Self {
        Served {
            declaration: &d.declaration,
            tools: &d.tools,
            offer: &d.offer,
            notes: &d.notes,
            // Nothing of the server runs yet: its effects go to the turn that starts it.
            redactor: Redactor::new(),
            link: Link::Dormant,
            actor: None,
            generation: d.generation,
        }
    }
}

impl CatalogState {
    /// The turn's catalog: the last turn's entries when nothing they depend on changed
    /// (same connections, same tool lists, same declarations), else built anew.
    pub(super) fn build_turn(
        &mut self,
        core: &AgentCore,
        scope: Option<&Vec<String>>,
        turn: u64,
        kept: &HashSet<String>,
        mut diagnostics: Vec<Diagnostic>,
        denied: Vec<Denial>,
    ) -> Result<TurnCatalog, PrepareError> {
        let covered =
            |d: &&Arc<crate::core::Declaration>| scope.is_none_or(|s| s.contains(&d.server_id));
        if let Some(missing) = core
            .enabled()
            .filter(covered)
            .find(|d| d.required && !self.by_server.contains_key(&d.server_id))
        {
            return Err(required(missing, &diagnostics, &denied));
        }
        let connected: Vec<Served<'_>> = core
            .enabled()
            .filter(covered)
            .filter_map(|d| match self.by_server.get(&d.server_id) {
                Some(id) => self.live.get(id).map(Served::live),
                None if self.failures.contains_key(&d.server_id) => None,
                None => self
                    .dormant
                    .get(&d.server_id)
                    .filter(|x| x.declaration.fingerprint == d.fingerprint)
                    .map(Served::dormant),
            })
            .collect();
        for served in &connected {
            let d = served.declaration;
            diagnostics.extend(served.notes.iter().map(|n| Diagnostic::of(d, n.clone())));
        }
        let key: WarmKey = connected
            .iter()
            .map(|s| (s.actor, s.generation, s.declaration.fingerprint))
            .collect();
        let (shared, collisions) = match self.last.as_ref().and_then(|warm| warm.reuse(&key)) {
            Some(reused) => reused,
            None => {
                let (entries, names) = self.entries(&connected, kept)?;
                self.names = names;
                let collisions = Arc::new(plan::collision_notes(&entries.0));
                self.last = Some(Warm::new(key, &entries, &collisions));
                (entries, collisions)
            }
        };
        for (server, note) in collisions.iter() {
            if let Some(served) = connected
                .iter()
                .find(|l| &l.declaration.server_id == server)
            {
                diagnostics.push(Diagnostic::of(served.declaration, note.clone()));
            }
        }
        Ok(TurnCatalog::from_parts(
            Arc::clone(&self.shared),
            self.identity.session.clone(),
            self.catalog_id,
            turn,
            self.identity.policy,
            shared,
            diagnostics,
            denied,
        ))
    }

    /// The turn `catalog` as its caller gets it: its dormant servers started through
    /// this catalog when an effect needs one, its definitions under `budget`; its
    /// events (`mcp.turn_prepared`, and `mcp.tools_deferred` under a budget) emitted.
    pub(super) fn reach(
        &self,
        myself: &ActorRef<CatalogMsg>,
        core: &Arc<AgentCore>,
        turn: u64,
        budget: Option<ToolBudget>,
        catalog: TurnCatalog,
    ) -> Result<TurnCatalog, PrepareError> {
        let starter = CatalogStarter {
            catalog: myself.clone(),
            core: Arc::clone(core),
            turn,
        };
        let dormant = catalog.tools().iter().any(|t| t.deferred_start);
        let wakes = dormant.then(|| Wakes::new(starter));
        let catalog = catalog.with_reach(wakes, budget.as_ref())?;
        let failed = catalog.diagnostics().iter().filter(|d| !d.path.is_empty());
        self.emit(EventKind::TurnPrepared {
            turn,
            tools: catalog.tools().len(),
            failed: failed.count(),
            denied: catalog.denied().len(),
        });
        if let Some(rule) = catalog.deferral() {
            self.emit(EventKind::ToolsDeferred {
                turn,
                budget: rule.budget,
                estimator: rule.estimator.to_string(),
                tools: rule.tools,
                full_tokens: rule.full_tokens,
                deferred: rule.deferred,
                offered_tokens: rule.offered_tokens,
                deferred_tools: rule.deferred_tools,
                always_loaded: rule.always_loaded.len(),
            });
        }
        Ok(catalog)
    }

    /// Entries built anew through `plan::entries`, each bound to its connection, and
    /// the names they took.
    pub(super) fn entries(
        &self,
        connected: &[Served<'_>],
        kept: &HashSet<String>,
    ) -> Result<(Entries, Names), PrepareError> {
        let binding = |l: &Served<'_>| Binding {
            session: self.identity.session.clone(),
            catalog_id: self.catalog_id,
            declaration: Arc::clone(l.declaration),
            redactor: l.redactor.clone(),
            link: l.link.clone(),
            call_allowed: self.capabilities.allows(&l.declaration.call_capability),
            approval_identity: l
                .declaration
                .approval_identity(&self.identity.workspace, None),
        };
        // One binding a server (its approval identity is a digest), shared by its
        // tools and its offer.
        let (servers, offers): (Vec<plan::Connected<'_, Binding>>, Vec<ServerEntry>) = connected
            .iter()
            .map(|l| {
                let binding = binding(l);
                let offer = ServerEntry {
                    offered: Arc::clone(l.offer),
                    binding: binding.clone(),
                };
                let server = plan::Connected {
                    declaration: l.declaration,
                    tools: l.tools,
                    kept: kept.contains(&l.declaration.server_id),
                    binding,
                };
                (server, offer)
            })
            .unzip();
        let (entries, names) = plan::entries(&servers, &self.names, &self.shared.config.host_tools)
            .map_err(PrepareError::Collision)?;
        Ok((bind(entries, offers, &self.shared.tools), names))
    }
}
