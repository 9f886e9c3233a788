//! The connect pipeline: one server of one turn, from its declaration to a listed
//! connection or the reason there is none, in the order of docs/design.md#2-authority:
//!
//! 1. the connect capability;
//! 2. where it runs: the `cwd` inside the workspace (stdio), the URL policy on the
//!    declared URL (HTTP);
//! 3. the connect approval;
//! 4. interpolation of `${NAME}` references, only now;
//! 5. a discovery permit;
//! 6. the transport's connect (spawn or reach, initialize, list tools).
//!
//! A denial at any step happens before any process, client or socket exists. Runs on a
//! task of its own (never in an actor's handler), so approvals and slow servers block
//! nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::actors::connection::Connected;
use crate::actors::limiter::Permit;
use crate::actors::shared::Shared;
use crate::authority::{
    Action, ApprovalRequest, ApprovalSource, CapabilitySet, ConnectPreview, DenyReason, HostPolicy,
    connection_secrets, resolve_cwd,
};
use crate::core::{Declaration, Endpoint, Protocol};
use crate::events::{EventKind, UrlPhase};
use crate::net::Verdict;
use crate::offer::{Shaped, shape_listing};
use crate::process::interpolate_all;
use crate::redact::{Redactor, View};
use crate::telemetry::{self, Trace};
use crate::transport::{self, ConnectErrorKind, Launch, ListedTools, OAuthLaunch, ServerSignals};

mod launch;
mod pinning;

use launch::{confined_identity, effective_sandbox};
use pinning::Listing;

/// What the pipeline made of one server.
pub(crate) enum Outcome {
    /// Connected and listed.
    Connected(Box<Connected>),
    /// Denied by authority (asked again next turn).
    Denied {
        declaration: Arc<Declaration>,
        reason: DenyReason,
    },
    /// Skipped for this turn, uncached (a missing variable).
    Skipped {
        declaration: Arc<Declaration>,
        message: String,
    },
    /// Failed; cached for the failure TTL.
    Failed {
        declaration: Arc<Declaration>,
        message: String,
        /// Where the transport connect failed; `None` when it failed before reaching it.
        kind: Option<ConnectErrorKind>,
    },
}

/// A live connection to list again after its server announced a change (or its held
/// definitions were approved).
pub(super) struct Relist {
    pub id: ractor::ActorId,
    pub peer: rmcp::Peer<rmcp::RoleClient>,
    pub declaration: Arc<Declaration>,
    pub redactor: Redactor,
}

/// Where an authorized server will run or be reached (step 2's result).
enum Place {
    /// A stdio server's checked working directory.
    Dir(PathBuf),
    /// An HTTP server's validated addresses.
    Addresses(Vec<String>),
}

/// What the pipeline needs; no actor state.
pub(super) struct Pipeline {
    pub shared: Arc<Shared>,
    pub policy: HostPolicy,
    pub session: String,
    /// Who the session acts for: stored OAuth tokens are theirs.
    pub principal: String,
    pub capabilities: CapabilitySet,
    pub workspace: PathBuf,
    /// The turn's span (or the call's that woke a server): connects are its children.
    pub trace: Trace,
}

/// A step's early end: the server's outcome for this turn. Outcomes are built once per
/// server and returned as they are; boxing them would buy nothing.
type Step<T> = Result<T, Outcome>;

/// What step 4 produced: env or header values, and a stdio server's arguments.
struct Interpolated {
    values: BTreeMap<String, String>,
    args: Vec<String>,
}

impl Pipeline {
    /// Authorizes and connects one server, step by step (see the module documentation).
    pub(super) async fn connect(&self, declaration: Arc<Declaration>) -> Outcome {
        let span = self
            .trace
            .span_of("mcp.connect", &declaration.server_id, None);
        let outcome = match self.steps(&declaration, &span.trace()).await {
            // Compared with its pins once the discovery permit is back: a person asked
            // about a change holds no other server's connect.
            Ok(mut connected) => {
                let pinning = span.trace().span("mcp.connect.pinning");
                let shaped = std::mem::take(&mut connected.shaped);
                connected.shaped = self
                    .pin(&declaration, &connected.redactor, shaped, Listing::Connect)
                    .await;
                self.remember(&declaration, &connected.shaped).await;
                pinning.end();
                Outcome::Connected(Box::new(connected))
            }
            Err(outcome) => outcome,
        };
        let (how, failed) = match &outcome {
            Outcome::Connected(_) => ("connected", None),
            Outcome::Denied { .. } => ("denied", Some("denied")),
            Outcome::Skipped { .. } => ("skipped", Some("missing_variable")),
            Outcome::Failed { kind, .. } => ("failed", Some(kind.map_or("other", |k| k.name()))),
        };
        span.set_str(telemetry::OUTCOME, how);
        if let Some(kind) = failed {
            span.fail(kind);
        }
        outcome
    }

    async fn steps(&self, declaration: &Arc<Declaration>, trace: &Trace) -> Step<Connected> {
        let capability = trace.span("mcp.connect.capability");
        self.require_capability(declaration)?;
        let place = self.place(declaration).await?;
        let roots = self
            .roots(declaration)
            .map_err(|reason| denied(declaration, reason))?;
        capability.end();
        let approval = trace.span("mcp.connect.approval");
        self.approve(declaration, &place).await?;
        approval.end();
        let Interpolated { values, args } = self.interpolate(declaration)?;
        // What the connection learns later (refreshed OAuth tokens), every clone of its
        // redactor hides too: the failure path, the elicitation route, the dispatch.
        let learned = Arc::new(crate::redact::Learned::default());
        let redactor = self
            .secrets(declaration, &values, &args)
            .with_learned(Arc::clone(&learned));
        let waiting = trace.span("mcp.connect.permit");
        let _permit = self.permit(declaration).await?;
        waiting.end();
        let launch = self.launch(declaration, place, (values, args), &redactor, learned)?;
        let route = self.elicit_route(declaration, &redactor);
        let notices = self.notices(declaration, &redactor);
        let signals = Arc::new(ServerSignals::new(route, notices, roots));
        let confined = matches!(&launch, Launch::Stdio(stdio) if stdio.sandbox.is_some());
        let start = trace.span("mcp.connect.start");
        let connected = transport::connect(
            launch,
            Arc::clone(&signals),
            declaration.connect_timeout,
            self.shared.config.close_grace,
        )
        .await;
        start.trace().stages(&signals.stages.take());
        start.end();
        self.remember_era(declaration, connected.as_ref().ok().map(|(_, l)| l));
        match connected {
            Ok((client, listed)) => {
                if let (Some(level), true) = (declaration.log_level, listed.offer.logging) {
                    let timeout = declaration.connect_timeout;
                    transport::set_level(&client.peer(), &signals, level, timeout).await;
                }
                let shaped = shape_listing(
                    listed,
                    declaration,
                    &redactor,
                    &self.shared.schemas,
                    &self.shared.tools,
                );
                Ok(Connected {
                    declaration: Arc::clone(declaration),
                    client,
                    shaped,
                    redactor,
                    signals,
                })
            }
            Err(e) => Err(self.failed(declaration, e, confined, &redactor)),
        }
    }

    /// A connect that failed, in words: its stderr's tail or log, and when a confined
    /// server reports a refused access, the sandbox named (and an event).
    fn failed(
        &self,
        declaration: &Arc<Declaration>,
        e: transport::ConnectError,
        confined: bool,
        redactor: &crate::redact::Redactor,
    ) -> Outcome {
        let message = match (&e.logged, e.stderr_tail.is_empty()) {
            (Some(log), true) => {
                format!("{}; its stderr is in {}", e.message, log.display())
            }
            (Some(log), false) => format!(
                "{}; its stderr ends: {} (all of it is in {})",
                e.message,
                e.stderr_tail.join(" | "),
                log.display()
            ),
            (None, _) => e.message,
        };
        // Landlock and seccomp tell only the process they refuse: a confined server
        // that failed saying it was refused was most likely refused by the sandbox.
        // Said by kind; what it aimed at is the server's text.
        let refused = crate::sandbox::refusal_reported(&e.stderr_tail);
        let message = match refused.filter(|_| confined) {
            Some(kind) => {
                self.emit(EventKind::SandboxDenied {
                    server: declaration.server_id.clone(),
                    kind: crate::events::SandboxDenial::Reported,
                    target: String::new(),
                    reason: kind.into(),
                });
                format!(
                    "{message}; it ran confined and reports a refused access: if it needs a path or network the sandbox withholds, declare it under `sandbox:` (reviewed)"
                )
            }
            None => message,
        };
        Outcome::Failed {
            declaration: Arc::clone(declaration),
            message: crate::result::cap(&redactor.text(&message, View::Durable)),
            kind: Some(e.kind),
        }
    }

    /// Step 1: `mcp.connect:<id>`.
    fn require_capability(&self, declaration: &Arc<Declaration>) -> Step<()> {
        let connect = declaration.connect_capability();
        if self.capabilities.allows(&connect) {
            Ok(())
        } else {
            Err(denied(declaration, DenyReason::MissingCapability(connect)))
        }
    }

    /// Step 2: the `cwd` rule (stdio) or the URL policy on the declared URL (HTTP),
    /// before any approval and before any client exists.
    async fn place(&self, declaration: &Arc<Declaration>) -> Step<Place> {
        match &declaration.endpoint {
            Endpoint::Stdio { cwd, .. } => resolve_cwd(&self.workspace, cwd.as_deref())
                .map(Place::Dir)
                .map_err(|reason| denied(declaration, DenyReason::Cwd(reason))),
            Endpoint::StreamableHttp { url, .. } => {
                let verdict = self.shared.net.check_url(url.url().as_str()).await;
                let audit = verdict.audit();
                self.emit(EventKind::UrlDecision {
                    phase: UrlPhase::Connect,
                    server: declaration.server_id.clone(),
                    decision: audit.clone(),
                });
                match verdict {
                    Verdict::Allowed { .. } => Ok(Place::Addresses(audit.resolved_addresses)),
                    Verdict::Blocked { block, .. } => Err(denied(
                        declaration,
                        DenyReason::UrlBlocked {
                            block,
                            target: audit.target,
                        },
                    )),
                }
            }
        }
    }

    /// Step 3: the connect approval under the effective (never weaker than `prompt`)
    /// policy, showing what would start or be reached.
    async fn approve(&self, declaration: &Arc<Declaration>, place: &Place) -> Step<()> {
        let config = &self.shared.config;
        let sandbox = effective_sandbox(declaration, config);
        if matches!(declaration.endpoint, Endpoint::Stdio { .. })
            && config.require_sandbox
            && sandbox.is_none()
        {
            return Err(denied(declaration, DenyReason::Unconfined));
        }
        let policy = self.policy.connect_policy(declaration);
        let (cwd, addresses): (Option<&Path>, &[String]) = match place {
            Place::Dir(dir) => (Some(dir), &[]),
            Place::Addresses(addrs) => (None, addrs),
        };
        let request = ApprovalRequest {
            session: self.session.clone(),
            action: Action::Connect,
            server: declaration.server_id.clone(),
            tool: None,
            arguments: None,
            preview: {
                let mut preview = ConnectPreview::new(declaration, policy, cwd, addresses);
                if preview.sandbox.is_some() {
                    // What applies: the host's default fills in for an undeclared
                    // sandbox, and a host without one runs it unconfined.
                    let off = crate::sandbox::Sandbox::Off;
                    let applied =
                        crate::sandbox::Sandbox::describe(Some(sandbox.as_ref().unwrap_or(&off)));
                    preview.sandbox = Some(if declaration.sandbox.is_none() {
                        format!("{applied} (the host's default; declare `sandbox:` to change it)")
                    } else {
                        applied
                    });
                }
                if policy == crate::core::ApprovalPolicy::Prompt {
                    preview.flagged = self.flagged(declaration);
                }
                preview
            },
            call: None,
            change: None,
        };
        match self
            .shared
            .broker
            .decide(
                request,
                confined_identity(
                    declaration.approval_identity(&self.workspace, cwd),
                    sandbox.as_ref(),
                ),
                policy,
            )
            .await
        {
            Ok(approval) if approval.allowed => Ok(()),
            Ok(approval) if approval.source == ApprovalSource::Deadline => {
                Err(denied(declaration, DenyReason::ApprovalTimedOut))
            }
            Ok(_) => Err(denied(declaration, DenyReason::ApprovalDenied)),
            Err(_) => Err(denied(declaration, DenyReason::BrokerUnavailable)),
        }
    }

    /// Step 4: `${NAME}` in env or header values and in a stdio server's arguments,
    /// only now; a missing variable skips the server for this turn (not
    /// failure-cached).
    fn interpolate(&self, declaration: &Arc<Declaration>) -> Step<Interpolated> {
        let host = &self.shared.config.host_env;
        let (declared, declared_args): (_, &[String]) = match &declaration.endpoint {
            Endpoint::Stdio { env, args, .. } => (env, args),
            Endpoint::StreamableHttp { headers, .. } => (headers, &[]),
        };
        let skipped = |missing: crate::process::MissingVariable| Outcome::Skipped {
            declaration: Arc::clone(declaration),
            message: missing.to_string(),
        };
        // The OAuth client secret and key are interpolated here too (their values are
        // used later, by the transport), so a missing variable skips the server now.
        if let Endpoint::StreamableHttp {
            oauth: Some(oauth), ..
        } = &declaration.endpoint
        {
            let references = oauth
                .references()
                .map(|(field, value)| (field.to_string(), value.to_string()))
                .collect();
            interpolate_all(&references, host).map_err(skipped)?;
        }
        let args = declared_args
            .iter()
            .map(|arg| crate::process::interpolate(arg, host))
            .collect::<Result<_, _>>()
            .map_err(skipped)?;
        Ok(Interpolated {
            values: interpolate_all(declared, host).map_err(skipped)?,
            args,
        })
    }

    /// Every secret the connection will know (docs/design.md#5-secrets-and-results).
    fn secrets(
        &self,
        declaration: &Declaration,
        values: &BTreeMap<String, String>,
        args: &[String],
    ) -> Redactor {
        connection_secrets(declaration, values, args, &self.shared.config.host_env)
    }

    /// Step 5: a discovery permit, then the `connecting` event. A limiter being
    /// restarted skips the server for this turn; it is not the server's failure, so
    /// nothing is cached.
    async fn permit(&self, declaration: &Arc<Declaration>) -> Step<Permit> {
        let permit = self
            .shared
            .limiter
            .acquire()
            .await
            .map_err(|e| Outcome::Skipped {
                declaration: Arc::clone(declaration),
                message: e.to_string(),
            })?;
        self.emit(EventKind::ServerConnecting {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
        });
        Ok(permit)
    }

    /// For an `auto` server, the era its connection speaks (`listed`), or that it must
    /// probe again (a failed connect).
    fn remember_era(&self, declaration: &Declaration, listed: Option<&ListedTools>) {
        if declaration.protocol != Protocol::Auto {
            return;
        }
        let (eras, key) = (&self.shared.eras, self.era_key(declaration));
        match listed {
            Some(listed) => eras.learned(key, &listed.offer.identity.protocol),
            None => eras.forget(key),
        }
    }

    /// What the era memory knows this server by: its declaration, and whose session in
    /// which workspace asked (one session's servers never decide another's probe).
    pub(super) fn era_key(&self, declaration: &Declaration) -> crate::core::Fingerprint {
        let key = (
            declaration.fingerprint.hex(),
            &self.principal,
            self.workspace.to_string_lossy(),
        );
        crate::core::Fingerprint(crate::digest::sha256_json(&key).0)
    }

    fn emit(&self, kind: EventKind) {
        self.shared.hub.emit(&self.session, kind);
    }

    /// How an HTTP server of this turn is authorized: the declared section with its
    /// client secret interpolated (step 4 has run), the host's authorizer, the token
    /// file of this server identity and resource, and `url_decision` events whose phase
    /// names the OAuth step.
    fn oauth(
        &self,
        declaration: &Declaration,
        declared: Option<&crate::core::OAuthDeclared>,
        learned: Arc<crate::redact::Learned>,
    ) -> OAuthLaunch {
        let host = &self.shared.config.host_env;
        let value_of = |reference: &Option<String>| {
            let reference = BTreeMap::from([(String::new(), reference.clone()?)]);
            interpolate_all(&reference, host).ok()?.into_values().next()
        };
        let declared = declared.map(|d| {
            let mut d = d.clone();
            d.client_secret = value_of(&d.client_secret);
            d.private_key = value_of(&d.private_key);
            d
        });
        let (hub, session, server) = (
            Arc::clone(&self.shared.hub),
            self.session.clone(),
            declaration.server_id.clone(),
        );
        OAuthLaunch {
            declared,
            learned,
            authorizer: Arc::clone(&self.shared.config.authorizer),
            store: crate::transport::token_file(
                &self.shared.config.home,
                &self.principal,
                declaration,
            ),
            on_decision: Arc::new(move |step, audit| {
                hub.emit(
                    &session,
                    EventKind::UrlDecision {
                        phase: UrlPhase::of_oauth(step),
                        server: server.clone(),
                        decision: audit.clone(),
                    },
                );
            }),
            session: self.session.clone(),
            server: declaration.server_id.clone(),
        }
    }
}

/// A failure of `declaration` before its transport started.
fn failed(declaration: &Arc<Declaration>, message: String) -> Outcome {
    Outcome::Failed {
        declaration: Arc::clone(declaration),
        message,
        kind: None,
    }
}

fn denied(declaration: &Arc<Declaration>, reason: DenyReason) -> Outcome {
    Outcome::Denied {
        declaration: Arc::clone(declaration),
        reason,
    }
}

impl Pipeline {
    /// Connects every declaration in `connect` and relists every peer in `relist`, all
    /// at once (the limiter bounds how many connect).
    pub(super) async fn resolve(
        &self,
        connect: Vec<Arc<Declaration>>,
        relist: Vec<Relist>,
    ) -> (Vec<Outcome>, Vec<(ractor::ActorId, Result<Shaped, String>)>) {
        let connects = futures::future::join_all(connect.into_iter().map(|d| self.connect(d)));
        let relists = futures::future::join_all(relist.into_iter().map(|r| self.relist(r)));
        futures::join!(connects, relists)
    }

    /// A live server's lists again, shaped and compared with its pins. A server that
    /// announces a change and then never answers the lists must not hold the turn:
    /// relisting has the default connect timeout.
    async fn relist(&self, r: Relist) -> (ractor::ActorId, Result<Shaped, String>) {
        let span = self
            .trace
            .span_of("mcp.relist", &r.declaration.server_id, None);
        let listed = tokio::time::timeout(
            crate::core::DEFAULT_CONNECT_TIMEOUT,
            crate::transport::list_tools(&r.peer),
        )
        .await
        .unwrap_or_else(|_| Err("no answer within the connect timeout".into()));
        let shaped = match listed {
            Ok(listed) => shape_listing(
                listed,
                &r.declaration,
                &r.redactor,
                &self.shared.schemas,
                &self.shared.tools,
            ),
            Err(e) => {
                span.fail("relist");
                return (r.id, Err(e));
            }
        };
        let pinned = self
            .pin(&r.declaration, &r.redactor, shaped, Listing::Relist)
            .await;
        self.remember(&r.declaration, &pinned).await;
        (r.id, Ok(pinned))
    }

    /// Closes clients that no catalog will own (an eviction raced the preparation);
    /// each close ends the process tree and logs its stderr.
    pub(super) async fn close_unowned(&self, outcomes: Vec<Outcome>) {
        let grace = self.shared.config.close_grace;
        let closes = outcomes.into_iter().filter_map(|o| match o {
            Outcome::Connected(connected) => Some(connected.client.close(grace)),
            _ => None,
        });
        futures::future::join_all(closes).await;
    }
}

#[cfg(test)]
mod tests {
    use ractor::Actor;

    use super::transport;

    /// The size of the future `_f` returns, read from its type (`_f` is never called).
    fn future_size2<A, B, Fut>(_f: impl FnOnce(A, B) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    fn future_size4<A, B, C, D, Fut>(_f: impl FnOnce(A, B, C, D) -> Fut) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// Building a future into another (a join, a task, an actor's handler) copies its
    /// whole size, though before its first poll it holds little more than its
    /// arguments. A connect's had grown to 170 KiB, most of it the OAuth path a stdio
    /// server never takes and rmcp's futures side by side; the catalog's handler, built
    /// for every message it handles, to 7 KiB for the connection actor's start. The
    /// rare and the large are boxed where they are awaited. In a debug build now: 12,
    /// 9 and 3.5 KiB. Each bound fails when one of these boxes goes: rmcp's initialize
    /// (5.5 KiB) or the listener (4 KiB) in `transport::client::start`, the OAuth
    /// authorization (30 KiB) in `transport::http::connect`, `Live::start` in `adopt`.
    #[test]
    fn the_futures_of_a_first_turn_stay_small() {
        const KIB: usize = 1024;
        for (what, size, most) in [
            (
                "a server's connect",
                future_size2(super::Pipeline::connect),
                14 * KIB,
            ),
            (
                "a transport's connect",
                future_size4(transport::connect),
                12 * KIB,
            ),
            (
                "the catalog's handler",
                future_size4(<super::super::Catalog as Actor>::handle),
                5 * KIB,
            ),
        ] {
            assert!(
                size <= most,
                "{what} takes {size} bytes (at most {most}): box the large await that grew it"
            );
        }
    }
}
