//! A turn's catalog assembled from the connections that answered: the last turn's entries
//! reused when nothing they depend on changed, else each server's tools filtered, named and
//! bound to its connection.

use std::collections::HashSet;
use std::sync::Arc;

use ractor::ActorId;

use crate::actors::connection::Live;
use crate::actors::turn::{
    Binding, Denial, Diagnostic, Entries, PrepareError, ServerEntry, TurnCatalog, Warm, bind,
    required,
};
use crate::core::{AgentCore, Fingerprint};
use crate::naming::Names;

use super::{CatalogState, plan};

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
        let connected: Vec<&Live> = core
            .enabled()
            .filter(covered)
            .filter_map(|d| self.live.get(self.by_server.get(&d.server_id)?))
            .collect();
        for live in &connected {
            let d = &live.declaration;
            diagnostics.extend(live.notes.iter().map(|n| Diagnostic::of(d, n.clone())));
        }
        let key: Vec<(ActorId, u64, Fingerprint)> = connected
            .iter()
            .map(|l| (l.actor.get_id(), l.generation, l.declaration.fingerprint))
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
            if let Some(live) = connected
                .iter()
                .find(|l| &l.declaration.server_id == server)
            {
                diagnostics.push(Diagnostic::of(&live.declaration, note.clone()));
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

    /// Entries built anew through `plan::entries`, each bound to its connection, and
    /// the names they took.
    pub(super) fn entries(
        &self,
        connected: &[&Live],
        kept: &HashSet<String>,
    ) -> Result<(Entries, Names), PrepareError> {
        let binding = |l: &Live| Binding {
            session: self.identity.session.clone(),
            catalog_id: self.catalog_id,
            declaration: Arc::clone(&l.declaration),
            redactor: l.redactor.clone(),
            dispatch: l.dispatch.clone(),
            call_allowed: self.capabilities.allows(&l.declaration.call_capability),
            approval_identity: l
                .declaration
                .approval_identity(&self.identity.workspace, None),
        };
        let servers: Vec<plan::Connected<'_, Binding>> = connected
            .iter()
            .map(|l| plan::Connected {
                declaration: &l.declaration,
                tools: &l.tools,
                kept: kept.contains(&l.declaration.server_id),
                binding: binding(l),
            })
            .collect();
        let offers = connected
            .iter()
            .map(|l| ServerEntry {
                offered: Arc::clone(&l.offer),
                binding: binding(l),
            })
            .collect();
        let (entries, names) = plan::entries(&servers, &self.names, &self.shared.config.host_tools)
            .map_err(PrepareError::Collision)?;
        Ok((bind(entries, offers), names))
    }
}
