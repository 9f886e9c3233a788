//! A result's blocks read from the server's JSON: the strings each carries (for redaction),
//! each block's view, its text, and the size the server sent.

use std::sync::Arc;

use serde_json::Value;

use crate::redact::{Redactor, View};

use super::budget::{cap_chars, data_chars};
use super::{Block, CHARS_PER_TOKEN, MAX_BLOCKS, MEDIA_TOKENS, head};

/// The redacted strings of a block.
pub(super) fn block_strings(block: &Block) -> Vec<&str> {
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

/// The text of each content block as the view's text joins them (a text block's text,
/// an embedded resource's text, nothing for the others).
pub(super) fn block_texts(content: Option<&Value>) -> Vec<&str> {
    let Some(Value::Array(blocks)) = content else {
        return Vec::new();
    };
    blocks
        .iter()
        .take(MAX_BLOCKS)
        .map(|b| {
            let text = match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text"),
                Some("resource") => b.get("resource").and_then(|r| r.get("text")),
                _ => None,
            };
            text.and_then(Value::as_str).unwrap_or("")
        })
        .collect()
}

/// The content blocks of a result in one view, each string redacted (texts cut to
/// `room` characters first, for a capped view, and what `crossing` names of them
/// hidden); binary data shared with the result.
pub(super) fn block_view(
    content: Option<&Value>,
    redactor: &Redactor,
    v: View,
    room: Option<usize>,
    crossing: &[Vec<crate::redact::Span>],
) -> Vec<Block> {
    let Some(Value::Array(blocks)) = content else {
        return Vec::new();
    };
    let logged = matches!(v, View::Event | View::Durable);
    let mut made = Vec::with_capacity(blocks.len().min(MAX_BLOCKS) + 1);
    for (index, block) in blocks.iter().take(MAX_BLOCKS).enumerate() {
        let spans = crossing.get(index).map_or(&[][..], Vec::as_slice);
        let field = |k: &str| block.get(k).and_then(Value::as_str);
        let text = |k: &str| field(k).map(|s| redactor.text(head(s, room), v));
        let one = |k: &str| text(k).unwrap_or_default();
        let shared = |k: &str| field(k).map(Arc::<str>::from).filter(|_| !logged);
        let kind = field("type").unwrap_or("");
        made.push(match kind {
            "text" => Block::Text {
                text: field("text")
                    .map(|s| redactor.text_hiding(head(s, room), spans, v))
                    .unwrap_or_default(),
            },
            "image" | "audio" => {
                let bytes = field("data").map_or(0, str::len);
                let (mime_type, data) = (one("mimeType"), shared("data"));
                if kind == "audio" {
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
            }
            "resource_link" => Block::ResourceLink {
                uri: one("uri"),
                name: one("name"),
                title: text("title"),
                mime_type: text("mimeType"),
            },
            "resource" => {
                let resource = block.get("resource");
                let inner = |k: &str| resource.and_then(|r| r.get(k)).and_then(Value::as_str);
                let redacted = |k: &str| inner(k).map(|s| redactor.text(head(s, room), v));
                Block::Resource {
                    uri: redacted("uri").unwrap_or_default(),
                    mime_type: redacted("mimeType"),
                    text: inner("text").map(|s| redactor.text_hiding(head(s, room), spans, v)),
                    blob: inner("blob").map(Arc::<str>::from).filter(|_| !logged),
                }
            }
            other => Block::Unknown {
                kind: cap_chars(&redactor.text(other, v), 64),
            },
        });
    }
    if blocks.len() > MAX_BLOCKS {
        made.push(Block::Text {
            text: format!(
                "[{} more content blocks dropped: at most {MAX_BLOCKS} are kept]",
                blocks.len() - MAX_BLOCKS
            ),
        });
    }
    made
}

/// Tokens of a result as the server sent it, by the rule of [`tokens`], and characters
/// of its structured data: what the cut marker reports, decided once for every view.
pub(super) fn sent_size(raw: &Value) -> (usize, usize) {
    let chars = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, |s| s.chars().count());
    let blocks: usize = raw
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|b| {
            let inner = |k: &str| chars(b.get("resource").and_then(|r| r.get(k)));
            1 + match b.get("type").and_then(Value::as_str) {
                Some("image" | "audio") => MEDIA_TOKENS * CHARS_PER_TOKEN,
                Some("resource") => inner("text").max(inner("uri")) + inner("blob"),
                Some("resource_link") => chars(b.get("name")) + chars(b.get("uri")) + 3,
                _ => chars(b.get("text")),
            }
        })
        .sum();
    let data = raw
        .get("structuredContent")
        .filter(|v| !v.is_null())
        .map_or(0, data_chars);
    let tokens = blocks.div_ceil(CHARS_PER_TOKEN) + data.div_ceil(CHARS_PER_TOKEN);
    (tokens, data)
}
