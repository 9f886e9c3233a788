//! Fault injection: every misbehaviour of the demo server (`--fault MODE`) is contained
//! to its server, bounded, and leaves no process and no file descriptor behind.
//! Scenarios run one at a time so the descriptor count of this process is meaningful.

mod common;

use std::time::{Duration, Instant};

use common::{Core, Harness, Recorder, demo, eventually, harness, names, pid_of};
use demiurge_mcp::TurnCatalog;
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Descriptors of the kinds a stdio connection opens (pipes, files such as the stderr
/// capture and the logs, pidfds). Sockets, epoll and eventfd instances are left out:
/// every test's tokio runtime makes and duplicates those while it waits its turn.
fn open_fds() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            let target = std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            target.starts_with("pipe:")
                || target.starts_with('/') && !target.starts_with("/proc/")
                || target == "anon_inode:[pidfd]"
        })
        .count()
}

/// A core with a faulty server `bad` and a healthy peer `ok`.
fn core_with(fault: &str, extra: &str) -> Core {
    let bad = common::demo_fault(fault, &format!("approval_policy: auto\n{extra}"));
    Core::new()
        .grant_servers(&["bad", "ok"])
        .server("bad", &bad)
        .server("ok", &demo("approval_policy: auto\n"))
}

/// Runs `check` in a fresh runtime and then checks that processes and descriptors are
/// back where they started.
async fn scenario<F, Fut>(fault: &str, extra: &str, check: F)
where
    F: FnOnce(Harness, TurnCatalog, Duration) -> Fut,
    Fut: std::future::Future<Output = Harness>,
{
    let _one_at_a_time = SERIAL.lock().await;
    // Child handling makes a runtime open its signal pipe on first use: do that first,
    // so the baseline already has it.
    let _ = tokio::process::Command::new("true").status().await;
    let baseline = open_fds();
    let core = core_with(fault, extra);
    let h = harness(Recorder::allow()).await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    let started = Instant::now();
    let catalog = session.prepare_turn().await.unwrap();
    let took = started.elapsed();
    // The healthy peer is published and callable whatever the fault.
    assert!(
        names(&catalog).contains(&"ok__echo".to_string()),
        "{fault}: {:?}",
        catalog.diagnostics()
    );
    let r = catalog
        .call("ok__echo", json!({"message": "alive"}))
        .await
        .unwrap();
    assert_eq!(
        r.view(demiurge_mcp::redact::View::Operator).content,
        "alive"
    );
    let h = check(h, catalog, took).await;
    h.finish().await;
    drop(h);
    let mut now = 0;
    let back = eventually(Duration::from_secs(5), || {
        now = open_fds();
        now <= baseline
    })
    .await;
    let listing: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| {
                    std::fs::read_link(e.path())
                        .map(|t| t.display().to_string())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        back,
        "{fault}: descriptors went from {baseline} to {now}: {listing:?}"
    );
}

/// Calls `bad__echo` and asserts it ends, within `within`, as a tool error whose
/// operator view contains `needle`.
async fn refused_call(catalog: &TurnCatalog, within: Duration, needle: &str) {
    let started = Instant::now();
    let r = catalog
        .call("bad__echo", json!({"message": "x"}))
        .await
        .unwrap();
    assert!(started.elapsed() < within, "took {:?}", started.elapsed());
    assert!(
        r.is_error
            && r.view(demiurge_mcp::redact::View::Operator)
                .content
                .contains(needle),
        "{:?}",
        r.view(demiurge_mcp::redact::View::Operator)
    );
}

fn diagnostic<'a>(catalog: &'a TurnCatalog, server: &str) -> &'a str {
    catalog
        .diagnostics()
        .iter()
        .find(|d| d.server == server)
        .map_or("", |d| d.message.as_str())
}

#[tokio::test]
async fn exit_at_start_is_a_cached_diagnostic() {
    scenario("exit-at-start", "", |h, catalog, took| async move {
        assert!(took < Duration::from_secs(10));
        assert!(
            diagnostic(&catalog, "bad").contains("exited"),
            "{:?}",
            catalog.diagnostics()
        );
        let session = h
            .runtime
            .start_session(core_with("exit-at-start", "").spec())
            .await
            .unwrap()
            .0;
        let _ = session; // a second session starts cleanly beside the failure
        h
    })
    .await;
}

#[tokio::test]
async fn hangs_in_initialize_and_list_end_at_the_connect_timeout() {
    for fault in ["hang-initialize", "hang-list"] {
        scenario(
            fault,
            "connect_timeout_seconds: 1\n",
            |h, catalog, took| async move {
                assert!(took < Duration::from_secs(10), "{took:?}");
                assert!(
                    diagnostic(&catalog, "bad").contains("connect timeout"),
                    "{:?}",
                    catalog.diagnostics()
                );
                assert_eq!(h.sink.of_type("mcp.server_failed").len(), 1);
                h
            },
        )
        .await;
    }
}

#[tokio::test]
async fn a_crash_during_a_call_fails_that_call_and_is_noticed() {
    scenario("crash-on-call", "", |h, catalog, _| async move {
        let started = Instant::now();
        let outcome = catalog.call("bad__echo", json!({"message": "x"})).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        match outcome {
            Ok(r) => assert!(
                r.is_error,
                "{:?}",
                r.view(demiurge_mcp::redact::View::Operator)
            ),
            Err(e) => assert!(e.to_string().contains("closed"), "{e}"),
        }
        assert!(
            eventually(Duration::from_secs(5), || !h
                .sink
                .of_type("mcp.server_failed")
                .is_empty())
            .await
        );
        h
    })
    .await;
}

#[tokio::test]
async fn a_hung_call_ends_at_the_call_timeout() {
    scenario(
        "hang-call",
        "timeout_seconds: 1\n",
        |h, catalog, _| async move {
            refused_call(&catalog, Duration::from_secs(10), "timed out").await;
            h
        },
    )
    .await;
}

#[tokio::test]
async fn garbage_on_stdout_is_contained() {
    scenario(
        "garbage-stdout",
        "connect_timeout_seconds: 5\n",
        |h, catalog, took| async move {
            assert!(took < Duration::from_secs(15));
            // Either the garbage is skipped and the server works, or it is a diagnostic.
            if let Some(entry) = catalog.get("bad__echo") {
                let r = catalog
                    .call_entry(entry, json!({"message": "through"}))
                    .await
                    .unwrap();
                assert_eq!(
                    r.view(demiurge_mcp::redact::View::Operator).content,
                    "through"
                );
            } else {
                assert!(!diagnostic(&catalog, "bad").is_empty());
            }
            h
        },
    )
    .await;
}

#[tokio::test]
async fn a_huge_tool_list_is_capped_with_a_diagnostic() {
    scenario("huge-tools 6000", "", |h, catalog, _| async move {
        let bad = catalog.tools().iter().filter(|t| t.server == "bad").count();
        assert_eq!(bad, demiurge_mcp::limits::MAX_TOOLS);
        assert!(
            diagnostic(&catalog, "bad").contains("cut at 5000 tools"),
            "{:?}",
            catalog.diagnostics()
        );
        h
    })
    .await;
}

#[tokio::test]
async fn a_huge_result_is_refused_at_the_message_limit() {
    scenario(
        "huge-result 12000000",
        "timeout_seconds: 30\n",
        |h, catalog, _| async move {
            // Refused at once, not at the 30 s call timeout.
            refused_call(&catalog, Duration::from_secs(20), "8 MiB message limit").await;
            // The connection survives the refused answer.
            assert!(catalog.get("bad__echo").is_some());
            h
        },
    )
    .await;
}

#[tokio::test]
async fn a_huge_result_with_its_id_written_last_is_refused_at_once_too() {
    // The TypeScript SDK writes `id` after `result`: the id is found at the end of a
    // 12 MB line that is never held in memory.
    scenario(
        "huge-result-id-last 12000000",
        "timeout_seconds: 60\n",
        |h, catalog, _| async move {
            // Twice: the stream stays in step after a refused line, and the connection
            // lives on (every answer of this mode is huge).
            for _ in 0..2 {
                refused_call(&catalog, Duration::from_secs(20), "8 MiB message limit").await;
            }
            h
        },
    )
    .await;
}

#[tokio::test]
async fn a_stderr_flood_leaves_a_bounded_log_entry() {
    scenario("stderr-flood 5000000", "", |h, catalog, _| async move {
        assert!(
            catalog.get("bad__echo").is_some(),
            "the flood is drained, the server works"
        );
        h.runtime.evict_session(catalog.session()).await.unwrap();
        let log = std::fs::read_to_string(h.home.path().join("logs/mcp-stderr.log")).unwrap();
        // The bad server's entry only: the other server's, closed at the same time, may
        // follow it.
        let mut lines = log.lines().skip_while(|l| !l.contains("mcp server bad"));
        let header = lines.next().unwrap_or_default();
        let entry: String = std::iter::once(header)
            .chain(lines.take_while(|l| !l.starts_with("--- mcp server ")))
            .collect::<Vec<_>>()
            .join("\n");
        let body = entry
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with("[... stderr truncated"))
            .collect::<String>();
        assert_eq!(
            body.chars().count(),
            demiurge_mcp::limits::STDERR_WINDOW_CHARS
        );
        assert!(entry.contains("stderr truncated at 12000 characters"));
        h
    })
    .await;
}

#[tokio::test]
async fn a_server_answering_a_byte_at_a_time_still_works() {
    scenario("slow-drip", "", |h, catalog, _| async move {
        let r = catalog
            .call("bad__echo", json!({"message": "drip"}))
            .await
            .unwrap();
        assert_eq!(r.view(demiurge_mcp::redact::View::Operator).content, "drip");
        h
    })
    .await;
}

#[tokio::test]
async fn a_forked_grandchild_is_killed_with_its_group() {
    // The leak check of `scenario` finds any process carrying the server HOME,
    // grandchildren included.
    scenario("fork-child", "", |h, catalog, _| async move {
        assert!(catalog.get("bad__echo").is_some());
        h
    })
    .await;
}

#[tokio::test]
async fn a_list_changed_storm_starves_nothing() {
    scenario("list-changed-storm", "", |h, catalog, _| async move {
        let started = Instant::now();
        let session = h.runtime.resume_session(catalog.session()).await.unwrap().0;
        for _ in 0..20 {
            let turn = session.prepare_turn().await.unwrap();
            turn.call("ok__echo", json!({"message": "x"}))
                .await
                .unwrap();
            assert!(turn.get("bad__echo").is_some());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        // One event per change window, not one per notification.
        assert!(h.sink.of_type("mcp.tools_changed").len() <= 25);
        h
    })
    .await;
}

#[tokio::test]
async fn hostile_tool_lists_are_normalized_and_capped() {
    scenario("hostile-tools", "", |h, catalog, _| async move {
        let bad: Vec<&demiurge_mcp::ToolEntry> = catalog
            .tools()
            .iter()
            .filter(|t| t.server == "bad")
            .collect();
        assert_eq!(
            bad.len(),
            4,
            "one of the twins is dropped: {:?}",
            catalog.diagnostics()
        );
        let shape = regex::Regex::new("^[A-Za-z][A-Za-z0-9_-]*__[A-Za-z][A-Za-z0-9_-]*$").unwrap();
        for t in &bad {
            assert!(shape.is_match(&t.name) && t.name.len() <= 64, "{}", t.name);
            assert!(t.description.chars().count() <= 4_097);
        }
        assert!(bad.iter().any(|t| t.name == "bad__twin"));
        assert!(
            diagnostic(&catalog, "bad").contains("listed more than once, later ones ignored: twin"),
            "{:?}",
            catalog.diagnostics()
        );
        let r = catalog.call("bad__twin", json!({})).await.unwrap();
        assert_eq!(
            r.view(demiurge_mcp::redact::View::Operator).content,
            "hostile answer"
        );
        h
    })
    .await;
}

#[tokio::test]
async fn a_schema_that_is_not_an_object_is_a_diagnostic() {
    scenario(
        "bad-schema",
        "connect_timeout_seconds: 5\n",
        |h, catalog, _| async move {
            assert!(catalog.get("bad__bad").is_none());
            assert!(
                !diagnostic(&catalog, "bad").is_empty(),
                "{:?}",
                catalog.diagnostics()
            );
            h
        },
    )
    .await;
}

#[tokio::test]
async fn deeply_nested_results_are_contained() {
    scenario(
        "nested-result",
        "timeout_seconds: 2\n",
        |h, catalog, _| async move {
            // Refused as it arrives ("not valid JSON"), not left to the call timeout.
            refused_call(&catalog, Duration::from_secs(10), "not valid JSON").await;
            h
        },
    )
    .await;
}

#[tokio::test]
async fn pid_of_the_healthy_peer_is_stable_across_a_faulty_neighbour() {
    scenario("crash-on-call", "", |h, catalog, _| async move {
        let peer = pid_of(&catalog, "ok__whoami").await;
        let _ = catalog.call("bad__echo", json!({"message": "x"})).await;
        let session = h.runtime.resume_session(catalog.session()).await.unwrap().0;
        let next = session.prepare_turn().await.unwrap();
        assert_eq!(pid_of(&next, "ok__whoami").await, peer);
        h
    })
    .await;
}

#[tokio::test]
async fn a_modern_only_server_is_named_as_such_and_its_tools_say_why() {
    scenario("modern-only", "protocol: 2025-11-25\n", |h, catalog, _| async move {
        let d = catalog
            .diagnostics()
            .iter()
            .find(|d| d.server == "bad")
            .expect("a diagnostic for the modern-only server");
        assert!(
            d.message.starts_with(
                "the server requires MCP 2026-07-28, and this declaration speaks 2025-11-25: declare `protocol: 2026-07-28`"
            ),
            "{}",
            d.message
        );
        // It stayed up and the runtime ended it: no exit status blames the server,
        // and no JSON-RPC error is dumped as the reason.
        let reason = d.message.split("; its stderr").next().unwrap();
        for wrong in ["signal", "SIGKILL", "exited", "JSON-RPC", "{"] {
            assert!(!reason.contains(wrong), "{wrong}: {}", d.message);
        }
        for result in [
            catalog.call("bad__echo", json!({})).await.map(|_| ()),
            catalog
                .get_prompt("bad__greet", json!({}))
                .await
                .map(|_| ()),
        ] {
            match result {
                Err(demiurge_mcp::CallError::ServerUnavailable { server, reason, .. }) => {
                    assert_eq!(server, "bad");
                    assert!(reason.contains("requires MCP 2026-07-28"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        // A name of a server that did connect is still a plain unknown tool.
        assert!(matches!(
            catalog.call("ok__nope", json!({})).await,
            Err(demiurge_mcp::CallError::UnknownTool(_))
        ));
        h
    })
    .await;
}

#[tokio::test]
async fn a_failed_start_shows_the_last_stderr_lines_redacted_and_escaped() {
    let _one_at_a_time = SERIAL.lock().await;
    let secret = "stderr-secret-9f8e7d";
    let script = "printf 'Traceback (most recent call last):\\n  File \"x.py\"\\n' >&2; \
         printf 'fatal: . is not a valid Git repository\\n' >&2; \
         printf 'using token=%s\\n\\033[2Jforged\\n' \"$TOKEN\" >&2; exit 3";
    let core = Core::new().grant_servers(&["git"]).server(
        "git",
        &common::shell(script, &format!("env:\n  TOKEN: \"{secret}\"\n")),
    );
    let h = harness(Recorder::allow()).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let message = &catalog.diagnostics()[0].message;
    assert!(
        message.contains("(the server exited: exit status: 3)"),
        "{message}"
    );
    let tail = message.split("its stderr ends: ").nth(1).expect(message);
    assert!(
        tail.starts_with("fatal: . is not a valid Git repository | using token=<redacted"),
        "{tail}"
    );
    assert!(
        !message.contains(secret) && !message.contains('\u{1b}'),
        "{message}"
    );
    assert!(
        tail.contains("\\u{1b}[2Jforged"),
        "escaped, not drawn: {tail}"
    );
    assert!(
        !tail.contains("Traceback"),
        "only the last three lines: {tail}"
    );
    // The log's entry is headed by a UTC time a person reads.
    let log = std::fs::read_to_string(h.home.path().join("logs/mcp-stderr.log")).unwrap();
    let header = log.lines().next().unwrap();
    let stamp = header
        .rsplit(" at ")
        .next()
        .unwrap()
        .trim_end_matches(" ---");
    assert!(
        stamp.len() == 24 && stamp.ends_with('Z') && stamp.as_bytes()[10] == b'T',
        "{header}"
    );
    h.finish().await;
}
