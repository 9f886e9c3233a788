//! What a server sends its client outside the answers to our requests, and what we
//! answer it: elicitation (to the host's elicitor, schema defaults, validation),
//! log messages, progress and resource updates (redacted events, paced by the
//! transport's `Notices`), and the roots it is shown (the session's workspace, or the
//! declaration's `roots:` resolved inside it like a `cwd`).

// Roots are deprecated by SEP-2577 for the 2026-07-28 revision; this client speaks
// 2025-11-25, where they are current.
#![allow(deprecated)]

use std::sync::Arc;

use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction, Root};

use super::connect::Pipeline;
use serde_json::Value;

use crate::authority::{DenyReason, ElicitationAnswer, ElicitationRequest, Elicitor};
use crate::core::Declaration;
use crate::events::{ElicitAction, EventHub, EventKind};
use crate::redact::{Redactor, View};
use crate::transport::{ElicitRoute, Notice, NoticeRoute, Notices};

/// Longest log message data or progress message kept in an event.
pub const MAX_NOTICE_TEXT: usize = 4_096;

impl Pipeline {
    /// Where this server's elicitation requests go: the host's elicitor sees the
    /// server's message redacted; its answer gets the schema's defaults (SEP-1034) and
    /// must fit the schema (else it is declined); an `mcp.elicitation` event records
    /// the answer in the event view.
    pub(super) fn elicit_route(
        &self,
        declaration: &Declaration,
        redactor: &Redactor,
    ) -> ElicitRoute {
        let asker = Arc::new(Asker {
            elicitor: Arc::clone(&self.shared.config.elicitor),
            hub: Arc::clone(&self.shared.hub),
            session: self.session.clone(),
            server: declaration.server_id.clone(),
            redactor: redactor.clone(),
        });
        Arc::new(move |request: ElicitRequestParams| {
            let asker = Arc::clone(&asker);
            Box::pin(async move { asker.answer(request).await })
        })
    }

    /// Where this server's log messages, progress and resource updates go: events,
    /// redacted in the event view and capped.
    pub(super) fn notices(&self, declaration: &Declaration, redactor: &Redactor) -> Notices {
        let (hub, session, server) = (
            Arc::clone(&self.shared.hub),
            self.session.clone(),
            declaration.server_id.clone(),
        );
        Notices::new(
            Arc::new(move |redactor| notice_route(&hub, &session, &server, redactor)),
            redactor,
        )
    }

    /// The roots this server is shown: each declared root resolved inside the
    /// workspace like a `cwd` (`roots: []`: none), or without `roots:` the workspace.
    pub(super) fn roots(&self, declaration: &Declaration) -> Result<Vec<Root>, DenyReason> {
        let paths = match &declaration.roots {
            None => vec![self.workspace.clone()],
            // `roots: []`: the server is shown none.
            Some(roots) => roots
                .iter()
                .map(|r| crate::authority::resolve_root(&self.workspace, r))
                .collect::<Result<Vec<_>, _>>()
                .map_err(DenyReason::Cwd)?,
        };
        Ok(paths
            .iter()
            .filter_map(|path| {
                let uri = if path.is_dir() {
                    url::Url::from_directory_path(path)
                } else {
                    url::Url::from_file_path(path)
                };
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                let mut root = Root::new(uri.ok()?.to_string());
                root.name = name;
                Some(root)
            })
            .collect())
    }
}

/// Who answers one connection's elicitations: the host's elicitor, with what the
/// request shows redacted, and an event of each answer.
struct Asker {
    elicitor: Arc<dyn Elicitor>,
    hub: Arc<EventHub>,
    session: String,
    server: String,
    redactor: Redactor,
}

impl Asker {
    /// The answer to `request`: the person's, checked against the requested schema
    /// (defaults filled in); a URL elicitation (not advertised) is declined.
    async fn answer(&self, request: ElicitRequestParams) -> ElicitResult {
        let (message, schema) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                serde_json::to_value(&requested_schema).unwrap_or_default(),
            ),
            _ => (String::new(), Value::Null),
        };
        let defaults = crate::authority::defaults_of(&schema);
        let answer = if schema.is_null() {
            ElicitationAnswer::Decline
        } else {
            self.ask(&message, &schema, &defaults).await
        };
        let (result, action, content, refused) = match answer {
            ElicitationAnswer::Accept(fields) => {
                let filled = crate::authority::with_defaults(fields, &defaults);
                match crate::authority::validate(&schema, &filled) {
                    Ok(()) => (
                        ElicitResult::new(ElicitationAction::Accept)
                            .with_content(Value::Object(filled.clone())),
                        ElicitAction::Accept,
                        Some(filled),
                        None,
                    ),
                    Err(why) => (
                        ElicitResult::new(ElicitationAction::Decline),
                        ElicitAction::Decline,
                        None,
                        Some(why),
                    ),
                }
            }
            ElicitationAnswer::Cancel => (
                ElicitResult::new(ElicitationAction::Cancel),
                ElicitAction::Cancel,
                None,
                None,
            ),
            _ => (
                ElicitResult::new(ElicitationAction::Decline),
                ElicitAction::Decline,
                None,
                None,
            ),
        };
        let content = content.map(|fields| {
            let secrets = self.redactor.with_call_object(Some(&fields));
            secrets.json(&Value::Object(fields), View::Event)
        });
        self.hub.emit(
            &self.session,
            EventKind::Elicitation {
                server: self.server.clone(),
                action,
                content,
                refused,
            },
        );
        result
    }

    /// Asks the host's elicitor. What a person sees of the request is the server's
    /// text: the message, titles, descriptions, property names, enum labels and
    /// defaults, all redacted (the defaults' sensitive values are secrets of the
    /// request). The message is redacted whole, then cut: a cut first could leave half a
    /// secret.
    async fn ask(
        &self,
        message: &str,
        schema: &Value,
        defaults: &serde_json::Map<String, Value>,
    ) -> ElicitationAnswer {
        let redactor = self.redactor.with_call_object(Some(defaults));
        let message = redactor.text(message, View::Operator);
        let message = crate::result::cap_chars(&message, 2_000);
        let shown_defaults = match redactor.json(&Value::Object(defaults.clone()), View::Operator) {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        self.elicitor
            .elicit(ElicitationRequest {
                session: self.session.clone(),
                server: self.server.clone(),
                message,
                schema: shown_schema(schema, &redactor, &shown_defaults),
                defaults: shown_defaults,
            })
            .await
    }
}

/// Notices of `server` as events of `session`, redacted with `redactor` (the
/// connection's, or a call's for that call's progress) in the event view and capped.
pub(super) fn notice_route(
    hub: &Arc<EventHub>,
    session: &str,
    server: &str,
    redactor: &Redactor,
) -> NoticeRoute {
    let (hub, session, server) = (Arc::clone(hub), session.to_string(), server.to_string());
    let redactor = redactor.clone();
    let text =
        move |t: &str| crate::result::cap_chars(&redactor.text(t, View::Event), MAX_NOTICE_TEXT);
    Arc::new(move |notice, dropped| {
        let server = server.clone();
        let kind = match notice {
            Notice::Log {
                level,
                logger,
                data,
            } => {
                // The data is any JSON: redacted as text, so a secret split across
                // fields is still whole where it is looked for.
                let data = match data {
                    serde_json::Value::String(s) => serde_json::Value::String(text(&s)),
                    other => serde_json::Value::String(text(&other.to_string())),
                };
                EventKind::ServerLog {
                    server,
                    level: text(&level),
                    logger: logger.as_deref().map(&text),
                    data,
                    dropped,
                }
            }
            Notice::Progress(p) => EventKind::Progress {
                server,
                progress: p.progress,
                total: p.total,
                message: p.message.as_deref().map(&text),
                dropped,
            },
            Notice::ResourceUpdated { uri } => EventKind::ResourceUpdated {
                server,
                uri: text(&uri),
                dropped,
            },
            Notice::Task {
                id,
                status,
                message,
            } => EventKind::TaskStatus {
                server,
                task: text(&id),
                status: text(&status),
                message: message.as_deref().map(&text),
                dropped,
            },
        };
        hub.emit(&session, kind);
    })
}

/// The `type` and `format` words of an elicitation schema (MCP's primitive schemas).
const STRUCTURAL: &[&str] = &[
    "object",
    "string",
    "number",
    "integer",
    "boolean",
    "array",
    "email",
    "uri",
    "date",
    "date-time",
];

/// A requested schema as a person may be shown it: every string redacted for the
/// operator (titles, descriptions, enum labels and names, property names, `required`)
/// except the structural `type` and `format` words, and each property's `default` the
/// redacted default (`shown_defaults`, keyed by the redacted property name).
fn shown_schema(
    schema: &serde_json::Value,
    redactor: &Redactor,
    shown_defaults: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    use serde_json::Value;
    fn walk(value: &Value, redactor: &Redactor) -> Value {
        match value {
            Value::String(s) => Value::String(redactor.text(s, View::Operator)),
            Value::Array(items) => Value::Array(items.iter().map(|i| walk(i, redactor)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        // The structural words pass as they are when they are words of
                        // the vocabulary; anything else there is text like any other.
                        let v = match (k.as_str(), v) {
                            ("type" | "format", Value::String(word))
                                if STRUCTURAL.contains(&word.as_str()) =>
                            {
                                v.clone()
                            }
                            _ => walk(v, redactor),
                        };
                        (redactor.text(k, View::Operator), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut shown = walk(schema, redactor);
    if let Some(Value::Object(props)) = shown.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            if let (Some(default), Value::Object(prop)) = (shown_defaults.get(name), prop) {
                prop.insert("default".into(), default.clone());
            }
        }
    }
    shown
}
