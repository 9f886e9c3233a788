//! What is known of shaped tool definitions, shared across connections and sessions:
//! sixty sessions on the same servers shape, flag, serialize and hash each tool once,
//! not sixty times.
//!
//! For each kept tool (as shaping left it):
//! - its two digests ([`ToolMemo::canonical`], [`ToolMemo::listed`]) and the flags of
//!   its texts ([`ToolMemo::text_flags`]), reused only for a tool equal in every field
//!   whose schemas are the very same shared copies ([`super::SchemaPool`] gives equal
//!   schemas one copy, byte for byte as serialized) and that carries no icons and no
//!   `_meta` (shaping drops both). Equal strings, flags and shared schemas serialize to
//!   the same bytes, so a reused digest is the digest of this tool's bytes;
//! - the redactors (by [`Fingerprint`]) under which a server served this very tool and
//!   shaping left it as it was ([`ToolMemo::shaped`]): no secret of theirs and no
//!   secret shape in it, nothing capped. A server that serves it again, every field
//!   equal and its schemas the same JSON to the byte, to a redactor of the same
//!   secrets, gets it again without the redaction walk. A tool shaping changed is never
//!   kept this way: the memory holds no text a redactor hid.
//!
//! Bounded: at most [`MAX_TOOLS`] tools, holding at most [`MAX_HELD`] bytes as
//! [`held`] estimates them (a kept tool keeps its schemas alive after their
//! connections closed); past either, the memory starts over. A tool estimated over
//! [`MAX_TOOL_HELD`] is never kept. At most [`MAX_ALIKE`] tools of one name, title and
//! description are kept (the oldest goes), so a lookup compares few, and each keeps at
//! most [`MAX_REDACTORS`] redactors (the oldest goes).

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{JsonObject, Tool};
use serde_json::Value;

use crate::pins::TextFlag;
use crate::redact::Fingerprint;

/// Most tools kept (more than one server may list: `transport::MAX_TOOLS`).
pub(crate) const MAX_TOOLS: usize = 8_192;
/// Most bytes the kept tools may hold, as [`held`] estimates them.
pub(crate) const MAX_HELD: usize = 16 * 1024 * 1024;
/// Largest tool kept, as [`held`] estimates it.
pub(crate) const MAX_TOOL_HELD: usize = 256 * 1024;
/// Most tools kept under one key (name, title, description).
pub(crate) const MAX_ALIKE: usize = 8;
/// Most redactors a kept tool is known to be served to unchanged.
pub(crate) const MAX_REDACTORS: usize = 4;

/// What is worked out of a kept tool when first asked.
#[derive(Default)]
struct Worked {
    /// sha256 (hex) of its canonical JSON: what a pin holds ([`crate::pins::Pin`]).
    canonical: OnceLock<String>,
    /// sha256 (hex) of its JSON as `serde_json` writes the tool, and that JSON's
    /// length: what an approval of a call is bound to.
    listed: OnceLock<(String, usize)>,
    /// The flags of its description, then of its title ([`crate::pins::flags_of`]).
    flags: OnceLock<Vec<TextFlag>>,
}

struct Entry {
    tool: Tool,
    worked: Worked,
    /// Redactors a server served this tool to and shaping left it as it was, the
    /// newest last.
    shaped_under: Mutex<Vec<Fingerprint>>,
    /// What it is taken to hold.
    held: usize,
    /// Whether its schemas hold a float zero ([`float_zeros`]).
    zeros: bool,
}

#[derive(Default)]
struct Memory {
    /// By the memo's own hash of a tool (already foldhash's, so hashed again cheaply).
    by_hash: foldhash::HashMap<u64, Vec<Arc<Entry>>>,
    tools: usize,
    held: usize,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct ToolMemo {
    memory: Mutex<Memory>,
    /// foldhash, seeded per memo. Its seed is no secret from a server that times
    /// lookups and adapts, but one that aimed its tools at one key only makes lookups
    /// under that key compare up to [`MAX_ALIKE`] tools in full, so a fast hash serves
    /// (SipHash took about 2% of a first turn's instructions for three short texts a
    /// tool, several times a turn).
    hasher: foldhash::fast::RandomState,
}

/// Whether what is known of `kept` is `tool`'s (see the module documentation).
fn same(kept: &Tool, tool: &Tool) -> bool {
    let schemas = Arc::ptr_eq(&kept.input_schema, &tool.input_schema)
        && match (&kept.output_schema, &tool.output_schema) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
    schemas && reusable(tool) && kept == tool
}

/// Whether a tool may be kept, or a served one looked up, at all.
fn reusable(tool: &Tool) -> bool {
    tool.icons.is_none() && tool.meta.is_none()
}

/// Whether `served` is `kept` as a server serves it: equal in every field, no icons,
/// no `_meta`, and its schemas the same JSON to the byte. `==` takes `0.0` for `-0.0`
/// (the schema pool does not, nor does a digest), and that is the only pair of values
/// it takes for equal that are written otherwise: numbers are equal only as the same
/// kind, and objects keep their keys sorted ([`sorted_maps`]). So the schemas are
/// compared number by number only when `kept`'s hold a float zero (`zeros`, as
/// [`float_zeros`] says) or maps keep another order.
fn served_as(kept: &Tool, served: &Tool, zeros: bool) -> bool {
    let identical_schemas = || {
        identical_objects(&kept.input_schema, &served.input_schema)
            && match (&kept.output_schema, &served.output_schema) {
                (Some(a), Some(b)) => identical_objects(a, b),
                (None, None) => true,
                _ => false,
            }
    };
    reusable(served) && kept == served && ((!zeros && sorted_maps()) || identical_schemas())
}

/// Whether serde_json's maps keep their keys sorted, as in this build. A host whose
/// dependencies turn on serde_json's `preserve_order` (cargo merges features) makes
/// them keep the order written, and `==` then takes reordered keys for equal: the
/// schemas are then always compared key by key.
fn sorted_maps() -> bool {
    static SORTED: OnceLock<bool> = OnceLock::new();
    *SORTED.get_or_init(|| {
        serde_json::from_str::<JsonObject>(r#"{"b":0,"a":0}"#)
            .ok()
            .and_then(|map| map.keys().next().map(|key| key == "a"))
            .unwrap_or(false)
    })
}

/// Whether `tool`'s schemas hold a number zero written as a float (`0.0`, `-0.0`).
fn float_zeros(tool: &Tool) -> bool {
    fn value(v: &Value) -> bool {
        match v {
            Value::Number(n) => n.is_f64() && n.as_f64() == Some(0.0),
            Value::Array(items) => items.iter().any(value),
            Value::Object(map) => object(map),
            _ => false,
        }
    }
    fn object(map: &JsonObject) -> bool {
        map.values().any(value)
    }
    object(&tool.input_schema) || tool.output_schema.as_deref().is_some_and(object)
}

fn identical_objects(a: &JsonObject, b: &JsonObject) -> bool {
    std::ptr::eq(a, b)
        || (a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb)))
}

/// `a == b`, but numbers alike only when they are written alike.
fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| identical(x, y))
        }
        (Value::Object(x), Value::Object(y)) => identical_objects(x, y),
        _ => a == b,
    }
}

/// About the bytes a kept tool holds: its texts, and its schemas as parsed (each value
/// its 32 bytes and its text, each map a tree node per eleven entries, which is where
/// tiny maps cost far more than their JSON: `{"":0}` is 7 bytes of JSON and over 600
/// in memory).
pub(crate) fn held(tool: &Tool) -> usize {
    fn value(v: &Value) -> usize {
        32 + match v {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(value).sum(),
            Value::Object(map) => object(map),
            _ => 0,
        }
    }
    fn object(map: &JsonObject) -> usize {
        let nodes = map.len().div_ceil(11).max(1);
        nodes * 640
            + map
                .iter()
                .map(|(k, v)| 24 + k.len() + value(v))
                .sum::<usize>()
    }
    let texts = [tool.name.len(), tool.title.as_ref().map_or(0, String::len)];
    let description = tool.description.as_ref().map_or(0, |d| d.len());
    let schemas = object(&tool.input_schema) + tool.output_schema.as_deref().map_or(0, object);
    512 + texts.iter().sum::<usize>() + description + schemas
}

impl ToolMemo {
    /// The canonical digest of `tool`, worked out by `work` unless known.
    pub(crate) fn canonical(&self, tool: &Tool, work: impl FnOnce() -> String) -> String {
        self.get(tool, |w| &w.canonical, work)
    }

    /// The listed digest of `tool` and its JSON's length, worked out by `work` unless
    /// known.
    pub(crate) fn listed(
        &self,
        tool: &Tool,
        work: impl FnOnce() -> (String, usize),
    ) -> (String, usize) {
        self.get(tool, |w| &w.listed, work)
    }

    /// The flags of `tool`'s description, then of its title, worked out by `work`
    /// unless known.
    pub(crate) fn text_flags(
        &self,
        tool: &Tool,
        work: impl FnOnce() -> Vec<TextFlag>,
    ) -> Vec<TextFlag> {
        self.get(tool, |w| &w.flags, work)
    }

    /// What shaping `served` for a redactor of fingerprint `under` gives, when it was
    /// shaped for one before and left as it was (see the module documentation).
    pub(crate) fn shaped(&self, served: &Tool, under: Fingerprint) -> Option<Tool> {
        if !reusable(served) {
            return None;
        }
        let key = self.key(served);
        // Compared outside the lock: a deep comparison holds no other session up.
        let alike: Vec<Arc<Entry>> = self.memory.lock().ok()?.by_hash.get(&key)?.clone();
        alike
            .iter()
            .find(|e| {
                e.shaped_under
                    .lock()
                    .is_ok_and(|fingerprints| fingerprints.contains(&under))
                    && served_as(&e.tool, served, e.zeros)
            })
            .map(|e| e.tool.clone())
    }

    /// Keeps that shaping `served` for a redactor of fingerprint `under` gave `shaped`,
    /// when that left it as it was (see the module documentation).
    pub(crate) fn keep_shaped(&self, served: &Tool, shaped: &Tool, under: Fingerprint) {
        if !served_as(shaped, served, float_zeros(shaped)) {
            return;
        }
        let entry = self.entry(shaped);
        if let Some(entry) = entry
            && let Ok(mut fingerprints) = entry.shaped_under.lock()
            && !fingerprints.contains(&under)
        {
            if fingerprints.len() >= MAX_REDACTORS {
                fingerprints.remove(0);
            }
            fingerprints.push(under);
        }
    }

    /// What `slot` of `tool`'s entry holds; otherwise what `work` gives, kept there
    /// when the tool may be kept.
    fn get<T: Clone>(
        &self,
        tool: &Tool,
        slot: impl Fn(&Worked) -> &OnceLock<T>,
        work: impl FnOnce() -> T,
    ) -> T {
        let key = self.key(tool);
        let found = self.find(key, tool);
        if let Some(known) = found.as_ref().and_then(|e| slot(&e.worked).get().cloned()) {
            return known;
        }
        let worked = work();
        if let Some(entry) = found.or_else(|| self.remember(key, tool)) {
            let _ = slot(&entry.worked).set(worked.clone());
        }
        worked
    }

    fn find(&self, key: u64, tool: &Tool) -> Option<Arc<Entry>> {
        let memory = self.memory.lock().ok()?;
        memory
            .by_hash
            .get(&key)?
            .iter()
            .find(|e| same(&e.tool, tool))
            .cloned()
    }

    /// The entry of `tool`, kept now if it was not and may be.
    fn entry(&self, tool: &Tool) -> Option<Arc<Entry>> {
        let key = self.key(tool);
        self.find(key, tool).or_else(|| self.remember(key, tool))
    }

    /// Keeps `tool` when it may be, and returns its entry (another session's when two
    /// kept it at once).
    fn remember(&self, key: u64, tool: &Tool) -> Option<Arc<Entry>> {
        let held = held(tool);
        if !reusable(tool) || held > MAX_TOOL_HELD {
            return None;
        }
        let mut memory = self.memory.lock().ok()?;
        if memory.tools >= MAX_TOOLS || memory.held + held > MAX_HELD {
            *memory = Memory::default();
        }
        let alike = memory.by_hash.entry(key).or_default();
        // Two sessions that missed it at once: kept once.
        if let Some(kept) = alike.iter().find(|e| same(&e.tool, tool)) {
            return Some(Arc::clone(kept));
        }
        let oldest = (alike.len() >= MAX_ALIKE).then(|| alike.remove(0));
        let entry = Arc::new(Entry {
            tool: tool.clone(),
            worked: Worked::default(),
            shaped_under: Mutex::new(Vec::new()),
            held,
            zeros: float_zeros(tool),
        });
        alike.push(Arc::clone(&entry));
        if let Some(oldest) = oldest {
            memory.tools -= 1;
            memory.held -= oldest.held;
        }
        memory.tools += 1;
        memory.held += held;
        Some(entry)
    }

    /// How many tools are kept, and what they are taken to hold.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let memory = self.memory.lock().unwrap();
        (memory.tools, memory.held)
    }

    /// What a tool is looked up by: its texts (equal tools have equal texts).
    fn key(&self, tool: &Tool) -> u64 {
        let mut h = self.hasher.build_hasher();
        tool.name.hash(&mut h);
        tool.title.hash(&mut h);
        tool.description.hash(&mut h);
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn schema(v: serde_json::Value) -> Arc<rmcp::model::JsonObject> {
        match v {
            serde_json::Value::Object(map) => Arc::new(map),
            _ => unreachable!("an object"),
        }
    }

    fn tool(description: &str, input: &Arc<rmcp::model::JsonObject>) -> Tool {
        Tool::new("t", description.to_string(), Arc::clone(input))
    }

    /// How many times `memo` worked a digest out for each of `tools`, asked in order.
    fn worked(memo: &ToolMemo, tools: &[&Tool]) -> usize {
        let count = Cell::new(0);
        for t in tools {
            memo.canonical(t, || {
                count.set(count.get() + 1);
                crate::digest::sha256_json_hex(t).0
            });
        }
        count.get()
    }

    #[test]
    fn a_digest_is_reused_only_for_the_same_tool_with_the_same_shared_schema() {
        let memo = ToolMemo::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let first = tool("reads", &shared);
        assert_eq!(worked(&memo, &[&first, &first.clone(), &first.clone()]), 1);
        // Another description, another title, other annotations: each worked out.
        let mut titled = first.clone();
        titled.title = Some("T".into());
        let mut hinted = first.clone();
        hinted.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
        assert_eq!(
            worked(&memo, &[&tool("reads files", &shared), &titled, &hinted]),
            3
        );
        // An equal schema that is another copy (not shared through the pool): worked out.
        let copy = tool("reads", &schema(serde_json::json!({"type": "object"})));
        assert_eq!(worked(&memo, &[&copy]), 1);
        // An output schema, shared or not, counts too.
        let mut with_output = first.clone();
        with_output.output_schema = Some(Arc::clone(&shared));
        assert_eq!(worked(&memo, &[&with_output, &with_output.clone()]), 1);
        let mut other_output = first.clone();
        other_output.output_schema = Some(schema(serde_json::json!({"type": "object"})));
        assert_eq!(worked(&memo, &[&other_output]), 1);
    }

    #[test]
    fn a_tool_two_sessions_worked_out_at_once_is_kept_once() {
        let memo = ToolMemo::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let t = tool("reads", &shared);
        // The second one finds the first kept while it works its digest out.
        memo.canonical(&t, || {
            memo.canonical(&t, || "c".into());
            "c".into()
        });
        assert_eq!(memo.counts().0, 1);
    }

    #[test]
    fn tools_alike_in_their_texts_are_few_and_the_newest_are_kept() {
        let memo = ToolMemo::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        // One name, title and description; hints that differ each time.
        let hinted = |n: usize| {
            let mut t = tool("reads", &shared);
            t.annotations = Some(rmcp::model::ToolAnnotations::with_title(n.to_string()));
            t
        };
        let all: Vec<Tool> = (0..MAX_ALIKE * 3).map(hinted).collect();
        assert_eq!(worked(&memo, &all.iter().collect::<Vec<_>>()), all.len());
        {
            let memory = memo.memory.lock().unwrap();
            assert_eq!(memory.tools, MAX_ALIKE);
            assert!(
                memory
                    .by_hash
                    .values()
                    .all(|alike| alike.len() <= MAX_ALIKE)
            );
        }
        let newest: Vec<&Tool> = all[all.len() - MAX_ALIKE..].iter().collect();
        assert_eq!(worked(&memo, &newest), 0);
        assert_eq!(worked(&memo, &[&all[0]]), 1);
    }

    #[test]
    fn what_a_kept_tool_holds_counts_its_maps_not_only_its_json() {
        let small = |v: serde_json::Value| held(&tool("t", &schema(v)));
        let plain = small(serde_json::json!({"type": "object"}));
        // A thousand one-key maps: 7 bytes of JSON each, far more in memory.
        let maps: Vec<serde_json::Value> = (0..1000).map(|_| serde_json::json!({"": 0})).collect();
        let tiny_maps = small(serde_json::json!({"type": "object", "default": maps}));
        assert!(tiny_maps - plain >= 1000 * 600, "{tiny_maps}");
        let text = small(serde_json::json!({"type": "object", "description": "y".repeat(10_000)}));
        assert!(text - plain >= 10_000);
    }

    #[test]
    fn tools_with_icons_or_meta_and_oversized_tools_are_never_kept() {
        let memo = ToolMemo::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let mut meta = tool("reads", &shared);
        meta.meta = Some(rmcp::model::MetaObject(serde_json::Map::new()));
        let mut icons = tool("reads", &shared);
        icons.icons = Some(Vec::new());
        assert_eq!(worked(&memo, &[&meta, &meta, &icons, &icons]), 4);
        let big = tool(&"x".repeat(MAX_TOOL_HELD + 1), &shared);
        assert_eq!(worked(&memo, &[&big, &big]), 2);
    }

    fn fingerprint(secret: &str) -> Fingerprint {
        crate::redact::Redactor::new()
            .with_secrets([("S", secret)])
            .fingerprint()
            .expect("a redactor of declared secrets has a fingerprint")
    }

    #[test]
    fn equal_schemas_are_written_alike_but_for_float_zeros_which_are_found() {
        use serde_json::{from_str, to_string};
        // What `served_as` relies on. Equal objects keep their keys in one order
        // (`preserve_order` is off), so they are written alike.
        assert!(sorted_maps());
        let a: Value = from_str(r#"{"b":1,"a":[2.5,{"y":null,"x":"s"}]}"#).unwrap();
        let b: Value = from_str(r#"{"a":[2.5,{"x":"s","y":null}],"b":1}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(to_string(&a).unwrap(), to_string(&b).unwrap());
        // Numbers are equal only as one kind.
        assert_ne!(
            from_str::<Value>("1").unwrap(),
            from_str::<Value>("1.0").unwrap()
        );
        assert_ne!(
            from_str::<Value>("0").unwrap(),
            from_str::<Value>("0.0").unwrap()
        );
        // A float zero is equal to its negative, written otherwise: found.
        let (zero, negative) = (
            from_str::<Value>("0.0").unwrap(),
            from_str::<Value>("-0").unwrap(),
        );
        assert_eq!(zero, negative);
        assert_ne!(to_string(&zero).unwrap(), to_string(&negative).unwrap());
        let with = |text: &str| {
            let value: Value = from_str(text).unwrap();
            let mut t = tool("d", &schema(serde_json::json!({"type": "object"})));
            t.output_schema = Some(schema(serde_json::json!({"default": value})));
            float_zeros(&t)
        };
        for text in ["0.0", "-0.0", "-0", "0e5", r#"[1,{"k":[-0.0]}]"#] {
            assert!(with(text), "{text}");
        }
        for text in ["0", "1.5", "-1", r#""0.0""#, "[0,1]", "null"] {
            assert!(!with(text), "{text}");
        }
        // Kept with a float zero deep in an array: the sign still tells them apart.
        let memo = ToolMemo::default();
        let under = fingerprint("secret-zzzz");
        let kept = serde_json::json!({"enum": [1, {"k": [0.0]}]});
        let served = tool("zeros", &schema(kept.clone()));
        memo.keep_shaped(&served, &tool("zeros", &schema(kept)), under);
        assert!(memo.shaped(&served.clone(), under).is_some());
        let other = serde_json::json!({"enum": [1, {"k": [-0.0]}]});
        assert!(memo.shaped(&tool("zeros", &schema(other)), under).is_none());
    }

    #[test]
    fn a_served_tool_is_taken_as_shaped_only_when_equal_to_the_byte_for_the_same_secrets() {
        let memo = ToolMemo::default();
        let (a, b) = (fingerprint("secret-aaaa"), fingerprint("secret-bbbb"));
        let input = serde_json::json!({"type": "object", "properties": {"n": {"default": 0.0}}});
        let served = tool("reads", &schema(input.clone()));
        // Shaped (into a shared copy) and left as it was: kept for `a`.
        let shaped = tool("reads", &schema(input));
        memo.keep_shaped(&served, &shaped, a);
        let again = memo.shaped(&served.clone(), a).expect("kept");
        assert!(Arc::ptr_eq(&again.input_schema, &shaped.input_schema));
        // Another redactor's secrets, another text, `-0.0` for `0.0`, an output schema,
        // icons, `_meta`: shaped again.
        assert!(memo.shaped(&served, b).is_none());
        assert!(
            memo.shaped(&tool("reads files", &served.input_schema), a)
                .is_none()
        );
        let negative =
            serde_json::json!({"type": "object", "properties": {"n": {"default": -0.0}}});
        assert!(memo.shaped(&tool("reads", &schema(negative)), a).is_none());
        let mut output = served.clone();
        output.output_schema = Some(Arc::clone(&served.input_schema));
        assert!(memo.shaped(&output, a).is_none());
        let mut icons = served.clone();
        icons.icons = Some(Vec::new());
        assert!(memo.shaped(&icons, a).is_none());
        let mut meta = served.clone();
        meta.meta = Some(rmcp::model::MetaObject(serde_json::Map::new()));
        assert!(memo.shaped(&meta, a).is_none());
        // Another title, other hints: shaped again.
        let mut titled = served.clone();
        titled.title = Some("Reads".into());
        assert!(memo.shaped(&titled, a).is_none());
        let mut hinted = served.clone();
        hinted.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
        assert!(memo.shaped(&hinted, a).is_none());
        // A tool shaping changed (a description redacted, a schema redacted) is not
        // kept: the memory holds nothing a redactor hid.
        let kept = memo.counts();
        let changed = tool("reads <redacted>", &shaped.input_schema);
        memo.keep_shaped(
            &tool("reads secret-aaaa", &served.input_schema),
            &changed,
            a,
        );
        let redacted = tool(
            "reads",
            &schema(serde_json::json!({"default": "<redacted>"})),
        );
        let leaky = tool(
            "reads",
            &schema(serde_json::json!({"default": "secret-aaaa"})),
        );
        memo.keep_shaped(&leaky, &redacted, a);
        assert_eq!(memo.counts(), kept);
        // At most MAX_REDACTORS redactors a tool, the newest kept.
        let many: Vec<Fingerprint> = (0..MAX_REDACTORS + 2)
            .map(|n| fingerprint(&format!("secret-{n:04}")))
            .collect();
        for f in &many {
            memo.keep_shaped(&served, &shaped, *f);
        }
        assert!(memo.shaped(&served, a).is_none());
        assert!(memo.shaped(&served, many[0]).is_none());
        assert!(many[2..].iter().all(|f| memo.shaped(&served, *f).is_some()));
    }

    #[test]
    fn both_digests_are_kept_apart_and_the_memory_stays_bounded() {
        let memo = ToolMemo::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let t = tool("reads", &shared);
        let canonical = memo.canonical(&t, || "c".into());
        let listed = memo.listed(&t, || ("l".into(), 20));
        assert_eq!((canonical.as_str(), listed), ("c", ("l".to_string(), 20)));
        assert_eq!(memo.canonical(&t, || unreachable!("kept")), "c");
        assert_eq!(memo.listed(&t, || unreachable!("kept")), ("l".into(), 20));
        for n in 0..MAX_TOOLS + 10 {
            memo.canonical(&tool(&n.to_string(), &shared), || "d".into());
            let memory = memo.memory.lock().unwrap();
            assert!(memory.tools <= MAX_TOOLS && memory.held <= MAX_HELD);
        }
        let memo = ToolMemo::default();
        let (mut most, mut each) = (0, 0);
        let long = "x".repeat(60_000);
        for n in 0..400 {
            let t = tool(&format!("{long}{n}"), &shared);
            each = held(&t);
            memo.canonical(&t, || "d".into());
            let (_, held) = memo.counts();
            assert!(held <= MAX_HELD);
            most = most.max(held);
        }
        assert!(
            most > MAX_HELD - each,
            "filled to the bound before starting over"
        );
    }
}
