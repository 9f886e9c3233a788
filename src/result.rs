//! MCP call results converted into Demiurge tool results, each with the five views.
//!
//! `structuredContent` wins (pretty JSON); otherwise text blocks are joined by newlines,
//! images and audio become `[image <mime>]`, links `[<title>] <uri>`. `isError` makes an
//! error result. Errors are redacted first, then capped at [`ERROR_TEXT_CAP`] characters.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::redact::{REDACTION_FAILED, Redactor, View, Views};

/// Longest error text kept (after redaction).
pub const ERROR_TEXT_CAP: usize = 500;

/// One view of a result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultView {
    /// The text a model or operator reads.
    pub content: String,
    /// Structured data (`structuredContent`), `{}` when none.
    pub data: Value,
}

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// Exposed tool name.
    pub tool: String,
    /// Whether this is an error (from the server's `isError` or from the runtime).
    pub is_error: bool,
    /// The result in each view.
    pub views: Views<ResultView>,
}

impl ToolResult {
    /// Converts a `CallToolResult` (as JSON) through `redactor`.
    pub fn from_mcp(tool: &str, raw: &Value, redactor: &Redactor) -> Self {
        // What the result marks as secret is secret for the whole result.
        let redactor = &redactor.with_result_secrets(raw);
        let is_error = raw.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let structured = raw.get("structuredContent").filter(|v| !v.is_null());
        let text = match structured {
            Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
            None => content_text(raw.get("content")),
        };
        let data = match structured {
            Some(Value::Object(m)) => Value::Object(m.clone()),
            Some(other) => serde_json::json!({ "value": other }),
            None => Value::Object(Map::new()),
        };
        let texts = redactor.text_views(&text);
        let datas = redactor.json_views(&data);
        let views = Views::build(|v| {
            let content = texts.get(v).clone();
            let content = if is_error { cap(&content) } else { content };
            ResultView {
                content,
                data: datas.get(v).clone(),
            }
        });
        ToolResult {
            tool: tool.to_string(),
            is_error,
            views: failed_if_any(views),
        }
    }

    /// An error produced by the runtime (denied, invalid, timeout, transport), redacted
    /// with the call's context and capped.
    pub fn error(tool: &str, message: &str, redactor: &Redactor) -> Self {
        let texts = redactor.text_views(message);
        ToolResult {
            tool: tool.to_string(),
            is_error: true,
            views: Views::build(|v| ResultView {
                content: cap(texts.get(v)),
                data: Value::Object(Map::new()),
            }),
        }
    }

    /// The result as `view` may show it (model, transcript, event, ...), each redacted
    /// for its audience.
    pub fn view(&self, view: View) -> &ResultView {
        self.views.get(view)
    }
}

/// If any part of any view failed, every view is the failure marker.
fn failed_if_any(views: Views<ResultView>) -> Views<ResultView> {
    let failed = [
        View::Model,
        View::Operator,
        View::Event,
        View::Durable,
        View::Debug,
    ]
    .iter()
    .any(|&v| {
        let r = views.get(v);
        r.content == REDACTION_FAILED || r.data == Value::String(REDACTION_FAILED.into())
    });
    if failed {
        Views::build(|_| ResultView {
            content: REDACTION_FAILED.into(),
            data: Value::String(REDACTION_FAILED.into()),
        })
    } else {
        views
    }
}

/// Caps text at [`ERROR_TEXT_CAP`] characters.
pub fn cap(text: &str) -> String {
    cap_chars(text, ERROR_TEXT_CAP)
}

/// Caps text at `max` characters, marking a cut with `…`.
pub fn cap_chars(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}
fn content_text(content: Option<&Value>) -> String {
    let Some(Value::Array(blocks)) = content else {
        return String::new();
    };
    let parts: Vec<String> = blocks
        .iter()
        .map(|block| {
            let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
            match field("type") {
                "text" => field("text").to_string(),
                "image" => format!("[image {}]", field("mimeType")),
                "audio" => format!("[audio {}]", field("mimeType")),
                "resource_link" => {
                    let title = block
                        .get("title")
                        .or_else(|| block.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    format!("[{title}] {}", field("uri"))
                }
                "resource" => {
                    let resource = block.get("resource");
                    let text = resource.and_then(|r| r.get("text")).and_then(Value::as_str);
                    let uri = resource
                        .and_then(|r| r.get("uri"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    text.map_or_else(|| format!("[resource {uri}]"), str::to_string)
                }
                other => format!("[{other} content]"),
            }
        })
        .collect();
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structured_content_wins() {
        let r = ToolResult::from_mcp(
            "t",
            &json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"a": 1}}),
            &Redactor::new(),
        );
        assert_eq!(r.views.model.content, "{\n  \"a\": 1\n}");
        assert_eq!(r.views.model.data, json!({"a": 1}));
        assert!(!r.is_error);
    }

    #[test]
    fn blocks_are_rendered() {
        let raw = json!({"isError": true, "content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///x", "name": "x", "title": "X"}
        ]});
        let r = ToolResult::from_mcp("t", &raw, &Redactor::new());
        assert!(r.is_error);
        assert_eq!(
            r.views.operator.content,
            "one\n[image image/png]\n[X] file:///x"
        );
    }

    #[test]
    fn errors_are_redacted_then_capped() {
        let secret = "s3cr3t-value";
        let long = format!("{} {secret}", "x".repeat(600));
        let r = ToolResult::error("t", &long, &Redactor::new().with_secrets([("K", secret)]));
        assert!(r.views.operator.content.chars().count() <= ERROR_TEXT_CAP + 1);
        let r = ToolResult::error(
            "t",
            &format!("bad {secret}"),
            &Redactor::new().with_secrets([("K", secret)]),
        );
        assert_eq!(r.views.operator.content, "bad <redacted:K>");
    }
}

#[cfg(test)]
mod failure_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_redaction_failure_is_the_marker_in_every_view() {
        let raw = json!({"content": [{"type": "text", "text": "raw secret"}], "structuredContent": {"k": "v"}});
        let r = ToolResult::from_mcp("t", &raw, &Redactor::poisoned());
        for v in [
            View::Model,
            View::Operator,
            View::Event,
            View::Durable,
            View::Debug,
        ] {
            assert_eq!(r.view(v).content, REDACTION_FAILED);
            assert_eq!(r.view(v).data, Value::String(REDACTION_FAILED.into()));
        }
        let e = ToolResult::error("t", "raw secret", &Redactor::poisoned());
        assert_eq!(e.views.operator.content, REDACTION_FAILED);
    }
}
