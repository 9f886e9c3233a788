//! A turn's entries: what the planner made of each connection's listing, bound to its
//! connection (with the flags of what each tool's text may hide), and the last turn's
//! entries kept for a warm turn.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::Tool;

use super::{ToolEntry, ToolHints};
use crate::actors::connection::Dispatch;
use crate::core::{Declaration, Fingerprint};
use crate::offer::Offered;
use crate::redact::Redactor;

/// One entry of a turn before it is made a `ToolEntry`.
pub(crate) struct Entry<'a, B> {
    /// The exposed name.
    pub name: String,
    /// The server's tool.
    pub tool: &'a Tool,
    /// Server id.
    pub server: &'a str,
    /// What the entry is bound to.
    pub binding: B,
}

/// A connection's offer as a turn holds it: shaped, and bound to its connection.
#[derive(Clone)]
pub(crate) struct ServerEntry {
    pub offered: Arc<Offered>,
    pub binding: Binding,
}

/// Where a tool entry's calls go.
#[derive(Clone)]
pub(crate) struct Binding {
    /// The session the entry was resolved for.
    pub session: String,
    /// The catalog (identity) it was resolved by.
    pub catalog_id: u64,
    /// The server's declaration (its call capability, policy, fingerprint).
    pub declaration: Arc<Declaration>,
    /// The connection's secrets.
    pub redactor: Redactor,
    /// The entry's own connection, or none yet (its server starts when first needed).
    pub link: Link,
    /// Whether the catalog's capability snapshot grants the call capability (decided
    /// once per catalog build, not per call).
    pub call_allowed: bool,
    /// What its call approvals are bound to: the declaration where it was declared,
    /// in this workspace.
    pub approval_identity: crate::core::Fingerprint,
}

/// Where a binding's effects go.
#[derive(Clone)]
pub(crate) enum Link {
    /// The right to send on a live connection.
    Live(Dispatch),
    /// Listed from the server's last listing (`start: lazy`): the server is started
    /// (connect authority and approval as at any connect) when an effect needs it.
    Dormant,
}

impl Link {
    /// The live connection's dispatch rights; `None` while the server is not started.
    pub(crate) fn dispatch(&self) -> Option<&Dispatch> {
        match self {
            Link::Live(dispatch) => Some(dispatch),
            Link::Dormant => None,
        }
    }

    /// Whether the connection behind it closed (a dormant server has none to close).
    pub(crate) fn is_closed(&self) -> bool {
        self.dispatch().is_some_and(Dispatch::is_closed)
    }
}

/// What a warm turn's entries were built from, per server: its connection actor (none
/// for a dormant server), its tool-list generation, its declaration's fingerprint.
pub(crate) type WarmKey = Vec<(Option<ractor::ActorId>, u64, Fingerprint)>;

/// A turn's tool entries, their name index, and each connection's other offers; turns
/// built from the same connections and lists share them.
pub(crate) type Entries = (
    Arc<Vec<ToolEntry>>,
    Arc<HashMap<String, usize>>,
    Arc<Vec<ServerEntry>>,
);

/// Notes on the entries' names (a name numbered because another took it), by server.
pub(crate) type NameNotes = Arc<Vec<(String, String)>>;

/// The last turn's entries and what they were built from: each connection's actor,
/// its tool-list generation and its declaration's fingerprint. Equal keys mean the
/// entries are still exact, and the warm turn reuses them as they are.
pub(crate) struct Warm {
    key: WarmKey,
    entries: Entries,
    /// What the entries' names say of each other (numbered names), by server: worked
    /// out once per build, not per turn.
    notes: NameNotes,
}

impl Warm {
    pub(crate) fn new(key: WarmKey, entries: &Entries, notes: &NameNotes) -> Self {
        Warm {
            key,
            entries: entries.clone(),
            notes: Arc::clone(notes),
        }
    }

    /// The entries and their notes, when they were built from exactly `key`.
    pub(crate) fn reuse(
        &self,
        key: &[(Option<ractor::ActorId>, u64, Fingerprint)],
    ) -> Option<(Entries, NameNotes)> {
        (self.key == key).then(|| (self.entries.clone(), Arc::clone(&self.notes)))
    }
}

/// The planner's entries made tool entries, with their name index, beside `offers`.
pub(crate) fn bind(
    planned: Vec<Entry<'_, Binding>>,
    offers: Vec<ServerEntry>,
    memo: &crate::offer::ToolMemo,
) -> Entries {
    // Every name a description could use to steer the model to another server's tool:
    // exposed names, and raw names distinctive enough to be identifiers. With one
    // server, there is no other server's tool to name.
    let several_servers = planned.iter().any(|e| e.server != planned[0].server);
    let mut owners: HashMap<&str, &str> = HashMap::new();
    if several_servers {
        for e in &planned {
            owners.insert(e.name.as_str(), e.server);
            if crate::pins::distinctive(&e.tool.name) {
                owners.entry(e.tool.name.as_ref()).or_insert(e.server);
            }
        }
    }
    let flags: Vec<Vec<crate::pins::TextFlag>> = planned
        .iter()
        .map(|e| {
            let description = e.tool.description.as_deref().unwrap_or_default();
            let mut flags = memo.text_flags(e.tool, || {
                let mut flags = crate::pins::flags_of(description);
                flags.extend(crate::pins::flags_of(
                    e.tool.title.as_deref().unwrap_or_default(),
                ));
                flags
            });
            let other = |w: &str| owners.get(w).is_some_and(|s| *s != e.server);
            if !owners.is_empty() && crate::pins::names_other_tools(description, &other) {
                flags.push(crate::pins::TextFlag::NamesOtherTools);
            }
            flags.sort();
            flags.dedup();
            flags
        })
        .collect();
    let entries: Vec<ToolEntry> = planned
        .into_iter()
        .zip(flags)
        .map(|(e, flags)| {
            let (definition, tokens) = definition_digest(e.tool, memo);
            ToolEntry {
                flags,
                deferred_start: matches!(e.binding.link, Link::Dormant),
                tokens,
                definition,
                name: e.name,
                server: e.server.to_string(),
                tool: e.tool.name.to_string(),
                description: e
                    .tool
                    .description
                    .as_deref()
                    .unwrap_or_default()
                    .to_string(),
                input_schema: Arc::clone(&e.tool.input_schema),
                title: e.tool.title.clone(),
                annotations: e.tool.annotations.as_ref().map(ToolHints::of),
                output_schema: e.tool.output_schema.clone(),
                binding: e.binding,
            }
        })
        .collect();
    let index = entries
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    (Arc::new(entries), Arc::new(index), Arc::new(offers))
}

/// The digest of a tool's definition as the listing shaped it (serde_json writes maps
/// sorted, so equal definitions digest equally), and the tokens that definition takes
/// ([`crate::search::TOKEN_ESTIMATOR`]).
fn definition_digest(tool: &rmcp::model::Tool, memo: &crate::offer::ToolMemo) -> (String, usize) {
    let (digest, bytes) = memo.listed(tool, || crate::digest::sha256_json_hex(tool));
    (digest, crate::search::tokens(bytes))
}
