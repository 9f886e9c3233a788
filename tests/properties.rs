//! Hostile input, property-tested: the declaration loader, the name normalizer and the
//! redactor (the URL policy has its own in `url_policy.rs`).

use demiurge_mcp::core;
use demiurge_mcp::naming::{Names, ServerTools, assign};
use demiurge_mcp::redact::{Redactor, View};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary YAML (and arbitrary bytes as text) never panics the loader, and every
    /// error names the declaration file.
    #[test]
    fn the_loader_never_panics_and_names_the_file(text in prop_oneof![
        "\\PC{0,200}",
        "(enabled|transport|command|args|env|url|headers|tools|risk|cwd|timeout_seconds|x): ?(\\[|\\{|-|[a-z0-9 ]{0,12}|\"[^\"]{0,8}\"|\\n  [a-z]{1,5}: [0-9]{1,3}){0,3}\n?",
    ]) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("agent/mcp")).unwrap();
        std::fs::write(dir.path().join("agent.yaml"), "name: p\n").unwrap();
        let file = dir.path().join("agent/mcp/fuzz.yaml");
        std::fs::write(&file, &text).unwrap();
        let report = core::load_report(dir.path());
        let file = file.canonicalize().unwrap();
        for e in &report.errors {
            prop_assert_eq!(e.file.canonicalize().unwrap_or(e.file.clone()), file.clone());
            prop_assert!(e.to_string().contains("fuzz.yaml"));
        }
    }

    /// Whatever the names, exposed names have the host-safe shape, fit in 64
    /// characters and are unique ignoring case.
    #[test]
    fn exposed_names_are_safe_bounded_and_unique(
        servers in proptest::collection::vec(("\\PC{0,40}", proptest::collection::vec("\\PC{0,80}", 0..20)), 1..8)
    ) {
        let inputs: Vec<ServerTools<'_>> = servers
            .iter()
            .map(|(id, tools)| ServerTools { server_id: id, tools: tools.iter().map(String::as_str).collect(), kept: false })
            .collect();
        // Server ids are file stems: distinct. Keep the first of duplicates.
        let mut seen = std::collections::HashSet::new();
        let inputs: Vec<ServerTools<'_>> = inputs.into_iter().filter(|s| seen.insert(s.server_id)).collect();
        let names = assign(&inputs, &Names::default());
        let shape = regex::Regex::new("^[A-Za-z][A-Za-z0-9_-]*__[A-Za-z][A-Za-z0-9_-]*$").unwrap();
        let mut lower = std::collections::HashSet::new();
        for name in names.all() {
            prop_assert!(shape.is_match(name), "{name:?}");
            prop_assert!(name.len() <= 64, "{name:?}");
            prop_assert!(lower.insert(name.to_lowercase()), "duplicate {name:?}");
        }
    }

    /// A declared secret never survives in a non-debug view, whatever surrounds it.
    #[test]
    fn declared_secrets_never_survive(
        secret in "[A-Za-z0-9_./+=-]{4,40}",
        before in "\\PC{0,60}",
        after in "\\PC{0,60}",
        key in "[a-z]{1,10}",
    ) {
        let r = Redactor::new().with_secrets([("SECRET", secret.clone())]);
        let text = format!("{before}{secret}{after}");
        let views = r.text_views(&text);
        for v in [&views.model, &views.operator, &views.event, &views.durable] {
            prop_assert!(!v.contains(&secret), "{secret:?} in {v:?}");
        }
        let json = serde_json::json!({ key.clone(): text, "list": [format!("{secret}{after}")], "n": { "deep": secret.clone() } });
        let views = r.json_views(&json);
        for view in [View::Model, View::Operator, View::Event, View::Durable] {
            let s = views.get(view).to_string();
            prop_assert!(!s.contains(&secret), "{secret:?} in {s}");
        }
    }
}
