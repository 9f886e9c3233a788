//! Name resolution behind a trait: hickory for real use, a static table for tests and
//! `url-check --resolve`. The system resolver and proxies are never used.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use futures::future::BoxFuture;

use super::policy::Answer;

/// Resolves a DNS name to every A and AAAA address.
pub trait Resolver: Send + Sync + 'static {
    /// All addresses of `name`, or why there are none.
    fn resolve(&self, name: &str) -> BoxFuture<'static, Answer>;
}

/// hickory-resolver with the system's configuration (and hosts file), asking for both
/// A and AAAA records. Built on first use, so hosts without HTTP servers pay nothing.
pub struct HickoryResolver {
    inner: std::sync::OnceLock<Option<hickory_resolver::TokioResolver>>,
}

impl HickoryResolver {
    /// A resolver from the system configuration. If it cannot be built, every lookup
    /// fails (closed).
    pub fn from_system() -> Self {
        HickoryResolver {
            inner: std::sync::OnceLock::new(),
        }
    }

    fn get(&self) -> Option<hickory_resolver::TokioResolver> {
        self.inner
            .get_or_init(|| {
                hickory_resolver::TokioResolver::builder_tokio()
                    .ok()
                    .and_then(|mut b| {
                        b.options_mut().ip_strategy =
                            hickory_resolver::config::LookupIpStrategy::Ipv4AndIpv6;
                        b.build().ok()
                    })
            })
            .clone()
    }
}

impl Resolver for HickoryResolver {
    fn resolve(&self, name: &str) -> BoxFuture<'static, Answer> {
        let Some(inner) = self.get() else {
            return Box::pin(async { Answer::Error });
        };
        let name = name.to_string();
        Box::pin(async move {
            match inner.lookup_ip(name.as_str()).await {
                Ok(lookup) => Answer::Addresses(lookup.iter().collect()),
                Err(_) => Answer::Error,
            }
        })
    }
}

/// A fixed table of answers; unknown names fail like NXDOMAIN. Answers can be changed
/// while in use, to simulate DNS rebinding.
#[derive(Clone, Default)]
pub struct StaticResolver {
    table: Arc<std::sync::Mutex<HashMap<String, Answer>>>,
}

impl StaticResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers `name` with `addrs` from now on.
    pub fn set(&self, name: &str, addrs: impl IntoIterator<Item = IpAddr>) -> &Self {
        self.set_answer(name, Answer::Addresses(addrs.into_iter().collect()))
    }

    /// Answers `name` with `answer` from now on.
    pub fn set_answer(&self, name: &str, answer: Answer) -> &Self {
        if let Ok(mut t) = self.table.lock() {
            t.insert(name.trim_end_matches('.').to_ascii_lowercase(), answer);
        }
        self
    }
}

impl Resolver for StaticResolver {
    fn resolve(&self, name: &str) -> BoxFuture<'static, Answer> {
        let key = name.trim_end_matches('.').to_ascii_lowercase();
        let answer = self
            .table
            .lock()
            .ok()
            .and_then(|t| t.get(&key).cloned())
            .unwrap_or(Answer::Error);
        Box::pin(async move { answer })
    }
}
