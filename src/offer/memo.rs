//! Digests of shaped tool definitions, shared across connections and sessions: sixty
//! sessions on the same servers serialize and hash each tool once, not sixty times.
//!
//! A digest is reused only for a tool equal in every field to the one it was worked out
//! for, whose schemas are the very same shared copies ([`super::SchemaPool`] gives equal
//! schemas one copy, byte for byte as serialized) and that carries no icons and no
//! `_meta` (shaping drops both). Equal strings, flags and shared schemas serialize to
//! the same bytes, so a reused digest is the digest of this tool's bytes.
//!
//! Bounded: at most [`MAX_TOOLS`] tools, holding at most [`MAX_HELD`] bytes as
//! [`held`] estimates them (a kept tool keeps its schemas alive after their
//! connections closed); past either, the memory starts over. A tool over
//! [`MAX_TOOL_BYTES`] of JSON is never kept. At most [`MAX_ALIKE`] tools of one name,
//! title and description are kept (the oldest goes), so a lookup compares few.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::Tool;

/// Most tools kept (more than one server may list: `transport::MAX_TOOLS`).
pub(crate) const MAX_TOOLS: usize = 8_192;
/// Most bytes the kept tools may hold, as [`held`] estimates them.
pub(crate) const MAX_HELD: usize = 16 * 1024 * 1024;
/// Largest tool (as JSON) kept.
pub(crate) const MAX_TOOL_BYTES: usize = 64 * 1024;
/// Most tools kept under one key (name, title, description).
pub(crate) const MAX_ALIKE: usize = 8;

/// The two digests of a tool the runtime uses.
#[derive(Default)]
struct Digests {
    /// sha256 (hex) of its canonical JSON: what a pin holds ([`crate::pins::Pin`]).
    canonical: OnceLock<String>,
    /// sha256 (hex) of its JSON as `serde_json` writes the tool, and that JSON's
    /// length: what an approval of a call is bound to.
    listed: OnceLock<(String, usize)>,
}

struct Entry {
    tool: Tool,
    digests: Digests,
    /// What it is taken to hold.
    held: usize,
}

#[derive(Default)]
struct Memory {
    by_hash: HashMap<u64, Vec<Arc<Entry>>>,
    tools: usize,
    held: usize,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct ToolDigests {
    memory: Mutex<Memory>,
    hasher: std::collections::hash_map::RandomState,
}

/// Whether a digest worked out for `kept` is `tool`'s (see the module documentation).
fn same(kept: &Tool, tool: &Tool) -> bool {
    let schemas = Arc::ptr_eq(&kept.input_schema, &tool.input_schema)
        && match (&kept.output_schema, &tool.output_schema) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
    schemas && reusable(tool) && kept == tool
}

/// Whether a tool's digests may be kept and reused at all.
fn reusable(tool: &Tool) -> bool {
    tool.icons.is_none() && tool.meta.is_none()
}

/// About the bytes a kept tool holds: its texts, and its schemas as parsed (each value
/// its 32 bytes and its text, each map a tree node per eleven entries, which is where
/// tiny maps cost far more than their JSON: `{"":0}` is 7 bytes of JSON and over 600
/// in memory).
pub(crate) fn held(tool: &Tool) -> usize {
    fn value(v: &serde_json::Value) -> usize {
        32 + match v {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Array(items) => items.iter().map(value).sum(),
            serde_json::Value::Object(map) => object(map),
            _ => 0,
        }
    }
    fn object(map: &rmcp::model::JsonObject) -> usize {
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

impl ToolDigests {
    /// The canonical digest of `tool`, worked out by `work` (the digest and the JSON's
    /// length) unless known.
    pub(crate) fn canonical(&self, tool: &Tool, work: impl FnOnce() -> (String, usize)) -> String {
        self.get(
            tool,
            |d| d.canonical.get().cloned(),
            work,
            |d, digest| {
                let _ = d.canonical.set(digest.clone());
            },
        )
    }

    /// The listed digest of `tool` and its JSON's length, worked out by `work` unless
    /// known.
    pub(crate) fn listed(
        &self,
        tool: &Tool,
        work: impl FnOnce() -> (String, usize),
    ) -> (String, usize) {
        self.get(
            tool,
            |d| d.listed.get().cloned(),
            || {
                let listed = work();
                let bytes = listed.1;
                (listed, bytes)
            },
            |d, listed| {
                let _ = d.listed.set(listed.clone());
            },
        )
    }

    /// What `read` finds in the digests kept for `tool`; otherwise what `work` gives
    /// (with the length of the tool's JSON), kept through `keep` when it may be.
    fn get<T>(
        &self,
        tool: &Tool,
        read: impl Fn(&Digests) -> Option<T>,
        work: impl FnOnce() -> (T, usize),
        keep: impl Fn(&Digests, &T),
    ) -> T {
        let key = self.key(tool);
        let found = self.memory.lock().ok().and_then(|memory| {
            memory
                .by_hash
                .get(&key)?
                .iter()
                .find(|e| same(&e.tool, tool))
                .cloned()
        });
        if let Some(entry) = &found
            && let Some(known) = read(&entry.digests)
        {
            return known;
        }
        let (worked, bytes) = work();
        if let Some(entry) = found {
            keep(&entry.digests, &worked);
            return worked;
        }
        if reusable(tool) && bytes <= MAX_TOOL_BYTES {
            let entry = Entry {
                tool: tool.clone(),
                digests: Digests::default(),
                held: held(tool),
            };
            keep(&entry.digests, &worked);
            self.remember(key, entry);
        }
        worked
    }

    fn remember(&self, key: u64, entry: Entry) {
        let Ok(mut memory) = self.memory.lock() else {
            return;
        };
        let held = entry.held;
        if memory.tools >= MAX_TOOLS || memory.held + held > MAX_HELD {
            *memory = Memory::default();
        }
        let alike = memory.by_hash.entry(key).or_default();
        // Two sessions that missed it at once: kept once.
        if alike.iter().any(|e| same(&e.tool, &entry.tool)) {
            return;
        }
        let oldest = (alike.len() >= MAX_ALIKE).then(|| alike.remove(0));
        alike.push(Arc::new(entry));
        if let Some(oldest) = oldest {
            memory.tools -= 1;
            memory.held -= oldest.held;
        }
        memory.tools += 1;
        memory.held += held;
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
    fn worked(memo: &ToolDigests, tools: &[&Tool]) -> usize {
        let count = Cell::new(0);
        for t in tools {
            memo.canonical(t, || {
                count.set(count.get() + 1);
                crate::digest::sha256_json_hex(t)
            });
        }
        count.get()
    }

    #[test]
    fn a_digest_is_reused_only_for_the_same_tool_with_the_same_shared_schema() {
        let memo = ToolDigests::default();
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
        let memo = ToolDigests::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let t = tool("reads", &shared);
        // The second one finds the first kept while it works its digest out.
        memo.canonical(&t, || {
            memo.canonical(&t, || ("c".into(), 10));
            ("c".into(), 10)
        });
        assert_eq!(memo.counts().0, 1);
    }

    #[test]
    fn tools_alike_in_their_texts_are_few_and_the_newest_are_kept() {
        let memo = ToolDigests::default();
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
        let memo = ToolDigests::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let mut meta = tool("reads", &shared);
        meta.meta = Some(rmcp::model::MetaObject(serde_json::Map::new()));
        let mut icons = tool("reads", &shared);
        icons.icons = Some(Vec::new());
        assert_eq!(worked(&memo, &[&meta, &meta, &icons, &icons]), 4);
        let big = tool(&"x".repeat(MAX_TOOL_BYTES + 1), &shared);
        assert_eq!(worked(&memo, &[&big, &big]), 2);
    }

    #[test]
    fn both_digests_are_kept_apart_and_the_memory_stays_bounded() {
        let memo = ToolDigests::default();
        let shared = schema(serde_json::json!({"type": "object"}));
        let t = tool("reads", &shared);
        let canonical = memo.canonical(&t, || ("c".into(), 10));
        let listed = memo.listed(&t, || ("l".into(), 20));
        assert_eq!((canonical.as_str(), listed), ("c", ("l".to_string(), 20)));
        assert_eq!(memo.canonical(&t, || unreachable!("kept")), "c");
        assert_eq!(memo.listed(&t, || unreachable!("kept")), ("l".into(), 20));
        for n in 0..MAX_TOOLS + 10 {
            memo.canonical(&tool(&n.to_string(), &shared), || ("d".into(), 10));
            let memory = memo.memory.lock().unwrap();
            assert!(memory.tools <= MAX_TOOLS && memory.held <= MAX_HELD);
        }
        let memo = ToolDigests::default();
        let (mut most, mut each) = (0, 0);
        let long = "x".repeat(60_000);
        for n in 0..400 {
            let t = tool(&format!("{long}{n}"), &shared);
            each = held(&t);
            memo.canonical(&t, || ("d".into(), 10));
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
