//! The `oauth:` section of a streamable HTTP declaration: as written, and validated
//! (credentials only as `${NAME}` references, and consistent with the grant and the
//! token endpoint's authentication method).

use serde::Deserialize;

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
    /// Validates the `oauth:` section; each problem goes to `errors` as `(field,
    /// message)`.
    pub(super) fn from_raw(raw: RawOAuth, errors: &mut Vec<(String, String)>) -> Self {
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
        let declared = OAuthDeclared {
            token_endpoint_auth_method: token_endpoint_auth_method
                .or(private_key.as_ref().map(|_| TokenAuthMethod::PrivateKeyJwt)),
            client_id,
            client_secret,
            client_metadata_url,
            scopes: scopes.unwrap_or_default(),
            grant: grant.unwrap_or_default(),
            issuer,
            private_key,
            signing_algorithm,
        };
        let mut problem = |field: &str, message: &str| {
            errors.push((format!("oauth.{field}"), message.to_string()));
        };
        declared.check_credentials(&mut problem);
        declared.check_grant(&mut problem);
        declared.check_urls_and_scopes(&mut problem);
        declared
    }

    /// The client secret or private key: references, with a client id, one of them,
    /// the key with its algorithm.
    fn check_credentials(&self, problem: &mut impl FnMut(&str, &str)) {
        for (field, value) in [
            ("client_secret", &self.client_secret),
            ("private_key", &self.private_key),
        ] {
            if value.as_deref().is_some_and(|v| !is_reference(v)) {
                problem(
                    field,
                    "must be a `${NAME}` reference to a host variable: a literal secret would be committed with the core",
                );
            }
            if value.is_some() && self.client_id.is_none() {
                problem(
                    field,
                    "needs `client_id`: a credential belongs to a client registered ahead",
                );
            }
        }
        if self.client_secret.is_some() && self.private_key.is_some() {
            problem(
                "private_key",
                "declare either `client_secret` or `private_key`, not both",
            );
        }
        match (&self.private_key, self.signing_algorithm) {
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
    }

    /// The grant and the token endpoint's authentication method against the declared
    /// credentials.
    fn check_grant(&self, problem: &mut impl FnMut(&str, &str)) {
        let (secret, key) = (self.client_secret.is_some(), self.private_key.is_some());
        if self.grant == OAuthGrant::ClientCredentials
            && (self.client_id.is_none() || (!secret && !key))
        {
            problem(
                "grant",
                "`client_credentials` needs `client_id` and `client_secret` or `private_key`",
            );
        }
        if key && self.grant != OAuthGrant::ClientCredentials {
            problem(
                "private_key",
                "signs client assertions for `grant: client_credentials` only; set the grant or use `client_secret`",
            );
        }
        let fits = match self.token_endpoint_auth_method {
            Some(TokenAuthMethod::ClientSecretBasic | TokenAuthMethod::ClientSecretPost) => secret,
            Some(TokenAuthMethod::PrivateKeyJwt) => key,
            Some(TokenAuthMethod::None) => !secret && !key,
            None => true,
        };
        if !fits {
            problem(
                "token_endpoint_auth_method",
                "does not match the declared credentials: client_secret_basic and client_secret_post need `client_secret`, private_key_jwt needs `private_key`, none needs neither",
            );
        }
    }

    /// The client metadata document's and the issuer's URLs, and the scopes.
    fn check_urls_and_scopes(&self, problem: &mut impl FnMut(&str, &str)) {
        if let Some(url) = &self.client_metadata_url
            && !url.starts_with("https://")
        {
            problem(
                "client_metadata_url",
                "must be an https:// URL of a client ID metadata document",
            );
        }
        if self
            .scopes
            .iter()
            .any(|s| s.is_empty() || s.contains(char::is_whitespace))
        {
            problem(
                "scopes",
                "a scope is one word; list each scope as its own item",
            );
        }
        if let Some(issuer) = &self.issuer
            && !(issuer.starts_with("https://") || issuer.starts_with("http://"))
        {
            problem(
                "issuer",
                "must be the http(s) URL of the authorization server",
            );
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
pub(super) fn is_reference(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}
