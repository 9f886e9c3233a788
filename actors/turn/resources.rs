//! Reading and subscribing to a server's resources through a turn: a URI the server
//! offers (listed, or named by a listed template) and the declaration allows, under the
//! server's call capability and call approval like a tool call; and what a turn shows of
//! each connection's offer.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Binding, CallError, ServerEntry, StaleReason, TurnCatalog};
use crate::authority::{Action, CallSubject, uri_secrets};
use crate::events::EventKind;
use crate::offer::{
    MAX_DESCRIPTION, PromptInfo, ResourceInfo, ServerIdentity, TemplateInfo, offers_uri,
};
use crate::redact::{Redactor, View};
use crate::result::{Provenance, ToolResult, cap_chars};
use crate::transport::CallFailure;

impl TurnCatalog {
    /// Each connected server's identity and instructions, in file order.
    pub fn servers(&self) -> impl Iterator<Item = &ServerIdentity> {
        self.offers().iter().map(|s| &s.offered.identity)
    }

    /// Every visible resource of this turn, servers in file order.
    pub fn resources(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.offers().iter().flat_map(|s| &s.offered.resources)
    }

    /// Every visible resource template of this turn.
    pub fn resource_templates(&self) -> impl Iterator<Item = &TemplateInfo> {
        self.offers().iter().flat_map(|s| &s.offered.templates)
    }

    /// Every visible prompt of this turn.
    pub fn prompts(&self) -> impl Iterator<Item = &PromptInfo> {
        self.offers().iter().flat_map(|s| &s.offered.prompts)
    }

    /// Reads `uri` through `server`'s connection (a listed resource, or one a listed
    /// template names: the server decides what it serves). The result has the five
    /// views and caps of a tool result, its contents as resource blocks.
    ///
    /// # Errors
    /// [`CallError`] when refused before reaching the server (`UnknownTool` names the
    /// server when it has no connection this turn).
    pub async fn read_resource(&self, server: &str, uri: &str) -> Result<ToolResult, CallError> {
        if let Some(started) = self.started_for(server, uri).await? {
            return Box::pin(started.read_resource(server, uri)).await;
        }
        let (entry, subject, redactor) = self.resource_effect(server, uri, Action::Read).await?;
        // Named after the server the turn has, never the caller's words for it.
        let trace = self.shared().config.telemetry.trace();
        let span = trace.span_of("mcp.read", &entry.offered.identity.server, None);
        let binding = &entry.binding;
        let started = Instant::now();
        let Some(dispatch) = binding.link.dispatch() else {
            span.end_outcome(Some("closed"));
            return Err(CallError::Stale {
                tool: subject,
                reason: StaleReason::Closed,
            });
        };
        let read = dispatch.read_resource(uri, span.header()).await;
        span.end_outcome(read.as_ref().err().map(CallFailure::kind));
        let provenance = |reached| Provenance {
            server: server.to_string(),
            tool: "resources/read".into(),
            exposed: redactor.text(uri, View::Event),
            started: reached,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let result = match read {
            Ok(raw) => {
                let contents = raw.get("contents").and_then(Value::as_array).cloned();
                let content: Vec<Value> = contents
                    .unwrap_or_default()
                    .into_iter()
                    .map(|resource| json!({"type": "resource", "resource": resource}))
                    .collect();
                let shaped = json!({"content": content});
                let shape = &self.shared().config.result_shape;
                ToolResult::from_mcp(provenance(true), shaped, &redactor, shape)
            }
            Err(failure) => {
                self.failed_effect(binding, provenance, failure, &redactor, &subject)?
            }
        };
        self.shared().hub.emit(
            self.session(),
            EventKind::ResourceRead {
                server: server.to_string(),
                uri: redactor.text(uri, View::Event),
                is_error: result.is_error,
                duration_ms: result.provenance.duration_ms,
            },
        );
        Ok(result)
    }

    /// Subscribes to `uri` on `server`: the server's updates of it become
    /// `mcp.resource_updated` events. Under the same authority as reading it.
    ///
    /// # Errors
    /// [`CallError`] when refused; a server that refuses is `CallError::Failed`.
    pub async fn subscribe_resource(&self, server: &str, uri: &str) -> Result<(), CallError> {
        if let Some(started) = self.started_for(server, uri).await? {
            return Box::pin(started.subscribe_resource(server, uri)).await;
        }
        let (entry, subject, redactor) =
            self.resource_effect(server, uri, Action::Subscribe).await?;
        let Some(dispatch) = entry.binding.link.dispatch() else {
            return Err(CallError::Stale {
                tool: subject,
                reason: StaleReason::Closed,
            });
        };
        let subscribed = dispatch.subscribe(uri).await;
        subscribed.map_err(|failure| CallError::Failed {
            tool: subject,
            message: cap_chars(
                &redactor.text(&failure.to_string(), View::Model),
                MAX_DESCRIPTION,
            ),
        })
    }

    /// What reading or subscribing to `uri` on `server` needs first: a connection this
    /// turn, a URI the declaration's `resources:` allows that the server listed (or a
    /// listed template names), and the server's call capability and approval. Returns
    /// the entry, the subject as approvers and errors name it (redacted), and the
    /// redactor of the effect (the URI's own userinfo and query values are secrets).
    async fn resource_effect(
        &self,
        server: &str,
        uri: &str,
        action: Action,
    ) -> Result<(&ServerEntry, String, Redactor), CallError> {
        let entry = self.offer_of(server)?;
        let binding = &entry.binding;
        let redactor = match url::Url::parse(uri) {
            Ok(parsed) => binding.redactor.with_secrets(uri_secrets(&parsed)),
            Err(_) => binding.redactor.clone(),
        };
        let subject = redactor.text(&format!("{server} {uri}"), View::Event);
        let refused = |error: CallError| self.refused(server, error);
        if !offers_uri(&entry.offered, &binding.declaration, uri) {
            return Err(refused(CallError::NotOffered { tool: subject }));
        }
        self.still_open(binding, &subject).map_err(refused)?;
        // Bound to the URI itself: its query values are hidden in the prompt, so an
        // answer for one must not cover another that differs only there.
        let exact = || {
            Some(CallSubject {
                name: subject.clone(),
                title: None,
                read_only: None,
                destructive: None,
                idempotent: None,
                open_world: None,
                definition: crate::digest::sha256_hex(uri.as_bytes()),
            })
        };
        self.authorize(binding, action, &subject, None, &redactor, exact)
            .await
            .map_err(refused)?;
        Ok((entry, subject, redactor))
    }

    /// The turn that started `server` for an effect on `uri`, when the server is dormant
    /// in this turn and the effect could be allowed (the URI offered, the call
    /// capability held): nothing starts for an effect that would be refused, and
    /// `resource_effect` refuses it as for a live server.
    async fn started_for(&self, server: &str, uri: &str) -> Result<Option<TurnCatalog>, CallError> {
        let Ok(entry) = self.offer_of(server) else {
            return Ok(None);
        };
        let binding = &entry.binding;
        if !self.may_start(binding) || !offers_uri(&entry.offered, &binding.declaration, uri) {
            return Ok(None);
        }
        let subject = binding
            .redactor
            .text(&format!("{server} {uri}"), View::Event);
        let trace = self.shared().config.telemetry.trace();
        self.woken(binding, &subject, &trace)
            .await
            .map_err(|e| self.refused(server, e))
    }

    /// `error`, recorded as a `call_denied` event first.
    pub(super) fn refused(&self, server: &str, error: CallError) -> CallError {
        let tool = match &error {
            CallError::NotOffered { tool }
            | CallError::MissingCapability { tool, .. }
            | CallError::PolicyDenied { tool }
            | CallError::ApprovalDenied { tool }
            | CallError::ApprovalTimedOut { tool }
            | CallError::ApprovalUnavailable { tool }
            | CallError::Stale { tool, .. }
            | CallError::ServerUnavailable { tool, .. }
            | CallError::Quarantined { tool, .. }
            | CallError::NotLoaded(tool) => tool.clone(),
            _ => String::new(),
        };
        self.shared().hub.emit(
            self.session(),
            EventKind::CallDenied {
                server: server.to_string(),
                tool,
                reason: error.to_string(),
            },
        );
        error
    }

    fn offer_of(&self, server: &str) -> Result<&ServerEntry, CallError> {
        self.offers()
            .iter()
            .find(|s| s.offered.identity.server == server)
            .ok_or_else(|| CallError::UnknownTool(server.to_string()))
    }

    /// The error result of a read that failed after being authorized, or the stale
    /// entry error when its connection had closed before.
    fn failed_effect(
        &self,
        binding: &Binding,
        provenance: impl Fn(bool) -> Provenance,
        failure: CallFailure,
        redactor: &Redactor,
        subject: &str,
    ) -> Result<ToolResult, CallError> {
        match failure {
            CallFailure::NotSent(_) | CallFailure::Closed(_) if binding.link.is_closed() => {
                Err(CallError::Stale {
                    tool: subject.to_string(),
                    reason: StaleReason::Closed,
                })
            }
            failure => {
                let reached = !matches!(failure, CallFailure::NotSent(_));
                Ok(ToolResult::error(
                    provenance(reached),
                    &failure.to_string(),
                    redactor,
                ))
            }
        }
    }

    /// Refuses an effect on a connection that has closed since the turn was built.
    pub(super) fn still_open(&self, binding: &Binding, subject: &str) -> Result<(), CallError> {
        if binding.session != self.session() || binding.link.is_closed() {
            return Err(CallError::Stale {
                tool: subject.to_string(),
                reason: StaleReason::Closed,
            });
        }
        Ok(())
    }
}
