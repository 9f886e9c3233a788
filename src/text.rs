//! Untrusted text on its way to a person: what may not reach a terminal as it is, and
//! how it is shown instead.
//!
//! Core authors choose file names, server authors choose tool names, descriptions and
//! error texts. Printed raw, a control sequence (`ESC [ 8 m` hides what follows on
//! common terminals), a bidi override (which reorders what is shown) or a line separator
//! can make an approval preview say something other than what runs. Pure: every printer
//! of the CLI and every `render` of the library goes through [`escape`].

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as it is: C0 and C1 controls (newline and tab
/// included: callers that print several lines split them first), DEL, the bidi
/// embedding, override and isolate controls, the marks that change direction, zero-width
/// characters that hide boundaries, the byte order mark, and the line and paragraph
/// separators.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
        )
}

/// `text` with every unsafe character shown as an escape (`\u{1b}`), so it reads the
/// same on any terminal and cannot move the cursor, hide text or reorder it.
///
/// ```
/// use demiurge_mcp::text::escape;
/// assert_eq!(escape("docs\u{1b}[8m"), "docs\\u{1b}[8m");
/// assert_eq!(escape("plain"), "plain");
/// ```
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`escape`] line by line: a multi-line text keeps its line breaks and nothing else.
pub fn escape_lines(text: &str) -> String {
    text.split('\n')
        .map(|line| escape(line.strip_suffix('\r').unwrap_or(line)).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `name` when it is a plain identifier a message may repeat (letters, digits, `_`, `-`,
/// `.`, at most 64 characters), otherwise `placeholder`: keys of a hostile file are file
/// content too, and an error message must not become a way to print it.
pub fn plain_name<'a>(name: &'a str, placeholder: &'a str) -> &'a str {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain { name } else { placeholder }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_separators_are_escaped() {
        for (raw, shown) in [
            ("a\u{1b}[2Jb", "a\\u{1b}[2Jb"),
            ("x\u{202e}cod.exe", "x\\u{202e}cod.exe"),
            ("tab\there", "tab\\u{9}here"),
            ("nl\nhere", "nl\\u{a}here"),
            ("c1\u{9b}31m", "c1\\u{9b}31m"),
            ("iso\u{2066}late", "iso\\u{2066}late"),
            ("zw\u{200b}sp", "zw\\u{200b}sp"),
            ("ls\u{2028}x", "ls\\u{2028}x"),
            ("bom\u{feff}", "bom\\u{feff}"),
            ("del\u{7f}", "del\\u{7f}"),
        ] {
            assert_eq!(escape(raw), shown, "{raw:?}");
        }
        assert!(matches!(escape("héllo wörld"), Cow::Borrowed(_)));
    }

    #[test]
    fn lines_keep_their_breaks_only() {
        assert_eq!(escape_lines("one\r\ntwo\u{1b}"), "one\ntwo\\u{1b}");
    }

    #[test]
    fn only_plain_names_are_repeated() {
        assert_eq!(plain_name("API_TOKEN", "<key>"), "API_TOKEN");
        assert_eq!(plain_name("sk live 123", "<key>"), "<key>");
        assert_eq!(plain_name(&"k".repeat(65), "<key>"), "<key>");
        assert_eq!(plain_name("", "<key>"), "<key>");
    }
}
