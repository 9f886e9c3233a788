//! A one-off call starts only the server that owns its tool: the embedding API's
//! `prepare_turn_for` (names as in a full turn, the session's other connections kept)
//! and `demiurge call` against a core of slow servers; unknown names get a "did you
//! mean" at once.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Core, Recorder, count, demo, demo_counting, exe, harness, pid_of, shell};

#[tokio::test]
async fn a_turn_for_some_servers_connects_only_them_and_keeps_the_rest() {
    let marks = tempfile::tempdir().unwrap();
    let (a, b) = (marks.path().join("a"), marks.path().join("b"));
    // Two ids alike in their first 30 characters share a prefix base: the second is
    // named `<cut base>-2`, so a turn for either must include both.
    let one = "documentation-server-for-the-team-one";
    let two = "documentation-server-for-the-team-two";
    let core = Core::new()
        .grant_servers(&["alpha", "beta", one, two])
        .server(
            "alpha",
            &demo_counting(&a, "tools:\n  include: [echo, whoami]\n"),
        )
        .server(
            "beta",
            &demo_counting(&b, "tools:\n  include: [echo, whoami]\n"),
        )
        .server(one, &demo("tools:\n  include: [echo]\n"))
        .server(two, &demo("tools:\n  include: [echo]\n"));
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let ids = ["alpha", "beta", one, two];
    assert_eq!(
        demiurge_mcp::naming::same_prefix(ids, "alpha__echo"),
        ["alpha"]
    );
    let full_names = common::names(&session.prepare_turn().await.unwrap());
    let numbered = full_names
        .iter()
        .find(|n| n.ends_with("-2__echo"))
        .unwrap_or_else(|| panic!("{full_names:?}"))
        .clone();
    let pair = demiurge_mcp::naming::same_prefix(ids, &numbered);
    assert_eq!(pair, [one, two]);
    let scoped = session.prepare_turn_for(&pair).await.unwrap();
    assert!(common::names(&scoped).contains(&numbered));
    // A fresh session: a turn for alpha connects alpha only.
    let (session, _) = h
        .runtime
        .start_session(core.spec_in("other"))
        .await
        .unwrap();
    let owners = demiurge_mcp::naming::same_prefix(ids, "alpha__echo");
    let (a0, b0) = (count(&a), count(&b));
    let scoped = session.prepare_turn_for(&owners).await.unwrap();
    assert_eq!((count(&a), count(&b)), (a0 + 1, b0));
    let names = common::names(&scoped);
    assert!(names.iter().all(|n| !n.starts_with("beta")), "{names:?}");
    // A full turn afterwards names them the same, connects beta, reuses alpha.
    let alpha_pid = pid_of(&scoped, "alpha__whoami").await;
    let full = session.prepare_turn().await.unwrap();
    let full_names = common::names(&full);
    for name in &names {
        assert!(full_names.contains(name), "{name} not in {full_names:?}");
    }
    assert_eq!((count(&a), count(&b)), (a0 + 1, b0 + 1));
    assert_eq!(pid_of(&full, "alpha__whoami").await, alpha_pid);
    // A scoped turn leaves beta's connection alone.
    let beta_pid = pid_of(&full, "beta__whoami").await;
    session
        .prepare_turn_for(&["alpha".to_string()])
        .await
        .unwrap();
    let again = session.prepare_turn().await.unwrap();
    assert_eq!(pid_of(&again, "beta__whoami").await, beta_pid);
    assert_eq!(count(&b), b0 + 1);
    h.finish().await;
}

#[test]
fn demiurge_call_starts_only_the_owner_of_its_tool() {
    let marks = tempfile::tempdir().unwrap();
    let mut core = Core::new().grant_servers(&["fast"]);
    core = core.server("fast", &demo("approval_policy: auto\n"));
    let mut slow = Vec::new();
    for n in 0..4 {
        let id = format!("slow{n}");
        let mark = marks.path().join(&id);
        core = core.grant_servers(&[&id]).server(
            &id,
            &shell(
                &format!(
                    "echo started >> '{}'; sleep 5; exec '{}' demo-server",
                    mark.display(),
                    exe()
                ),
                "",
            ),
        );
        slow.push(mark);
    }
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(exe())
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .arg("--yes")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let started = Instant::now();
    let out = run(&["call", "fast__echo", "--args", r#"{"message": "only me"}"#]);
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("only me"));
    // Four servers that each take 5 s to start were never started (a full turn would
    // have waited for them); generous, so only a real regression exceeds it.
    assert!(
        slow.iter().all(|m| count(m) == 0),
        "a slow server was started"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // Unknown names fail at once with a hint, starting nothing.
    let started = Instant::now();
    let out = run(&["call", "fats__echo"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did you mean a tool of `fast`"), "{stderr}");
    let out = run(&["call", "fast__ecoh"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did you mean `fast__echo`"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(slow.iter().all(|m| count(m) == 0));
}
