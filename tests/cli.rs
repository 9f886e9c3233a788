//! The `demiurge` command line as users and scripts drive it.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use common::{Core, demo, exe};
use serde_json::Value;

fn run(core: &Core, home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The CLI with `args` on `core` and `home`, `script` piped to its stdin, to the end.
fn piped(core: &Core, home: &std::path::Path, args: &[&str], script: &str) -> Output {
    let mut child = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn core() -> Core {
    Core::new()
        .grant_servers(&["docs"])
        .grant(&["mcp.connect:limited"])
        .server("docs", &demo("tools:\n  include: [echo, fail]\n"))
        .server("limited", &demo("tools:\n  include: [add]\n"))
}

#[test]
fn tools_json_has_the_stable_shape() {
    let (core, home) = (core(), tempfile::tempdir().unwrap());
    let out = run(&core, home.path(), &["--yes", "tools", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["session"].as_str().unwrap().starts_with("s-"));
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["docs__echo", "docs__fail", "limited__add"]);
    let echo = &v["tools"][0];
    assert_eq!(echo["server"], "docs");
    assert_eq!(echo["tool"], "echo");
    assert_eq!(echo["input_schema"]["type"], "object");
    assert_eq!(v["diagnostics"], serde_json::json!([]));
    assert_eq!(v["denied"], serde_json::json!([]));
    // The preview went to stderr, with the --yes note.
    assert!(
        text(&out.stderr).contains("approved by --yes"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_a_terminal_or_yes_prompts_are_denied_with_a_hint() {
    let (core, home) = (core(), tempfile::tempdir().unwrap());
    let out = run(&core, home.path(), &["tools", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tools"], serde_json::json!([]));
    assert_eq!(v["denied"].as_array().unwrap().len(), 2);
    assert_eq!(v["denied"][0]["reason"], "connect approval denied");
    assert!(
        text(&out.stderr).contains("re-run with --yes"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn call_exit_codes_follow_the_outcome() {
    let (core, home) = (core(), tempfile::tempdir().unwrap());
    let ok = run(
        &core,
        home.path(),
        &[
            "--yes",
            "call",
            "docs__echo",
            "--args",
            r#"{"message":"hello"}"#,
            "--json",
        ],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok.stderr));
    let v: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["tool"], "docs__echo");
    assert_eq!(v["is_error"], false);
    assert_eq!(v["content"], "hello");

    let err = run(
        &core,
        home.path(),
        &[
            "--yes",
            "call",
            "docs__fail",
            "--args",
            r#"{"message":"bad"}"#,
        ],
    );
    assert_eq!(err.status.code(), Some(1));
    assert!(text(&err.stdout).contains("bad"));

    let denied = run(
        &core,
        home.path(),
        &[
            "--yes",
            "call",
            "limited__add",
            "--args",
            r#"{"a":1,"b":2}"#,
        ],
    );
    assert_eq!(denied.status.code(), Some(1));
    assert!(
        text(&denied.stderr).contains("mcp.call:limited"),
        "{}",
        text(&denied.stderr)
    );

    let unknown = run(&core, home.path(), &["--yes", "call", "nope__x"]);
    assert_eq!(unknown.status.code(), Some(1));

    let usage = run(&core, home.path(), &["call", "docs__echo", "--args", "[1]"]);
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn usage_errors_exit_2_and_a_bare_command_prints_help() {
    let out = Command::new(exe()).arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(exe()).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for command in ["init", "tools", "call", "shell", "resources"] {
        assert!(help.contains(command), "{command}: {help}");
    }
}

#[test]
fn init_creates_a_core_that_checks_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let run_in = |args: &[&str]| {
        Command::new(exe())
            .arg("--core")
            .arg(dir.path())
            .arg("--home")
            .arg(home.path())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run_in(&["init"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(dir.path().join("agent/mcp/example.yaml").exists());
    let out = run_in(&["init", "--check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("example  stdio  disabled"),
        "{}",
        text(&out.stdout)
    );
    let before = std::fs::read_to_string(dir.path().join("agent.yaml")).unwrap();
    let out = run_in(&["init"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("agent.yaml")).unwrap(),
        before
    );
}

#[test]
fn init_check_warns_about_grants_without_servers_and_dotfiles_and_speaks_json() {
    let core = Core::new()
        .grant_servers(&["docs", "dcos"])
        .server("docs", &demo(""));
    std::fs::write(core.mcp_dir().join(".draft.yaml"), "command: x\n").unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = run(&core, home.path(), &["init", "--check"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "warning: grant `mcp.connect:dcos` names no declared server; did you mean `docs`?"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: .draft.yaml in agent/mcp is ignored"),
        "{stderr}"
    );
    let out = run(&core, home.path(), &["init", "--check", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["declarations"][0]["server"], "docs");
    assert_eq!(v["declarations"][0]["call_granted"], true);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 3);
}

#[test]
fn the_shell_is_a_subcommand_and_the_old_flag_still_works() {
    let core = core();
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["shell"][..],
        &["--provider", "fake"][..],
        &["shell", "--provider", "fake"][..],
    ] {
        let mut child = Command::new(exe())
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .arg("--yes")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"/quit\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(
            text(&out.stdout).starts_with("session "),
            "{args:?}: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn tools_exits_1_when_agent_yaml_does_not_load_but_not_for_a_broken_declaration() {
    let core = Core::new().server("bad", "command: x\nnope: 1\n");
    let home = tempfile::tempdir().unwrap();
    let out = run(&core, home.path(), &["tools"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Diagnostics go to stderr; stdout is the catalog.
    assert!(
        text(&out.stderr).contains("diagnostic: bad (agent/mcp/bad.yaml)"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(core.root().join("agent.yaml"), "capabilities: [1]\n").unwrap();
    let out = run(&core, home.path(), &["tools"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("agent.yaml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_shell_can_be_scripted_through_a_pipe() {
    let (core, home) = (core(), tempfile::tempdir().unwrap());
    let script = "/tools\n/call docs__echo {\"message\": \"piped\"}\nhello there\n/servers\n/new\n/tools\n/bogus\n/quit\n";
    let out = piped(&core, home.path(), &["--yes", "--provider", "fake"], script);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("docs__echo"), "{stdout}");
    assert!(stdout.contains("\npiped\n"), "{stdout}");
    assert!(
        stdout.contains("fake: I read 11 characters and can use 3 tools"),
        "{stdout}"
    );
    assert!(stdout.contains("connected (pid"), "{stdout}");
    assert!(
        stdout.contains("evicted (2 connections closed)"),
        "{stdout}"
    );
    assert!(stdout.contains("unknown command /bogus"), "{stdout}");
    assert!(!stdout.contains("> "), "no prompt when piped: {stdout}");
}

#[test]
fn demo_runs_with_no_set_up() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .arg("demo")
        .arg("--home")
        .arg(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("demo__echo") && stdout.contains("filtered__add"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("filtered__whoami"),
        "the include filter applies: {stdout}"
    );
    assert!(
        stdout.contains("refused: call denied: missing capability mcp.call:filtered"),
        "{stdout}"
    );
    assert!(stdout.contains("<redacted:DEMO_SECRET>"), "{stdout}");
    assert!(stdout.contains("mcp.session_evicted"), "{stdout}");
    assert!(stdout.contains("same connections: true"), "{stdout}");
    assert!(
        stdout.contains("hello over streamable HTTP"),
        "the HTTP server answered: {stdout}"
    );
    assert!(
        stdout.contains("the URL policy blocks http://169.254.169.254 (metadata)"),
        "{stdout}"
    );
    assert!(
        !text(&out.stderr).contains("metadata.yaml) wants to connect"),
        "a blocked URL never reaches approval"
    );
    // Run without --yes, the demo does not claim it was given.
    let said = text(&out.stderr);
    assert!(
        said.contains("approved by the demo") && !said.contains("--yes"),
        "{said}"
    );
}

#[test]
fn the_shell_shows_each_server_state_and_picks_up_changes() {
    let core = Core::new()
        .grant_servers(&["ok", "broken", "off"])
        .server("ok", &demo(""))
        .server("nogrant", &demo(""))
        .server("broken", "command: /nonexistent/server\n")
        .server("off", &demo("enabled: false\n"));
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["--yes", "--provider", "fake"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    stdin.write_all(b"/tools\n/servers\n").unwrap();
    stdin.flush().unwrap();
    // Read until the first /servers answer is complete (its last line is `off`).
    let mut stdout = String::new();
    while !stdout.lines().any(|l| l.starts_with("off ")) {
        let mut l = String::new();
        if std::io::BufRead::read_line(&mut reader, &mut l).unwrap() == 0 {
            break;
        }
        stdout.push_str(&l);
    }
    // Between two lines the declarations change: the next turn sees it.
    core.remove("nogrant");
    stdin.write_all(b"/tools\n/servers\n/quit\n").unwrap();
    drop(stdin);
    std::io::Read::read_to_string(&mut reader, &mut stdout).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let line = |id: &str, nth: usize| {
        stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{id} ")))
            .nth(nth)
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("ok", 0).contains("connected (pid"), "{stdout}");
    assert!(line("broken", 0).contains("failed, cached for"), "{stdout}");
    assert!(
        line("nogrant", 0).contains("denied: missing capability mcp.connect:nogrant"),
        "{stdout}"
    );
    assert!(line("off", 0).contains("disabled"), "{stdout}");
    assert!(line("ok", 1).contains("connected (pid"), "{stdout}");
    assert_eq!(
        line("nogrant", 1),
        "",
        "a removed declaration is gone at the next turn: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_are_never_used() {
    use common::http::{Behaviour, serve};
    let server = serve("127.0.0.1:0", Behaviour::Mcp(vec![]), None).await;
    let proxy = serve(
        "127.0.0.1:0",
        Behaviour::Canned("text/plain", bytes::Bytes::new()),
        None,
    )
    .await;
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &format!(
            "transport: streamable_http\nurl: http://127.0.0.1:{}/mcp\napproval_policy: auto\n",
            server.port()
        ),
    );
    let home = tempfile::tempdir().unwrap();
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port());
    let mut cmd = tokio::process::Command::new(exe());
    cmd.arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path());
    cmd.args([
        "--yes",
        "--trust-network",
        "127.0.0.0/8",
        "call",
        "web__echo",
        "--args",
        r#"{"message":"direct"}"#,
    ]);
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env(var, &proxy_url);
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
    let out = cmd.output().await.unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "direct");
    assert_eq!(proxy.accepted(), 0, "the proxy saw a connection");
    assert!(!server.requests().is_empty());
}

#[test]
fn url_check_prints_the_audit_view_and_exits_3_when_blocked() {
    let out = Command::new(exe())
        .args([
            "url-check",
            "https://bob:pw@mcp.test:8443/p?token=x#f",
            "--resolve",
            "mcp.test=93.184.216.34",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["target"], "https://mcp.test:8443");
    assert_eq!(
        v["resolved_addresses"],
        serde_json::json!(["93.184.216.34"])
    );
    assert!(!text(&out.stdout).contains("pw") && !text(&out.stdout).contains("token"));

    let out = Command::new(exe())
        .args(["url-check", "http://0x7f.1/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out.stdout).contains("blocked (loopback)"),
        "{}",
        text(&out.stdout)
    );

    let out = Command::new(exe())
        .args([
            "url-check",
            "http://127.0.0.1/",
            "--trust-network",
            "127.0.0.0/8",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let out = Command::new(exe())
        .args([
            "url-check",
            "http://169.254.169.254/",
            "--trust-network",
            "0.0.0.0/0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let out = Command::new(exe())
        .args(["url-check", "http://x.test/", "--resolve", "bad"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A reader that closes the output early (`| head`) ends the command quietly: exit 0 or
/// 141 as shells expect, never a panic, and no server left behind.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &demo("approval_policy: auto\n"));
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["mcp", "list", "--json"][..],
        &["mcp", "list"][..],
        &["url-check", "http://127.0.0.1/", "--json"][..],
        &["--yes", "tools", "--json"][..],
        &["--yes", "tools"][..],
    ] {
        let mut child = Command::new(exe())
            .arg("--core")
            .arg(core.root())
            .arg("--home")
            .arg(home.path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before anything was written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !common::servers_of(home.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "servers outlived a command cut by its reader"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `read SERVER URI` starts SERVER only, `prompt NAME` only the servers that can own
/// NAME, and the shell's `/call` only its tool's server; an unknown prompt says so,
/// with a suggestion.
#[test]
fn commands_start_only_the_servers_they_need() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let core = Core::new()
        .grant_servers(&["docs", "other"])
        .server("docs", &demo("approval_policy: auto\n"))
        .server(
            "other",
            &common::demo_counting(&marker, "approval_policy: auto\n"),
        );
    let home = tempfile::tempdir().unwrap();
    let out = run(
        &core,
        home.path(),
        &["--yes", "read", "docs", "demo://readme"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(
        &core,
        home.path(),
        &[
            "--yes",
            "prompt",
            "docs__greet",
            "--args",
            r#"{"name": "Ada"}"#,
        ],
    );
    assert!(text(&out.stdout).contains("Ada"), "{}", text(&out.stderr));
    let out = run(&core, home.path(), &["--yes", "prompt", "docs__gret"]);
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(
        said.contains("unknown prompt `docs__gret`") && said.contains("did you mean `docs__greet`"),
        "{said}"
    );
    let out = run(&core, home.path(), &["--yes", "prompt", "nowhere__greet"]);
    assert!(
        text(&out.stderr).contains("unknown prompt"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &core,
        home.path(),
        &["--yes", "read", "nowhere", "demo://readme"],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = piped(
        &core,
        home.path(),
        &["--yes", "--provider", "fake"],
        "/call docs__echo {\"message\": \"only docs\"}\n/quit\n",
    );
    assert!(
        text(&out.stdout).contains("only docs"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(common::count(&marker), 0, "`other` was started");
    // A whole turn does start it: the counter counts.
    let out = run(&core, home.path(), &["--yes", "tools"]);
    assert!(out.status.success());
    assert_eq!(common::count(&marker), 1);
}

#[test]
fn a_call_to_a_server_that_did_not_connect_says_so() {
    let core = Core::new().grant_servers(&["modern"]).server(
        "modern",
        &common::demo_fault("modern-only", "protocol: 2025-11-25\n"),
    );
    let home = tempfile::tempdir().unwrap();
    for args in [
        &[
            "--yes",
            "call",
            "modern__echo",
            "--args",
            r#"{"message": "x"}"#,
        ][..],
        &["--yes", "prompt", "modern__greet"][..],
    ] {
        let out = run(&core, home.path(), args);
        assert_eq!(out.status.code(), Some(1));
        let said = text(&out.stderr);
        assert!(
            said.contains("server requires MCP 2026-07-28")
                && said.contains("is not available: server `modern` did not connect this turn")
                && !said.contains("unknown"),
            "{said}"
        );
    }
}

#[test]
fn output_reads_well_for_odd_text_long_names_and_binary_resources() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    let long = "a_tool_whose_name_is_much_longer_than_forty_characters";
    std::fs::write(
        &tools,
        serde_json::json!([
            {"name": long, "description": "long one"},
            {"name": "short", "description": "\n\n  Shown from its first non-blank line\nnot this"}
        ])
        .to_string(),
    )
    .unwrap();
    let core = Core::new().grant_servers(&["docs"]).server(
        "docs",
        &common::demo_with_tools(&tools, "approval_policy: auto\n"),
    );
    let home = tempfile::tempdir().unwrap();
    let listed = text(&run(&core, home.path(), &["--yes", "tools"]).stdout);
    // Every description starts in the same column, long names included.
    let column = |name: &str, description: &str| {
        let line = listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {listed}"));
        line.find(description)
            .unwrap_or_else(|| panic!("{description}: {line}"))
    };
    let at = column(&format!("docs__{long}"), "long one");
    assert_eq!(
        column("docs__short ", "Shown from its first non-blank line"),
        at
    );
    assert_eq!(column("docs__echo ", "Return the message"), at);
    // A multi-line result goes under a header, indented: tabs expanded, no line of it
    // at the margin where the CLI's own lines are.
    let out = run(
        &core,
        home.path(),
        &[
            "--yes",
            "call",
            "docs__echo",
            "--args",
            r#"{"message": "col\tnext\ndiagnostic: forged\n\u001b[2J"}"#,
        ],
    );
    assert_eq!(
        text(&out.stdout),
        "docs__echo:\n  col     next\n  diagnostic: forged\n  \\u{1b}[2J\n"
    );
    // --json carries the provenance, and a binary resource whole.
    let out = run(
        &core,
        home.path(),
        &[
            "--yes",
            "call",
            "docs__echo",
            "--args",
            r#"{"message": "hi"}"#,
            "--json",
        ],
    );
    let called: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(called["provenance"]["server"], "docs");
    assert_eq!(called["provenance"]["tool"], "echo");
    assert!(called["provenance"]["duration_ms"].is_u64(), "{called}");
    let out = run(
        &core,
        home.path(),
        &["--yes", "read", "docs", "demo://pixel", "--json"],
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let block = &read["blocks"][0];
    assert_eq!(block["mime_type"], "image/png", "{read}");
    assert_eq!(block["blob"], "iVBORw0KGgo=");
    assert_eq!(block["size"], 8);
    // The shell lists its commands.
    let out = piped(&core, home.path(), &["shell"], "/help\n/tols\n/quit\n");
    let said = text(&out.stdout);
    assert!(
        said.contains("/call NAME JSON")
            && said.contains("call a tool")
            && said.contains("did you mean /tools?"),
        "{said}"
    );
}

#[test]
fn a_numbered_name_says_which_tool_took_its_first_choice() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    std::fs::write(
        &tools,
        serde_json::json!([
            {"name": "search", "description": "lower"},
            {"name": "Search", "description": "upper"}
        ])
        .to_string(),
    )
    .unwrap();
    let core = Core::new()
        .grant_servers(&["docs"])
        .server("docs", &common::demo_with_tools(&tools, ""));
    let home = tempfile::tempdir().unwrap();
    let out = run(&core, home.path(), &["--yes", "tools"]);
    let said = text(&out.stderr);
    assert!(
        said.contains(
            "tool \"search\" is exposed as `docs__search-2`: `docs__Search` is already tool \"Search\" of server `docs`"
        ),
        "{said}"
    );
    assert_eq!(said.matches("is exposed as").count(), 1, "{said}");
}

/// A confined server that fails saying it was refused (Landlock and seccomp tell only
/// the process they refuse) gets a line saying so and what would allow it, by kind,
/// never naming what it aimed at; an unconfined one saying the same gets none.
#[test]
fn a_confined_server_that_fails_refused_is_told_to_declare_what_it_needs() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("canary-path.txt");
    std::fs::write(&secret, "x").unwrap();
    let home = tempfile::tempdir().unwrap();
    for (attempt, kind) in [
        (format!("cat '{}'", secret.display()), "permission_denied"),
        (
            format!("touch '{}'", outside.path().join("new").display()),
            "permission_denied",
        ),
        (
            format!("mkdir '{}'", outside.path().join("dir").display()),
            "permission_denied",
        ),
    ] {
        let core = Core::new().grant_servers(&["reader"]).server(
            "reader",
            &common::shell(
                &format!("{attempt}; exit 3"),
                &common::sandboxed("", &[], &[]),
            ),
        );
        let out = run(&core, home.path(), &["--yes", "tools"]);
        let said = text(&out.stderr);
        let line = said
            .lines()
            .find(|l| l.contains("failed confined"))
            .unwrap_or_else(|| panic!("{attempt}: {said}"));
        assert!(
            line.contains(&format!("reports a refused access ({kind})"))
                && line.contains("declare it under `sandbox:`"),
            "{line}"
        );
        assert!(!line.contains("canary-path"), "{line}");
        assert!(
            said.contains("it ran confined and reports a refused access"),
            "{said}"
        );
    }
    // Unconfined, the same words are only the server's.
    let core = Core::new().grant_servers(&["reader"]).server(
        "reader",
        &common::shell(
            "echo 'open: Permission denied' >&2; exit 3",
            "sandbox: off\n",
        ),
    );
    let out = run(&core, home.path(), &["--yes", "tools"]);
    let said = text(&out.stderr) + &text(&out.stdout);
    assert!(said.contains("Permission denied"), "{said}");
    assert!(!said.contains("failed confined"), "{said}");
    assert!(!said.contains("reports a refused access"), "{said}");
}

/// An undeclared server runs confined (the product's default): its request to an
/// untrusted address through the egress proxy is refused, and the CLI says what was
/// refused and what would allow it.
#[test]
fn a_refused_egress_request_is_said_with_what_would_allow_it() {
    if Command::new("curl").arg("--version").output().is_err() {
        let _ = writeln!(std::io::stderr(), "SKIPPED: the egress probe needs curl");
        return;
    }
    let script = format!(
        "curl -s --max-time 5 http://127.0.0.2:9/ >/dev/null; exec '{}' demo-server",
        exe()
    );
    let core = Core::new().grant_servers(&["web"]).server(
        "web",
        &common::shell(&script, &common::sandboxed("", &[], &[])),
    );
    let home = tempfile::tempdir().unwrap();
    let out = run(&core, home.path(), &["--yes", "tools"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains(
            "web was refused http://127.0.0.2:9 by the sandbox's egress proxy (loopback); to allow it, trust that network (`--trust-network CIDR`"
        ),
        "{said}"
    );
    // Trusting the network lets the same request through: no refusal to report.
    let out = run(
        &core,
        home.path(),
        &["--yes", "--trust-network", "127.0.0.0/8", "tools"],
    );
    assert!(
        !text(&out.stderr).contains("was refused"),
        "{}",
        text(&out.stderr)
    );
}
