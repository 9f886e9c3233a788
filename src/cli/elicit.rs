//! The CLI's elicitor: a server's request for input, filled in on the terminal field by
//! field (the same reader as the shell and the approval prompts), then confirmed.
//!
//! Each field is asked with its title, description, type and default; an answer is
//! checked against the field (a number within its bounds, one of the offered choices, a
//! string of the allowed length) and asked again when it does not fit, a required field
//! until it is given. `!decline` or `!cancel` at any field stops; a confirmation shows
//! the values (a sensitive field's as `****`) before anything is sent. Without a
//! terminal every request is declined. The server's words are escaped before a
//! terminal shows them, and cut.
//!
//! Adversary: the server, whose schema and message are text it chose; bounds: 32 fields
//! asked, 16 choices shown each, 200 characters of any title or description, 4,096 of
//! an answer, 5 tries a field.

use std::io::IsTerminal;
use std::sync::Arc;

use demiurge_mcp::authority::{ElicitationAnswer, ElicitationRequest, Elicitor};
use demiurge_mcp::result::cap_chars;
use futures::future::BoxFuture;
use serde_json::{Map, Value};

use super::approver::{Conversation, Terminal};
use super::t;

/// Fields asked; a request with more is asked for these and the rest keep defaults.
const MAX_FIELDS: usize = 32;
/// Choices shown (and accepted) for one field.
const MAX_CHOICES: usize = 16;
/// Characters of one answer.
const ANSWER_CHARS: usize = 4096;
/// Tries for one field before the request is declined.
const TRIES: usize = 5;

/// What a field holds.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Text {
        min: u64,
        max: u64,
    },
    Integer {
        min: f64,
        max: f64,
    },
    Number {
        min: f64,
        max: f64,
    },
    Boolean,
    /// One of these values, each with the label shown.
    Choice(Vec<(Value, String)>),
    /// Any of these values (an array answer).
    Many(Vec<(Value, String)>),
}

/// One field of the requested form.
#[derive(Debug, Clone, PartialEq)]
struct Field {
    name: String,
    title: Option<String>,
    description: Option<String>,
    kind: Kind,
    required: bool,
    default: Option<Value>,
    /// A secret: not echoed while typed, `****` in the confirmation.
    hidden: bool,
}

/// Whether a field holds a secret: by its name, a word of its title or description,
/// `format: password` or `writeOnly`.
fn is_hidden(name: &str, prop: &Value) -> bool {
    let sensitive_words = |text: &str| {
        text.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-')
            .any(demiurge_mcp::redact::is_sensitive_field)
    };
    demiurge_mcp::redact::is_sensitive_field(name)
        || ["title", "description"]
            .iter()
            .filter_map(|k| prop.get(*k).and_then(Value::as_str))
            .any(|text| sensitive_words(text) || text.to_lowercase().contains("password"))
        || prop.get("format").and_then(Value::as_str) == Some("password")
        || prop.get("writeOnly").and_then(Value::as_bool) == Some(true)
}

/// Choices from `enum` (with `enumNames`) or from `oneOf`/`anyOf` of `{const, title}`.
fn choices(schema: &Value) -> Option<Vec<(Value, String)>> {
    let label = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    if let Some(Value::Array(members)) = schema.get("enum") {
        let names = schema.get("enumNames").and_then(Value::as_array);
        return Some(
            members
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let shown = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| label(v), str::to_string);
                    (v.clone(), shown)
                })
                .collect(),
        );
    }
    let titled = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        titled
            .iter()
            .filter_map(|option| {
                let value = option.get("const")?.clone();
                let shown = option
                    .get("title")
                    .and_then(Value::as_str)
                    .map_or_else(|| label(&value), str::to_string);
                Some((value, shown))
            })
            .collect(),
    )
}

/// The fields of `schema`: the required ones first, each group in name order (the
/// order a JSON object keeps here).
fn fields(schema: &Value) -> Vec<Field> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let text = |prop: &Value, key: &str| prop.get(key).and_then(Value::as_str).map(str::to_string);
    let bound =
        |prop: &Value, key: &str, or: f64| prop.get(key).and_then(Value::as_f64).unwrap_or(or);
    let mut form = properties
        .iter()
        .map(|(name, prop)| {
            let kind = match (prop.get("type").and_then(Value::as_str), choices(prop)) {
                (Some("array"), _) => {
                    Kind::Many(prop.get("items").and_then(choices).unwrap_or_default())
                }
                (_, Some(options)) => Kind::Choice(options),
                (Some("integer"), None) => Kind::Integer {
                    min: bound(prop, "minimum", f64::MIN),
                    max: bound(prop, "maximum", f64::MAX),
                },
                (Some("number"), None) => Kind::Number {
                    min: bound(prop, "minimum", f64::MIN),
                    max: bound(prop, "maximum", f64::MAX),
                },
                (Some("boolean"), None) => Kind::Boolean,
                _ => Kind::Text {
                    min: prop.get("minLength").and_then(Value::as_u64).unwrap_or(0),
                    max: prop
                        .get("maxLength")
                        .and_then(Value::as_u64)
                        .unwrap_or(u64::MAX),
                },
            };
            Field {
                name: name.clone(),
                title: text(prop, "title"),
                description: text(prop, "description"),
                kind,
                required: required.contains(&name.as_str()),
                default: prop.get("default").cloned(),
                hidden: is_hidden(name, prop),
            }
        })
        .collect::<Vec<_>>();
    form.sort_by_key(|field| !field.required);
    form
}

/// What one answer line means for `field`: a value, nothing (left out), or why not.
fn parse(field: &Field, line: &str) -> Result<Option<Value>, String> {
    if line.is_empty() {
        return match (&field.default, field.required) {
            (Some(default), _) => Ok(Some(default.clone())),
            (None, true) => Err("this field is required".into()),
            (None, false) => Ok(None),
        };
    }
    let pick = |options: &[(Value, String)], word: &str| -> Option<Value> {
        let shown = &options[..options.len().min(MAX_CHOICES)];
        match word.parse::<usize>() {
            Ok(n) if (1..=shown.len()).contains(&n) => Some(shown[n - 1].0.clone()),
            _ => shown
                .iter()
                .find(|(value, label)| {
                    value.as_str() == Some(word)
                        || label == word
                        || serde_json::from_str::<Value>(word).is_ok_and(|w| &w == value)
                })
                .map(|(value, _)| value.clone()),
        }
    };
    match &field.kind {
        Kind::Text { min, max } => {
            let len = line.chars().count() as u64;
            if len < *min || len > *max {
                return Err(format!("give between {min} and {max} characters"));
            }
            Ok(Some(Value::String(line.to_string())))
        }
        Kind::Integer { min, max } => match line.parse::<i64>() {
            Ok(n) if (n as f64) >= *min && (n as f64) <= *max => Ok(Some(Value::from(n))),
            Ok(_) => Err("that number is outside the allowed range".into()),
            Err(_) => Err("give a whole number".into()),
        },
        Kind::Number { min, max } => match line.parse::<f64>() {
            Ok(n) if n.is_finite() && n >= *min && n <= *max => {
                Ok(serde_json::Number::from_f64(n).map(Value::Number))
            }
            Ok(_) => Err("that number is outside the allowed range".into()),
            Err(_) => Err("give a number".into()),
        },
        Kind::Boolean => match line.to_lowercase().as_str() {
            "y" | "yes" | "true" => Ok(Some(Value::Bool(true))),
            "n" | "no" | "false" => Ok(Some(Value::Bool(false))),
            _ => Err("answer y or n".into()),
        },
        Kind::Choice(options) => pick(options, line)
            .map(Some)
            .ok_or_else(|| "give the number or the value of one of the choices".into()),
        Kind::Many(options) => line
            .split(',')
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(|w| pick(options, w).ok_or(()))
            .collect::<Result<Vec<_>, ()>>()
            .map(|picked| Some(Value::Array(picked)))
            .map_err(|()| "give the numbers or values of the choices, separated by commas".into()),
    }
}

/// The question for `field`: its name and title, what it takes, its default.
fn question(field: &Field) -> String {
    let mut text = format!("  {}", t(&cap_chars(&field.name, 64)));
    if let Some(title) = &field.title {
        text.push_str(&format!(" ({})", t(&cap_chars(title, 200))));
    }
    if field.required {
        text.push_str(" [required]");
    }
    if let Some(description) = &field.description {
        text.push_str(&format!("\n    {}", t(&cap_chars(description, 200))));
    }
    let list = |options: &[(Value, String)]| {
        let mut shown: Vec<String> = options
            .iter()
            .take(MAX_CHOICES)
            .enumerate()
            .map(|(i, (_, label))| format!("\n    {}. {}", i + 1, t(&cap_chars(label, 60))))
            .collect();
        if options.len() > MAX_CHOICES {
            shown.push(format!(
                "\n    ({} more not offered here)",
                options.len() - MAX_CHOICES
            ));
        }
        shown.concat()
    };
    let hint = match &field.kind {
        Kind::Text { .. } => "text".to_string(),
        Kind::Integer { .. } => "a whole number".into(),
        Kind::Number { .. } => "a number".into(),
        Kind::Boolean => "y or n".into(),
        Kind::Choice(options) => format!("one of:{}", list(options)),
        Kind::Many(options) => format!("any of, separated by commas:{}", list(options)),
    };
    text.push_str(&format!("\n    {hint}"));
    if let Some(default) = &field.default {
        let shown = default
            .as_str()
            .map_or_else(|| default.to_string(), str::to_string);
        text.push_str(&format!(" (Enter for {})", t(&cap_chars(&shown, 200))));
    }
    text.push_str("\n  > ");
    text
}

/// How the person ended a form.
enum Ended {
    Answered(Map<String, Value>),
    Stopped(ElicitationAnswer),
}

/// Asks every field of `form` on the held terminal.
async fn fill(conversation: &mut Conversation, form: &[Field]) -> Ended {
    let mut answer = Map::new();
    for field in form.iter().take(MAX_FIELDS) {
        let mut tries = 0;
        let value = loop {
            let asked = question(field);
            let Some(line) = conversation.ask(&asked, ANSWER_CHARS, field.hidden).await else {
                return Ended::Stopped(ElicitationAnswer::Decline);
            };
            match line.as_str() {
                "!decline" => return Ended::Stopped(ElicitationAnswer::Decline),
                "!cancel" => return Ended::Stopped(ElicitationAnswer::Cancel),
                _ => {}
            }
            match parse(field, &line) {
                Ok(value) => break value,
                Err(why) => {
                    tries += 1;
                    if tries == TRIES {
                        eprintln!(
                            "  declined: no answer fit `{}`",
                            t(&cap_chars(&field.name, 64))
                        );
                        return Ended::Stopped(ElicitationAnswer::Decline);
                    }
                    eprintln!("  {why}; try again (or !decline)");
                }
            }
        };
        if let Some(value) = value {
            answer.insert(field.name.clone(), value);
        }
    }
    Ended::Answered(answer)
}

/// The values as the confirmation shows them.
fn summary(answer: &Map<String, Value>, form: &[Field]) -> String {
    let mut text = String::from("  to send:\n");
    for (name, value) in answer {
        let hidden = form.iter().any(|f| &f.name == name && f.hidden);
        let shown = if hidden || demiurge_mcp::redact::is_sensitive_field(name) {
            "****".to_string()
        } else {
            let plain = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_string);
            cap_chars(&plain, 200)
        };
        text.push_str(&format!("    {}: {}\n", t(&cap_chars(name, 64)), t(&shown)));
    }
    if answer.is_empty() {
        text.push_str("    (nothing)\n");
    }
    text
}

pub(crate) struct TerminalElicitor {
    terminal: Arc<Terminal>,
}

impl TerminalElicitor {
    pub(crate) fn new(terminal: Arc<Terminal>) -> Self {
        TerminalElicitor { terminal }
    }
}

impl Elicitor for TerminalElicitor {
    fn elicit(&self, request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        let server = t(&request.server).into_owned();
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            return Box::pin(async move {
                eprintln!("  declined: server `{server}` asked for input and there is no terminal");
                ElicitationAnswer::Decline
            });
        }
        let form = fields(&request.schema);
        let held = self
            .terminal
            .converse(format!("the input request of `{server}`"));
        let message = t(&cap_chars(&request.message, 2000)).into_owned();
        Box::pin(async move {
            let mut conversation = held.await;
            eprintln!("MCP server `{server}` asks: {message}");
            if form.len() > MAX_FIELDS {
                eprintln!(
                    "  ({} fields; the first {MAX_FIELDS} are asked, the rest keep their defaults)",
                    form.len()
                );
            }
            eprintln!("  (answer each field; !decline or !cancel stops)");
            let answer = match fill(&mut conversation, &form).await {
                Ended::Answered(answer) => answer,
                Ended::Stopped(stopped) => {
                    conversation.finish();
                    return stopped;
                }
            };
            let confirm = format!(
                "{}  send? [y]es / [N]o (decline) / [c]ancel: ",
                summary(&answer, &form)
            );
            let line = conversation.ask(&confirm, 16, false).await;
            conversation.finish();
            match line.as_deref().map(str::to_lowercase).as_deref() {
                Some("y" | "yes") => ElicitationAnswer::Accept(answer),
                Some("c" | "cancel") => ElicitationAnswer::Cancel,
                _ => ElicitationAnswer::Decline,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn form() -> Vec<Field> {
        fields(&json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Your name", "minLength": 2},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ratio": {"type": "number"},
                "ok": {"type": "boolean", "default": true},
                "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"]},
                "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
                "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}
            },
            "required": ["name", "color"]
        }))
    }

    #[test]
    fn answers_are_checked_against_their_field() {
        let form = form();
        let by = |name: &str| form.iter().find(|f| f.name == name).unwrap();
        assert_eq!(parse(by("name"), "Ada").unwrap(), Some(json!("Ada")));
        assert!(parse(by("name"), "A").is_err(), "too short");
        assert!(parse(by("name"), "").is_err(), "required without a default");
        assert_eq!(parse(by("age"), "42").unwrap(), Some(json!(42)));
        for bad in ["-1", "151", "4.5", "many"] {
            assert!(parse(by("age"), bad).is_err(), "{bad}");
        }
        assert_eq!(parse(by("age"), "").unwrap(), None, "optional, left out");
        assert_eq!(parse(by("ratio"), "0.5").unwrap(), Some(json!(0.5)));
        assert!(parse(by("ratio"), "NaN").is_err() && parse(by("ratio"), "inf").is_err());
        assert_eq!(
            parse(by("ok"), "").unwrap(),
            Some(json!(true)),
            "the default"
        );
        assert_eq!(parse(by("ok"), "n").unwrap(), Some(json!(false)));
        assert!(parse(by("ok"), "maybe").is_err());
        assert_eq!(parse(by("color"), "2").unwrap(), Some(json!("green")));
        assert_eq!(parse(by("color"), "red").unwrap(), Some(json!("red")));
        assert_eq!(
            parse(by("color"), "Red").unwrap(),
            Some(json!("red")),
            "by label"
        );
        assert!(parse(by("color"), "3").is_err() && parse(by("color"), "blue").is_err());
        assert_eq!(parse(by("size"), "Large").unwrap(), Some(json!("l")));
        assert_eq!(parse(by("tags"), "1, c").unwrap(), Some(json!(["a", "c"])));
        assert!(parse(by("tags"), "a, z").is_err());
    }

    #[test]
    fn questions_escape_the_servers_words_and_summaries_hide_sensitive_fields() {
        let form = fields(&json!({
            "properties": {"x\u{1b}[2J": {"type": "string", "title": "t\nforged: yes"}}
        }));
        let asked = question(&form[0]);
        assert!(
            !asked.contains('\u{1b}') && !asked.contains("\nforged"),
            "{asked}"
        );
        let mut answer = Map::new();
        answer.insert("api_token".into(), json!("typed-secret"));
        answer.insert("city".into(), json!("Lyon"));
        let form = fields(&json!({"properties": {
            "p": {"type": "string", "title": "GitHub token"},
            "q": {"type": "string", "format": "password"},
            "r": {"type": "string", "writeOnly": true},
            "city": {"type": "string", "description": "where you live"}
        }}));
        for name in ["p", "q", "r"] {
            answer.insert(name.into(), json!("typed-secret"));
        }
        let shown = summary(&answer, &form);
        for name in ["api_token", "p", "q", "r"] {
            assert!(shown.contains(&format!("{name}: ****")), "{name}: {shown}");
        }
        assert!(shown.contains("city: Lyon"), "{shown}");
        assert!(!shown.contains("typed-secret"), "{shown}");
    }
}
