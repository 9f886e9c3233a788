//! Exposed tool names: filters over raw names, normalization, server prefixes and
//! deterministic, stable collision handling (`docs/design.md#3-names`).
//!
//! Pure. The catalog actor keeps the previous turn's [`Names`] so that peers kept across
//! turns keep their names.

use foldhash::HashSetExt;

use crate::core::ToolFilter;

/// Longest server prefix.
pub const MAX_PREFIX: usize = 30;
/// Longest exposed name (`prefix__tool`).
pub const MAX_NAME: usize = 64;
const SEPARATOR: &str = "__";

/// Whether `name` matches the glob `pattern` (`*` only, anchored, case-sensitive).
///
/// ```
/// use demiurge_mcp::naming::glob_match;
/// assert!(glob_match("search*", "search_docs"));
/// assert!(!glob_match("search*", "my_search"));
/// ```
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Classic two-pointer match with backtracking to the last star: linear for
    // practical patterns, no recursion.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether the filter lets the raw tool name through.
pub fn filter_allows(filter: &ToolFilter, raw: &str) -> bool {
    let included = filter.include.is_empty() || filter.include.iter().any(|g| glob_match(g, raw));
    included && !filter.exclude.iter().any(|g| glob_match(g, raw))
}

/// `c` if it may stand in a host-safe name (`[A-Za-z0-9_-]`), else `-`.
pub fn safe_char(c: char) -> char {
    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
        c
    } else {
        '-'
    }
}

/// A host-safe name fragment: `[A-Za-z][A-Za-z0-9_-]*`.
pub fn normalize_fragment(raw: &str, fallback: &str) -> String {
    fragment(raw, fallback).collect()
}

/// The characters of [`normalize_fragment`], ASCII all (so as many bytes), made as they
/// are read: a name compared or cut needs no copy of its own first.
fn fragment<'a>(raw: &'a str, fallback: &'a str) -> impl Iterator<Item = char> + 'a {
    let raw = raw.trim();
    // Each character outside `[A-Za-z0-9_-]` becomes `-`; a fragment that would not
    // start with a letter gets the fallback first (alone when there is nothing).
    let lead = match raw.chars().next() {
        None => (fallback, ""),
        Some(c) if c.is_ascii_alphabetic() => ("", ""),
        Some(_) => (fallback, "-"),
    };
    lead.0
        .chars()
        .chain(lead.1.chars())
        .chain(raw.chars().map(safe_char))
}

/// The servers of `ids` (in order) whose tools may be named `<prefix>__...` for the
/// `prefix` of an exposed name: every server whose own prefix (before collision
/// numbering) is that prefix, or, for a numbered one (`base-2`, the base cut to make
/// room), starts with its base. A turn of exactly these names their tools as a full
/// turn does: numbering depends only on servers sharing a base.
pub fn same_prefix<'a>(ids: impl IntoIterator<Item = &'a str>, exposed: &str) -> Vec<String> {
    let Some((prefix, _)) = exposed.split_once(SEPARATOR) else {
        return Vec::new();
    };
    let prefix = prefix.to_lowercase();
    let numbered = prefix
        .rsplit_once('-')
        .filter(|(base, n)| {
            !base.is_empty() && !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
        })
        .map(|(base, _)| base.to_string());
    ids.into_iter()
        .filter(|id| {
            let base = cut(&normalize_fragment(id, "mcp"), MAX_PREFIX).to_lowercase();
            base == prefix || numbered.as_deref().is_some_and(|n| base.starts_with(n))
        })
        .map(str::to_string)
        .collect()
}

/// Names (lowercase) one naming pass gave out.
type Taken = foldhash::HashSet<String>;

/// The next number to try for a first choice (lowercase, with its head and most bytes),
/// in one naming pass ([`unique`]).
type Numbered = foldhash::HashMap<(String, usize, usize), usize>;

/// Names assigned in one turn, kept by the catalog for the next. Its maps hash with
/// foldhash, as [`assign`]'s sets do and for the same reason.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// Server id to prefix.
    pub prefixes: foldhash::HashMap<String, String>,
    /// Server id, then raw tool name, to exposed name.
    pub tools: foldhash::HashMap<String, foldhash::HashMap<String, String>>,
}

impl Names {
    /// The name tool `raw` of server `server_id` is exposed as.
    pub fn exposed(&self, server_id: &str, raw: &str) -> Option<&String> {
        self.tools.get(server_id)?.get(raw)
    }

    /// Every exposed name.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.tools.values().flat_map(|named| named.values())
    }
}

/// The input of one naming pass: a server, in file order, with its filtered tools in
/// listing order, and whether it is a peer kept from the previous turn.
pub struct ServerTools<'a> {
    /// Server id.
    pub server_id: &'a str,
    /// Raw tool names after filtering, in listing order.
    pub tools: Vec<&'a str>,
    /// Kept peers reuse their previous names.
    pub kept: bool,
}

/// Assigns prefixes and exposed names. Kept peers claim their previous names first; the
/// rest are assigned in file order, each server's tools in the order of their raw names
/// (whatever order the server lists them in); collisions compare case-insensitively
/// and get `-2`, `-3`, ...
pub fn assign(servers: &[ServerTools<'_>], previous: &Names) -> Names {
    // foldhash, seeded per set: fast on short names. It is no defence against a server
    // that times lookups and adapts, and needs none: a listing holds at most
    // `transport::MAX_TOOLS` names, so names that all collided would cost at most that
    // many comparisons each. Sized for every name at once: no table grows name by name.
    let names = servers.iter().map(|s| s.tools.len()).sum();
    let mut taken_prefixes = Taken::with_capacity(servers.len());
    let mut taken_names = Taken::with_capacity(names);
    let (mut numbered_prefixes, mut numbered_names) = (Numbered::default(), Numbered::default());
    let mut out = Names::default();

    for server in servers.iter().filter(|s| s.kept) {
        if let Some(prefix) = previous.prefixes.get(server.server_id)
            && taken_prefixes.insert(prefix.to_lowercase())
        {
            out.prefixes
                .insert(server.server_id.to_string(), prefix.clone());
            let named = out.tools.entry(server.server_id.to_string()).or_default();
            for tool in &server.tools {
                if let Some(name) = previous.exposed(server.server_id, tool)
                    && taken_names.insert(name.to_lowercase())
                {
                    named.insert(tool.to_string(), name.clone());
                }
            }
        }
    }

    for server in servers {
        let prefix = match out.prefixes.get(server.server_id) {
            Some(p) => p.clone(),
            None => {
                let base = normalize_fragment(server.server_id, "mcp");
                let base = cut(&base, MAX_PREFIX).to_string();
                let p = unique(
                    base,
                    0,
                    MAX_PREFIX,
                    &mut taken_prefixes,
                    &mut numbered_prefixes,
                );
                out.prefixes.insert(server.server_id.to_string(), p.clone());
                p
            }
        };
        let named = out.tools.entry(server.server_id.to_string()).or_default();
        named.reserve(server.tools.len());
        // Suffixes go by the raw names' order, never the listing's: a server that
        // reorders its list (a hash map is enough) cannot move `w__a-b` from its
        // `a-b` to its `a.b`.
        let mut tools = server.tools.clone();
        tools.sort_unstable();
        for tool in tools {
            if named.contains_key(tool) {
                continue;
            }
            let head = prefix.len() + SEPARATOR.len();
            let name = unique(
                first_choice(&prefix, tool),
                head,
                room(&prefix),
                &mut taken_names,
                &mut numbered_names,
            );
            named.insert(tool.to_string(), name);
        }
    }
    out
}

/// The name `raw` of a server with `prefix` would be exposed as when nothing collides
/// with it: what a numbered name (`docs__search-2`) was numbered away from.
pub fn first_choice(prefix: &str, raw: &str) -> String {
    let mut name = String::with_capacity(MAX_NAME);
    name.extend(first_choice_chars(prefix, raw));
    name
}

/// Whether `name` is, ASCII case aside, the [`first_choice`] of `raw` under `prefix`:
/// worked out as it is read, no name made.
pub fn is_first_choice(prefix: &str, raw: &str, name: &str) -> bool {
    first_choice_chars(prefix, raw)
        .map(|c| c.to_ascii_lowercase())
        .eq(name.chars().map(|c| c.to_ascii_lowercase()))
}

/// The characters of [`first_choice`], made as they are read.
fn first_choice_chars<'a>(prefix: &'a str, raw: &'a str) -> impl Iterator<Item = char> + 'a {
    prefix
        .chars()
        .chain(SEPARATOR.chars())
        .chain(fragment(raw, "tool").take(room(prefix)))
}

/// What is left of [`MAX_NAME`] for a tool's part after `prefix` and the separator.
fn room(prefix: &str) -> usize {
    MAX_NAME - prefix.len().min(MAX_PREFIX) - SEPARATOR.len()
}

fn cut(s: &str, max: usize) -> &str {
    // Fragments are ASCII after normalization, so bytes are chars.
    &s[..s.len().min(max)]
}

/// `first` unless taken (names compare case-insensitively), else `first` numbered:
/// what follows its first `head` bytes cut to `max` bytes less the room of the lowest
/// free `-2`, `-3`, ... (a prefix has no head; a name's is its prefix and `__`).
///
/// The numbers tried for a first choice are kept (`numbered`): every lower one is taken,
/// and names are not given back within a pass, so the next such name starts where the
/// last stopped. Names that all share a first choice cost one try each, not one per
/// name before them.
fn unique(
    first: String,
    head: usize,
    max: usize,
    taken: &mut Taken,
    numbered: &mut Numbered,
) -> String {
    if taken.insert(first.to_lowercase()) {
        return first;
    }
    let key = (first.to_lowercase(), head, max);
    let from = numbered.get(&key).copied().unwrap_or(2);
    let (head, rest) = first.split_at(head);
    let (n, name) = (from..)
        .map(|n| {
            let suffix = format!("-{n}");
            (
                n,
                format!("{head}{}{suffix}", cut(rest, max - suffix.len())),
            )
        })
        .find(|(_, candidate)| taken.insert(candidate.to_lowercase()))
        .expect("an unbounded counter always finds a free name");
    numbered.insert(key, n + 1);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_are_anchored_and_case_sensitive() {
        assert!(glob_match("search*", "search_docs"));
        assert!(!glob_match("search*", "my_search"));
        assert!(glob_match("*docs", "search_docs"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(!glob_match("Search*", "search"));
        assert!(glob_match("*", ""));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn filters_apply_include_then_exclude() {
        let f = ToolFilter {
            include: vec!["fetch*".into(), "search_docs".into()],
            exclude: vec!["fetch_private".into()],
        };
        assert!(filter_allows(&f, "fetch_page"));
        assert!(!filter_allows(&f, "fetch_private"));
        assert!(filter_allows(&f, "search_docs"));
        assert!(!filter_allows(&f, "delete"));
        assert!(filter_allows(&ToolFilter::default(), "anything"));
    }

    #[test]
    fn fragments_are_normalized() {
        assert_eq!(normalize_fragment(" my tool! ", "tool"), "my-tool-");
        assert_eq!(normalize_fragment("", "tool"), "tool");
        assert_eq!(normalize_fragment("9lives", "tool"), "tool-9lives");
        assert_eq!(normalize_fragment("_x", "mcp"), "mcp-_x");
        assert_eq!(normalize_fragment("é", "tool"), "tool--");
    }

    /// What `normalize_fragment` was when it made its string in two passes: the
    /// fragment made as it is read must be the same.
    fn two_pass(raw: &str, fallback: &str) -> String {
        let mapped: String = raw.trim().chars().map(safe_char).collect();
        if mapped.is_empty() {
            fallback.to_string()
        } else if !mapped.starts_with(|c: char| c.is_ascii_alphabetic()) {
            format!("{fallback}-{mapped}")
        } else {
            mapped
        }
    }

    #[test]
    fn a_first_choice_is_recognized_without_being_made() {
        let long = "t".repeat(80);
        let raws = [
            "search",
            "Search",
            " spaced out ",
            "",
            "   ",
            "9lives",
            "_x",
            "-x",
            "é",
            "aé",
            "a\u{1F600}b",
            "a__b",
            "tool-2",
            &long,
            "\u{0}",
            "a\tb\nc",
        ];
        for prefix in ["docs", "Docs", "a-2", &"p".repeat(MAX_PREFIX)] {
            for raw in raws {
                assert_eq!(
                    normalize_fragment(raw, "tool"),
                    two_pass(raw, "tool"),
                    "{raw:?}"
                );
                let first = first_choice(prefix, raw);
                assert!(first.is_ascii() && first.len() <= MAX_NAME, "{first:?}");
                assert!(is_first_choice(prefix, raw, &first), "{prefix} {raw:?}");
                assert!(is_first_choice(prefix, raw, &first.to_uppercase()));
                // One byte more, one less, or another last character is another name.
                assert!(!is_first_choice(prefix, raw, &format!("{first}x")));
                assert!(!is_first_choice(prefix, raw, &first[..first.len() - 1]));
                assert!(!is_first_choice(prefix, raw, &format!("{first}-2")));
            }
        }
        // A numbered name is not its own first choice.
        assert!(!is_first_choice("docs", "search", "docs__search-2"));
        assert!(!is_first_choice("docs", "search", "docs_search"));
    }

    fn st<'a>(id: &'a str, tools: &[&'a str], kept: bool) -> ServerTools<'a> {
        ServerTools {
            server_id: id,
            tools: tools.to_vec(),
            kept,
        }
    }

    #[test]
    fn names_are_prefixed_capped_and_deduplicated() {
        let long = "x".repeat(100);
        let names = assign(
            &[
                st("docs", &["search", "Search", "search"], false),
                st(&long, &[&long], false),
            ],
            &Names::default(),
        );
        // Suffixes by the raw names' order: `Search` sorts before `search`.
        assert_eq!(names.tools["docs"]["Search"], "docs__Search");
        assert_eq!(names.tools["docs"]["search"], "docs__search-2");
        let p = &names.prefixes[&long];
        assert_eq!(p.len(), MAX_PREFIX);
        let t = &names.tools[&long][&long];
        assert_eq!(t.len(), MAX_NAME);
    }

    /// A server that lists colliding names in another order (a hash map is enough)
    /// gets the same names for the same tools: no exposed name moves to another tool.
    #[test]
    fn suffixes_do_not_depend_on_listing_order() {
        let colliding = ["a-b", "a.b", "a b", "a/b", "A-B", "a\u{e9}b"];
        let expected = assign(&[st("w", &colliding, false)], &Names::default());
        let mut order = colliding.to_vec();
        for round in 0..12 {
            order.rotate_left(1);
            if round % 3 == 0 {
                order.reverse();
            }
            let names = assign(&[st("w", &order, false)], &Names::default());
            for raw in colliding {
                assert_eq!(
                    names.exposed("w", raw),
                    expected.exposed("w", raw),
                    "{raw} in {order:?}"
                );
            }
        }
        assert_eq!(expected.tools["w"]["A-B"], "w__A-B");
        assert_eq!(expected.tools["w"]["a b"], "w__a-b-2");
    }

    #[test]
    fn prefix_collisions_are_case_insensitive() {
        let names = assign(
            &[st("Docs", &["a"], false), st("docs", &["a"], false)],
            &Names::default(),
        );
        assert_eq!(names.prefixes["Docs"], "Docs");
        assert_eq!(names.prefixes["docs"], "docs-2");
    }

    #[test]
    fn kept_peers_keep_their_names() {
        let first = assign(&[st("b", &["t"], false)], &Names::default());
        // A new server `B` appears earlier in file order; `b` is kept and keeps `b`.
        let second = assign(&[st("B", &["t"], false), st("b", &["t"], true)], &first);
        assert_eq!(second.prefixes["b"], "b");
        assert_eq!(second.prefixes["B"], "B-2");
    }

    #[test]
    fn separator_inside_names_cannot_collide() {
        let names = assign(
            &[st("a__b", &["c"], false), st("a", &["b__c"], false)],
            &Names::default(),
        );
        assert_eq!(names.tools["a__b"]["c"], "a__b__c");
        assert_eq!(names.tools["a"]["b__c"], "a__b__c-2");
    }

    /// The lowest free `-n` the whole way: what trying every number from `-2` for each
    /// name gives, kept here as it was before the numbers tried were remembered.
    fn unique_from_two(first: String, head: usize, max: usize, taken: &mut Taken) -> String {
        if taken.insert(first.to_lowercase()) {
            return first;
        }
        let (head, rest) = first.split_at(head);
        (2..)
            .map(|n| {
                let suffix = format!("-{n}");
                format!("{head}{}{suffix}", cut(rest, max - suffix.len()))
            })
            .find(|candidate| taken.insert(candidate.to_lowercase()))
            .unwrap()
    }

    /// Remembering the numbers tried changes no name: first choices of every kind
    /// (repeated, differing in case only, already numbered like `x-2`, long enough to be
    /// cut, one first choice under two heads), asked in many orders, get what trying
    /// every number from `-2` gives.
    #[test]
    fn numbered_names_are_the_lowest_free_ones() {
        let long = "y".repeat(70);
        let firsts: Vec<(String, usize, usize)> = [
            ("a__x", 3),
            ("a__X", 3),
            ("a__x-2", 3),
            ("a__x-3", 3),
            ("a__x-2-2", 3),
            ("A__x", 3),
            ("a__b__c", 3),
            ("a__b__c", 6),
            ("a__b__c-2", 6),
        ]
        .iter()
        .map(|(f, head)| (f.to_string(), *head, MAX_NAME - *head))
        .chain((0..4).map(|i| (format!("p__{}{i}", &long[..60]), 3, MAX_NAME - 3)))
        .chain((0..4).map(|i| (format!("p__{}-{i}", &long[..57]), 3, MAX_NAME - 3)))
        .collect();
        // First choices are at most `MAX_NAME` long, as `first_choice` makes them.
        assert!(firsts.iter().all(|(f, _, _)| f.len() <= MAX_NAME));
        // Orders: a fixed shuffle of many repeats of every first choice.
        let mut order: Vec<usize> = (0..firsts.len() * 12).map(|i| i % firsts.len()).collect();
        for seed in 0..24u64 {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            for i in (1..order.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                order.swap(i, (state % (i as u64 + 1)) as usize);
            }
            let (mut taken, mut numbered) = (Taken::default(), Numbered::default());
            let mut reference = Taken::default();
            for &i in &order {
                let (first, head, max) = &firsts[i];
                let got = unique(first.clone(), *head, *max, &mut taken, &mut numbered);
                let want = unique_from_two(first.clone(), *head, *max, &mut reference);
                assert_eq!(got, want, "seed {seed}");
                assert!(got.len() <= MAX_NAME, "{got}");
            }
        }
    }

    /// Tools that all take one first choice are each numbered in one try: 20,000 of
    /// them (four listings' worth) take well under the bound, where trying every number
    /// from `-2` for each took 200 million tries.
    #[test]
    fn many_tools_of_one_first_choice_are_numbered_in_linear_time() {
        let raw: Vec<String> = (0..20_000)
            .map(|i| format!("{}{i:05}", "t".repeat(70)))
            .collect();
        let started = std::time::Instant::now();
        let names = assign(
            &[ServerTools {
                server_id: "s",
                tools: raw.iter().map(String::as_str).collect(),
                kept: false,
            }],
            &Names::default(),
        );
        let all: std::collections::HashSet<&String> = names.all().collect();
        assert_eq!(all.len(), raw.len());
        assert!(names.all().any(|n| n.ends_with("-20000")));
        // Generous: a debug build on a loaded machine does it in a fraction of this.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }
}
