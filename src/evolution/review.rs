//! The security review of a candidate revision: what changed in its MCP surface
//! (declarations, `mcp.*` grants, the MCP root), each change with secret-safe
//! before/after previews and details, and the `mcp-review:<sha256>` token over them.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use super::{Found, Snapshot};
use crate::authority::{ConnectPreview, HostPolicy};
use crate::core::{Endpoint, Fingerprint};

/// The security review of a candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Review {
    /// Live commit, if any.
    pub live: Option<String>,
    /// Candidate commit.
    pub candidate: String,
    /// Changes, sorted by path.
    pub changes: Vec<ChangeEntry>,
    /// `mcp-review:<sha256>`.
    pub token: String,
}

/// How a path changed between the live and the candidate revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Present in the candidate only.
    Added,
    /// Present in the live revision only.
    Removed,
    /// Present in both, with different content.
    Modified,
}

impl Change {
    /// The spelling in output and in the token's canonical lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeEntry {
    /// Path relative to the core (or `agent.yaml#...`).
    pub path: String,
    /// How it changed.
    pub change: Change,
    /// Secret-safe preview before (absent for `added`).
    pub before: Option<Value>,
    /// Secret-safe preview after (absent for `removed`).
    pub after: Option<Value>,
    /// What changed, in words (a changed secret is named, never shown).
    pub details: Vec<String>,
    #[serde(skip)]
    before_fingerprint: Option<String>,
    #[serde(skip)]
    after_fingerprint: Option<String>,
}

fn preview(found: &Found) -> Value {
    match found {
        Found::Invalid { errors, .. } => json!({ "invalid": errors }),
        Found::Valid { declaration: d, .. } => {
            let policy = HostPolicy::default().connect_policy(d);
            let mut p =
                serde_json::to_value(ConnectPreview::new(d, policy, None, &[])).unwrap_or_default();
            if let (Some(map), Endpoint::Stdio { cwd, .. }) = (p.as_object_mut(), &d.endpoint) {
                map.insert(
                    "cwd".into(),
                    json!(cwd.clone().unwrap_or_else(|| "<workspace>".into())),
                );
            }
            if let Some(map) = p.as_object_mut() {
                map.insert("enabled".into(), json!(d.enabled));
                for (name, filter) in [
                    ("tools", &d.tools),
                    ("resources", &d.resources),
                    ("prompts", &d.prompts),
                ] {
                    map.insert(
                        name.into(),
                        json!({"include": filter.include, "exclude": filter.exclude}),
                    );
                }
                map.insert("log_level".into(), json!(d.log_level));
                map.insert(
                    "max_timeout_seconds".into(),
                    json!(d.max_call_timeout.map(|t| t.as_secs_f64())),
                );
                map.insert(
                    "connect_timeout_seconds".into(),
                    json!(d.connect_timeout.as_secs_f64()),
                );
                map.insert(
                    "timeout_seconds".into(),
                    json!(d.call_timeout.as_secs_f64()),
                );
                map.insert(
                    "supports_parallel_tool_calls".into(),
                    json!(d.supports_parallel_tool_calls),
                );
            }
            p
        }
    }
}

fn fingerprint_of(found: &Found) -> String {
    match found {
        Found::Valid { declaration, .. } => format!("valid:{}", declaration.fingerprint.hex()),
        Found::Invalid { digest, .. } => format!("invalid:{}", digest.hex()),
    }
}

/// What changed between two valid declarations, in secret-safe words.
fn details(before: &Found, after: &Found) -> Vec<String> {
    let (bp, ap) = (preview(before), preview(after));
    let mut out = Vec::new();
    if let (Some(b), Some(a)) = (bp.as_object(), ap.as_object()) {
        let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for k in keys {
            let (x, y) = (
                b.get(k).unwrap_or(&Value::Null),
                a.get(k).unwrap_or(&Value::Null),
            );
            if x != y {
                out.push(format!("{k}: {x} -> {y}"));
            }
        }
    }
    if let (Found::Valid { declaration: b, .. }, Found::Valid { declaration: a, .. }) =
        (before, after)
    {
        match (&b.endpoint, &a.endpoint) {
            (
                Endpoint::Stdio {
                    env: be, args: ba, ..
                },
                Endpoint::Stdio {
                    env: ae, args: aa, ..
                },
            ) => {
                out.extend(changed_values("env", be, ae));
                let (bs, as_): (BTreeMap<_, _>, BTreeMap<_, _>) = (
                    crate::authority::preview::secret_arg_values(ba)
                        .into_iter()
                        .collect(),
                    crate::authority::preview::secret_arg_values(aa)
                        .into_iter()
                        .collect(),
                );
                for (name, v) in &as_ {
                    if bs.get(name).is_some_and(|old| old != v) {
                        out.push(format!("args: the value of secret option `{name}` changed"));
                    }
                }
            }
            (
                Endpoint::StreamableHttp {
                    url: bu,
                    headers: bh,
                    oauth: bo,
                },
                Endpoint::StreamableHttp {
                    url: au,
                    headers: ah,
                    oauth: ao,
                },
            ) => {
                out.extend(changed_values("header", bh, ah));
                if bo != ao {
                    // A changed client or scope changes the token the runtime obtains.
                    out.push(
                        "oauth: the client, its credentials, grant, method, issuer or scopes changed (see the previews)".into(),
                    );
                }
                if bu != au && bu.origin() == au.origin() {
                    out.push("url: path, query or credentials changed (not shown)".into());
                }
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push("formatting or comments only".into());
    }
    out
}

fn changed_values(
    kind: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k).is_some_and(|old| old != *v))
        .map(|(k, _)| format!("{kind} {k}: value changed (not shown)"))
        .collect()
}

fn entry(
    path: String,
    change: Change,
    before: Option<&Found>,
    after: Option<&Found>,
) -> ChangeEntry {
    let details = match (before, after) {
        (Some(b), Some(a)) => details(b, a),
        (None, Some(_)) => vec!["new MCP server declaration".into()],
        (Some(_), None) => vec!["MCP server declaration removed".into()],
        (None, None) => Vec::new(),
    };
    ChangeEntry {
        path,
        change,
        before: before.map(preview),
        after: after.map(preview),
        details,
        before_fingerprint: before.map(fingerprint_of),
        after_fingerprint: after.map(fingerprint_of),
    }
}

pub(super) fn diff(before: &Snapshot, after: &Snapshot) -> Vec<ChangeEntry> {
    let mut changes = Vec::new();
    let paths: BTreeSet<&String> = before
        .declarations
        .keys()
        .chain(after.declarations.keys())
        .collect();
    for path in paths {
        match (before.declarations.get(path), after.declarations.get(path)) {
            (None, Some(a)) => changes.push(entry(path.clone(), Change::Added, None, Some(a))),
            (Some(b), None) => changes.push(entry(path.clone(), Change::Removed, Some(b), None)),
            (Some(b), Some(a)) if fingerprint_of(b) != fingerprint_of(a) => {
                changes.push(entry(path.clone(), Change::Modified, Some(b), Some(a)));
            }
            _ => {}
        }
    }
    if before.mcp_root != after.mcp_root {
        let digest = |s: &str| format!("root:{}", Fingerprint::of(s.as_bytes()).hex());
        changes.push(ChangeEntry {
            path: "agent.yaml#slots.mcp".into(),
            change: Change::Modified,
            before: Some(json!({"mcp_root": before.mcp_root})),
            after: Some(json!({"mcp_root": after.mcp_root})),
            details: vec![format!(
                "MCP root: {} -> {}",
                before.mcp_root, after.mcp_root
            )],
            before_fingerprint: Some(digest(&before.mcp_root)),
            after_fingerprint: Some(digest(&after.mcp_root)),
        });
    }
    for grant in before.grants.symmetric_difference(&after.grants) {
        let added = after.grants.contains(grant);
        let change = if added {
            Change::Added
        } else {
            Change::Removed
        };
        let digest = Some(format!("grant:{}", Fingerprint::of(grant.as_bytes()).hex()));
        changes.push(ChangeEntry {
            path: format!("agent.yaml#capabilities.defaults.{grant}"),
            change,
            before: (!added).then(|| json!({"grant": grant})),
            after: added.then(|| json!({"grant": grant})),
            details: vec![format!("capability grant {grant} {change}")],
            before_fingerprint: if added { None } else { digest.clone() },
            after_fingerprint: if added { digest } else { None },
        });
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

/// The token over the canonical serialization documented in the module docs.
pub(super) fn token(changes: &[ChangeEntry]) -> String {
    let mut text = String::from("demiurge-mcp-review/v2\n");
    for c in changes {
        let line = json!([
            c.path,
            c.change.as_str(),
            c.before_fingerprint.as_deref().unwrap_or("-"),
            c.after_fingerprint.as_deref().unwrap_or("-")
        ]);
        text.push_str(&line.to_string());
        text.push('\n');
    }
    format!("mcp-review:{}", Fingerprint::of(text.as_bytes()).hex())
}

impl Review {
    /// Readable text for a terminal; the last line is the token.
    pub fn render(&self) -> String {
        let mut out = format!(
            "MCP security review: {} -> {}\n",
            self.live
                .as_deref()
                .map_or("(no live revision)", |l| &l[..l.len().min(12)]),
            &self.candidate[..self.candidate.len().min(12)]
        );
        if self.changes.is_empty() {
            out.push_str("no MCP changes\n");
        }
        // Paths, details and previews carry what the core's author wrote: each is
        // escaped so no file name or command can rewrite what the reviewer reads.
        use crate::text::escape as e;
        for c in &self.changes {
            out.push_str(&format!("\n{} {}\n", c.change, e(&c.path)));
            for d in &c.details {
                out.push_str(&format!("  - {}\n", e(d)));
            }
            if let Some(a) = c.after.as_ref().or(c.before.as_ref()) {
                out.push_str(&format!(
                    "  {}: {}\n",
                    if c.after.is_some() { "after" } else { "before" },
                    e(&a.to_string())
                ));
            }
        }
        out.push_str(&format!("\n{}\n", self.token));
        out
    }
}
