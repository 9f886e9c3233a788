//! The result's budget: what each block costs in characters and tokens, the cut that keeps
//! a view within its cap, and the caps for error text.

use serde_json::Value;

use super::{
    Block, CHARS_PER_TOKEN, ERROR_TEXT_CAP, MAX_BLOCKS, MEDIA_TOKENS, ResultView, block_text,
    render,
};

/// What one block costs against the cap, in characters: its text (and one for the
/// separator before it); an image or audio block [`MEDIA_TOKENS`] tokens; binary
/// resource data by its length.
pub(super) fn cost(block: &Block) -> usize {
    let chars = match block {
        Block::Image { .. } | Block::Audio { .. } => MEDIA_TOKENS * CHARS_PER_TOKEN,
        Block::Resource { blob: Some(b), .. } => block_text(block).chars().count() + b.len(),
        other => block_text(other).chars().count(),
    };
    chars + 1
}

/// Tokens a view holds by the stated rule: its text or its blocks, whichever is more,
/// and its structured data.
pub(super) fn tokens(view: &ResultView) -> usize {
    let blocks: usize = view.blocks.iter().map(cost).sum();
    let text = view.content.chars().count().max(blocks);
    text.div_ceil(CHARS_PER_TOKEN) + data_chars(&view.data).div_ceil(CHARS_PER_TOKEN)
}

/// Characters of structured data as JSON (an empty object costs nothing), counted as
/// it is written, never held.
pub(super) fn data_chars(data: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    match data {
        Value::Object(m) if m.is_empty() => 0,
        other => {
            let mut count = Count(0);
            let _ = serde_json::to_writer(&mut count, other);
            count.0
        }
    }
}

/// `view` cut to `max_tokens`: its blocks in order, its text (the blocks' text, or the
/// structured text cut by characters), its data replaced by a note when it alone is
/// over the cap; a marker at the end says so.
///
/// `sent` is the result's size as the server sent it (its texts may have been cut to
/// what the view can show before redaction); `skipped` the size of structured data left
/// unredacted because it is over the cap alone.
pub(super) fn capped(
    mut view: ResultView,
    max_tokens: usize,
    structured_text: bool,
    sent: usize,
    skipped: Option<usize>,
) -> ResultView {
    let total = sent.max(tokens(&view));
    if total <= max_tokens {
        return view;
    }
    let max_chars = max_tokens.saturating_mul(CHARS_PER_TOKEN);
    let data = skipped.unwrap_or_else(|| data_chars(&view.data));
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
pub(super) fn cut(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// Caps text at [`ERROR_TEXT_CAP`] characters.
pub fn cap(text: &str) -> String {
    cap_chars(text, ERROR_TEXT_CAP)
}

/// Caps text at `max` characters, marking a cut with `…`.
pub fn cap_chars(text: &str, max: usize) -> String {
    // No more bytes than `max` is no more characters than `max`.
    if text.len() <= max {
        return text.to_string();
    }
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::cap_chars;

    #[test]
    fn a_text_is_cut_at_a_count_of_characters_never_inside_one() {
        assert_eq!(cap_chars("abc", 3), "abc");
        assert_eq!(cap_chars("abcd", 3), "abc…");
        assert_eq!(cap_chars("", 0), "");
        assert_eq!(cap_chars("a", 0), "…");
        // Three characters in six bytes: not cut, though past three bytes.
        assert_eq!(cap_chars("ééé", 3), "ééé");
        assert_eq!(cap_chars("éééé", 3), "ééé…");
        assert_eq!(cap_chars("日本語のテキスト", 4), "日本語の…");
    }
}
