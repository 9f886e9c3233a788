//! `demiurge mcp add|list|get|remove|enable|disable`: manage declarations the way other
//! hosts' `mcp` commands do, without hand-editing YAML. A core is usually committed,
//! so `add` never writes a secret: an env or header value is kept as written only when
//! its name is not sensitive and the value has no secret shape ([`keeps_literal`]);
//! any other becomes a `${NAME}` reference and the command says which host variables
//! to set. Edits of existing files are line edits: the user's comments and order stay.

use std::path::PathBuf;

use demiurge_mcp::core::{self, is_env_name, is_header_name};
use serde_json::json;

use super::{Cli, t};

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
fn defaulted(value: &str) -> Option<(&str, &str)> {
    let inner = value.strip_prefix("${")?.strip_suffix('}')?;
    let (name, default) = inner.split_once(":-")?;
    is_env_name(name).then_some((name, default))
}

/// The shapes of a harmless setting.
fn is_setting(value: &str) -> bool {
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
fn looks_generated(value: &str) -> bool {
    value
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|run| {
            run.len() >= 12
                && run.chars().any(|c| c.is_ascii_digit())
                && run.chars().any(|c| c.is_ascii_alphabetic())
        })
}

fn yaml_string(s: &str) -> String {
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
fn is_reference(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(is_env_name)
}

/// Whether `arg` holds a secret shape anywhere (also inside a shell script: `sh -c
/// 'curl -H "Authorization: Bearer X" ...'`) whose value is not exactly a `${NAME}`
/// reference.
fn holds_secret_shape(arg: &str) -> bool {
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
fn endpoint_yaml(add: &Addition<'_>) -> Result<String, String> {
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
fn pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>, String> {
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

/// `agent.yaml` with grants for `server` added under `capabilities.defaults`, by line
/// edits; `None` when the file's shape is not one these edits understand.
pub(crate) fn with_grants(manifest: &str, server: &str) -> Option<String> {
    let grants = [
        format!("mcp.connect:{server}"),
        format!("mcp.call:{server}"),
    ];
    let lines: Vec<&str> = manifest.lines().collect();
    let missing: Vec<&String> = grants
        .iter()
        .filter(|g| {
            !lines
                .iter()
                .any(|l| grant_key(l).is_some_and(|k| k == g.as_str()))
        })
        .collect();
    if missing.is_empty() {
        return Some(manifest.to_string());
    }
    let entry = |g: &str| format!("    {}: {{scope: core}}", yaml_string(g));
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let mentioned = lines.iter().any(|l| l.starts_with("capabilities"));
    let capabilities = lines.iter().position(|l| l.trim_end() == "capabilities:");
    // `  defaults:` of that section: after it, before the next top-level key.
    let defaults = capabilities.and_then(|c| {
        lines[c + 1..]
            .iter()
            .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('#'))
            .position(|l| l.trim_end() == "  defaults:")
            .map(|i| c + 1 + i)
    });
    match (capabilities, defaults) {
        (None, None) if mentioned => return None,
        (Some(_), Some(defaults)) => {
            for (i, g) in missing.iter().enumerate() {
                out.insert(defaults + 1 + i, entry(g));
            }
        }
        (None, None) => {
            out.push("capabilities:".into());
            out.push("  defaults:".into());
            out.extend(missing.iter().map(|g| entry(g)));
        }
        _ => return None,
    }
    Some(out.join("\n") + "\n")
}

/// The grant a line of `capabilities.defaults` names, quoted or not: the text before
/// the first `: ` (flow form) or the final `:` (block form). Grant names hold colons,
/// never a colon followed by a space.
fn grant_key(line: &str) -> Option<&str> {
    let trimmed = line.trim();
    if line.len() - line.trim_start().len() < 4 || trimmed.starts_with('#') {
        return None;
    }
    let key = match trimmed.split_once(": ") {
        Some((key, _)) => key,
        None => trimmed.strip_suffix(':')?,
    };
    Some(key.trim_matches('"').trim_matches('\''))
}

/// `agent.yaml` without the grants of `server` (a block-form grant's nested lines
/// go with it).
pub(crate) fn without_grants(manifest: &str, server: &str) -> String {
    let grants = [
        format!("mcp.connect:{server}"),
        format!("mcp.call:{server}"),
    ];
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut kept = Vec::new();
    let mut dropping: Option<usize> = None;
    for line in manifest.lines() {
        if let Some(depth) = dropping {
            if !line.trim().is_empty() && indent(line) > depth {
                continue;
            }
            dropping = None;
        }
        if grant_key(line).is_some_and(|k| grants.iter().any(|g| g == k)) {
            dropping = Some(indent(line));
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

/// The declaration with its top-level `enabled:` set, by a line edit (its comment
/// kept), or a first line added.
pub(crate) fn with_enabled(yaml: &str, enabled: bool) -> String {
    let mut done = false;
    let mut out: Vec<String> = yaml
        .lines()
        .map(|line| match line.strip_prefix("enabled:") {
            Some(rest) if !done => {
                done = true;
                let comment = rest
                    .find('#')
                    .map(|i| format!("  {}", &rest[i..]))
                    .unwrap_or_default();
                format!("enabled: {enabled}{comment}")
            }
            _ => line.to_string(),
        })
        .collect();
    if !done {
        out.insert(0, format!("enabled: {enabled}"));
    }
    out.join("\n") + "\n"
}

/// The declaration file of `name`: any entry at `<name>.yaml` or `.yml` (a symlink or
/// a directory too, so nothing is ever written through one).
fn declaration_path(cli: &Cli, report: &core::LoadReport, name: &str) -> Option<PathBuf> {
    if !is_plain_id(name) {
        return None;
    }
    let dir = cli.core_dir().join(&report.core.mcp_root);
    ["yaml", "yml"]
        .iter()
        .map(|ext| dir.join(format!("{name}.{ext}")))
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// A server id these commands accept: `[A-Za-z0-9_-]`, so it names one file in the MCP
/// root and nothing else.
fn is_plain_id(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The regular file of a declaration that loaded (or is broken), never a link.
fn editable(cli: &Cli, report: &core::LoadReport, name: &str) -> Option<PathBuf> {
    let path = declaration_path(cli, report, name)?;
    std::fs::symlink_metadata(&path)
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|_| path)
}

/// Replaces `path` with `text` through a temporary file and a rename in its directory:
/// a symlink at `path` is replaced, never written through.
fn replace_file(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, text.as_bytes())?;
    // The declaration and agent.yaml are ordinary, readable files of the core.
    use std::os::unix::fs::PermissionsExt;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.persist(path).map(drop).map_err(|e| e.error)
}

fn unknown(report: &core::LoadReport, name: &str) -> u8 {
    let ids = report
        .core
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .chain(report.core.broken.iter().map(|b| b.server_id.as_str()));
    let hint = demiurge_mcp::text::closest(name, ids)
        .map(|id| format!("; did you mean `{}`?", t(id)))
        .unwrap_or_default();
    eprintln!("error: no server `{}` is declared{hint}", t(name));
    1
}

/// `demiurge mcp add`.
pub(crate) fn add(cli: &Cli, addition: &Addition<'_>) -> u8 {
    let declared = match declaration(addition) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    match write_declaration(cli, addition.name, &declared.yaml) {
        Ok(path) => {
            println!("added {} and its grants", t(&path.display().to_string()));
            for line in declared.advice() {
                println!("{line}");
            }
            0
        }
        Err(Refused::Usage(e)) => {
            eprintln!("error: {e}");
            2
        }
        Err(Refused::Invalid(errors)) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            1
        }
    }
}

/// Why a declaration was not written.
pub(crate) enum Refused {
    /// A bad id.
    Usage(String),
    /// It exists, the core does not load, or what would be written does not load.
    Invalid(Vec<String>),
}

/// Writes `agent/mcp/<name>.yaml` with `yaml` and grants it in agent.yaml; undone when
/// the result does not load as a turn would read it.
pub(crate) fn write_declaration(cli: &Cli, name: &str, yaml: &str) -> Result<PathBuf, Refused> {
    if !is_plain_id(name) {
        return Err(Refused::Usage(format!(
            "`{}` is not a server id; use letters, digits, `-` and `_`",
            t(name)
        )));
    }
    let report = core::load_report(&cli.core_dir());
    if !report.manifest_errors.is_empty() {
        return Err(Refused::Invalid(vec![
            "agent.yaml does not load; fix it first (`demiurge init --check`)".into(),
        ]));
    }
    if declaration_path(cli, &report, name).is_some()
        || report.core.broken.iter().any(|b| b.server_id == name)
    {
        return Err(Refused::Invalid(vec![format!(
            "`{}` is already declared; `demiurge mcp remove` it first",
            t(name)
        )]));
    }
    let dir = cli.core_dir().join(&report.core.mcp_root);
    let path = dir.join(format!("{name}.yaml"));
    let manifest_path = cli.core_dir().join("agent.yaml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
    let Some(granted) = with_grants(&manifest, name) else {
        return Err(Refused::Invalid(vec![format!(
            "agent.yaml's capabilities are in a shape this command does not edit; add `mcp.connect:{0}` and `mcp.call:{0}` under capabilities.defaults by hand",
            t(name)
        )]));
    };
    let created = std::fs::create_dir_all(&dir).and_then(|()| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?
            .write_all(yaml.as_bytes())
    });
    created
        .and_then(|()| replace_file(&manifest_path, &granted))
        .map_err(|e| {
            Refused::Invalid(vec![format!(
                "cannot write the core: {}",
                t(&e.to_string())
            )])
        })?;
    // What was written must load, exactly as a turn would read it.
    let after = core::load_report(&cli.core_dir());
    let broken = after.core.broken.iter().find(|b| b.server_id == name);
    if broken.is_some() || !after.manifest_errors.is_empty() {
        let _ = std::fs::remove_file(&path);
        let _ = replace_file(&manifest_path, &manifest);
        let errors = match broken {
            Some(b) => b.errors.iter().map(ToString::to_string).collect(),
            None => after
                .manifest_errors
                .iter()
                .map(ToString::to_string)
                .collect(),
        };
        return Err(Refused::Invalid(errors));
    }
    Ok(path)
}

/// `demiurge mcp list [--json]`.
pub(crate) fn list(cli: &Cli, as_json: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let grants = demiurge_mcp::authority::CapabilitySet::new(report.core.grants.iter().cloned());
    let rows: Vec<_> = report
        .core
        .declarations
        .iter()
        .map(|d| super::check::declaration_row(d, &grants))
        .chain(
            report
                .core
                .broken
                .iter()
                .map(|b| json!({"server": b.server_id, "path": b.path, "broken": true})),
        )
        .collect();
    if as_json {
        super::print_json(&json!({ "servers": rows }), true);
        return 0;
    }
    let mut lines = Vec::new();
    for row in &rows {
        let text = |k: &str| row[k].as_str().unwrap_or_default().to_string();
        let state = if row["broken"] == true {
            "broken (see `demiurge init --check`)".to_string()
        } else {
            format!(
                "{}  {}  {}",
                text("transport"),
                if row["enabled"] == true {
                    "enabled"
                } else {
                    "disabled"
                },
                if row["connect_granted"] == true && row["call_granted"] == true {
                    "granted"
                } else {
                    "not granted"
                }
            )
        };
        lines.push(vec![
            t(&text("server")).into_owned(),
            t(&state).into_owned(),
        ]);
    }
    for line in super::aligned(&lines) {
        println!("{line}");
    }
    if rows.is_empty() {
        println!("no MCP servers declared");
    }
    0
}

/// `demiurge mcp get NAME [--json]`: what an approver would see.
pub(crate) fn get(cli: &Cli, name: &str, as_json: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(d) = report
        .core
        .declarations
        .iter()
        .find(|d| d.server_id == name)
    else {
        return unknown(&report, name);
    };
    let policy = demiurge_mcp::authority::HostPolicy::default().connect_policy(d);
    let preview = demiurge_mcp::authority::ConnectPreview::new(d, policy, None, &[]);
    if as_json {
        super::print_json(&preview, true);
    } else {
        print!("{}", preview.render());
    }
    0
}

/// `demiurge mcp remove NAME`: the declaration and its grants.
pub(crate) fn remove(cli: &Cli, name: &str) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(path) = editable(cli, &report, name) else {
        return unknown(&report, name);
    };
    if !report.manifest_errors.is_empty() {
        eprintln!("error: agent.yaml does not load; fix it first (`demiurge init --check`)");
        return 1;
    }
    let manifest_path = cli.core_dir().join("agent.yaml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap_or_default();
    let done = std::fs::remove_file(&path)
        .and_then(|()| replace_file(&manifest_path, &without_grants(&manifest, name)));
    match done {
        Ok(()) => {
            println!("removed {} and its grants", t(&path.display().to_string()));
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

/// `demiurge mcp enable|disable NAME`.
pub(crate) fn set_enabled(cli: &Cli, name: &str, enabled: bool) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let Some(path) = editable(cli, &report, name) else {
        return unknown(&report, name);
    };
    let edited = std::fs::read_to_string(&path)
        .and_then(|yaml| replace_file(&path, &with_enabled(&yaml, enabled)));
    match edited {
        Ok(()) => {
            let state = if enabled { "enabled" } else { "disabled" };
            println!("{} {state}", t(name));
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_added_and_removed_by_line_edits_that_keep_comments() {
        let manifest = "# my agent\nname: a\ncapabilities:\n  defaults:\n    # docs first\n    mcp.connect:docs: {scope: core}\n";
        let added = with_grants(manifest, "git").unwrap();
        assert!(added.starts_with("# my agent\n"));
        assert!(added.contains("# docs first"));
        assert!(added.contains("\"mcp.connect:git\": {scope: core}"));
        assert!(added.contains("\"mcp.call:git\": {scope: core}"));
        let removed = without_grants(&added, "git");
        assert_eq!(removed, manifest);
        // No capabilities yet: a section is appended.
        let fresh = with_grants("name: a\n", "git").unwrap();
        assert!(fresh.ends_with("capabilities:\n  defaults:\n    \"mcp.connect:git\": {scope: core}\n    \"mcp.call:git\": {scope: core}\n"));
        // A block-form grant goes with its nested lines.
        let block = "capabilities:\n  defaults:\n    mcp.call:git:\n      scope: core\n    mcp.call:docs: {scope: core}\n";
        assert_eq!(
            without_grants(block, "git"),
            "capabilities:\n  defaults:\n    mcp.call:docs: {scope: core}\n"
        );
        // A flow-style section is not edited.
        assert!(with_grants("capabilities: {defaults: {}}\n", "git").is_none());
    }

    #[test]
    fn enabling_edits_one_line_and_keeps_its_comment() {
        let yaml = "# docs\nenabled: true   # on\ncommand: x\n";
        assert_eq!(
            with_enabled(yaml, false),
            "# docs\nenabled: false  # on\ncommand: x\n"
        );
        assert_eq!(
            with_enabled("command: x\n", false),
            "enabled: false\ncommand: x\n"
        );
    }
}
