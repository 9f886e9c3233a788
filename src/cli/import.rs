//! `demiurge mcp import FILE`: bring an existing MCP configuration. Reads Claude Code
//! and Claude Desktop `mcpServers` JSON (`.mcp.json`, `claude_desktop_config.json`),
//! VS Code `mcp.json` (`servers`, `inputs`) and Codex `config.toml`
//! (`[mcp_servers.*]`), shows what it will write, and writes one declaration per server
//! with its grants (`--yes`, or a `y` on a terminal). A core is usually committed, so
//! no secret is written: an env or header value under a sensitive name, or with a
//! secret shape, becomes a `${NAME}` reference and the variables to set are printed
//! (the rule of `mcp add`). What the runtime cannot express is reported, never dropped
//! in silence, and every note says what to do instead.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use demiurge_mcp::core::is_env_name;

use serde_json::Value;

use super::mcp::{
    Addition, Declared, Refused, declaration, keeps_literal, variable_name, write_declaration,
};
use super::{Cli, t};

/// One server found in the file, before it is written.
pub(crate) struct Found {
    /// The server id it will have.
    pub name: String,
    /// Its declaration, or why it cannot be imported.
    pub declared: Result<Declared, String>,
    /// What did not carry over, in words.
    pub notes: Vec<String>,
}

/// The servers of `text` (the file at `path`), in the file's order.
///
/// # Errors
/// A file that is none of the known formats, in words.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Vec<Found>, String> {
    if path.extension().is_some_and(|e| e == "toml") {
        let value: toml::Value = toml::from_str(text).map_err(|_| {
            "not valid TOML; expected a Codex config.toml with [mcp_servers.NAME] tables"
                .to_string()
        })?;
        let json = serde_json::to_value(value).map_err(|e| e.to_string())?;
        let servers = json
            .get("mcp_servers")
            .and_then(Value::as_object)
            .ok_or("no [mcp_servers.NAME] tables in this TOML file")?;
        return Ok(servers.iter().map(|(n, s)| codex(n, s)).collect());
    }
    let json: Value = serde_json::from_str(text).map_err(|_| {
        "not valid JSON; expected `mcpServers` (Claude) or `servers` (VS Code)".to_string()
    })?;
    let servers = json
        .get("mcpServers")
        .or_else(|| json.get("servers"))
        .and_then(Value::as_object)
        .ok_or("no `mcpServers` (Claude) or `servers` (VS Code) object in this file")?;
    let inputs = inputs_of(&json);
    Ok(servers
        .iter()
        .map(|(name, server)| json_server(name, server, &inputs))
        .collect())
}

/// A server id from a configuration key: `[A-Za-z0-9_-]`.
fn id_of(name: &str) -> String {
    let id: String = name.chars().map(demiurge_mcp::naming::safe_char).collect();
    if id.is_empty() { "server".into() } else { id }
}

/// VS Code's `inputs`: each id, with the default that may be committed with the core
/// (none for a `password` input or a value [`keeps_literal`] refuses).
type Inputs = BTreeMap<String, Option<String>>;

fn inputs_of(json: &Value) -> Inputs {
    let Some(list) = json.get("inputs").and_then(Value::as_array) else {
        return Inputs::new();
    };
    list.iter()
        .filter_map(|input| {
            let id = input.get("id")?.as_str()?;
            let secret = input.get("password").and_then(Value::as_bool) == Some(true);
            let default = input
                .get("default")
                .and_then(Value::as_str)
                .filter(|d| {
                    !secret
                        && !d.contains(['{', '}', '$'])
                        && keeps_literal(&variable_name(&[id]), d)
                })
                .map(str::to_string);
            Some((id.to_string(), default))
        })
        .collect()
}

/// Other hosts' `${...}` forms as the runtime's: `${input:ID}` (VS Code) is the host
/// variable `ID` (with the input's default, when it may be committed), `${env:NAME}`
/// is `${NAME}`, `${NAME}` and `${NAME:-default}` stay, `${userHome}` is `${HOME}`,
/// `${workspaceFolder}` in `args` is `.`; any other VS Code variable becomes a host
/// variable named after it, and a note says which.
fn references(value: &str, inputs: &Inputs, notes: &mut Vec<String>, field: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let defaulted = inner
            .split_once(":-")
            .is_some_and(|(name, _)| is_env_name(name));
        if let Some(id) = inner.strip_prefix("input:") {
            let name = variable_name(&[id]);
            match inputs.get(id).cloned().flatten() {
                Some(default) => {
                    notes.push(format!(
                        "{field}: the VS Code input `{}` becomes the host variable {name}, its default kept",
                        t(id)
                    ));
                    out.push_str(&format!("${{{name}:-{default}}}"));
                }
                None => {
                    notes.push(format!(
                        "{field}: the VS Code input `{}` becomes the host variable {name}",
                        t(id)
                    ));
                    out.push_str(&format!("${{{name}}}"));
                }
            }
        } else if let Some(name) = inner.strip_prefix("env:").filter(|n| is_env_name(n)) {
            out.push_str(&format!("${{{name}}}"));
        } else if is_env_name(inner) && !VSCODE_VARIABLES.contains(&inner) || defaulted {
            out.push_str(&format!("${{{inner}}}"));
        } else if inner == "workspaceFolder" && field == "args" {
            // A stdio server starts in the workspace (its default `cwd`).
            notes.push(
                "args: `${workspaceFolder}` became `.` (servers start in the workspace)".into(),
            );
            out.push('.');
        } else if inner == "userHome" {
            out.push_str("${HOME}");
        } else {
            let name = variable_name(&["vscode", inner]);
            notes.push(format!(
                "{field}: `${{{}}}` has no counterpart here; it became the host variable {name}: set it before connecting",
                t(inner)
            ));
            out.push_str(&format!("${{{name}}}"));
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// VS Code's predefined variables that look like host variable names.
const VSCODE_VARIABLES: &[&str] = &[
    "workspaceFolder",
    "workspaceFolderBasename",
    "workspaceRoot",
    "userHome",
    "file",
    "fileBasename",
    "fileDirname",
    "relativeFile",
    "cwd",
    "execPath",
    "pathSeparator",
    "lineNumber",
    "selectedText",
    "defaultBuildTask",
];

/// A declared `cwd` from another host, as the runtime takes it (relative to the
/// workspace), or `None` (the workspace root, or not importable: noted).
fn cwd_of(value: &str, notes: &mut Vec<String>) -> Option<String> {
    let value = value.trim();
    let relative = match value.strip_prefix("${workspaceFolder}") {
        Some(rest) => rest.trim_start_matches(['/', '\\']),
        None => value,
    };
    if relative.is_empty() || relative == "." {
        return None;
    }
    if std::path::Path::new(relative).is_absolute()
        || relative.starts_with('~')
        || relative.contains("${")
    {
        notes.push(
            "`cwd` is absolute or a variable, and is not imported: a server's cwd here is a directory inside the workspace; write `cwd:` relative to it (see the README's Quick start)".into(),
        );
        return None;
    }
    Some(relative.to_string())
}

/// The fields `mcp add` does not write: `cwd`, and `enabled: false`.
fn extra_fields(cwd: Option<String>, disabled: bool) -> String {
    let mut extra = String::new();
    if disabled {
        extra.push_str("enabled: false\n");
    }
    if let Some(cwd) = cwd {
        extra.push_str(&format!(
            "cwd: {}\n",
            serde_json::to_string(&cwd).unwrap_or_default()
        ));
    }
    extra
}

/// `command` then `args`, as one list.
fn command_of(server: &Value) -> Vec<String> {
    let mut command: Vec<String> = server
        .get("command")
        .and_then(Value::as_str)
        .map(|c| vec![c.to_string()])
        .unwrap_or_default();
    command.extend(strings(server.get("args")));
    command
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(v: Option<&Value>, inputs: &Inputs, notes: &mut Vec<String>, what: &str) -> Vec<String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let field = format!("{what}.{}", t(k));
                    format!(
                        "{k}={}",
                        references(v.as_str().unwrap_or_default(), inputs, notes, &field)
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A Claude (`mcpServers`) or VS Code (`servers`) entry.
fn json_server(name: &str, server: &Value, inputs: &Inputs) -> Found {
    let mut notes = Vec::new();
    let kind = server.get("type").and_then(Value::as_str).unwrap_or("");
    let url = server
        .get("url")
        .and_then(Value::as_str)
        .map(str::to_string);
    if kind == "sse" {
        return Found {
            name: id_of(name),
            declared: Err("uses the legacy HTTP+SSE transport, which this runtime does not speak; use the server's streamable HTTP endpoint".into()),
            notes,
        };
    }
    let command: Vec<String> = command_of(server)
        .iter()
        .map(|a| references(a, inputs, &mut notes, "args"))
        .collect();
    let env = pairs(server.get("env"), inputs, &mut notes, "env");
    let headers = pairs(server.get("headers"), inputs, &mut notes, "headers");
    if server.get("envFile").is_some() {
        notes.push("`envFile` is not imported: the runtime reads no env file; set its variables in the host environment and name each under `env` (`KEY: \"${KEY}\"`)".into());
    }
    for key in ["alwaysAllow", "autoApprove"] {
        if server.get(key).is_some() {
            notes.push(format!("`{key}` is not imported: here a person approves calls; answer `a` (always) at a call's prompt, and `demiurge approvals list` shows what was remembered"));
        }
    }
    let cwd = server
        .get("cwd")
        .and_then(Value::as_str)
        .and_then(|c| cwd_of(c, &mut notes))
        .filter(|_| url.is_none());
    let disabled = server.get("disabled").and_then(Value::as_bool) == Some(true);
    let addition = Addition {
        name,
        url: url.as_deref(),
        env: &env,
        headers: &headers,
        command: if url.is_some() { &[] } else { &command },
    };
    Found {
        name: id_of(name),
        declared: declaration(&addition).map(|mut d| {
            d.yaml.push_str(&extra_fields(cwd, disabled));
            d
        }),
        notes,
    }
}

/// A Codex `[mcp_servers.NAME]` table.
fn codex(name: &str, server: &Value) -> Found {
    let mut notes = Vec::new();
    let url = server
        .get("url")
        .and_then(Value::as_str)
        .map(str::to_string);
    let command = command_of(server);
    let inputs = Inputs::new();
    let env = codex_env(server, &inputs, &mut notes);
    let headers = codex_headers(server, &inputs, &mut notes);
    let addition = Addition {
        name,
        url: url.as_deref(),
        env: &env,
        headers: &headers,
        command: if url.is_some() { &[] } else { &command },
    };
    let cwd = server
        .get("cwd")
        .and_then(Value::as_str)
        .and_then(|c| cwd_of(c, &mut notes))
        .filter(|_| url.is_none());
    let disabled = server.get("enabled").and_then(Value::as_bool) == Some(false);
    let declared = declaration(&addition).map(|mut d| {
        d.yaml.push_str(&extra_fields(cwd, disabled));
        d.yaml.push_str(&codex_limits(server));
        d
    });
    const KNOWN: &[&str] = &[
        "command",
        "args",
        "env",
        "env_vars",
        "cwd",
        "url",
        "http_headers",
        "env_http_headers",
        "bearer_token_env_var",
        "enabled",
        "startup_timeout_sec",
        "tool_timeout_sec",
        "enabled_tools",
        "disabled_tools",
    ];
    if let Some(m) = server.as_object() {
        for key in m.keys().filter(|k| !KNOWN.contains(&k.as_str())) {
            notes.push(format!("`{}` is not imported", t(key)));
        }
    }
    Found {
        name: id_of(name),
        declared,
        notes,
    }
}

/// A Codex server's `env`, and `env_vars = ["NAME"]` passed through from the host.
fn codex_env(server: &Value, inputs: &Inputs, notes: &mut Vec<String>) -> Vec<String> {
    let mut env = pairs(server.get("env"), inputs, notes, "env");
    for name in strings(server.get("env_vars")) {
        if is_env_name(&name) {
            env.push(format!("{name}=${{{name}}}"));
        } else {
            notes.push(format!(
                "env_vars: `{}` is not a variable name and is not imported",
                t(&name)
            ));
        }
    }
    env
}

/// A Codex server's `http_headers`, `env_http_headers` and `bearer_token_env_var`.
fn codex_headers(server: &Value, inputs: &Inputs, notes: &mut Vec<String>) -> Vec<String> {
    let mut headers = pairs(server.get("http_headers"), inputs, notes, "http_headers");
    if let Some(m) = server.get("env_http_headers").and_then(Value::as_object) {
        headers.extend(
            m.iter()
                .filter_map(|(h, v)| Some(format!("{h}=${{{}}}", v.as_str()?))),
        );
    }
    if let Some(var) = server.get("bearer_token_env_var").and_then(Value::as_str) {
        headers.push(format!("Authorization=Bearer ${{{var}}}"));
    }
    headers
}

/// A Codex server's timeouts and tool lists, as declaration lines.
fn codex_limits(server: &Value) -> String {
    let mut extra = String::new();
    for (from, to) in [
        ("startup_timeout_sec", "connect_timeout_seconds"),
        ("tool_timeout_sec", "timeout_seconds"),
    ] {
        if let Some(n) = server.get(from).and_then(Value::as_f64) {
            extra.push_str(&format!("{to}: {n}\n"));
        }
    }
    let list = |k: &str| strings(server.get(k));
    let (include, exclude) = (list("enabled_tools"), list("disabled_tools"));
    if !include.is_empty() || !exclude.is_empty() {
        let quoted = |v: &[String]| {
            v.iter()
                .map(|s| serde_json::to_string(s).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        };
        extra.push_str(&format!(
            "tools:\n  include: [{}]\n  exclude: [{}]\n",
            quoted(&include),
            quoted(&exclude)
        ));
    }
    extra
}

/// `demiurge mcp import FILE`.
pub(crate) fn run(cli: &Cli, file: &Path) -> u8 {
    /// Configuration files are small; a larger one is not parsed.
    const MAX_FILE: u64 = 1024 * 1024;
    if std::fs::metadata(file).is_ok_and(|m| m.len() > MAX_FILE) {
        eprintln!(
            "error: {} is over 1 MiB; not an MCP configuration",
            t(&file.display().to_string())
        );
        return 1;
    }
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => {
            eprintln!(
                "error: cannot read {}: {}",
                t(&file.display().to_string()),
                t(&e.to_string())
            );
            return 1;
        }
    };
    let found = match parse(file, &text) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("error: {}: {e}", t(&file.display().to_string()));
            return 1;
        }
    };
    if found.is_empty() {
        println!("no servers in {}", t(&file.display().to_string()));
        return 0;
    }
    for f in &found {
        match &f.declared {
            Ok(d) => {
                println!("agent/mcp/{}.yaml:", t(&f.name));
                for line in d.yaml.lines() {
                    println!("  {}", t(line));
                }
            }
            Err(why) => println!("{}: not imported: {}", t(&f.name), t(why)),
        }
        for note in &f.notes {
            println!("  note: {note}");
        }
    }
    if !cli.yes && !confirmed() {
        eprintln!("nothing written; run again with --yes to write these declarations");
        return 1;
    }
    let mut code = 0;
    let mut advice = Vec::new();
    for f in found {
        let Ok(declared) = f.declared else {
            code = 1;
            continue;
        };
        match write_declaration(cli, &f.name, &declared.yaml) {
            Ok(path) => {
                println!("wrote {}", t(&path.display().to_string()));
                advice.extend(declared.advice());
            }
            Err(Refused::Usage(e)) => {
                eprintln!("{}: not written: {e}", t(&f.name));
                code = 1;
            }
            Err(Refused::Invalid(errors)) => {
                eprintln!("{}: not written: {}", t(&f.name), t(&errors.join("; ")));
                code = 1;
            }
        }
    }
    let mut advice: Vec<String> = advice.into_iter().collect();
    advice.sort();
    advice.dedup();
    for line in advice {
        println!("{line}");
    }
    code
}

/// A `y` on a terminal.
fn confirmed() -> bool {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return false;
    }
    eprint!("write these declarations? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}
