//! Secret redaction and the five views of everything a connection produces.
//!
//! A [`Redactor`] knows the secrets of one connection (declared env and header values,
//! secret-bearing argument values) and, per call, the call's sensitive argument fields.
//! It also recognizes secret *shapes* in any text (URL credentials, sensitive query
//! values, `--token=...`, `name=value`, `Authorization:` lines, `"password": "..."`).
//!
//! Views (decisions.md section 7): model `<redacted>`, operator/event/durable
//! `<redacted:NAME>` (event and durable turn sensitive fields into
//! `{redacted, name, source}`), debug `<redacted:NAME:F16>`. A failure gives
//! `<redaction-failed>` everywhere, never raw text.

use std::sync::{Arc, LazyLock};

use regex::{Captures, Regex};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::authority::preview::SECRET_OPTION_MARKERS;

/// What every view shows when redaction could not complete.
pub const REDACTION_FAILED: &str = "<redaction-failed>";

/// Secrets shorter than this are not searched for in text (a one-character "secret"
/// would shred every output); they still never appear in previews or events by name.
pub const MIN_SECRET_LEN: usize = 4;

/// Who a view is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    /// What a host hands to its model: no names, no hints.
    Model,
    /// What a human operator sees (CLI): names, no values.
    Operator,
    /// Events for the host sink.
    Event,
    /// What is written to disk.
    Durable,
    /// Names plus a short fingerprint, to tell two secrets apart.
    Debug,
}

/// The same value in each view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Views<T> {
    /// See [`View::Model`].
    pub model: T,
    /// See [`View::Operator`].
    pub operator: T,
    /// See [`View::Event`].
    pub event: T,
    /// See [`View::Durable`].
    pub durable: T,
    /// See [`View::Debug`].
    pub debug: T,
}

impl<T> Views<T> {
    /// Builds each view with `f`.
    pub fn build(mut f: impl FnMut(View) -> T) -> Self {
        Views {
            model: f(View::Model),
            operator: f(View::Operator),
            event: f(View::Event),
            durable: f(View::Durable),
            debug: f(View::Debug),
        }
    }

    /// The value of one view.
    pub fn get(&self, view: View) -> &T {
        match view {
            View::Model => &self.model,
            View::Operator => &self.operator,
            View::Event => &self.event,
            View::Durable => &self.durable,
            View::Debug => &self.debug,
        }
    }
}

/// One known secret value and the name it is shown under.
#[derive(Clone, PartialEq, Eq)]
struct Secret {
    name: String,
    value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", self.name)
    }
}

/// Largest text redacted; anything bigger fails closed (every view becomes
/// `<redaction-failed>`), so a hostile result cannot make redaction unbounded.
pub const MAX_REDACT_BYTES: usize = 16 * 1024 * 1024;

/// Redaction could not complete; callers show [`REDACTION_FAILED`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("redaction failed")]
pub struct RedactionFailed;

/// Redacts the secrets of one connection (and optionally one call).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret containing another is replaced whole.
    secrets: Arc<Vec<Secret>>,
    /// A redactor that always fails: exercises the fail-closed paths in tests.
    poisoned: bool,
}

static URL_CREDENTIALS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#]+@").expect("valid regex"));
static SENSITIVE_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)([?&;\s,]|^|--?|\b)([A-Za-z0-9_.\-]*(?:{markers}|auth|key|sig|signature)[A-Za-z0-9_.\-]*)=([^&\s#"',;]+)"#
    ))
    .expect("valid regex")
});
static AUTHORIZATION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    // `Authorization: Bearer xyz` keeps the scheme and hides the credential; cookie
    // headers hide the rest of the line (their values are `;`-separated).
    Regex::new(
        r"(?i)\b((?:proxy-)?authorization|x-api-key)(\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?)(\S+)|\b(cookie|set-cookie)(\s*:\s*)([^\r\n]+)",
    )
    .expect("valid regex")
});
static JSON_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)"([A-Za-z0-9_.\-]*(?:{markers})[A-Za-z0-9_.\-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)""#
    ))
    .expect("valid regex")
});

fn sensitive_alternation() -> String {
    let mut parts: Vec<String> = SECRET_OPTION_MARKERS
        .iter()
        .map(|m| m.replace('_', "[_-]?"))
        .collect();
    parts.push("passphrase".into());
    parts.join("|")
}

/// Whether a field name marks its value as a secret (`api_key`, `X-Auth-Token`, ...).
pub fn is_sensitive_field(name: &str) -> bool {
    let norm = name.to_lowercase().replace('-', "_");
    SECRET_OPTION_MARKERS.iter().any(|m| norm.contains(m)) || norm.contains("passphrase")
}

/// The first 16 hex characters of sha256(value).
fn f16(value: &str) -> String {
    crate::hex(&Sha256::digest(value.as_bytes()))[..16].to_string()
}

fn marker(view: View, name: &str, value: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    match view {
        View::Model => "<redacted>".into(),
        View::Operator | View::Event | View::Durable => format!("<redacted:{name}>"),
        View::Debug => format!("<redacted:{name}:{}>", f16(value)),
    }
}

impl Redactor {
    /// A redactor that knows only the shapes, no declared secrets.
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds named secret values (empty values and values below [`MIN_SECRET_LEN`] are
    /// ignored for text search).
    pub fn with_secrets<I, N, V>(&self, secrets: I) -> Redactor
    where
        I: IntoIterator<Item = (N, V)>,
        N: Into<String>,
        V: Into<String>,
    {
        let mut all: Vec<Secret> = self.secrets.as_ref().clone();
        for (name, value) in secrets {
            let (name, value) = (name.into(), value.into());
            if value.chars().count() >= MIN_SECRET_LEN && !all.iter().any(|s| s.value == value) {
                all.push(Secret { name, value });
            }
        }
        all.sort_by(|a, b| b.value.len().cmp(&a.value.len()).then(a.name.cmp(&b.name)));
        Redactor {
            secrets: Arc::new(all),
            poisoned: self.poisoned,
        }
    }

    /// A redactor whose every redaction fails, for testing the fail-closed paths.
    #[doc(hidden)]
    pub fn poisoned() -> Self {
        Redactor {
            secrets: Arc::default(),
            poisoned: true,
        }
    }

    fn check(&self, len: usize) -> Result<(), RedactionFailed> {
        if self.poisoned || len > MAX_REDACT_BYTES {
            Err(RedactionFailed)
        } else {
            Ok(())
        }
    }

    /// Adds the values of sensitive fields of call arguments (at any depth).
    pub fn with_call_arguments(&self, args: &Value) -> Redactor {
        let mut found = Vec::new();
        collect_sensitive(args, None, &mut found);
        if found.is_empty() {
            return self.clone();
        }
        self.with_secrets(found)
    }

    /// Whether any declared secret is known.
    pub fn has_secrets(&self) -> bool {
        !self.secrets.is_empty()
    }

    /// `text` in one view; [`REDACTION_FAILED`] if it cannot be redacted.
    pub fn text(&self, text: &str, view: View) -> String {
        self.try_text(text, view)
            .unwrap_or_else(|_| REDACTION_FAILED.to_string())
    }

    /// `text` in one view.
    ///
    /// # Errors
    /// [`RedactionFailed`] for oversized input (or a poisoned redactor).
    pub fn try_text(&self, text: &str, view: View) -> Result<String, RedactionFailed> {
        self.check(text.len())?;
        let mut out = text.to_string();
        for secret in self.secrets.iter() {
            if out.contains(&secret.value) {
                out = out.replace(&secret.value, &marker(view, &secret.name, &secret.value));
            }
        }
        let out = URL_CREDENTIALS.replace_all(&out, |c: &Captures| {
            let creds = c.get(0).map_or("", |m| m.as_str());
            format!("{}{}@", &c[1], marker(view, "url_credentials", creds))
        });
        let out = AUTHORIZATION_LINE.replace_all(&out, |c: &Captures| {
            let (name, sep, value) = match (c.get(1), c.get(4)) {
                (Some(name), _) => (name.as_str(), &c[2], &c[3]),
                (None, Some(name)) => (name.as_str(), &c[5], &c[6]),
                _ => return c[0].to_string(),
            };
            if value.starts_with("<redacted") {
                return c[0].to_string();
            }
            format!("{name}{sep}{}", marker(view, &name.to_lowercase(), value))
        });
        let out = JSON_FIELD.replace_all(&out, |c: &Captures| {
            if c[3].starts_with("<redacted") {
                return c[0].to_string();
            }
            format!("\"{}\"{}\"{}\"", &c[1], &c[2], marker(view, &c[1], &c[3]))
        });
        let out = SENSITIVE_ASSIGNMENT.replace_all(&out, |c: &Captures| {
            if c[3].starts_with("<redacted") || !is_sensitive_assignment(&c[2]) {
                return c[0].to_string();
            }
            format!("{}{}={}", &c[1], &c[2], marker(view, &c[2], &c[3]))
        });
        Ok(out.into_owned())
    }

    /// `value` in one view; the string [`REDACTION_FAILED`] if it cannot be redacted.
    pub fn json(&self, value: &Value, view: View) -> Value {
        self.try_json(value, view)
            .unwrap_or_else(|_| Value::String(REDACTION_FAILED.into()))
    }

    /// `value` in one view: strings are redacted as text, sensitive fields replaced.
    ///
    /// # Errors
    /// [`RedactionFailed`] when any part cannot be redacted.
    pub fn try_json(&self, value: &Value, view: View) -> Result<Value, RedactionFailed> {
        self.check(0)?;
        Ok(match value {
            Value::String(s) => Value::String(self.try_text(s, view)?),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.try_json(v, view))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                for (key, v) in map {
                    let key_out = self.try_text(key, view)?;
                    let redacted =
                        is_sensitive_field(key) && !v.is_null() && !v.is_object() && !v.is_array();
                    let v_out = if redacted {
                        let raw = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        match view {
                            View::Event | View::Durable => serde_json::json!({
                                "redacted": true, "name": key_out, "source": "field"
                            }),
                            _ => Value::String(marker(view, key, &raw)),
                        }
                    } else {
                        self.try_json(v, view)?
                    };
                    out.insert(key_out, v_out);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    /// Every view of `text`; `<redaction-failed>` in all of them if redaction fails.
    pub fn text_views(&self, text: &str) -> Views<String> {
        guarded(
            || all_views(|v| self.try_text(text, v)),
            || REDACTION_FAILED.to_string(),
        )
    }

    /// Every view of `value`; the string `<redaction-failed>` in all if redaction fails.
    pub fn json_views(&self, value: &Value) -> Views<Value> {
        guarded(
            || all_views(|v| self.try_json(value, v)),
            || Value::String(REDACTION_FAILED.into()),
        )
    }
}

/// Every view, or the first failure.
fn all_views<T>(
    mut f: impl FnMut(View) -> Result<T, RedactionFailed>,
) -> Result<Views<T>, RedactionFailed> {
    Ok(Views {
        model: f(View::Model)?,
        operator: f(View::Operator)?,
        event: f(View::Event)?,
        durable: f(View::Durable)?,
        debug: f(View::Debug)?,
    })
}

/// Runs a redaction; a failure (or a panic inside it) yields the failure marker in
/// every view, never partially redacted text.
fn guarded<T>(
    f: impl FnOnce() -> Result<Views<T>, RedactionFailed>,
    failed: impl Fn() -> T,
) -> Views<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        _ => Views::build(|_| failed()),
    }
}

/// `key=value` redaction only fires for names that are really sensitive: the regex also
/// catches `key`/`auth`/`sig`, which must be whole words of the name (`monkey=1` stays).
fn is_sensitive_assignment(name: &str) -> bool {
    if is_sensitive_field(name) {
        return true;
    }
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "key" | "auth" | "sig" | "signature" | "apikey" | "pass"))
}

fn collect_sensitive(value: &Value, key: Option<&str>, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                collect_sensitive(v, Some(k), out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_sensitive(v, key, out)),
        Value::String(s) if key.is_some_and(is_sensitive_field) => {
            out.push((key.unwrap_or_default().to_string(), s.clone()));
        }
        Value::Number(n) if key.is_some_and(is_sensitive_field) => {
            out.push((key.unwrap_or_default().to_string(), n.to_string()));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn declared_secrets_are_replaced_in_every_view_but_fingerprinted_in_debug() {
        let r = Redactor::new().with_secrets([("API_TOKEN", "canary-4242")]);
        let v = r.text_views("got canary-4242 back");
        assert_eq!(v.model, "got <redacted> back");
        assert_eq!(v.operator, "got <redacted:API_TOKEN> back");
        assert_eq!(v.durable, "got <redacted:API_TOKEN> back");
        assert!(v.debug.starts_with("got <redacted:API_TOKEN:") && !v.debug.contains("canary"));
    }

    #[test]
    fn shapes_are_recognized_without_declarations() {
        let r = Redactor::new();
        let t = r.text(
            "GET https://bob:pw123@host/x?token=abc123&page=2 Authorization: Bearer zzz --api-key=qqq password=ppp monkey=1",
            View::Operator,
        );
        for leaked in ["pw123", "abc123", "zzz", "qqq", "ppp"] {
            assert!(!t.contains(leaked), "{leaked} leaked in {t}");
        }
        assert!(t.contains("page=2") && t.contains("monkey=1"), "{t}");
    }

    #[test]
    fn json_fields_become_structured_in_durable_view() {
        let r = Redactor::new();
        let v =
            r.json_views(&json!({"user": "ann", "password": "p@ss", "nested": [{"api_key": 7}]}));
        assert_eq!(v.model["password"], "<redacted>");
        assert_eq!(v.operator["password"], "<redacted:password>");
        assert_eq!(
            v.durable["password"],
            json!({"redacted": true, "name": "password", "source": "field"})
        );
        assert_eq!(v.durable["nested"][0]["api_key"]["redacted"], true);
        assert_eq!(v.model["user"], "ann");
    }

    #[test]
    fn call_argument_secrets_are_learned() {
        let r = Redactor::new().with_call_arguments(&json!({"auth": {"token": "tok-998877"}}));
        assert_eq!(r.text("echo tok-998877", View::Model), "echo <redacted>");
    }

    #[test]
    fn a_failure_gives_the_marker_in_every_view() {
        let v = Redactor::poisoned().text_views("secret stuff");
        assert!(
            [&v.model, &v.operator, &v.event, &v.durable, &v.debug]
                .iter()
                .all(|s| *s == REDACTION_FAILED)
        );
        let j = Redactor::poisoned().json_views(&json!({"a": "b"}));
        assert_eq!(j.durable, json!(REDACTION_FAILED));
        let huge = "x".repeat(MAX_REDACT_BYTES + 1);
        assert_eq!(Redactor::new().text_views(&huge).operator, REDACTION_FAILED);
        assert_eq!(Redactor::new().text(&huge, View::Model), REDACTION_FAILED);
    }

    #[test]
    fn longer_secret_wins_over_its_substring() {
        let r = Redactor::new().with_secrets([("A", "abcd"), ("B", "abcdefgh")]);
        assert_eq!(r.text("abcdefgh", View::Operator), "<redacted:B>");
    }

    #[test]
    fn json_text_fields_are_redacted_in_strings() {
        let r = Redactor::new();
        let t = r.text(
            r#"error: {"client_secret": "s-123", "ok": "x"}"#,
            View::Operator,
        );
        assert!(!t.contains("s-123") && t.contains("\"ok\": \"x\""), "{t}");
    }
}
