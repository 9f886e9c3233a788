//! Elicitation: a server asking the user for input in the middle of a request. Like an
//! approval, a host decision: the runtime routes `elicitation/create` to the host's
//! [`Elicitor`], applies the schema's defaults to what comes back (SEP-1034), checks
//! the answer against the requested schema, and refuses (declines) an answer that does
//! not fit, so a host bug cannot hand a server malformed data.

use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a server asks the user.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ElicitationRequest {
    /// Session asking.
    pub session: String,
    /// Server id.
    pub server: String,
    /// The server's message, redacted (its words: escape before a terminal shows it).
    pub message: String,
    /// The requested schema (an object of primitive properties) as a person may see
    /// it: its titles, descriptions, property names, enum labels and defaults redacted
    /// with the connection's secrets (escape them before a terminal shows them). The
    /// runtime checks an answer against the schema the server sent.
    pub schema: Value,
    /// The schema's defaults as a person may see them (redacted; a default under a
    /// sensitive property name is a marker). Accepting with no input sends the
    /// server's own defaults.
    pub defaults: Map<String, Value>,
}

/// What the user answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ElicitationAnswer {
    /// Accepted with these fields (missing ones are filled from the defaults).
    Accept(Map<String, Value>),
    /// Declined; the request goes on without the input.
    Decline,
    /// Cancelled the whole operation.
    Cancel,
}

/// The host's way to ask the user for input a server requests.
pub trait Elicitor: Send + Sync + 'static {
    /// Asks; dropped unfinished when the request it serves goes away.
    fn elicit(&self, request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer>;
}

/// Nobody to ask: every elicitation is declined.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeclineElicitor;

impl Elicitor for DeclineElicitor {
    fn elicit(&self, _request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        Box::pin(async { ElicitationAnswer::Decline })
    }
}

/// The `default` of every property of `schema` that has one (SEP-1034).
pub fn defaults_of(schema: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(Value::Object(props)) = schema.get("properties") {
        for (name, prop) in props {
            if let Some(default) = prop.get("default") {
                out.insert(name.clone(), default.clone());
            }
        }
    }
    out
}

/// `answer` with every property it omits filled from `defaults`.
pub fn with_defaults(
    mut answer: Map<String, Value>,
    defaults: &Map<String, Value>,
) -> Map<String, Value> {
    for (name, value) in defaults {
        answer.entry(name.clone()).or_insert_with(|| value.clone());
    }
    answer
}

/// Whether `answer` fits `schema`: only declared properties, every required one present,
/// each of its declared type, an `enum` member when the schema lists them, strings
/// within `minLength`/`maxLength`, numbers within `minimum`/`maximum`. The error names
/// the property, never its value.
///
/// # Errors
/// What does not fit, in words.
pub fn validate(schema: &Value, answer: &Map<String, Value>) -> Result<(), String> {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for name in answer.keys() {
        if !props.contains_key(name) {
            return Err(format!(
                "`{}` is not a requested field",
                crate::text::plain_name(name, "<field>")
            ));
        }
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !answer.contains_key(name) {
                return Err(format!(
                    "the required field `{}` is missing",
                    crate::text::plain_name(name, "<field>")
                ));
            }
        }
    }
    for (name, value) in answer {
        let prop = &props[name];
        let field = crate::text::plain_name(name, "<field>");
        let fits = match prop.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            Some("array") => value.is_array(),
            _ => true,
        };
        if !fits {
            return Err(format!("`{field}` is not of the requested type"));
        }
        if let Some(Value::Array(members)) = prop.get("enum")
            && !members.contains(value)
        {
            return Err(format!("`{field}` is not one of the offered values"));
        }
        if let Some(s) = value.as_str() {
            let len = s.chars().count() as u64;
            let min = prop.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let max = prop
                .get("maxLength")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            if len < min || len > max {
                return Err(format!(
                    "`{field}` has a length outside the requested bounds"
                ));
            }
        }
        if let Some(n) = value.as_f64() {
            let min = prop
                .get("minimum")
                .and_then(Value::as_f64)
                .unwrap_or(f64::MIN);
            let max = prop
                .get("maximum")
                .and_then(Value::as_f64)
                .unwrap_or(f64::MAX);
            if n < min || n > max {
                return Err(format!("`{field}` is outside the requested range"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "default": "Ada", "maxLength": 10},
            "age": {"type": "integer", "default": 36, "minimum": 0},
            "score": {"type": "number", "default": 0.5},
            "tier": {"type": "string", "enum": ["a", "b"], "default": "b"},
            "ok": {"type": "boolean", "default": true}
        }})
    }

    #[test]
    fn defaults_fill_what_the_user_left_out() {
        let defaults = defaults_of(&schema());
        assert_eq!(defaults.len(), 5);
        let filled = with_defaults(Map::from_iter([("age".into(), json!(7))]), &defaults);
        assert_eq!(filled["age"], 7);
        assert_eq!(filled["name"], "Ada");
        assert_eq!(filled["tier"], "b");
        assert_eq!(validate(&schema(), &filled), Ok(()));
    }

    #[test]
    fn answers_that_do_not_fit_are_refused_without_quoting_them() {
        let defaults = defaults_of(&schema());
        for (field, value, says) in [
            ("age", json!("old"), "type"),
            ("age", json!(-1), "range"),
            ("tier", json!("z"), "offered values"),
            ("name", json!("a very long name"), "length"),
            ("extra", json!(1), "not a requested field"),
        ] {
            let mut answer = defaults.clone();
            answer.insert(field.into(), value.clone());
            let error = validate(&schema(), &answer).unwrap_err();
            assert!(error.contains(says), "{field}: {error}");
            assert!(!error.contains("very long"), "{error}");
        }
        let mut missing = defaults;
        missing.remove("name");
        assert!(
            validate(&schema(), &missing)
                .unwrap_err()
                .contains("required")
        );
    }
}
