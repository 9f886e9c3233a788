//! The one place YAML is parsed. Swapping the YAML crate touches only this file.
//!
//! Callers get typed values or a [`YamlError`] that names the field path and the line,
//! so load errors can say exactly where the fix goes. Its message never repeats what the
//! file says: the YAML crate quotes the offending scalar (`invalid type: string "..."`),
//! which may be a secret or, for a file that is not YAML at all, anything.
//!
//! Adversary: a core author (threat model 1). Bounds: the caller caps the size; nesting
//! is estimated by [`check_depth`] in one pass before the parser sees the text, because
//! the parser's own recursion limit is reached only after it has built every event (a
//! hundred thousand levels took the better part of a second, and a turn parsed twice).

use serde::de::DeserializeOwned;

/// A YAML document that could not be read into the expected shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// Dotted path of the offending field (`tools.include`), when YAML tells it.
    pub field: Option<String>,
    /// 1-based line of the problem, when YAML tells it.
    pub line: Option<usize>,
    /// What is wrong, without the path and location (they are in the fields above).
    pub message: String,
}

/// Parses `text` into `T`.
///
/// An empty document is read as an empty mapping, so an empty file means "all defaults"
/// rather than a confusing type error.
///
/// # Errors
/// Returns a [`YamlError`] for syntax errors, wrong types, unknown or missing fields.
pub fn parse<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    check_depth(text)?;
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_yaml::from_str(text).map_err(|err| {
        let line = err.location().map(|l| l.line());
        split_message(&err.to_string(), line)
    })
}

/// Deepest flow nesting (`[` and `{`) accepted; declarations need three or four.
pub const MAX_FLOW_DEPTH: usize = 64;

/// Most indentation plus block indicators (`- `, `? `) on one line; block nesting cannot
/// go deeper than that.
pub const MAX_BLOCK_DEPTH: usize = 512;

/// Refuses text nested deeper than [`MAX_FLOW_DEPTH`] or [`MAX_BLOCK_DEPTH`], without
/// parsing it. The estimate errs high: brackets inside quoted strings count too (a real
/// declaration never has dozens of unclosed ones), so no quoting trick can hide depth.
///
/// # Errors
/// A [`YamlError`] naming the line where the limit was passed.
pub fn check_depth(text: &str) -> Result<(), YamlError> {
    let mut flow = 0usize;
    for (index, line) in text.lines().enumerate() {
        let too_deep = |what: &str, limit: usize| YamlError {
            field: None,
            line: Some(index + 1),
            message: format!(
                "the document nests {what} deeper than {limit} levels; a declaration needs a few"
            ),
        };
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        let mut block = indent;
        let mut rest = line.trim_start_matches([' ', '\t']);
        while let Some(after) = rest
            .strip_prefix("- ")
            .or_else(|| rest.strip_prefix("? "))
            .or_else(|| rest.strip_prefix(": "))
        {
            block += 2;
            rest = after.trim_start_matches(' ');
        }
        if block > MAX_BLOCK_DEPTH {
            return Err(too_deep("blocks", MAX_BLOCK_DEPTH));
        }
        for b in line.bytes() {
            match b {
                b'[' | b'{' => {
                    flow += 1;
                    if flow > MAX_FLOW_DEPTH {
                        return Err(too_deep("brackets", MAX_FLOW_DEPTH));
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// serde_yaml renders errors as `path: message at line L column C`; take them apart,
/// and keep nothing of the message that came from the file (see [`without_values`]).
fn split_message(rendered: &str, line: Option<usize>) -> YamlError {
    let mut message = rendered.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    let mut field = None;
    // The path is whatever precedes serde's own message; a key with spaces or
    // punctuation in the path must not be mistaken for the message.
    let starts = [
        "invalid type: ",
        "invalid value: ",
        "unknown variant",
        "unknown field",
        "missing field",
        "invalid length",
        "duplicate field",
        "a name is written twice",
        "recursion limit",
    ];
    let at = starts.iter().filter_map(|p| message.find(p)).min();
    if let Some(at) = at.filter(|&at| at >= 2 && message[..at].ends_with(": ")) {
        field = Some(message[..at - 2].to_string());
        message = message[at..].to_string();
    }
    if unknown_field_name(&message).is_some() {
        // The unknown key is the file's own text: never repeated, only located.
        field = Some(match field {
            Some(parent) => format!("{parent}.<key>"),
            None => "<key>".into(),
        });
    }
    if field.is_none()
        && let Some(name) = missing_field_name(&message)
    {
        field = Some(name);
    }
    let field = field.map(|path| {
        path.split('.')
            .map(|part| crate::text::plain_name(part, "<key>"))
            .collect::<Vec<_>>()
            .join(".")
    });
    YamlError {
        field,
        line,
        message: without_values(&message),
    }
}

/// A serde message with every value it quotes from the file removed. serde quotes what
/// it found before `, expected ...` (`invalid type: string "x"`, `unknown variant `x``,
/// `unknown field `x``) and only our own vocabulary after it, so the found part is
/// rewritten to the kind of thing found and the expected part kept.
fn without_values(message: &str) -> String {
    // serde appends `, expected ...` last; a quoted value may itself contain the words.
    let (found, expected) = match message.rfind(", expected") {
        Some(at) => (&message[..at], &message[at..]),
        None => (message, ""),
    };
    let found = if let Some(rest) = found.strip_prefix("invalid type: ") {
        let kind = rest.split([' ', '`', '"']).next().unwrap_or("value");
        let kind = match kind {
            "string" => "a string",
            "integer" => "an integer",
            "floating" => "a number",
            "boolean" => "a boolean",
            "map" => "a mapping",
            "sequence" => "a list",
            "unit" | "null" => "nothing",
            "char" => "a character",
            _ => "another kind of value",
        };
        format!("invalid type: found {kind}")
    } else if found.starts_with("invalid value") {
        "invalid value".to_string()
    } else if found.starts_with("unknown variant") {
        "unknown value".to_string()
    } else if found.starts_with("invalid length") {
        "wrong number of items".to_string()
    } else if let Some(name) = unknown_field_name(found) {
        return match closest(&name, expected) {
            Some(known) => format!("unknown field; did you mean `{known}`?"),
            None => format!("unknown field{expected}"),
        };
    } else if let Some(name) = missing_field_name(found) {
        format!(
            "missing field `{}`",
            crate::text::plain_name(&name, "<key>")
        )
    } else if found.starts_with("duplicate field") {
        "a field is written twice".to_string()
    } else {
        // Parser messages ("did not find expected key", "found character that cannot
        // start any token") name positions, not text; anything quoted goes anyway.
        let mut out = String::new();
        let mut quoted = None;
        for c in found.chars() {
            match (quoted, c) {
                (None, '`' | '"' | '\'') => quoted = Some(c),
                (Some(q), c) if c == q => {
                    quoted = None;
                    out.push_str("...");
                }
                (Some(_), _) => {}
                (None, c) => out.push(c),
            }
        }
        out
    };
    format!("{found}{expected}")
}

/// The field of `expected` (serde's "`a`, `b` or `c`" list) within two edits of `name`.
fn closest<'a>(name: &str, expected: &'a str) -> Option<&'a str> {
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (edits(name, known), known))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, known)| known)
}

/// Levenshtein distance, for "did you mean"; names are short.
pub(crate) fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

fn unknown_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest.split('`').next()?.to_string())
}

fn missing_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        include: Vec<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        #[serde(default)]
        enabled: Option<bool>,
        #[serde(default)]
        tools: Option<Inner>,
    }

    #[test]
    fn wrong_type_names_field_and_line() {
        let err = parse::<Doc>("\nenabled: maybe\n").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("enabled"));
        assert_eq!(err.line, Some(2));
        assert!(err.message.contains("expected a boolean"), "{err:?}");
    }

    #[test]
    fn unknown_nested_field_is_located_with_its_parent() {
        let err = parse::<Doc>("tools:\n  include: []\n  bogus: 1\n").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tools.<key>"));
        assert_eq!(err.line, Some(3));
        assert_eq!(err.message, "unknown field, expected `include`");
        let err = parse::<Doc>("tools:\n  includ: []\n").unwrap_err();
        assert_eq!(err.message, "unknown field; did you mean `include`?");
    }

    #[test]
    fn messages_never_repeat_what_the_file_says() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Env {
            env: Option<std::collections::BTreeMap<String, String>>,
            mode: Option<Mode>,
        }
        #[derive(Debug, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[allow(dead_code)]
        enum Mode {
            Fast,
        }
        for (text, field) in [
            ("env: \"API_TOKEN=sk-canary-1\"\n", Some("env")),
            ("env: 123456789\n", Some("env")),
            ("env:\n  A: [sk-canary-1]\n", Some("env.A")),
            ("mode: sk-canary-1\n", Some("mode")),
            ("sk-canary-1: x\n", Some("<key>")),
            ("env:\n  \"sk canary 1\": [1]\n", Some("env.<key>")),
            ("env: {a: \"sk-canary-1\"\n", None),
            ("\"sk-canary-1\n", None),
            ("env: \"x, expected sk-canary-1\"\n", Some("env")),
            ("mode: \"y, expected sk-canary-1\"\n", Some("mode")),
        ] {
            let err = parse::<Env>(text).unwrap_err();
            let shown = format!("{err:?}");
            assert!(!shown.contains("canary"), "{text:?} leaks in {shown}");
            assert_eq!(err.field.as_deref(), field, "{text:?}: {shown}");
        }
        let err = parse::<Env>("env: true\n").unwrap_err();
        assert_eq!(err.message, "invalid type: found a boolean, expected a map");
        let err = parse::<Env>("mode: slow\n").unwrap_err();
        assert_eq!(err.message, "unknown value, expected `fast`");
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        for text in [
            "[".repeat(100_000),
            "{a: ".repeat(100_000),
            format!("x: \"{}\"", "[".repeat(100)),
            "- ".repeat(100_000) + "x",
            format!("{}x: 1", " ".repeat(600)),
        ] {
            let started = std::time::Instant::now();
            let err = parse::<serde_json::Value>(&text).unwrap_err();
            assert!(err.message.contains("deeper than"), "{}", err.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(1));
        }
        let fine = "args: [\"[a-z]+\", {k: [1, [2]]}]\nenv:\n  - - x\n";
        assert!(parse::<serde_json::Value>(fine).is_ok());
    }

    #[test]
    fn empty_document_is_all_defaults() {
        let doc = parse::<Doc>("  \n").unwrap();
        assert!(doc.enabled.is_none());
    }
}
