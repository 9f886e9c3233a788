//! A server's tool list as a turn may use it: secret-bearing names hidden, duplicates
//! dropped, descriptions capped and redacted, schemas redacted and shared across
//! connections. Done once per listing, never per turn.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::model::Tool;

use super::{MAX_DESCRIPTION, MAX_TITLE, Shaped, ToolMemo, shape_offer};
use crate::core::Declaration;
use crate::naming;
use crate::redact::{Fingerprint, Redactor, View};
use crate::result::cap_chars;
use crate::transport::{ListedTools, MAX_TOOLS};

/// Tools as the model may see them, and what the listing got wrong as diagnostics.
///
/// A tool whose name carries a secret of this connection (or a secret shape such as
/// `token=...`) is hidden: a name is shown everywhere (catalog, CLI, events, other
/// diagnostics), so it cannot be redacted into something callable. The note says how
/// many, never which. Of tools listed twice the first is kept. Descriptions are capped
/// and redacted, schemas redacted, once per listing (not per turn), and a tool served
/// before to a redactor of the same secrets and left as it was is taken from `memo`
/// without that work ([`ToolMemo::shaped`]).
pub(crate) fn shape_listing(
    listed: ListedTools,
    declaration: &Declaration,
    redactor: &Redactor,
    schemas: &SchemaPool,
    memo: &ToolMemo,
) -> Shaped {
    let fingerprint = redactor.fingerprint();
    shape_listing_as_of(listed, declaration, redactor, schemas, memo, fingerprint)
}

/// [`shape_listing`], the memo asked for tools kept under `fingerprint`: the
/// redactor's when the listing came in. A secret its connection learns meanwhile (a
/// token refreshed) makes the redactor's another by the end; then every tool, however
/// it was shaped, is checked and shaped again with what is known now.
fn shape_listing_as_of(
    listed: ListedTools,
    declaration: &Declaration,
    redactor: &Redactor,
    schemas: &SchemaPool,
    memo: &ToolMemo,
    fingerprint: Option<Fingerprint>,
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
    // A tool the memo gives was checked, name included, for these secrets.
    let clean: Vec<Found> = listed
        .tools
        .into_iter()
        .filter_map(|t| match fingerprint.and_then(|f| memo.shaped(&t, f)) {
            Some(shaped) => Some(Found::Shaped(shaped)),
            None => (!carries_secret(&t.name)).then_some(Found::Served(t)),
        })
        .collect();
    let mut hidden = total - clean.len();
    let mut twice: Vec<String> = Vec::new();
    // The first of each name is kept; each name listed again is noted once. Sets hashed
    // as in `naming::assign`, with the same bound.
    let first: Vec<bool> = {
        use foldhash::HashSetExt;
        let mut seen = foldhash::HashSet::with_capacity(clean.len());
        let mut noted = foldhash::HashSet::new();
        clean
            .iter()
            .map(|t| {
                let name = t.name();
                let first = seen.insert(name);
                if !first && noted.insert(name) {
                    twice.push(name.to_string());
                }
                first
            })
            .collect()
    };
    let mut tools: Vec<Tool> = clean
        .into_iter()
        .zip(first)
        .filter_map(|(t, first)| first.then_some(t))
        .map(|t| match t {
            Found::Shaped(shaped) => shaped,
            Found::Served(served) => {
                let Some(fingerprint) = fingerprint else {
                    return shape_tool(served, redactor, schemas);
                };
                // Cloning the tool shares its schemas, so shaping copies them instead
                // of taking them: once, for a tool the memo did not know. Kept under
                // the fingerprint the listing came in with even when a secret was
                // learned since: a tool left as it was with more secrets known is left
                // as it was with fewer.
                let as_served = served.clone();
                let shaped = shape_tool(served, redactor, schemas);
                memo.keep_shaped(&as_served, &shaped, fingerprint);
                shaped
            }
        })
        .collect();
    if fingerprint.is_some() && redactor.fingerprint() != fingerprint {
        let before = tools.len();
        tools = tools
            .into_iter()
            .filter(|t| !carries_secret(&t.name))
            .map(|t| shape_tool(t, redactor, schemas))
            .collect();
        hidden += before - tools.len();
        twice.retain(|name| !carries_secret(name));
    }
    if hidden > 0 {
        notes.push(format!(
            "{hidden} tool(s) hidden: the name contains a secret value; rename the tool on the server"
        ));
    }
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

/// A listed tool, as the memo gave it shaped or as the server served it.
enum Found {
    Shaped(Tool),
    Served(Tool),
}

impl Found {
    fn name(&self) -> &str {
        match self {
            Found::Shaped(t) | Found::Served(t) => &t.name,
        }
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
    // A schema held here alone is taken, not copied (a schema the memo may keep is
    // shared with the copy it is compared with: see `shape_listing_as_of`).
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
/// no connection (and no tool kept in [`super::ToolMemo`]) uses any more is freed;
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

    /// A listing of tools that shaping leaves, changes and hides in turn.
    fn assorted(zero: f64) -> Vec<Tool> {
        let object = |v: serde_json::Value| match v {
            serde_json::Value::Object(map) => Arc::new(map),
            _ => unreachable!("an object"),
        };
        let mut titled = tool(serde_json::json!({"type": "object"}));
        titled.name = "titled".into();
        titled.title = Some("Reads tok-5f3a9c1e77".into());
        let mut long = tool(serde_json::json!({"type": "object"}));
        long.name = "long".into();
        long.description = Some("é".repeat(MAX_DESCRIPTION + 1).into());
        let mut with_output = tool(serde_json::json!({"type": "object"}));
        with_output.name = "output".into();
        with_output.output_schema = Some(object(serde_json::json!({"default": -0.0})));
        let mut icons = tool(serde_json::json!({"type": "object"}));
        icons.name = "icons".into();
        icons.icons = Some(Vec::new());
        vec![
            tool(serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}})),
            Tool::new(
                "secret",
                "uses tok-5f3a9c1e77",
                object(serde_json::json!({})),
            ),
            Tool::new(
                "tok-5f3a9c1e77",
                "named by a secret",
                object(serde_json::json!({})),
            ),
            Tool::new("t", "listed twice", object(serde_json::json!({}))),
            Tool::new(
                "deep",
                "a secret in a default",
                object(serde_json::json!(
                    {"type": "object", "properties": {"k": {"default": "tok-5f3a9c1e77"}}}
                )),
            ),
            Tool::new(
                "zero",
                "a zero",
                object(serde_json::json!({"default": zero})),
            ),
            Tool::new(
                "negative",
                "-0.0",
                object(serde_json::json!({"default": -0.0})),
            ),
            titled,
            long,
            with_output,
            icons,
        ]
    }

    fn listing(tools: Vec<Tool>) -> ListedTools {
        ListedTools {
            tools,
            truncated: false,
            offer: Default::default(),
        }
    }

    /// Of a name listed again and again the first tool is kept, and the note names
    /// each such name once, in the order they were first listed again; shaped from the
    /// memo or afresh alike.
    #[test]
    fn a_name_listed_again_keeps_its_first_tool_and_is_noted_once() {
        let declaration = crate::offer::test_declaration("command: x\n");
        let served = || {
            let names = ["a", "b", "c", "c", "a", "b", "a", "d", "c"];
            let tools = names
                .iter()
                .enumerate()
                .map(|(i, n)| Tool::new(*n, format!("listed {i}"), Arc::default()))
                .collect();
            listing(tools)
        };
        let (pool, memo) = (SchemaPool::default(), ToolMemo::default());
        for _ in 0..2 {
            let shaped = shape_listing(served(), &declaration, &Redactor::new(), &pool, &memo);
            let kept: Vec<(&str, &str)> = shaped
                .tools
                .iter()
                .map(|t| {
                    (
                        t.name.as_ref(),
                        t.description.as_deref().unwrap_or_default(),
                    )
                })
                .collect();
            assert_eq!(
                kept,
                [
                    ("a", "listed 0"),
                    ("b", "listed 1"),
                    ("c", "listed 2"),
                    ("d", "listed 7")
                ]
            );
            assert_eq!(
                shaped.notes,
                ["tool names listed more than once, later ones ignored: c, a, b"]
            );
        }
    }

    #[test]
    fn a_listing_shaped_with_what_the_memo_knows_is_the_listing_shaped_afresh() {
        let declaration = crate::offer::test_declaration("command: x\n");
        let knowing = Redactor::new().with_secrets([("API_TOKEN", "tok-5f3a9c1e77")]);
        // Redactors that know the secret, that do not, and one of a secret only some
        // tools hold, in an order that has each shape what another shaped before.
        let redactors = [
            Redactor::new(),
            knowing.clone(),
            Redactor::new().with_secrets([("OTHER", "other-secret-1")]),
            knowing,
            Redactor::new(),
            Redactor::new().with_secrets([("ALSO", "uses tok")]),
        ];
        let (pool, memo) = (SchemaPool::default(), ToolMemo::default());
        for redactor in &redactors {
            for round in 0..4 {
                let zero = if round % 2 == 0 { 0.0 } else { -0.0 };
                let served = listing(assorted(zero));
                let shaped = shape_listing(served, &declaration, redactor, &pool, &memo);
                let afresh = shape_listing(
                    listing(assorted(zero)),
                    &declaration,
                    redactor,
                    &SchemaPool::default(),
                    &ToolMemo::default(),
                );
                // As written, not by `==` (which takes -0.0 for 0.0).
                let text = serde_json::to_string(&shaped.tools).unwrap();
                assert_eq!(text, serde_json::to_string(&afresh.tools).unwrap());
                assert_eq!(shaped.notes, afresh.notes, "round {round}");
                if redactor.text("tok-5f3a9c1e77", View::Model) != "tok-5f3a9c1e77" {
                    assert!(!text.contains("tok-5f3a9c1e77"), "{text}");
                }
                // The memo knows exactly the tools shaping left as they were served
                // (no icons, no `_meta`), for this redactor's secrets.
                let fingerprint = redactor.fingerprint().expect("a fingerprint");
                let written: Vec<String> = afresh
                    .tools
                    .iter()
                    .map(|t| serde_json::to_string(t).unwrap())
                    .collect();
                let mut hits = 0;
                for served in assorted(zero) {
                    let unchanged = written.contains(&serde_json::to_string(&served).unwrap());
                    let hit = memo.shaped(&served, fingerprint).is_some();
                    assert_eq!(hit, unchanged, "{} in round {round}", served.name);
                    hits += usize::from(hit);
                }
                assert!(hits >= 4, "{hits}");
                // `==` takes -0.0 for 0.0: each default is checked as written.
                let negative = shaped.tools.iter().find(|t| t.name == "negative").unwrap();
                assert_eq!(
                    serde_json::to_string(&negative.input_schema).unwrap(),
                    r#"{"default":-0.0}"#
                );
                let zero_tool = shaped.tools.iter().find(|t| t.name == "zero").unwrap();
                let written = serde_json::to_string(&zero_tool.input_schema).unwrap();
                assert_eq!(written, format!(r#"{{"default":{zero:?}}}"#));
            }
        }
        // A connection that learned a secret before the listing gets its tools shaped
        // again; one that learned it while the listing was shaped (the memo asked for
        // what it knew when the listing came in) too.
        let learned = Arc::new(crate::redact::Learned::default());
        let learning = Redactor::new().with_learned(Arc::clone(&learned));
        let as_of = learning.fingerprint();
        let shaped = |as_of| {
            let listed = listing(assorted(0.0));
            shape_listing_as_of(listed, &declaration, &learning, &pool, &memo, as_of)
        };
        let before = shaped(as_of);
        let text = serde_json::to_string(&before.tools).unwrap();
        assert!(text.contains("uses tok-5f3a9c1e77"), "{text}");
        learned.learn("TOKEN", "tok-5f3a9c1e77");
        let afresh = shape_listing(
            listing(assorted(0.0)),
            &declaration,
            &learning,
            &SchemaPool::default(),
            &ToolMemo::default(),
        );
        for after in [shaped(learning.fingerprint()), shaped(as_of)] {
            let text = serde_json::to_string(&after.tools).unwrap();
            assert!(!text.contains("tok-5f3a9c1e77"), "{text}");
            assert_eq!(text, serde_json::to_string(&afresh.tools).unwrap());
            assert_eq!(after.notes, afresh.notes);
        }
        // What the memo gives is the pool's copy of each schema: the one a listing
        // shaped without it shares.
        let redactor = Redactor::new();
        let first = shape_listing(
            listing(assorted(0.0)),
            &declaration,
            &redactor,
            &pool,
            &memo,
        );
        let second = shape_listing(
            listing(assorted(0.0)),
            &declaration,
            &redactor,
            &pool,
            &ToolMemo::default(),
        );
        for (a, b) in first.tools.iter().zip(&second.tools) {
            assert!(Arc::ptr_eq(&a.input_schema, &b.input_schema), "{}", a.name);
        }
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
