//! MCP server declarations (`agent/mcp/*.yaml`): the raw serde shape and the validated
//! [`Declaration`] the rest of the runtime uses.
//!
//! Validation happens once, in [`Declaration::from_raw`], which destructures every raw
//! field so a new field cannot be added without deciding how it is checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::LoadError;

/// How the host reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// A child process speaking MCP over stdin/stdout.
    #[default]
    Stdio,
    /// An MCP server over the streamable HTTP transport (`http` is accepted too, as
    /// other hosts write it).
    #[serde(alias = "http")]
    StreamableHttp,
}

impl TransportKind {
    /// The spelling used in declarations and output.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Stdio => "stdio",
            TransportKind::StreamableHttp => "streamable_http",
        }
    }
}

/// The declared risk of a server, shown in approval previews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Read-only, local, harmless.
    Low,
    /// The default.
    Medium,
    /// Writes, network, money.
    High,
    /// Irreversible or privileged.
    Critical,
}

impl Risk {
    /// The spelling used in declarations and output.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        }
    }
}

/// How an action is approved. Ordered from weakest to strictest, so `max` tightens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    /// No prompt.
    Auto,
    /// Ask the approver.
    Prompt,
    /// Always refuse.
    Deny,
}

impl ApprovalPolicy {
    /// The spelling used in declarations and output.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Auto => "auto",
            ApprovalPolicy::Prompt => "prompt",
            ApprovalPolicy::Deny => "deny",
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolFilter {
    #[serde(default)]
    include: Vec<String>,
    #[serde(default)]
    exclude: Vec<String>,
}

/// The `oauth:` section as written.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOAuth {
    client_id: Option<String>,
    client_secret: Option<String>,
    client_metadata_url: Option<String>,
    scopes: Option<Vec<String>>,
    grant: Option<OAuthGrant>,
    issuer: Option<String>,
    private_key: Option<String>,
    signing_algorithm: Option<SigningAlgorithm>,
    token_endpoint_auth_method: Option<TokenAuthMethod>,
}

/// How an OAuth token is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// A user authorizes in a browser (PKCE); the default.
    #[default]
    AuthorizationCode,
    /// A headless service authenticates as itself with its client id and secret.
    ClientCredentials,
}

/// How a client assertion (`private_key_jwt`, RFC 7523) is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum SigningAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    RS384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    RS512,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// ECDSA on P-384 with SHA-384.
    ES384,
}

/// How the client authenticates at the token endpoint (RFC 7591's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAuthMethod {
    /// The client secret in an HTTP Basic header.
    ClientSecretBasic,
    /// The client secret in the request body.
    ClientSecretPost,
    /// A client assertion signed with the declared private key.
    PrivateKeyJwt,
    /// A public client: no secret.
    None,
}

impl TokenAuthMethod {
    /// The name authorization server metadata uses.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAuthMethod::ClientSecretBasic => "client_secret_basic",
            TokenAuthMethod::ClientSecretPost => "client_secret_post",
            TokenAuthMethod::PrivateKeyJwt => "private_key_jwt",
            TokenAuthMethod::None => "none",
        }
    }
}

/// How a streamable HTTP server is authorized (the `oauth:` section). Without one, a
/// server that answers 401 is authorized with dynamic client registration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OAuthDeclared {
    /// A client registered ahead with the authorization server.
    pub client_id: Option<String>,
    /// The client's secret as declared: always a `${NAME}` reference, interpolated only
    /// after approval (a core is committed; a literal secret would be too).
    pub client_secret: Option<String>,
    /// HTTPS URL of a client ID metadata document, used when the authorization server
    /// supports them and no client id is declared.
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; by default those the server's challenge or metadata name.
    pub scopes: Vec<String>,
    /// How the token is obtained.
    pub grant: OAuthGrant,
    /// The only authorization server (its `issuer`) this server may be authorized by;
    /// any other is refused. Without it, the one the server's metadata names is used,
    /// and a declared client secret goes to it.
    pub issuer: Option<String>,
    /// The PEM private key that signs client assertions, as declared: a `${NAME}`
    /// reference, interpolated only after approval.
    pub private_key: Option<String>,
    /// How the client assertion is signed (with `private_key`).
    pub signing_algorithm: Option<SigningAlgorithm>,
    /// The token endpoint authentication method; by default the one the authorization
    /// server's metadata and the declared credentials select.
    pub token_endpoint_auth_method: Option<TokenAuthMethod>,
}

impl OAuthDeclared {
    fn from_raw(raw: RawOAuth, errors: &mut Vec<(String, String)>) -> Self {
        let RawOAuth {
            client_id,
            client_secret,
            client_metadata_url,
            scopes,
            grant,
            issuer,
            private_key,
            signing_algorithm,
            token_endpoint_auth_method,
        } = raw;
        let mut problem = |field: &str, message: &str| {
            errors.push((format!("oauth.{field}"), message.to_string()));
        };
        for (field, value) in [
            ("client_secret", &client_secret),
            ("private_key", &private_key),
        ] {
            if value.as_deref().is_some_and(|v| !is_reference(v)) {
                problem(
                    field,
                    "must be a `${NAME}` reference to a host variable: a literal secret would be committed with the core",
                );
            }
            if value.is_some() && client_id.is_none() {
                problem(
                    field,
                    "needs `client_id`: a credential belongs to a client registered ahead",
                );
            }
        }
        if client_secret.is_some() && private_key.is_some() {
            problem(
                "private_key",
                "declare either `client_secret` or `private_key`, not both",
            );
        }
        match (&private_key, signing_algorithm) {
            (Some(_), None) => problem(
                "signing_algorithm",
                "`private_key` needs `signing_algorithm`: one of RS256, RS384, RS512, ES256, ES384",
            ),
            (None, Some(_)) => problem(
                "signing_algorithm",
                "only applies with `private_key`; remove it or declare the key",
            ),
            _ => {}
        }
        if let Some(url) = &client_metadata_url
            && !url.starts_with("https://")
        {
            problem(
                "client_metadata_url",
                "must be an https:// URL of a client ID metadata document",
            );
        }
        let grant = grant.unwrap_or_default();
        if grant == OAuthGrant::ClientCredentials
            && (client_id.is_none() || (client_secret.is_none() && private_key.is_none()))
        {
            problem(
                "grant",
                "`client_credentials` needs `client_id` and `client_secret` or `private_key`",
            );
        }
        if private_key.is_some() && grant != OAuthGrant::ClientCredentials {
            problem(
                "private_key",
                "signs client assertions for `grant: client_credentials` only; set the grant or use `client_secret`",
            );
        }
        let token_endpoint_auth_method = token_endpoint_auth_method
            .or(private_key.as_ref().map(|_| TokenAuthMethod::PrivateKeyJwt));
        let fits = match token_endpoint_auth_method {
            Some(TokenAuthMethod::ClientSecretBasic | TokenAuthMethod::ClientSecretPost) => {
                client_secret.is_some()
            }
            Some(TokenAuthMethod::PrivateKeyJwt) => private_key.is_some(),
            Some(TokenAuthMethod::None) => client_secret.is_none() && private_key.is_none(),
            None => true,
        };
        if !fits {
            problem(
                "token_endpoint_auth_method",
                "does not match the declared credentials: client_secret_basic and client_secret_post need `client_secret`, private_key_jwt needs `private_key`, none needs neither",
            );
        }
        let scopes = scopes.unwrap_or_default();
        if scopes
            .iter()
            .any(|s| s.is_empty() || s.contains(char::is_whitespace))
        {
            problem(
                "scopes",
                "a scope is one word; list each scope as its own item",
            );
        }
        if let Some(issuer) = &issuer
            && !(issuer.starts_with("https://") || issuer.starts_with("http://"))
        {
            problem(
                "issuer",
                "must be the http(s) URL of the authorization server",
            );
        }
        OAuthDeclared {
            client_id,
            client_secret,
            client_metadata_url,
            scopes,
            grant,
            issuer,
            private_key,
            signing_algorithm,
            token_endpoint_auth_method,
        }
    }

    /// The `${NAME}` references of this section, with their field names.
    pub fn references(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("oauth.client_secret", self.client_secret.as_deref()),
            ("oauth.private_key", self.private_key.as_deref()),
        ]
        .into_iter()
        .filter_map(|(field, value)| Some((field, value?)))
    }
}

/// Whether `value` is exactly one `${NAME}` reference.
fn is_reference(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

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
    resources: Option<RawToolFilter>,
    prompts: Option<RawToolFilter>,
    env_vars: Option<Vec<String>>,
    tool_timeouts: Option<BTreeMap<String, f64>>,
    required: Option<bool>,
    sandbox: Option<serde_yaml::Value>,
}

/// The least severe log message a server should send (`logging/setLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
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

/// Include/exclude globs over raw tool names (`*` is the only wildcard).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Empty means every tool.
    pub include: Vec<String>,
    /// Applied after `include`.
    pub exclude: Vec<String>,
}

/// What the host needs to start or reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A child process.
    Stdio {
        /// Program to run (looked up on the allowlisted `PATH` when not a path).
        command: String,
        /// Arguments, passed as is.
        args: Vec<String>,
        /// Declared environment entries, values still uninterpolated (`${NAME}`).
        env: BTreeMap<String, String>,
        /// Declared working directory, unresolved; `None` means the workspace root.
        cwd: Option<String>,
    },
    /// A streamable HTTP endpoint.
    StreamableHttp {
        /// The declared URL, parsed once at load.
        url: DeclaredUrl,
        /// Declared headers, values still uninterpolated.
        headers: BTreeMap<String, String>,
        /// How the server is authorized, when declared.
        oauth: Option<OAuthDeclared>,
    },
}

/// A validated server declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    /// The file stem: the identity of the server within its core.
    pub server_id: String,
    /// Path relative to the core root, with `/` separators (stable across machines).
    pub path: String,
    /// Absolute path of the file, for error messages.
    pub file: PathBuf,
    /// Disabled declarations are validated but never connected.
    pub enabled: bool,
    /// Transport and its parameters.
    pub endpoint: Endpoint,
    /// Which raw tool names become visible.
    pub tools: ToolFilter,
    /// Declared risk.
    pub risk: Risk,
    /// Declared approval policy (the host never applies anything weaker than `prompt`
    /// to connecting).
    pub approval_policy: ApprovalPolicy,
    /// The capability that calling this server's tools requires.
    pub call_capability: String,
    /// Bound on spawn/connect, initialize and listing tools.
    pub connect_timeout: Duration,
    /// Bound on one tool call.
    pub call_timeout: Duration,
    /// Per-tool call timeouts (`tool_timeouts`, by the server's own tool name), over
    /// `call_timeout`.
    pub tool_timeouts: BTreeMap<String, Duration>,
    /// A turn fails (`PrepareError::Required`) when this server cannot connect.
    pub required: bool,
    /// A stdio server's confinement, when declared (`sandbox:`); `None` runs it
    /// unconfined.
    pub sandbox: Option<crate::sandbox::Sandbox>,
    /// How far progress may extend a call: each progress notification restarts
    /// `call_timeout`, up to this in all (`max_timeout_seconds`).
    pub max_call_timeout: Option<Duration>,
    /// The server's roots, relative to the workspace (`roots:`); `None` means the
    /// workspace itself.
    pub roots: Option<Vec<String>>,
    /// The log level asked of the server after initialize.
    pub log_level: Option<LogLevel>,
    /// Which resources (by URI) and resource templates (by URI template) are visible.
    pub resources: ToolFilter,
    /// Which prompts (by name) are visible.
    pub prompts: ToolFilter,
    /// Whether calls to this server may overlap.
    pub supports_parallel_tool_calls: bool,
    /// sha256 over (server id, path, canonical declaration): changes when anything
    /// that could change behaviour changes.
    pub fingerprint: Fingerprint,
}

/// A sha256 digest, shown as 64 lowercase hex characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Fingerprint(Sha256::digest(bytes).into())
    }

    /// Lowercase hex.
    pub fn hex(&self) -> String {
        crate::digest::hex(&self.0)
    }

    /// The first 12 hex characters, for display.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.hex())
    }
}

/// Default bound on connecting: spawn or reach, initialize, every page of `tools/list`
/// (`docs/design.md#8-defaults`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on one call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Environment names a declaration may not set: the runtime's promises about the child.
const RESERVED_ENV: &[&str] = &["HOME"];

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
            resources,
            prompts,
            env_vars,
            tool_timeouts,
            required,
            sandbox,
        } = raw;
        let mut errors = Vec::new();
        let err = |field: &str, message: String| LoadError::new(&file, Some(field), None, message);
        let transport = transport.unwrap_or_default();

        let endpoint = match transport {
            TransportKind::Stdio => {
                for (field, present) in [("url", url.is_some()), ("headers", headers.is_some())] {
                    if present {
                        errors.push(err(
                            field,
                            format!("`{field}` is only for `transport: streamable_http`; remove it or change the transport"),
                        ));
                    }
                }
                let command = match command {
                    Some(c) if !c.trim().is_empty() => c,
                    Some(_) => {
                        errors.push(err(
                            "command",
                            "`command` is empty; name the program that starts the server".into(),
                        ));
                        String::new()
                    }
                    None => {
                        errors.push(err("command", "`transport: stdio` requires `command`; add the program that starts the server".into()));
                        String::new()
                    }
                };
                let mut env = env.unwrap_or_default();
                // `env_vars: [NAME]` is `NAME: ${NAME}`, passed through from the host.
                for name in env_vars.iter().flatten() {
                    let field = format!("env_vars.{}", crate::text::plain_name(name, "<name>"));
                    if env.contains_key(name) {
                        errors.push(err(&field, "is also under `env`; keep one".into()));
                    } else if !is_reference(&format!("${{{name}}}")) {
                        errors.push(err(
                            &field,
                            "not a variable name; use letters, digits and `_`".into(),
                        ));
                    } else {
                        env.insert(name.clone(), format!("${{{name}}}"));
                    }
                }
                for (name, value) in &env {
                    if crate::process::check_references(value).is_err() {
                        let field = format!("env.{}", crate::text::plain_name(name, "<name>"));
                        errors.push(err(
                            &field,
                            crate::process::UnsupportedReference.to_string(),
                        ));
                    }
                }
                for (index, arg) in args.iter().flatten().enumerate() {
                    if crate::process::check_references(arg).is_err() {
                        errors.push(err(
                            &format!("args[{index}]"),
                            crate::process::UnsupportedReference.to_string(),
                        ));
                    }
                }
                for name in env.keys() {
                    if let Some(problem) = env_name_problem(name) {
                        let field = format!("env.{}", crate::text::plain_name(name, "<name>"));
                        errors.push(err(&field, problem));
                    }
                }
                if let Some(dir) = &cwd
                    && dir.trim().is_empty()
                {
                    errors.push(err(
                        "cwd",
                        "`cwd` is empty; remove it to use the workspace root".into(),
                    ));
                }
                if oauth.is_some() {
                    errors.push(err(
                        "oauth",
                        "`oauth` is only for `transport: streamable_http`; remove it or change the transport".into(),
                    ));
                }
                Endpoint::Stdio {
                    command,
                    args: args.unwrap_or_default(),
                    env,
                    cwd,
                }
            }
            TransportKind::StreamableHttp => {
                for (field, present) in [
                    ("command", command.is_some()),
                    ("args", args.is_some()),
                    ("env", env.is_some()),
                    ("env_vars", env_vars.is_some()),
                    ("cwd", cwd.is_some()),
                ] {
                    if present {
                        errors.push(err(
                            field,
                            format!("`{field}` is only for `transport: stdio`; remove it or change the transport"),
                        ));
                    }
                }
                let url = match url.as_deref().map(DeclaredUrl::parse) {
                    Some(Ok(u)) => Some(u),
                    Some(Err(problem)) => {
                        errors.push(err("url", problem));
                        None
                    }
                    None => {
                        errors.push(err("url", "`transport: streamable_http` requires `url` with an http:// or https:// URL".into()));
                        None
                    }
                };
                let headers = headers.unwrap_or_default();
                for (name, value) in &headers {
                    if crate::process::check_references(value).is_err() {
                        let field = format!("headers.{}", crate::text::plain_name(name, "<name>"));
                        errors.push(err(
                            &field,
                            crate::process::UnsupportedReference.to_string(),
                        ));
                    }
                }
                for name in headers.keys() {
                    if !is_header_name(name) {
                        errors.push(err(
                            &format!("headers.{}", crate::text::plain_name(name, "<name>")),
                            "not a valid HTTP header name; use letters, digits and `-`".into(),
                        ));
                    }
                }
                let oauth = oauth.map(|raw| {
                    let mut problems = Vec::new();
                    let declared = OAuthDeclared::from_raw(raw, &mut problems);
                    for (field, message) in problems {
                        errors.push(err(&field, message));
                    }
                    declared
                });
                match url {
                    Some(url) => Endpoint::StreamableHttp {
                        url,
                        headers,
                        oauth,
                    },
                    // Errors were recorded: the declaration is not built.
                    None => return Err(errors),
                }
            }
        };

        let [tools, resources, prompts] = [
            ("tools", tools),
            ("resources", resources),
            ("prompts", prompts),
        ]
        .map(|(section, filter)| {
            let filter = filter.unwrap_or_default();
            for (list, globs) in [("include", &filter.include), ("exclude", &filter.exclude)] {
                for (i, glob) in globs.iter().enumerate() {
                    if glob.is_empty() {
                        errors.push(err(
                            &format!("{section}.{list}[{i}]"),
                            "empty pattern; remove it or write `*`".into(),
                        ));
                    }
                }
            }
            ToolFilter {
                include: filter.include,
                exclude: filter.exclude,
            }
        });
        for (i, root) in roots.iter().flatten().enumerate() {
            let climbs = std::path::Path::new(root)
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            if root.trim().is_empty() || std::path::Path::new(root).is_absolute() || climbs {
                errors.push(err(
                    &format!("roots[{i}]"),
                    "a root is a path relative to the workspace; write `.` for the workspace itself".into(),
                ));
            }
        }

        let call_capability = match capability {
            Some(c) if c.trim().is_empty() || c.contains(char::is_whitespace) => {
                errors.push(err("capability", "capability names contain no spaces; omit the field to use `mcp.call:<server_id>`".into()));
                String::new()
            }
            Some(c) => c,
            None => format!("mcp.call:{server_id}"),
        };
        let connect_timeout = seconds(
            connect_timeout_seconds,
            DEFAULT_CONNECT_TIMEOUT,
            "connect_timeout_seconds",
            &mut errors,
            &file,
        );
        let call_timeout = seconds(
            timeout_seconds,
            DEFAULT_CALL_TIMEOUT,
            "timeout_seconds",
            &mut errors,
            &file,
        );
        let tool_timeouts: BTreeMap<String, Duration> = tool_timeouts
            .unwrap_or_default()
            .into_iter()
            .map(|(tool, secs)| {
                let field = format!("tool_timeouts.{}", crate::text::plain_name(&tool, "<tool>"));
                let timeout = seconds(Some(secs), call_timeout, &field, &mut errors, &file);
                (tool, timeout)
            })
            .collect();
        let max_call_timeout = max_timeout_seconds.map(|max| {
            seconds(
                Some(max),
                call_timeout,
                "max_timeout_seconds",
                &mut errors,
                &file,
            )
        });
        if max_call_timeout.is_some_and(|max| max < call_timeout) {
            errors.push(err(
                "max_timeout_seconds",
                "is less than `timeout_seconds`; progress can only extend a call".into(),
            ));
        }

        let sandbox = match (&sandbox, transport) {
            (None, _) => None,
            (Some(_), TransportKind::StreamableHttp) => {
                errors.push(err(
                    "sandbox",
                    "is only for `transport: stdio` (the URL policy governs HTTP servers); remove it".into(),
                ));
                None
            }
            (Some(value), TransportKind::Stdio) => match crate::sandbox::Sandbox::parse(value) {
                Ok(sandbox) => Some(sandbox),
                Err((field, message)) => {
                    errors.push(err(&field, message));
                    None
                }
            },
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        // `${NAME}` in arguments is interpolated since 2026-12-02 (it was passed as
        // text): such a declaration is a new server, so no earlier approval covers
        // what it now sends.
        let interpolates_args = matches!(&endpoint, Endpoint::Stdio { args, .. }
            if args.iter().any(|a| a.contains("${")));
        let fingerprint = if interpolates_args {
            let marked = serde_json::json!({"args_interpolated": true, "declaration": canonical});
            fingerprint(&server_id, &path, &marked)
        } else {
            fingerprint(&server_id, &path, canonical)
        };
        Ok(Declaration {
            server_id,
            path,
            file,
            enabled: enabled.unwrap_or(true),
            endpoint,
            tools,
            resources,
            prompts,
            roots,
            log_level,
            max_call_timeout,
            tool_timeouts,
            required: required.unwrap_or(false),
            sandbox,
            risk: risk.unwrap_or(Risk::Medium),
            approval_policy: approval_policy.unwrap_or(ApprovalPolicy::Prompt),
            call_capability,
            connect_timeout,
            call_timeout,
            supports_parallel_tool_calls: supports_parallel_tool_calls.unwrap_or(false),
            fingerprint,
        })
    }

    /// The transport kind.
    pub fn transport(&self) -> TransportKind {
        match self.endpoint {
            Endpoint::Stdio { .. } => TransportKind::Stdio,
            Endpoint::StreamableHttp { .. } => TransportKind::StreamableHttp,
        }
    }

    /// What an approval of this server is bound to: its fingerprint, where it was
    /// declared (the absolute file, or the host's provenance for an in-memory one), the
    /// The host variables this declaration needs (`${NAME}` without a default in its
    /// env, args, headers and OAuth section), each with the field that names it, in
    /// declaration order.
    pub fn required_variables(&self) -> Vec<(String, String)> {
        let mut fields: Vec<(String, &str)> = Vec::new();
        match &self.endpoint {
            Endpoint::Stdio { args, env, .. } => {
                fields.extend(
                    args.iter()
                        .enumerate()
                        .map(|(i, a)| (format!("args[{i}]"), a.as_str())),
                );
                fields.extend(env.iter().map(|(k, v)| (format!("env.{k}"), v.as_str())));
            }
            Endpoint::StreamableHttp { headers, oauth, .. } => {
                fields.extend(
                    headers
                        .iter()
                        .map(|(k, v)| (format!("headers.{k}"), v.as_str())),
                );
                fields.extend(
                    oauth
                        .iter()
                        .flat_map(|o| o.references())
                        .map(|(field, v)| (field.to_string(), v)),
                );
            }
        }
        fields
            .into_iter()
            .flat_map(|(field, value)| {
                crate::process::required_names(value)
                    .into_iter()
                    .map(move |name| (field.clone(), name.to_string()))
            })
            .collect()
    }

    /// workspace it works in and its resolved `cwd` (a connect's), so an answer given
    /// for one core or one workspace never covers a copy of the declaration elsewhere.
    pub fn approval_identity(&self, workspace: &Path, cwd: Option<&Path>) -> Fingerprint {
        let form = serde_json::json!([
            self.fingerprint.hex(),
            self.file.display().to_string(),
            workspace.display().to_string(),
            cwd.map(|c| c.display().to_string()),
        ]);
        Fingerprint::of(form.to_string().as_bytes())
    }

    /// `mcp.connect:<server_id>`: required to spawn, connect and list tools.
    pub fn connect_capability(&self) -> String {
        format!("mcp.connect:{}", self.server_id)
    }

    /// The declaration shared cheaply between actors.
    pub fn shared(self) -> Arc<Self> {
        Arc::new(self)
    }
}

/// sha256 over a canonical JSON form of (server id, relative path, declaration).
/// Comments and formatting do not change it; any value does.
pub fn fingerprint(server_id: &str, path: &str, canonical: &serde_json::Value) -> Fingerprint {
    let form = serde_json::json!(["demiurge-mcp-server/v1", server_id, path, canonical]);
    Fingerprint::of(form.to_string().as_bytes())
}

fn seconds(
    value: Option<f64>,
    default: Duration,
    field: &str,
    errors: &mut Vec<LoadError>,
    file: &std::path::Path,
) -> Duration {
    match value {
        None => default,
        Some(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Duration::from_secs_f64(v),
        Some(_) => {
            errors.push(LoadError::new(
                file,
                Some(field),
                None,
                "must be a number of seconds above 0 and at most 86400".into(),
            ));
            default
        }
    }
}

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

/// Whether `name` can name an environment variable here: letters, digits and `_`, not
/// starting with a digit.
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` is an HTTP header name (an RFC 9110 token).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A declared streamable HTTP URL, parsed once when the declaration loads. It may
/// carry secrets (userinfo, query values): `Debug` shows the origin only, and nothing
/// else of it is ever printed.
#[derive(Clone, PartialEq, Eq)]
pub struct DeclaredUrl(url::Url);

impl DeclaredUrl {
    /// Parses an http(s) URL with a host.
    ///
    /// # Errors
    /// What is wrong, in words that never quote the URL.
    pub fn parse(raw: &str) -> Result<Self, String> {
        match url::Url::parse(raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                Ok(DeclaredUrl(u))
            }
            Ok(_) => Err("`url` must be an http:// or https:// URL with a host".into()),
            // The parser's reason names what is wrong (`invalid port number`), not the text.
            Err(e) => Err(format!(
                "`url` is not a valid URL ({e}); write an http:// or https:// URL"
            )),
        }
    }

    /// The URL, secrets included (for the transport and the redactor only).
    pub fn url(&self) -> &url::Url {
        &self.0
    }

    /// `scheme://host[:port]`: never userinfo, path, query or fragment.
    pub fn origin(&self) -> String {
        let host = self.0.host_str().unwrap_or("");
        match self.0.port() {
            Some(p) => format!("{}://{host}:{p}", self.0.scheme()),
            None => format!("{}://{host}", self.0.scheme()),
        }
    }
}

impl std::fmt::Debug for DeclaredUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeclaredUrl({})", self.origin())
    }
}

#[cfg(test)]
mod tests {
    use super::DeclaredUrl;

    #[test]
    fn the_origin_drops_credentials_path_query_and_fragment() {
        let u = DeclaredUrl::parse("https://u:p@example.test:8443/mcp?key=1#f").unwrap();
        assert_eq!(u.origin(), "https://example.test:8443");
        assert_eq!(format!("{u:?}"), "DeclaredUrl(https://example.test:8443)");
        let u = DeclaredUrl::parse("http://example.test/x").unwrap();
        assert_eq!(u.origin(), "http://example.test");
        assert!(DeclaredUrl::parse("ftp://example.test/").is_err());
    }
}
