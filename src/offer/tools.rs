//! A server's tool list as a turn may use it: secret-bearing names hidden, duplicates
//! dropped, descriptions capped and redacted, schemas redacted and shared across
//! connections. Done once per listing, never per turn.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::Tool;

use super::{MAX_DESCRIPTION, MAX_TITLE, Shaped, shape_offer};
use crate::core::Declaration;
use crate::naming;
use crate::redact::{Redactor, View};
use crate::result::cap_chars;
use crate::transport::{ListedTools, MAX_TOOLS};

/// Tools as the model may see them, and what the listing got wrong as diagnostics.
///
/// A tool whose name carries a secret of this connection (or a secret shape such as
/// `token=...`) is hidden: a name is shown everywhere (catalog, CLI, events, other
/// diagnostics), so it cannot be redacted into something callable. The note says how
/// many, never which. Of tools listed twice the first is kept. Descriptions are capped
/// and redacted, schemas redacted, once per listing (not per turn).
pub(crate) fn shape_listing(
    listed: ListedTools,
    declaration: &Declaration,
    redactor: &Redactor,
    schemas: &SchemaPool,
) -> Shaped {
    let (offered, mut notes) = shape_offer(listed.offer, declaration, redactor);
    if listed.truncated {
        notes.push(format!("the tool list was cut at {} tools", MAX_TOOLS));
    }
    let total = listed.tools.len();
    // The raw name, the name it becomes (`sk.live.x` is exposed as `sk-live-x`), and
    // both normalized (`SK-LIVE-X` holds the secret `sk_live_x`).
    let carries_secret = |name: &str| {
        let exposed = naming::normalize_fragment(name, "tool");
        redactor.text(name, View::Model) != name
            || redactor.text(&exposed, View::Model) != exposed
            || redactor.holds_secret_normalized(name)
    };
    let clean: Vec<Tool> = listed
        .tools
        .into_iter()
        .filter(|t| !carries_secret(&t.name))
        .collect();
    if clean.len() < total {
        notes.push(format!(
            "{} tool(s) hidden: the name contains a secret value; rename the tool on the server",
            total - clean.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    let mut twice: Vec<String> = Vec::new();
    let tools = clean
        .into_iter()
        .filter(|t| {
            let first = seen.insert(t.name.to_string());
            if !first && !twice.iter().any(|n| n == t.name.as_ref()) {
                twice.push(t.name.to_string());
            }
            first
        })
        .map(|tool| shape_tool(tool, redactor, schemas))
        .collect();
    if !twice.is_empty() {
        notes.push(format!(
            "tool names listed more than once, later ones ignored: {}",
            twice.join(", ")
        ));
    }
    Shaped {
        tools,
        offer: offered,
        notes,
        listed: total,
        held: None,
    }
}

/// One tool as a turn may show it: description and titles capped and redacted, schemas
/// redacted and shared, icons and `_meta` dropped.
fn shape_tool(mut tool: Tool, redactor: &Redactor, schemas: &SchemaPool) -> Tool {
    if let Some(d) = &tool.description {
        tool.description = Some(cap_chars(&redactor.text(d, View::Model), MAX_DESCRIPTION).into());
    }
    let title = |t: &str| cap_chars(&redactor.text(t, View::Model), MAX_TITLE);
    tool.title = tool.title.as_deref().map(title);
    if let Some(annotations) = &mut tool.annotations {
        annotations.title = annotations.title.as_deref().map(title);
    }
    // The listing's own schemas are taken, not copied: each is held here alone.
    let taken = |schema: Arc<rmcp::model::JsonObject>| {
        let schema = Arc::try_unwrap(schema).unwrap_or_else(|shared| (*shared).clone());
        match redactor.json_owned(serde_json::Value::Object(schema), View::Model) {
            serde_json::Value::Object(clean) => Some(schemas.intern(clean)),
            _ => None,
        }
    };
    // A schema that cannot be redacted is not shown: the model sees an object of
    // anything (a tool's input is an object), never the raw text.
    let input = std::mem::take(&mut tool.input_schema);
    tool.input_schema = taken(input).unwrap_or_else(|| {
        let mut any = rmcp::model::JsonObject::new();
        any.insert("type".into(), "object".into());
        schemas.intern(any)
    });
    tool.output_schema = tool.output_schema.take().and_then(taken);
    // Icons and `_meta` are not used; they are not kept.
    tool.icons = None;
    tool.meta = None;
    tool
}

/// Identical input schemas shared across connections and sessions: sixty sessions on the
/// same servers hold one copy of each schema, not sixty. Entries are weak, so a schema
/// no connection (and no digest kept in [`super::ToolDigests`]) uses any more is freed;
/// the keys of freed ones are dropped once there are many of them or they hold many
/// bytes.
#[derive(Default)]
pub(crate) struct SchemaPool {
    entries: std::sync::Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_json: HashMap<String, std::sync::Weak<rmcp::model::JsonObject>>,
    /// Bytes of the keys.
    bytes: usize,
    /// Bytes of keys past which the keys of freed schemas are dropped: twice what
    /// was left last time, so the keys of live schemas are not read at every new one.
    next_sweep: usize,
}

/// Bytes of keys past which the keys of freed schemas are dropped.
const POOL_KEY_BYTES: usize = 16 * 1024 * 1024;

impl SchemaPool {
    /// The shared copy of `schema`.
    pub(crate) fn intern(&self, schema: rmcp::model::JsonObject) -> Arc<rmcp::model::JsonObject> {
        // serde_json maps are sorted, so equal schemas serialize equally. One that does
        // not serialize is not shared: an empty key would make all such schemas one.
        let Ok(key) = serde_json::to_string(&schema) else {
            return Arc::new(schema);
        };
        let Ok(mut entries) = self.entries.lock() else {
            return Arc::new(schema);
        };
        if let Some(shared) = entries.by_json.get(&key).and_then(std::sync::Weak::upgrade) {
            return shared;
        }
        let many = entries.by_json.len() >= 1024 && entries.by_json.len().is_power_of_two();
        if many || entries.bytes + key.len() > entries.next_sweep.max(POOL_KEY_BYTES) {
            entries.by_json.retain(|_, w| w.strong_count() > 0);
            entries.bytes = entries.by_json.keys().map(String::len).sum();
            entries.next_sweep = entries.bytes.saturating_mul(2);
        }
        let shared = Arc::new(schema);
        let len = key.len();
        if entries
            .by_json
            .insert(key, Arc::downgrade(&shared))
            .is_none()
        {
            entries.bytes += len;
        }
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(schema: serde_json::Value) -> Tool {
        let serde_json::Value::Object(schema) = schema else {
            panic!("a schema is an object")
        };
        Tool::new("t", "a tool", Arc::new(schema))
    }

    #[test]
    fn the_pool_shares_equal_schemas_and_forgets_freed_ones_past_its_bound() {
        let pool = SchemaPool::default();
        let object = |v: serde_json::Value| match v {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("an object"),
        };
        let a = pool.intern(object(serde_json::json!({"type": "object"})));
        let b = pool.intern(object(serde_json::json!({"type": "object"})));
        assert!(Arc::ptr_eq(&a, &b));
        // 0.0 and -0.0 are equal values but not the same bytes: two schemas.
        let zero = pool.intern(object(serde_json::json!({"default": 0.0})));
        let negative = pool.intern(object(serde_json::json!({"default": -0.0})));
        assert!(!Arc::ptr_eq(&zero, &negative));
        // Freed schemas with big keys: their keys go once the keys pass the bound.
        let big = "x".repeat(1024 * 1024);
        for n in 0..40 {
            drop(pool.intern(object(serde_json::json!({"n": n, "d": big}))));
            assert!(pool.entries.lock().unwrap().bytes <= POOL_KEY_BYTES + big.len() + 64);
        }
        {
            let entries = pool.entries.lock().unwrap();
            assert!(entries.by_json.len() < 40);
            assert_eq!(
                entries.bytes,
                entries.by_json.keys().map(String::len).sum::<usize>()
            );
        }
        // Live schemas past the bound: their keys are read again only once they
        // doubled, not at every new schema.
        let live: Vec<_> = (0..40)
            .map(|n| pool.intern(object(serde_json::json!({"live": n, "d": big}))))
            .collect();
        let entries = pool.entries.lock().unwrap();
        assert!(
            entries.next_sweep > POOL_KEY_BYTES,
            "{}",
            entries.next_sweep
        );
        assert!(entries.bytes <= entries.next_sweep.max(POOL_KEY_BYTES));
        drop(entries);
        drop(live);
    }

    #[test]
    fn schemas_are_shown_clean_redacted_or_not_at_all() {
        let redactor = Redactor::new().with_secrets([("API_TOKEN", "tok-5f3a9c1e77")]);
        let pool = SchemaPool::default();
        let shown = |schema| shape_tool(tool(schema), &redactor, &pool).input_schema;
        // Clean: as served.
        let clean = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert_eq!(
            serde_json::Value::Object((*shown(clean.clone())).clone()),
            clean
        );
        // A secret in a default, in a key, a sensitive field: hidden.
        for leaky in [
            serde_json::json!({"type": "object", "properties": {"q": {"default": "tok-5f3a9c1e77"}}}),
            serde_json::json!({"type": "object", "properties": {"tok-5f3a9c1e77": {}}}),
            serde_json::json!({"type": "object", "examples": [{"password": "hunter22"}]}),
        ] {
            let text = serde_json::to_string(&*shown(leaky)).unwrap();
            assert!(
                !text.contains("tok-5f3a9c1e77") && !text.contains("hunter22"),
                "{text}"
            );
        }
        // Past what can be redacted: an object of anything, never the raw schema.
        let big = "x".repeat(crate::redact::MAX_REDACT_BYTES + 1);
        let failed = shown(serde_json::json!({"type": "object", "description": big}));
        assert_eq!(
            serde_json::Value::Object((*failed).clone()),
            serde_json::json!({"type": "object"})
        );
    }
}
