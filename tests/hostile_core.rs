//! A hostile core author (threat model, adversary 1): symlinks, `..` roots, case
//! variants, directories and FIFOs named like declarations, huge and deeply nested
//! files, values that error messages would quote, and names made of control characters.
//! Each class is tried with several members; the review and the runtime must agree on
//! every one.

mod common;

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Core, Recorder, demo, exe, git, harness};
use demiurge_mcp::core;
use demiurge_mcp::evolution::{Change, CoreRepo};

/// What a revision declares: the paths that load and the paths that are refused.
#[derive(Debug, PartialEq, Eq)]
struct Declared {
    valid: BTreeSet<String>,
    invalid: BTreeSet<String>,
}

fn declared(valid: &[&str], invalid: &[&str]) -> Declared {
    Declared {
        valid: valid.iter().map(|s| s.to_string()).collect(),
        invalid: invalid.iter().map(|s| s.to_string()).collect(),
    }
}

/// What `review` reports as added, with no live revision.
fn reviewed(repo: &Path) -> Declared {
    let review = CoreRepo::open(repo).unwrap().review("HEAD").unwrap();
    let mut out = declared(&[], &[]);
    for change in review.changes.iter().filter(|c| !c.path.contains('#')) {
        assert_eq!(change.change, Change::Added, "{change:?}");
        let after = change.after.as_ref().unwrap();
        let set = if after.get("invalid").is_some() {
            &mut out.invalid
        } else {
            &mut out.valid
        };
        set.insert(change.path.clone());
    }
    out
}

/// What the runtime loads from a fresh checkout of the same commit.
fn loaded(repo: &Path) -> Declared {
    let clone = tempfile::tempdir().unwrap();
    let checkout = clone.path().join("checkout");
    git(
        clone.path(),
        &["clone", "-q", repo.to_str().unwrap(), "checkout"],
    );
    let report = core::load_report(&checkout);
    let mut out = declared(&[], &[]);
    if !report.manifest_errors.is_empty() {
        // A broken agent.yaml stops the core: nothing loads.
        assert!(core::load(&checkout).is_err());
        out.invalid.insert("agent.yaml".into());
        return out;
    }
    let runtime = core::load(&checkout).unwrap();
    out.valid = runtime
        .declarations
        .iter()
        .map(|d| d.path.clone())
        .collect();
    out.invalid = runtime.broken.iter().map(|b| b.path.clone()).collect();
    out
}

const GOOD: &str = "command: good-server\n";

/// A fresh repository holding a core built by `build`, committed.
fn commit(build: impl FnOnce(&Path, &Path)) -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = repo.path();
    git(root, &["init", "-q"]);
    std::fs::create_dir_all(root.join("agent/mcp")).unwrap();
    std::fs::write(root.join("agent.yaml"), "name: t\n").unwrap();
    build(root, outside.path());
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "--allow-empty", "-m", "hostile"]);
    (repo, outside)
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn review_and_runtime_agree_on_every_hostile_commit() {
    type Build = fn(&Path, &Path);
    let cases: Vec<(&str, Build, Declared)> = vec![
        (
            "a symlink to a declaration inside the core",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(root, "lib/real.yaml", GOOD);
                symlink("../../lib/real.yaml", root.join("agent/mcp/inside.yaml")).unwrap();
            },
            declared(&["agent/mcp/good.yaml"], &["agent/mcp/inside.yaml"]),
        ),
        (
            "a symlink to a declaration outside the core",
            |root, outside| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(outside, "far.yaml", GOOD);
                symlink(
                    outside.join("far.yaml"),
                    root.join("agent/mcp/outside.yaml"),
                )
                .unwrap();
            },
            declared(&["agent/mcp/good.yaml"], &["agent/mcp/outside.yaml"]),
        ),
        (
            "a dangling symlink",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                symlink("/nonexistent/x.yaml", root.join("agent/mcp/dangling.yml")).unwrap();
            },
            declared(&["agent/mcp/good.yaml"], &["agent/mcp/dangling.yml"]),
        ),
        (
            "a symlinked agent.yaml",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                std::fs::remove_file(root.join("agent.yaml")).unwrap();
                write(root, "real-agent.yaml", "name: t\n");
                symlink("real-agent.yaml", root.join("agent.yaml")).unwrap();
            },
            declared(&[], &["agent.yaml"]),
        ),
        (
            "the default MCP root as a symlink",
            |root, _| {
                std::fs::remove_dir_all(root.join("agent/mcp")).unwrap();
                write(root, "servers/good.yaml", GOOD);
                symlink("../servers", root.join("agent/mcp")).unwrap();
            },
            declared(&[], &["agent.yaml"]),
        ),
        (
            "an MCP root through a symlinked directory",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                symlink("agent", root.join("linked")).unwrap();
                write(root, "agent.yaml", "slots:\n  mcp: linked/mcp\n");
            },
            declared(&[], &["agent.yaml"]),
        ),
        (
            "an MCP root written with `..`",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(root, "agent/x/keep", "");
                write(root, "agent.yaml", "slots:\n  mcp: agent/x/../mcp\n");
            },
            declared(&[], &["agent.yaml"]),
        ),
        (
            "an MCP root leaving the core",
            |root, _| write(root, "agent.yaml", "slots:\n  mcp: ../../etc\n"),
            declared(&[], &["agent.yaml"]),
        ),
        (
            "an absolute MCP root",
            |root, _| write(root, "agent.yaml", "slots:\n  mcp: /etc\n"),
            declared(&[], &["agent.yaml"]),
        ),
        (
            "an MCP root moved with `./` and a trailing slash",
            |root, _| {
                write(root, "servers/good.yaml", GOOD);
                write(root, "agent.yaml", "slots:\n  mcp: ./servers/\n");
            },
            declared(&["servers/good.yaml"], &[]),
        ),
        (
            "case variants of names and extensions",
            |root, _| {
                write(root, "agent/mcp/Docs.yaml", GOOD);
                write(root, "agent/mcp/docs.yaml", "command: other\n");
                write(root, "agent/mcp/LOUD.YAML", GOOD);
                write(root, "agent/mcp/mixed.Yml", GOOD);
            },
            declared(
                &["agent/mcp/Docs.yaml"],
                &[
                    "agent/mcp/docs.yaml",
                    "agent/mcp/LOUD.YAML",
                    "agent/mcp/mixed.Yml",
                ],
            ),
        ),
        (
            "the same id as .yaml and .yml",
            |root, _| {
                write(root, "agent/mcp/twice.yaml", GOOD);
                write(root, "agent/mcp/twice.yml", GOOD);
            },
            declared(&["agent/mcp/twice.yaml"], &["agent/mcp/twice.yml"]),
        ),
        (
            "a directory named like a declaration",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(root, "agent/mcp/x.yaml/inner.yaml", GOOD);
            },
            declared(&["agent/mcp/good.yaml"], &["agent/mcp/x.yaml"]),
        ),
        (
            "a broken declaration beside a good one, and hidden files",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(root, "agent/mcp/bad.yaml", "command: [unclosed\n");
                write(root, "agent/mcp/.hidden.yaml", GOOD);
                write(root, "agent/mcp/notes.txt", "not a declaration");
            },
            declared(&["agent/mcp/good.yaml"], &["agent/mcp/bad.yaml"]),
        ),
        (
            "a name with control characters",
            |root, _| {
                write(root, "agent/mcp/good.yaml", GOOD);
                write(root, "agent/mcp/esc\u{1b}[8m.yaml", GOOD);
                write(root, "agent/mcp/rtl\u{202e}lmay.yaml", GOOD);
            },
            declared(
                &["agent/mcp/good.yaml"],
                &[
                    "agent/mcp/esc\u{1b}[8m.yaml",
                    "agent/mcp/rtl\u{202e}lmay.yaml",
                ],
            ),
        ),
    ];
    for (what, build, expected) in cases {
        let (repo, _outside) = commit(build);
        let review = reviewed(repo.path());
        let runtime = loaded(repo.path());
        assert_eq!(
            review, runtime,
            "{what}: the review and the runtime disagree"
        );
        assert_eq!(runtime, expected, "{what}");
        // Not only the same paths: the same content, to the fingerprint, whether the
        // runtime reads a checkout or (following the live revision) the commit.
        let repo_handle = CoreRepo::open(repo.path()).unwrap();
        let head = repo_handle.resolve("HEAD").unwrap();
        let from_commit = repo_handle.load_commit(head, repo.path()).unwrap();
        let clone = tempfile::tempdir().unwrap();
        git(
            clone.path(),
            &["clone", "-q", repo.path().to_str().unwrap(), "c"],
        );
        let from_checkout = core::load(&clone.path().join("c"));
        let prints = |core: &core::AgentCore| {
            core.declarations
                .iter()
                .map(|d| (d.path.clone(), d.fingerprint))
                .collect::<Vec<_>>()
        };
        match (from_commit, from_checkout) {
            (Ok(a), Ok(b)) => assert_eq!(prints(&a), prints(&b), "{what}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{what}: commit {:?} vs checkout {:?}", a.is_ok(), b.is_ok()),
        }
    }
}

#[test]
fn a_changed_symlink_target_cannot_pass_a_review_as_no_change() {
    // Adding a symlinked declaration is a change the review shows and the token binds,
    // and what it shows (a refused file) is what the runtime does with it.
    let (repo, outside) = commit(|root, _| write(root, "agent/mcp/good.yaml", GOOD));
    let core = CoreRepo::open(repo.path()).unwrap();
    let before = core.review("HEAD").unwrap();
    git(repo.path(), &["update-ref", "refs/demiurge/live", "HEAD"]);
    write(outside.path(), "evil.yaml", "command: evil\n");
    symlink(
        outside.path().join("evil.yaml"),
        repo.path().join("agent/mcp/evil.yaml"),
    )
    .unwrap();
    git(repo.path(), &["add", "-A"]);
    git(repo.path(), &["commit", "-q", "-m", "link"]);
    let after = core.review("HEAD").unwrap();
    assert_ne!(before.token, after.token);
    assert_eq!(after.changes.len(), 1, "{:?}", after.changes);
    let change = &after.changes[0];
    assert_eq!(
        (change.path.as_str(), change.change),
        ("agent/mcp/evil.yaml", Change::Added)
    );
    let shown = serde_json::to_string(&change.after).unwrap();
    assert!(
        shown.contains("is a symlink") && !shown.contains("evil\""),
        "{shown}"
    );
}

#[tokio::test]
async fn broken_declarations_are_diagnostics_and_their_neighbours_run() {
    let core = Core::new()
        .grant_servers(&["good", "bad", "linked"])
        .server("good", &demo("approval_policy: auto\n"))
        .server("bad", "command: [unclosed\n");
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("x.yaml"), demo("")).unwrap();
    symlink(
        elsewhere.path().join("x.yaml"),
        core.mcp_dir().join("linked.yaml"),
    )
    .unwrap();
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(catalog.get("good__echo").is_some());
    let broken: Vec<(&str, &str)> = catalog
        .diagnostics()
        .iter()
        .map(|d| (d.server.as_str(), d.path.as_str()))
        .collect();
    assert_eq!(
        broken,
        [
            ("bad", "agent/mcp/bad.yaml"),
            ("linked", "agent/mcp/linked.yaml")
        ]
    );
    assert!(catalog.diagnostics()[1].message.contains("is a symlink"));
    h.finish().await;
}

/// Runs `demiurge` with `args` and a generous deadline; a hang fails the test.
fn run_bounded(args: &[&str], core: &Path) -> (i32, String) {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(exe())
        .args(args)
        .arg("--core")
        .arg(core)
        .arg("--home")
        .arg(home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("demiurge {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn fifos_named_like_core_files_never_hang_a_load() {
    let core = Core::new().server("good", GOOD);
    nix::unistd::mkfifo(
        &core.mcp_dir().join("pipe.yaml"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    let report = core::load_report(&core.root());
    assert_eq!(report.core.declarations.len(), 1);
    assert!(
        report.errors[0].to_string().contains("is a FIFO"),
        "{:?}",
        report.errors
    );
    let (code, out) = run_bounded(&["init", "--check"], &core.root());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("pipe.yaml") && out.contains("FIFO"), "{out}");

    std::fs::remove_file(core.root().join("agent.yaml")).unwrap();
    nix::unistd::mkfifo(
        &core.root().join("agent.yaml"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    for args in [&["init", "--check"][..], &["tools"]] {
        let (code, out) = run_bounded(args, &core.root());
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(out.contains("agent.yaml is a FIFO"), "{args:?}: {out}");
    }
}

#[test]
fn huge_and_deep_files_are_refused_cheaply() {
    let core = Core::new().server("good", GOOD);
    // A 46 MB declaration (sparse: it costs nothing to make) and a 1 MiB one just over
    // the cap are refused by their size, before a byte is read.
    let huge = std::fs::File::create(core.mcp_dir().join("huge.yaml")).unwrap();
    huge.set_len(46 * 1024 * 1024).unwrap();
    let over = std::fs::File::create(core.mcp_dir().join("over.yaml")).unwrap();
    over.set_len(core::MAX_FILE_BYTES + 1).unwrap();
    // Nesting: flow brackets, block sequences, flow maps, far past any real need.
    core.write("deep1", &"[".repeat(100_000));
    core.write("deep2", &format!("{}x", "- ".repeat(100_000)));
    core.write("deep3", &format!("env: {}", "{a: ".repeat(100_000)));
    let started = Instant::now();
    let report = core::load_report(&core.root());
    let took = started.elapsed();
    assert_eq!(report.core.declarations.len(), 1, "{:?}", report.errors);
    let messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 5, "{messages:?}");
    for m in &messages[..3] {
        assert!(m.contains("deeper than"), "{m}");
    }
    for m in &messages[3..] {
        assert!(m.contains("larger than 1024 KiB"), "{m}");
    }
    // Generous: the refusals take microseconds; parsing them took seconds.
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn a_failed_parse_is_cached_like_a_successful_one() {
    let core = Core::new()
        .server("good", GOOD)
        .server("bad", "command: [unclosed\n");
    // Only settled files are cached (a change within the last second could keep its
    // stamp): wait for the files to settle once.
    std::thread::sleep(Duration::from_millis(2100));
    let cache = core::LoadCache::new();
    let first = core::load_cached(&core.root(), &cache).unwrap();
    // A new cache entry for the core's watch would serve the same Arc; stat the files
    // again by touching nothing but a neighbour directory entry.
    std::fs::write(core.root().join("unrelated.txt"), "x").unwrap();
    let second = core::load_cached(&core.root(), &cache).unwrap();
    assert!(!Arc::ptr_eq(&first, &second), "the core was loaded again");
    assert!(Arc::ptr_eq(&first.broken[0], &second.broken[0]));
    assert!(Arc::ptr_eq(&first.declarations[0], &second.declarations[0]));
}

#[test]
fn duplicate_env_and_header_names_are_load_errors() {
    let core = Core::new()
        .server("e", "command: x\nenv:\n  API_TOKEN: one\n  OTHER: two\n  API_TOKEN: three\n")
        .server(
            "h",
            "transport: streamable_http\nurl: https://example.test/mcp\nheaders:\n  X-Key: a\n  X-Key: b\n",
        );
    let report = core::load_report(&core.root());
    assert!(report.core.declarations.is_empty());
    assert_eq!(report.errors.len(), 2, "{:?}", report.errors);
    for (error, field) in report.errors.iter().zip(["env", "headers"]) {
        assert_eq!(error.field.as_deref(), Some(field), "{error}");
        assert!(error.message.contains("written twice"), "{error}");
        assert!(error.line.is_some(), "{error}");
    }
}

const CANARY: &str = "sk-live-canary-7f3a91";

#[test]
fn load_errors_never_quote_a_value_or_another_file() {
    let core = Core::new()
        .server("a", &format!("command: x\nenv: \"API_TOKEN={CANARY}\"\n"))
        .server("b", &format!("command: x\nenabled: {CANARY}\n"))
        .server("c", &format!("transport: {CANARY}\n"))
        .server("d", &format!("command: x\nenv:\n  A: [{CANARY}]\n"))
        .server("e", &format!("{CANARY}: 1\n"))
        .server(
            "f",
            &format!("command: x\nconnect_timeout_seconds: -{}\n", 4242),
        )
        .server("g", &format!("command: x\nargs: {CANARY}\n"));
    // A declaration pointing at a private file: its content must never be printed.
    let elsewhere = tempfile::tempdir().unwrap();
    let key = elsewhere.path().join("id_rsa");
    std::fs::write(
        &key,
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{CANARY}\n"),
    )
    .unwrap();
    symlink(&key, core.mcp_dir().join("key.yaml")).unwrap();
    let (code, out) = run_bounded(&["init", "--check"], &core.root());
    assert_eq!(code, 1);
    assert!(!out.contains(CANARY) && !out.contains("4242"), "{out}");
    assert!(!out.contains("PRIVATE KEY"), "{out}");
    for (file, field) in [
        ("a.yaml", "env"),
        ("b.yaml", "enabled"),
        ("c.yaml", "transport"),
        ("d.yaml", "env.A"),
        ("e.yaml", "<key>"),
        ("f.yaml", "connect_timeout_seconds"),
        ("g.yaml", "args"),
    ] {
        let line = out.lines().find(|l| l.contains(file)).unwrap_or_default();
        assert!(
            line.contains(&format!("field `{field}`")),
            "{file}: {line}\n{out}"
        );
    }
    let (code, out) = run_bounded(&["--yes", "tools"], &core.root());
    assert_eq!(code, 0, "{out}");
    assert!(
        !out.contains(CANARY) && !out.contains("PRIVATE KEY"),
        "{out}"
    );
    // The review, advertised secret-safe, shows the same errors from a commit.
    let (repo, _outside) = commit(|root, _| {
        for (id, text) in [
            ("a", format!("command: x\nenv: \"API_TOKEN={CANARY}\"\n")),
            ("c", format!("transport: {CANARY}\n")),
            ("e", format!("{CANARY}: 1\n")),
        ] {
            write(root, &format!("agent/mcp/{id}.yaml"), &text);
        }
    });
    for args in [&["review"][..], &["review", "--json"]] {
        let (code, out) = run_bounded(args, repo.path());
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("a.yaml") && out.contains("mcp-review:"),
            "{out}"
        );
        assert!(!out.contains(CANARY), "{args:?}: {out}");
    }
}

#[test]
fn hostile_file_names_reach_no_terminal_raw() {
    let core = Core::new().server("good", GOOD);
    for name in [
        "docs\u{1b}[8m",
        "bell\u{7}",
        "rtl\u{202e}lmth",
        "c1\u{9b}2J",
        "nl\nx",
    ] {
        core.write(name, GOOD);
    }
    let report = core::load_report(&core.root());
    assert_eq!(report.core.declarations.len(), 1);
    assert_eq!(report.core.broken.len(), 5);
    let (code, out) = run_bounded(&["init", "--check"], &core.root());
    assert_eq!(code, 1);
    for raw in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
        assert!(!out.contains(raw), "{raw:?} reached the terminal:\n{out}");
    }
    assert!(out.contains("docs\\u{1b}[8m.yaml"), "{out}");
    assert!(out.contains("nl\\u{a}x.yaml"), "{out}");
}

#[tokio::test]
async fn a_home_inside_the_workspace_or_core_is_refused() {
    let core = Core::new().grant_servers(&["d"]).server("d", &demo(""));
    let workspace = tempfile::tempdir().unwrap();
    for home in [core.root().join(".demiurge"), workspace.path().join("h")] {
        let h = common::harness_with(Recorder::allow(), |mut c| {
            c.home = home.clone();
            c
        })
        .await;
        let mut spec = core.spec();
        spec.workspace = Some(workspace.path().to_path_buf());
        let refused = h.runtime.start_session(spec).await.unwrap_err();
        assert!(
            matches!(refused, demiurge_mcp::RuntimeError::HomeInsideWorkspace(_)),
            "{refused}"
        );
        h.finish().await;
    }
}

#[test]
fn a_relative_home_is_made_absolute_for_the_servers() {
    let core = Core::new().grant_servers(&["d"]);
    let marker = core.root().join("home-seen");
    core.write(
        "d",
        &common::shell(
            &format!(
                "echo \"$HOME\" > '{}'; exec '{}' demo-server",
                marker.display(),
                exe()
            ),
            &common::sandboxed("", &[], &[]),
        ),
    );
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .args(["--yes", "tools", "--home", "relative-home", "--core"])
        .arg(core.root())
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = std::fs::read_to_string(&marker).unwrap();
    let expected = cwd
        .path()
        .canonicalize()
        .unwrap()
        .join("relative-home/sandbox/d/home");
    assert_eq!(Path::new(seen.trim()).canonicalize().unwrap(), expected);
    assert!(Path::new(seen.trim()).is_absolute());
    // The same relative home, run from inside the core, is refused.
    let out = Command::new(exe())
        .args(["--yes", "tools", "--home", ".demiurge", "--core", "."])
        .current_dir(core.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("inside the workspace or the agent core"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_file_that_does_not_load_never_shares_a_token_with_one_that_does() {
    // The bytes of the invalid file are exactly what the valid declaration's
    // fingerprint hashes: without the kind in the token, both reviews would match.
    let preimage = r#"["demiurge-mcp-server/v1","evil","agent/mcp/evil.yaml",{"command":"evil"}]"#;
    let (invalid, _a) = commit(|root, _| write(root, "agent/mcp/evil.yaml", preimage));
    let (valid, _b) = commit(|root, _| write(root, "agent/mcp/evil.yaml", "command: evil\n"));
    let token = |repo: &Path| CoreRepo::open(repo).unwrap().review("HEAD").unwrap().token;
    let valid_decl = core::load(valid.path()).unwrap();
    assert_eq!(
        valid_decl.declarations[0].fingerprint,
        demiurge_mcp::core::Fingerprint::of(preimage.as_bytes()),
        "the attack's premise"
    );
    assert_ne!(token(invalid.path()), token(valid.path()));
}
