//! The pure part of a turn: what to close, connect, relist and reuse given what is live,
//! what failed recently and what the core declares now; and the entries of a turn built
//! from the servers that are connected. No actor, process or clock of its own: unit
//! tested below with plain values.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::Tool;

use crate::actors::config::HostTool;
use crate::actors::connection::LivePeer;
use crate::actors::turn::{Entry, NameCollision, ToolEntry};
use crate::core::{AgentCore, Declaration, Fingerprint};
use crate::naming::{self, Names, ServerTools};

/// A failure cached for one server.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    /// The declaration it failed with: a changed declaration is tried again at once.
    pub fingerprint: Fingerprint,
    /// Its redacted diagnostic.
    pub message: String,
    /// When it may be tried again.
    pub until: Instant,
}

/// What a turn does, per server.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// Live servers whose declaration changed or went away: closed, alone.
    pub close: Vec<String>,
    /// Cached failures that no longer apply (expired, or the declaration changed).
    pub forget: Vec<String>,
    /// Declared servers with neither a connection nor a valid failure: authorized and
    /// connected on the preparation task.
    pub connect: Vec<Arc<Declaration>>,
    /// Live servers that announced a changed tool list: listed again.
    pub relist: Vec<String>,
    /// Servers whose cached failure is reported again instead of retried.
    pub failed: Vec<(Arc<Declaration>, String)>,
}

/// Plans a turn: close what changed or went away, forget stale failures, reuse healthy
/// unchanged peers (relisting those whose list changed), report cached failures, and
/// connect the rest, in file order.
#[cfg(test)]
pub(super) fn plan(
    live: &[LivePeer],
    failures: &HashMap<String, Failure>,
    core: &AgentCore,
    now: Instant,
) -> Plan {
    plan_for(live, failures, core, now, &|_| true)
}

/// [`plan`] for a turn of the servers `covered` accepts: what changed or went away is
/// closed all the same; only covered servers are relisted, reported or connected.
pub(super) fn plan_for(
    live: &[LivePeer],
    failures: &HashMap<String, Failure>,
    core: &AgentCore,
    now: Instant,
    covered: &dyn Fn(&str) -> bool,
) -> Plan {
    let declared: HashMap<&str, &Arc<Declaration>> =
        core.enabled().map(|d| (d.server_id.as_str(), d)).collect();
    let current = |server: &str, fingerprint: Fingerprint| {
        declared
            .get(server)
            .is_some_and(|d| d.fingerprint == fingerprint)
    };
    let mut plan = Plan {
        close: live
            .iter()
            .filter(|l| !current(&l.server, l.fingerprint))
            .map(|l| l.server.clone())
            .collect(),
        forget: failures
            .iter()
            .filter(|(id, f)| !current(id, f.fingerprint) || f.until <= now)
            .map(|(id, _)| id.clone())
            .collect(),
        ..Plan::default()
    };
    for decl in core.enabled().filter(|d| covered(&d.server_id)) {
        let id = decl.server_id.as_str();
        if let Some(peer) = live.iter().find(|l| l.server == id) {
            if peer.list_changed && !plan.close.contains(&peer.server) {
                plan.relist.push(peer.server.clone());
            }
            if !plan.close.contains(&peer.server) {
                continue;
            }
        }
        match failures.get(id) {
            Some(f) if !plan.forget.iter().any(|x| x == id) => {
                plan.failed.push((Arc::clone(decl), f.message.clone()));
            }
            _ => plan.connect.push(Arc::clone(decl)),
        }
    }
    plan
}

/// A connected server as entry building sees it: its declaration, its prepared tools,
/// whether it was kept from the last turn, and what each entry carries (`B`: the
/// binding to its connection).
pub(super) struct Connected<'a, B> {
    pub declaration: &'a Declaration,
    pub tools: &'a [Tool],
    pub kept: bool,
    pub binding: B,
}

/// The entries of a turn, servers in the order given (file order), tools in listing
/// order, through each declaration's filter; names stable for kept peers
/// (docs/design.md#3-names).
///
/// # Errors
/// A collision with a host tool, naming both provenances.
pub(super) fn entries<'a, B: Clone>(
    servers: &'a [Connected<'a, B>],
    previous: &Names,
    host_tools: &[HostTool],
) -> Result<(Vec<Entry<'a, B>>, Names), NameCollision> {
    let views: Vec<ServerTools<'_>> = servers
        .iter()
        .map(|s| ServerTools {
            server_id: &s.declaration.server_id,
            tools: s
                .tools
                .iter()
                .map(|t| t.name.as_ref())
                .filter(|name| naming::filter_allows(&s.declaration.tools, name))
                .collect(),
            kept: s.kept,
        })
        .collect();
    let names = naming::assign(&views, previous);
    let mut out = Vec::new();
    for server in servers {
        let decl = server.declaration;
        for tool in server
            .tools
            .iter()
            .filter(|t| naming::filter_allows(&decl.tools, &t.name))
        {
            let Some(name) = names.exposed(&decl.server_id, &tool.name) else {
                continue;
            };
            if let Some(host) = host_tools
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
            {
                return Err(NameCollision {
                    name: name.clone(),
                    host_tool: host.provenance.to_string(),
                    path: decl.path.to_string(),
                    server: decl.server_id.clone(),
                    tool: tool.name.to_string(),
                });
            }
            out.push(Entry {
                name: name.clone(),
                tool,
                server: &decl.server_id,
                binding: server.binding.clone(),
            });
        }
    }
    Ok((out, names))
}

/// One note per tool whose exposed name was numbered because another took its first
/// choice: the exposed name and both provenances (server and the server's own tool
/// name), so a person can tell `docs__search-2` from `docs__search`.
pub(super) fn collision_notes(entries: &[ToolEntry]) -> Vec<(String, String)> {
    // Every entry not exposed as its first choice, with that choice: usually none.
    let numbered: Vec<(&ToolEntry, String)> = entries
        .iter()
        .filter_map(|e| {
            let (prefix, _) = e.name.split_once("__")?;
            (!naming::is_first_choice(prefix, &e.tool, &e.name))
                .then(|| (e, naming::first_choice(prefix, &e.tool)))
        })
        .collect();
    if numbered.is_empty() {
        return Vec::new();
    }
    let by_name: std::collections::HashMap<String, &ToolEntry> =
        entries.iter().map(|e| (e.name.to_lowercase(), e)).collect();
    // A raw name is the server's text: quoted as JSON (a backtick in it cannot close
    // the quote) and cut; at most a few notes a server, then a count.
    const NOTES: usize = 4;
    let quoted =
        |raw: &str| serde_json::to_string(&crate::result::cap_chars(raw, 64)).unwrap_or_default();
    let mut per_server: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (e, wanted) in numbered {
        let Some(other) = by_name.get(&wanted.to_lowercase()) else {
            continue;
        };
        per_server.entry(&e.server).or_default().push(format!(
            "tool {} is exposed as `{}`: `{}` is already tool {} of server `{}` (names compare case-insensitively, after `[A-Za-z0-9_-]` normalization)",
            quoted(&e.tool),
            e.name,
            other.name,
            quoted(&other.tool),
            other.server
        ));
    }
    per_server
        .into_iter()
        .flat_map(|(server, mut notes)| {
            let more = notes.len().saturating_sub(NOTES);
            notes.truncate(NOTES);
            if more > 0 {
                notes.push(format!("{more} more tools were numbered the same way"));
            }
            notes.into_iter().map(move |n| (server.to_string(), n))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn core(declarations: &[(&str, &str)]) -> AgentCore {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("agent/mcp")).unwrap();
        std::fs::write(dir.path().join("agent.yaml"), "name: t\n").unwrap();
        for (id, yaml) in declarations {
            std::fs::write(dir.path().join(format!("agent/mcp/{id}.yaml")), yaml).unwrap();
        }
        crate::core::load(dir.path()).unwrap()
    }

    fn peer(core: &AgentCore, id: &str, list_changed: bool) -> LivePeer {
        let d = core
            .declarations
            .iter()
            .find(|d| d.server_id == id)
            .unwrap();
        LivePeer {
            server: id.into(),
            fingerprint: d.fingerprint,
            list_changed,
        }
    }

    fn ids(decls: &[Arc<Declaration>]) -> Vec<&str> {
        decls.iter().map(|d| d.server_id.as_str()).collect()
    }

    #[test]
    fn healthy_unchanged_peers_are_reused_and_the_rest_connected_in_file_order() {
        let c = core(&[
            ("a", "command: a\n"),
            ("b", "command: b\n"),
            ("c", "command: c\n"),
        ]);
        let plan = plan(&[peer(&c, "b", false)], &HashMap::new(), &c, Instant::now());
        assert_eq!(ids(&plan.connect), ["a", "c"]);
        assert!(plan.close.is_empty() && plan.relist.is_empty() && plan.failed.is_empty());
    }

    #[test]
    fn a_changed_declaration_closes_and_reconnects_that_server_alone() {
        let before = core(&[("a", "command: a\n"), ("b", "command: b\n")]);
        let live = [peer(&before, "a", false), peer(&before, "b", true)];
        let after = core(&[("a", "command: a2\n"), ("b", "command: b\n")]);
        let plan = plan(&live, &HashMap::new(), &after, Instant::now());
        assert_eq!(plan.close, ["a"]);
        assert_eq!(ids(&plan.connect), ["a"]);
        assert_eq!(
            plan.relist,
            ["b"],
            "a list change is applied at the turn boundary"
        );
    }

    #[test]
    fn removed_or_disabled_servers_are_closed() {
        let before = core(&[("a", "command: a\n"), ("b", "command: b\n")]);
        let live = [peer(&before, "a", false), peer(&before, "b", false)];
        let after = core(&[("a", "command: a\nenabled: false\n")]);
        let plan = plan(&live, &HashMap::new(), &after, Instant::now());
        assert_eq!(plan.close, ["a", "b"]);
        assert!(plan.connect.is_empty());
    }

    #[test]
    fn cached_failures_are_reported_until_they_expire_or_the_declaration_changes() {
        let c = core(&[("a", "command: a\n"), ("b", "command: b\n")]);
        let now = Instant::now();
        let fp = |id: &str| {
            c.declarations
                .iter()
                .find(|d| d.server_id == id)
                .unwrap()
                .fingerprint
        };
        let failures = HashMap::from([
            (
                "a".to_string(),
                Failure {
                    fingerprint: fp("a"),
                    message: "boom".into(),
                    until: now + Duration::from_secs(30),
                },
            ),
            (
                "b".to_string(),
                Failure {
                    fingerprint: fp("b"),
                    message: "old".into(),
                    until: now,
                },
            ),
        ]);
        let p = plan(&[], &failures, &c, now);
        assert_eq!(p.failed.len(), 1);
        assert_eq!(
            (p.failed[0].0.server_id.as_str(), p.failed[0].1.as_str()),
            ("a", "boom")
        );
        assert_eq!(p.forget, ["b"]);
        assert_eq!(ids(&p.connect), ["b"]);
        // The same failure after the declaration changed: tried again at once.
        let changed = core(&[("a", "command: a-fixed\n"), ("b", "command: b\n")]);
        let p = plan(&[], &failures, &changed, now);
        assert!(p.failed.is_empty());
        assert_eq!(ids(&p.connect), ["a", "b"]);
    }

    fn tool(name: &str) -> Tool {
        serde_json::from_value(serde_json::json!({"name": name, "inputSchema": {"type": "object"}}))
            .unwrap()
    }

    #[test]
    fn entries_filter_name_and_keep_names_of_kept_peers() {
        let c = core(&[
            ("docs", "command: d\ntools:\n  include: [s*, S*]\n"),
            ("Docs2", "command: e\n"),
        ]);
        let (docs, other) = (&c.declarations[1], &c.declarations[0]);
        let docs_tools = [tool("search"), tool("fetch"), tool("Search")];
        let other_tools = [tool("x")];
        let servers = [
            Connected {
                declaration: other.as_ref(),
                tools: &other_tools,
                kept: false,
                binding: 2,
            },
            Connected {
                declaration: docs.as_ref(),
                tools: &docs_tools,
                kept: false,
                binding: 1,
            },
        ];
        let (entries, names) = entries(&servers, &Names::default(), &[]).unwrap();
        let shown: Vec<(&str, i32)> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.binding))
            .collect();
        assert_eq!(
            shown,
            [("Docs2__x", 2), ("docs__search-2", 1), ("docs__Search", 1)]
        );
        // Next turn: `docs` is kept; a new server taking its prefix comes first.
        let newcomer = core(&[("DOCS", "command: n\n")]);
        let nt = [tool("search")];
        let servers = [
            Connected {
                declaration: newcomer.declarations[0].as_ref(),
                tools: &nt,
                kept: false,
                binding: 3,
            },
            Connected {
                declaration: docs.as_ref(),
                tools: &docs_tools,
                kept: true,
                binding: 1,
            },
        ];
        let (entries, _) = super::entries(&servers, &names, &[]).unwrap();
        assert!(
            entries
                .iter()
                .any(|e| e.name == "docs__search-2" && e.binding == 1)
        );
        assert!(
            entries
                .iter()
                .any(|e| e.name == "DOCS-2__search" && e.binding == 3)
        );
    }

    #[test]
    fn a_host_tool_collision_names_both_provenances() {
        let c = core(&[("docs", "command: d\n")]);
        let tools = [tool("search")];
        let servers = [Connected {
            declaration: c.declarations[0].as_ref(),
            tools: &tools,
            kept: false,
            binding: (),
        }];
        let host = [HostTool {
            name: "DOCS__search".into(),
            provenance: "builtin:search".into(),
        }];
        let err = entries(&servers, &Names::default(), &host).err().unwrap();
        assert_eq!(
            (
                err.host_tool.as_str(),
                err.server.as_str(),
                err.tool.as_str()
            ),
            ("builtin:search", "docs", "search")
        );
        let text = err.to_string();
        assert!(
            text.contains("builtin:search") && text.contains("mcp:agent/mcp/docs.yaml:docs/search"),
            "{text}"
        );
    }
}
