//! Getting a prompt through a turn: by its exposed name, under the server's call
//! capability and call approval like a tool call, its messages redacted like a result.

use serde_json::Value;

use super::call::kind_of;
use super::{CallError, ServerEntry, StaleReason, TurnCatalog};
use crate::authority::{Action, CallSubject};
use crate::events::EventKind;
use crate::offer::{MAX_DESCRIPTION, PromptResult, prompt_result};
use crate::redact::View;
use crate::result::cap_chars;
use crate::transport::CallFailure;

impl TurnCatalog {
    /// Gets the prompt `name` (exposed, `server__prompt`) with `arguments` (a JSON
    /// object of strings, or null).
    ///
    /// # Errors
    /// [`CallError`] when refused before reaching the server; a server error is
    /// `CallError::Failed`.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<PromptResult, CallError> {
        let (entry, prompt) = self
            .offers()
            .iter()
            .find_map(|s| Some((s, s.offered.prompts.iter().find(|p| p.name == name)?)))
            .ok_or_else(|| self.missing(name))?;
        let arguments = match arguments {
            Value::Null => None,
            Value::Object(map) => Some(map),
            _ => return Err(CallError::BadArguments),
        };
        let binding = &entry.binding;
        if self.may_start(binding) {
            return self.get_started_prompt(entry, name, arguments).await;
        }
        let trace = self.shared().config.telemetry.trace();
        let span = trace.span_of("mcp.prompt", &prompt.server, Some(name));
        let redactor = binding.redactor.with_call_object(arguments.as_ref());
        let refused = |error: CallError| {
            span.set_str(crate::telemetry::OUTCOME, "denied");
            span.fail(kind_of(&error));
            self.refused(&prompt.server, error)
        };
        self.still_open(binding, name).map_err(refused)?;
        let arguments_in = arguments.as_ref();
        self.authorize(
            binding,
            Action::Prompt,
            name,
            arguments_in,
            &redactor,
            || Some(subject_of(prompt)),
        )
        .await
        .map_err(refused)?;
        let Some(dispatch) = binding.link.dispatch() else {
            span.end_outcome(Some("closed"));
            return Err(CallError::Stale {
                tool: name.to_string(),
                reason: StaleReason::Closed,
            });
        };
        let got = dispatch
            .get_prompt(&prompt.prompt, arguments, span.header())
            .await;
        span.end_outcome(got.as_ref().err().map(CallFailure::kind));
        let got = match got {
            Ok(got) => got,
            Err(CallFailure::NotSent(_) | CallFailure::Closed(_)) if dispatch.is_closed() => {
                return Err(CallError::Stale {
                    tool: name.to_string(),
                    reason: StaleReason::Closed,
                });
            }
            Err(failure) => {
                return Err(CallError::Failed {
                    tool: name.to_string(),
                    message: cap_chars(
                        &redactor.text(&failure.to_string(), View::Model),
                        MAX_DESCRIPTION,
                    ),
                });
            }
        };
        self.shared().hub.emit(
            self.session(),
            EventKind::PromptGot {
                server: prompt.server.clone(),
                prompt: name.to_string(),
            },
        );
        Ok(prompt_result(name, &prompt.server, &got, &redactor))
    }

    /// A prompt of a server listed from its last listing: got through the turn that
    /// started the server for it.
    async fn get_started_prompt(
        &self,
        entry: &ServerEntry,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
    ) -> Result<PromptResult, CallError> {
        let server = &entry.binding.declaration.server_id;
        let trace = self.shared().config.telemetry.trace();
        let started = self.woken(&entry.binding, name, &trace).await;
        match started.map_err(|e| self.refused(server, e))? {
            Some(started) => {
                let arguments = arguments.map_or(Value::Null, Value::Object);
                Box::pin(started.get_prompt(name, arguments)).await
            }
            None => Err(CallError::Stale {
                tool: name.to_string(),
                reason: StaleReason::Closed,
            }),
        }
    }
}

/// What a prompt's approval is bound to: the prompt as its server defines it, never its
/// exposed name.
fn subject_of(prompt: &crate::offer::PromptInfo) -> CallSubject {
    CallSubject {
        name: prompt.prompt.clone(),
        title: prompt.title.clone(),
        read_only: None,
        destructive: None,
        idempotent: None,
        open_world: None,
        definition: crate::digest::sha256_json_hex(prompt).0,
    }
}
