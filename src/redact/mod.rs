//! Secret redaction and the five views of everything a connection produces.
//!
//! A [`Redactor`] knows the secrets of one connection (declared env and header values,
//! secret-bearing argument values) and, per call, the call's sensitive argument fields.
//! It also recognizes secret *shapes* in any text (URL credentials, sensitive query
//! values, `--token=...`, `name=value`, `Authorization:` lines, `"password": "..."`).
//!
//! Views (`docs/design.md#5-secrets-and-results`): model `<redacted>`, operator/event/durable
//! `<redacted:NAME>` (event and durable turn sensitive fields into
//! `{redacted, name, source}`), debug `<redacted:NAME:F16>`. A failure gives
//! `<redaction-failed>` everywhere, never raw text.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

mod known;
mod render;
mod shapes;

pub(crate) use known::{Fingerprint, Span};
use known::{Known, Secret};
pub use known::{Learned, MAX_LEARNED, MAX_SECRET_BYTES};
use shapes::{collect_sensitive, collect_strings, is_count};
pub use shapes::{is_sensitive_field, sensitive_label};

/// Substrings of a name (an option, a field, a key) that mark its value as a secret.
pub const SECRET_OPTION_MARKERS: &[&str] = &[
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "password",
    "passwd",
    "private_key",
    "secret",
    "token",
];

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
    secrets: Arc<Known>,
    /// Secrets the connection learns after it started, shared by every clone.
    learned: Option<Arc<Learned>>,
    /// A redactor that always fails: exercises the fail-closed paths in tests.
    poisoned: bool,
}

/// The label a declared name (an env or header name, an option name, a fixed name of
/// the runtime's) is shown under: itself when it is a plain identifier of at most 64
/// characters, else `secret`. Names that hold a secret value are caught once the
/// automaton exists ([`Known::new`]).
fn plain_label(name: &str) -> Arc<str> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain { name.into() } else { "secret".into() }
}

/// One shared name for each fixed label met: the thousands of secrets a result holds
/// under one key share one allocation of its name.
#[derive(Default)]
struct Labels(Vec<(&'static str, Arc<str>)>);

impl Labels {
    fn get(&mut self, label: &'static str) -> Arc<str> {
        if let Some((_, shared)) = self.0.iter().find(|(l, _)| *l == label) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = plain_label(label);
        self.0.push((label, Arc::clone(&shared)));
        shared
    }
}

/// The secrets of values found under sensitive keys, each also as it is written
/// inside JSON text (the pretty text of structured content, a JSON text block):
/// quotes, backslashes and controls escaped, as serde_json escapes them.
fn sensitive_secrets(sensitive: Vec<(&'static str, String)>, labels: &mut Labels) -> Vec<Secret> {
    let mut found = Vec::with_capacity(sensitive.len());
    for (name, value) in sensitive {
        let name = labels.get(name);
        if value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
            && let Ok(json) = serde_json::to_string(&value)
        {
            found.push(Secret {
                name: Arc::clone(&name),
                value: json[1..json.len() - 1].to_string(),
            });
        }
        found.push(Secret { name, value });
    }
    found
}

/// The first 16 hex characters of sha256(value).
fn f16(value: &str) -> String {
    crate::digest::sha256_hex(value.as_bytes())[..16].to_string()
}

/// The marker a secret is replaced by in one view. `label` is a fixed word or a
/// declared name already checked ([`plain_label`], [`Known::new`]), never text of the
/// input.
fn marker(view: View, label: &str, value: &str) -> String {
    match view {
        View::Model => "<redacted>".into(),
        View::Operator | View::Event | View::Durable => format!("<redacted:{label}>"),
        View::Debug => format!("<redacted:{label}:{}>", f16(value)),
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
        self.with_found(secrets.into_iter().map(|(name, value)| {
            let name: String = name.into();
            Secret {
                name: plain_label(&name),
                value: value.into(),
            }
        }))
    }

    /// [`Redactor::with_secrets`] for secrets whose names are labels already (a fixed
    /// word, or a name a redactor checked).
    fn with_found(&self, found: impl IntoIterator<Item = Secret>) -> Redactor {
        let mut all: Vec<Secret> = self.secrets.secrets.clone();
        all.extend(
            found
                .into_iter()
                .filter(|s| s.value.chars().nth(MIN_SECRET_LEN - 1).is_some()),
        );
        // One entry a value, the first given (known ones before new ones) keeping its
        // name: a stable sort, then a dedup, instead of a lookup per value.
        all.sort_by(|a, b| a.value.cmp(&b.value));
        all.dedup_by(|later, first| later.value == first.value);
        Redactor {
            secrets: Arc::new(Known::new(all)),
            learned: self.learned.clone(),
            poisoned: self.poisoned,
        }
    }

    /// This redactor, also hiding whatever `learned` learns from now on.
    pub fn with_learned(&self, learned: Arc<Learned>) -> Redactor {
        Redactor {
            learned: Some(learned),
            ..self.clone()
        }
    }

    /// What the connection learned so far, when it learned anything; a failure when
    /// it cannot be read (a poisoned lock hides nothing less: it fails closed).
    fn learned(&self) -> Result<Option<Arc<Known>>, RedactionFailed> {
        let Some(learned) = self.learned.as_ref() else {
            return Ok(None);
        };
        let learned = learned.0.read().map_err(|_| RedactionFailed)?;
        Ok((!learned.secrets.is_empty()).then(|| Arc::clone(&learned)))
    }

    /// What tells this redactor's secrets from another's ([`Fingerprint`]): equal for
    /// two redactors that redact every text alike. `None` when that cannot be told:
    /// the connection learned secrets since it started (they change under it),
    /// redaction fails, or no key could be drawn yet.
    pub(crate) fn fingerprint(&self) -> Option<Fingerprint> {
        if self.poisoned || !matches!(self.learned(), Ok(None)) {
            return None;
        }
        self.secrets.fingerprint()
    }

    /// Characters of the longest known secret (0 when there is none).
    pub fn longest_secret_chars(&self) -> usize {
        let learned = self.learned().ok().flatten();
        let learned = learned.map_or(0, |l| l.longest_chars);
        self.secrets.longest_chars.max(learned)
    }

    /// A redactor whose every redaction fails, for testing the fail-closed paths.
    #[doc(hidden)]
    pub fn poisoned() -> Self {
        Redactor {
            secrets: Arc::default(),
            learned: None,
            poisoned: true,
        }
    }

    fn check(&self, len: usize) -> Result<(), RedactionFailed> {
        if self.poisoned || self.secrets.broken || len > MAX_REDACT_BYTES {
            Err(RedactionFailed)
        } else {
            Ok(())
        }
    }

    /// Adds the values of sensitive fields of call arguments (at any depth).
    pub fn with_call_arguments(&self, args: &Value) -> Redactor {
        match args {
            Value::Object(map) => self.with_call_object(Some(map)),
            _ => self.clone(),
        }
    }

    /// [`Redactor::with_call_arguments`] for an arguments object, without copying it.
    pub fn with_call_object(&self, args: Option<&Map<String, Value>>) -> Redactor {
        let mut found = Vec::new();
        if let Some(args) = args {
            // The same walk as a result's, so a count (`max_tokens: 4096`) is none.
            for (key, value) in args {
                let label = sensitive_label(key);
                if label.is_some() && is_count(key, value) {
                    continue;
                }
                collect_sensitive(value, label, &mut found);
            }
        }
        if found.is_empty() {
            return self.clone();
        }
        let mut labels = Labels::default();
        self.with_found(found.into_iter().map(|(name, value)| Secret {
            name: labels.get(name),
            value,
        }))
    }

    /// Adds the secrets a result reveals about itself, so that each is hidden wherever
    /// it recurs in that result (decisions section 7, revised): every value under a
    /// sensitive key (each item of a list or map under one too), the values that
    /// secret shapes in its texts enclose (`token=...`, `--token ...`,
    /// `Authorization: ...`), and the same inside text blocks that are JSON documents.
    /// Without this a server's `{"password": "x"}` would be hidden in the data and shown
    /// in the text beside it.
    pub fn with_result_secrets(&self, result: &Value) -> Redactor {
        let mut sensitive = Vec::new();
        collect_sensitive(result, None, &mut sensitive);
        let mut labels = Labels::default();
        let mut found = sensitive_secrets(sensitive, &mut labels);
        let mut texts = Vec::new();
        collect_strings(result, &mut texts);
        // The content's text blocks as the view's text joins them: a shape that begins
        // in one block and ends in the next reveals its value too.
        let joined: Option<String> =
            result
                .get("content")
                .and_then(Value::as_array)
                .and_then(|blocks| {
                    let parts: Vec<&str> = blocks
                        .iter()
                        .filter_map(|b| b.get("text").and_then(Value::as_str))
                        .collect();
                    (parts.len() > 1).then(|| parts.join("\n"))
                });
        if let Some(joined) = &joined {
            texts.push(joined);
        }
        // Made at the first hit: most results have none.
        let mut declared: Option<std::collections::HashSet<&str>> = None;
        for text in texts {
            if text.len() > MAX_REDACT_BYTES {
                continue;
            }
            let Ok(hits) = self.hits(text) else {
                return Redactor::poisoned();
            };
            for hit in hits {
                // Declared secrets are known already; shapes reveal new ones.
                let value = &text[hit.start..hit.end];
                let declared = declared.get_or_insert_with(|| {
                    self.secrets
                        .secrets
                        .iter()
                        .map(|s| s.value.as_str())
                        .collect()
                });
                if !declared.contains(value) {
                    found.push(Secret {
                        name: hit.name,
                        value: value.to_string(),
                    });
                }
            }
            let trimmed = text.trim_start();
            if (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(inner) = serde_json::from_str::<Value>(text)
            {
                let mut inside = Vec::new();
                collect_sensitive(&inner, None, &mut inside);
                found.extend(inside.into_iter().map(|(name, value)| Secret {
                    name: labels.get(name),
                    value,
                }));
            }
        }
        if found.is_empty() {
            return self.clone();
        }
        self.with_found(found)
    }

    /// Whether `name` holds a secret of this redactor once both are normalized as the
    /// runtime normalizes names (ASCII lowercased, anything but letters and digits read
    /// as `-`): a tool named `SK-LIVE-X` holds the secret `sk_live_x`, since its
    /// exposed form would show it. A redactor that cannot redact holds everything.
    pub fn holds_secret_normalized(&self, name: &str) -> bool {
        fn normal(s: &str) -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() {
                        c.to_ascii_lowercase()
                    } else {
                        '-'
                    }
                })
                .collect()
        }
        let Ok(learned) = self.learned() else {
            return true;
        };
        if self.check(name.len()).is_err() {
            return true;
        }
        let name = normal(name);
        let learned = learned.iter().flat_map(|l| l.secrets.iter());
        self.secrets.secrets.iter().chain(learned).any(|s| {
            let secret = normal(&s.value);
            // A secret that is all separators would match every name.
            secret.trim_matches('-').len() >= MIN_SECRET_LEN && name.contains(&secret)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::render::ALL_VIEWS;
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_tell_secret_sets_apart_and_none_is_given_when_they_may_change() {
        let of = |secrets: &[(&str, &str)]| {
            Redactor::new()
                .with_secrets(secrets.iter().copied())
                .fingerprint()
        };
        let base = of(&[("A", "value-1111"), ("B", "value-2222")]);
        assert!(base.is_some());
        // The same secrets in another order: alike.
        assert_eq!(base, of(&[("B", "value-2222"), ("A", "value-1111")]));
        // Another value, another name, one more, one less, none, a value split
        // differently between name and value: apart.
        for other in [
            of(&[("A", "value-1111"), ("B", "value-2223")]),
            of(&[("A", "value-1111"), ("C", "value-2222")]),
            of(&[
                ("A", "value-1111"),
                ("B", "value-2222"),
                ("C", "value-3333"),
            ]),
            of(&[("A", "value-1111")]),
            of(&[]),
            of(&[("A", "value-1111"), ("Bv", "alue-2222")]),
        ] {
            assert!(other.is_some());
            assert_ne!(base, other);
        }
        // Not shown: neither a value nor a name is in its debug text.
        let shown = format!("{:?}", base);
        assert!(
            !shown.contains("value") && !shown.contains("1111"),
            "{shown}"
        );
        // Learned secrets change under a connection; a poisoned or broken redactor
        // redacts nothing: no fingerprint.
        let learned = Arc::new(Learned::default());
        let r = Redactor::new()
            .with_secrets([("A", "value-1111")])
            .with_learned(Arc::clone(&learned));
        assert!(r.fingerprint().is_some());
        learned.learn("T", "learned-token-1");
        assert!(r.fingerprint().is_none());
        assert!(Redactor::poisoned().fingerprint().is_none());
        let huge = "x".repeat(MAX_SECRET_BYTES + 1);
        assert!(
            Redactor::new()
                .with_secrets([("H", huge)])
                .fingerprint()
                .is_none()
        );
    }

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
    fn sensitive_field_names_are_found_in_any_case_and_spelling() {
        for name in [
            "token",
            "X-Auth-Token",
            "API-KEY",
            "apiKey",
            "my_Private-Key",
            "set-cookie",
            "PassPhrase",
            "db_passwd",
            "clientSecret",
            "proxy-authorization",
            // Unicode lowercasing: the Kelvin sign is a `k`.
            "to\u{212A}en",
            "ТОКЕН_token",
        ] {
            assert!(is_sensitive_field(name), "{name}");
        }
        for name in [
            "",
            "tok",
            "text",
            "api",
            "key",
            "pass-word2",
            "message",
            "tokn",
            "ключ",
        ] {
            assert!(!is_sensitive_field(name), "{name}");
        }
    }

    proptest::proptest! {
        #[test]
        fn the_ascii_path_agrees_with_unicode_lowercasing(name in "(ToKen|SECRET|pass|Word|phrase|api|-|_|Key|private|[a-zA-Z_-]){0,8}") {
            let norm = name.to_lowercase().replace('-', "_");
            let general = SECRET_OPTION_MARKERS.iter().any(|m| norm.contains(m))
                || norm.contains("passphrase");
            proptest::prop_assert_eq!(is_sensitive_field(&name), general);
        }
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
    fn a_secret_a_result_reveals_is_hidden_everywhere_in_it() {
        let result = json!({
            "content": [
                {"type": "text", "text": "your key is k-canary-one, and the list tok-canary-two"},
                {"type": "text", "text": "{\"auth\": {\"password\": \"p-canary-three\"}} p-canary-three"},
                {"type": "text", "text": "run with --token t-canary-four; later t-canary-four again"},
                {"type": "text", "text": "url?api_key=q-canary-five ... q-canary-five"}
            ],
            "structuredContent": {
                "api_key": "k-canary-one",
                "tokens": ["tok-canary-two", {"deep": 12345678}],
                "echo": "12345678"
            }
        });
        let r = Redactor::new().with_result_secrets(&result);
        for view in ALL_VIEWS {
            let shown = r.json(&result, view).to_string();
            for canary in [
                "k-canary-one",
                "tok-canary-two",
                "p-canary-three",
                "t-canary-four",
                "q-canary-five",
                "12345678",
            ] {
                assert!(!shown.contains(canary), "{view:?} shows {canary}: {shown}");
            }
        }
        // A list under a sensitive key is replaced whole.
        let views = r.json_views(&result);
        assert_eq!(views.model["structuredContent"]["tokens"], "<redacted>");
        assert_eq!(
            views.durable["structuredContent"]["tokens"]["redacted"],
            true
        );
    }

    #[test]
    fn spaced_secret_options_are_recognized_in_text() {
        let r = Redactor::new();
        for (text, hidden) in [
            ("start --token abc123 --verbose", "abc123"),
            ("cmd -api-key=zzz9 --password   hunter22", "hunter22"),
            ("(--client-secret s3cr3t-x)", "s3cr3t-x"),
            ("login --password \"two words\" now", "two words"),
            ("login --token 'q-tok-9' now", "q-tok-9"),
        ] {
            let shown = r.text(text, View::Operator);
            assert!(!shown.contains(hidden), "{text} -> {shown}");
        }
        assert_eq!(
            r.text("--token --verbose stays", View::Operator),
            "--token --verbose stays"
        );
    }

    #[test]
    fn values_below_a_sensitive_key_are_secrets_at_any_depth() {
        let r = Redactor::new().with_call_arguments(&json!({
            "credentials": {"user": "u-canary-1", "inner": ["i-canary-2"]},
            "token": [1234567]
        }));
        for canary in ["u-canary-1", "i-canary-2", "1234567"] {
            assert_eq!(r.text(canary, View::Model), "<redacted>", "{canary}");
        }
    }

    #[test]
    fn longer_secret_wins_over_its_substring() {
        let r = Redactor::new().with_secrets([("A", "abcd"), ("B", "abcdefgh")]);
        assert_eq!(r.text("abcdefgh", View::Operator), "<redacted:B>");
    }

    /// A hostile result: thousands of sensitive keys, each value repeated in a text,
    /// and one secret repeated a million times. Searching each secret separately and
    /// checking each hit against all hits before it took minutes for either; the bound
    /// is far above what one pass costs.
    #[test]
    fn many_secrets_and_many_hits_cost_one_pass() {
        let records: Vec<Value> = (0..20_000)
            .map(|n| json!({"api_token": format!("tok-{n:06}-x"), "note": format!("uses tok-{n:06}-x")}))
            .collect();
        let result = json!({"structuredContent": {"records": records}});
        let started = std::time::Instant::now();
        let r = Redactor::new().with_result_secrets(&result);
        let views = r.json_views(&result);
        let notes = views.operator["structuredContent"]["records"]
            .as_array()
            .unwrap();
        assert_eq!(notes.len(), 20_000);
        assert!(notes.iter().all(|n| n["note"] == "uses <redacted:token>"));
        let flood = "abcdefgh ".repeat(1_000_000);
        let r = Redactor::new().with_secrets([("key", "abcdefgh"), ("k2", "efgh abcd")]);
        let text = r.text(&flood, View::Model);
        assert!(!text.contains("abcd") && !text.contains("efgh"));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "redaction took {:?}",
            started.elapsed()
        );
    }

    /// What a hostile result could make the automaton cost is bounded: more than
    /// [`MAX_SECRET_BYTES`] of secrets, or secrets nested so that each byte matches many
    /// of them, fail closed (quickly) instead of growing memory or time.
    #[test]
    fn a_secret_with_quotes_is_hidden_in_json_text_too() {
        let result = json!({"tokens": ["a\"bcdefgh\\x"]});
        let r = Redactor::new().with_result_secrets(&result);
        let pretty = serde_json::to_string_pretty(&result).unwrap();
        let out = r.text(&pretty, View::Model);
        assert!(!out.contains("bcdefgh"), "{out}");
    }

    #[test]
    fn oversized_or_nested_result_secrets_fail_closed() {
        let huge = json!({"password": "x".repeat(MAX_SECRET_BYTES + 1)});
        let r = Redactor::new().with_result_secrets(&huge);
        assert_eq!(r.text("anything", View::Model), REDACTION_FAILED);
        let nested: Vec<String> = (4..2_004).map(|n| "a".repeat(n)).collect();
        let result = json!({"tokens": nested});
        let started = std::time::Instant::now();
        let r = Redactor::new().with_result_secrets(&result);
        assert_eq!(r.text(&"a".repeat(100_000), View::Model), REDACTION_FAILED);
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // A large but legitimate secret (a key of a few KiB) is still hidden.
        let pem: String = (0..4096)
            .map(|i| char::from(b'A' + (i % 26) as u8))
            .collect();
        let r = Redactor::new().with_result_secrets(&json!({"private_key": pem}));
        assert_eq!(r.text(&format!("k={pem}"), View::Model), "k=<redacted>");
    }

    #[test]
    fn overlapping_secrets_are_hidden_together_and_shapes_absorb_them() {
        // Two secrets overlapping are one hit: no character of either is shown.
        let r = Redactor::new().with_secrets([("A", "xxabcd"), ("B", "abcdyy")]);
        assert_eq!(r.text("-xxabcdyy-", View::Operator), "-<redacted:A>-");
        // A hostile result naming a value that starts just before a declared token
        // cannot uncover the token's tail.
        let declared = Redactor::new().with_secrets([("GH", "ghp_ABCDEFGHIJKLMNOP")]);
        let result = json!({"password": "=ghp", "text": "GH=ghp_ABCDEFGHIJKLMNOP"});
        let r = declared.with_result_secrets(&result);
        for v in ALL_VIEWS {
            let out = r.text("GH=ghp_ABCDEFGHIJKLMNOP", v);
            assert!(!out.contains("ABCD") && !out.contains("MNOP"), "{out}");
        }
        // A shape around a known value is one hit, named by the shape.
        let r = Redactor::new().with_secrets([("declared", "s3cr3t-value")]);
        let out = r.text("token=s3cr3t-value-and-more rest", View::Operator);
        assert_eq!(out, "token=<redacted:token> rest");
    }

    /// Past the bytes a contiguous automaton is built for (a result revealing
    /// thousands of secrets) the other kind finds the same: overlapping secrets hidden
    /// together, the longest naming them, a shape absorbing a known value.
    #[test]
    fn many_secrets_are_found_as_a_few_are() {
        let filler: Vec<(String, String)> = (0..8_000)
            .map(|n| ("filler".to_string(), format!("filler-{n:08}-z")))
            .collect();
        let bytes: usize = filler.iter().map(|(_, v)| v.len()).sum();
        assert!(bytes > known::CONTIGUOUS_BYTES);
        let few = Redactor::new().with_secrets([("A", "xxabcd"), ("B", "abcdyy")]);
        let many = Redactor::new()
            .with_secrets(filler)
            .with_secrets([("A", "xxabcd"), ("B", "abcdyy")]);
        for text in [
            "-xxabcdyy-",
            "xxabcd abcdyy xxabcdyyabcdyy",
            "token=xxabcd-more rest",
            "nothing here",
        ] {
            for view in ALL_VIEWS {
                assert_eq!(many.text(text, view), few.text(text, view), "{text}");
            }
        }
        assert_eq!(
            many.text("a filler-00000042-z b", View::Operator),
            "a <redacted:filler> b"
        );
        assert_eq!(many.longest_secret_chars(), "filler-00000042-z".len());
    }

    /// A map whose keys all redact alike costs one probe a key, not one per earlier
    /// twin (200,000 keys `token=N`: quadratic would be minutes).
    #[test]
    fn many_keys_redacted_alike_stay_apart_in_linear_time() {
        let map: Map<String, Value> = (0..200_000)
            .map(|n| (format!("token={n}"), json!(n)))
            .collect();
        let started = std::time::Instant::now();
        let out = Redactor::new().json(&Value::Object(map), View::Operator);
        let out = out.as_object().unwrap();
        assert_eq!(out.len(), 200_000);
        assert!(out.contains_key("token=<redacted:token>#200000"));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "took {:?}",
            started.elapsed()
        );
    }

    /// What a connection learns is bounded: past [`MAX_LEARNED`] its redaction fails
    /// closed, and a batch rebuilds once.
    #[test]
    fn learning_is_bounded_and_fails_closed_past_it() {
        let learned = Arc::new(Learned::default());
        let r = Redactor::new().with_learned(Arc::clone(&learned));
        let values: Vec<String> = (0..MAX_LEARNED)
            .map(|n| format!("learned-{n:06}"))
            .collect();
        learned.learn_all(values.iter().map(|v| ("oauth_credential", v.as_str())));
        assert_eq!(r.text("x learned-000007 y", View::Model), "x <redacted> y");
        learned.learn("oauth_credential", "one-more-value");
        assert_eq!(r.text("anything", View::Model), REDACTION_FAILED);
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

    #[test]
    fn a_taken_value_comes_out_as_a_borrowed_one_in_every_view() {
        let r = Redactor::new().with_secrets([("API_TOKEN", "tok-5f3a9c1e77")]);
        let big = "x".repeat(MAX_REDACT_BYTES + 1);
        let values = [
            // Clean: given back as it is.
            json!({"type": "object", "properties": {"q": {"type": "string", "description": "a query"}}, "required": ["q"]}),
            json!([1, true, null, "plain", {"nested": ["deeper", 2.5]}]),
            json!({}),
            // A known value in a string, a key, deep in an array.
            json!({"description": "uses tok-5f3a9c1e77 to sign"}),
            json!({"tok-5f3a9c1e77": 1, "tok-5f3a9c1e77 ": 2}),
            json!({"a": [[{"b": "x tok-5f3a9c1e77"}]]}),
            // Shapes in strings.
            json!({"default": "https://bob:pw123@host/x"}),
            json!(["Authorization: Bearer zzzzzzzz"]),
            json!({"example": "{\"password\": \"p@ss\"}"}),
            // Sensitive keys: with a value, null, a count, a list.
            json!({"password": "p@ss"}),
            json!({"api_key": null}),
            json!({"token_count": 3, "tokens": 4}),
            json!({"secret": ["a", "b"]}),
            // Past what can be redacted: fails as a whole.
            json!({"description": big}),
        ];
        for value in values {
            for view in ALL_VIEWS {
                let taken = r.json_owned(value.clone(), view);
                assert_eq!(taken, r.json(&value, view), "{view:?}");
            }
        }
        // A poisoned redactor gives nothing back, not even a clean value.
        let clean = json!({"type": "object"});
        let poisoned = Redactor::poisoned().json_owned(clean.clone(), View::Model);
        assert_eq!(poisoned, Redactor::poisoned().json(&clean, View::Model));
        assert_ne!(poisoned, clean);
    }
}
