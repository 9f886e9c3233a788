//! A text or a JSON value in one view: the spans of known and shaped secrets found,
//! merged, and replaced by each view's marker; fail closed past the bounds.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::known::{Hit, Span, merged};
use super::shapes::*;
use super::{MAX_REDACT_BYTES, REDACTION_FAILED, RedactionFailed, Redactor, View, Views, marker};

impl Redactor {
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
    pub(super) fn hits(&self, text: &str) -> Result<Vec<Hit>, RedactionFailed> {
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
        // Each shape is tried only when its trigger characters occur at all (each
        // looked for with the vectorized search: most strings of a result have none).
        let has = |byte: u8| memchr::memchr(byte, text.as_bytes()).is_some();
        if has(b'@') && memchr::memmem::find(text.as_bytes(), b"://").is_some() {
            for c in URL_CREDENTIALS.captures_iter(text) {
                if let (Some(all), Some(scheme)) = (c.get(0), c.get(1)) {
                    shape(scheme.end(), all.end() - 1, "url_credentials");
                }
            }
        }
        if has(b':') {
            for c in AUTHORIZATION_LINE.captures_iter(text) {
                let (name, value) = match (c.get(1), c.get(3), c.get(4), c.get(6)) {
                    (Some(n), Some(v), _, _) | (_, _, Some(n), Some(v)) => (n, v),
                    _ => continue,
                };
                shape(value.start(), value.end(), header_label(name.as_str()));
            }
        }
        if has(b'"') {
            for c in JSON_FIELD.captures_iter(text) {
                if let (Some(name), Some(value)) = (c.get(1), c.get(3)) {
                    let label = sensitive_label(name.as_str()).unwrap_or("secret");
                    shape(value.start(), value.end(), label);
                }
            }
        }
        if option_start(text) {
            for c in SPACED_OPTION.captures_iter(text) {
                let value = c.get(2).or_else(|| c.get(3)).or_else(|| c.get(4));
                if let (Some(name), Some(value)) = (c.get(1), value) {
                    let label = sensitive_label(name.as_str()).unwrap_or("secret");
                    shape(value.start(), value.end(), label);
                }
            }
        }
        if has(b'=') {
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

    /// `value` in one view, as [`Redactor::json`], but taken: when nothing in it is
    /// redacted (the common case of a tool's schema), it comes back as it went in,
    /// not rebuilt string by string.
    pub fn json_owned(&self, value: Value, view: View) -> Value {
        let unchanged =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.unchanged(&value)));
        match unchanged {
            Ok(Ok(true)) => value,
            _ => self.json(&value, view),
        }
    }

    /// Whether [`Redactor::try_json`] gives `value` back as it is in every view: no
    /// string or key holds a secret or a shape, no key is sensitive. It scans what
    /// redacting scans but builds nothing.
    fn unchanged(&self, value: &Value) -> Result<bool, RedactionFailed> {
        let clean = |text: &str| -> Result<bool, RedactionFailed> {
            self.check(text.len())?;
            Ok(self.hits(text)?.is_empty())
        };
        self.check(0)?;
        Ok(match value {
            Value::String(s) => clean(s)?,
            Value::Array(items) => {
                for item in items {
                    if !self.unchanged(item)? {
                        return Ok(false);
                    }
                }
                true
            }
            Value::Object(map) => {
                for (key, v) in map {
                    if sensitive_label(key).is_some() || !clean(key)? || !self.unchanged(v)? {
                        return Ok(false);
                    }
                }
                true
            }
            _ => true,
        })
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

#[cfg(test)]
pub(super) const ALL_VIEWS: [View; 5] = [
    View::Model,
    View::Operator,
    View::Event,
    View::Durable,
    View::Debug,
];

/// Whether `text` has a `-` where [`SPACED_OPTION`] may begin: first, or after a space,
/// a quote, a bracket or a comma (or after any non-ASCII byte, the end of a Unicode
/// space); `record-7-x` has none, so its regex is not run.
fn option_start(text: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memchr_iter(b'-', bytes).any(|at| {
        at == 0 || {
            let before = bytes[at - 1];
            !before.is_ascii() || before.is_ascii_whitespace() || b"\"'([,\x0b".contains(&before)
        }
    })
}

/// Known-value hits (in order, none overlapping) merged with shape hits (in the order
/// the shapes were tried): every run of hits that overlap, with at least one shape in
/// it, becomes one hit spanning them all, named by the shape tried last. One sort and
/// one sweep.
pub(super) fn absorb(known: Vec<Hit>, shapes: Vec<Hit>) -> Vec<Hit> {
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

pub(super) fn render(text: &str, hits: &[Hit], view: View) -> String {
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
pub(super) fn guarded<T>(
    f: impl FnOnce() -> Result<Views<T>, RedactionFailed>,
    failed: impl Fn() -> T,
) -> Views<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        _ => Views::build(|_| failed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cheap check before the `--token value` pattern never skips a text the
    /// pattern would match: every text over an alphabet of the characters that matter
    /// (spaces of both kinds, line ends, quotes, brackets, dashes, a marker's letters),
    /// up to five characters around `--token x`.
    #[test]
    fn the_option_check_never_skips_a_match() {
        let alphabet = [
            " ", "\t", "\n", "\r", "\x0b", "\x0c", "\u{85}", "\u{a0}", "\u{3000}", "\"", "'", "(",
            "[", ",", "-", "k", "1", ")", "=",
        ];
        let mut tried = 0;
        let mut matched = 0;
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    for text in [
                        format!("{a}{b}--token x{c}"),
                        format!("{a}{b}-token{c} x"),
                        format!("x{a}-{b}token {c}y"),
                        format!("{a}{b}{c}-password 'q r'"),
                    ] {
                        tried += 1;
                        if SPACED_OPTION.is_match(&text) {
                            matched += 1;
                            assert!(option_start(&text), "{text:?}");
                        }
                    }
                }
            }
        }
        // Both kinds are among them: texts the pattern takes, and texts it does not.
        assert!(matched > 1000 && matched < tried, "{matched} of {tried}");
        assert!(!option_start("record-7-x was signed with tok-0001"));
        assert!(option_start("-x") && option_start("a\u{2003}-x") && option_start("(-x"));
    }
}
