//! The user's authorization of a remote server (OAuth), a host decision like an
//! approval: the runtime asks the host's [`Authorizer`] with the authorization URL, and
//! the host (a browser, a link shown to a person, a headless test harness) answers with
//! the URL the authorization server redirected back to. It is asked only after the
//! connect capability and the connect approval, and only when the server asked for
//! authorization (401) or a broader one (403 `insufficient_scope`).

use futures::future::BoxFuture;
use serde::Serialize;

/// What the host is asked to authorize.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct AuthorizationPrompt {
    /// Session asking.
    pub session: String,
    /// Server id.
    pub server: String,
    /// The issuer whose metadata was fetched and checked: who is asking the user for
    /// authority (the protected resource named it, or the declaration's
    /// `oauth.issuer` pinned it).
    pub issuer: String,
    /// The authorization endpoint's origin (`scheme://host[:port]`): the issuer's own,
    /// unless the declaration's `oauth.issuer` names this issuer.
    pub authorization_server: String,
    /// Where to send the user: the authorization endpoint with the client, PKCE
    /// challenge, state, scopes and resource. It carries no secret of ours.
    pub url: String,
    /// Where the authorization server sends the user back (from
    /// [`Authorizer::redirect_uri`]).
    pub redirect_uri: String,
    /// The scopes asked for.
    pub scopes: Vec<String>,
}

impl AuthorizationPrompt {
    /// Text for a terminal, every untrusted field escaped.
    pub fn render(&self) -> String {
        let e = crate::text::escape;
        let endpoint = if origin(&self.issuer) == self.authorization_server {
            String::new()
        } else {
            format!(
                " (its authorization page is at {})",
                e(&self.authorization_server)
            )
        };
        format!(
            "MCP server `{}` needs authorization from the issuer {}{endpoint}\n  scopes: {}\n  open this URL to authorize:\n  {}\n",
            e(&self.server),
            e(&self.issuer),
            if self.scopes.is_empty() {
                "(the server's default)".to_string()
            } else {
                e(&self.scopes.join(" ")).into_owned()
            },
            e(&self.url)
        )
    }
}

/// `scheme://host[:port]` of `url` (empty when it does not parse).
fn origin(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

/// How an authorization the user gave ended, once its code was exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuthorizationOutcome {
    /// The code was exchanged for a token.
    Authorized,
    /// The exchange failed, or the redirect did not belong to this flow: no token.
    Failed,
}

/// The host's way to let a user authorize a remote server.
pub trait Authorizer: Send + Sync + 'static {
    /// The redirect URI registered with the authorization server (a loopback URL the
    /// host listens on, or any URL a headless host intercepts).
    fn redirect_uri(&self) -> String;

    /// Lets the user authorize; answers the full URL the authorization server
    /// redirected to (with its `code` and `state`), or `None` when the user declined or
    /// there is nobody to ask. Dropped unfinished when the requester goes away.
    fn authorize(&self, prompt: AuthorizationPrompt) -> BoxFuture<'static, Option<String>>;

    /// The flow whose redirect came back to `redirect_uri` ended with `outcome` (after
    /// the token exchange): a host that answered the browser's redirect can now tell
    /// the user the truth. Does nothing by default.
    fn finished(&self, redirect_uri: &str, outcome: AuthorizationOutcome) {
        let _ = (redirect_uri, outcome);
    }
}

/// Nobody to ask: every authorization is declined, and the server fails with a message
/// naming `demiurge auth login`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAuthorizer;

impl Authorizer for NoAuthorizer {
    fn redirect_uri(&self) -> String {
        "http://127.0.0.1/callback".into()
    }

    fn authorize(&self, _prompt: AuthorizationPrompt) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { None })
    }
}
