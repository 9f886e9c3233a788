//! OAuth 2.1 for streamable HTTP servers, by rmcp's authorization state machine
//! (protected resource metadata, authorization server metadata with OpenID fallback,
//! dynamic registration or a client ID metadata document or a pre-registered client,
//! PKCE, resource indicators, scope selection, refresh), every request of it carried by
//! [`PinnedOAuth`] under the URL policy.
//!
//! Tokens are secrets of their connection: the connect step adds every token, code and
//! client secret it knows to the connection's redactor. They persist, 0600 under
//! `<home>/oauth/`, one file per server identity and resource, so a restart does not
//! ask again; a refresh token that no longer works asks again.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, ClientCredentialsConfig, JwtSigningAlgorithm, OAuthHttpClient,
};

use crate::authority::{AuthorizationPrompt, Authorizer};
use crate::core::{OAuthDeclared, OAuthGrant, SigningAlgorithm, TokenAuthMethod};
use crate::net::NetContext;
use crate::net::oauth::{OAuthDecisionHook, PinnedOAuth};

mod step_up;
mod store;

pub use step_up::MAX_STEP_UPS;
pub(crate) use step_up::StepUp;
use store::FileStore;
pub use store::{token_file, token_files_of};

/// The longest a user may take to authorize in a browser.
pub const AUTHORIZATION_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest the network part of one OAuth phase may take (discovery with
/// registration, or the token exchange): every request has its own bound, and this one
/// bounds how many a server can chain.
pub const OAUTH_PHASE_TIMEOUT: Duration = Duration::from_secs(60);

async fn within<T>(
    phase: &str,
    work: impl std::future::Future<Output = Result<T, OAuthFailure>>,
) -> Result<T, OAuthFailure> {
    tokio::time::timeout(OAUTH_PHASE_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| {
            Err(OAuthFailure(format!(
                "OAuth {phase} did not finish within {}s",
                OAUTH_PHASE_TIMEOUT.as_secs()
            )))
        })
}

/// What one connection needs to authorize.
#[derive(Clone)]
pub(crate) struct OAuthLaunch {
    /// The declared `oauth:` section, its client secret interpolated.
    pub declared: Option<OAuthDeclared>,
    /// Who lets the user authorize.
    pub authorizer: Arc<dyn Authorizer>,
    /// Where this server's tokens persist; `None` keeps them in memory.
    pub store: Option<PathBuf>,
    /// The connection's learned secrets: every token stored or loaded is added, so
    /// a refreshed or stepped-up token is hidden like the first.
    pub learned: Arc<crate::redact::Learned>,
    /// Called with each OAuth request's step and URL decision.
    pub on_decision: OAuthDecisionHook,
    /// For the prompt.
    pub session: String,
    /// For the prompt.
    pub server: String,
}

impl std::fmt::Debug for OAuthLaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthLaunch")
            .field("server", &self.server)
            .field("declared", &self.declared.is_some())
            .finish()
    }
}

/// Why a connection could not be authorized, in words that name no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OAuthFailure(pub String);

/// A failure of `step` in words of ours: rmcp's texts of a refused or unreadable answer
/// can quote the authorization server's response (a parse error carries the body), so
/// only the kind of failure is said, and the URLs this runtime itself requested.
fn failed(step: &str, e: &AuthError) -> OAuthFailure {
    let why = match e {
        AuthError::AuthorizationRequired => "authorization is required".to_string(),
        AuthError::AuthorizationFailed(_) => "the authorization was refused or its answer could not be read".into(),
        AuthError::TokenExchangeFailed(_) => "the authorization server refused the token request or its answer could not be read".into(),
        AuthError::TokenRefreshFailed(_) => "the token could not be refreshed".into(),
        AuthError::TokenRefreshRejected(_) => "the authorization server rejected the refresh token".into(),
        AuthError::CredentialStoreError(_) => "the token store could not be read or written".into(),
        AuthError::DiscoveryRequestFailed { url, .. } => {
            format!("the metadata request to {} failed", origin_of(url.as_str()))
        }
        AuthError::ProtectedResourceMetadataInvalid { url, .. } => format!(
            "the protected resource metadata at {} is unusable",
            origin_of(url.as_str())
        ),
        AuthError::AuthorizationServersUnavailable { .. } => {
            "none of the authorization servers the resource names published usable metadata".into()
        }
        // RFC 9207: the authorization response's `iss` is checked when the code comes back.
        AuthError::AuthorizationServerMismatch { .. } if step == "token exchange" => {
            "issuer mismatch: the authorization response names another issuer (`iss`) than the authorization server this flow used; nothing was exchanged".into()
        }
        AuthError::AuthorizationServerMissingIssuer { .. } => {
            "the authorization response carries no issuer (`iss`), which its authorization server says it sends; nothing was exchanged".into()
        }
        AuthError::AuthorizationServerMismatch { .. } => {
            "issuer mismatch: the authorization server metadata names another issuer than the one it was fetched for".into()
        }
        AuthError::PkceUnsupported => "the authorization server does not support PKCE (S256)".into(),
        AuthError::NoAuthorizationSupport => "the server offers no authorization".into(),
        AuthError::TokenExpired => "the token expired".into(),
        _ => "the authorization server's answer was refused".into(),
    };
    OAuthFailure(format!("OAuth {step} failed: {why}"))
}

/// A manager for `base_url` whose every request goes through the pinned client, with
/// this connection's persistent store.
async fn manager(
    base_url: &str,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Result<AuthorizationManager, OAuthFailure> {
    let client: Arc<dyn OAuthHttpClient> = Arc::new(
        PinnedOAuth::new(Arc::clone(net), Arc::clone(&launch.on_decision))
            .learning(Arc::clone(&launch.learned)),
    );
    let mut manager = AuthorizationManager::new_with_oauth_http_client(base_url, client)
        .await
        .map_err(|e| failed("setup", &e))?;
    manager.set_credential_store(FileStore::new(
        launch.store.clone(),
        Arc::clone(&launch.learned),
    ));
    Ok(manager)
}

/// A manager with stored credentials for this server, when there are any.
pub(crate) async fn stored(
    base_url: &str,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Option<AuthorizationManager> {
    launch.store.as_ref().filter(|p| p.exists())?;
    let mut manager = manager(base_url, net, launch).await.ok()?;
    // The same discovery rules as a new flow (the 2025-03-26 exception, the pinned
    // issuer, the declared method) before any stored token is used.
    discover(&mut manager, base_url, None, net, launch)
        .await
        .ok()?;
    match manager.initialize_from_store().await {
        Ok(true) => Some(manager),
        _ => None,
    }
}

/// Obtains a token for a server that answered with `challenge`: the declared client
/// credentials grant, or the authorization code flow through the host's authorizer.
pub(crate) async fn authorize(
    base_url: &str,
    challenge: &str,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Result<AuthorizationManager, OAuthFailure> {
    let prepared = within("discovery", prepare(base_url, challenge, net, launch)).await?;
    let (session, metadata) = match prepared {
        Prepared::Granted(manager) => return Ok(*manager),
        Prepared::Session(waiting) => *waiting,
    };
    // What is opened in a browser is held to the authorization endpoint's rule too.
    if origin_of(&session.auth_url) != origin_of(&metadata.authorization_endpoint) {
        return Err(OAuthFailure(
            "OAuth authorization failed: the authorization URL is not on the authorization endpoint's origin; nothing was opened".into(),
        ));
    }
    let redirect_uri = session.redirect_uri.clone();
    let prompt = AuthorizationPrompt {
        session: launch.session.clone(),
        server: launch.server.clone(),
        issuer: issuer_of(&metadata, base_url),
        authorization_server: origin_of(&metadata.authorization_endpoint),
        url: session.auth_url.clone(),
        redirect_uri: redirect_uri.clone(),
        scopes: scopes_of(&session.auth_url),
    };
    let answered =
        tokio::time::timeout(AUTHORIZATION_TIMEOUT, launch.authorizer.authorize(prompt)).await;
    let Ok(Some(redirected)) = answered else {
        return Err(OAuthFailure(format!(
            "the server needs authorization and none was given; run `demiurge auth login {}` on a terminal",
            crate::text::escape(&launch.server)
        )));
    };
    // The code is a secret of this connection from the moment it arrives.
    learn_query(&launch.learned, &redirected);
    let exchanged = if same_endpoint(&redirected, &redirect_uri) {
        within("token exchange", async {
            session
                .handle_callback_url(&redirected)
                .await
                .map_err(|e| failed("token exchange", &e))
        })
        .await
    } else {
        // A code delivered to another flow's redirect URI was issued for another
        // authorization server: it is never redeemed here.
        Err(OAuthFailure(
            "OAuth token exchange failed: the authorization came back to another redirect URI than this flow's; nothing was exchanged".into(),
        ))
    };
    let outcome = match exchanged {
        Ok(_) => crate::authority::AuthorizationOutcome::Authorized,
        Err(_) => crate::authority::AuthorizationOutcome::Failed,
    };
    launch.authorizer.finished(&redirect_uri, outcome);
    exchanged.map(|_| session.auth_manager)
}

/// The issuer `metadata` names, or the MCP server's origin when it names none (the
/// 2025-03-26 fallback endpoints are that origin's).
fn issuer_of(metadata: &AuthorizationMetadata, base_url: &str) -> String {
    metadata
        .issuer
        .clone()
        .unwrap_or_else(|| origin_of(base_url))
}

/// Whether `redirected` came back to `redirect_uri` itself: the same scheme, host,
/// port and path.
fn same_endpoint(redirected: &str, redirect_uri: &str) -> bool {
    match (url::Url::parse(redirected), url::Url::parse(redirect_uri)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin() && a.path() == b.path(),
        _ => false,
    }
}

/// Learns the values of a redirect URL's query (its `code`, `state`, `iss`) as secrets
/// of the connection.
fn learn_query(learned: &crate::redact::Learned, url: &str) {
    if let Ok(parsed) = url::Url::parse(url) {
        for (key, value) in parsed.query_pairs() {
            match key.as_ref() {
                "code" => learned.learn("oauth_code", &value),
                "state" => learned.learn("oauth_state", &value),
                _ => {}
            }
        }
    }
}

/// `redirect_uri` bound to one authorization server: its path gets the first 12 hex
/// characters of the issuer's digest (`/callback/3f0c9a1b2d4e`), so a redirect can be
/// told apart by the flow it belongs to and a code one authorization server issued is
/// never sent to another's token endpoint (mix-up). A redirect URI that does not parse
/// is kept as it is.
fn bound_to_issuer(redirect_uri: &str, issuer: &str) -> String {
    let Ok(mut url) = url::Url::parse(redirect_uri) else {
        return redirect_uri.to_string();
    };
    let tag = &crate::digest::sha256_hex(issuer.as_bytes())[..12];
    let path = format!("{}/{tag}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.to_string()
}

/// The authorization endpoint a browser will be sent to, checked against its issuer:
/// https (http only on the issuer's own loopback origin, which the URL policy already
/// let this runtime reach), no credentials in it, on the issuer's origin unless the
/// declaration's `oauth.issuer` names this issuer, and never a loopback or private
/// address of another origin (another local service).
///
/// Metadata that names no issuer (the 2025-03-26 fallback to the MCP server's own
/// `/authorize`) is the MCP server's origin's.
fn check_authorization_endpoint(
    metadata: &AuthorizationMetadata,
    declared_issuer: Option<&str>,
    base_url: &str,
) -> Result<(), OAuthFailure> {
    let refuse = |why: &str| {
        Err(OAuthFailure(format!(
            "OAuth discovery failed: the authorization endpoint {why}; nothing was opened"
        )))
    };
    let Ok(endpoint) = url::Url::parse(&metadata.authorization_endpoint) else {
        return refuse("is not a URL");
    };
    let issuer = url::Url::parse(&issuer_of(metadata, base_url)).ok();
    let same_origin = issuer
        .as_ref()
        .is_some_and(|i| i.origin() == endpoint.origin());
    use crate::net::policy::{Block, classify};
    let class = match endpoint.host() {
        Some(url::Host::Ipv4(a)) => classify(a.into()),
        Some(url::Host::Ipv6(a)) => classify(a.into()),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if crate::net::policy::is_metadata_name(&name) {
                Some(Block::Metadata)
            } else if crate::net::policy::is_localhost_name(&name) {
                Some(Block::Loopback)
            } else {
                None
            }
        }
        None => Some(Block::InvalidUrl),
    };
    let local = class.is_some();
    match endpoint.scheme() {
        "https" => {}
        "http" if class == Some(Block::Loopback) && same_origin => {}
        "http" => return refuse("is plain http on a public or other origin"),
        _ => return refuse("is not an https URL"),
    }
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        return refuse("carries credentials");
    }
    if local && !same_origin {
        return refuse("is a local or private address of another origin than the issuer's");
    }
    let pinned = declared_issuer.is_some_and(|p| {
        metadata.issuer.as_deref().map(|i| i.trim_end_matches('/')) == Some(p.trim_end_matches('/'))
    });
    if !same_origin && !pinned {
        return refuse(
            "is on another origin than its issuer; name this issuer in the declaration's oauth.issuer to allow it",
        );
    }
    Ok(())
}

/// What discovery led to: a token already (client credentials), or a session waiting
/// for the user.
enum Prepared {
    Granted(Box<AuthorizationManager>),
    Session(Box<(AuthorizationSession, AuthorizationMetadata)>),
}

/// Discovery from the challenge, then the client credentials grant or the
/// authorization session (registration included).
async fn prepare(
    base_url: &str,
    challenge: &str,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Result<Prepared, OAuthFailure> {
    let mut manager = manager(base_url, net, launch).await?;
    let metadata = discover(&mut manager, base_url, Some(challenge), net, launch).await?;
    let declared = launch.declared.clone().unwrap_or_default();
    if declared.grant == OAuthGrant::ClientCredentials {
        let config = client_credentials(&declared, base_url);
        manager
            .configure_client_credentials(&config)
            .map_err(|e| failed("client configuration", &e))?;
        let manager = exchange_client_credentials(manager, config).await?;
        return Ok(Prepared::Granted(Box::new(manager)));
    }
    // A client this runtime registers gets a redirect URI of its own per authorization
    // server; a pre-registered one (or one described by its metadata document) keeps
    // the URI its operator registered.
    let redirect_uri = match (&declared.client_id, &declared.client_metadata_url) {
        (None, None) => bound_to_issuer(
            &launch.authorizer.redirect_uri(),
            &issuer_of(&metadata, base_url),
        ),
        _ => launch.authorizer.redirect_uri(),
    };
    let mut request = AuthorizationRequest::new(redirect_uri.clone())
        .with_challenge(challenge)
        .with_client_name("demiurge-mcp");
    if !declared.scopes.is_empty() {
        request = request.with_scopes(declared.scopes.clone());
    }
    if let Some(id) = &declared.client_id {
        request = request.with_preregistered_client(id.clone());
    }
    if let Some(secret) = &declared.client_secret {
        request = request.with_client_secret(secret.clone());
    }
    if let Some(url) = &declared.client_metadata_url {
        request = request.with_client_metadata_url(url.clone());
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| failed("registration", &e))?;
    Ok(Prepared::Session(Box::new((session, metadata))))
}

/// Discovery from `challenge` (or from the server alone), under this runtime's rules:
/// an issuer mismatch excused only in the 2025-03-26 layout, the declared
/// `oauth.issuer` and `oauth.token_endpoint_auth_method` enforced; the metadata is set
/// on `manager` and returned.
async fn discover(
    manager: &mut AuthorizationManager,
    base_url: &str,
    challenge: Option<&str>,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Result<AuthorizationMetadata, OAuthFailure> {
    let mut metadata = match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolution) => resolution.metadata,
        Err(AuthError::AuthorizationServerMismatch {
            expected_issuer,
            received_issuer,
        }) if same_origin_legacy(base_url, &expected_issuer, &received_issuer) => {
            legacy_metadata(base_url, &received_issuer, net, launch).await?
        }
        Err(e) => return Err(failed("discovery", &e)),
    };
    let declared = launch.declared.clone().unwrap_or_default();
    if let Some(pinned) = &declared.issuer {
        let named = metadata.issuer.as_deref().unwrap_or_default();
        if named.trim_end_matches('/') != pinned.trim_end_matches('/') {
            return Err(OAuthFailure(
                "the server names an authorization server other than the declared oauth.issuer; no client secret or token request was sent to it".into(),
            ));
        }
    }
    check_authorization_endpoint(&metadata, declared.issuer.as_deref(), base_url)?;
    if let Some(method) = declared.token_endpoint_auth_method {
        only_method(&mut metadata, method)?;
    }
    manager.set_metadata(metadata.clone());
    Ok(metadata)
}

/// rmcp's client credentials exchange, whose future is not `Send` (rmcp 3.11 keeps a
/// form serializer across an await when it signs assertions): driven on a blocking
/// thread through the runtime's handle, so its requests still use this runtime's
/// pinned client. It ends with its caller (a dropped connect, the phase deadline) or
/// after [`OAUTH_PHASE_TIMEOUT`] of its own; a token it had not stored by then is
/// never stored.
async fn exchange_client_credentials(
    manager: AuthorizationManager,
    config: ClientCredentialsConfig,
) -> Result<AuthorizationManager, OAuthFailure> {
    let handle = tokio::runtime::Handle::current();
    let cancel = tokio_util::sync::CancellationToken::new();
    let _ends_with_caller = cancel.clone().drop_guard();
    let exchanged = tokio::task::spawn_blocking(move || {
        let result = handle.block_on(async {
            tokio::select! {
                result = manager.exchange_client_credentials(&config) => Some(result),
                () = cancel.cancelled() => None,
                () = tokio::time::sleep(OAUTH_PHASE_TIMEOUT) => None,
            }
        });
        (manager, result)
    })
    .await;
    match exchanged {
        Ok((manager, Some(Ok(_)))) => Ok(manager),
        Ok((_, Some(Err(e)))) => Err(failed("client credentials grant", &e)),
        Ok((_, None)) | Err(_) => Err(OAuthFailure(format!(
            "OAuth client credentials grant did not finish within {}s",
            OAUTH_PHASE_TIMEOUT.as_secs()
        ))),
    }
}

/// The client credentials grant as declared: a signed client assertion when a private
/// key is declared, else the client secret.
fn client_credentials(declared: &OAuthDeclared, resource: &str) -> ClientCredentialsConfig {
    let client_id = declared.client_id.clone().unwrap_or_default();
    let scopes = declared.scopes.clone();
    let resource = Some(resource.to_string());
    match (&declared.private_key, declared.signing_algorithm) {
        (Some(key), Some(algorithm)) => ClientCredentialsConfig::PrivateKeyJwt {
            client_id,
            signing_key: key.as_bytes().to_vec(),
            signing_algorithm: match algorithm {
                SigningAlgorithm::RS256 => JwtSigningAlgorithm::RS256,
                SigningAlgorithm::RS384 => JwtSigningAlgorithm::RS384,
                SigningAlgorithm::RS512 => JwtSigningAlgorithm::RS512,
                SigningAlgorithm::ES256 => JwtSigningAlgorithm::ES256,
                SigningAlgorithm::ES384 => JwtSigningAlgorithm::ES384,
            },
            token_endpoint_audience: None,
            scopes,
            resource,
        },
        _ => ClientCredentialsConfig::ClientSecret {
            client_id,
            client_secret: declared.client_secret.clone().unwrap_or_default(),
            scopes,
            resource,
        },
    }
}

/// Narrows the methods the authorization server offers to the declared one, so rmcp
/// uses it; a server that lists methods and not this one, or lists them in a shape
/// that is not a list, is refused before any credential is sent. A server that lists
/// none is taken to offer it (many omit the field).
fn only_method(
    metadata: &mut AuthorizationMetadata,
    method: TokenAuthMethod,
) -> Result<(), OAuthFailure> {
    const FIELD: &str = "token_endpoint_auth_methods_supported";
    let offered = metadata.additional_fields.get(FIELD).map(|v| {
        v.as_array()
            .is_some_and(|methods| methods.iter().any(|m| m.as_str() == Some(method.as_str())))
    });
    if offered == Some(false) {
        return Err(OAuthFailure(
            "the authorization server does not offer the declared oauth.token_endpoint_auth_method; no credential was sent to it".into(),
        ));
    }
    metadata
        .additional_fields
        .insert(FIELD.into(), serde_json::json!([method.as_str()]));
    Ok(())
}

/// Whether an issuer mismatch is the 2025-03-26 layout: the metadata was looked for at
/// the root of the MCP server's own origin (no protected resource metadata, or one that
/// names that origin) and names an issuer on that same origin, only with a path. The origin that serves
/// the MCP endpoint and its metadata is the authorization server under that revision,
/// and its document could name endpoints anywhere regardless; an issuer on any other
/// origin stays refused (RFC 8414 section 3.3, against mix-up).
fn same_origin_legacy(base_url: &str, expected: &str, received: &str) -> bool {
    let (Ok(base), Ok(expected), Ok(received)) = (
        url::Url::parse(base_url),
        url::Url::parse(expected),
        url::Url::parse(received),
    ) else {
        return false;
    };
    let root = matches!(expected.path(), "" | "/") && expected.query().is_none();
    root && expected.origin() == base.origin()
        && received.origin() == base.origin()
        && received.username().is_empty()
        && received.password().is_none()
        && received.query().is_none()
        && received.fragment().is_none()
}

/// The 2025-03-26 authorization server metadata at the MCP server's origin, read again
/// through the pinned client and accepted only if it still names `issuer`.
async fn legacy_metadata(
    base_url: &str,
    issuer: &str,
    net: &Arc<NetContext>,
    launch: &OAuthLaunch,
) -> Result<AuthorizationMetadata, OAuthFailure> {
    let refused = || {
        OAuthFailure("OAuth discovery failed: the authorization server metadata at the server's origin is unusable".into())
    };
    let mut url = url::Url::parse(base_url).map_err(|_| refused())?;
    url.set_path("/.well-known/oauth-authorization-server");
    url.set_query(None);
    url.set_fragment(None);
    let client = PinnedOAuth::new(Arc::clone(net), Arc::clone(&launch.on_decision));
    let body = client
        .get(url.as_str())
        .await
        .map_err(|e| OAuthFailure(format!("OAuth discovery failed: {e}")))?;
    let metadata: AuthorizationMetadata = serde_json::from_slice(&body).map_err(|_| refused())?;
    if metadata.issuer.as_deref() != Some(issuer) {
        return Err(refused());
    }
    tracing::info!(
        server = %crate::text::escape(&launch.server),
        "authorization server metadata in the 2025-03-26 layout: issuer on the server's own origin, with a path"
    );
    Ok(metadata)
}

fn origin_of(url: &str) -> String {
    url::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

fn scopes_of(url: &str) -> Vec<String> {
    url::Url::parse(url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "scope")
                .map(|(_, v)| v.split_whitespace().map(str::to_string).collect())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_issuer_on_the_servers_own_origin_excuses_a_mismatch() {
        let base = "https://mcp.example.test/mcp";
        let root = "https://mcp.example.test/";
        for (expected, received, excused) in [
            (root, "https://mcp.example.test/oauth", true),
            (
                "https://mcp.example.test",
                "https://mcp.example.test/a/b",
                true,
            ),
            // Another origin: scheme, host, port, or a look-alike.
            (root, "http://mcp.example.test/oauth", false),
            (root, "https://auth.example.test/oauth", false),
            (root, "https://mcp.example.test:8443/oauth", false),
            (root, "https://mcp.example.test.evil.test/", false),
            // Discovery that did not start at the server's origin root.
            (
                "https://mcp.example.test/tenant",
                "https://mcp.example.test/other",
                false,
            ),
            (
                "https://auth.example.test/",
                "https://auth.example.test/oauth",
                false,
            ),
            // Not a plain issuer.
            (root, "https://mcp.example.test/oauth?x=1", false),
            (root, "https://mcp.example.test/oauth#f", false),
            (root, "https://x@mcp.example.test/oauth", false),
            (root, "https://x:y@mcp.example.test/oauth", false),
            (root, "not a url", false),
        ] {
            assert_eq!(
                same_origin_legacy(base, expected, received),
                excused,
                "{expected} / {received}"
            );
        }
    }

    #[test]
    fn a_declared_method_narrows_the_offer_or_refuses() {
        let mut metadata = AuthorizationMetadata::default();
        only_method(&mut metadata, TokenAuthMethod::ClientSecretBasic).unwrap();
        assert_eq!(
            metadata.additional_fields["token_endpoint_auth_methods_supported"],
            serde_json::json!(["client_secret_basic"])
        );
        let mut offered = AuthorizationMetadata::default();
        offered.additional_fields.insert(
            "token_endpoint_auth_methods_supported".into(),
            serde_json::json!(["client_secret_basic", "client_secret_post"]),
        );
        only_method(&mut offered, TokenAuthMethod::ClientSecretPost).unwrap();
        assert_eq!(
            offered.additional_fields["token_endpoint_auth_methods_supported"],
            serde_json::json!(["client_secret_post"])
        );
        assert!(only_method(&mut offered, TokenAuthMethod::PrivateKeyJwt).is_err());
        let mut malformed = AuthorizationMetadata::default();
        malformed.additional_fields.insert(
            "token_endpoint_auth_methods_supported".into(),
            serde_json::json!("client_secret_post"),
        );
        assert!(only_method(&mut malformed, TokenAuthMethod::ClientSecretPost).is_err());
    }
}
