//! Servers a turn lists without starting them (`start: lazy`, docs/design.md): a
//! declared server with no connection and no cached failure, whose last listing under
//! the same declaration fingerprint, principal and workspace is on disk, not expired,
//! and (unless `pinning: off`) wholly approved in its pin file. Its tools are offered
//! from that listing, marked `deferred_start`; the first call, read or prompt that
//! needs it starts it through the connect pipeline (`Starter`), with its connect
//! approval as at any connect.
//!
//! A server is started at once instead when the turn is a start for it, it is
//! `required`, `start: eager` applies, its connect capability is missing or its connect
//! policy is `deny` (the pipeline denies it this turn, as always), or there is no such
//! listing. A start that fails forgets the listing: the next turns behave as before it
//! existed.

use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use ractor::ActorRef;
use rmcp::model::Tool;
use tokio_util::sync::CancellationToken;

use super::connect::Pipeline;
use super::{CatalogMsg, CatalogState, TurnRequest};
use crate::actors::turn::{PrepareError, Starter, TurnCatalog};
use crate::core::{AgentCore, ApprovalPolicy, Declaration, Pinning, Start};
use crate::offer::{CachedListing, Offered, Shaped, expired, forget, pins_of, recall, remember};
use crate::pins::{self, Loaded};
use crate::telemetry::Trace;

/// A server listed from its last listing, as the catalog keeps it between turns.
pub(super) struct Dormant {
    pub declaration: Arc<Declaration>,
    pub tools: Arc<Vec<Tool>>,
    pub offer: Arc<Offered>,
    pub notes: Vec<String>,
    /// Changes whenever the listing does: what the warm-turn cache is keyed by.
    pub generation: u64,
    /// When the listing was made (seconds since the epoch), to expire it while the
    /// catalog lives.
    written: u64,
}

impl Pipeline {
    /// The listing of `declaration` that may stand in for it: its own (same key as its
    /// pin file), not expired, and every definition in it approved as it is.
    fn standing(&self, declaration: &Declaration) -> Option<CachedListing> {
        let key = self.pin_key(declaration);
        let home = &self.shared.config.home;
        let listing = recall(home, &key)?;
        if expired(
            listing.written,
            self.shared.config.listing_ttl,
            SystemTime::now(),
        ) {
            return None;
        }
        if self.shared.config.pinning.of(declaration) != Pinning::Off {
            let Loaded::Found(file) = self.shared.pins.load(&key) else {
                return None;
            };
            let served = pins_of(&listing.tools, &listing.offered(), declaration);
            if !file.pending.is_empty() || !pins::compare(&file.approved, &served).is_empty() {
                return None;
            }
        }
        Some(listing)
    }

    /// Keeps `shaped` as the last listing of `declaration` when it may start lazily
    /// (on a blocking thread, before the connect's outcome reaches the catalog, so a
    /// failure the catalog records later forgets it for good); a listing that holds
    /// something back is not kept, and the one before it is forgotten.
    pub(super) async fn remember(&self, declaration: &Declaration, shaped: &Shaped) {
        if declaration.start.unwrap_or(self.shared.config.start) == Start::Eager {
            return;
        }
        let key = self.pin_key(declaration);
        let home = self.shared.config.home.clone();
        let listing = CachedListing::of(shaped);
        let written = tokio::task::spawn_blocking(move || match listing {
            Some(listing) => remember(&home, &key, &listing),
            None => {
                forget(&home, &key);
                Ok(())
            }
        });
        if let Ok(Err(e)) = written.await {
            tracing::debug!("a server's listing was not kept: {e}");
        }
    }
}

impl CatalogState {
    /// `connect` split into the servers to start now and the ones this turn lists from
    /// their last listing (kept in `self.dormant`).
    pub(super) fn dormancy(
        &mut self,
        connect: Vec<Arc<Declaration>>,
        request: &TurnRequest,
    ) -> Vec<Arc<Declaration>> {
        let pipeline = self.pipeline();
        let ttl = self.shared.config.listing_ttl;
        let mut start_now = Vec::new();
        for declaration in connect {
            let id = declaration.server_id.clone();
            let may_wait = !request.wake
                && !declaration.required
                && declaration.start.unwrap_or(self.shared.config.start) == Start::Lazy
                && self.capabilities.allows(&declaration.connect_capability())
                && self.identity.policy.connect_policy(&declaration) != ApprovalPolicy::Deny;
            let kept = self.dormant.get(&id).is_some_and(|d| {
                d.declaration.fingerprint == declaration.fingerprint
                    && !expired(d.written, ttl, SystemTime::now())
            });
            if !may_wait {
                self.dormant.remove(&id);
                start_now.push(declaration);
            } else if kept {
                continue;
            } else if let Some(listing) = pipeline.standing(&declaration) {
                self.dormant
                    .insert(id, self.dormant_of(declaration, listing));
            } else {
                self.dormant.remove(&id);
                start_now.push(declaration);
            }
        }
        start_now
    }

    fn dormant_of(&self, declaration: Arc<Declaration>, listing: CachedListing) -> Dormant {
        Dormant {
            tools: Arc::new(listing.tools.clone()),
            offer: Arc::new(listing.offered()),
            notes: listing.notes.clone(),
            generation: self.shared.next_id(),
            declaration,
            written: listing.written,
        }
    }

    /// `request` as it may run: a turn's own, kept as the latest core; a start for an
    /// effect runs against the latest core, and only when that core still declares the
    /// server as the effect's turn did (enabled, same fingerprint). A start from a turn
    /// whose declaration changed or went since is answered stale (`Cancelled`): it
    /// neither starts a declaration that is no longer the core's nor closes servers the
    /// core declares now.
    pub(super) fn current(&mut self, mut request: TurnRequest) -> Option<TurnRequest> {
        if !request.wake {
            self.latest = Some(Arc::clone(&request.core));
            return Some(request);
        }
        let declared = |core: &AgentCore, server: &str| {
            core.enabled()
                .find(|d| d.server_id == server)
                .map(|d| d.fingerprint)
        };
        let server = request.scope.as_ref().and_then(|s| s.first()).cloned();
        let same = match (&self.latest, &server) {
            (Some(latest), Some(server)) => {
                let now = declared(latest, server);
                now.is_some() && now == declared(&request.core, server)
            }
            _ => false,
        };
        match (&self.latest, same) {
            (Some(latest), true) => {
                request.core = Arc::clone(latest);
                Some(request)
            }
            _ => {
                let _ = request.reply.send(Err(PrepareError::Cancelled));
                None
            }
        }
    }

    /// Forgets the last listing of `declaration`'s server (it failed to start, or its
    /// connection failed): the next turns start it with them until it lists again.
    pub(super) fn forget_listing(&mut self, declaration: &Declaration) {
        self.dormant.remove(&declaration.server_id);
        let key = self.pipeline().pin_key(declaration);
        forget(&self.shared.config.home, &key);
    }
}

/// Starts a dormant server of one turn: a turn of just that server, sent to its
/// catalog with the core the turn was prepared from.
pub(super) struct CatalogStarter {
    pub catalog: ActorRef<CatalogMsg>,
    pub core: Arc<AgentCore>,
    pub turn: u64,
}

impl Starter for CatalogStarter {
    fn start(
        &self,
        server: String,
        trace: Trace,
    ) -> BoxFuture<'static, Result<TurnCatalog, PrepareError>> {
        let (catalog, core, turn) = (self.catalog.clone(), Arc::clone(&self.core), self.turn);
        Box::pin(async move {
            // The start ends (its process killed, its approval withdrawn) when the
            // effect waiting for it is dropped.
            let cancel = CancellationToken::new();
            let _dropped = cancel.clone().drop_guard();
            let asked = catalog
                .call(
                    |reply| {
                        CatalogMsg::PrepareTurn(TurnRequest {
                            core,
                            turn,
                            reply,
                            cancel,
                            scope: Some(Arc::new(vec![server])),
                            budget: None,
                            wake: true,
                            trace,
                        })
                    },
                    None,
                )
                .await;
            match asked {
                Ok(ractor::rpc::CallResult::Success(result)) => result,
                _ => Err(PrepareError::Evicted),
            }
        })
    }
}
