//! A shaped listing as pins see it: every definition a turn could show (tools the
//! declaration's `tools:` lets through, templates, prompts, instructions), one per kind
//! and name, and a listing with the held ones left out.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use super::Offered;
use crate::core::Declaration;
use crate::pins::{DefinitionKind, Held, Pin};

/// A definition as canonical JSON (serde_json's maps are sorted).
fn json<T: Serialize>(definition: &T) -> Value {
    serde_json::to_value(definition).unwrap_or_default()
}

/// Every definition of one shaped listing, pinned: the tools `declaration` lets
/// through (one a filter hides can reach no model, so asks nobody), templates, prompts
/// and instructions; of two with one kind and name, the first.
pub(crate) fn pins_of(
    tools: &[rmcp::model::Tool],
    offered: &Offered,
    declaration: &Declaration,
) -> Vec<Pin> {
    let tools = tools
        .iter()
        .filter(|t| crate::naming::filter_allows(&declaration.tools, &t.name))
        .map(|t| Pin::of(DefinitionKind::Tool, &t.name, json(t)));
    let templates = offered
        .templates
        .iter()
        .map(|t| Pin::of(DefinitionKind::Template, &t.uri_template, json(t)));
    let prompts = offered
        .prompts
        .iter()
        .map(|p| Pin::of(DefinitionKind::Prompt, &p.prompt, json(p)));
    let instructions = offered.identity.instructions.iter().map(|i| {
        Pin::of(
            DefinitionKind::Instructions,
            "instructions",
            Value::String(i.clone()),
        )
    });
    let mut seen = HashSet::new();
    tools
        .chain(templates)
        .chain(prompts)
        .chain(instructions)
        .filter(|p| seen.insert((p.kind, p.name.clone())))
        .collect()
}

/// Leaves `held` out of a shaped listing: held tools, templates and prompts are
/// removed, held instructions withheld.
pub(crate) fn withhold(tools: &mut Vec<rmcp::model::Tool>, offered: &mut Offered, held: &[Held]) {
    let held: HashSet<(DefinitionKind, &str)> =
        held.iter().map(|h| (h.kind, h.name.as_str())).collect();
    // Held names are pins' names: a very long name is kept bounded there.
    let holds = |kind: DefinitionKind, name: &str| {
        held.contains(&(kind, crate::pins::bounded_name(name).as_str()))
    };
    tools.retain(|t| !holds(DefinitionKind::Tool, &t.name));
    offered
        .templates
        .retain(|t| !holds(DefinitionKind::Template, &t.uri_template));
    offered
        .prompts
        .retain(|p| !holds(DefinitionKind::Prompt, &p.prompt));
    if holds(DefinitionKind::Instructions, "instructions") {
        offered.identity.instructions = None;
    }
}
