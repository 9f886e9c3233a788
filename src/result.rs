//! MCP call results converted into Demiurge tool results: what the call was (its
//! [`Provenance`]), and the result in each of the five views, each with its text, its
//! typed content [`Block`]s and its structured data, redacted for that view's audience.
//!
//! The text of a view: when the result has text content, that text (blocks joined by
//! newlines; images and audio as `[image <mime>]`, links as `[<title>] <uri>`);
//! `structuredContent` as pretty JSON only when there is no text content, or when the
//! host asks for it ([`ResultShape::prefer_structured`]). `structuredContent` is always
//! the view's `data`. `isError` makes an error result; errors are redacted first, then
//! capped at [`ERROR_TEXT_CAP`] characters.
//!
//! What reaches a model and the event log is capped ([`ResultShape::max_tokens`],
//! 25,000 by default): text counts one token per [`CHARS_PER_TOKEN`] characters, an
//! image or audio block [`MEDIA_TOKENS`] whatever its size. A result over the cap is
//! cut in the model and event views, in block order, and ends with a marker saying so;
//! the operator, durable and debug views keep it whole. Image, audio and blob data are
//! not text and are not redacted; the event and durable views, which are logged, carry
//! their size instead of their data.

use std::sync::Arc;

use rmcp::model::JsonObject;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::redact::{REDACTION_FAILED, Redactor, View, Views};

/// Longest error text kept (after redaction).
pub const ERROR_TEXT_CAP: usize = 500;
/// What the model and event views of a result may hold by default, in tokens (the
/// figure Claude Code uses for MCP output).
pub const DEFAULT_MAX_RESULT_TOKENS: usize = 25_000;
/// Most content blocks of one result kept; the rest are dropped with a marker.
pub const MAX_BLOCKS: usize = 1_000;
/// Characters counted as one token.
pub const CHARS_PER_TOKEN: usize = 4;
/// Tokens one image or audio block counts, whatever its size (about what a vision
/// model charges for a one-megapixel image).
pub const MEDIA_TOKENS: usize = 1_600;

/// How results are shaped for a runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResultShape {
    /// Cap of the model and event views, in tokens (see the module documentation).
    pub max_tokens: usize,
    /// Whether a result with both text content and `structuredContent` reads as the
    /// structured data (pretty JSON) instead of its text.
    pub prefer_structured: bool,
}

impl Default for ResultShape {
    fn default() -> Self {
        ResultShape {
            max_tokens: DEFAULT_MAX_RESULT_TOKENS,
            prefer_structured: false,
        }
    }
}

/// What a result came from: a host routes and audits on these, never on text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Provenance {
    /// Server id.
    pub server: String,
    /// The server's own tool name.
    pub tool: String,
    /// The exposed name the call used (`server__tool`).
    pub exposed: String,
    /// Whether the request reached the server (a result, a server error, a timeout or a
    /// connection lost mid-call); `false` when it could not be sent.
    pub started: bool,
    /// Wall time of the call, approval excluded.
    pub duration_ms: u64,
}

/// One piece of MCP content, as one view may show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Block {
    /// Text (redacted).
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Its MIME type (redacted).
        mime_type: String,
        /// Base64 data; `None` in the event and durable views, or when cut.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Arc<str>>,
        /// Length of the base64 data.
        bytes: usize,
    },
    /// Audio.
    Audio {
        /// Its MIME type (redacted).
        mime_type: String,
        /// Base64 data; `None` in the event and durable views, or when cut.
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Arc<str>>,
        /// Length of the base64 data.
        bytes: usize,
    },
    /// A link to a resource the server offers.
    ResourceLink {
        /// The resource URI (redacted).
        uri: String,
        /// Its name (redacted).
        name: String,
        /// Its title (redacted).
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// Its MIME type (redacted).
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A resource embedded in the result.
    Resource {
        /// The resource URI (redacted).
        uri: String,
        /// Its MIME type (redacted).
        #[serde(skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its text (redacted), for a text resource.
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Base64 data of a binary resource; `None` in the event and durable views.
        #[serde(skip_serializing_if = "Option::is_none")]
        blob: Option<Arc<str>>,
    },
    /// A block of a type this runtime does not know (its type, redacted).
    Unknown {
        /// The block's `type`.
        kind: String,
    },
}

/// One view of a result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultView {
    /// The text a model or operator reads.
    pub content: String,
    /// Structured data (`structuredContent`), `{}` when none.
    pub data: Value,
    /// The MCP content, typed.
    pub blocks: Vec<Block>,
    /// Whether this view was cut at the cap.
    pub cut: bool,
}

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    /// Exposed tool name.
    pub tool: String,
    /// Whether this is an error (from the server's `isError` or from the runtime).
    pub is_error: bool,
    /// What the call was.
    pub provenance: Provenance,
    /// The tool's declared schema of `structuredContent`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Arc<JsonObject>>,
    /// The result in each view.
    pub views: Views<ResultView>,
}

impl ToolResult {
    /// Converts a `CallToolResult` (as JSON) through `redactor`.
    pub fn from_mcp(
        provenance: Provenance,
        raw: &Value,
        redactor: &Redactor,
        shape: &ResultShape,
    ) -> Self {
        // What the result marks as secret is secret for the whole result.
        let redactor = &redactor.with_result_secrets(raw);
        let is_error = raw.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let structured = raw.get("structuredContent").filter(|v| !v.is_null());
        let blocks = blocks_views(raw.get("content"), redactor);
        let has_text = blocks.model.iter().any(|b| {
            matches!(
                b,
                Block::Text { .. } | Block::Resource { text: Some(_), .. }
            )
        });
        let as_structured = structured.is_some() && (shape.prefer_structured || !has_text);
        let texts = match structured {
            Some(v) if as_structured => {
                redactor.text_views(&serde_json::to_string_pretty(v).unwrap_or_default())
            }
            _ => Views::build(|v| render(blocks.get(v))),
        };
        let data = match structured {
            Some(Value::Object(m)) => Value::Object(m.clone()),
            Some(other) => serde_json::json!({ "value": other }),
            None => Value::Object(Map::new()),
        };
        let datas = redactor.json_views(&data);
        let mut blocks = blocks;
        let views = Views::build(|v| {
            let content = texts.get(v).clone();
            let content = if is_error { cap(&content) } else { content };
            let view = ResultView {
                content,
                data: datas.get(v).clone(),
                blocks: std::mem::take(blocks_mut(&mut blocks, v)),
                cut: false,
            };
            match v {
                View::Model | View::Event => capped(view, shape.max_tokens, as_structured),
                _ => view,
            }
        });
        ToolResult {
            tool: provenance.exposed.clone(),
            is_error,
            provenance,
            output_schema: None,
            views: failed_if_any(views),
        }
    }

    /// An error produced by the runtime (denied, invalid, timeout, transport), redacted
    /// with the call's context and capped.
    pub fn error(provenance: Provenance, message: &str, redactor: &Redactor) -> Self {
        let texts = redactor.text_views(message);
        ToolResult {
            tool: provenance.exposed.clone(),
            is_error: true,
            provenance,
            output_schema: None,
            views: Views::build(|v| {
                let content = cap(texts.get(v));
                ResultView {
                    blocks: vec![Block::Text {
                        text: content.clone(),
                    }],
                    content,
                    data: Value::Object(Map::new()),
                    cut: false,
                }
            }),
        }
    }

    /// The result as `view` may show it (model, transcript, event, ...), each redacted
    /// for its audience.
    pub fn view(&self, view: View) -> &ResultView {
        self.views.get(view)
    }
}

fn blocks_mut(views: &mut Views<Vec<Block>>, view: View) -> &mut Vec<Block> {
    match view {
        View::Model => &mut views.model,
        View::Operator => &mut views.operator,
        View::Event => &mut views.event,
        View::Durable => &mut views.durable,
        View::Debug => &mut views.debug,
    }
}

/// If any part of any view failed, every view is the failure marker.
fn failed_if_any(views: Views<ResultView>) -> Views<ResultView> {
    let marked = |s: &str| s == REDACTION_FAILED;
    let failed = [
        View::Model,
        View::Operator,
        View::Event,
        View::Durable,
        View::Debug,
    ]
    .iter()
    .any(|&v| {
        let r = views.get(v);
        marked(&r.content)
            || r.data == Value::String(REDACTION_FAILED.into())
            || r.blocks
                .iter()
                .any(|b| block_strings(b).into_iter().any(marked))
    });
    if failed {
        Views::build(|_| ResultView {
            content: REDACTION_FAILED.into(),
            data: Value::String(REDACTION_FAILED.into()),
            blocks: Vec::new(),
            cut: false,
        })
    } else {
        views
    }
}

/// The redacted strings of a block.
fn block_strings(block: &Block) -> Vec<&str> {
    match block {
        Block::Text { text } => vec![text],
        Block::Image { mime_type, .. } | Block::Audio { mime_type, .. } => vec![mime_type],
        Block::ResourceLink {
            uri,
            name,
            title,
            mime_type,
        } => [Some(uri), Some(name), title.as_ref(), mime_type.as_ref()]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect(),
        Block::Resource {
            uri,
            mime_type,
            text,
            ..
        } => [Some(uri), mime_type.as_ref(), text.as_ref()]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect(),
        Block::Unknown { kind } => vec![kind],
    }
}

/// The content blocks of a result in every view: each string redacted once (five
/// renderings of one scan), binary data shared between the views that carry it.
fn blocks_views(content: Option<&Value>, redactor: &Redactor) -> Views<Vec<Block>> {
    let mut views: Views<Vec<Block>> = Views::build(|_| Vec::new());
    let Some(Value::Array(blocks)) = content else {
        return views;
    };
    let logged = |v: View| matches!(v, View::Event | View::Durable);
    for block in blocks.iter().take(MAX_BLOCKS) {
        let field = |k: &str| block.get(k).and_then(Value::as_str);
        let text = |k: &str| field(k).map(|s| redactor.text_views(s));
        let shared = |k: &str| field(k).map(Arc::<str>::from);
        let pick =
            |views: &Option<Views<String>>, v: View| views.as_ref().map(|t| t.get(v).clone());
        let one = |views: &Option<Views<String>>, v: View| pick(views, v).unwrap_or_default();
        let kind = field("type").unwrap_or("");
        let build: Box<dyn Fn(View) -> Block> = match kind {
            "text" => {
                let t = text("text");
                Box::new(move |v| Block::Text { text: one(&t, v) })
            }
            "image" | "audio" => {
                let (mime, data) = (text("mimeType"), shared("data"));
                let bytes = data.as_ref().map_or(0, |d| d.len());
                let audio = kind == "audio";
                Box::new(move |v| {
                    let (mime_type, data) = (one(&mime, v), data.clone().filter(|_| !logged(v)));
                    if audio {
                        Block::Audio {
                            mime_type,
                            data,
                            bytes,
                        }
                    } else {
                        Block::Image {
                            mime_type,
                            data,
                            bytes,
                        }
                    }
                })
            }
            "resource_link" => {
                let (uri, name, title, mime) =
                    (text("uri"), text("name"), text("title"), text("mimeType"));
                Box::new(move |v| Block::ResourceLink {
                    uri: one(&uri, v),
                    name: one(&name, v),
                    title: pick(&title, v),
                    mime_type: pick(&mime, v),
                })
            }
            "resource" => {
                let resource = block.get("resource");
                let inner = |k: &str| resource.and_then(|r| r.get(k)).and_then(Value::as_str);
                let (uri, mime, body) = (
                    inner("uri").map(|s| redactor.text_views(s)),
                    inner("mimeType").map(|s| redactor.text_views(s)),
                    inner("text").map(|s| redactor.text_views(s)),
                );
                let blob = inner("blob").map(Arc::<str>::from);
                Box::new(move |v| Block::Resource {
                    uri: one(&uri, v),
                    mime_type: pick(&mime, v),
                    text: pick(&body, v),
                    blob: blob.clone().filter(|_| !logged(v)),
                })
            }
            other => {
                let t = redactor.text_views(other);
                Box::new(move |v| Block::Unknown {
                    kind: cap_chars(t.get(v), 64),
                })
            }
        };
        for v in [
            View::Model,
            View::Operator,
            View::Event,
            View::Durable,
            View::Debug,
        ] {
            blocks_mut(&mut views, v).push(build(v));
        }
    }
    if blocks.len() > MAX_BLOCKS {
        let dropped = format!(
            "[{} more content blocks dropped: at most {MAX_BLOCKS} are kept]",
            blocks.len() - MAX_BLOCKS
        );
        views = Views::build(|v| {
            let mut kept = std::mem::take(blocks_mut(&mut views, v));
            kept.push(Block::Text {
                text: dropped.clone(),
            });
            kept
        });
    }
    views
}

/// A view's text made from its blocks.
fn render(blocks: &[Block]) -> String {
    let parts: Vec<String> = blocks.iter().map(block_text).collect();
    parts.join("\n")
}

fn block_text(block: &Block) -> String {
    match block {
        Block::Text { text } => text.clone(),
        Block::Image { mime_type, .. } => format!("[image {mime_type}]"),
        Block::Audio { mime_type, .. } => format!("[audio {mime_type}]"),
        Block::ResourceLink {
            uri, name, title, ..
        } => format!("[{}] {uri}", title.as_deref().unwrap_or(name)),
        Block::Resource { uri, text, .. } => match text {
            Some(text) => text.clone(),
            None => format!("[resource {uri}]"),
        },
        Block::Unknown { kind } => format!("[{kind} content]"),
    }
}

/// What one block costs against the cap, in characters: its text (and one for the
/// separator before it); an image or audio block [`MEDIA_TOKENS`] tokens; binary
/// resource data by its length.
fn cost(block: &Block) -> usize {
    let chars = match block {
        Block::Image { .. } | Block::Audio { .. } => MEDIA_TOKENS * CHARS_PER_TOKEN,
        Block::Resource { blob: Some(b), .. } => block_text(block).chars().count() + b.len(),
        other => block_text(other).chars().count(),
    };
    chars + 1
}

/// Tokens a view holds by the stated rule: its text or its blocks, whichever is more,
/// and its structured data.
fn tokens(view: &ResultView) -> usize {
    let blocks: usize = view.blocks.iter().map(cost).sum();
    let text = view.content.chars().count().max(blocks);
    text.div_ceil(CHARS_PER_TOKEN) + data_chars(&view.data).div_ceil(CHARS_PER_TOKEN)
}

/// Characters of structured data as JSON (an empty object costs nothing).
fn data_chars(data: &Value) -> usize {
    match data {
        Value::Object(m) if m.is_empty() => 0,
        other => other.to_string().len(),
    }
}

/// `view` cut to `max_tokens`: its blocks in order, its text (the blocks' text, or the
/// structured text cut by characters), its data replaced by a note when it alone is
/// over the cap; a marker at the end says so.
fn capped(mut view: ResultView, max_tokens: usize, structured_text: bool) -> ResultView {
    let total = tokens(&view);
    if total <= max_tokens {
        return view;
    }
    let max_chars = max_tokens.saturating_mul(CHARS_PER_TOKEN);
    let data = data_chars(&view.data);
    if data > max_chars / 2 {
        view.data = serde_json::json!({
            "cut": format!(
                "structured content of about {} tokens is over the cap of {max_tokens}",
                data.div_ceil(CHARS_PER_TOKEN)
            )
        });
    }
    let mut budget = max_chars.saturating_sub(data_chars(&view.data));
    let mut kept = Vec::with_capacity(view.blocks.len().min(MAX_BLOCKS));
    let mut left_out = 0usize;
    for block in view.blocks {
        let cost = cost(&block);
        if cost <= budget {
            budget -= cost;
            kept.push(block);
            continue;
        }
        match block {
            Block::Text { text } if budget > 1 => {
                kept.push(Block::Text {
                    text: cut(&text, budget - 1),
                });
                budget = 0;
            }
            Block::Resource {
                uri,
                mime_type,
                text: Some(text),
                ..
            } if budget > 1 => {
                kept.push(Block::Resource {
                    uri,
                    mime_type,
                    text: Some(cut(&text, budget - 1)),
                    blob: None,
                });
                budget = 0;
            }
            _ => {
                left_out += 1;
                budget = 0;
            }
        }
    }
    let marker = format!(
        "[output cut: this result is about {total} tokens and at most {max_tokens} are shown{}; ask the tool for less (a narrower query, a page) to see the rest]",
        match left_out {
            0 => String::new(),
            n => format!("; {n} content block(s) left out"),
        }
    );
    kept.push(Block::Text {
        text: marker.clone(),
    });
    view.content = if structured_text {
        let room = max_chars.saturating_sub(data_chars(&view.data));
        format!("{}\n{marker}", cut(&view.content, room))
    } else {
        render(&kept)
    };
    view.blocks = kept;
    view.cut = true;
    view
}

/// The first `chars` characters of `text`.
fn cut(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// Caps text at [`ERROR_TEXT_CAP`] characters.
pub fn cap(text: &str) -> String {
    cap_chars(text, ERROR_TEXT_CAP)
}

/// Caps text at `max` characters, marking a cut with `…`.
pub fn cap_chars(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(tool: &str) -> Provenance {
        Provenance {
            server: "s".into(),
            tool: tool.into(),
            exposed: format!("s__{tool}"),
            started: true,
            duration_ms: 1,
        }
    }

    fn convert(raw: &Value, shape: &ResultShape) -> ToolResult {
        ToolResult::from_mcp(of("t"), raw, &Redactor::new(), shape)
    }

    #[test]
    fn text_content_is_the_text_unless_the_host_prefers_structured() {
        let raw =
            json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"a": 1}});
        let r = convert(&raw, &ResultShape::default());
        assert_eq!(r.views.model.content, "x");
        assert_eq!(r.views.model.data, json!({"a": 1}));
        let shape = ResultShape {
            prefer_structured: true,
            ..ResultShape::default()
        };
        let r = convert(&raw, &shape);
        assert_eq!(r.views.model.content, "{\n  \"a\": 1\n}");
        // Structured content without text is the text whatever the preference.
        let r = convert(
            &json!({"structuredContent": {"a": 1}}),
            &ResultShape::default(),
        );
        assert_eq!(r.views.operator.content, "{\n  \"a\": 1\n}");
        assert!(!r.is_error);
        assert_eq!(r.provenance.exposed, "s__t");
    }

    #[test]
    fn blocks_are_typed_and_rendered() {
        let raw = json!({"isError": true, "content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "BBBBBB", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///x", "name": "x", "title": "X", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "file:///y", "mimeType": "text/plain", "text": "why"}},
            {"type": "resource", "resource": {"uri": "file:///z", "blob": "CCCC"}},
            {"type": "hologram"}
        ]});
        let r = convert(&raw, &ResultShape::default());
        assert!(r.is_error);
        assert_eq!(
            r.views.operator.content,
            "one\n[image image/png]\n[audio audio/wav]\n[X] file:///x\nwhy\n[resource file:///z]\n[hologram content]"
        );
        let blocks = &r.views.model.blocks;
        assert_eq!(blocks.len(), 7);
        assert!(
            matches!(&blocks[1], Block::Image { mime_type, data: Some(d), bytes: 4 }
            if mime_type == "image/png" && &**d == "AAAA")
        );
        assert!(matches!(
            &blocks[2],
            Block::Audio {
                data: Some(_),
                bytes: 6,
                ..
            }
        ));
        assert!(
            matches!(&blocks[3], Block::ResourceLink { uri, mime_type: Some(m), .. }
            if uri == "file:///x" && m == "text/plain")
        );
        assert!(matches!(&blocks[4], Block::Resource { text: Some(t), .. } if t == "why"));
        assert!(matches!(&blocks[5], Block::Resource { blob: Some(_), .. }));
        // The logged views carry the size of binary data, never the data.
        for view in [&r.views.event, &r.views.durable] {
            assert!(matches!(
                &view.blocks[1],
                Block::Image {
                    data: None,
                    bytes: 4,
                    ..
                }
            ));
            assert!(matches!(
                &view.blocks[5],
                Block::Resource { blob: None, .. }
            ));
        }
        let json = serde_json::to_value(&r.views.model.blocks[3]).unwrap();
        assert_eq!(json["type"], "resource_link");
    }

    #[test]
    fn every_text_of_a_block_is_redacted() {
        let secret = "s3cr3t-value-9";
        let raw = json!({"content": [
            {"type": "text", "text": format!("t {secret}")},
            {"type": "image", "data": "AAAA", "mimeType": format!("image/{secret}")},
            {"type": "resource_link", "uri": format!("https://x.test/?k={secret}"), "name": secret},
            {"type": "resource", "resource": {"uri": "file:///y", "text": secret}}
        ]});
        let redactor = Redactor::new().with_secrets([("K", secret)]);
        let r = ToolResult::from_mcp(of("t"), &raw, &redactor, &ResultShape::default());
        for view in [
            View::Model,
            View::Operator,
            View::Event,
            View::Durable,
            View::Debug,
        ] {
            let shown = serde_json::to_string(r.view(view)).unwrap();
            assert!(!shown.contains(secret), "{view:?}: {shown}");
        }
    }

    #[test]
    fn the_model_and_event_views_are_cut_at_the_cap_and_say_so() {
        let shape = ResultShape {
            max_tokens: 100,
            ..ResultShape::default()
        };
        let long = "y".repeat(2_000);
        let raw = json!({"content": [
            {"type": "text", "text": "head"},
            {"type": "text", "text": long},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "tail"}
        ]});
        let r = convert(&raw, &shape);
        for view in [&r.views.model, &r.views.event] {
            assert!(view.cut);
            assert!(
                view.content.chars().count() < 100 * CHARS_PER_TOKEN + 300,
                "{}",
                view.content.len()
            );
            assert!(view.content.starts_with("head\nyyy"));
            assert!(
                view.content.contains("[output cut: this result is about"),
                "{}",
                view.content
            );
            assert!(
                view.content.contains("2 content block(s) left out"),
                "{}",
                view.content
            );
            assert!(!view.blocks.iter().any(|b| matches!(b, Block::Image { .. })));
        }
        for view in [&r.views.operator, &r.views.durable, &r.views.debug] {
            assert!(!view.cut);
            assert!(view.content.ends_with("tail"));
        }
        // Images count by the stated rule, not by their size.
        let images = json!({"content": [
            {"type": "image", "data": "A".repeat(100_000), "mimeType": "image/png"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]});
        let shape = ResultShape {
            max_tokens: MEDIA_TOKENS + 1,
            ..ResultShape::default()
        };
        let r = convert(&images, &shape);
        let kept = r
            .views
            .model
            .blocks
            .iter()
            .filter(|b| matches!(b, Block::Image { .. }))
            .count();
        assert_eq!(kept, 1, "one image fits {MEDIA_TOKENS} tokens");
        // Structured text is cut by characters.
        let big = json!({"structuredContent": {"k": "z".repeat(2_000)}});
        let r = convert(
            &big,
            &ResultShape {
                max_tokens: 50,
                ..ResultShape::default()
            },
        );
        assert!(r.views.model.cut && r.views.model.content.contains("[output cut"));
        assert!(
            r.views.model.data.get("cut").is_some(),
            "{:?}",
            r.views.model.data
        );
        assert_eq!(
            r.views.operator.data["k"].as_str().unwrap().len(),
            2_000,
            "whole elsewhere"
        );
    }

    /// Every way around the cap that a hostile result could try.
    #[test]
    fn no_result_gets_around_the_cap() {
        let shape = ResultShape {
            max_tokens: 100,
            ..ResultShape::default()
        };
        let big = "w".repeat(100_000);
        let cases = [
            // An error: its text is capped at 500, its blocks were not.
            json!({"isError": true, "content": [{"type": "text", "text": big}]}),
            // Structured text chosen, a huge embedded resource beside it.
            json!({"structuredContent": {}, "content": [
                {"type": "resource", "resource": {"uri": "x:y", "text": big}}]}),
            // A huge binary resource.
            json!({"content": [{"type": "resource", "resource": {"uri": "x:y", "blob": big}}]}),
            // Many tiny blocks (the separators count).
            json!({"content": (0..5_000).map(|_| json!({"type": "text", "text": "a"})).collect::<Vec<_>>()}),
            // Empty blocks.
            json!({"content": (0..5_000).map(|_| json!({"type": "text", "text": ""})).collect::<Vec<_>>()}),
        ];
        for raw in &cases {
            let r = convert(raw, &shape);
            for view in [&r.views.model, &r.views.event] {
                // The budget is 400 characters; the marker adds about 200.
                let what = &raw.to_string()[..80];
                let text: usize = view.blocks.iter().map(cost).sum();
                assert!(
                    view.content.chars().count() < 700,
                    "text {} for {what}",
                    view.content.len()
                );
                assert!(text < 700, "blocks cost {text} for {what}");
                assert!(
                    view.blocks.len() <= 401,
                    "{} blocks for {what}",
                    view.blocks.len()
                );
                assert!(data_chars(&view.data) < 400, "data for {what}");
            }
        }
        // At most MAX_BLOCKS blocks are kept, in every view.
        let many = json!({"content": (0..MAX_BLOCKS + 10).map(|_| json!({"type": "text", "text": "b"})).collect::<Vec<_>>()});
        let r = convert(&many, &ResultShape::default());
        assert_eq!(r.views.operator.blocks.len(), MAX_BLOCKS + 1);
        assert!(
            r.views
                .operator
                .content
                .ends_with("[10 more content blocks dropped: at most 1000 are kept]")
        );
    }

    #[test]
    fn errors_are_redacted_then_capped() {
        let secret = "s3cr3t-value";
        let long = format!("{} {secret}", "x".repeat(600));
        let redactor = Redactor::new().with_secrets([("K", secret)]);
        let r = ToolResult::error(of("t"), &long, &redactor);
        assert!(r.views.operator.content.chars().count() <= ERROR_TEXT_CAP + 1);
        let r = ToolResult::error(of("t"), &format!("bad {secret}"), &redactor);
        assert_eq!(r.views.operator.content, "bad <redacted:K>");
    }
}

#[cfg(test)]
mod failure_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_redaction_failure_is_the_marker_in_every_view() {
        let raw = json!({"content": [{"type": "text", "text": "raw secret"}], "structuredContent": {"k": "v"}});
        let of = Provenance {
            server: "s".into(),
            tool: "t".into(),
            exposed: "s__t".into(),
            started: true,
            duration_ms: 0,
        };
        let shape = ResultShape::default();
        let r = ToolResult::from_mcp(of.clone(), &raw, &Redactor::poisoned(), &shape);
        for v in [
            View::Model,
            View::Operator,
            View::Event,
            View::Durable,
            View::Debug,
        ] {
            assert_eq!(r.view(v).content, REDACTION_FAILED);
            assert_eq!(r.view(v).data, Value::String(REDACTION_FAILED.into()));
        }
        let e = ToolResult::error(of, "raw secret", &Redactor::poisoned());
        assert_eq!(e.views.operator.content, REDACTION_FAILED);
    }
}
