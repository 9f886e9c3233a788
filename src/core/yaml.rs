//! The one place YAML is parsed. Swapping the YAML crate touches only this file.
//!
//! Callers get typed values or a [`YamlError`] that names the field path and the line,
//! so load errors can say exactly where the fix goes.

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
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_yaml::from_str(text).map_err(|err| {
        let line = err.location().map(|l| l.line());
        split_message(&err.to_string(), line)
    })
}

/// serde_yaml renders errors as `path: message at line L column C`; take them apart.
fn split_message(rendered: &str, line: Option<usize>) -> YamlError {
    let mut message = rendered.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    let mut field = None;
    if let Some((path, rest)) = message.split_once(": ") {
        let looks_like_path = !path.is_empty()
            && !path.contains(' ')
            && path
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '-'));
        if looks_like_path {
            field = Some(path.to_string());
            message = rest.to_string();
        }
    }
    if let Some(name) = unknown_field_name(&message) {
        field = Some(match field {
            Some(parent) => format!("{parent}.{name}"),
            None => name,
        });
    }
    if field.is_none()
        && let Some(name) = missing_field_name(&message)
    {
        field = Some(name);
    }
    YamlError {
        field,
        line,
        message,
    }
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
    fn unknown_nested_field_is_named_with_its_parent() {
        let err = parse::<Doc>("tools:\n  include: []\n  bogus: 1\n").unwrap_err();
        assert_eq!(err.field.as_deref(), Some("tools.bogus"));
        assert_eq!(err.line, Some(3));
    }

    #[test]
    fn empty_document_is_all_defaults() {
        let doc = parse::<Doc>("  \n").unwrap();
        assert!(doc.enabled.is_none());
    }
}
