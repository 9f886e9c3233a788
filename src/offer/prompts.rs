//! What a turn shows of a prompt it got, and which URIs a connection's offer names.

use rmcp::model::GetPromptResult;
use serde_json::Value;

use super::{
    MAX_DESCRIPTION, MAX_PROMPT_MESSAGES, MAX_PROMPT_TEXT, Offered, PromptMessageView, PromptResult,
};
use crate::core::Declaration;
use crate::naming;
use crate::redact::{Redactor, View};
use crate::result::cap_chars;

/// The prompt `name` of `server` as `got` from it, redacted like a result (model
/// view): what any message marks as secret is secret in all of them; at most
/// [`MAX_PROMPT_MESSAGES`] messages, every string in them cut at [`MAX_PROMPT_TEXT`].
pub(crate) fn prompt_result(
    name: &str,
    server: &str,
    got: &GetPromptResult,
    redactor: &Redactor,
) -> PromptResult {
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
    PromptResult {
        prompt: name.to_string(),
        server: server.to_string(),
        description: got
            .description
            .as_deref()
            .map(|d| cap_chars(&redactor.text(d, View::Model), MAX_DESCRIPTION)),
        messages,
    }
}

/// Whether `uri` is one `offered` names (a listed resource, or one a listed template
/// names) and `declaration`'s `resources:` allows.
pub(crate) fn offers_uri(offered: &Offered, declaration: &Declaration, uri: &str) -> bool {
    let listed = offered.resources.iter().any(|r| r.uri == uri)
        || offered
            .templates
            .iter()
            .any(|t| naming::glob_match(&template_glob(&t.uri_template), uri));
    listed && naming::filter_allows(&declaration.resources, uri)
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
    use serde_json::json;

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
