//! The connect approval preview: what a human sees before a server may start.
//!
//! It shows the shape of a declaration, never its secrets: env and header *names*,
//! a credential-free URL origin, and arguments summarized (`docs/design.md#2-authority`).

use serde::Serialize;

pub use super::fetched::{Ecosystem, Fetched, fetched};
use crate::core::{ApprovalPolicy, Declaration, Endpoint, Risk, TransportKind};
use crate::redact::SECRET_OPTION_MARKERS;

/// What the approver is shown before connecting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ConnectPreview {
    /// Server id (file stem).
    pub server: String,
    /// Declaration path relative to the core.
    pub path: String,
    /// How the server is reached (`stdio` or `streamable_http` in JSON).
    pub transport: TransportKind,
    /// The risk the declaration states about itself (the author's claim, shown so a
    /// human can weigh it, never trusted to loosen anything).
    pub risk: Risk,
    /// The approval policy the declaration asks for.
    pub declared_policy: ApprovalPolicy,
    /// The policy the host applies: the stricter of the declared one and its floor.
    pub effective_policy: ApprovalPolicy,
    /// `mcp.connect:<id>`.
    pub connect_capability: String,
    /// The call capability.
    pub call_capability: String,
    /// The protocol era asked for (`2025-11-25`, `2026-07-28`, `auto`).
    pub protocol: crate::core::Protocol,
    /// Stdio: the program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Stdio: the working directory as declared (`None`: the workspace root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd_declared: Option<String>,
    /// Stdio: the resolved working directory, once checked at connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Stdio: arguments with values summarized or redacted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Stdio: the server's confinement, in words (`sandbox:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Stdio: the host variables the arguments reference (`${NAME}`), interpolated
    /// after approval; names only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arg_variables: Vec<String>,
    /// Stdio: what a package runner (`npx`, `uvx`, `docker run`, ...) downloads and
    /// runs, when its command line can be read exactly ([`fetched`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fetches: Option<Fetched>,
    /// Stdio: declared environment names, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
    /// What the server served when last pinned whose text may hide something from a
    /// person (`tool `name`: invisible characters`), escaped; empty before its first
    /// listing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flagged: Vec<String>,
    /// What the declaration asks of pinning (`pinning:`), when it says; the host's
    /// default otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinning: Option<crate::core::Pinning>,
    /// HTTP: declared header names, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub header_names: Vec<String>,
    /// The declared roots (relative to the workspace); empty: the workspace itself;
    /// `(none)` for `roots: []`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<String>,
    /// HTTP: `scheme://host[:port]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// HTTP: the URL policy's verdict, once checked at connect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url_policy: Option<UrlPolicyPreview>,
    /// HTTP: how the server is authorized, when declared (never a secret: the client
    /// secret shows as the name of its variable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthPreview>,
}

/// The URL policy's verdict on an HTTP server's URL, as the approver sees it (an
/// approval is asked only after the policy allowed the URL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct UrlPolicyPreview {
    /// `allowed`.
    pub verdict: &'static str,
    /// The addresses the policy validated, which every request is pinned to.
    pub addresses: Vec<String>,
}

/// The `oauth:` section as an approver and a reviewer see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OAuthPreview {
    /// `authorization_code` or `client_credentials`.
    pub grant: crate::core::OAuthGrant,
    /// The pre-registered client id (a public identifier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The host variable the client secret comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret_from: Option<String>,
    /// The client ID metadata document.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Scopes asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The only authorization server allowed, when declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The host variable the client assertion's signing key comes from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_key_from: Option<String>,
    /// How client assertions are signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_algorithm: Option<crate::core::SigningAlgorithm>,
    /// The declared token endpoint authentication method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<crate::core::TokenAuthMethod>,
}

impl OAuthPreview {
    fn of(oauth: &crate::core::OAuthDeclared) -> Self {
        let variable = |reference: &Option<String>| {
            reference
                .as_deref()
                .map(|s| s.trim_start_matches("${").trim_end_matches('}').to_string())
        };
        OAuthPreview {
            grant: oauth.grant,
            client_id: oauth.client_id.clone(),
            client_secret_from: variable(&oauth.client_secret),
            client_metadata_url: oauth.client_metadata_url.clone(),
            scopes: oauth.scopes.clone(),
            issuer: oauth.issuer.clone(),
            private_key_from: variable(&oauth.private_key),
            signing_algorithm: oauth.signing_algorithm,
            token_endpoint_auth_method: oauth.token_endpoint_auth_method,
        }
    }
}

impl ConnectPreview {
    /// Builds the preview of `decl` with the host's `effective` policy, the resolved `cwd`
    /// (stdio) and the validated `addresses` (HTTP).
    pub fn new(
        decl: &Declaration,
        effective: ApprovalPolicy,
        cwd: Option<&std::path::Path>,
        addresses: &[String],
    ) -> Self {
        let mut preview = ConnectPreview {
            server: decl.server_id.clone(),
            path: decl.path.clone(),
            transport: decl.transport(),
            risk: decl.risk,
            declared_policy: decl.approval_policy,
            effective_policy: effective,
            connect_capability: decl.connect_capability(),
            call_capability: decl.call_capability.clone(),
            protocol: decl.protocol,
            command: None,
            cwd_declared: None,
            cwd: None,
            args: Vec::new(),
            arg_variables: Vec::new(),
            sandbox: None,
            fetches: None,
            env_names: Vec::new(),
            flagged: Vec::new(),
            pinning: decl.pinning,
            header_names: Vec::new(),
            roots: match &decl.roots {
                Some(roots) if roots.is_empty() => vec!["(none)".into()],
                roots => roots.clone().unwrap_or_default(),
            },
            origin: None,
            url_policy: None,
            oauth: None,
        };
        match &decl.endpoint {
            Endpoint::Stdio {
                command,
                args,
                env,
                cwd: declared_cwd,
            } => {
                preview.command = Some(command.clone());
                preview.sandbox = Some(crate::sandbox::Sandbox::describe(decl.sandbox.as_ref()));
                preview.cwd_declared = declared_cwd.clone();
                preview.cwd = cwd.map(|p| p.display().to_string());
                preview.args = summarize_args(args);
                let mut variables: Vec<String> = args
                    .iter()
                    .flat_map(|a| crate::process::referenced_names(a))
                    .collect();
                variables.sort();
                variables.dedup();
                preview.arg_variables = variables;
                let names: Vec<&str> = env.keys().map(String::as_str).collect();
                preview.fetches = fetched(command, args, &names);
                preview.env_names = env.keys().cloned().collect();
            }
            Endpoint::StreamableHttp {
                url,
                headers,
                oauth,
            } => {
                preview.origin = Some(url.origin());
                preview.url_policy = (!addresses.is_empty()).then(|| UrlPolicyPreview {
                    verdict: "allowed",
                    addresses: addresses.to_vec(),
                });
                preview.header_names = headers.keys().cloned().collect();
                preview.oauth = oauth.as_ref().map(OAuthPreview::of);
            }
        }
        preview
    }

    /// Multi-line text for a terminal prompt. Every field is escaped on its own
    /// ([`crate::text::escape`]): a command, option or path made of control characters
    /// cannot hide a line, forge one, or reorder what the approver reads.
    pub fn render(&self) -> String {
        use crate::text::escape as e;
        let mut out = format!(
            "MCP server `{}` ({}) wants to connect\n  transport: {} (MCP {})\n  risk: {}\n  policy: {} (declared {})\n  capabilities: {}, {}\n",
            e(&self.server),
            e(&self.path),
            self.transport.as_str(),
            self.protocol.as_str(),
            self.risk.as_str(),
            self.effective_policy.as_str(),
            self.declared_policy.as_str(),
            e(&self.connect_capability),
            e(&self.call_capability)
        );
        self.render_process(&mut out);
        self.render_remote(&mut out);
        if let Some(pinning) = self.pinning {
            out.push_str(&format!(
                "  pinning: {} (what the server serves, when it changes)\n",
                pinning.as_str()
            ));
        }
        for flagged in &self.flagged {
            out.push_str(&format!("  FLAGGED (as served last time): {flagged}\n"));
        }
        if let Some(oauth) = &self.oauth {
            oauth.render(&mut out);
        }
        out
    }

    /// A stdio server's lines: command, cwd, arguments, sandbox, fetched packages, env.
    fn render_process(&self, out: &mut String) {
        use crate::text::escape as e;
        if let Some(c) = &self.command {
            out.push_str(&format!("  command: {}\n", e(c)));
        }
        match (&self.cwd_declared, &self.cwd) {
            (Some(declared), Some(resolved)) => {
                out.push_str(&format!("  cwd: {} ({})\n", e(declared), e(resolved)));
            }
            (Some(declared), None) => out.push_str(&format!("  cwd: {}\n", e(declared))),
            (None, Some(resolved)) => {
                out.push_str(&format!("  cwd: {} (the workspace root)\n", e(resolved)));
            }
            (None, None) if self.command.is_some() => out.push_str("  cwd: the workspace root\n"),
            (None, None) => {}
        }
        if !self.args.is_empty() {
            out.push_str(&format!("  args: {}\n", listed(&self.args, " ")));
        }
        if let Some(sandbox) = &self.sandbox {
            out.push_str(&format!("  sandbox: {}\n", e(sandbox)));
        }
        if !self.arg_variables.is_empty() {
            out.push_str(&format!(
                "  args use host variables: {} (their values go on the command line, which other local users can read: pass secrets through env)\n",
                listed(&self.arg_variables, ", ")
            ));
        }
        if let Some(fetched) = &self.fetches {
            out.push_str(&format!(
                "  fetches and runs ({} {}): {}\n",
                fetched.runner,
                fetched.ecosystem.as_str(),
                listed(&fetched.packages, ", ")
            ));
            if let Some(runs) = &fetched.runs {
                out.push_str(&format!("    and runs the command {}\n", e(runs)));
            }
            out.push_str(
                "    (from the registry the runner's configuration names; a config file in cwd can name another)\n",
            );
        }
        if !self.env_names.is_empty() {
            out.push_str(&format!("  env: {}\n", listed(&self.env_names, ", ")));
        }
    }

    /// An HTTP server's lines (origin, URL policy, header names) and the roots.
    fn render_remote(&self, out: &mut String) {
        if let Some(o) = &self.origin {
            out.push_str(&format!("  url: {}\n", crate::text::escape(o)));
        }
        if let Some(policy) = &self.url_policy {
            out.push_str(&format!(
                "  url policy: {}, pinned to {}\n",
                policy.verdict,
                listed(&policy.addresses, ", ")
            ));
        }
        if !self.header_names.is_empty() {
            out.push_str(&format!(
                "  headers: {}\n",
                listed(&self.header_names, ", ")
            ));
        }
        if !self.roots.is_empty() {
            out.push_str(&format!("  roots: {}\n", listed(&self.roots, ", ")));
        }
    }
}

impl OAuthPreview {
    /// The `oauth:` lines of a connect preview.
    fn render(&self, out: &mut String) {
        use crate::text::escape as e;
        let grant = match self.grant {
            crate::core::OAuthGrant::AuthorizationCode => "authorization code (a user authorizes)",
            crate::core::OAuthGrant::ClientCredentials => "client credentials (headless)",
        };
        out.push_str(&format!("  oauth: {grant}\n"));
        if let Some(id) = &self.client_id {
            out.push_str(&format!("    client id: {}\n", e(id)));
        }
        if let Some(from) = &self.client_secret_from {
            out.push_str(&format!("    client secret from: ${{{}}}\n", e(from)));
        }
        if let (Some(from), Some(algorithm)) = (&self.private_key_from, self.signing_algorithm) {
            out.push_str(&format!(
                "    client assertions signed ({algorithm:?}) with the key from: ${{{}}}\n",
                e(from)
            ));
        }
        if let Some(method) = self.token_endpoint_auth_method {
            out.push_str(&format!("    token endpoint auth: {}\n", method.as_str()));
        }
        match (&self.issuer, &self.client_secret_from) {
            (Some(issuer), _) => {
                out.push_str(&format!("    authorization server: {} only\n", e(issuer)));
            }
            (None, Some(_)) => out.push_str(
                "    the secret goes to whichever authorization server the server names (pin one with oauth.issuer)\n",
            ),
            (None, None) => {}
        }
        if let Some(url) = &self.client_metadata_url {
            out.push_str(&format!("    client metadata: {}\n", e(url)));
        }
        if !self.scopes.is_empty() {
            out.push_str(&format!("    scopes: {}\n", listed(&self.scopes, " ")));
        }
    }
}

/// Items escaped for a terminal, joined by `sep`.
fn listed(items: &[String], sep: &str) -> String {
    items
        .iter()
        .map(|i| crate::text::escape(i).into_owned())
        .collect::<Vec<_>>()
        .join(sep)
}

/// `<value sha256:H12 length:N>`.
pub fn value_summary(value: &str) -> String {
    let digest = crate::digest::sha256_hex(value.as_bytes());
    format!(
        "<value sha256:{} length:{}>",
        &digest[..12],
        value.chars().count()
    )
}

/// The normalized name of an option item (`--API-Key=x` is `api_key`), or `None` for a
/// positional.
pub fn option_name(item: &str) -> Option<String> {
    if !item.starts_with('-') || item == "-" {
        return None;
    }
    let name = item.split('=').next().unwrap_or(item);
    Some(
        name.trim_start_matches('-')
            .to_lowercase()
            .replace('-', "_"),
    )
}

/// Whether an option of this normalized name carries a secret.
pub fn is_secret_option(name: &str) -> bool {
    SECRET_OPTION_MARKERS.iter().any(|m| name.contains(m))
}

/// Arguments as shown to approvers (`docs/design.md#2-authority`).
///
/// ```
/// use demiurge_mcp::authority::preview::summarize_args;
/// let shown = summarize_args(&["--token".into(), "s3cret".into(), "-y".into()]);
/// assert_eq!(shown, ["--token=<redacted>", "-y"]);
/// ```
pub fn summarize_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut iter = args.iter().peekable();
    while let Some(item) = iter.next() {
        match option_name(item) {
            None => out.push(value_summary(item)),
            Some(name) => {
                let flag = item.split('=').next().unwrap_or(item);
                let value = item.split_once('=').map(|(_, v)| v);
                if is_secret_option(&name) {
                    if value.is_none() {
                        // The secret is the next item; consume it so it is never summarized.
                        iter.next();
                    }
                    out.push(format!("{flag}=<redacted>"));
                } else if let Some(v) = value {
                    out.push(format!("{flag}={}", value_summary(v)));
                } else {
                    out.push(flag.to_string());
                }
            }
        }
    }
    out
}

/// Values of secret-bearing options in `args`, with their option names: secrets the
/// redactor must know.
pub fn secret_arg_values(args: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(item) = iter.next() {
        if let Some(name) = option_name(item)
            && is_secret_option(&name)
        {
            match item.split_once('=') {
                Some((_, v)) => out.push((name, v.to_string())),
                None => {
                    if let Some(v) = iter.next() {
                        out.push((name, v.clone()));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn option_names_are_normalized() {
        assert_eq!(option_name("--API-Key=x").as_deref(), Some("api_key"));
        assert_eq!(option_name("-v").as_deref(), Some("v"));
        assert_eq!(option_name("value"), None);
    }

    #[test]
    fn args_are_summarized_and_secrets_redacted() {
        let out = summarize_args(&s(&[
            "-y",
            "pkg",
            "--token",
            "abc",
            "--api-key=xyz",
            "--mode=fast",
        ]));
        assert_eq!(out[0], "-y");
        assert_eq!(out[1], value_summary("pkg"));
        assert!(out[1].starts_with("<value sha256:") && out[1].ends_with("length:3>"));
        assert_eq!(out[2], "--token=<redacted>");
        assert_eq!(out[3], "--api-key=<redacted>");
        assert_eq!(out[4], format!("--mode={}", value_summary("fast")));
        assert_eq!(out.len(), 5);
        let joined = out.join(" ");
        assert!(!joined.contains("abc") && !joined.contains("xyz") && !joined.contains("fast"));
    }

    #[test]
    fn secret_values_are_collected() {
        let v = secret_arg_values(&s(&[
            "--Password",
            "hunter2",
            "--x=1",
            "--client-secret=s3",
        ]));
        assert_eq!(
            v,
            vec![
                ("password".into(), "hunter2".into()),
                ("client_secret".into(), "s3".into())
            ]
        );
    }

    #[test]
    fn summary_counts_chars_not_bytes() {
        assert!(value_summary("é").ends_with("length:1>"));
    }
}
