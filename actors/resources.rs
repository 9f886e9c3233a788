//! What a server offers beside tools, as a turn may use it: its identity and
//! instructions, resources, resource templates and prompts. Shaped once per listing
//! (redacted, capped, filtered by the declaration's `resources:` and `prompts:`, names
//! carrying a secret hidden), bound to the connection that listed them, and used
//! through it: reading a resource and getting a prompt are effects, under the server's
//! call capability and call approval policy like a tool call.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use super::listing::{MAX_DESCRIPTION, MAX_TITLE};
use super::turn::{Binding, CallError, StaleReason, TurnCatalog};
use crate::authority::{Action, CallSubject};
use crate::core::Declaration;
use crate::events::EventKind;
use crate::naming;
use crate::redact::{Redactor, View};
use crate::result::{Provenance, ToolResult, cap_chars};
use crate::transport::{CallFailure, Offer};

/// Longest `instructions` kept.
pub const MAX_INSTRUCTIONS: usize = 16_384;
/// Longest string kept in a prompt message (text, data, blob).
pub const MAX_PROMPT_TEXT: usize = 65_536;
/// Most messages of one prompt kept.
pub const MAX_PROMPT_MESSAGES: usize = 100;
/// Longest resource URI or URI template listed; a longer one is hidden.
pub const MAX_URI: usize = 2_048;
/// Most arguments of one prompt kept.
pub const MAX_PROMPT_ARGUMENTS: usize = 64;

/// Who a server says it is (redacted, capped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ServerIdentity {
    /// Server id (the declaration's).
    pub server: String,
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `serverInfo.title`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `instructions`: what the server asks of its client, for a host's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// One resource a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ResourceInfo {
    /// Server id.
    pub server: String,
    /// The resource's URI: what [`TurnCatalog::read_resource`] takes.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes, when the server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One resource template (RFC 6570) a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TemplateInfo {
    /// Server id.
    pub server: String,
    /// The URI template.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The MIME type of what it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One prompt a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PromptInfo {
    /// Exposed name (`server__prompt`): what [`TurnCatalog::get_prompt`] takes.
    pub name: String,
    /// Server id.
    pub server: String,
    /// The server's own prompt name.
    pub prompt: String,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments.
    pub arguments: Vec<PromptArgumentInfo>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PromptArgumentInfo {
    /// Its name.
    pub name: String,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A prompt's messages, redacted like results (model view).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PromptResult {
    /// The exposed prompt name.
    pub prompt: String,
    /// Server id.
    pub server: String,
    /// The server's description of this rendering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages: `role` and one content block each.
    pub messages: Vec<PromptMessageView>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PromptMessageView {
    /// `user` or `assistant`.
    pub role: String,
    /// The content block, redacted, its text capped.
    pub content: Value,
}

/// Everything a connection offers beside tools, shaped.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// Identity and instructions.
    pub identity: ServerIdentity,
    /// Visible resources.
    pub resources: Vec<ResourceInfo>,
    /// Visible resource templates.
    pub templates: Vec<TemplateInfo>,
    /// Visible prompts.
    pub prompts: Vec<PromptInfo>,
}

/// A connection's offer as a turn holds it: shaped, and bound to its connection.
#[derive(Clone)]
pub(super) struct ServerEntry {
    pub offered: Arc<Offered>,
    pub binding: Binding,
}

/// Shapes what `offer` lists for `declaration`'s connection: redacted and capped,
/// filtered by its `resources:` and `prompts:`, entries whose URI or name carries a
/// secret hidden (they would be shown everywhere), duplicates dropped. Notes say what
/// was cut or hidden, never which.
pub(super) fn shape_offer(
    offer: Offer,
    declaration: &Declaration,
    redactor: &Redactor,
) -> (Offered, Vec<String>) {
    let server = declaration.server_id.clone();
    let text = |t: &str, max| cap_chars(&redactor.text(t, View::Model), max);
    let described = |d: &Option<String>| d.as_deref().map(|d| text(d, MAX_DESCRIPTION));
    let clean = |s: &str| redactor.text(s, View::Model) == s;
    let capped_name = |n: &str| cap_chars(n, MAX_TITLE);
    let mut notes: Vec<String> = offer
        .failed
        .iter()
        .map(|f| crate::result::cap(&redactor.text(f, View::Durable)))
        .collect();
    if offer.truncated {
        notes.push(format!(
            "a resource or prompt list was cut at {} entries",
            crate::transport::MAX_TOOLS
        ));
    }
    let mut hidden = 0;
    let mut seen = std::collections::HashSet::new();
    let resources = offer
        .resources
        .into_iter()
        .filter(|r| naming::filter_allows(&declaration.resources, &r.uri))
        .filter(|r| {
            (r.uri.len() <= MAX_URI && clean(&r.uri) && clean(&r.name)) || {
                hidden += 1;
                false
            }
        })
        .filter(|r| seen.insert(r.uri.clone()))
        .map(|r| ResourceInfo {
            server: server.clone(),
            name: capped_name(&r.name),
            title: r.title.as_deref().map(|t| text(t, MAX_TITLE)),
            description: described(&r.description),
            mime_type: r.mime_type.as_deref().map(|m| text(m, MAX_TITLE)),
            size: r.size,
            uri: r.uri,
        })
        .collect();
    let templates = offer
        .templates
        .into_iter()
        .filter(|t| naming::filter_allows(&declaration.resources, &t.uri_template))
        .filter(|t| {
            (t.uri_template.len() <= MAX_URI && clean(&t.uri_template) && clean(&t.name)) || {
                hidden += 1;
                false
            }
        })
        .map(|t| TemplateInfo {
            server: server.clone(),
            name: capped_name(&t.name),
            description: described(&t.description),
            mime_type: t.mime_type.as_deref().map(|m| text(m, MAX_TITLE)),
            uri_template: t.uri_template,
        })
        .collect();
    let prefix = naming::normalize_fragment(&server, "server");
    let mut exposed = std::collections::HashSet::new();
    // Of prompts whose exposed names collide, the first by raw name is kept, whatever
    // order the server lists them in.
    let mut listed_prompts = offer.prompts;
    listed_prompts.sort_by(|a, b| a.name.cmp(&b.name));
    let prompts = listed_prompts
        .into_iter()
        .filter(|p| naming::filter_allows(&declaration.prompts, &p.name))
        .filter(|p| {
            let arguments_clean = p.arguments.iter().flatten().all(|a| clean(&a.name));
            // A prompt's name is exposed normalized, like a tool's.
            let name_clean = clean(&p.name) && !redactor.holds_secret_normalized(&p.name);
            (p.name.chars().count() <= MAX_TITLE && name_clean && arguments_clean) || {
                hidden += 1;
                false
            }
        })
        .filter_map(|p| {
            let name = format!(
                "{prefix}__{}",
                naming::normalize_fragment(&p.name, "prompt")
            );
            exposed.insert(name.clone()).then(|| PromptInfo {
                name,
                server: server.clone(),
                title: p.title.as_deref().map(|t| text(t, MAX_TITLE)),
                description: described(&p.description),
                arguments: p
                    .arguments
                    .unwrap_or_default()
                    .into_iter()
                    .take(MAX_PROMPT_ARGUMENTS)
                    .map(|a| PromptArgumentInfo {
                        description: described(&a.description),
                        required: a.required.unwrap_or(false),
                        name: capped_name(&a.name),
                    })
                    .collect(),
                prompt: p.name,
            })
        })
        .collect();
    if hidden > 0 {
        notes.push(format!(
            "{hidden} resource(s), template(s) or prompt(s) hidden: the URI or name contains a secret value"
        ));
    }
    let identity = offer.identity;
    let offered = Offered {
        identity: ServerIdentity {
            server,
            name: text(&identity.name, MAX_TITLE),
            version: text(&identity.version, MAX_TITLE),
            title: identity.title.as_deref().map(|t| text(t, MAX_TITLE)),
            instructions: identity
                .instructions
                .as_deref()
                .map(|i| text(i, MAX_INSTRUCTIONS)),
        },
        resources,
        templates,
        prompts,
    };
    (offered, notes)
}

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
        let (entry, subject, redactor) = self.resource_effect(server, uri, Action::Read).await?;
        let binding = &entry.binding;
        let started = Instant::now();
        let read = binding.dispatch.read_resource(uri).await;
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
        let (entry, subject, redactor) =
            self.resource_effect(server, uri, Action::Subscribe).await?;
        let subscribed = entry.binding.dispatch.subscribe(uri).await;
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
            Ok(parsed) => binding
                .redactor
                .with_secrets(super::connect::uri_secrets(&parsed)),
            Err(_) => binding.redactor.clone(),
        };
        let subject = redactor.text(&format!("{server} {uri}"), View::Event);
        let refused = |error: CallError| self.refused(server, error);
        let offered = &entry.offered;
        let listed = offered.resources.iter().any(|r| r.uri == uri)
            || offered
                .templates
                .iter()
                .any(|t| naming::glob_match(&template_glob(&t.uri_template), uri));
        if !listed || !naming::filter_allows(&binding.declaration.resources, uri) {
            return Err(refused(CallError::NotOffered { tool: subject }));
        }
        self.still_open(binding, &subject).map_err(refused)?;
        // Bound to the URI itself: its query values are hidden in the prompt, so an
        // answer for one must not cover another that differs only there.
        let exact = CallSubject {
            name: subject.clone(),
            title: None,
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
            definition: crate::digest::sha256_hex(uri.as_bytes()),
        };
        self.authorize(binding, action, &subject, None, &redactor, Some(exact))
            .await
            .map_err(refused)?;
        Ok((entry, subject, redactor))
    }

    /// `error`, recorded as a `call_denied` event first.
    fn refused(&self, server: &str, error: CallError) -> CallError {
        let tool = match &error {
            CallError::NotOffered { tool }
            | CallError::MissingCapability { tool, .. }
            | CallError::PolicyDenied { tool }
            | CallError::ApprovalDenied { tool }
            | CallError::ApprovalTimedOut { tool }
            | CallError::ApprovalUnavailable { tool }
            | CallError::Stale { tool, .. } => tool.clone(),
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
            .ok_or_else(|| match self.unavailable(name) {
                Some((server, reason)) => CallError::ServerUnavailable {
                    tool: name.to_string(),
                    server,
                    reason,
                },
                None => CallError::UnknownTool(name.to_string()),
            })?;
        let arguments = match arguments {
            Value::Null => None,
            Value::Object(map) => Some(map),
            _ => return Err(CallError::BadArguments),
        };
        let binding = &entry.binding;
        let redactor = binding.redactor.with_call_object(arguments.as_ref());
        let refused = |error: CallError| self.refused(&prompt.server, error);
        self.still_open(binding, name).map_err(refused)?;
        // Bound to the prompt as its server defines it, never its exposed name.
        let exact = CallSubject {
            name: prompt.prompt.clone(),
            title: prompt.title.clone(),
            read_only: None,
            destructive: None,
            idempotent: None,
            open_world: None,
            definition: crate::digest::sha256_hex(&serde_json::to_vec(prompt).unwrap_or_default()),
        };
        self.authorize(
            binding,
            Action::Prompt,
            name,
            arguments.as_ref(),
            &redactor,
            Some(exact),
        )
        .await
        .map_err(refused)?;
        let got = binding.dispatch.get_prompt(&prompt.prompt, arguments).await;
        let got = match got {
            Ok(got) => got,
            Err(CallFailure::NotSent(_) | CallFailure::Closed(_))
                if binding.dispatch.is_closed() =>
            {
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
        // What any message marks as secret is secret in all of them.
        let whole = serde_json::to_value(&got.messages).unwrap_or(Value::Null);
        let redactor = redactor.with_result_secrets(&whole);
        let messages = got
            .messages
            .iter()
            .take(MAX_PROMPT_MESSAGES)
            .map(|m| {
                let content = serde_json::to_value(&m.content).unwrap_or(Value::Null);
                PromptMessageView {
                    role: serde_json::to_value(&m.role)
                        .ok()
                        .and_then(|r| r.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    content: capped_strings(redactor.json(&content, View::Model)),
                }
            })
            .collect();
        self.shared().hub.emit(
            self.session(),
            EventKind::PromptGot {
                server: prompt.server.clone(),
                prompt: name.to_string(),
            },
        );
        Ok(PromptResult {
            prompt: name.to_string(),
            server: prompt.server.clone(),
            description: got
                .description
                .as_deref()
                .map(|d| cap_chars(&redactor.text(d, View::Model), MAX_DESCRIPTION)),
            messages,
        })
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
            CallFailure::NotSent(_) | CallFailure::Closed(_) if binding.dispatch.is_closed() => {
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
    fn still_open(&self, binding: &Binding, subject: &str) -> Result<(), CallError> {
        if binding.session != self.session() || binding.dispatch.is_closed() {
            return Err(CallError::Stale {
                tool: subject.to_string(),
                reason: StaleReason::Closed,
            });
        }
        Ok(())
    }
}

/// A JSON value with every string in it (text, image data, blobs, annotations) cut at
/// [`MAX_PROMPT_TEXT`] characters.
fn capped_strings(value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(cap_chars(&text, MAX_PROMPT_TEXT)),
        Value::Array(items) => Value::Array(items.into_iter().map(capped_strings).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, capped_strings(v)))
                .collect(),
        ),
        other => other,
    }
}

/// An RFC 6570 template as a glob: each `{...}` expression matches anything.
fn template_glob(template: &str) -> String {
    let mut glob = String::with_capacity(template.len());
    let mut inside = false;
    for c in template.chars() {
        match (c, inside) {
            ('{', false) => inside = true,
            ('}', true) => {
                inside = false;
                glob.push('*');
            }
            (_, true) => {}
            (c, false) => glob.push(c),
        }
    }
    glob
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_what_they_name_and_nothing_else() {
        let glob = template_glob("demo://env/{name}");
        assert!(naming::glob_match(&glob, "demo://env/API_TOKEN"));
        assert!(!naming::glob_match(&glob, "demo://other/x"));
        let glob = template_glob("file:///{+path}/x{?q,r}");
        assert!(naming::glob_match(&glob, "file:///a/b/x?q=1"));
        assert!(!naming::glob_match(&glob, "http://a/x"));
    }

    #[test]
    fn every_string_of_a_prompt_message_is_capped() {
        let big = "x".repeat(MAX_PROMPT_TEXT * 2);
        let capped = capped_strings(json!({"type": "image", "data": big, "a": [{"b": big}]}));
        for s in [&capped["data"], &capped["a"][0]["b"]] {
            assert!(s.as_str().unwrap().chars().count() <= MAX_PROMPT_TEXT + 64);
        }
    }
}
