//! A shaped listing as pins see it: every definition a turn could show (tools the
//! declaration's `tools:` lets through, templates, prompts, instructions), one per kind
//! and name, and a listing with the held ones left out.

use std::borrow::Cow;
use std::collections::HashSet;

use foldhash::HashSetExt;
use serde::Serialize;
use serde_json::Value;

use super::{Offered, ToolMemo};
use crate::core::Declaration;
use crate::pins::{DefinitionKind, Held, Pin};

/// A definition as canonical JSON (serde_json's maps are sorted).
fn json<T: Serialize>(definition: &T) -> Value {
    serde_json::to_value(definition).unwrap_or_default()
}

/// A tool's canonical JSON but its schemas (left empty or out).
fn without_schemas(tool: &rmcp::model::Tool) -> Value {
    let mut rest = tool.clone();
    rest.input_schema = std::sync::Arc::default();
    rest.output_schema = None;
    json(&rest)
}

/// A tool as canonical JSON, equal to [`json`]'s: its schemas are maps already, so
/// they are cloned in, not serialized into new maps key by key (most of a tool).
fn tool_json(tool: &rmcp::model::Tool) -> Value {
    let mut value = without_schemas(tool);
    if let Value::Object(map) = &mut value {
        map.insert(
            "inputSchema".into(),
            Value::Object((*tool.input_schema).clone()),
        );
        if let Some(output) = &tool.output_schema {
            map.insert("outputSchema".into(), Value::Object((**output).clone()));
        }
    }
    value
}

/// One definition of a listing, before it is made canonical JSON.
enum Definition<'a> {
    Tool(&'a rmcp::model::Tool),
    Other(Value),
}

impl Definition<'_> {
    fn json(self) -> Value {
        match self {
            Definition::Tool(tool) => tool_json(tool),
            Definition::Other(value) => value,
        }
    }

    /// The digest [`Pin::of`] gives its JSON; a tool's as `memo` knows it.
    fn digest(self, memo: &ToolMemo) -> String {
        match self {
            Definition::Tool(tool) => memo.canonical(tool, || tool_digest(tool)),
            Definition::Other(value) => Pin::digest_of(&value),
        }
    }
}

/// The digest [`Pin::of`] gives a tool's JSON. Its schemas, most of it, are serialized
/// where they are, not copied into a JSON value first.
fn tool_digest(tool: &rmcp::model::Tool) -> String {
    #[derive(Serialize)]
    #[serde(untagged)]
    enum Part<'a> {
        Value(&'a Value),
        Schema(&'a rmcp::model::JsonObject),
    }
    let Value::Object(top) = without_schemas(tool) else {
        return crate::digest::sha256_json_hex(&tool_json(tool)).0;
    };
    // Keys sorted as a JSON map sorts them: the same bytes as the whole value's.
    let mut parts: std::collections::BTreeMap<&str, Part> = top
        .iter()
        .map(|(k, v)| (k.as_str(), Part::Value(v)))
        .collect();
    parts.insert("inputSchema", Part::Schema(&tool.input_schema));
    if let Some(output) = &tool.output_schema {
        parts.insert("outputSchema", Part::Schema(output));
    }
    crate::digest::sha256_json_hex(&parts).0
}

/// Every definition of one shaped listing, by kind, name and the name as a pin keeps it
/// ([`crate::pins::bounded_name`]): the tools `declaration` lets through (one a filter
/// hides can reach no model, so asks nobody), templates, prompts and instructions; of
/// two with one kind and kept name, the first.
fn definitions<'a>(
    tools: &'a [rmcp::model::Tool],
    offered: &'a Offered,
    declaration: &'a Declaration,
) -> impl Iterator<Item = (DefinitionKind, &'a str, Cow<'a, str>, Definition<'a>)> {
    let count = tools.len() + offered.templates.len() + offered.prompts.len() + 1;
    let tools = tools
        .iter()
        .filter(|t| crate::naming::filter_allows(&declaration.tools, &t.name))
        .map(|t| (DefinitionKind::Tool, t.name.as_ref(), Definition::Tool(t)));
    let templates = offered.templates.iter().map(|t| {
        let json = Definition::Other(json(t));
        (DefinitionKind::Template, t.uri_template.as_str(), json)
    });
    let prompts = offered.prompts.iter().map(|p| {
        let json = Definition::Other(json(p));
        (DefinitionKind::Prompt, p.prompt.as_str(), json)
    });
    let instructions = offered.identity.instructions.iter().map(|i| {
        let json = Definition::Other(Value::String(i.clone()));
        (DefinitionKind::Instructions, "instructions", json)
    });
    // Hashed as in `naming::assign`, with the same bound.
    let mut seen = foldhash::HashSet::with_capacity(count);
    tools
        .chain(templates)
        .chain(prompts)
        .chain(instructions)
        .map(|(kind, name, definition)| (kind, name, crate::pins::bounded_name(name), definition))
        .filter(move |(kind, _, kept, _)| seen.insert((*kind, kept.clone())))
}

/// Every definition of one shaped listing, pinned ([`definitions`]).
pub(crate) fn pins_of(
    tools: &[rmcp::model::Tool],
    offered: &Offered,
    declaration: &Declaration,
) -> Vec<Pin> {
    definitions(tools, offered, declaration)
        .map(|(kind, name, _, definition)| Pin::of(kind, name, definition.json()))
        .collect()
}

/// Whether `approved` holds every definition of this listing as it is served ([`pins_of`]
/// compared with [`crate::pins::compare`] finds no change), worked out from digests
/// alone: no definition is made a JSON value.
pub(crate) fn all_approved(
    memo: &ToolMemo,
    approved: &[Pin],
    tools: &[rmcp::model::Tool],
    offered: &Offered,
    declaration: &Declaration,
) -> bool {
    let by_name: foldhash::HashMap<(DefinitionKind, &str), &str> = approved
        .iter()
        .map(|p| ((p.kind, p.name.as_str()), p.digest.as_str()))
        .collect();
    definitions(tools, offered, declaration).all(|(kind, _, kept, definition)| {
        by_name
            .get(&(kind, kept.as_ref()))
            .is_some_and(|digest| *digest == definition.digest(memo))
    })
}

/// Leaves `held` out of a shaped listing: held tools, templates and prompts are
/// removed, held instructions withheld.
pub(crate) fn withhold(tools: &mut Vec<rmcp::model::Tool>, offered: &mut Offered, held: &[Held]) {
    let held: HashSet<(DefinitionKind, &str)> =
        held.iter().map(|h| (h.kind, h.name.as_str())).collect();
    // Held names are pins' names: a very long name is kept bounded there.
    let holds = |kind: DefinitionKind, name: &str| {
        held.contains(&(kind, crate::pins::bounded_name(name).as_ref()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_pins_as_its_whole_serialization() {
        let schema = |v: Value| match v {
            Value::Object(map) => std::sync::Arc::new(map),
            _ => unreachable!("a schema is an object"),
        };
        let plain =
            rmcp::model::Tool::new("t", "a tool", schema(serde_json::json!({"type": "object"})));
        let mut full = plain.clone();
        full.title = Some("T".into());
        full.input_schema = schema(serde_json::json!({
            "type": "object",
            "properties": {"q": {"type": "string", "enum": ["a", 1, null]}},
            "required": ["q"],
            "inputSchema": "a property named like the field"
        }));
        full.output_schema = Some(schema(serde_json::json!({"type": "object", "z": [{}]})));
        full.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
        full.meta = Some(rmcp::model::MetaObject(
            serde_json::json!({"outputSchema": 1})
                .as_object()
                .unwrap()
                .clone(),
        ));
        let mut bare = plain.clone();
        bare.description = None;
        for tool in [plain, full, bare] {
            assert_eq!(tool_json(&tool), json(&tool));
            let pinned = Pin::of(DefinitionKind::Tool, &tool.name, json(&tool)).digest;
            assert_eq!(tool_digest(&tool), pinned);
            assert_eq!(Definition::Tool(&tool).digest(&ToolMemo::default()), pinned);
        }
    }

    fn tool(name: &str, description: &str) -> rmcp::model::Tool {
        let schema = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!("an object")
        };
        rmcp::model::Tool::new(name.to_string(), description.to_string(), schema)
    }

    /// A server may list the kept form of one of its long names as a second name: the
    /// two stay two pins, so a person's approval of one never covers the other.
    #[test]
    fn a_name_written_like_a_kept_long_name_is_a_pin_of_its_own() {
        let declaration = crate::offer::test_declaration("command: x\n");
        let offered = Offered::default();
        for long in ["l".repeat(600), "é".repeat(300), "k".repeat(513)] {
            let kept = crate::pins::bounded_name(&long);
            assert_ne!(crate::pins::bounded_name(&kept), kept, "{kept}");
            let approved = pins_of(&[tool(&kept, "short")], &offered, &declaration);
            // Either order: the long one is new, so the listing is not all approved.
            for listed in [
                vec![tool(&kept, "short"), tool(&long, "long")],
                vec![tool(&long, "long"), tool(&kept, "short")],
            ] {
                let served = pins_of(&listed, &offered, &declaration);
                assert_eq!(served.len(), 2);
                assert!(!crate::pins::compare(&approved, &served).is_empty());
                let memo = ToolMemo::default();
                assert!(!all_approved(
                    &memo,
                    &approved,
                    &listed,
                    &offered,
                    &declaration
                ));
            }
        }
    }

    /// Digests alone find a listing all approved exactly when its pins compared with
    /// the approved ones find no change.
    #[test]
    fn a_listing_is_all_approved_exactly_when_its_pins_show_no_change() {
        let declaration = crate::offer::test_declaration;
        let all = declaration("command: x\n");
        let some = declaration("command: x\ntools:\n  include: [a, b]\n");
        // A name past what a pin keeps whole, in characters of several bytes.
        let long = "é".repeat(600);
        let before = vec![tool("a", "A"), tool("b", "B"), tool(&long, "L")];
        let mut offered = Offered::default();
        offered.identity.instructions = Some("use a".into());
        let approved = pins_of(&before, &offered, &all);

        let changed = vec![tool("a", "A"), tool("b", "B, now other"), tool(&long, "L")];
        let added = vec![
            tool("a", "A"),
            tool("b", "B"),
            tool(&long, "L"),
            tool("c", "C"),
        ];
        let removed = vec![tool("a", "A")];
        let twice = vec![tool("a", "A"), tool("a", "A again"), tool("b", "B")];
        let twice_changed_first = vec![tool("a", "A again"), tool("a", "A"), tool("b", "B")];
        let long_changed = vec![tool("a", "A"), tool("b", "B"), tool(&long, "L2")];
        let hidden_change = vec![tool("a", "A"), tool("b", "B"), tool("c", "C")];
        let mut other_instructions = offered.clone();
        other_instructions.identity.instructions = Some("use b".into());
        let cases: Vec<(&str, &[rmcp::model::Tool], &Offered, &Declaration, bool)> = vec![
            ("as approved", &before, &offered, &all, true),
            ("a description changed", &changed, &offered, &all, false),
            ("a tool added", &added, &offered, &all, false),
            ("tools removed", &removed, &offered, &all, true),
            (
                "listed twice, the first as approved",
                &twice,
                &offered,
                &all,
                true,
            ),
            (
                "listed twice, the first changed",
                &twice_changed_first,
                &offered,
                &all,
                false,
            ),
            (
                "a long name's tool changed",
                &long_changed,
                &offered,
                &all,
                false,
            ),
            (
                "a change the filter hides",
                &hidden_change,
                &offered,
                &some,
                true,
            ),
            (
                "instructions changed",
                &before,
                &other_instructions,
                &all,
                false,
            ),
        ];
        // Each case is asked twice of one memory: a digest it kept is the same.
        let memo = ToolMemo::default();
        for (what, tools, offered, declaration, expected) in cases.iter().chain(&cases) {
            let (tools, offered, declaration, expected) =
                (*tools, *offered, *declaration, *expected);
            let served = pins_of(tools, offered, declaration);
            let no_change = crate::pins::compare(&approved, &served).is_empty();
            assert_eq!(no_change, expected, "{what}: compare");
            assert_eq!(
                all_approved(&memo, &approved, tools, offered, declaration),
                expected,
                "{what}: digests"
            );
        }
    }
}
