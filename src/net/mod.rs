//! Networking for streamable HTTP servers: the pure URL policy, the resolver trait
//! (hickory for real, a static table for tests and `--resolve`), and the pinned hyper
//! client that resolves, checks and pins every request and redirect.

pub mod client;
pub mod oauth;
pub mod policy;
pub mod resolver;

pub use client::{Challenge, NetContext, NetError, PinnedClient};
pub use policy::{Answer, AuditView, Block, Host, Target, UrlPolicy, Verdict};
pub use resolver::{HickoryResolver, Resolver, StaticResolver};
