//! Step 6 of a connect: what a server starts as (a confined or plain process, or a remote
//! endpoint with its OAuth), its private directories, its confinement and its egress.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::core::{Declaration, Endpoint};
use crate::events::{EventKind, UrlPhase};
use crate::process::{StderrLog, child_environment, private_dir};
use crate::redact::Redactor;
use crate::transport::{HttpLaunch, Launch, StdioLaunch};

use super::{Outcome, Pipeline, Place, Step, failed};

impl Pipeline {
    /// What step 6 starts or reaches.
    pub(super) fn launch(
        &self,
        declaration: &Arc<Declaration>,
        place: Place,
        (values, args): (BTreeMap<String, String>, Vec<String>),
        redactor: &Redactor,
        learned: Arc<crate::redact::Learned>,
    ) -> Step<Launch> {
        match (&declaration.endpoint, place) {
            (Endpoint::Stdio { .. }, Place::Dir(cwd)) => {
                let stdio = self.stdio_launch(declaration, cwd, values, args, redactor)?;
                Ok(Launch::Stdio(stdio))
            }
            (Endpoint::StreamableHttp { url, oauth, .. }, _) => {
                let oauth = self.oauth(declaration, oauth.as_ref(), learned);
                let (hub, session, server) = (
                    Arc::clone(&self.shared.hub),
                    self.session.clone(),
                    declaration.server_id.clone(),
                );
                Ok(Launch::Http(HttpLaunch {
                    url: url.clone(),
                    headers: values,
                    net: Arc::clone(&self.shared.net),
                    on_decision: Arc::new(move |audit| {
                        hub.emit(
                            &session,
                            EventKind::UrlDecision {
                                phase: UrlPhase::Request,
                                server: server.clone(),
                                decision: audit.clone(),
                            },
                        );
                    }),
                    oauth,
                    protocol: self
                        .shared
                        .eras
                        .choose(declaration.protocol, self.era_key(declaration)),
                }))
            }
            (Endpoint::Stdio { .. }, Place::Addresses(_)) => Err(Outcome::Failed {
                declaration: Arc::clone(declaration),
                message: "internal error: a stdio server was placed as an HTTP one".into(),
                kind: None,
            }),
        }
    }

    /// A stdio server's start: its home (and, confined, its tmp), its environment, its
    /// confinement and egress proxy, its stderr log.
    pub(super) fn stdio_launch(
        &self,
        declaration: &Arc<Declaration>,
        cwd: PathBuf,
        values: BTreeMap<String, String>,
        args: Vec<String>,
        redactor: &Redactor,
    ) -> Step<StdioLaunch> {
        let config = &self.shared.config;
        let Endpoint::Stdio { command, .. } = &declaration.endpoint else {
            return Err(failed(
                declaration,
                "internal error: not a stdio server".into(),
            ));
        };
        let effective = effective_sandbox(declaration, config);
        let (home, tmp) = self
            .server_dirs(declaration, effective.is_some())
            .map_err(|e| {
                failed(
                    declaration,
                    format!("cannot prepare the server's home: {e}"),
                )
            })?;
        let mut env = child_environment(&config.host_env, &home, &values);
        let sandbox = match (&effective, &tmp) {
            (Some(sandbox), Some(tmp)) => {
                for name in ["TMPDIR", "TMP", "TEMP"] {
                    env.insert(name.into(), tmp.display().to_string());
                }
                let path = env.get("PATH").map(String::as_str);
                self.confinement(declaration, sandbox, &home, tmp, path)?
            }
            _ => None,
        };
        let egress = match &sandbox {
            Some(c) if c.rules.network == crate::sandbox::Network::Proxy => {
                crate::sandbox::egress::proxy_environment(&mut env);
                Some(self.egress(declaration))
            }
            _ => None,
        };
        Ok(StdioLaunch {
            command: command.clone(),
            args,
            env,
            cwd,
            log: StderrLog {
                home: config.home.clone(),
                server: declaration.server_id.clone(),
                session: self.session.clone(),
                redactor: redactor.clone(),
            },
            registry: Arc::clone(&self.shared.processes),
            sandbox,
            egress,
            protocol: self
                .shared
                .eras
                .choose(declaration.protocol, self.era_key(declaration)),
        })
    }

    /// A server's home and tmp: a confined server gets its own of each under
    /// `<home>/sandbox/<server>/` (it can write nowhere else outside the workspace);
    /// others share `mcp-home` and the host's tmp.
    pub(super) fn server_dirs(
        &self,
        declaration: &Declaration,
        confined: bool,
    ) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
        if !confined {
            let home = self.shared.server_home();
            private_dir(&home)?;
            return Ok((home, None));
        }
        let sandboxes = self.shared.config.home.join("sandbox");
        let own = sandboxes.join(&declaration.server_id);
        for dir in [sandboxes, own.clone(), own.join("home"), own.join("tmp")] {
            private_dir(&dir)?;
        }
        Ok((own.join("home"), Some(own.join("tmp"))))
    }

    /// The confinement of a stdio server: its rules (never reading the runtime home,
    /// nor the operator's credential stores: a tree found for a program that holds one
    /// is left out) and the runtime's launchers.
    pub(super) fn confinement(
        &self,
        declaration: &Arc<Declaration>,
        sandbox: &crate::sandbox::Sandbox,
        home: &Path,
        tmp: &Path,
        path: Option<&str>,
    ) -> Step<Option<crate::sandbox::Confinement>> {
        let Endpoint::Stdio { command, args, .. } = &declaration.endpoint else {
            return Ok(None);
        };
        let config = &self.shared.config;
        let mut protected = vec![config.home.clone()];
        if let Some(operator) = config.host_env.get("HOME") {
            protected.extend(
                crate::sandbox::SECRET_STORES
                    .iter()
                    .map(|store| Path::new(operator).join(store)),
            );
        }
        let unavailable = |e: crate::sandbox::Unavailable| failed(declaration, e.to_string());
        let rules = crate::sandbox::Rules::of(
            sandbox,
            command,
            args,
            &self.workspace,
            home,
            tmp,
            path,
            &protected,
        )
        .map_err(unavailable)?;
        let launchers = self.shared.launchers.clone().ok_or_else(|| {
            unavailable(crate::sandbox::Unavailable(
                "no sandbox launcher is set (`RuntimeConfig::sandbox_launcher`)".into(),
            ))
        })?;
        Ok(rules.map(|rules| crate::sandbox::Confinement { launchers, rules }))
    }

    /// The egress proxy of a confined server: the runtime's URL policy, each decision
    /// an `mcp.url_decision` (phase egress) and each refusal an `mcp.sandbox_denied`.
    /// A server that loops on refused requests gets its first refusals reported, not a
    /// flood of the session's events.
    pub(super) fn egress(&self, declaration: &Declaration) -> crate::sandbox::egress::Egress {
        let (hub, session, server) = (
            Arc::clone(&self.shared.hub),
            self.session.clone(),
            declaration.server_id.clone(),
        );
        let refusals = std::sync::atomic::AtomicUsize::new(0);
        crate::sandbox::egress::Egress {
            net: Arc::clone(&self.shared.net),
            on_decision: Arc::new(move |audit| {
                if !audit.allowed
                    && refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                        >= crate::sandbox::egress::MAX_REPORTED_REFUSALS
                {
                    return;
                }
                hub.emit(
                    &session,
                    EventKind::UrlDecision {
                        phase: UrlPhase::Egress,
                        server: server.clone(),
                        decision: audit.clone(),
                    },
                );
                if !audit.allowed {
                    hub.emit(
                        &session,
                        EventKind::SandboxDenied {
                            server: server.clone(),
                            kind: crate::events::SandboxDenial::Egress,
                            target: audit.target.clone(),
                            reason: audit.reason.to_string(),
                        },
                    );
                }
            }),
        }
    }
}

/// A connect approval's identity with the confinement that applies folded in: an
/// answer given while a host default confined the server does not cover it running
/// unconfined (or differently confined) later.
pub(super) fn confined_identity(
    identity: crate::core::Fingerprint,
    sandbox: Option<&crate::sandbox::Sandbox>,
) -> crate::core::Fingerprint {
    match sandbox {
        None => identity,
        Some(sandbox) => {
            let form = serde_json::json!([identity.hex(), sandbox]);
            crate::core::Fingerprint::of(form.to_string().as_bytes())
        }
    }
}

/// The confinement a stdio server gets: its declaration's, else the host's default;
/// `None` when it runs unconfined (`sandbox: off`, or neither says).
pub(super) fn effective_sandbox(
    declaration: &Declaration,
    config: &crate::actors::RuntimeConfig,
) -> Option<crate::sandbox::Sandbox> {
    declaration
        .sandbox
        .clone()
        .or_else(|| config.sandbox_default.clone())
        .filter(|s| *s != crate::sandbox::Sandbox::Off)
}
