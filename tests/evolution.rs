//! Evolution review and promotion in real temporary git repositories.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{Recorder, demo, git, harness, pid_of};
use demiurge_mcp::SessionSpec;
use demiurge_mcp::evolution::{
    Change, CoreRepo, EvolutionError, LIVE_REF, LiveRevisions, PREVIOUS_REF,
};

struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Self {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
        };
        git(&repo.path(), &["init", "-q"]);
        std::fs::create_dir_all(repo.path().join("agent/mcp")).unwrap();
        repo.write(
            "agent.yaml",
            "name: t\ncapabilities:\n  defaults:\n    mcp.connect:a: {scope: core}\n",
        );
        repo
    }

    fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.path().join(rel)).unwrap();
    }

    fn commit(&self, message: &str) -> String {
        git(&self.path(), &["add", "-A"]);
        git(
            &self.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        );
        git(&self.path(), &["rev-parse", "HEAD"])
    }

    fn core(&self) -> CoreRepo {
        CoreRepo::open(&self.path()).unwrap()
    }

    /// Everything that identifies the two refs, byte for byte.
    fn refs_state(&self) -> String {
        let root = self.path().join(".git");
        let read = |p: PathBuf| {
            std::fs::read(&p)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|_| "<absent>".into())
        };
        format!(
            "live={} previous={} packed={} listed={}",
            read(root.join(LIVE_REF)),
            read(root.join(PREVIOUS_REF)),
            read(root.join("packed-refs")),
            git(&self.path(), &["for-each-ref", "refs/demiurge"])
        )
    }

    fn live(&self) -> Option<String> {
        self.core()
            .read_ref(LIVE_REF)
            .unwrap()
            .map(|id| id.to_string())
    }

    fn previous(&self) -> Option<String> {
        self.core()
            .read_ref(PREVIOUS_REF)
            .unwrap()
            .map(|id| id.to_string())
    }
}

fn promote_with(repo: &Repo, candidate: &str) -> Result<(), EvolutionError> {
    let core = repo.core();
    let token = core.review(candidate).unwrap().token;
    core.promote(candidate, Some(&token), |_| true).map(|_| ())
}

#[test]
fn a_first_promotion_sets_live_and_leaves_previous_absent() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    let c1 = repo.commit("one");
    let review = repo.core().review("HEAD").unwrap();
    assert_eq!(review.live, None);
    assert_eq!(
        review.changes.len(),
        2,
        "the declaration and the mcp.connect:a grant: {:?}",
        review.changes
    );
    let decl = review
        .changes
        .iter()
        .find(|c| c.path == "agent/mcp/a.yaml")
        .unwrap();
    assert_eq!(decl.change, Change::Added);
    assert_eq!(decl.after.as_ref().unwrap()["command"], "server-a");
    assert!(
        review.token.starts_with("mcp-review:") && review.token.len() == "mcp-review:".len() + 64
    );
    repo.core()
        .promote("HEAD", Some(&review.token), |_| true)
        .unwrap();
    assert_eq!(repo.live(), Some(c1));
    assert_eq!(repo.previous(), None);
}

#[test]
fn added_removed_and_modified_declarations_are_listed() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\nrisk: low\n");
    repo.write("agent/mcp/c.yaml", "command: server-c\n");
    let c1 = repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    repo.write(
        "agent/mcp/a.yaml",
        "command: server-a\nrisk: high\nroots: [private]\nresources:\n  include: [\"file:///*\"]\n",
    );
    repo.write("agent/mcp/b.yml", "transport: streamable_http\nurl: https://user:pw@mcp.example/x?k=v\nheaders:\n  Authorization: Bearer zzz\n");
    repo.remove("agent/mcp/c.yaml");
    let c2 = repo.commit("two");
    let review = repo.core().review(&c2).unwrap();
    let kinds: Vec<(&str, Change)> = review
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.change))
        .collect();
    assert_eq!(
        kinds,
        [
            ("agent/mcp/a.yaml", Change::Modified),
            ("agent/mcp/b.yml", Change::Added),
            ("agent/mcp/c.yaml", Change::Removed)
        ]
    );
    assert!(
        review.changes[0]
            .details
            .iter()
            .any(|d| d.starts_with("risk: \"low\" -> \"high\"")),
        "{:?}",
        review.changes[0].details
    );
    // What a server is shown and what it may offer are part of the diff.
    for field in ["roots: ", "resources: "] {
        assert!(
            review.changes[0]
                .details
                .iter()
                .any(|d| d.starts_with(field)),
            "{field}: {:?}",
            review.changes[0].details
        );
    }
    let b = review.changes[1].after.as_ref().unwrap();
    assert_eq!(b["origin"], "https://mcp.example");
    assert_eq!(b["header_names"], serde_json::json!(["Authorization"]));
    let text = serde_json::to_string(&review).unwrap() + &review.render();
    for secret in ["pw", "zzz", "k=v", "/x"] {
        assert!(!text.contains(secret), "{secret} leaks: {text}");
    }
    promote_with(&repo, &c2).unwrap();
    assert_eq!(repo.live(), Some(c2));
    assert_eq!(repo.previous(), Some(c1));
}

#[test]
fn a_changed_secret_changes_the_token_without_appearing() {
    let repo = Repo::new();
    repo.write(
        "agent/mcp/a.yaml",
        "command: server-a\nenv:\n  API_TOKEN: canary-old-111\n",
    );
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    repo.write(
        "agent/mcp/a.yaml",
        "command: server-a\nenv:\n  API_TOKEN: canary-new-222\n",
    );
    let c2 = repo.commit("new secret");
    let first = repo.core().review(&c2).unwrap();
    assert_eq!(first.changes.len(), 1);
    assert!(
        first.changes[0]
            .details
            .contains(&"env API_TOKEN: value changed (not shown)".to_string()),
        "{:?}",
        first.changes[0].details
    );
    repo.write(
        "agent/mcp/a.yaml",
        "command: server-a\nenv:\n  API_TOKEN: canary-new-333\n",
    );
    let c3 = repo.commit("another secret");
    let second = repo.core().review(&c3).unwrap();
    assert_ne!(
        first.token, second.token,
        "a different secret is different reviewed content"
    );
    // The same content reviewed again gives the same token.
    assert_eq!(repo.core().review(&c3).unwrap().token, second.token);

    let cli = |args: &[&str]| {
        let out = Command::new(common::exe())
            .arg("--core")
            .arg(repo.path())
            .args(args)
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let outputs = [
        serde_json::to_string(&first).unwrap(),
        first.render(),
        cli(&["review", &c3]),
        cli(&["review", &c3, "--json"]),
        cli(&["--yes", "promote", &c3, "--review-token", &second.token]),
    ];
    for out in &outputs {
        for canary in ["canary-old-111", "canary-new-222", "canary-new-333"] {
            assert!(!out.contains(canary), "{canary} in {out}");
        }
    }
    assert!(
        outputs[2].trim_end().ends_with(&second.token),
        "the last line is the token: {}",
        outputs[2]
    );
    assert_eq!(repo.live(), Some(c3));
}

#[test]
fn refusals_leave_both_refs_byte_identical() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    repo.write("agent/mcp/a.yaml", "command: server-a\nrisk: high\n");
    let c2 = repo.commit("two");
    promote_with(&repo, &c2).unwrap();
    repo.write("agent/mcp/a.yaml", "command: server-b\n");
    let c3 = repo.commit("three");
    let review = repo.core().review(&c3).unwrap();
    let before = repo.refs_state();

    let missing = repo.core().promote(&c3, None, |_| true).unwrap_err();
    assert!(
        matches!(missing, EvolutionError::MissingToken(_)),
        "{missing}"
    );
    assert!(missing.to_string().contains("demiurge review"), "{missing}");
    let wrong = repo
        .core()
        .promote(&c3, Some("mcp-review:0000"), |_| true)
        .unwrap_err();
    assert!(matches!(wrong, EvolutionError::StaleToken(_)));
    let denied = repo
        .core()
        .promote(&c3, Some(&review.token), |_| false)
        .unwrap_err();
    assert_eq!(denied, EvolutionError::Denied);
    assert_eq!(repo.refs_state(), before);

    // A further commit makes the token stale.
    repo.write("agent/mcp/a.yaml", "command: server-c\n");
    let c4 = repo.commit("four");
    let stale = repo
        .core()
        .promote(&c4, Some(&review.token), |_| true)
        .unwrap_err();
    assert!(matches!(stale, EvolutionError::StaleToken(_)), "{stale}");
    assert_eq!(repo.refs_state(), before);

    // The CLI refuses the same way, with exit 1 and refs untouched.
    let out = Command::new(common::exe())
        .arg("--core")
        .arg(repo.path())
        .args(["promote", &c3, "--review-token", &review.token])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no terminal, no --yes: denied");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    assert_eq!(repo.refs_state(), before);
}

#[test]
fn a_concurrent_ref_change_during_promotion_is_detected() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    repo.write("agent/mcp/a.yaml", "command: server-b\n");
    let c2 = repo.commit("two");
    repo.write("agent/mcp/a.yaml", "command: server-c\n");
    let c3 = repo.commit("three");
    let review = repo.core().review(&c3).unwrap();
    let path = repo.path();
    // Someone moves live while the approver is deciding (after the refs were read).
    let err = repo
        .core()
        .promote(&c3, Some(&review.token), |_| {
            git(&path, &["update-ref", LIVE_REF, &c2]);
            true
        })
        .unwrap_err();
    assert!(matches!(err, EvolutionError::Moved(_)), "{err}");
    assert_eq!(
        repo.live(),
        Some(c2.clone()),
        "the concurrent change stands; ours did not apply"
    );
    let after_race = repo.refs_state();
    // A review made before live moved is stale now.
    let stale = repo
        .core()
        .promote(&c3, Some(&review.token), |_| true)
        .unwrap_err();
    assert!(matches!(stale, EvolutionError::StaleToken(_)), "{stale}");
    assert_eq!(repo.refs_state(), after_race);
}

#[test]
fn changes_of_the_mcp_root_and_grants_are_reviewed() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    repo.write("agent.yaml", "slots:\n  mcp: servers\ncapabilities:\n  defaults:\n    mcp.call:*: {scope: core}\n    other.cap: {scope: core}\n");
    repo.write("servers/a.yaml", "command: server-a\n");
    let c2 = repo.commit("move");
    let review = repo.core().review(&c2).unwrap();
    let paths: Vec<&str> = review.changes.iter().map(|c| c.path.as_str()).collect();
    assert!(paths.contains(&"agent.yaml#slots.mcp"), "{paths:?}");
    assert!(
        paths.contains(&"agent.yaml#capabilities.defaults.mcp.call:*"),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"agent.yaml#capabilities.defaults.mcp.connect:a"),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.contains("other.cap")),
        "only mcp.* grants are reviewed"
    );
    assert!(paths.contains(&"agent/mcp/a.yaml") && paths.contains(&"servers/a.yaml"));
}

#[tokio::test]
async fn a_promotion_reauthorizes_sessions_that_follow_the_live_revision() {
    let repo = Repo::new();
    repo.write("agent.yaml", "capabilities:\n  defaults:\n    mcp.connect:a: {scope: core}\n    mcp.call:a: {scope: core}\n");
    repo.write("agent/mcp/a.yaml", &demo("approval_policy: auto\n"));
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    let h = harness(Recorder::allow()).await;
    let mut spec = SessionSpec::new(repo.path());
    spec.core_revision = demiurge_mcp::actors::LIVE_REVISION.into();
    let (session, _) = h.runtime.start_session(spec).await.unwrap();
    let first = pid_of(&session.prepare_turn().await.unwrap(), "a__whoami").await;
    assert_eq!(
        first,
        pid_of(&session.prepare_turn().await.unwrap(), "a__whoami").await
    );
    repo.write("README", "unrelated");
    repo.commit("two");
    promote_with(&repo, "HEAD").unwrap();
    let after = pid_of(&session.prepare_turn().await.unwrap(), "a__whoami").await;
    assert_ne!(
        first, after,
        "a new live revision is a new catalog identity"
    );
    h.finish().await;
}

#[tokio::test]
async fn a_session_that_follows_the_live_revision_runs_that_commit_not_the_working_tree() {
    let repo = Repo::new();
    repo.write(
        "agent.yaml",
        "capabilities:\n  defaults:\n    mcp.connect:*: {scope: core}\n    mcp.call:*: {scope: core}\n",
    );
    repo.write("agent/mcp/a.yaml", &demo("approval_policy: auto\n"));
    repo.write(".gitignore", "agent/mcp/ignored.yaml\n");
    repo.commit("one");
    promote_with(&repo, "HEAD").unwrap();
    // What no review saw: an edited declaration, an untracked one, an ignored one.
    let started = repo.path().join("started");
    let counting = common::demo_counting(&started, "approval_policy: auto\n");
    repo.write("agent/mcp/a.yaml", &counting);
    repo.write("agent/mcp/untracked.yaml", &counting);
    repo.write("agent/mcp/ignored.yaml", &counting);
    let h = harness(Recorder::allow()).await;
    let mut spec = SessionSpec::new(repo.path());
    spec.core_revision = demiurge_mcp::actors::LIVE_REVISION.into();
    let (session, turn) = common::open(&h.runtime, spec).await;
    let servers: std::collections::BTreeSet<&str> =
        turn.tools().iter().map(|t| t.server.as_str()).collect();
    assert_eq!(servers, ["a"].into_iter().collect());
    assert_eq!(common::count(&started), 0, "the edited declaration ran");
    // Reviewed and promoted, the same files run.
    let candidate = repo.commit("two");
    let review = repo.core().review(&candidate).unwrap();
    repo.core()
        .promote(&candidate, Some(&review.token), |_| true)
        .unwrap();
    let turn = session.prepare_turn().await.unwrap();
    let servers: std::collections::BTreeSet<&str> =
        turn.tools().iter().map(|t| t.server.as_str()).collect();
    assert_eq!(servers, ["a", "untracked"].into_iter().collect());
    assert_eq!(common::count(&started), 2);
    h.finish().await;
}

/// Long enough for every file written so far to count as settled (`Stamp::settled`).
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(2100));
}

#[test]
fn the_cached_live_revision_follows_promotions_packing_and_removal() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    let c1 = repo.commit("one");
    repo.write("agent/mcp/b.yaml", "command: server-b\n");
    let c2 = repo.commit("two");
    let cache = LiveRevisions::new();
    let core = repo.path();
    assert_eq!(cache.get(&core), None);

    promote_with(&repo, &c1).unwrap();
    assert_eq!(cache.get(&core), Some(c1.clone()));
    // Just written: read from git every time until it settles, then held.
    assert!(!cache.holds(&core));
    settle();
    assert_eq!(cache.get(&core), Some(c1.clone()));
    assert!(cache.holds(&core));

    // A promotion after the cache took its stamps is seen at once.
    promote_with(&repo, &c2).unwrap();
    assert_eq!(cache.get(&core), Some(c2.clone()));
    settle();
    assert_eq!(cache.get(&core), Some(c2.clone()));
    assert!(cache.holds(&core));

    // Packed: the loose file is gone and packed-refs rewritten; the value is the same.
    git(&core, &["pack-refs", "--all"]);
    assert!(!core.join(".git").join(LIVE_REF).exists());
    assert_eq!(cache.get(&core), Some(c2.clone()));

    // Moved and then removed by hand, outside the runtime.
    git(&core, &["update-ref", LIVE_REF, &c1]);
    assert_eq!(cache.get(&core), Some(c1));
    git(&core, &["update-ref", "-d", LIVE_REF]);
    assert_eq!(cache.get(&core), None);
}

/// Loosening a sandbox is a change the review shows in words: the default becoming
/// `network: host`, then `sandbox: off`, each with its own token.
#[test]
fn a_loosened_sandbox_is_in_the_review_and_its_token() {
    let repo = Repo::new();
    repo.write("agent/mcp/a.yaml", "command: server-a\n");
    repo.commit("default");
    promote_with(&repo, "HEAD").unwrap();
    let mut tokens = Vec::new();
    for (yaml, before, after) in [
        (
            "command: server-a\nsandbox: {network: host}\n",
            "network through the egress proxy",
            "network unconfined (host)",
        ),
        (
            "command: server-a\nsandbox: off\n",
            "network through the egress proxy",
            "off: the server runs with your authority",
        ),
    ] {
        repo.write("agent/mcp/a.yaml", yaml);
        let candidate = repo.commit("looser");
        let review = repo.core().review(&candidate).unwrap();
        assert_eq!(review.changes.len(), 1, "{:?}", review.changes);
        let said = review.changes[0]
            .details
            .iter()
            .find(|d| d.starts_with("sandbox: "))
            .unwrap_or_else(|| panic!("{:?}", review.changes[0].details));
        let (was, is) = said.split_once(" -> ").unwrap();
        assert!(was.contains(before) && is.contains(after), "{said}");
        assert!(review.render().contains(after), "{}", review.render());
        tokens.push(review.token);
    }
    assert_ne!(tokens[0], tokens[1]);
}
