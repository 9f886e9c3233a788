//! A tool call through a turn: the entry's own connection, after the call capability
//! and the call approval; its result converted with its five views, its event.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::JsonObject;
use serde_json::Value;

use super::{Binding, CallError, StaleReason, ToolEntry, TurnCatalog};
use crate::authority::{Action, ApprovalRequest, ApprovalSource, CallSubject, ConnectPreview};
use crate::core::ApprovalPolicy;
use crate::events::EventKind;
use crate::redact::{Redactor, View};
use crate::result::{Provenance, ToolResult};
use crate::telemetry::{self, Span, Trace};
use crate::transport::{CallFailure, CallWatch, Progress, ProgressSink, TaskHandle};

impl TurnCatalog {
    /// Calls the tool `name` of this turn with `arguments` (a JSON object or null).
    ///
    /// # Errors
    /// [`CallError`] when the call is refused before reaching a server. Server errors,
    /// timeouts and broken connections are error [`ToolResult`]s.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<ToolResult, CallError> {
        self.call_with_progress(name, arguments, None).await
    }

    /// [`TurnCatalog::call`], with the server's progress for this call (its message
    /// redacted) going to `on_progress` as it arrives.
    ///
    /// # Errors
    /// See [`TurnCatalog::call`].
    pub async fn call_with_progress(
        &self,
        name: &str,
        arguments: Value,
        on_progress: Option<ProgressSink>,
    ) -> Result<ToolResult, CallError> {
        let hooks = Hooks {
            progress: on_progress,
            ..Hooks::default()
        };
        self.call_hooked(name, arguments, hooks).await
    }

    /// [`TurnCatalog::call`], with `task` hearing of the task the call may become (the
    /// tasks extension: its status, redacted) and able to cancel it on the server. The
    /// call still returns the task's final result.
    ///
    /// # Errors
    /// See [`TurnCatalog::call`].
    pub async fn call_with_task(
        &self,
        name: &str,
        arguments: Value,
        task: TaskHandle,
    ) -> Result<ToolResult, CallError> {
        let hooks = Hooks {
            task: Some(task),
            ..Hooks::default()
        };
        self.call_hooked(name, arguments, hooks).await
    }

    async fn call_hooked(
        &self,
        name: &str,
        arguments: Value,
        hooks: Hooks,
    ) -> Result<ToolResult, CallError> {
        let Some(entry) = self.get(name) else {
            if self.is_host_tool(name) {
                return Ok(self.host_tool(name, &arguments));
            }
            return Err(self.missing(name));
        };
        self.call_entry_with(entry, arguments, hooks).await
    }

    /// Calls a specific entry. An entry from another session, catalog (revision,
    /// authority) is refused as invalid and never reaches a server.
    ///
    /// # Errors
    /// See [`TurnCatalog::call`].
    pub async fn call_entry(
        &self,
        entry: &ToolEntry,
        arguments: Value,
    ) -> Result<ToolResult, CallError> {
        self.call_entry_with(entry, arguments, Hooks::default())
            .await
    }

    async fn call_entry_with(
        &self,
        entry: &ToolEntry,
        arguments: Value,
        mut hooks: Hooks,
    ) -> Result<ToolResult, CallError> {
        let trace = self.shared.config.telemetry.trace();
        let span = trace.span_of("mcp.call", &entry.server, Some(&entry.name));
        hooks.trace = span.trace();
        let outcome = if self.is_loaded(&entry.name) {
            self.dispatch(entry, arguments, hooks).await
        } else {
            Err(CallError::NotLoaded(entry.name.clone()))
        };
        match &outcome {
            Ok(result) => {
                let content = &result.view(View::Event).content;
                span.set_chars("mcp.content.chars", content);
                span.set_str(
                    telemetry::OUTCOME,
                    if result.is_error { "error" } else { "ok" },
                );
            }
            Err(refused) => {
                span.set_str(telemetry::OUTCOME, "denied");
                span.fail(kind_of(refused));
                self.shared.hub.emit(
                    &self.session,
                    EventKind::CallDenied {
                        server: entry.server.clone(),
                        tool: entry.name.clone(),
                        reason: refused.to_string(),
                    },
                );
            }
        }
        outcome
    }

    async fn dispatch(
        &self,
        entry: &ToolEntry,
        arguments: Value,
        hooks: Hooks,
    ) -> Result<ToolResult, CallError> {
        let binding = &entry.binding;
        let stale = |reason| CallError::Stale {
            tool: entry.name.clone(),
            reason,
        };
        if binding.session != self.session || binding.catalog_id != self.catalog_id {
            return Err(stale(StaleReason::OtherCatalog));
        }
        if !matches!(arguments, Value::Null | Value::Object(_)) {
            return Err(CallError::BadArguments);
        }
        if self.may_start(binding) {
            return self.dispatch_started(entry, arguments, hooks).await;
        }
        let arguments = match arguments {
            Value::Object(map) => Some(map),
            _ => None,
        };
        let redactor = binding.redactor.with_call_object(arguments.as_ref());
        // A stage only where someone may be asked (`auto` decides nothing).
        let asks = self.policy.call_policy(&binding.declaration) != ApprovalPolicy::Auto;
        let approval = hooks.trace.span_when(asks, "mcp.call.approval");
        self.authorize(
            binding,
            Action::Call,
            &entry.name,
            arguments.as_ref(),
            &redactor,
            || Some(subject_of(entry)),
        )
        .await
        .inspect_err(|refused| approval.fail(kind_of(refused)))?;
        approval.end();
        let Some(dispatch) = binding.link.dispatch().filter(|d| !d.is_closed()) else {
            return Err(stale(StaleReason::Closed));
        };
        let started = Instant::now();
        let (watch, server) = watched(hooks, &redactor);
        let called = dispatch.call(&entry.tool, arguments, watch).await;
        server.end_as(called.as_ref().err().map(CallFailure::kind));
        let provenance = |reached| Provenance {
            server: entry.server.clone(),
            tool: entry.tool.clone(),
            exposed: entry.name.clone(),
            started: reached,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let shape = &self.shared.config.result_shape;
        let mut result = match called {
            Ok(raw) => ToolResult::from_mcp(provenance(true), raw, &redactor, shape),
            // A connection closed before the call left is a stale entry; one that dies
            // during the call is that call's error.
            Err(CallFailure::NotSent(_) | CallFailure::Closed(_)) if dispatch.is_closed() => {
                return Err(stale(StaleReason::Closed));
            }
            Err(failure) => {
                let reached = !matches!(failure, CallFailure::NotSent(_));
                ToolResult::error(provenance(reached), &failure.to_string(), &redactor)
            }
        };
        result.output_schema = entry.output_schema.clone();
        self.shared.hub.emit(
            &self.session,
            EventKind::ToolCalled {
                server: entry.server.clone(),
                tool: entry.name.clone(),
                is_error: result.is_error,
                duration_ms: result.provenance.duration_ms,
                content: result.view(View::Event).content.clone(),
            },
        );
        Ok(result)
    }

    /// Whether an effect of `binding` starts its server first: a dormant server, for an
    /// effect its call capability and call policy could allow. Nothing starts for an
    /// effect they refuse: it is refused below as for a live server.
    pub(crate) fn may_start(&self, binding: &Binding) -> bool {
        binding.link.dispatch().is_none()
            && binding.call_allowed
            && self.policy.call_policy(&binding.declaration) != ApprovalPolicy::Deny
    }

    /// A call of a tool listed from its server's last listing: the server is started
    /// first, then the call goes through the turn that started it, to the same tool as
    /// listed now. A tool the started server lists otherwise is refused.
    async fn dispatch_started(
        &self,
        entry: &ToolEntry,
        arguments: Value,
        hooks: Hooks,
    ) -> Result<ToolResult, CallError> {
        let Some(started) = self
            .woken(&entry.binding, &entry.name, &hooks.trace)
            .await?
        else {
            return Err(CallError::Stale {
                tool: entry.name.clone(),
                reason: StaleReason::Closed,
            });
        };
        let now = started
            .tools()
            .iter()
            .find(|t| t.server == entry.server && t.tool == entry.tool);
        let Some(now) = now.filter(|t| t.definition == entry.definition) else {
            let held = started.offers().iter().any(|o| {
                o.binding.declaration.server_id == entry.server
                    && o.offered.held.iter().any(|h| {
                        h.kind == crate::pins::DefinitionKind::Tool
                            && h.name == crate::pins::bounded_name(&entry.tool)
                    })
            });
            return Err(if held {
                CallError::Quarantined {
                    tool: entry.name.clone(),
                    server: entry.server.clone(),
                }
            } else {
                CallError::Stale {
                    tool: entry.name.clone(),
                    reason: StaleReason::Relisted,
                }
            });
        };
        let mut now = now.clone();
        now.name.clone_from(&entry.name);
        Box::pin(started.dispatch(&now, arguments, hooks)).await
    }

    /// The call capability, then the call approval under the effective policy (`auto`
    /// needs no prompt; the host may tighten it), for a tool call, a resource read or a
    /// prompt (`subject` names which). `call` gives what an approval is bound to, made
    /// only when the broker decides (any policy but `auto`).
    pub(crate) async fn authorize(
        &self,
        binding: &Binding,
        action: Action,
        subject: &str,
        arguments: Option<&JsonObject>,
        redactor: &Redactor,
        call: impl FnOnce() -> Option<CallSubject>,
    ) -> Result<(), CallError> {
        let declaration = &binding.declaration;
        let tool = || subject.to_string();
        if !binding.call_allowed {
            return Err(CallError::MissingCapability {
                tool: tool(),
                capability: declaration.call_capability.clone(),
            });
        }
        let policy = self.policy.call_policy(declaration);
        if policy == ApprovalPolicy::Auto {
            return Ok(());
        }
        let preview = ConnectPreview::new(
            declaration,
            self.policy.connect_policy(declaration),
            None,
            &[],
        );
        let request = ApprovalRequest {
            session: self.session.clone(),
            action,
            server: declaration.server_id.clone(),
            tool: Some(tool()),
            // What will run, as the event log may show it.
            arguments: Some(match arguments {
                Some(map) => redactor.json(&Value::Object(map.clone()), View::Event),
                None => Value::Object(serde_json::Map::new()),
            }),
            preview,
            call: call(),
            change: None,
        };
        match self
            .shared
            .broker
            .decide(request, binding.approval_identity, policy)
            .await
        {
            Ok(approval) if approval.allowed => Ok(()),
            // `deny` is decided (and recorded) by the broker without asking anyone.
            Ok(approval) if approval.source == ApprovalSource::Policy => {
                Err(CallError::PolicyDenied { tool: tool() })
            }
            Ok(approval) if approval.source == ApprovalSource::Deadline => {
                Err(CallError::ApprovalTimedOut { tool: tool() })
            }
            Ok(_) => Err(CallError::ApprovalDenied { tool: tool() }),
            Err(_) => Err(CallError::ApprovalUnavailable { tool: tool() }),
        }
    }
}

/// What a call approval of `entry` is bound to: the tool as its server defines it
/// (name, title, annotations, definition digest), never its exposed name.
fn subject_of(entry: &ToolEntry) -> CallSubject {
    let hints = entry.annotations.as_ref();
    CallSubject {
        name: entry.tool.clone(),
        title: entry
            .title
            .clone()
            .or_else(|| hints.and_then(|a| a.title.clone())),
        read_only: hints.and_then(|a| a.read_only),
        destructive: hints.and_then(|a| a.destructive),
        idempotent: hints.and_then(|a| a.idempotent),
        open_world: hints.and_then(|a| a.open_world),
        definition: entry.definition.clone(),
    }
}

/// `sink`, hearing the server's progress redacted with the call's secrets, as every
/// other view of the server.
/// What a caller hears of its call while it runs, and where its stages are traced.
#[derive(Default)]
struct Hooks {
    /// The server's progress, redacted.
    progress: Option<ProgressSink>,
    /// The task the call may become.
    task: Option<TaskHandle>,
    /// The call's span, parent of its stages.
    trace: Trace,
}

/// A refusal's kind, as a span's error type.
pub(super) fn kind_of(refused: &CallError) -> &'static str {
    match refused {
        CallError::UnknownTool(_) => "unknown_tool",
        CallError::ServerUnavailable { .. } => "server_unavailable",
        CallError::Quarantined { .. } => "quarantined",
        CallError::NotLoaded(_) => "not_loaded",
        CallError::MissingCapability { .. } => "missing_capability",
        CallError::PolicyDenied { .. } => "policy_denied",
        CallError::ApprovalDenied { .. } => "approval_denied",
        CallError::ApprovalTimedOut { .. } => "approval_timed_out",
        CallError::ApprovalUnavailable { .. } => "approval_unavailable",
        CallError::Stale { .. } => "stale",
        CallError::BadArguments => "bad_arguments",
        CallError::NotOffered { .. } => "not_offered",
        _ => "failed",
    }
}

/// What a call going to its server is watched by, and the span of its time there
/// (whose context the server is sent).
fn watched(hooks: Hooks, redactor: &Redactor) -> (CallWatch, Span) {
    let server = hooks.trace.span("mcp.call.server");
    let watch = CallWatch {
        sink: hooks.progress.map(|sink| redacted_progress(sink, redactor)),
        redactor: redactor.clone(),
        task: hooks.task,
        trace: server.header(),
    };
    (watch, server)
}

fn redacted_progress(sink: ProgressSink, redactor: &Redactor) -> ProgressSink {
    let redactor = redactor.clone();
    Arc::new(move |mut progress: Progress| {
        progress.message = progress
            .message
            .map(|m| crate::result::cap(&redactor.text(&m, View::Model)));
        sink(progress);
    })
}

#[cfg(test)]
mod tests {
    /// The size of the future `_f` returns, read from its type (`_f` is never called).
    fn future_size3<A, B, C, Fut>(_f: impl FnOnce(A, B, C) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// A call's future is built level by level (call, hooks, dispatch, the request),
    /// each copied whole into the one above when it is built: what a call copies grows
    /// with it. 5.7 KiB in a debug build, rmcp's wait for the answer (2.7 KiB) the
    /// largest part, left unboxed: every call awaits it, and a box is an allocation
    /// per call. The bound fails when the box of the tasks path (`followed`, in
    /// `transport::requests::call_tool`) goes.
    #[test]
    fn a_call_future_stays_small() {
        const MOST: usize = 6656;
        let size = future_size3(super::TurnCatalog::call);
        assert!(
            size <= MOST,
            "a call's future takes {size} bytes (at most {MOST}): box the large await that grew it"
        );
    }
}
