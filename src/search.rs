//! Finding tools by what they do, for a turn whose definitions were deferred: a BM25
//! index over each tool's name, title, description and parameter names, the one-line
//! summary a deferred tool is offered with, and the token estimate the deferral rule
//! counts with. Pure and deterministic: the same tools and query give the same ranking
//! (ties go to the earlier tool).
//!
//! Adversary: the server author (threat model 2) writes every text indexed here. Bounds:
//! each field is cut before it is tokenized ([`MAX_INDEXED`]), a query is cut at
//! [`MAX_QUERY`] and keeps at most [`MAX_QUERY_TERMS`] terms, so neither a huge
//! description nor a huge query costs more than a bounded amount of work.

use std::collections::HashMap;

/// How tokens are estimated: a definition's JSON bytes divided by four, rounded up (the
/// ratio for English text and JSON in the common tokenizers; no tokenizer is bundled).
pub const TOKEN_ESTIMATOR: &str = "bytes/4";

/// Longest one-line summary of a deferred tool, in characters.
pub const MAX_SUMMARY: usize = 120;

/// Characters of one field (description, title, a parameter's name) that are indexed.
pub const MAX_INDEXED: usize = 4_096;

/// Characters of a query that are read.
pub const MAX_QUERY: usize = 512;

/// Terms of a query that are scored.
pub const MAX_QUERY_TERMS: usize = 32;

/// A turn's budget for tool definitions: past it, the turn is deferred (every tool's
/// name and summary, the whole definitions of the tools always loaded, and the host
/// tools `search_tools` and `describe_tool`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolBudget {
    /// Tokens ([`TOKEN_ESTIMATOR`]) the whole definitions of a turn may take.
    pub tokens: usize,
    /// What is offered whole in a deferred turn too: server ids (every tool of the
    /// server) or exposed tool names.
    pub always_loaded: Vec<String>,
}

impl ToolBudget {
    /// A budget of `tokens`, nothing always loaded.
    pub fn new(tokens: usize) -> Self {
        ToolBudget {
            tokens,
            always_loaded: Vec::new(),
        }
    }

    /// Also offers `server_or_tool` (a server id or an exposed tool name) whole.
    pub fn always_load(mut self, server_or_tool: impl Into<String>) -> Self {
        self.always_loaded.push(server_or_tool.into());
        self
    }
}

/// Tokens `bytes` of definition JSON are estimated at ([`TOKEN_ESTIMATOR`]).
pub fn tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// One line that says what a tool does: the first sentence (or line) of its
/// description, or its title when it has no description, whitespace collapsed, any
/// control or invisible character dropped, cut at [`MAX_SUMMARY`] characters.
pub fn summary(description: &str, title: Option<&str>) -> String {
    let source = if description.trim().is_empty() {
        title.unwrap_or_default()
    } else {
        description
    };
    let first = source
        .trim_start()
        .split(['\n', '\r'])
        .next()
        .unwrap_or_default();
    let sentence = match first.find(". ") {
        Some(end) => &first[..=end],
        None => first,
    };
    let mut out = String::new();
    for word in sentence
        .split(|c: char| c.is_whitespace() || crate::text::is_unsafe(c))
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > MAX_SUMMARY {
            break;
        }
    }
    let mut chars = out.chars();
    let head: String = chars.by_ref().take(MAX_SUMMARY).collect();
    if chars.next().is_some() {
        format!("{}…", head.trim_end())
    } else {
        head
    }
}

/// What is indexed of one tool.
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    /// Its exposed name (`server__tool`): the server's prefix counts as words too.
    pub name: &'a str,
    /// Its title.
    pub title: Option<&'a str>,
    /// Its description.
    pub description: &'a str,
    /// The names of its top-level parameters.
    pub parameters: &'a [&'a str],
}

/// A field's weight: a word of the name says more than a word of the description.
const NAME_WEIGHT: u32 = 3;
const TITLE_WEIGHT: u32 = 2;
const PARAMETER_WEIGHT: u32 = 1;
const DESCRIPTION_WEIGHT: u32 = 1;

/// BM25's parameters (the usual ones).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A BM25 index over tools, in the order given.
#[derive(Debug, Default)]
pub struct Index {
    /// Each document's weighted term counts.
    documents: Vec<HashMap<String, u32>>,
    /// Each document's weighted length.
    lengths: Vec<u32>,
    /// How many documents hold each term.
    frequency: HashMap<String, u32>,
    average: f64,
}

impl Index {
    /// Indexes `documents` (their order is the tie-break of equal scores).
    pub fn new(documents: &[Document<'_>]) -> Self {
        let mut index = Index::default();
        for document in documents {
            let mut terms: HashMap<String, u32> = HashMap::new();
            let mut add = |text: &str, weight: u32| {
                for term in terms_of(cut(text, MAX_INDEXED)) {
                    *terms.entry(term).or_default() += weight;
                }
            };
            add(document.name, NAME_WEIGHT);
            add(document.title.unwrap_or_default(), TITLE_WEIGHT);
            add(document.description, DESCRIPTION_WEIGHT);
            for parameter in document.parameters {
                add(parameter, PARAMETER_WEIGHT);
            }
            for term in terms.keys() {
                *index.frequency.entry(term.clone()).or_default() += 1;
            }
            index.lengths.push(terms.values().sum());
            index.documents.push(terms);
        }
        let total: u64 = index.lengths.iter().map(|&l| u64::from(l)).sum();
        index.average = if index.documents.is_empty() {
            1.0
        } else {
            (total as f64 / index.documents.len() as f64).max(1.0)
        };
        index
    }

    /// The documents that match `query`, best first, at most `limit`: `(position,
    /// score)`. A document matching no term of the query is not returned.
    pub fn search(&self, query: &str, limit: usize) -> Vec<(usize, f64)> {
        let mut query_terms: Vec<String> = terms_of(cut(query, MAX_QUERY)).collect();
        query_terms.sort();
        query_terms.dedup();
        query_terms.truncate(MAX_QUERY_TERMS);
        let count = self.documents.len() as f64;
        let mut scored: Vec<(usize, f64)> = self
            .documents
            .iter()
            .zip(&self.lengths)
            .enumerate()
            .filter_map(|(position, (terms, &length))| {
                let mut score = 0.0;
                for term in &query_terms {
                    let Some(&tf) = terms.get(term) else {
                        continue;
                    };
                    let df = f64::from(self.frequency.get(term).copied().unwrap_or(1));
                    let idf = ((count - df + 0.5) / (df + 0.5) + 1.0).ln();
                    let tf = f64::from(tf);
                    let norm = K1 * (1.0 - B + B * f64::from(length) / self.average);
                    score += idf * tf * (K1 + 1.0) / (tf + norm);
                }
                (score > 0.0).then_some((position, score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        scored
    }
}

/// `text`'s first `max` characters.
fn cut(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// Words that say nothing of what a tool does.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "i", "in", "into",
    "is", "it", "its", "me", "my", "of", "on", "or", "that", "the", "this", "to", "tool", "use",
    "used", "using", "want", "what", "which", "with", "you", "your",
];

/// The terms of `text`: words split at anything not a letter or digit and at
/// lower-to-upper case changes (`readFile` is `read file`), lowercased, stop words
/// dropped, plural and verb endings folded (`files`, `reading` and `file`, `read` meet).
fn terms_of(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            previous_lower = false;
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            continue;
        }
        if c.is_uppercase() && previous_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
        .into_iter()
        .filter(|w| !STOP_WORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
}

/// A light stemmer: the endings that most often separate a query's word from a tool's,
/// then a final `e` (so `stage`, `staged` and `staging` meet).
fn stem(word: &str) -> String {
    let stemmed = strip_ending(word);
    match stemmed.strip_suffix('e') {
        Some(base) if base.chars().count() >= 3 => base.to_string(),
        _ => stemmed,
    }
}

fn strip_ending(word: &str) -> String {
    let endings: &[(&str, &str)] = &[
        ("ies", "y"),
        ("sses", "ss"),
        ("ing", ""),
        ("ed", ""),
        ("es", ""),
        ("s", ""),
    ];
    for (ending, replacement) in endings {
        if let Some(stem) = word.strip_suffix(ending)
            && stem.chars().count() >= 3
            && !(ending == &"s" && stem.ends_with('s'))
        {
            return format!("{stem}{replacement}");
        }
    }
    word.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc<'a>(name: &'a str, description: &'a str, parameters: &'a [&'a str]) -> Document<'a> {
        Document {
            name,
            title: None,
            description,
            parameters,
        }
    }

    #[test]
    fn ranks_by_name_and_description_and_breaks_ties_by_order() {
        let docs = [
            doc(
                "fs__read_file",
                "Read the complete contents of a file.",
                &["path"],
            ),
            doc(
                "fs__write_file",
                "Create or overwrite a file.",
                &["path", "content"],
            ),
            doc("web__fetch", "Fetch a URL and return its text.", &["url"]),
            doc("a__same", "identical words", &[]),
            doc("b__same", "identical words", &[]),
        ];
        let index = Index::new(&docs);
        assert_eq!(index.search("read a file", 3)[0].0, 0);
        assert_eq!(index.search("overwrite", 3)[0].0, 1);
        assert_eq!(index.search("download url", 3)[0].0, 2);
        let same = index.search("identical", 5);
        assert_eq!(same.iter().map(|s| s.0).collect::<Vec<_>>(), [3, 4]);
        assert!(index.search("nothing matches zebra", 5).is_empty());
        assert!(index.search("", 5).is_empty());
    }

    #[test]
    fn camel_case_plurals_and_parameters_meet_the_query() {
        let docs = [
            doc("git__gitLog", "Shows the commit logs.", &["maxCount"]),
            doc("x__other", "Unrelated.", &[]),
        ];
        let index = Index::new(&docs);
        assert_eq!(index.search("git log", 1)[0].0, 0);
        assert_eq!(index.search("commits", 1)[0].0, 0);
        assert_eq!(index.search("max count", 1)[0].0, 0);
    }

    #[test]
    fn a_huge_query_or_text_is_cut_not_worked_through() {
        let long = "word ".repeat(200_000);
        let docs = [doc("s__t", &long, &[])];
        let index = Index::new(&docs);
        let query = "word ".repeat(100_000);
        assert_eq!(index.search(&query, 5).len(), 1);
    }

    #[test]
    fn summaries_are_one_bounded_line_without_hidden_text() {
        assert_eq!(
            summary("Reads a file. Then more text.\nSecond line", None),
            "Reads a file."
        );
        assert_eq!(summary("  ", Some("Title only")), "Title only");
        assert_eq!(summary("a\u{202e}b\u{1b}[8m c", None), "a b [8m c");
        let long = summary(&"x".repeat(10_000), None);
        assert_eq!(long.chars().count(), MAX_SUMMARY + 1);
        assert!(long.ends_with('…'));
        assert_eq!(summary("", None), "");
    }

    #[test]
    fn tokens_are_bytes_over_four_rounded_up() {
        assert_eq!(tokens(0), 0);
        assert_eq!(tokens(1), 1);
        assert_eq!(tokens(8), 2);
        assert_eq!(tokens(9), 3);
    }
}
