//! A turn over its token budget for tool definitions: what the model is offered whole
//! (the tools always loaded, the ones it described, and the host tools `search_tools`
//! and `describe_tool`), what it is offered as a name and a one-line summary (the
//! rest), the rule that decided, and the two host tools themselves.
//!
//! The rule is pure and deterministic: the turn's tools' whole definitions are counted
//! with [`crate::search::TOKEN_ESTIMATOR`]; when they fit the budget nothing changes,
//! otherwise the turn is deferred. Search ranks only what the turn could call (the
//! declaration's filters, the call capability, a `deny` call policy and held-back
//! definitions apply first), and every text it returns is the turn's own: redacted and
//! capped when the listing was shaped.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use rmcp::model::JsonObject;
use serde::Serialize;
use serde_json::{Value, json};

use super::{ToolEntry, TurnCatalog};
use crate::core::ApprovalPolicy;
use crate::redact::Redactor;
use crate::result::{Provenance, ToolResult};
use crate::search::{self, Document, Index, ToolBudget};

/// The host tool that finds deferred tools by what they do.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The host tool that gives deferred tools' whole definitions and makes them callable.
pub const DESCRIBE_TOOL: &str = "describe_tool";

/// Most tools one `search_tools` returns, and most names one `describe_tool` takes.
pub const MAX_LOOKUP: usize = 20;

/// How a turn's tool definitions were offered: the rule's inputs and what it decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Deferral {
    /// The budget, in tokens.
    pub budget: usize,
    /// How tokens were counted.
    pub estimator: &'static str,
    /// Tools in the turn.
    pub tools: usize,
    /// Tokens of every tool's whole definition.
    pub full_tokens: usize,
    /// Whether the turn is deferred (`full_tokens` over `budget`).
    pub deferred: bool,
    /// Tokens of what the model is offered at the turn's start: the whole catalog when
    /// not deferred; else the loaded definitions, the summaries and the host tools.
    pub offered_tokens: usize,
    /// Tools offered whole although the turn is deferred (the host's `always_loaded`).
    pub always_loaded: Vec<String>,
    /// Tools offered as a name and summary only.
    pub deferred_tools: usize,
}

impl Deferral {
    /// The rule over `tools` and `budget`.
    pub(crate) fn decide(tools: &[ToolEntry], budget: &ToolBudget) -> Self {
        let full_tokens: usize = tools.iter().map(|t| t.tokens).sum();
        let mut deferral = Deferral {
            budget: budget.tokens,
            estimator: search::TOKEN_ESTIMATOR,
            tools: tools.len(),
            full_tokens,
            deferred: full_tokens > budget.tokens,
            offered_tokens: full_tokens,
            always_loaded: Vec::new(),
            deferred_tools: 0,
        };
        if !deferral.deferred {
            return deferral;
        }
        let marked = |t: &ToolEntry| {
            budget
                .always_loaded
                .iter()
                .any(|m| *m == t.server || m.eq_ignore_ascii_case(&t.name))
        };
        let mut offered = host_tool_tokens();
        for tool in tools {
            if marked(tool) {
                deferral.always_loaded.push(tool.name.clone());
                offered += tool.tokens;
            } else {
                deferral.deferred_tools += 1;
                let line = tool.name.len() + summary_of(tool).len() + 4;
                offered += search::tokens(line);
            }
        }
        deferral.offered_tokens = offered;
        deferral
    }

    /// The rule in words, for the turn's diagnostics.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "tool definitions deferred: {} tools take {} tokens ({}), over the budget of {}; {} offered as a name and a summary, {} whole (always loaded), with search_tools and describe_tool: {} tokens",
            self.tools,
            self.full_tokens,
            self.estimator,
            self.budget,
            self.deferred_tools,
            self.always_loaded.len(),
            self.offered_tokens
        );
        if self.offered_tokens > self.budget {
            text.push_str(if self.always_loaded.is_empty() {
                " (still over the budget: the summaries alone exceed it; raise it)"
            } else {
                " (still over the budget: load fewer tools always, or raise it)"
            });
        }
        text
    }
}

/// A tool as the model is offered it this turn.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct ModelTool {
    /// Exposed name.
    pub name: String,
    /// Its whole description, or for a deferred tool its one-line summary.
    pub description: String,
    /// Its arguments' schema; `None` for a deferred tool (`describe_tool` gives it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Arc<JsonObject>>,
    /// Offered as a name and summary only: `describe_tool` makes it callable.
    pub deferred: bool,
    /// Its server starts when the tool is first called.
    pub deferred_start: bool,
}

/// A deferred turn's state: the rule, what the model described, the search index.
pub(crate) struct Deferred {
    pub rule: Deferral,
    /// Exposed names offered whole (always loaded or described this turn).
    loaded: Mutex<HashSet<String>>,
    index: OnceLock<(Index, Vec<usize>)>,
}

impl Deferred {
    pub(crate) fn new(rule: Deferral) -> Self {
        let loaded = rule.always_loaded.iter().cloned().collect();
        Deferred {
            rule,
            loaded: Mutex::new(loaded),
            index: OnceLock::new(),
        }
    }
}

/// A tool's summary: its description's first sentence (or its title), one bounded line.
fn summary_of(tool: &ToolEntry) -> String {
    search::summary(&tool.description, tool.title.as_deref())
}

/// The definitions of the two host tools, as the model is offered them.
fn host_tools() -> [ModelTool; 2] {
    let schema = |value: Value| match value {
        Value::Object(map) => Some(Arc::new(map)),
        _ => None,
    };
    [
        ModelTool {
            name: SEARCH_TOOLS.into(),
            description: "Finds tools of this turn by what they do. Many tools are listed by name and a one-line summary only; search here, then call describe_tool with the names you need.".into(),
            input_schema: schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LOOKUP, "default": 5}
                },
                "required": ["query"]
            })),
            deferred: false,
            deferred_start: false,
        },
        ModelTool {
            name: DESCRIBE_TOOL.into(),
            description: "Gives the whole definitions (description and argument schema) of tools listed by name only, and makes them callable in this turn.".into(),
            input_schema: schema(json!({
                "type": "object",
                "properties": {
                    "names": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_LOOKUP}
                },
                "required": ["names"]
            })),
            deferred: false,
            deferred_start: false,
        },
    ]
}

fn host_tool_tokens() -> usize {
    host_tools()
        .iter()
        .map(|t| search::tokens(serde_json::to_vec(t).map_or(0, |b| b.len())))
        .sum()
}

impl TurnCatalog {
    /// How this turn's tool definitions were offered, when the session or runtime set a
    /// budget: the rule's inputs and its decision.
    pub fn deferral(&self) -> Option<&Deferral> {
        self.deferred.as_deref().map(|d| &d.rule)
    }

    /// Whether the turn offers `name` whole: always, unless the turn is deferred and
    /// `name` was neither always loaded nor described.
    pub fn is_loaded(&self, name: &str) -> bool {
        match self.deferred.as_deref() {
            Some(d) if d.rule.deferred => d.loaded.lock().is_ok_and(|l| l.contains(name)),
            _ => true,
        }
    }

    /// Makes deferred tools callable in this turn, as `describe_tool` does (for a host
    /// that shows the definitions itself). Unknown names are ignored.
    pub fn load(&self, names: &[&str]) {
        if let Some(d) = self.deferred.as_deref()
            && let Ok(mut loaded) = d.loaded.lock()
        {
            loaded.extend(
                names
                    .iter()
                    .filter(|n| self.get(n).is_some())
                    .map(|n| (*n).to_string()),
            );
        }
    }

    /// What the model is offered this turn, in catalog order: every tool whole when the
    /// turn is not deferred; else the loaded tools whole, the rest by name and summary,
    /// then `search_tools` and `describe_tool`.
    pub fn model_tools(&self) -> Vec<ModelTool> {
        let deferred = self.deferral().is_some_and(|d| d.deferred);
        let mut out: Vec<ModelTool> = self
            .tools()
            .iter()
            .map(|t| {
                let whole = !deferred || self.is_loaded(&t.name);
                ModelTool {
                    name: t.name.clone(),
                    description: if whole {
                        t.description.clone()
                    } else {
                        summary_of(t)
                    },
                    input_schema: whole.then(|| Arc::clone(&t.input_schema)),
                    deferred: !whole,
                    deferred_start: t.deferred_start,
                }
            })
            .collect();
        if deferred {
            out.extend(host_tools());
        }
        out
    }

    /// Whether `name` is one of this turn's host tools (only a deferred turn has them).
    pub(crate) fn is_host_tool(&self, name: &str) -> bool {
        self.deferral().is_some_and(|d| d.deferred)
            && (name == SEARCH_TOOLS || name == DESCRIBE_TOOL)
    }

    /// Runs `search_tools` or `describe_tool` with `arguments`.
    pub(crate) fn host_tool(&self, name: &str, arguments: &Value) -> ToolResult {
        let started = Instant::now();
        let answer = if name == SEARCH_TOOLS {
            self.search_tools(arguments)
        } else {
            self.describe_tools(arguments)
        };
        let provenance = Provenance {
            server: "demiurge".into(),
            tool: name.to_string(),
            exposed: name.to_string(),
            started: true,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let redactor = Redactor::new();
        match answer {
            Ok((text, data)) => {
                let raw = json!({
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": data,
                });
                ToolResult::from_mcp(provenance, raw, &redactor, &self.shared.config.result_shape)
            }
            Err(message) => ToolResult::error(provenance, &message, &redactor),
        }
    }

    /// Whether a search may show `tool`: only what this turn could call.
    fn searchable(&self, tool: &ToolEntry) -> bool {
        tool.binding.call_allowed
            && self.policy.call_policy(&tool.binding.declaration) != ApprovalPolicy::Deny
    }

    fn search_tools(&self, arguments: &Value) -> Result<(String, Value), String> {
        let Some(query) = arguments.get("query").and_then(Value::as_str) else {
            return Err(
                "search_tools needs `query`: a string saying what the tool should do".into(),
            );
        };
        let limit = arguments
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(5, |l| usize::try_from(l).unwrap_or(MAX_LOOKUP))
            .clamp(1, MAX_LOOKUP);
        let Some(deferred) = self.deferred.as_deref() else {
            return Err("this turn has no deferred tools".into());
        };
        let (index, positions) = deferred.index.get_or_init(|| self.index());
        let found: Vec<&ToolEntry> = index
            .search(query, limit)
            .into_iter()
            .filter_map(|(i, _)| self.tools().get(*positions.get(i)?))
            .collect();
        let mut text = String::new();
        let listed: Vec<Value> = found
            .iter()
            .map(|t| {
                let summary = summary_of(t);
                text.push_str(&format!("{}: {summary}\n", t.name));
                json!({"name": t.name, "summary": summary, "deferred_start": t.deferred_start})
            })
            .collect();
        if listed.is_empty() {
            text.push_str("no tool of this turn matches; try other words\n");
        } else {
            text.push_str("call describe_tool with the names you need\n");
        }
        Ok((text, json!({ "tools": listed })))
    }

    /// The search index over what this turn could call, and each document's tool.
    fn index(&self) -> (Index, Vec<usize>) {
        let callable: Vec<(usize, &ToolEntry)> = self
            .tools()
            .iter()
            .enumerate()
            .filter(|(_, t)| self.searchable(t))
            .collect();
        let parameters: Vec<Vec<&str>> = callable
            .iter()
            .map(|(_, t)| match t.input_schema.get("properties") {
                Some(Value::Object(p)) => p.keys().map(String::as_str).take(64).collect(),
                _ => Vec::new(),
            })
            .collect();
        let documents: Vec<Document<'_>> = callable
            .iter()
            .zip(&parameters)
            .map(|((_, t), p)| Document {
                name: &t.name,
                title: t.title.as_deref(),
                description: &t.description,
                parameters: p,
            })
            .collect();
        let positions = callable.iter().map(|(i, _)| *i).collect();
        (Index::new(&documents), positions)
    }

    fn describe_tools(&self, arguments: &Value) -> Result<(String, Value), String> {
        let Some(names) = arguments.get("names").and_then(Value::as_array) else {
            return Err("describe_tool needs `names`: an array of tool names".into());
        };
        let mut described = Vec::new();
        let mut unknown = Vec::new();
        for name in names.iter().take(MAX_LOOKUP) {
            let Some(name) = name.as_str() else { continue };
            match self.get(name).filter(|t| self.searchable(t)) {
                Some(tool) => described.push(tool),
                None => unknown.push(crate::result::cap_chars(name, 80)),
            }
        }
        let names: Vec<&str> = described.iter().map(|t| t.name.as_str()).collect();
        self.load(&names);
        let definitions: Vec<Value> = described
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "title": t.title,
                    "description": t.description,
                    "input_schema": t.input_schema,
                    "annotations": t.annotations,
                    "deferred_start": t.deferred_start,
                })
            })
            .collect();
        let mut text = serde_json::to_string_pretty(&definitions).unwrap_or_default();
        if !unknown.is_empty() {
            text.push_str(&format!(
                "\nnot tools of this turn: {}",
                serde_json::to_string(&unknown).unwrap_or_default()
            ));
        }
        Ok((text, json!({"tools": definitions, "unknown": unknown})))
    }
}
