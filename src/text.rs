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
/// included: callers that print several lines split them first), DEL, the format
/// characters (bidi embeddings, overrides and isolates, direction marks, zero-width
/// joiners and spaces, the soft hyphen, tag characters, the byte order mark,
/// interlinear annotation), the line and paragraph separators, variation selectors, and
/// the fillers that render as nothing (Hangul fillers, the Mongolian vowel separator).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{034F}'
                | '\u{0600}'..='\u{0605}'
                | '\u{061C}'
                | '\u{06DD}'
                | '\u{070F}'
                | '\u{0890}'..='\u{0891}'
                | '\u{08E2}'
                | '\u{115F}'..='\u{1160}'
                | '\u{17B4}'..='\u{17B5}'
                | '\u{180B}'..='\u{180F}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{206F}'
                | '\u{3164}'
                | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}'
                | '\u{FFA0}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{110BD}'
                | '\u{110CD}'
                | '\u{13430}'..='\u{1343F}'
                | '\u{1BCA0}'..='\u{1BCA3}'
                | '\u{1D173}'..='\u{1D17A}'
                | '\u{E0000}'..='\u{E0FFF}'
        )
}

/// `text` with every unsafe character shown as an escape (`\u{1b}`), so it reads the
/// same on any terminal and cannot move the cursor, hide text or reorder it. A
/// backslash that starts `u{` is doubled, so a name that spells `\u{1b}` cannot pass
/// for an escape; other backslashes (paths, patterns) stay as they are.
///
/// ```
/// use demiurge_mcp::text::escape;
/// assert_eq!(escape("docs\u{1b}[8m"), "docs\\u{1b}[8m");
/// assert_eq!(escape("a\\u{1b}"), "a\\\\u{1b}");
/// assert_eq!(escape("plain"), "plain");
/// ```
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) && !text.contains("\\u{") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (at, c) in text.char_indices() {
        if c == '\\' && text[at + 1..].starts_with("u{") {
            out.push_str("\\\\");
        } else if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with every character [`is_unsafe`] names that JSON itself leaves
/// as it is (DEL, C1 controls, bidi isolates, tag characters, fillers, ...) written as
/// a `\uXXXX` escape, so `--json` output read on a terminal is as safe as the text
/// output, and still the same JSON. Raw whitespace only occurs between tokens of
/// serialized JSON (inside strings it is escaped already), so it stays.
///
/// ```
/// use demiurge_mcp::text::json_safe;
/// let json = serde_json::to_string(&"a\u{202e}b\u{85}").unwrap();
/// assert_eq!(json_safe(&json), "\"a\\u202eb\\u0085\"");
/// ```
pub fn json_safe(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| is_unsafe(c) && !c.is_ascii_whitespace();
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_char(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
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

/// A multi-line text for a terminal, each line under `indent`: tabs expanded to the
/// next multiple of eight columns, every other unsafe character escaped ([`escape`]),
/// a blank line left blank. Printed under a header, a result's lines can neither look
/// broken (`\u{9}` for a tab) nor pass for the CLI's own lines.
///
/// ```
/// use demiurge_mcp::text::indented;
/// assert_eq!(indented("a\tb\n\ndiagnostic: x\u{1b}", "  "), "  a       b\n\n  diagnostic: x\\u{1b}");
/// ```
pub fn indented(text: &str, indent: &str) -> String {
    text.split('\n')
        .map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() {
                return String::new();
            }
            let mut expanded = String::with_capacity(line.len());
            let mut column = 0;
            for c in line.chars() {
                if c == '\t' {
                    let to = (column / 8 + 1) * 8;
                    expanded.extend(std::iter::repeat_n(' ', to - column));
                    column = to;
                } else {
                    expanded.push(c);
                    column += 1;
                }
            }
            format!("{indent}{}", escape(&expanded))
        })
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
            ("tag\u{e0041}", "tag\\u{e0041}"),
            ("soft\u{ad}hyphen", "soft\\u{ad}hyphen"),
            ("filler\u{3164}", "filler\\u{3164}"),
            ("vs\u{fe0f}", "vs\\u{fe0f}"),
            ("back\\u{1b}slash", "back\\\\u{1b}slash"),
            ("C:\\path\\x", "C:\\path\\x"),
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

/// The candidate closest to `word` by edit distance, when it is close enough to be a
/// likely typo (at most a third of the word's length, and at least one edit allowed),
/// for "did you mean" hints. Ties go to the first candidate.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Edit distance over characters (insertions, deletions, substitutions, and swaps of
/// two neighbours, each one edit), case-insensitive.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    // Three rows: two back (for swaps), one back, this one.
    let mut two_back: Vec<usize> = vec![0; b.len() + 1];
    let mut back: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (back[j] + 1).min(row[j - 1] + 1).min(back[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(two_back[j - 2] + 1);
            }
        }
        two_back = std::mem::replace(&mut back, row);
    }
    back[b.len()]
}

#[cfg(test)]
mod closest_tests {
    use super::closest;

    #[test]
    fn near_misses_are_suggested_and_far_ones_not() {
        let names = ["docs__search", "docs__fetch", "github__issues"];
        assert_eq!(closest("docs__serch", names), Some("docs__search"));
        assert_eq!(closest("dosc__fetch", names), Some("docs__fetch"));
        assert_eq!(closest("fats", ["fast", "slow"]), Some("fast"));
        assert_eq!(closest("DOCS__FETCH", names), Some("docs__fetch"));
        assert_eq!(closest("slack__post", names), None);
        assert_eq!(closest("", names), None);
    }
}
