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

use std::sync::{Arc, LazyLock};

use regex::Regex;
use serde::Serialize;
use serde_json::{Map, Value};

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

/// One known secret value and the name it is shown under.
#[derive(Clone, PartialEq, Eq)]
struct Secret {
    name: Arc<str>,
    value: String,
}

/// Secrets and the automaton that finds every one of them in a single pass over a text
/// (Aho-Corasick): the cost of a search grows with the text and its matches, not with
/// the text times the number of secrets, which a result with thousands of sensitive
/// keys would otherwise make minutes.
#[derive(Default)]
struct Known {
    /// Longest first; an automaton pattern's index is its index here.
    secrets: Vec<Secret>,
    finder: Option<aho_corasick::AhoCorasick>,
    /// The secrets are more than [`MAX_SECRET_BYTES`], or the automaton could not be
    /// built: nothing can be redacted (fail closed), never "no secret found".
    broken: bool,
}

/// Most bytes of secret values one redactor searches for (a contiguous NFA holds some
/// tens of bytes per byte of pattern): a result revealing more fails closed.
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// Most secret matches in one text, beyond one a byte: past it redaction fails closed
/// (secrets nested in one another, each occurrence matching many of them).
const MAX_MATCHES_PER_BYTE: usize = 4;

impl Known {
    fn new(mut secrets: Vec<Secret>) -> Known {
        secrets.sort_by(|a, b| b.value.len().cmp(&a.value.len()).then(a.name.cmp(&b.name)));
        if secrets.is_empty() {
            return Known::default();
        }
        if secrets.iter().map(|s| s.value.len()).sum::<usize>() > MAX_SECRET_BYTES {
            return Known {
                secrets,
                finder: None,
                broken: true,
            };
        }
        // Every match is reported, overlapping ones too, so each occurrence of every
        // secret is hidden whatever else overlaps it; a contiguous NFA, never a DFA,
        // whose size could be the patterns' times the alphabet.
        let finder = aho_corasick::AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
            .match_kind(aho_corasick::MatchKind::Standard)
            .build(secrets.iter().map(|s| s.value.as_str()))
            .ok();
        let broken = finder.is_none();
        // A name is shown in every marker of its secret: one that holds any secret
        // value of the set (a declared `X_<value of Y>`) is shown as `secret`.
        if let Some(finder) = &finder {
            for secret in &mut secrets {
                if finder.is_match(secret.name.as_ref()) {
                    secret.name = "secret".into();
                }
            }
        }
        Known {
            secrets,
            finder,
            broken,
        }
    }

    /// Every occurrence of every secret in `text`, overlapping ones included (in no
    /// particular order; [`merged`] makes them hits).
    fn find(&self, text: &str, hits: &mut Vec<Hit>) -> Result<(), RedactionFailed> {
        if self.broken {
            return Err(RedactionFailed);
        }
        let Some(finder) = &self.finder else {
            return Ok(());
        };
        let bound = text.len().saturating_mul(MAX_MATCHES_PER_BYTE).max(1024);
        for (n, m) in finder.find_overlapping_iter(text).enumerate() {
            if n >= bound {
                return Err(RedactionFailed);
            }
            hits.push(Hit {
                start: m.start(),
                end: m.end(),
                name: Arc::clone(&self.secrets[m.pattern().as_usize()].name),
                longest: m.len(),
            });
        }
        Ok(())
    }
}

/// Occurrences merged into hits in order, none overlapping: every run of overlapping
/// occurrences is one hit spanning them, named by its longest secret.
fn merged(mut found: Vec<Hit>) -> Vec<Hit> {
    found.sort_unstable_by_key(|h| h.start);
    let mut hits: Vec<Hit> = Vec::with_capacity(found.len());
    for hit in found {
        match hits.last_mut() {
            Some(run) if hit.start < run.end => {
                if hit.longest > run.longest {
                    (run.name, run.longest) = (hit.name, hit.longest);
                }
                run.end = run.end.max(hit.end);
            }
            _ => hits.push(hit),
        }
    }
    hits
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.secrets).finish()
    }
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
    secrets: Arc<Known>,
    /// Secrets the connection learns after it started, shared by every clone.
    learned: Option<Arc<Learned>>,
    /// A redactor that always fails: exercises the fail-closed paths in tests.
    poisoned: bool,
}

/// Most secrets one connection learns while it runs (tokens of refreshes and step-ups,
/// the credentials of its OAuth flows); past it its redaction fails closed.
pub const MAX_LEARNED: usize = 1024;

/// Secrets a connection learns once it runs (OAuth tokens from a refresh or a step-up),
/// shared by every redactor of that connection: what one learns, all hide at once.
#[derive(Debug, Default)]
pub struct Learned(std::sync::RwLock<Arc<Known>>);

impl Learned {
    /// Adds a secret (ignored when shorter than [`MIN_SECRET_LEN`] or already known).
    pub fn learn(&self, name: &str, value: &str) {
        self.learn_all(std::iter::once((name, value)));
    }

    /// Adds several secrets with one rebuild of the automaton (each ignored when shorter
    /// than [`MIN_SECRET_LEN`] or already known).
    pub fn learn_all<'a>(&self, found: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let Ok(mut known) = self.0.write() else {
            return;
        };
        let mut secrets = known.secrets.clone();
        let before = secrets.len();
        for (name, value) in found {
            if value.chars().count() >= MIN_SECRET_LEN && !secrets.iter().any(|s| s.value == value)
            {
                secrets.push(Secret {
                    name: plain_label(name),
                    value: value.to_string(),
                });
            }
        }
        if secrets.len() > before {
            let mut next = Known::new(secrets);
            // Past the bound nothing of the connection can be shown any more (fail
            // closed), never a connection that learns without end.
            next.broken |= next.secrets.len() > MAX_LEARNED;
            *known = Arc::new(next);
        }
    }
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
static SPACED_OPTION: LazyLock<Regex> = LazyLock::new(|| {
    // `--token VALUE` (a space, not `=`): the value is the next word unless it is
    // another option, or a quoted string (`--token "a b"`).
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)(?:^|[\s"'(\[,])(--?[A-Za-z0-9_.\-]*(?:{markers})[A-Za-z0-9_.\-]*)[ \t]+(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"'`;,)\]}}\-][^\s"'`;,)\]}}]*))"#
    ))
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
    sensitive_label(name).is_some()
}

/// The fixed word a sensitive name is shown under (`token` for `sessionToken_x`,
/// `api_key` for `X-Api-Key`), `None` when the name is not sensitive.
///
/// A label is never built from the name itself: a key or an option name comes from a
/// server, a result or a model, and may carry the very secret its value is (a
/// `token_<secret>` key), so what a marker names is always one of a fixed vocabulary.
pub fn sensitive_label(name: &str) -> Option<&'static str> {
    // Every key of every result and call passes here: an ASCII name is matched as it
    // is, without allocating. (Unicode lowercasing can turn other letters into ASCII
    // ones, the Kelvin sign into `k`, so any other name is lowercased first.)
    let lowered;
    let name = if name.is_ascii() {
        name.as_bytes()
    } else {
        lowered = name.to_lowercase();
        lowered.as_bytes()
    };
    let marks = |marker: &[u8]| {
        name.windows(marker.len()).any(|window| {
            window.iter().zip(marker).all(|(&c, &m)| {
                let c = if c == b'-' {
                    b'_'
                } else {
                    c.to_ascii_lowercase()
                };
                c == m
            })
        })
    };
    SECRET_OPTION_MARKERS
        .iter()
        .chain(&["passphrase"])
        .copied()
        .find(|m| marks(m.as_bytes()))
}

/// Words of a sensitive name that make it a measure of secrets, not one
/// (`token_count`, `max_tokens`, `input_tokens`, `expires_in`): a number under such a
/// key is shown and is no secret of the result.
const QUANTITY_WORDS: &[&str] = &[
    "count",
    "counts",
    "total",
    "num",
    "number",
    "max",
    "min",
    "limit",
    "length",
    "len",
    "size",
    "used",
    "remaining",
    "usage",
    "expires",
    "expiry",
    "ttl",
    "estimated",
];

/// Whether `value` under `key` is a count, not a secret: a number or a boolean under a
/// name that counts or measures. The one rule for results, call arguments and views.
fn is_count(key: &str, value: &Value) -> bool {
    (value.is_number() || value.is_boolean()) && is_quantity_name(key)
}

/// Whether a sensitive name counts or measures (see [`QUANTITY_WORDS`]): its words are
/// split at `_`, `-`, `.`, spaces and lower-to-upper case changes.
fn is_quantity_name(name: &str) -> bool {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            words.push(std::mem::take(&mut word));
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    words.push(word);
    // An LLM's usage counts: `input_tokens`, `completionTokens`, `cached_tokens`.
    let usage = words.iter().any(|w| w == "tokens")
        && words.iter().any(|w| {
            matches!(
                w.as_str(),
                "input" | "output" | "prompt" | "completion" | "cached" | "reasoning"
            )
        });
    usage || words.iter().any(|w| QUANTITY_WORDS.contains(&w.as_str()))
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
        let mut all: Vec<Secret> = self.secrets.secrets.clone();
        for (name, value) in secrets {
            let (name, value): (String, String) = (name.into(), value.into());
            if value.chars().count() >= MIN_SECRET_LEN {
                all.push(Secret {
                    name: plain_label(&name),
                    value,
                });
            }
        }
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

    /// Characters of the longest known secret (0 when there is none).
    pub fn longest_secret_chars(&self) -> usize {
        let learned = self.learned().ok().flatten();
        let learned = learned.iter().flat_map(|l| l.secrets.iter());
        self.secrets
            .secrets
            .iter()
            .chain(learned)
            .map(|s| s.value.chars().count())
            .max()
            .unwrap_or(0)
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
                if is_count(key, value) {
                    continue;
                }
                collect_sensitive(value, sensitive_label(key), &mut found);
            }
        }
        if found.is_empty() {
            return self.clone();
        }
        self.with_secrets(found)
    }

    /// Adds the secrets a result reveals about itself, so that each is hidden wherever
    /// it recurs in that result (decisions section 7, revised): every value under a
    /// sensitive key (each item of a list or map under one too), the values that
    /// secret shapes in its texts enclose (`token=...`, `--token ...`,
    /// `Authorization: ...`), and the same inside text blocks that are JSON documents.
    /// Without this a server's `{"password": "x"}` would be hidden in the data and shown
    /// in the text beside it.
    pub fn with_result_secrets(&self, result: &Value) -> Redactor {
        let mut found = Vec::new();
        collect_sensitive(result, None, &mut found);
        // A value as it appears inside JSON text (the pretty text of structured
        // content, a JSON text block): quotes, backslashes and controls escaped.
        let escaped: Vec<(String, String)> = found
            .iter()
            .filter_map(|(name, value)| {
                let json = serde_json::to_string(value).ok()?;
                let inner = &json[1..json.len() - 1];
                (inner != value).then(|| (name.clone(), inner.to_string()))
            })
            .collect();
        found.extend(escaped);
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
                    found.push((hit.name.to_string(), value.to_string()));
                }
            }
            let trimmed = text.trim_start();
            if (trimmed.starts_with('{') || trimmed.starts_with('['))
                && let Ok(inner) = serde_json::from_str::<Value>(text)
            {
                collect_sensitive(&inner, None, &mut found);
            }
        }
        if found.is_empty() {
            return self.clone();
        }
        self.with_secrets(found)
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

    /// For texts shown one after another, joined by newlines (the content blocks of a
    /// result): the byte ranges of each that a secret or shape found in the joined text
    /// covers (a secret crossing a join, a value whose shape begins in the text before),
    /// so that each piece is hidden where the text is shown alone too. A redactor that
    /// cannot redact the joined text gives each text whole.
    pub(crate) fn crossing_spans(&self, parts: &[&str]) -> Vec<Vec<Span>> {
        let mut spans = vec![Vec::new(); parts.len()];
        if parts.len() < 2 {
            return spans;
        }
        let joined = parts.join("\n");
        let mut starts = Vec::with_capacity(parts.len());
        let mut at = 0;
        for part in parts {
            starts.push(at);
            at += part.len() + 1;
        }
        let hits = match self.check(joined.len()).and_then(|()| self.hits(&joined)) {
            Ok(hits) => hits,
            Err(_) => {
                return parts
                    .iter()
                    .map(|p| {
                        vec![Span {
                            range: 0..p.len(),
                            label: "secret".into(),
                        }]
                    })
                    .collect();
            }
        };
        for hit in hits {
            let first = starts.partition_point(|&s| s <= hit.start) - 1;
            let last = starts.partition_point(|&s| s < hit.end) - 1;
            for (i, span) in spans.iter_mut().enumerate().take(last + 1).skip(first) {
                let (start, end) = (starts[i], starts[i] + parts[i].len());
                let range = hit.start.max(start) - start..hit.end.min(end) - start;
                if !range.is_empty() {
                    span.push(Span {
                        range,
                        label: Arc::clone(&hit.name),
                    });
                }
            }
        }
        spans
    }

    /// `text` in one view, with `spans` hidden too (see [`Redactor::crossing_spans`]);
    /// spans past the end of `text` (a capped view's head) are cut to it.
    pub(crate) fn text_hiding(&self, text: &str, spans: &[Span], view: View) -> String {
        if spans.is_empty() {
            return self.text(text, view);
        }
        let hidden = || -> Result<String, RedactionFailed> {
            self.check(text.len())?;
            let extra = spans
                .iter()
                .filter(|s| s.range.start < text.len())
                .map(|s| {
                    let mut end = s.range.end.min(text.len());
                    while !text.is_char_boundary(end) {
                        end += 1;
                    }
                    Hit {
                        start: s.range.start,
                        end,
                        name: Arc::clone(&s.label),
                        longest: 0,
                    }
                })
                .collect();
            Ok(render(text, &absorb(self.hits(text)?, extra), view))
        };
        hidden().unwrap_or_else(|_| REDACTION_FAILED.to_string())
    }

    /// The byte ranges of `text` this redactor would hide (its known secrets, and the
    /// secret shapes: `Bearer X`, `token=X`, `--token X`, URL credentials), in order; the
    /// whole text when it cannot be redacted. A writer of files (`mcp add`, `mcp import`)
    /// checks with it that nothing it writes is a secret.
    pub fn secret_spans(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        match self.check(text.len()).and_then(|()| self.hits(text)) {
            Ok(hits) => hits.into_iter().map(|h| h.start..h.end).collect(),
            Err(_) => std::iter::once(0..text.len()).collect(),
        }
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
        Ok(render(text, &self.hits(text)?, view))
    }

    /// Where the secrets of `text` are: known values (at each place the longest one
    /// starting there), then shapes, which absorb any known value they overlap. Found
    /// once, rendered per view, so the five views cost one scan. Linear in the text and
    /// in the hits: a text holding a secret a million times costs a million hits, not a
    /// million squared.
    fn hits(&self, text: &str) -> Result<Vec<Hit>, RedactionFailed> {
        let mut found: Vec<Hit> = Vec::new();
        self.secrets.find(text, &mut found)?;
        if let Some(learned) = self.learned()? {
            learned.find(text, &mut found)?;
        }
        let hits = merged(found);
        let mut shapes: Vec<Hit> = Vec::new();
        let mut shape = |start: usize, end: usize, name: &str| {
            if start < end {
                shapes.push(Hit {
                    start,
                    end,
                    name: name.into(),
                    longest: 0,
                });
            }
        };
        // Each shape is tried only when its trigger characters occur at all.
        if text.contains('@') && text.contains("://") {
            for c in URL_CREDENTIALS.captures_iter(text) {
                if let (Some(all), Some(scheme)) = (c.get(0), c.get(1)) {
                    shape(scheme.end(), all.end() - 1, "url_credentials");
                }
            }
        }
        if text.contains(':') {
            for c in AUTHORIZATION_LINE.captures_iter(text) {
                let (name, value) = match (c.get(1), c.get(3), c.get(4), c.get(6)) {
                    (Some(n), Some(v), _, _) | (_, _, Some(n), Some(v)) => (n, v),
                    _ => continue,
                };
                shape(value.start(), value.end(), header_label(name.as_str()));
            }
        }
        if text.contains('"') {
            for c in JSON_FIELD.captures_iter(text) {
                if let (Some(name), Some(value)) = (c.get(1), c.get(3)) {
                    let label = sensitive_label(name.as_str()).unwrap_or("secret");
                    shape(value.start(), value.end(), label);
                }
            }
        }
        if text.contains('-') {
            for c in SPACED_OPTION.captures_iter(text) {
                let value = c.get(2).or_else(|| c.get(3)).or_else(|| c.get(4));
                if let (Some(name), Some(value)) = (c.get(1), value) {
                    let label = sensitive_label(name.as_str()).unwrap_or("secret");
                    shape(value.start(), value.end(), label);
                }
            }
        }
        if text.contains('=') {
            for c in SENSITIVE_ASSIGNMENT.captures_iter(text) {
                if let (Some(name), Some(value)) = (c.get(2), c.get(3))
                    && let Some(label) = assignment_label(name.as_str())
                {
                    shape(value.start(), value.end(), label);
                }
            }
        }
        Ok(absorb(hits, shapes))
    }

    /// `value` in one view; the string [`REDACTION_FAILED`] if it cannot be redacted.
    pub fn json(&self, value: &Value, view: View) -> Value {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.try_json(value, view)))
        {
            Ok(Ok(v)) => v,
            _ => Value::String(REDACTION_FAILED.into()),
        }
    }

    /// Whether every string and key of `value` can be redacted (none over
    /// [`MAX_REDACT_BYTES`], the redactor not poisoned).
    pub fn can_redact(&self, value: &Value) -> bool {
        fn fits(value: &Value) -> bool {
            match value {
                Value::String(s) => s.len() <= MAX_REDACT_BYTES,
                Value::Array(items) => items.iter().all(fits),
                Value::Object(map) => map
                    .iter()
                    .all(|(k, v)| k.len() <= MAX_REDACT_BYTES && fits(v)),
                _ => true,
            }
        }
        self.check(0).is_ok() && fits(value)
    }

    /// `value` in one view: strings redacted as text, sensitive fields replaced.
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
                    .map(|i| self.try_json(i, view))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => {
                let mut out = Map::with_capacity(map.len());
                // The next number of each redacted key already taken: a map of many keys
                // redacted alike costs one probe a key, not one per earlier twin.
                let mut twins: std::collections::HashMap<String, usize> =
                    std::collections::HashMap::new();
                for (key, v) in map {
                    let mut key_out = self.try_text(key, view)?;
                    // Keys redacted alike stay apart (none hides a neighbour).
                    if out.contains_key(&key_out) {
                        let next = twins.entry(key_out.clone()).or_insert(2);
                        let mut numbered = format!("{key_out}#{next}");
                        while out.contains_key(&numbered) {
                            *next += 1;
                            numbered = format!("{key_out}#{next}");
                        }
                        *next += 1;
                        key_out = numbered;
                    }
                    // A list or map under a sensitive key is opaque: it is replaced whole,
                    // under the key's fixed label (never a name made from the key).
                    let label = sensitive_label(key).filter(|_| !v.is_null());
                    let v_out = match label {
                        Some(_) if is_count(key, v) => v.clone(),
                        Some(label) => match view {
                            View::Event | View::Durable => serde_json::json!({
                                "redacted": true, "name": label, "source": "field"
                            }),
                            _ => {
                                let raw = match v {
                                    Value::String(s) => std::borrow::Cow::Borrowed(s.as_str()),
                                    other => std::borrow::Cow::Owned(other.to_string()),
                                };
                                Value::String(marker(view, label, &raw))
                            }
                        },
                        None => self.try_json(v, view)?,
                    };
                    out.insert(key_out, v_out);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    /// `value` in every view at once.
    ///
    /// # Errors
    /// [`RedactionFailed`] when any part cannot be redacted.
    pub fn try_json_views(&self, value: &Value) -> Result<Views<Value>, RedactionFailed> {
        Ok(Views {
            model: self.try_json(value, View::Model)?,
            operator: self.try_json(value, View::Operator)?,
            event: self.try_json(value, View::Event)?,
            durable: self.try_json(value, View::Durable)?,
            debug: self.try_json(value, View::Debug)?,
        })
    }

    /// Every view of `text`; `<redaction-failed>` in all of them if redaction fails.
    pub fn text_views(&self, text: &str) -> Views<String> {
        guarded(
            || {
                self.check(text.len())?;
                let hits = self.hits(text)?;
                Ok(Views::build(|v| render(text, &hits, v)))
            },
            || REDACTION_FAILED.to_string(),
        )
    }

    /// Every view of `value`; the string `<redaction-failed>` in all if redaction fails.
    pub fn json_views(&self, value: &Value) -> Views<Value> {
        guarded(
            || self.try_json_views(value),
            || Value::String(REDACTION_FAILED.into()),
        )
    }
}

/// What of one text a search of a longer, joined text found (see
/// [`Redactor::crossing_spans`]): a byte range and its label.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    range: std::ops::Range<usize>,
    label: Arc<str>,
}

/// A secret found in a text: its byte range and the name it is shown under. The value
/// is the text's own bytes at that range.
struct Hit {
    start: usize,
    end: usize,
    name: Arc<str>,
    /// Length of the longest secret in the hit (what names it).
    longest: usize,
}

#[cfg(test)]
const ALL_VIEWS: [View; 5] = [
    View::Model,
    View::Operator,
    View::Event,
    View::Durable,
    View::Debug,
];

/// Known-value hits (in order, none overlapping) merged with shape hits (in the order
/// the shapes were tried): every run of hits that overlap, with at least one shape in
/// it, becomes one hit spanning them all, named by the shape tried last. One sort and
/// one sweep.
fn absorb(known: Vec<Hit>, shapes: Vec<Hit>) -> Vec<Hit> {
    if shapes.is_empty() {
        return known;
    }
    // A shape's rank is its place in the order shapes were tried, above any known value.
    let mut all: Vec<(Hit, usize)> = known.into_iter().map(|h| (h, 0)).collect();
    all.extend(shapes.into_iter().enumerate().map(|(i, h)| (h, i + 1)));
    all.sort_by_key(|(h, _)| h.start);
    let mut merged: Vec<(Hit, usize)> = Vec::with_capacity(all.len());
    for (hit, rank) in all {
        match merged.last_mut() {
            Some((run, run_rank)) if hit.start < run.end => {
                run.end = run.end.max(hit.end);
                if rank > *run_rank {
                    (run.name, *run_rank) = (hit.name, rank);
                }
            }
            _ => merged.push((hit, rank)),
        }
    }
    merged.into_iter().map(|(h, _)| h).collect()
}

fn render(text: &str, hits: &[Hit], view: View) -> String {
    if hits.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + hits.len() * 16);
    let mut at = 0;
    for h in hits {
        out.push_str(&text[at..h.start]);
        out.push_str(&marker(view, &h.name, &text[h.start..h.end]));
        at = h.end;
    }
    out.push_str(&text[at..]);
    out
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

/// The label of a `key=value` name, when it is really sensitive: the regex also
/// catches `key`/`auth`/`sig`, which must be whole words of the name (`monkey=1` stays).
fn assignment_label(name: &str) -> Option<&'static str> {
    if let Some(label) = sensitive_label(name) {
        return Some(label);
    }
    const WORDS: &[&str] = &["key", "auth", "sig", "signature", "apikey", "pass"];
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find_map(|w| WORDS.iter().copied().find(|word| *word == w))
}

/// The label of a header-like line's name (`Authorization:`, `Cookie:`), from the
/// fixed names the pattern allows.
fn header_label(name: &str) -> &'static str {
    const NAMES: &[&str] = &[
        "proxy-authorization",
        "authorization",
        "x-api-key",
        "set-cookie",
        "cookie",
    ];
    let name = name.to_ascii_lowercase();
    NAMES
        .iter()
        .copied()
        .find(|n| *n == name)
        .unwrap_or("authorization")
}

/// Whether a map key under a sensitive key looks like a credential rather than a field
/// name: at least 8 characters with a digit in them, or more than 24.
fn looks_like_a_credential(key: &str) -> bool {
    let chars = key.chars().count();
    (chars >= 8 && key.chars().any(|c| c.is_ascii_digit())) || chars > 24
}

/// Every value under a sensitive key, named by the nearest sensitive key above it:
/// below such a key everything is a secret, whatever its own keys are called.
fn collect_sensitive(value: &Value, under: Option<&'static str>, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                // Below a sensitive key a key that looks like a credential is one too
                // (`{"api_keys": {"sk_live_4f9a2c": {}}}`); field names (`user`,
                // `password`) are not, or every such word of the result would go.
                if let Some(name) = under
                    && looks_like_a_credential(k)
                {
                    out.push((name.to_string(), k.clone()));
                }
                // A count under a sensitive name (`token_count: 42`) is no secret.
                if under.is_none() && is_count(k, v) {
                    continue;
                }
                collect_sensitive(v, under.or_else(|| sensitive_label(k)), out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_sensitive(v, under, out)),
        Value::String(s) => {
            if let Some(name) = under {
                out.push((name.to_string(), s.clone()));
            }
        }
        Value::Number(n) => {
            if let Some(name) = under {
                out.push((name.to_string(), n.to_string()));
            }
        }
        _ => {}
    }
}

/// Every string of `value`, keys included.
fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                collect_strings(v, out);
            }
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
}
