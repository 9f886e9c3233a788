//! MCP server declarations (`agent/mcp/*.yaml`): the validated [`Declaration`] the
//! rest of the runtime uses (validation is `validate.rs`, the `oauth:` section
//! `oauth.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::oauth::OAuthDeclared;

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

/// The MCP protocol era a server is spoken to in (`protocol:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
pub enum Protocol {
    /// `2025-11-25`: the `initialize` handshake and its session.
    #[serde(rename = "2025-11-25")]
    V2025_11_25,
    /// `2026-07-28`: `server/discover`, then every request carries its version and the
    /// client's capabilities; no handshake, no session.
    #[serde(rename = "2026-07-28")]
    V2026_07_28,
    /// `auto`: `server/discover` first; `initialize` only when the server answered it
    /// as a legacy server does (a JSON-RPC error that is not one of the modern era's
    /// rejections; over stdio also silence for 10 s, never over HTTP). A failure of the
    /// transport, the URL policy, DNS, TLS or authorization fails the server: it is
    /// never retried in the older era. The default.
    #[default]
    #[serde(rename = "auto")]
    Auto,
}

impl Protocol {
    /// How the declaration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V2025_11_25 => "2025-11-25",
            Protocol::V2026_07_28 => "2026-07-28",
            Protocol::Auto => "auto",
        }
    }
}

/// What happens when a server serves a definition (tool, resource template, prompt,
/// instructions) other than the one a person approved (`pinning:`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Pinning {
    /// Nothing is pinned or compared.
    Off,
    /// A change is used at once, with an event and a diagnostic every turn until a
    /// person approves it.
    Warn,
    /// A change is left out of every turn until a person approves it. The default.
    #[default]
    Strict,
}

impl Pinning {
    /// How a declaration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Pinning::Off => "off",
            Pinning::Warn => "warn",
            Pinning::Strict => "strict",
        }
    }
}

/// When a server is started (`start:`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// Started for every turn that covers it, as soon as the turn is prepared.
    Eager,
    /// Listed from its last listing (same declaration, same approved pins, not
    /// expired) and started when a call, read or prompt first needs it; started at
    /// once when there is no such listing. The default.
    #[default]
    Lazy,
}

impl Start {
    /// How a declaration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Eager => "eager",
            Start::Lazy => "lazy",
        }
    }
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
    /// The protocol era the server is spoken to in (`protocol:`).
    pub protocol: Protocol,
    /// What the server serves is pinned how (`pinning:`); `None`: the host's default.
    pub pinning: Option<Pinning>,
    /// When the server is started (`start:`); `None`: the host's default.
    pub start: Option<Start>,
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

impl Declaration {
    /// The transport kind.
    pub fn transport(&self) -> TransportKind {
        match self.endpoint {
            Endpoint::Stdio { .. } => TransportKind::Stdio,
            Endpoint::StreamableHttp { .. } => TransportKind::StreamableHttp,
        }
    }

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

    /// What an approval of this server is bound to: its fingerprint, where it was
    /// declared (the absolute file, or the host's provenance for an in-memory one), the
    /// workspace it works in and its resolved `cwd` (a connect's), so an answer given
    /// for one core or one workspace never covers a copy of the declaration elsewhere.
    ///
    /// The digest is of the JSON array `[fingerprint, file, workspace, cwd]` (paths as
    /// lossy UTF-8, `cwd` `null` when none), written straight into sha256: approvals
    /// already given are bound to exactly these bytes.
    pub fn approval_identity(&self, workspace: &Path, cwd: Option<&Path>) -> Fingerprint {
        let form = (
            self.fingerprint.hex(),
            self.file.to_string_lossy(),
            workspace.to_string_lossy(),
            cwd.map(Path::to_string_lossy),
        );
        Fingerprint(crate::digest::sha256_json(&form).0)
    }

    /// `mcp.connect:<server_id>`: required to spawn, connect and list tools.
    pub fn connect_capability(&self) -> String {
        format!("mcp.connect:{}", self.server_id)
    }
}

/// sha256 over a canonical JSON form of (server id, relative path, declaration).
/// Comments and formatting do not change it; any value does.
pub fn fingerprint(server_id: &str, path: &str, canonical: &serde_json::Value) -> Fingerprint {
    let form = serde_json::json!(["demiurge-mcp-server/v1", server_id, path, canonical]);
    Fingerprint::of(form.to_string().as_bytes())
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
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    /// Approvals already given are bound to the identity's bytes: it is the digest of
    /// the JSON array a `serde_json::Value` of the same four strings writes, for paths
    /// of every kind (quotes, escapes, control characters, other scripts, bytes that are
    /// not UTF-8).
    #[test]
    fn the_approval_identity_digests_the_same_bytes_as_a_json_value() {
        let paths: Vec<PathBuf> = [
            &b"/w"[..],
            b"/home/a b/\"quoted\"/back\\slash",
            b"/tab\there/new\nline/\x01\x1f\x7f",
            b"/\xc3\xa9t\xc3\xa9/\xe2\x80\xa8/\xf0\x9f\x90\x8d",
            b"/not\xffutf8/\xc3(/\xed\xa0\x80",
            b"",
        ]
        .iter()
        .map(|b| PathBuf::from(OsStr::from_bytes(b)))
        .collect();
        let mut declaration = crate::core::parse_declaration_text(
            "command: x\n",
            "x".into(),
            "agent/mcp/x.yaml".into(),
            Path::new("agent/mcp/x.yaml"),
        )
        .expect("a test declaration loads");
        let before = |d: &super::Declaration, workspace: &Path, cwd: Option<&Path>| {
            let form = serde_json::json!([
                d.fingerprint.hex(),
                d.file.display().to_string(),
                workspace.display().to_string(),
                cwd.map(|c| c.display().to_string()),
            ]);
            super::Fingerprint::of(form.to_string().as_bytes())
        };
        let mut seen = std::collections::HashSet::new();
        for file in &paths {
            declaration.file.clone_from(file);
            for workspace in &paths {
                for cwd in std::iter::once(None).chain(paths.iter().map(|p| Some(p.as_path()))) {
                    let identity = declaration.approval_identity(workspace, cwd);
                    assert_eq!(identity, before(&declaration, workspace, cwd));
                    seen.insert(identity);
                }
            }
        }
        // Lossy paths meet (`\xff` and `\xed\xa0\x80` both read as U+FFFD) but most differ.
        assert!(seen.len() > 150, "{}", seen.len());
    }

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
