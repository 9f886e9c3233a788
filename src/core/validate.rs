//! A declaration file as written ([`RawDeclaration`]) made a [`Declaration`]:
//! validation happens once, in [`Declaration::from_raw`], which destructures every raw
//! field so a new field cannot be added without deciding how it is checked; each
//! section has a stage of its own, and every problem names its file and field, never
//! a value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::process::{UnsupportedReference, check_references};
use crate::text::plain_name;

mod fields;

use super::LoadError;
use super::declaration::{
    ApprovalPolicy, Declaration, DeclaredUrl, Endpoint, LogLevel, Pinning, Protocol, Risk, Start,
    TransportKind, is_env_name, is_header_name,
};
use super::oauth::{OAuthDeclared, RawOAuth, is_reference};
use fields::{call_capability, check_roots, declaration_fingerprint, sandbox_of, tool_filter};

/// A declaration file exactly as written; only [`Declaration::from_raw`] reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDeclaration {
    enabled: Option<bool>,
    transport: Option<TransportKind>,
    command: Option<String>,
    args: Option<Vec<String>>,
    #[serde(default, deserialize_with = "unique_keys")]
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default, deserialize_with = "unique_keys")]
    headers: Option<BTreeMap<String, String>>,
    oauth: Option<RawOAuth>,
    tools: Option<RawToolFilter>,
    risk: Option<Risk>,
    approval_policy: Option<ApprovalPolicy>,
    capability: Option<String>,
    connect_timeout_seconds: Option<f64>,
    timeout_seconds: Option<f64>,
    max_timeout_seconds: Option<f64>,
    supports_parallel_tool_calls: Option<bool>,
    roots: Option<Vec<String>>,
    log_level: Option<LogLevel>,
    protocol: Option<Protocol>,
    pinning: Option<Pinning>,
    start: Option<Start>,
    resources: Option<RawToolFilter>,
    prompts: Option<RawToolFilter>,
    env_vars: Option<Vec<String>>,
    tool_timeouts: Option<BTreeMap<String, f64>>,
    required: Option<bool>,
    sandbox: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolFilter {
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

/// A string map whose keys must be unique: YAML keeps the last of two equal keys, so a
/// second `API_TOKEN:` further down would silently replace what a reviewer read first.
fn unique_keys<'de, D>(deserializer: D) -> Result<Option<BTreeMap<String, String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Unique;
    impl<'de> serde::de::Visitor<'de> for Unique {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of names to strings")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                if out.insert(key, value).is_some() {
                    return Err(serde::de::Error::custom(
                        "a name is written twice in this map; keep one",
                    ));
                }
            }
            Ok(out)
        }
    }
    deserializer.deserialize_map(Unique).map(Some)
}

/// Environment names a declaration may not set: the runtime's promises about the child.
const RESERVED_ENV: &[&str] = &["HOME"];

fn env_name_problem(name: &str) -> Option<String> {
    if RESERVED_ENV.contains(&name) {
        return Some(format!(
            "`{name}` is set by the runtime (a dedicated home for MCP servers); remove it"
        ));
    }
    (!is_env_name(name)).then(|| {
        "environment names use letters, digits and `_` and do not start with a digit".into()
    })
}

/// The problems found in one declaration file, each naming the file and the field.
struct Problems<'a> {
    file: &'a Path,
    errors: Vec<LoadError>,
}

impl Problems<'_> {
    fn push(&mut self, field: &str, message: impl Into<String>) {
        self.errors
            .push(LoadError::new(self.file, Some(field), None, message.into()));
    }

    /// Each of `fields` that is `present` does not belong to `transport`.
    fn misplaced(&mut self, fields: &[(&str, bool)], belongs_to: &str) {
        for (field, present) in fields {
            if *present {
                self.push(
                    field,
                    format!("`{field}` is only for `transport: {belongs_to}`; remove it or change the transport"),
                );
            }
        }
    }

    /// `value` (a `${NAME}`-bearing string) uses only supported references.
    fn references(&mut self, field: &str, value: &str) {
        if check_references(value).is_err() {
            self.push(field, UnsupportedReference.to_string());
        }
    }

    /// A duration in seconds: above 0, at most a day; `default` when absent or wrong.
    fn seconds(&mut self, value: Option<f64>, default: Duration, field: &str) -> Duration {
        match value {
            None => default,
            Some(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Duration::from_secs_f64(v),
            Some(_) => {
                self.push(
                    field,
                    "must be a number of seconds above 0 and at most 86400",
                );
                default
            }
        }
    }
}

/// The timeouts a declaration sets.
struct Timeouts {
    connect: Duration,
    call: Duration,
    per_tool: BTreeMap<String, Duration>,
    max_call: Option<Duration>,
}

impl RawDeclaration {
    /// Every field, grouped by what validates it: how the server is reached, what it
    /// may do and for how long, and the plain settings.
    fn split(self) -> (Settings, EndpointFields, Behaviour) {
        let RawDeclaration {
            enabled,
            transport,
            command,
            args,
            env,
            cwd,
            url,
            headers,
            oauth,
            tools,
            risk,
            approval_policy,
            capability,
            connect_timeout_seconds,
            timeout_seconds,
            max_timeout_seconds,
            supports_parallel_tool_calls,
            roots,
            log_level,
            protocol,
            pinning,
            start,
            resources,
            prompts,
            env_vars,
            tool_timeouts,
            required,
            sandbox,
        } = self;
        let settings = Settings {
            enabled,
            transport: transport.unwrap_or_default(),
            risk,
            approval_policy,
            supports_parallel_tool_calls,
            log_level,
            protocol,
            pinning,
            start,
            required,
        };
        let endpoint = EndpointFields {
            command,
            args,
            env,
            env_vars,
            cwd,
            url,
            headers,
            oauth,
        };
        let behaviour = Behaviour {
            filters: [tools, resources, prompts],
            roots,
            capability,
            timeouts: [
                connect_timeout_seconds,
                timeout_seconds,
                max_timeout_seconds,
            ],
            tool_timeouts,
            sandbox,
        };
        (settings, endpoint, behaviour)
    }
}

/// The settings that need no check beyond their type.
struct Settings {
    enabled: Option<bool>,
    transport: TransportKind,
    risk: Option<Risk>,
    approval_policy: Option<ApprovalPolicy>,
    supports_parallel_tool_calls: Option<bool>,
    log_level: Option<LogLevel>,
    protocol: Option<Protocol>,
    pinning: Option<Pinning>,
    start: Option<Start>,
    required: Option<bool>,
}

/// What a server may do and for how long, as written.
struct Behaviour {
    /// `tools:`, `resources:`, `prompts:`.
    filters: [Option<RawToolFilter>; 3],
    roots: Option<Vec<String>>,
    capability: Option<String>,
    /// `connect_timeout_seconds`, `timeout_seconds`, `max_timeout_seconds`.
    timeouts: [Option<f64>; 3],
    tool_timeouts: Option<BTreeMap<String, f64>>,
    sandbox: Option<serde_yaml::Value>,
}

impl Declaration {
    /// Validates a parsed declaration. `canonical` is the document as JSON (sorted keys),
    /// the input of the fingerprint.
    pub(crate) fn from_raw(
        raw: RawDeclaration,
        server_id: String,
        path: String,
        file: PathBuf,
        canonical: &serde_json::Value,
    ) -> Result<Self, Vec<LoadError>> {
        let (settings, endpoint, behaviour) = raw.split();
        let mut p = Problems {
            file: &file,
            errors: Vec::new(),
        };
        // Without an endpoint, errors were recorded: the declaration is not built.
        let Some(endpoint) = endpoint.endpoint(&mut p, settings.transport) else {
            return Err(p.errors);
        };
        let Behaviour {
            filters,
            roots,
            capability,
            timeouts: [connect, call, max],
            tool_timeouts,
            sandbox,
        } = behaviour;
        let [tools, resources, prompts] = filters;
        let tools = tool_filter(&mut p, "tools", tools);
        let resources = tool_filter(&mut p, "resources", resources);
        let prompts = tool_filter(&mut p, "prompts", prompts);
        check_roots(&mut p, roots.as_deref());
        let call_capability = call_capability(&mut p, capability, &server_id);
        let timeouts = Timeouts::of(&mut p, connect, call, max, tool_timeouts);
        let sandbox = sandbox_of(&mut p, sandbox.as_ref(), settings.transport);
        if !p.errors.is_empty() {
            return Err(p.errors);
        }
        let fingerprint = declaration_fingerprint(&endpoint, &server_id, &path, canonical);
        Ok(Declaration {
            server_id,
            path,
            file,
            enabled: settings.enabled.unwrap_or(true),
            endpoint,
            tools,
            resources,
            prompts,
            roots,
            log_level: settings.log_level,
            protocol: settings.protocol.unwrap_or_default(),
            pinning: settings.pinning,
            start: settings.start,
            max_call_timeout: timeouts.max_call,
            tool_timeouts: timeouts.per_tool,
            required: settings.required.unwrap_or(false),
            sandbox,
            risk: settings.risk.unwrap_or(Risk::Medium),
            approval_policy: settings.approval_policy.unwrap_or(ApprovalPolicy::Prompt),
            call_capability,
            connect_timeout: timeouts.connect,
            call_timeout: timeouts.call,
            supports_parallel_tool_calls: settings.supports_parallel_tool_calls.unwrap_or(false),
            fingerprint,
        })
    }
}

/// The fields that say how a server is reached.
struct EndpointFields {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    env_vars: Option<Vec<String>>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    oauth: Option<RawOAuth>,
}

impl EndpointFields {
    /// The endpoint of `transport`, the other transport's fields refused; `None` when
    /// it cannot be built (the problems say why).
    fn endpoint(self, p: &mut Problems, transport: TransportKind) -> Option<Endpoint> {
        let EndpointFields {
            command,
            args,
            env,
            env_vars,
            cwd,
            url,
            headers,
            oauth,
        } = self;
        match transport {
            TransportKind::Stdio => {
                p.misplaced(
                    &[
                        ("url", url.is_some()),
                        ("headers", headers.is_some()),
                        ("oauth", oauth.is_some()),
                    ],
                    "streamable_http",
                );
                let env = declared_env(p, env, env_vars);
                Some(stdio_endpoint(p, command, args, env, cwd))
            }
            TransportKind::StreamableHttp => {
                p.misplaced(
                    &[
                        ("command", command.is_some()),
                        ("args", args.is_some()),
                        ("env", env.is_some()),
                        ("env_vars", env_vars.is_some()),
                        ("cwd", cwd.is_some()),
                    ],
                    "stdio",
                );
                http_endpoint(p, url, headers, oauth)
            }
        }
    }
}

/// A stdio server's `env`, with `env_vars: [NAME]` read as `NAME: ${NAME}` (passed
/// through from the host): names and references checked.
fn declared_env(
    p: &mut Problems,
    env: Option<BTreeMap<String, String>>,
    env_vars: Option<Vec<String>>,
) -> BTreeMap<String, String> {
    let mut env = env.unwrap_or_default();
    for name in env_vars.iter().flatten() {
        let field = format!("env_vars.{}", plain_name(name, "<name>"));
        if env.contains_key(name) {
            p.push(&field, "is also under `env`; keep one");
        } else if !is_reference(&format!("${{{name}}}")) {
            p.push(&field, "not a variable name; use letters, digits and `_`");
        } else {
            env.insert(name.clone(), format!("${{{name}}}"));
        }
    }
    for (name, value) in &env {
        p.references(&format!("env.{}", plain_name(name, "<name>")), value);
    }
    for name in env.keys() {
        if let Some(problem) = env_name_problem(name) {
            p.push(&format!("env.{}", plain_name(name, "<name>")), problem);
        }
    }
    env
}

/// A stdio server's endpoint: a command, arguments with supported references, a
/// `cwd` that is not empty.
fn stdio_endpoint(
    p: &mut Problems,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
) -> Endpoint {
    let command = match command {
        Some(c) if !c.trim().is_empty() => c,
        Some(_) => {
            p.push(
                "command",
                "`command` is empty; name the program that starts the server",
            );
            String::new()
        }
        None => {
            p.push(
                "command",
                "`transport: stdio` requires `command`; add the program that starts the server",
            );
            String::new()
        }
    };
    for (index, arg) in args.iter().flatten().enumerate() {
        p.references(&format!("args[{index}]"), arg);
    }
    if cwd.as_deref().is_some_and(|dir| dir.trim().is_empty()) {
        p.push("cwd", "`cwd` is empty; remove it to use the workspace root");
    }
    Endpoint::Stdio {
        command,
        args: args.unwrap_or_default(),
        env,
        cwd,
    }
}

/// A streamable HTTP server's endpoint: an http(s) URL, header names and references,
/// its `oauth:` section; `None` without a usable URL.
fn http_endpoint(
    p: &mut Problems,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    oauth: Option<RawOAuth>,
) -> Option<Endpoint> {
    let url = match url.as_deref().map(DeclaredUrl::parse) {
        Some(Ok(u)) => Some(u),
        Some(Err(problem)) => {
            p.push("url", problem);
            None
        }
        None => {
            p.push(
                "url",
                "`transport: streamable_http` requires `url` with an http:// or https:// URL",
            );
            None
        }
    };
    let headers = headers.unwrap_or_default();
    for (name, value) in &headers {
        p.references(&format!("headers.{}", plain_name(name, "<name>")), value);
    }
    for name in headers.keys().filter(|name| !is_header_name(name)) {
        p.push(
            &format!("headers.{}", plain_name(name, "<name>")),
            "not a valid HTTP header name; use letters, digits and `-`",
        );
    }
    let oauth = oauth.map(|raw| {
        let mut problems = Vec::new();
        let declared = OAuthDeclared::from_raw(raw, &mut problems);
        for (field, message) in problems {
            p.push(&field, message);
        }
        declared
    });
    Some(Endpoint::StreamableHttp {
        url: url?,
        headers,
        oauth,
    })
}
