//! Loading and validating Agent Cores (`docs/design.md#1-cores-and-declarations`) and `init --check`.

mod common;

use std::process::Command;

use common::{Core, demo, exe};
use demiurge_mcp::core::{self, Endpoint, Risk, TransportKind};

fn check(core: &Core) -> (i32, String) {
    let out = Command::new(exe())
        .args(["init", "--check", "--core"])
        .arg(core.root())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn defaults_and_fields_are_read() {
    let core = Core::new().server(
        "docs",
        &demo("env:\n  API_TOKEN: \"${DOCS_TOKEN}\"\ntools:\n  include: [search*]\n"),
    );
    let loaded = core::load(&core.root()).unwrap();
    let d = &loaded.declarations[0];
    assert_eq!(d.server_id, "docs");
    assert_eq!(d.path, "agent/mcp/docs.yaml");
    assert!(d.enabled);
    assert_eq!(d.transport(), TransportKind::Stdio);
    assert_eq!(d.risk, Risk::Medium);
    assert_eq!(d.call_capability, "mcp.call:docs");
    assert_eq!(d.connect_timeout.as_secs(), 30);
    assert_eq!(d.call_timeout.as_secs(), 60);
    assert!(!d.supports_parallel_tool_calls);
    assert_eq!(d.tools.include, vec!["search*"]);
    match &d.endpoint {
        Endpoint::Stdio { env, .. } => assert_eq!(env["API_TOKEN"], "${DOCS_TOKEN}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn files_load_sorted_by_name_with_yml_too() {
    let core = Core::new().server("b", &demo("")).server("a", &demo(""));
    std::fs::write(core.mcp_dir().join("c.yml"), demo("")).unwrap();
    std::fs::write(core.mcp_dir().join("notes.txt"), "ignored").unwrap();
    let ids: Vec<String> = core::load(&core.root())
        .unwrap()
        .declarations
        .iter()
        .map(|d| d.server_id.clone())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

#[test]
fn init_check_accepts_a_valid_core_and_reports_grants() {
    let core = Core::new()
        .grant(&["mcp.connect:docs"])
        .server("docs", &demo(""));
    let (code, out) = check(&core);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("docs  stdio  enabled  mcp.connect:docs granted  mcp.call:docs missing"),
        "{out}"
    );
}

#[test]
fn init_check_names_file_field_and_line_of_every_error() {
    let core = Core::new()
        .server("typo", "command: x\nenabeld: true\n")
        .server("badtype", "command: x\nenabled: maybe\n")
        .server("nocmd", "transport: stdio\nargs: [a]\n")
        .server("nourl", "transport: streamable_http\n")
        .server(
            "ftp",
            "transport: streamable_http\nurl: ftp://example.test/x\n",
        )
        .server("home", "command: x\nenv:\n  HOME: /tmp\n")
        .server("zero", "command: x\nconnect_timeout_seconds: 0\n");
    let (code, out) = check(&core);
    assert_eq!(code, 1, "{out}");
    let line_of = |file: &str| {
        out.lines()
            .find(|l| l.contains(file))
            .unwrap_or_else(|| panic!("{file} missing in {out}"))
            .to_string()
    };
    assert!(
        line_of("typo.yaml").contains(":2: field `<key>`")
            && line_of("typo.yaml").contains("did you mean `enabled`?"),
        "{out}"
    );
    assert!(
        line_of("badtype.yaml").contains(":2: field `enabled`"),
        "{out}"
    );
    assert!(
        line_of("nocmd.yaml").contains("field `command`")
            && line_of("nocmd.yaml").contains("requires `command`"),
        "{out}"
    );
    assert!(line_of("nourl.yaml").contains("field `url`"), "{out}");
    assert!(line_of("ftp.yaml").contains("http:// or https://"), "{out}");
    assert!(line_of("home.yaml").contains("field `env.HOME`"), "{out}");
    assert!(
        line_of("zero.yaml").contains("field `connect_timeout_seconds`"),
        "{out}"
    );
    assert!(out.contains("invalid: 7 error(s)"), "{out}");
}

#[test]
fn disabled_declarations_are_still_validated() {
    let core = Core::new().server("off", "enabled: false\ntransport: stdio\n");
    let (code, out) = check(&core);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("off.yaml") && out.contains("command"), "{out}");
}

#[test]
fn duplicate_server_ids_name_both_files() {
    let core = Core::new().server("dup", &demo(""));
    std::fs::write(core.mcp_dir().join("dup.yml"), demo("")).unwrap();
    let report = core::load_report(&core.root());
    let err = report
        .errors
        .iter()
        .map(ToString::to_string)
        .collect::<String>();
    // The first file loads; the second is a broken declaration, not a broken core.
    assert_eq!(report.core.declarations.len(), 1);
    assert_eq!(report.core.broken.len(), 1);
    assert!(core::load(&core.root()).is_ok());
    assert!(
        err.contains("dup.yaml") && err.contains("dup.yml") && err.contains("declared twice"),
        "{err}"
    );
}

/// Look-alike ids: two ids equal once compatibility forms and case are folded
/// (fullwidth letters, ligatures, the Kelvin sign, upper case) are one id; an id that is
/// not in Unicode normal form C is refused, whatever it looks like.
#[test]
fn look_alike_server_ids_are_refused() {
    for (first, second) in [
        ("docs", "ｄｏｃｓ"),
        ("files", "\u{fb01}les"),
        ("kube", "\u{212a}ube"),
        ("docs", "DOCS"),
        ("caf\u{e9}", "CAF\u{c9}"),
        ("x\u{b2}", "x2"),
        ("stra\u{df}e", "STRASSE"),
    ] {
        let core = Core::new()
            .server(first, &demo(""))
            .server(second, &demo(""));
        let report = core::load_report(&core.root());
        assert_eq!(
            report.core.declarations.len() + report.core.broken.len(),
            2,
            "{first} {second}"
        );
        assert_eq!(
            report.core.declarations.len(),
            1,
            "{first} and {second} both load"
        );
        let err = report
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<String>();
        // (The Kelvin sign is not even NFC: refused for that first.)
        assert!(
            err.contains("declared twice") || err.contains("normal form C"),
            "{first} {second}: {err}"
        );
    }
    for decomposed in ["cafe\u{301}", "a\u{30a}ngstrom", "n\u{303}"] {
        let core = Core::new().server(decomposed, &demo(""));
        let report = core::load_report(&core.root());
        assert!(report.core.declarations.is_empty(), "{decomposed} loads");
        let err = report
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<String>();
        assert!(err.contains("normal form C"), "{decomposed}: {err}");
    }
}

#[test]
fn slots_mcp_moves_the_root_but_not_outside_the_core() {
    let core = Core::new();
    std::fs::create_dir_all(core.root().join("servers")).unwrap();
    std::fs::write(core.root().join("servers/x.yaml"), demo("")).unwrap();
    std::fs::write(core.root().join("agent.yaml"), "slots:\n  mcp: servers\n").unwrap();
    let loaded = core::load(&core.root()).unwrap();
    assert_eq!(loaded.declarations[0].path, "servers/x.yaml");

    std::fs::write(
        core.root().join("agent.yaml"),
        "slots:\n  mcp: ../elsewhere\n",
    )
    .unwrap();
    let err = core::load(&core.root()).unwrap_err().to_string();
    assert!(
        err.contains("slots.mcp") && err.contains("may not contain `..`"),
        "{err}"
    );
}

#[test]
fn a_missing_agent_yaml_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let err = core::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("agent.yaml") && err.contains("--core"),
        "{err}"
    );
}

#[test]
fn fingerprints_ignore_formatting_but_not_values() {
    let core = Core::new().server("a", &demo("risk: low\n"));
    let first = core::load(&core.root()).unwrap().declarations[0].fingerprint;
    core.write("a", &format!("# a comment\n{}", demo("risk:   low\n")));
    assert_eq!(
        core::load(&core.root()).unwrap().declarations[0].fingerprint,
        first
    );
    core.write("a", &demo("risk: high\n"));
    assert_ne!(
        core::load(&core.root()).unwrap().declarations[0].fingerprint,
        first
    );
}

/// Server ids and `command`s of a cached load.
fn ids_and_commands(core: &demiurge_mcp::core::AgentCore) -> Vec<(String, String)> {
    core.declarations
        .iter()
        .map(|d| {
            let command = match &d.endpoint {
                Endpoint::Stdio { command, .. } => command.clone(),
                Endpoint::StreamableHttp { url, .. } => url.origin(),
            };
            (d.server_id.clone(), command)
        })
        .collect()
}

#[test]
fn a_warm_load_reuses_the_last_until_anything_changes() {
    let core = Core::new().server("a", "command: one\n");
    let cache = core::LoadCache::new();
    let first = core::load_cached(&core.root(), &cache).unwrap();
    let again = core::load_cached(&core.root(), &cache).unwrap();
    // Nothing changed: the very same load, no file looked at.
    assert!(std::sync::Arc::ptr_eq(&first, &again));

    // Every kind of change is seen by the very next load, with no wait in between.
    core.write("a", "command: two\n");
    let edited = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&edited), [("a".into(), "two".into())]);

    core.write("b", "command: three\n");
    let added = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(added.declarations.len(), 2);

    std::fs::rename(core.mcp_dir().join("b.yaml"), core.mcp_dir().join("c.yaml")).unwrap();
    let renamed = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(renamed.declarations[1].server_id, "c");

    core.remove("a");
    let removed = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&removed), [("c".into(), "three".into())]);

    let mut core = core;
    core.set_grants(&["mcp.connect:c"]);
    let granted = core::load_cached(&core.root(), &cache).unwrap();
    assert!(granted.grants.contains("mcp.connect:c"));

    let settled = core::load_cached(&core.root(), &cache).unwrap();
    assert!(std::sync::Arc::ptr_eq(&granted, &settled));
}

#[test]
fn a_replaced_mcp_directory_and_a_moved_slot_are_seen() {
    let core = Core::new().server("a", "command: one\n");
    let cache = core::LoadCache::new();
    core::load_cached(&core.root(), &cache).unwrap();
    // The directory replaced as a whole (as a checkout or a sync tool may do).
    let root = core.dir.path();
    std::fs::create_dir_all(root.join("next")).unwrap();
    std::fs::write(root.join("next/z.yaml"), "command: zed\n").unwrap();
    std::fs::remove_dir_all(core.mcp_dir()).unwrap();
    std::fs::rename(root.join("next"), core.mcp_dir()).unwrap();
    let replaced = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&replaced), [("z".into(), "zed".into())]);

    // `slots.mcp` moved elsewhere: the new directory is read, then watched.
    std::fs::create_dir_all(root.join("servers")).unwrap();
    std::fs::write(root.join("servers/s.yaml"), "command: ess\n").unwrap();
    std::fs::write(root.join("agent.yaml"), "slots:\n  mcp: servers\n").unwrap();
    let moved = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&moved), [("s".into(), "ess".into())]);
    let settled = core::load_cached(&core.root(), &cache).unwrap();
    let settled_again = core::load_cached(&core.root(), &cache).unwrap();
    assert!(std::sync::Arc::ptr_eq(&settled, &settled_again));
    std::fs::write(root.join("servers/s.yaml"), "command: changed\n").unwrap();
    let changed = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&changed), [("s".into(), "changed".into())]);
}

#[test]
fn a_symlinked_declaration_is_never_followed() {
    // Whatever the link points to (and however that changes), it is a broken
    // declaration: no load reads through it.
    let core = Core::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("real.yaml");
    std::fs::write(&target, "command: one\n").unwrap();
    std::os::unix::fs::symlink(&target, core.mcp_dir().join("linked.yaml")).unwrap();
    let cache = core::LoadCache::new();
    for round in ["one", "two"] {
        std::fs::write(&target, format!("command: {round}\n")).unwrap();
        let loaded = core::load_cached(&core.root(), &cache).unwrap();
        assert!(loaded.declarations.is_empty());
        assert_eq!(loaded.broken.len(), 1);
        let message = loaded.broken[0].errors[0].to_string();
        assert!(message.contains("is a symlink"), "{message}");
    }
}

#[test]
fn a_core_without_its_mcp_directory_sees_it_appear() {
    let core = Core::new();
    std::fs::remove_dir_all(core.dir.path().join("agent")).unwrap();
    let cache = core::LoadCache::new();
    assert!(
        core::load_cached(&core.root(), &cache)
            .unwrap()
            .declarations
            .is_empty()
    );
    assert!(
        core::load_cached(&core.root(), &cache)
            .unwrap()
            .declarations
            .is_empty()
    );
    std::fs::create_dir_all(core.mcp_dir()).unwrap();
    core.write("late", "command: late\n");
    let loaded = core::load_cached(&core.root(), &cache).unwrap();
    assert_eq!(ids_and_commands(&loaded), [("late".into(), "late".into())]);
}

#[test]
fn oauth_sections_are_checked_and_their_secret_is_never_a_literal() {
    let http = |oauth: &str| {
        format!("transport: streamable_http\nurl: https://mcp.example.test/mcp\noauth:\n{oauth}")
    };
    let core = Core::new()
        .server(
            "good",
            &http("  client_id: demiurge\n  client_secret: \"${DOCS_CLIENT_SECRET}\"\n  scopes: [read, write]\n"),
        )
        .server("literal", &http("  client_id: c\n  client_secret: s3cr3t-literal\n"))
        .server("orphan", &http("  client_secret: \"${X}\"\n"))
        .server("headless", &http("  grant: client_credentials\n"))
        .server("spaced", &http("  scopes: [\"read write\"]\n"))
        .server("plain", &http("  client_metadata_url: http://x.test/c.json\n"))
        .server("unknown", &http("  audience: x\n"))
        .server("stdio", &demo("oauth:\n  client_id: c\n"))
        .server(
            "signed",
            &http("  client_id: svc\n  private_key: \"${SVC_KEY}\"\n  signing_algorithm: ES256\n  grant: client_credentials\n  issuer: https://login.example.test\n"),
        )
        .server(
            "key_literal",
            &http("  client_id: c\n  private_key: \"-----BEGIN PRIVATE KEY----- s3cr3t-literal\"\n  signing_algorithm: ES256\n  grant: client_credentials\n"),
        )
        .server(
            "key_and_secret",
            &http("  client_id: c\n  client_secret: \"${S}\"\n  private_key: \"${K}\"\n  signing_algorithm: ES256\n  grant: client_credentials\n"),
        )
        .server(
            "key_no_algorithm",
            &http("  client_id: c\n  private_key: \"${K}\"\n  grant: client_credentials\n"),
        )
        .server("algorithm_no_key", &http("  client_id: c\n  signing_algorithm: RS256\n"))
        .server(
            "key_user_grant",
            &http("  client_id: c\n  private_key: \"${K}\"\n  signing_algorithm: ES256\n"),
        )
        .server(
            "bad_algorithm",
            &http("  client_id: c\n  private_key: \"${K}\"\n  signing_algorithm: HS256\n  grant: client_credentials\n"),
        )
        .server(
            "method_needs_secret",
            &http("  client_id: c\n  token_endpoint_auth_method: client_secret_basic\n"),
        )
        .server(
            "method_needs_key",
            &http("  client_id: c\n  client_secret: \"${S}\"\n  token_endpoint_auth_method: private_key_jwt\n"),
        )
        .server(
            "method_none_with_secret",
            &http("  client_id: c\n  client_secret: \"${S}\"\n  token_endpoint_auth_method: none\n"),
        );
    let loaded = core::load(&core.root()).unwrap();
    let names: Vec<&str> = loaded
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .collect();
    assert_eq!(names, ["good", "signed"]);
    let broken = |id: &str| {
        loaded
            .broken
            .iter()
            .find(|b| b.server_id == id)
            .unwrap_or_else(|| panic!("{id} loaded"))
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (id, says) in [
        ("literal", "oauth.client_secret"),
        ("orphan", "needs `client_id`"),
        ("headless", "`client_credentials` needs"),
        ("spaced", "oauth.scopes"),
        ("plain", "oauth.client_metadata_url"),
        (
            "unknown",
            "oauth.<key>`: unknown field, expected one of `client_id`",
        ),
        ("stdio", "only for `transport: streamable_http`"),
        ("key_literal", "oauth.private_key"),
        ("key_and_secret", "not both"),
        ("key_no_algorithm", "oauth.signing_algorithm"),
        ("algorithm_no_key", "only applies with `private_key`"),
        ("key_user_grant", "`grant: client_credentials` only"),
        ("bad_algorithm", "oauth.signing_algorithm"),
        ("method_needs_secret", "oauth.token_endpoint_auth_method"),
        ("method_needs_key", "oauth.token_endpoint_auth_method"),
        (
            "method_none_with_secret",
            "oauth.token_endpoint_auth_method",
        ),
    ] {
        let errors = broken(id);
        assert!(errors.contains(says), "{id}: {errors}");
        assert!(
            !errors.contains("s3cr3t-literal"),
            "{id} quotes the value: {errors}"
        );
    }
    // The preview names the secret's variable, never a value.
    let good = &loaded.declarations[0];
    let preview = demiurge_mcp::authority::ConnectPreview::new(
        good,
        demiurge_mcp::core::ApprovalPolicy::Prompt,
        None,
        &[],
    );
    let rendered = preview.render();
    assert!(
        rendered.contains("client secret from: ${DOCS_CLIENT_SECRET}"),
        "{rendered}"
    );
    assert!(rendered.contains("scopes: read write"), "{rendered}");
    let signed = &loaded.declarations[1];
    let rendered = demiurge_mcp::authority::ConnectPreview::new(
        signed,
        demiurge_mcp::core::ApprovalPolicy::Prompt,
        None,
        &[],
    )
    .render();
    for says in [
        "client assertions signed (ES256) with the key from: ${SVC_KEY}",
        "token endpoint auth: private_key_jwt",
        "authorization server: https://login.example.test only",
    ] {
        assert!(rendered.contains(says), "{says}: {rendered}");
    }
}

/// A client registered ahead without a pinned issuer is warned of (mix-up): with the
/// issuer, or with a client this runtime registers itself, it is not.
#[test]
fn a_pre_registered_client_without_an_issuer_is_warned_of() {
    let http = |oauth: &str| {
        format!("transport: streamable_http\nurl: https://mcp.example.test/mcp\noauth:\n{oauth}")
    };
    let core = Core::new()
        .grant_servers(&["bare", "metadata", "pinned", "own"])
        .server("bare", &http("  client_id: c-1\n"))
        .server(
            "metadata",
            &http("  client_metadata_url: https://example.test/client.json\n"),
        )
        .server(
            "pinned",
            &http("  client_id: c-1\n  issuer: https://login.example.test\n"),
        )
        .server("own", &http("  scopes: [read]\n"));
    let run = Command::new(exe())
        .args(["init", "--check", "--core"])
        .arg(core.root())
        .output()
        .unwrap();
    assert!(run.status.success());
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let warned: Vec<&str> = out.lines().filter(|l| l.contains("mix-up")).collect();
    assert_eq!(warned.len(), 2, "{out}");
    assert!(warned.iter().any(|l| l.contains("bare.yaml")), "{out}");
    assert!(warned.iter().any(|l| l.contains("metadata.yaml")), "{out}");
}
