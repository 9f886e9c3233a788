//! Canary secrets: declared env values (literal and interpolated), secret-bearing args,
//! header tokens, URL userinfo and query secrets, and secret call arguments. Servers echo
//! them back in results, errors and stderr; then every output of the runtime is searched
//! for every canary. Only the debug view may carry fingerprints, never values.

mod common;

use std::process::{Command, Stdio};

use common::{Core, Recorder, exe, harness_with, host_env, read_tree};
use demiurge_mcp::redact::View;
use serde_json::json;

const HOST_SECRET: &str = "hostcanary-3e9f1a";
const LITERAL: &str = "litcanary-8c3b77";
const ARG: &str = "argcanary-77aa10";
const URL_PW: &str = "urlcanary-pw5512";
const QUERY: &str = "querycanary-1d4e";
const HEADER: &str = "hdrcanary-99c0de";
const CALL: &str = "callcanary-4242ab";
const CANARIES: [&str; 7] = [HOST_SECRET, LITERAL, ARG, URL_PW, QUERY, HEADER, CALL];

fn assert_clean(what: &str, text: &str) {
    for canary in CANARIES {
        assert!(!text.contains(canary), "{what} leaks {canary}:\n{text}");
    }
}

fn canary_core() -> Core {
    let server = format!(
        "command: sh\nargs: [-c, 'exec \"$0\" demo-server', {exe}, --token, {ARG}]\nenv:\n  API_TOKEN: \"${{HOST_SECRET}}\"\n  LITERAL_SECRET: {LITERAL}\napproval_policy: auto\n{confined}",
        exe = serde_json::to_string(exe()).unwrap(),
        confined = common::sandboxed("", &[], &[])
    );
    let failing = format!(
        "command: sh\nargs: [-c, 'echo \"boom $API_TOKEN $LITERAL_SECRET\" >&2; exit 1']\nenv:\n  API_TOKEN: \"${{HOST_SECRET}}\"\n  LITERAL_SECRET: {LITERAL}\n"
    );
    let http = format!(
        "transport: streamable_http\nurl: \"https://user:{URL_PW}@example.test/mcp?api_key={QUERY}&x=1\"\nheaders:\n  Authorization: \"Bearer {HEADER}\"\n"
    );
    Core::new()
        .grant_servers(&["canary", "failing", "remote"])
        .server("canary", &server)
        .server("failing", &failing)
        .server("remote", &http)
}

#[tokio::test]
async fn no_canary_leaves_the_runtime_through_any_output() {
    let core = canary_core();
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(host_env(&[("HOST_SECRET", HOST_SECRET)]))
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog.get("canary__echo").is_some(),
        "{:?}",
        catalog.diagnostics()
    );

    let calls = [
        (
            "canary__echo",
            json!({"message": format!("{HOST_SECRET} {LITERAL} {ARG}")}),
        ),
        (
            "canary__fail",
            json!({"message": format!("failed with {CALL}"), "password": CALL}),
        ),
        (
            "canary__echo",
            json!({"message": format!("Authorization: Bearer {HEADER}")}),
        ),
        (
            "canary__echo",
            json!({"message": format!("https://u:{URL_PW}@h/x?token={QUERY}")}),
        ),
        (
            "canary__stderr",
            json!({"text": format!("stderr {HOST_SECRET} {ARG}")}),
        ),
    ];
    let mut results = Vec::new();
    for (tool, args) in calls {
        results.push(catalog.call(tool, args).await.unwrap());
    }
    assert!(results[1].is_error);
    // The declared secrets really were delivered to the server (it echoed them back).
    assert!(
        results[0]
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .contains("<redacted:API_TOKEN>"),
        "{:?}",
        results[0].view(demiurge_mcp::redact::View::Operator)
    );
    assert!(
        results[0]
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .contains("<redacted:LITERAL_SECRET>")
    );
    assert!(
        results[0]
            .view(demiurge_mcp::redact::View::Operator)
            .content
            .contains("<redacted:token>")
    );

    for r in &results {
        for view in [
            View::Model,
            View::Operator,
            View::Event,
            View::Durable,
            View::Debug,
        ] {
            assert_clean(
                "a result view",
                &serde_json::to_string(r.view(view)).unwrap(),
            );
        }
        assert!(
            !r.view(demiurge_mcp::redact::View::Model)
                .content
                .contains("<redacted:"),
            "the model view names nothing: {}",
            r.view(demiurge_mcp::redact::View::Model).content
        );
    }
    assert!(
        results[0]
            .view(demiurge_mcp::redact::View::Debug)
            .content
            .contains("<redacted:API_TOKEN:"),
        "debug carries a fingerprint"
    );

    assert_clean(
        "diagnostics",
        &format!("{:?} {:?}", catalog.diagnostics(), catalog.denied()),
    );
    assert_clean(
        "approval previews",
        &serde_json::to_string(&h.approver.requests()).unwrap(),
    );
    let preview = h
        .approver
        .requests()
        .into_iter()
        .find(|r| r.server == "canary")
        .unwrap()
        .preview;
    assert!(
        preview.args.contains(&"--token=<redacted>".to_string()),
        "{:?}",
        preview.args
    );
    assert_eq!(preview.env_names, ["API_TOKEN", "LITERAL_SECRET"]);

    h.finish().await;
    assert_clean("events", &serde_json::to_string(&h.sink.events()).unwrap());
    let logs = read_tree(h.home.path());
    assert!(
        logs.contains("stderr <redacted:API_TOKEN> <redacted:token>"),
        "stderr reached the log, redacted: {logs}"
    );
    assert!(
        logs.contains("boom <redacted:API_TOKEN> <redacted:LITERAL_SECRET>"),
        "{logs}"
    );
    assert_clean("the stderr log and the JSONL event logs", &logs);
}

fn cli(core: &Core, home: &std::path::Path, args: &[&str], stdin: &str) -> (String, String) {
    use std::io::Write;
    let mut child = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(args)
        .env("HOST_SECRET", HOST_SECRET)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_canary_appears_in_any_cli_output() {
    let core = canary_core();
    let home = tempfile::tempdir().unwrap();
    let echo = format!(r#"{{"message": "{HOST_SECRET} {LITERAL}", "api_key": "{CALL}"}}"#);
    let runs = [
        cli(&core, home.path(), &["init", "--check"], ""),
        cli(&core, home.path(), &["--yes", "tools"], ""),
        cli(&core, home.path(), &["--yes", "tools", "--json"], ""),
        cli(
            &core,
            home.path(),
            &["--yes", "call", "canary__echo", "--args", &echo],
            "",
        ),
        cli(
            &core,
            home.path(),
            &["--yes", "call", "canary__echo", "--args", &echo, "--json"],
            "",
        ),
        cli(
            &core,
            home.path(),
            &["--yes", "--provider", "fake"],
            &format!(
                "/tools\n/servers\n/call canary__echo {echo}\n/call canary__add_tool {{\"name\": \"lookup_{HOST_SECRET}\"}}\n/tools\n/call canary__echo_json {{\"message\": \"{{\\\"password\\\": \\\"{REVEALED}\\\", \\\"copy\\\": \\\"{REVEALED}\\\"}}\"}}\n/events\n/quit\n"
            ),
        ),
        cli(&core, home.path(), &["tools"], ""),
    ];
    for (i, (stdout, stderr)) in runs.iter().enumerate() {
        assert_clean(&format!("run {i} stdout"), stdout);
        assert_clean(&format!("run {i} stderr"), stderr);
        assert!(
            !stdout.contains(REVEALED) && !stderr.contains(REVEALED),
            "run {i}"
        );
    }
    assert!(runs[5].0.contains("1 tool(s) hidden"), "{}", runs[5].0);
    assert!(runs[5].0.contains("<redacted:password>"), "{}", runs[5].0);
    assert!(
        runs[3]
            .0
            .contains("<redacted:API_TOKEN> <redacted:LITERAL_SECRET>"),
        "{}",
        runs[3].0
    );
    assert_clean("the runtime home", &read_tree(home.path()));
}

#[tokio::test]
async fn a_server_sees_exactly_the_allowlist_home_and_its_declared_names() {
    let core = Core::new().grant_servers(&["d"]).server(
        "d",
        &common::demo("env:\n  ZED: \"1\"\n  API_KEY: \"${HOST_SECRET}\"\napproval_policy: auto\n"),
    );
    let env = host_env(&[
        ("HOST_SECRET", HOST_SECRET),
        ("LANG", "C.UTF-8"),
        ("TZ", "UTC"),
        ("USER", "root"),
        ("SHELL", "/bin/bash"),
        ("LOGNAME", "root"),
        ("HTTPS_PROXY", "http://proxy.invalid:3128"),
        ("http_proxy", "http://proxy.invalid:3128"),
        ("AWS_SECRET_ACCESS_KEY", "nope"),
    ]);
    let h = harness_with(Recorder::allow(), |c| c.with_host_env(env)).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let names = catalog
        .call("d__env_names", json!({}))
        .await
        .unwrap()
        .view(demiurge_mcp::redact::View::Operator)
        .data["names"]
        .clone();
    assert_eq!(
        names,
        json!(["API_KEY", "HOME", "LANG", "PATH", "TZ", "ZED"])
    );
    let cwd_home = h.home.path().join("mcp-home");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&cwd_home).unwrap().permissions(),
    ) & 0o777;
    assert_eq!(mode, 0o700);
    h.finish().await;
}

const REVEALED: &str = "revealcanary-5c1e";
const SPACED: &str = "spacedcanary-0b7d";

/// Side doors: a tool named after a secret, secrets a result reveals about itself
/// (under sensitive keys, in lists and maps under them, in JSON text), free-text
/// options with a space, and a server error quoting them. Each is searched for in every
/// view, event, diagnostic, exposed name and log.
#[tokio::test]
async fn no_canary_leaves_through_a_side_door() {
    let core = canary_core();
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(host_env(&[("HOST_SECRET", HOST_SECRET)]))
    })
    .await;
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    // Tool names that carry a known secret or a secret shape.
    for name in [
        format!("lookup_{HOST_SECRET}"),
        LITERAL.to_string(),
        format!("x?token={SPACED}"),
    ] {
        catalog
            .call("canary__add_tool", json!({ "name": name }))
            .await
            .unwrap();
    }
    let relisted = session.prepare_turn().await.unwrap();
    let names: Vec<String> = relisted.tools().iter().map(|t| t.name.clone()).collect();
    assert_clean("exposed names", &names.join(" "));
    assert!(!names.join(" ").contains(SPACED), "{names:?}");
    let notes = format!("{:?}", relisted.diagnostics());
    assert!(notes.contains("3 tool(s) hidden"), "{notes}");
    assert_clean("diagnostics", &notes);
    assert!(!notes.contains(SPACED), "{notes}");

    let revealing = [
        json!({"password": REVEALED, "copy": REVEALED}),
        json!({"credentials": {"user": REVEALED}, "note": format!("the user is {REVEALED}")}),
        json!({"tokens": [REVEALED, "other"], "seen": [REVEALED]}),
    ];
    let mut shown = Vec::new();
    for data in revealing {
        let result = relisted
            .call("canary__echo_json", json!({ "message": data.to_string() }))
            .await
            .unwrap();
        shown.push(serde_json::to_string(&result.views()).unwrap());
    }
    for message in [
        format!("run it with --token {SPACED} and then {SPACED}"),
        format!("{{\"api_key\": \"{REVEALED}\"}} and again {REVEALED}"),
    ] {
        for tool in ["canary__echo", "canary__fail"] {
            let result = relisted
                .call(tool, json!({ "message": message }))
                .await
                .unwrap();
            shown.push(serde_json::to_string(&result.views()).unwrap());
        }
    }
    for views in &shown {
        assert!(
            !views.contains(REVEALED) && !views.contains(SPACED),
            "a revealed secret shows: {views}"
        );
    }
    h.finish().await;
    let events = serde_json::to_string(&h.sink.events()).unwrap();
    let logs = read_tree(h.home.path());
    for (what, text) in [("events", &events), ("logs", &logs)] {
        assert_clean(what, text);
        assert!(
            !text.contains(REVEALED) && !text.contains(SPACED),
            "{what}: {text}"
        );
    }
}
