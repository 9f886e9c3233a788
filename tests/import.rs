//! `demiurge mcp import`: the configurations of Claude Code, Claude Desktop, VS Code and
//! Codex become declarations and grants; no literal secret is ever written; what
//! cannot be expressed is reported; without `--yes` (and no terminal) nothing is
//! written.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{Core, exe};

/// Literal values in the fixtures: none may reach the core.
const LITERALS: [&str; 5] = [
    "ghp-literal-fixture-0001",
    "lit-header-fixture-0002",
    "literal-codex-fixture-0003",
    "BSAk3x9Qq2LmN8pR7tZw",
    "pw-default-fixture",
];

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
}

fn import(core: &Core, file: &Path, yes: bool) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(exe());
    command
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path());
    if yes {
        command.arg("--yes");
    }
    command
        .args(["mcp", "import"])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn read(core: &Core, id: &str) -> String {
    std::fs::read_to_string(core.mcp_dir().join(format!("{id}.yaml")))
        .unwrap_or_else(|_| panic!("{id} was not written"))
}

fn no_literal_in(core: &Core) {
    for entry in std::fs::read_dir(core.mcp_dir()).unwrap().flatten() {
        let written = std::fs::read_to_string(entry.path()).unwrap();
        for literal in LITERALS {
            assert!(!written.contains(literal), "{literal} written: {written}");
        }
    }
    let manifest = std::fs::read_to_string(core.root().join("agent.yaml")).unwrap();
    for literal in LITERALS {
        assert!(!manifest.contains(literal));
    }
}

#[test]
fn claude_code_servers_are_imported_with_secrets_as_references() {
    let core = Core::new();
    let out = import(&core, &fixture("claude.mcp.json"), true);
    let stdout = text(&out.stdout);
    // `legacy` speaks HTTP+SSE: reported, not written; the others are.
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("legacy: not imported"), "{stdout}");
    let fs = read(&core, "filesystem");
    assert!(
        fs.contains("GITHUB_TOKEN: \"${GITHUB_TOKEN}\"") && fs.contains("MODE: \"${MODE}\""),
        "{fs}"
    );
    // Harmless values are kept as written (a default too); a generated-looking one is
    // a reference even under a harmless name.
    for line in [
        "REGION: \"eu-west-1\"",
        "LOG: \"${LOG_LEVEL:-info}\"",
        "BRAVE_ID: \"${BRAVE_ID}\"",
    ] {
        assert!(fs.contains(line), "{line}: {fs}");
    }
    assert!(
        stdout.contains("kept the value of REGION as written")
            && !stdout.contains("no counterpart"),
        "{stdout}"
    );
    let issues = read(&core, "issues");
    assert!(
        issues.contains("\"Authorization\": \"Bearer ${ISSUES_AUTHORIZATION}\"")
            && issues.contains("\"X-Region\": \"eu\""),
        "{issues}"
    );
    assert!(
        stdout.contains("set GITHUB_TOKEN in the host environment"),
        "{stdout}"
    );
    assert!(
        stdout.contains("set ISSUES_AUTHORIZATION in the host environment"),
        "{stdout}"
    );
    no_literal_in(&core);
    // What was written loads, and is granted.
    let loaded = demiurge_mcp::core::load(&core.root()).unwrap();
    let ids: Vec<&str> = loaded
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .collect();
    assert_eq!(ids, ["filesystem", "issues"]);
    assert!(loaded.grants.contains("mcp.call:issues"));
}

#[test]
fn claude_desktop_vscode_and_codex_files_are_read_too() {
    let core = Core::new();
    let out = import(&core, &fixture("claude_desktop_config.json"), true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(read(&core, "memory").contains("server-memory"));

    let out = import(&core, &fixture("vscode.mcp.json"), true);
    let stdout = text(&out.stdout);
    let perplexity = read(&core, "perplexity");
    assert!(
        perplexity.contains("PERPLEXITY_API_KEY: \"${PERPLEXITY_KEY}\""),
        "{perplexity}"
    );
    assert!(perplexity.contains("HOME_DIR: \"${HOME}\""), "{perplexity}");
    assert!(
        stdout.contains(
            "the VS Code input `perplexity-key` becomes the host variable PERPLEXITY_KEY"
        ),
        "{stdout}"
    );
    assert!(read(&core, "docs").contains("\"X-Api-Key\": \"${PERPLEXITY_KEY}\""));
    // `${workspaceFolder}` in an argument is the workspace servers start in: reported.
    assert!(
        stdout.contains("`${workspaceFolder}` became `.`"),
        "{stdout}"
    );
    let ws = read(&core, "ws");
    assert!(
        ws.contains("\"./server.js\"")
            && ws.contains("cwd: \"tools\"")
            && ws.contains("enabled: false"),
        "{ws}"
    );
    // An input's default is kept unless the input is a password; arguments carry
    // references (they are interpolated after approval), `${userHome}` is `${HOME}`.
    assert!(
        perplexity.contains("\"--region\", \"${REGION:-eu}\"")
            && perplexity.contains("\"${HOME}/x\"")
            && perplexity.contains("\"--secret\", \"${SECRET_WITH_DEFAULT}\"")
            && !perplexity.contains("pw-default-fixture"),
        "{perplexity}"
    );
    // What has no counterpart says what to do, in words that exist.
    for note in [
        "`envFile` is not imported: the runtime reads no env file",
        "`autoApprove` is not imported: here a person approves calls; answer `a` (always)",
        "`cwd` is absolute or a variable, and is not imported",
        "`${workspaceFolderBasename}` has no counterpart here; it became the host variable VSCODE_WORKSPACEFOLDERBASENAME",
    ] {
        assert!(stdout.contains(note), "{note}: {stdout}");
    }
    assert!(!stdout.contains("see the README for"), "{stdout}");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains("## Quick start") && readme.contains("\ncwd: "),
        "the cwd note points at the Quick start"
    );
    assert!(out.status.success(), "{stdout}");

    let out = import(&core, &fixture("codex.config.toml"), true);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let context7 = read(&core, "context7");
    for line in [
        "API_KEY: \"${API_KEY}\"",
        "REGION: \"eu\"",
        "FROM_HOST: \"${FROM_HOST}\"",
        "cwd: \"sub\"",
        "connect_timeout_seconds: 20",
        "timeout_seconds: 90",
        "include: [\"resolve-library-id\"]",
    ] {
        assert!(context7.contains(line), "{line}: {context7}");
    }
    let linear = read(&core, "linear");
    assert!(
        linear.contains("\"Authorization\": \"Bearer ${LINEAR_TOKEN}\""),
        "{linear}"
    );
    assert!(
        linear.contains("\"X-Workspace\": \"${LINEAR_WORKSPACE}\""),
        "{linear}"
    );
    assert!(read(&core, "off").contains("enabled: false"));
    assert!(
        stdout.contains("`experimental_thing` is not imported"),
        "{stdout}"
    );
    no_literal_in(&core);
    let loaded = demiurge_mcp::core::load(&core.root()).unwrap();
    assert!(loaded.broken.is_empty(), "{:?}", loaded.broken);
}

#[test]
fn without_yes_or_a_terminal_nothing_is_written() {
    let core = Core::new();
    let out = import(&core, &fixture("claude.mcp.json"), false);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("agent/mcp/filesystem.yaml:"));
    assert!(text(&out.stderr).contains("nothing written"));
    assert_eq!(std::fs::read_dir(core.mcp_dir()).unwrap().count(), 0);
    // And the shown plan carries no literal either.
    for literal in LITERALS {
        assert!(!text(&out.stdout).contains(literal));
    }
}

#[test]
fn a_json_file_in_the_mcp_root_is_reported_with_the_import_hint() {
    let core = Core::new();
    std::fs::copy(
        fixture("claude.mcp.json"),
        core.mcp_dir().join("servers.json"),
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["init", "--check"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("servers.json") && stderr.contains("demiurge mcp import"),
        "{stderr}"
    );
}

/// A server whose arguments carry a secret shape (a `Bearer` credential inside a shell
/// script, `token=...`, URL credentials) is reported and not written; its neighbours
/// are.
#[test]
fn servers_whose_arguments_hold_a_secret_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".mcp.json");
    let config = serde_json::json!({"mcpServers": {
        "curl": {"command": "sh", "args": ["-c", "curl -H 'Authorization: Bearer imp-secret-1111' https://x.test"]},
        "assign": {"command": "srv", "args": ["--opt", "api_key=imp-secret-2222"]},
        "userinfo": {"command": "srv", "args": ["https://bob:imp-secret-3333@x.test/"]},
        "clean": {"command": "srv", "args": ["--verbose", "/data"]}
    }});
    std::fs::write(&file, config.to_string()).unwrap();
    let core = Core::new();
    let out = import(&core, &file, true);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    for id in ["curl", "assign", "userinfo"] {
        assert!(
            !core.mcp_dir().join(format!("{id}.yaml")).exists(),
            "{id} written"
        );
    }
    read(&core, "clean");
    for n in ["1111", "2222", "3333"] {
        let secret = format!("imp-secret-{n}");
        assert!(
            !stdout.contains(&secret) && !stderr.contains(&secret),
            "{stdout}{stderr}"
        );
    }
    assert!(stdout.contains("holds a secret"), "{stdout}{stderr}");
}

#[test]
fn an_imported_vscode_server_with_inputs_and_a_cwd_starts_as_written() {
    let core = Core::new();
    std::fs::create_dir_all(core.root().join("sub")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    let config = serde_json::json!({
        "inputs": [{"type": "promptString", "id": "page", "default": "3"}],
        "servers": {"vs": {
            "command": exe(),
            "args": ["demo-server", "--page-size", "${input:page}"],
            "cwd": "${workspaceFolder}/sub"
        }}
    });
    std::fs::write(&file, config.to_string()).unwrap();
    let out = import(&core, &file, true);
    assert!(out.status.success(), "{}", text(&out.stdout));
    // Nothing to export: the default and the cwd carry the server.
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args(["--yes", "call", "vs__cwd"])
        .env_remove("PAGE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    assert!(shown.trim_end().ends_with("/sub"), "{shown}");
}
