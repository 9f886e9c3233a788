//! The secrets one connection knows, from its declaration, its interpolated values and
//! the host's environment, and the secrets a URI carries: what its [`Redactor`] hides
//! in everything the connection produces.

use std::collections::BTreeMap;

use super::preview::secret_arg_values;
use crate::core::{Declaration, DeclaredUrl, Endpoint};
use crate::process::{HostEnv, referenced_values};
use crate::redact::Redactor;

/// The secrets a connection knows: its interpolated env or header values (and each
/// header's last word: `Bearer <token>`), the host values its `${NAME}` references
/// name, the values of secret-bearing options in its args, and its URL's userinfo and
/// query values.
pub fn connection_secrets(
    declaration: &Declaration,
    values: &BTreeMap<String, String>,
    interpolated_args: &[String],
    host: &HostEnv,
) -> Redactor {
    let referenced = |map: &BTreeMap<String, String>| -> Vec<(String, String)> {
        map.values()
            .flat_map(|v| referenced_values(v, host))
            .collect()
    };
    let redactor = Redactor::new().with_secrets(values.iter().map(|(k, v)| (k.clone(), v.clone())));
    match &declaration.endpoint {
        Endpoint::Stdio { args, env, .. } => redactor
            .with_secrets(referenced(env))
            .with_secrets(args.iter().flat_map(|arg| referenced_values(arg, host)))
            .with_secrets(secret_arg_values(interpolated_args)),
        Endpoint::StreamableHttp {
            url,
            headers,
            oauth,
        } => {
            let credentials = oauth
                .iter()
                .flat_map(|o| o.references())
                .flat_map(|(_, reference)| referenced_values(reference, host))
                .flat_map(|(name, value)| {
                    // Each line of a PEM key is a secret of its own: a leaked line of a
                    // key is a leaked key.
                    let lines = value
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
                        .map(|l| (name.clone(), l.to_string()))
                        .collect::<Vec<_>>();
                    std::iter::once((name, value)).chain(lines)
                });
            let last_words = values.iter().filter_map(|(name, value)| {
                let last = value.split_whitespace().last()?;
                (last != value).then(|| (name.clone(), last.to_string()))
            });
            redactor
                .with_secrets(last_words)
                .with_secrets(referenced(headers))
                .with_secrets(credentials)
                .with_secrets(url_secrets(url))
        }
    }
}

/// Secrets a URL carries: userinfo and query values.
fn url_secrets(url: &DeclaredUrl) -> Vec<(String, String)> {
    uri_secrets(url.url())
}

/// Secrets a URL or URI carries: userinfo and query values (a resource URI the model
/// chose is redacted with these, as a call's sensitive arguments are).
pub fn uri_secrets(u: &url::Url) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !u.username().is_empty() {
        out.push(("url_username".to_string(), u.username().to_string()));
    }
    if let Some(p) = u.password() {
        out.push(("url_password".to_string(), p.to_string()));
    }
    // Named by a fixed word: a query key is the URL's own text.
    out.extend(
        u.query_pairs()
            .map(|(_, v)| ("url_query".to_string(), v.into_owned())),
    );
    out
}
