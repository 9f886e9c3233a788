//! Secrets known by their shape rather than their value: URL credentials, sensitive
//! query values and assignments, `Authorization:` lines, `--option value`, sensitive
//! JSON fields; and which names are sensitive (or only quantities).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::SECRET_OPTION_MARKERS;

pub(super) static URL_CREDENTIALS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#]+@").expect("valid regex"));
pub(super) static SENSITIVE_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)([?&;\s,]|^|--?|\b)([A-Za-z0-9_.\-]*(?:{markers}|auth|key|sig|signature)[A-Za-z0-9_.\-]*)=([^&\s#"',;]+)"#
    ))
    .expect("valid regex")
});
pub(super) static AUTHORIZATION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    // `Authorization: Bearer xyz` keeps the scheme and hides the credential; cookie
    // headers hide the rest of the line (their values are `;`-separated).
    Regex::new(
        r"(?i)\b((?:proxy-)?authorization|x-api-key)(\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?)(\S+)|\b(cookie|set-cookie)(\s*:\s*)([^\r\n]+)",
    )
    .expect("valid regex")
});
pub(super) static SPACED_OPTION: LazyLock<Regex> = LazyLock::new(|| {
    // `--token VALUE` (a space, not `=`): the value is the next word unless it is
    // another option, or a quoted string (`--token "a b"`).
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)(?:^|[\s"'(\[,])(--?[A-Za-z0-9_.\-]*(?:{markers})[A-Za-z0-9_.\-]*)[ \t]+(?:"([^"\n]+)"|'([^'\n]+)'|([^\s"'`;,)\]}}\-][^\s"'`;,)\]}}]*))"#
    ))
    .expect("valid regex")
});
pub(super) static JSON_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    let markers = sensitive_alternation();
    Regex::new(&format!(
        r#"(?i)"([A-Za-z0-9_.\-]*(?:{markers})[A-Za-z0-9_.\-]*)"(\s*:\s*)"((?:[^"\\]|\\.)*)""#
    ))
    .expect("valid regex")
});

pub(super) fn sensitive_alternation() -> String {
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
pub(super) const QUANTITY_WORDS: &[&str] = &[
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
pub(super) fn is_count(key: &str, value: &Value) -> bool {
    (value.is_number() || value.is_boolean()) && is_quantity_name(key)
}

/// Whether a sensitive name counts or measures (see [`QUANTITY_WORDS`]): its words are
/// split at `_`, `-`, `.`, spaces and lower-to-upper case changes.
pub(super) fn is_quantity_name(name: &str) -> bool {
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

/// The label of a `key=value` name, when it is really sensitive: the regex also
/// catches `key`/`auth`/`sig`, which must be whole words of the name (`monkey=1` stays).
pub(super) fn assignment_label(name: &str) -> Option<&'static str> {
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
pub(super) fn header_label(name: &str) -> &'static str {
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
pub(super) fn looks_like_a_credential(key: &str) -> bool {
    let chars = key.chars().count();
    (chars >= 8 && key.chars().any(|c| c.is_ascii_digit())) || chars > 24
}

/// Every value under a sensitive key, named by the nearest sensitive key above it:
/// below such a key everything is a secret, whatever its own keys are called.
pub(super) fn collect_sensitive(
    value: &Value,
    under: Option<&'static str>,
    out: &mut Vec<(&'static str, String)>,
) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                // Below a sensitive key a key that looks like a credential is one too
                // (`{"api_keys": {"sk_live_4f9a2c": {}}}`); field names (`user`,
                // `password`) are not, or every such word of the result would go.
                if let Some(name) = under
                    && looks_like_a_credential(k)
                {
                    out.push((name, k.clone()));
                }
                let label = under.or_else(|| sensitive_label(k));
                // A count under a sensitive name (`token_count: 42`) is no secret.
                if under.is_none() && label.is_some() && is_count(k, v) {
                    continue;
                }
                collect_sensitive(v, label, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_sensitive(v, under, out)),
        Value::String(s) => {
            if let Some(name) = under {
                out.push((name, s.clone()));
            }
        }
        Value::Number(n) => {
            if let Some(name) = under {
                out.push((name, n.to_string()));
            }
        }
        _ => {}
    }
}

/// Every string of `value`, keys included.
pub(super) fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
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
