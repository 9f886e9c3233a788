//! The floors stand: every tie between the rooms of the library goes down, and in
//! `actors/` every tie to another room is a `use` at the top of its file. The floors
//! are written here and at the top of `actors/mod.rs` (actors) and `src/lib.rs` (src);
//! a change that adds a tie upward, or hides one in an inline path, fails this test
//! with the file, the line and the two rooms.

use std::path::{Path, PathBuf};

/// The floors of `actors/`: a room may use rooms on lower floors (and all of `src/`).
const ACTOR_FLOORS: &[(&str, u32)] = &[
    ("cluster", 9),
    ("host", 8),
    ("session", 7),
    ("catalog", 6),
    ("turn", 5),
    ("connection", 4),
    ("shared", 3),
    ("broker", 2),
    ("limiter", 2),
    ("config", 1),
    ("swappable", 1),
];

/// The floors of the library's own modules in `src/` (the binary's `main.rs`,
/// `cli/` and `bin/` are other crates, above them all; `actors` is above every one).
const SRC_FLOORS: &[(&str, u32)] = &[
    ("text", 1),
    ("digest", 1),
    ("clock", 1),
    ("redact", 2),
    ("search", 2),
    ("result", 3),
    ("net", 4),
    ("sandbox", 5),
    ("process", 6),
    ("core", 7),
    ("pins", 8),
    ("naming", 9),
    ("authority", 9),
    ("evolution", 10),
    ("transport", 10),
    ("offer", 11),
    ("events", 11),
    ("demo_server", 12),
    ("telemetry", 12),
    ("actors", 13),
];

fn floor(table: &[(&str, u32)], room: &str) -> Option<u32> {
    table.iter().find(|(r, _)| *r == room).map(|(_, f)| *f)
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A file's lines before its test module, each with its number.
fn code_lines(file: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if line.trim() == "#[cfg(test)]"
            && (next.starts_with("mod ") || next.starts_with("pub mod "))
        {
            break;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        out.push((i + 1, line.to_string()));
    }
    out
}

/// The `use` statements of a file (one string each, joined across lines), with the
/// lines each spans.
fn uses(lines: &[(usize, String)]) -> Vec<(std::ops::RangeInclusive<usize>, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, line) in lines {
        let trimmed = line.trim();
        let starts = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .any(|s| trimmed.starts_with(s));
        match &mut current {
            Some((_, text)) => text.push_str(trimmed),
            None if starts => current = Some((*n, trimmed.to_string())),
            None => continue,
        }
        if trimmed.ends_with(';')
            && let Some((first, text)) = current.take()
        {
            out.push((first..=*n, text));
        }
    }
    out
}

/// The roots a `use` statement reaches: each path's first segments, braces expanded
/// one level (`crate::{a, b::c}` is `crate::a` and `crate::b::c`).
fn paths(statement: &str) -> Vec<String> {
    let body = statement
        .trim_end_matches(';')
        .split_once("use ")
        .map_or("", |(_, b)| b)
        .replace(' ', "");
    let Some((prefix, rest)) = body.split_once('{') else {
        return vec![body];
    };
    let inner = rest.trim_end_matches('}');
    let mut out = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(format!("{prefix}{item}"));
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    if !item.is_empty() {
        out.push(format!("{prefix}{item}"));
    }
    out
}

/// The actor room of a file under `actors/` (`None` for `actors/mod.rs`).
fn actor_room(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    if rel.components().count() == 1 {
        let stem = first.trim_end_matches(".rs").to_string();
        return (stem != "mod").then_some(stem);
    }
    Some(first)
}

/// The room a path reaches from `file` in room `own` (`None`: outside `actors/`, or
/// `own` itself).
fn actor_target(path: &str, nested: bool) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    let room = match segments.as_slice() {
        ["crate", "actors", room, ..] => *room,
        ["super", "super", room, ..] if nested => *room,
        ["super", room, ..] if !nested => *room,
        _ => return None,
    };
    Some(room.trim_matches(|c| c == '{' || c == '}').to_string())
}

/// The actor rooms `line` reaches by an inline path (`crate::actors::x::`, and
/// `super::x::` from a top-level file or `super::super::x::` from a nested one).
fn inline_rooms(line: &str, nested: bool) -> Vec<String> {
    let mut out = Vec::new();
    let markers: &[&str] = if nested {
        &["crate::actors::", "super::super::"]
    } else {
        &["crate::actors::", "super::"]
    };
    for marker in markers {
        for (at, _) in line.match_indices(marker) {
            let after = &line[at + marker.len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let continues = after[name.len()..].starts_with("::");
            if continues && floor(ACTOR_FLOORS, &name).is_some() {
                out.push(name);
            }
        }
    }
    out
}

#[test]
fn every_tie_between_actor_rooms_goes_down_and_is_a_use_at_the_top() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("actors");
    let mut wrong = Vec::new();
    for file in sources(&root) {
        let Some(own) = actor_room(&root, &file) else {
            continue;
        };
        let own_floor = floor(ACTOR_FLOORS, &own).unwrap_or_else(|| {
            panic!(
                "{}: room `{own}` has no floor in ACTOR_FLOORS",
                file.display()
            )
        });
        let nested = file.parent() != Some(root.as_path());
        let lines = code_lines(&file);
        let statements = uses(&lines);
        for (span, statement) in &statements {
            let n = span.start();
            for path in paths(statement) {
                let Some(target) = actor_target(&path, nested) else {
                    continue;
                };
                if target == own || target == "*" {
                    continue;
                }
                match floor(ACTOR_FLOORS, &target) {
                    Some(f) if f < own_floor => {}
                    _ => wrong.push(format!(
                        "{}:{n}: `{own}` (floor {own_floor}) uses `{target}`, which is not below it",
                        file.display()
                    )),
                }
            }
        }
        // An inline path into another room: a tie no `use` line shows.
        for (n, line) in &lines {
            if statements.iter().any(|(span, _)| span.contains(n)) {
                continue;
            }
            for room in inline_rooms(line, nested) {
                if room != own {
                    wrong.push(format!(
                        "{}:{n}: an inline path into `{room}`; make it a `use` at the top",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ties against the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_tie_between_src_modules_goes_down_and_none_reaches_the_actors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for file in sources(&root) {
        let rel = file.strip_prefix(&root).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let own = first.trim_end_matches(".rs");
        // The binary and the launcher are other crates; lib.rs mounts everything.
        if matches!(own, "main" | "cli" | "bin" | "lib") {
            continue;
        }
        let own_floor = floor(SRC_FLOORS, own).unwrap_or_else(|| {
            panic!(
                "{}: module `{own}` has no floor in SRC_FLOORS",
                file.display()
            )
        });
        for (n, line) in code_lines(&file) {
            let mut rest = line.as_str();
            while let Some(at) = rest.find("crate::") {
                let after = &rest[at + "crate::".len()..];
                let target: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = after;
                if target == own || target.is_empty() {
                    continue;
                }
                match floor(SRC_FLOORS, &target) {
                    Some(f) if f < own_floor => {}
                    Some(_) => wrong.push(format!(
                        "{}:{n}: `{own}` (floor {own_floor}) uses `{target}`, which is not below it",
                        file.display()
                    )),
                    // Re-exports at the crate root (`crate::HostEnv`, `crate::limits`).
                    None => {}
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "ties against the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_floor_check_sees_a_tie_upward_and_an_inline_one() {
    // The parsing the checks rely on, on statements of each kind they meet.
    assert_eq!(
        paths("use crate::actors::{turn::TurnCatalog, shared::Shared};"),
        [
            "crate::actors::turn::TurnCatalog",
            "crate::actors::shared::Shared"
        ]
    );
    assert_eq!(
        actor_target("crate::actors::host::Runtime", false).as_deref(),
        Some("host")
    );
    assert_eq!(
        actor_target("super::shared::Shared", false).as_deref(),
        Some("shared")
    );
    // A sibling inside a folder is the same room.
    assert_eq!(actor_target("super::plan::Failure", true), None);
    assert_eq!(
        actor_target("super::super::turn::Entry", true).as_deref(),
        Some("turn")
    );
    let lines = vec![
        (1, "use std::sync::{".to_string()),
        (2, "    Arc, Mutex,".to_string()),
        (3, "};".to_string()),
        (4, "pub(crate) use super::x::Y;".to_string()),
    ];
    let found = uses(&lines);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].0, 1..=3);
    assert!(found[0].1.contains("Mutex"));
    assert_eq!(
        inline_rooms("let x = super::turn::bind(a, b);", false),
        ["turn"]
    );
    assert_eq!(
        inline_rooms("let x = crate::actors::host::Runtime::start(c);", true),
        ["host"]
    );
    assert!(inline_rooms("let x = super::plan::entries(a);", true).is_empty());
    assert!(inline_rooms("use super::*;", false).is_empty());
}
