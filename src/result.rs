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

use std::sync::{Arc, OnceLock};

use rmcp::model::JsonObject;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::redact::{REDACTION_FAILED, Redactor, View, Views};

mod blocks;
mod budget;

use blocks::{block_strings, block_texts, block_view, sent_size};
use budget::capped;
pub use budget::{cap, cap_chars};

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
///
/// Its views are made when first asked for ([`ToolResult::view`]) and kept: a host that
/// hands its model the model view never pays for the operator's copy of a megabyte
/// result. Clones share what was made.
#[derive(Clone)]
pub struct ToolResult {
    /// Exposed tool name.
    pub tool: String,
    /// Whether this is an error (from the server's `isError` or from the runtime).
    pub is_error: bool,
    /// What the call was.
    pub provenance: Provenance,
    /// The tool's declared schema of `structuredContent`, when it has one.
    pub output_schema: Option<Arc<JsonObject>>,
    views: Lazy,
}

/// The views of a result: made from `source` when first asked for.
#[derive(Clone)]
struct Lazy {
    source: Option<Arc<Source>>,
    made: Arc<Views<OnceLock<ResultView>>>,
}

/// What a result's views are made from.
struct Source {
    raw: Value,
    /// The connection's redactor with the result's own secrets.
    redactor: Redactor,
    shape: ResultShape,
    is_error: bool,
    /// Whether redaction cannot complete (oversized input, poisoned redactor): every
    /// view is then the marker, decided once for all of them.
    failed: bool,
    /// Tokens of the result and characters of its structured data as sent (what the
    /// capped views decide on), counted once.
    sent: OnceLock<(usize, usize)>,
    /// Per content block, what of its text a secret or shape crossing a join between
    /// blocks covers (the view's text joins them), found once for every view.
    crossing: OnceLock<Vec<Vec<crate::redact::Span>>>,
}

impl ToolResult {
    /// Converts a `CallToolResult` (as JSON) through `redactor`.
    pub fn from_mcp(
        provenance: Provenance,
        raw: Value,
        redactor: &Redactor,
        shape: &ResultShape,
    ) -> Self {
        // What the result marks as secret is secret for the whole result.
        let redactor = redactor.with_result_secrets(&raw);
        let is_error = raw.get("isError").and_then(Value::as_bool).unwrap_or(false);
        let failed = !redactor.can_redact(&raw);
        ToolResult {
            tool: provenance.exposed.clone(),
            is_error,
            provenance,
            output_schema: None,
            views: Lazy {
                source: Some(Arc::new(Source {
                    raw,
                    redactor,
                    shape: *shape,
                    is_error,
                    failed,
                    sent: OnceLock::new(),
                    crossing: OnceLock::new(),
                })),
                made: Arc::new(Views::build(|_| OnceLock::new())),
            },
        }
    }

    /// An error produced by the runtime (denied, invalid, timeout, transport), redacted
    /// with the call's context and capped.
    pub fn error(provenance: Provenance, message: &str, redactor: &Redactor) -> Self {
        let texts = redactor.text_views(message);
        let made = Views::build(|v| {
            let content = cap(texts.get(v));
            OnceLock::from(ResultView {
                blocks: vec![Block::Text {
                    text: content.clone(),
                }],
                content,
                data: Value::Object(Map::new()),
                cut: false,
            })
        });
        ToolResult {
            tool: provenance.exposed.clone(),
            is_error: true,
            provenance,
            output_schema: None,
            views: Lazy {
                source: None,
                made: Arc::new(made),
            },
        }
    }

    /// The result as `view` may show it (model, transcript, event, ...), each redacted
    /// for its audience; made on first use.
    pub fn view(&self, view: View) -> &ResultView {
        self.views
            .made
            .get(view)
            .get_or_init(|| match &self.views.source {
                Some(source) => source.view(view),
                None => failed_view(),
            })
    }

    /// Every view (each made now if it was not yet).
    pub fn views(&self) -> Views<&ResultView> {
        Views::build(|v| self.view(v))
    }
}

impl std::fmt::Debug for ToolResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolResult")
            .field("tool", &self.tool)
            .field("is_error", &self.is_error)
            .field("provenance", &self.provenance)
            .field("operator", self.view(View::Operator))
            .finish_non_exhaustive()
    }
}

impl PartialEq for ToolResult {
    fn eq(&self, other: &Self) -> bool {
        self.tool == other.tool
            && self.is_error == other.is_error
            && self.provenance == other.provenance
            && self.output_schema == other.output_schema
            && self.views() == other.views()
    }
}

impl Serialize for ToolResult {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            tool: &'a str,
            is_error: bool,
            provenance: &'a Provenance,
            #[serde(skip_serializing_if = "Option::is_none")]
            output_schema: Option<&'a Arc<JsonObject>>,
            views: Views<&'a ResultView>,
        }
        Shown {
            tool: &self.tool,
            is_error: self.is_error,
            provenance: &self.provenance,
            output_schema: self.output_schema.as_ref(),
            views: self.views(),
        }
        .serialize(serializer)
    }
}

/// Characters of a text a capped view redacts beyond its cap: a secret or shape that
/// starts inside the cap is seen whole (up to this length past it) before the cut.
const CUT_MARGIN: usize = 64 * 1024;

impl Source {
    /// One view; the marker view if redaction fails (or panics) anywhere in it.
    fn view(&self, view: View) -> ResultView {
        if self.failed {
            return failed_view();
        }
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.make(view)));
        match made {
            Ok(made) if !has_marker(&made) => made,
            _ => failed_view(),
        }
    }

    fn make(&self, view: View) -> ResultView {
        let (raw, redactor, shape) = (&self.raw, &self.redactor, &self.shape);
        let capped_view = matches!(view, View::Model | View::Event);
        let max_chars = shape.max_tokens.saturating_mul(CHARS_PER_TOKEN);
        // A capped view redacts only the head of each text that it can show: what is
        // past the cap is never rendered, so it is never copied.
        let room = capped_view.then(|| {
            max_chars
                .saturating_add(redactor.longest_secret_chars())
                .saturating_add(CUT_MARGIN)
        });
        let structured = raw.get("structuredContent").filter(|v| !v.is_null());
        let crossing = self
            .crossing
            .get_or_init(|| redactor.crossing_spans(&block_texts(raw.get("content"))));
        let blocks = block_view(raw.get("content"), redactor, view, room, crossing);
        let has_text = blocks.iter().any(|b| {
            matches!(
                b,
                Block::Text { .. } | Block::Resource { text: Some(_), .. }
            )
        });
        let as_structured = structured.is_some() && (shape.prefer_structured || !has_text);
        let content = match structured {
            Some(v) if as_structured => {
                let pretty = pretty_head(v, room);
                redactor.text(head(&pretty, room), view)
            }
            _ => render(&blocks),
        };
        let content = if self.is_error {
            cap(&content)
        } else {
            content
        };
        // Structured data over the whole cap (as the server sent it) is not shown in a
        // capped view; it is not redacted for it either.
        let (sent_tokens, sent_data) = *self.sent.get_or_init(|| sent_size(raw));
        let skipped = (capped_view && sent_data > max_chars).then_some(sent_data);
        let data = match structured {
            _ if skipped.is_some() => Value::Null,
            Some(v @ Value::Object(_)) => redactor.json(v, view),
            Some(other) => redactor.json(&serde_json::json!({ "value": other }), view),
            None => Value::Object(Map::new()),
        };
        let made = ResultView {
            content,
            data,
            blocks,
            cut: false,
        };
        // Checked before the cut, which could shorten a marker into text.
        if has_marker(&made) {
            return failed_view();
        }
        if capped_view {
            capped(made, shape.max_tokens, as_structured, sent_tokens, skipped)
        } else {
            made
        }
    }
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

fn failed_view() -> ResultView {
    ResultView {
        content: REDACTION_FAILED.into(),
        data: Value::String(REDACTION_FAILED.into()),
        blocks: Vec::new(),
        cut: false,
    }
}

/// Whether any part of a view is the failure marker (a part that could not be
/// redacted): the whole view is the marker then, never partially redacted.
fn has_marker(view: &ResultView) -> bool {
    let marked = |s: &str| s == REDACTION_FAILED;
    marked(&view.content)
        || view.data == Value::String(REDACTION_FAILED.into())
        || view
            .blocks
            .iter()
            .any(|b| block_strings(b).into_iter().any(marked))
}

/// `value` as pretty JSON, written only until it is longer than `room` characters
/// (whole without a room): a capped view of megabytes of data writes the head it shows.
fn pretty_head(value: &Value, room: Option<usize>) -> String {
    /// Takes what it is given until it holds more than `room` characters, then refuses,
    /// which ends the writing.
    struct Upto {
        out: Vec<u8>,
        chars: usize,
        room: usize,
    }
    impl std::io::Write for Upto {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.chars > self.room {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.out.extend_from_slice(bytes);
            // Characters are counted by their first bytes (none is a continuation).
            self.chars += bytes.iter().filter(|&&b| (b as i8) >= -0x40).count();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let Some(room) = room else {
        return serde_json::to_string_pretty(value).unwrap_or_default();
    };
    let mut upto = Upto {
        out: Vec::new(),
        chars: 0,
        room,
    };
    let _ = serde_json::to_writer_pretty(&mut upto, value);
    // The writer splits no character (each piece serde writes is whole text); were one
    // split, the lossy reading marks it, and the head shown is cut before it anyway.
    String::from_utf8(upto.out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The first `room` characters of `text` (all of it without a room).
fn head(text: &str, room: Option<usize>) -> &str {
    match room.and_then(|r| text.char_indices().nth(r)) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::budget::{cost, data_chars};
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
        ToolResult::from_mcp(of("t"), raw.clone(), &Redactor::new(), shape)
    }

    /// The head written only until it is long enough is the head of the whole text,
    /// at every room, through characters of one to four bytes and escapes.
    #[test]
    fn a_pretty_head_is_the_head_of_the_whole_text() {
        let value = json!({
            "a": "plain ascii",
            "b": ["é€😀", "quote \" and \\ and \n", {"c": null, "d": 1.5}],
            "e": "x".repeat(300),
        });
        let whole = serde_json::to_string_pretty(&value).unwrap();
        let chars = whole.chars().count();
        for room in (0..chars + 5).chain([usize::MAX]) {
            let shown = pretty_head(&value, Some(room));
            assert_eq!(head(&shown, Some(room)), head(&whole, Some(room)), "{room}");
            // Written no further than a piece past the room.
            assert!(shown.len() <= whole.len(), "{room}");
        }
        assert!(pretty_head(&value, Some(10)).len() < 100);
        assert_eq!(pretty_head(&value, None), whole);
    }

    #[test]
    fn text_content_is_the_text_unless_the_host_prefers_structured() {
        let raw =
            json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"a": 1}});
        let r = convert(&raw, &ResultShape::default());
        assert_eq!(r.view(View::Model).content, "x");
        assert_eq!(r.view(View::Model).data, json!({"a": 1}));
        let shape = ResultShape {
            prefer_structured: true,
            ..ResultShape::default()
        };
        let r = convert(&raw, &shape);
        assert_eq!(r.view(View::Model).content, "{\n  \"a\": 1\n}");
        // Structured content without text is the text whatever the preference.
        let r = convert(
            &json!({"structuredContent": {"a": 1}}),
            &ResultShape::default(),
        );
        assert_eq!(r.view(View::Operator).content, "{\n  \"a\": 1\n}");
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
            r.view(View::Operator).content,
            "one\n[image image/png]\n[audio audio/wav]\n[X] file:///x\nwhy\n[resource file:///z]\n[hologram content]"
        );
        let blocks = &r.view(View::Model).blocks;
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
        for view in [&r.view(View::Event), &r.view(View::Durable)] {
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
        let json = serde_json::to_value(&r.view(View::Model).blocks[3]).unwrap();
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
        let r = ToolResult::from_mcp(of("t"), raw.clone(), &redactor, &ResultShape::default());
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
        for view in [&r.view(View::Model), &r.view(View::Event)] {
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
        for view in [
            &r.view(View::Operator),
            &r.view(View::Durable),
            &r.view(View::Debug),
        ] {
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
            .view(View::Model)
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
        assert!(r.view(View::Model).cut && r.view(View::Model).content.contains("[output cut"));
        assert!(
            r.view(View::Model).data.get("cut").is_some(),
            "{:?}",
            r.view(View::Model).data
        );
        assert_eq!(
            r.view(View::Operator).data["k"].as_str().unwrap().len(),
            2_000,
            "whole elsewhere"
        );
    }

    /// Every way around the cap that a hostile result could try.
    /// A capped view redacts only the head it can show (its texts are cut before
    /// redaction, with a margin): a secret that starts inside the cap and runs past it
    /// is still found whole, so no part of it is shown; the operator view keeps it all.
    #[test]
    fn a_secret_across_the_cap_is_hidden_and_nothing_past_the_cap_is_copied() {
        let shape = ResultShape {
            max_tokens: 100,
            prefer_structured: false,
        };
        let secret = "s3cr3t-".repeat(50);
        for before in [395, 399, 400, 401] {
            let text = format!("{}{secret}{}", "a".repeat(before), "b".repeat(1_000_000));
            let raw = json!({"content": [{"type": "text", "text": text}]});
            let redactor = Redactor::new().with_secrets([("token", secret.as_str())]);
            let r = ToolResult::from_mcp(of("t"), raw, &redactor, &shape);
            for v in [View::Model, View::Event] {
                let view = r.view(v);
                assert!(view.cut, "{before}");
                assert!(!view.content.contains("s3cr"), "{before}: {}", view.content);
                assert!(view.content.len() < 1_000, "{before}");
            }
            let whole = &r.view(View::Operator).content;
            assert!(whole.ends_with(&"b".repeat(1_000_000)) && !whole.contains("s3cr"));
        }
    }

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
            for view in [&r.view(View::Model), &r.view(View::Event)] {
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
        assert_eq!(r.view(View::Operator).blocks.len(), MAX_BLOCKS + 1);
        assert!(
            r.view(View::Operator)
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
        assert!(r.view(View::Operator).content.chars().count() <= ERROR_TEXT_CAP + 1);
        let r = ToolResult::error(of("t"), &format!("bad {secret}"), &redactor);
        assert_eq!(r.view(View::Operator).content, "bad <redacted:K>");
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
        let r = ToolResult::from_mcp(of.clone(), raw.clone(), &Redactor::poisoned(), &shape);
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
        assert_eq!(e.view(View::Operator).content, REDACTION_FAILED);
    }
}
