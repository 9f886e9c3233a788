//! A declaration written from `mcp add`'s arguments: which values stay literal and which
//! become `${NAME}` references, the endpoint, env and header entries.

use demiurge_mcp::core::{is_env_name, is_header_name};

use crate::cli::t;

/// What `mcp add` is asked to declare.
pub(crate) struct Addition<'a> {
    pub name: &'a str,
    pub url: Option<&'a str>,
    pub env: &'a [String],
    pub headers: &'a [String],
    pub command: &'a [String],
}

/// A declaration to write, and the host variables it references.
pub(crate) struct Declared {
    pub yaml: String,
    /// Variables the host must set (a literal became a reference to them).
    pub variables: Vec<String>,
    /// Env and header names whose values were kept as written.
    pub kept: Vec<String>,
}

impl Declared {
    /// The lines `add` and `import` print after writing: what was kept, what to set.
    pub(crate) fn advice(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .kept
            .iter()
            .map(|name| {
                format!(
                    "kept the value of {} as written (not a sensitive name, no secret shape)",
                    t(name)
                )
            })
            .collect();
        lines.extend(self.variables.iter().map(|v| {
            format!(
                "set {} in the host environment (the core only names it)",
                t(v)
            )
        }));
        lines
    }
}

/// Whether a literal env or header value may be committed with the core as written.
/// An allowlist, since a secret has no one shape: the name is not sensitive (the
/// redactor's words and `pass`, `pwd`, `key`, `auth`, `dsn`, `conn`, `mnemonic`, `seed`,
/// `cred`, `cert`, `sig`), and the value (or a `${NAME:-default}`'s default) is one of:
/// a number, a boolean word, a short setting word (`eu-west-1`, `json`, `debug`), a
/// plain path, or a URL that is only an origin. Anything else becomes a reference.
pub(crate) fn keeps_literal(name: &str, value: &str) -> bool {
    const MARKERS: &[&str] = &[
        "pass", "pwd", "key", "auth", "dsn", "conn", "mnemonic", "seed", "cred", "cert", "sig",
        "secret", "token", "session", "cookie", "private",
    ];
    let lowered = name.to_ascii_lowercase();
    if demiurge_mcp::redact::is_sensitive_field(name) || MARKERS.iter().any(|m| lowered.contains(m))
    {
        return false;
    }
    let value = match defaulted(value) {
        Some((_, default)) => default,
        None if value.contains("${") => return false,
        None => value,
    };
    is_setting(value) && !holds_secret_shape(value)
}

/// `(NAME, default)` when `value` is exactly `${NAME:-default}`.
pub(super) fn defaulted(value: &str) -> Option<(&str, &str)> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    let (name, default) = inner.split_once(":-")?;
    is_env_name(name).then_some((name, default))
}

/// The shapes of a harmless setting.
pub(super) fn is_setting(value: &str) -> bool {
    use std::sync::LazyLock;
    static SHAPES: LazyLock<regex::RegexSet> = LazyLock::new(|| {
        regex::RegexSet::new([
            // Numbers and boolean words.
            r"^-?[0-9]{1,12}(\.[0-9]{1,6})?$",
            r"(?i)^(true|false|yes|no|on|off|enabled|disabled)$",
            // A short setting word: `eu-west-1`, `json`, `info`, `gpt-4o`, `v1.2`.
            r"^[A-Za-z][A-Za-z0-9._-]{0,31}$",
            // A plain path.
            r"^(/|\./|\.\./|~/)[A-Za-z0-9._/-]{0,200}$",
            // An origin, nothing after it.
            r"^https?://[a-z0-9.-]{1,100}(:[0-9]{1,5})?/?$",
        ])
        .expect("valid regexes")
    });
    !value.is_empty() && SHAPES.is_match(value) && !looks_generated(value)
}

/// A token-like run: 12 or more characters mixing letters and digits (split at `/`,
/// `.`, `-`, `_` and `:`), such as a generated key or a webhook's random host label.
pub(super) fn looks_generated(value: &str) -> bool {
    value
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|run| {
            run.len() >= 12
                && run.chars().any(|c| c.is_ascii_digit())
                && run.chars().any(|c| c.is_ascii_alphabetic())
        })
}

pub(super) fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A host variable name from free text: upper case, `[A-Z0-9_]`, not starting with a
/// digit.
pub(crate) fn variable_name(parts: &[&str]) -> String {
    let raw = parts.join("_").to_uppercase();
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) || name.is_empty() {
        name.insert(0, '_');
    }
    name
}

/// Whether `value` is exactly one `${NAME}` reference (no default: a default is a
/// literal committed with the core, and may be a secret).
pub(super) fn is_reference(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(is_env_name)
}

/// Whether `arg` holds a secret shape anywhere (also inside a shell script: `sh -c
/// 'curl -H "Authorization: Bearer X" ...'`) whose value is not exactly a `${NAME}`
/// reference.
pub(super) fn holds_secret_shape(arg: &str) -> bool {
    // Beyond the redactor's shapes, what a command line carries that a result rarely
    // does: a bare `Bearer X` (`--auth-header "Bearer X"`) and any header-like
    // `Name: value` whose name is sensitive (`PRIVATE-TOKEN: X`, `X-Auth-Token: X`).
    static CREDENTIAL: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r#"(?i)\b(?:bearer|basic)\s+([^\s'"]+)|\b([A-Za-z0-9_-]+)\s*:\s*(?:(?:bearer|basic|token|digest)\s+)?([^\s'"]+)"#,
        )
        .expect("valid regex")
    });
    let unquoted = |s: &str| s.trim_matches(|c| c == '"' || c == '\'').to_string();
    let shaped = demiurge_mcp::redact::Redactor::new()
        .secret_spans(arg)
        .into_iter()
        .any(|span| !is_reference(&unquoted(&arg[span])));
    shaped
        || CREDENTIAL
            .captures_iter(arg)
            .any(|c| match (c.get(1), c.get(2), c.get(3)) {
                (Some(value), _, _) => !is_reference(value.as_str()),
                (None, Some(name), Some(value)) => {
                    demiurge_mcp::redact::is_sensitive_field(name.as_str())
                        && !is_reference(value.as_str())
                }
                _ => false,
            })
}

/// The YAML of an `mcp add`, every literal value turned into a reference.
pub(crate) fn declaration(add: &Addition<'_>) -> Result<Declared, String> {
    let mut declared = Declared {
        yaml: endpoint_yaml(add)?,
        variables: Vec::new(),
        kept: Vec::new(),
    };
    let env = pairs(add.env, "env")?;
    if !env.is_empty() {
        if add.url.is_some() {
            return Err("--env is for stdio servers; use --header for HTTP".into());
        }
        declared.yaml.push_str("env:\n");
        for (key, value) in env {
            declared.env_entry(key, value)?;
        }
    }
    let headers = pairs(add.headers, "header")?;
    if !headers.is_empty() {
        if add.url.is_none() {
            return Err("--header is for HTTP servers (--url)".into());
        }
        declared.yaml.push_str("headers:\n");
        for (key, value) in headers {
            declared.header_entry(add.name, key, value)?;
        }
    }
    Ok(declared)
}

/// The declaration's first lines: an HTTP server's URL (never with credentials or a
/// query, which would be committed with the core), or a stdio server's command and
/// arguments (never with a secret in them).
pub(super) fn endpoint_yaml(add: &Addition<'_>) -> Result<String, String> {
    match (add.url, add.command.split_first()) {
        (Some(url), None) => {
            let parsed = url::Url::parse(url).map_err(|_| "--url is not a URL".to_string())?;
            if !parsed.username().is_empty()
                || parsed.password().is_some()
                || parsed.query().is_some()
            {
                return Err("the URL carries credentials or a query, which would be committed with the core; declare them as a header with a `${NAME}` reference".into());
            }
            Ok(format!(
                "transport: streamable_http\nurl: {}\n",
                yaml_string(url)
            ))
        }
        (None, Some((program, args))) => {
            let secret_args = demiurge_mcp::authority::preview::secret_arg_values(args);
            if secret_args.iter().any(|(_, v)| !is_reference(v)) {
                return Err("an argument passes a secret-looking option's value, which would be committed with the core; pass it through an environment variable instead".into());
            }
            if let Some(n) = args.iter().position(|a| holds_secret_shape(a)) {
                return Err(format!(
                    "argument {} holds a secret (a `Bearer` credential, `token=...`, `--token VALUE` or URL credentials), which would be committed with the core; pass it through an environment variable and write `${{NAME}}` in its place",
                    n + 1
                ));
            }
            let args: Vec<String> = args.iter().map(|a| yaml_string(a)).collect();
            Ok(format!(
                "command: {}\nargs: [{}]\n",
                yaml_string(program),
                args.join(", ")
            ))
        }
        (Some(_), Some(_)) => Err("give either --url or `-- COMMAND ARGS...`, not both".into()),
        (None, None) => Err("give --url URL or `-- COMMAND ARGS...`".into()),
    }
}

/// `KEY=VALUE` items of `--{what}`.
pub(super) fn pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>, String> {
    items
        .iter()
        .map(|item| {
            item.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("--{what} takes KEY=VALUE"))
        })
        .collect()
}

impl Declared {
    /// One `env:` entry. Its value stays in the host: the core only names it (a
    /// default that may not be committed is dropped, its variable kept), unless it is a
    /// reference already or a literal that may be kept.
    fn env_entry(&mut self, key: String, value: String) -> Result<(), String> {
        if !is_env_name(&key) {
            return Err(
                "an env name uses letters, digits and `_` and does not start with a digit".into(),
            );
        }
        let value = if is_reference(&value) {
            value
        } else if keeps_literal(&key, &value) {
            self.kept.push(key.clone());
            value
        } else {
            let name = defaulted(&value)
                .map_or(key.as_str(), |(name, _)| name)
                .to_string();
            self.variables.push(name.clone());
            format!("${{{name}}}")
        };
        // An env name is letters, digits and `_`: plain YAML.
        self.yaml
            .push_str(&format!("  {key}: {}\n", yaml_string(&value)));
        Ok(())
    }

    /// One `headers:` entry of server `server`: its credential becomes a reference to
    /// a host variable (`Bearer xyz` keeps its scheme word), unless it is one already
    /// or a literal that may be kept.
    fn header_entry(&mut self, server: &str, key: String, value: String) -> Result<(), String> {
        if !is_header_name(&key) {
            return Err("a header name uses letters, digits and `-`".into());
        }
        let scheme = |v: &str| {
            v.split_once(' ')
                .filter(|(scheme, _)| scheme.chars().all(|c| c.is_ascii_alphabetic()))
                .map(|(scheme, rest)| (scheme.to_string(), rest.to_string()))
        };
        let scheme_and_reference = scheme(&value).is_some_and(|(_, rest)| is_reference(&rest));
        let value = if is_reference(&value) || scheme_and_reference {
            value
        } else if keeps_literal(&key, &value) {
            self.kept.push(key.clone());
            value
        } else {
            let name = variable_name(&[server, &key]);
            self.variables.push(name.clone());
            match scheme(&value) {
                Some((scheme, _)) => format!("{scheme} ${{{name}}}"),
                None => format!("${{{name}}}"),
            }
        };
        self.yaml.push_str(&format!(
            "  {}: {}\n",
            yaml_string(&key),
            yaml_string(&value)
        ));
        Ok(())
    }
}
