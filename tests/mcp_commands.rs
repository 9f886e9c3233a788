//! `demiurge mcp add|list|get|remove|enable|disable` on a real core: what they write
//! loads, literal secrets are never written, edits keep the user's comments, and a
//! server added this way connects.

mod common;

use std::process::{Command, Output, Stdio};

use common::{Core, exe};
use serde_json::Value;

fn run(core: &Core, home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home)
        .arg("--yes")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn servers_are_added_listed_shown_toggled_and_removed_without_writing_a_secret() {
    let core = Core::new();
    std::fs::write(
        core.root().join("agent.yaml"),
        "# my agent, my comments\nname: test\ncapabilities:\n  defaults:\n    # keep me\n",
    )
    .unwrap();
    let home = tempfile::tempdir().unwrap();
    let secret = "sk-live-5b1e9a0c33";
    let out = run(
        &core,
        home.path(),
        &[
            "mcp",
            "add",
            "demo",
            "--env",
            &format!("API_KEY={secret}"),
            "--env",
            "REGION=${REGION:-eu}",
            "--",
            exe(),
            "demo-server",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("set API_KEY in the host environment"));
    let written = std::fs::read_to_string(core.mcp_dir().join("demo.yaml")).unwrap();
    let manifest = std::fs::read_to_string(core.root().join("agent.yaml")).unwrap();
    for file in [&written, &manifest] {
        assert!(
            !file.contains(secret),
            "a literal secret was written: {file}"
        );
    }
    assert!(written.contains("API_KEY: \"${API_KEY}\""), "{written}");
    // A value under a harmless name, without a secret shape, is kept as written.
    assert!(written.contains("REGION: \"${REGION:-eu}\""), "{written}");
    assert!(manifest.starts_with("# my agent, my comments\n") && manifest.contains("# keep me"));
    // An HTTP server: the header's scheme word stays, the credential is referenced.
    let out = run(
        &core,
        home.path(),
        &[
            "mcp",
            "add",
            "issues",
            "--url",
            "https://issues.example.test/mcp",
            "--header",
            &format!("Authorization=Bearer {secret}"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let issues = std::fs::read_to_string(core.mcp_dir().join("issues.yaml")).unwrap();
    assert!(
        issues.contains("\"Authorization\": \"Bearer ${ISSUES_AUTHORIZATION}\""),
        "{issues}"
    );
    assert!(!issues.contains(secret));
    // Both load and are granted; the stdio one connects and lists tools.
    let out = run(&core, home.path(), &["mcp", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = listed["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert!(servers.iter().all(|s| s["connect_granted"] == true
        && s["call_granted"] == true
        && s["enabled"] == true));
    let out = Command::new(exe())
        .arg("--core")
        .arg(core.root())
        .arg("--home")
        .arg(home.path())
        .args([
            "--yes",
            "call",
            "demo__echo",
            "--args",
            r#"{"message":"added"}"#,
        ])
        .env("API_KEY", "from-the-host")
        .env("REGION", "eu")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // get: the approval's view, no values.
    let out = run(&core, home.path(), &["mcp", "get", "issues"]);
    let shown = text(&out.stdout);
    assert!(
        shown.contains("headers: Authorization") && !shown.contains(secret),
        "{shown}"
    );
    // disable / enable edit one line; a comment on it stays.
    let path = core.mcp_dir().join("demo.yaml");
    std::fs::write(&path, format!("# mine\n{written}")).unwrap();
    assert!(
        run(&core, home.path(), &["mcp", "disable", "demo"])
            .status
            .success()
    );
    let toggled = std::fs::read_to_string(&path).unwrap();
    assert!(toggled.starts_with("enabled: false\n# mine\n"), "{toggled}");
    assert!(
        run(&core, home.path(), &["mcp", "enable", "demo"])
            .status
            .success()
    );
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("enabled: true")
    );
    // remove: the file and its grants, the rest of agent.yaml as it was.
    assert!(
        run(&core, home.path(), &["mcp", "remove", "demo"])
            .status
            .success()
    );
    assert!(!path.exists());
    let manifest = std::fs::read_to_string(core.root().join("agent.yaml")).unwrap();
    assert!(!manifest.contains("mcp.connect:demo") && manifest.contains("mcp.call:issues"));
    assert!(manifest.contains("# keep me"));
    // Unknown names get a hint; adding twice, or a bad id, is refused.
    let out = run(&core, home.path(), &["mcp", "get", "isues"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("did you mean `issues`"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &core,
        home.path(),
        &["mcp", "add", "issues", "--url", "https://x.test/mcp"],
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(
        &core,
        home.path(),
        &["mcp", "add", "../escape", "--url", "https://x.test/mcp"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!core.root().join("agent/escape.yaml").exists());
}

#[test]
fn an_addition_that_would_not_load_is_not_kept() {
    let core = Core::new();
    let home = tempfile::tempdir().unwrap();
    let out = run(
        &core,
        home.path(),
        &["mcp", "add", "bad", "--url", "ftp://x.test/"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("url"), "{}", text(&out.stderr));
    assert!(!core.mcp_dir().join("bad.yaml").exists());
    let manifest = std::fs::read_to_string(core.root().join("agent.yaml")).unwrap();
    assert!(!manifest.contains("mcp.connect:bad"), "{manifest}");
}

#[test]
fn hostile_names_values_and_links_write_nothing_outside_and_no_literal() {
    let core = Core::new();
    let home = tempfile::tempdir().unwrap();
    // Keys that would inject YAML fields are refused; nothing is written.
    for bad in ["X: \"${X}\"\napproval_policy: auto\n#=v", "A B=v", "1X=v"] {
        let out = run(
            &core,
            home.path(),
            &["mcp", "add", "inj", "--env", bad, "--", "x"],
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
        assert!(!core.mcp_dir().join("inj.yaml").exists());
    }
    let out = run(
        &core,
        home.path(),
        &[
            "mcp",
            "add",
            "inj",
            "--url",
            "https://x.test/mcp",
            "--header",
            "X-A\nrisk: low=v",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    // A literal next to a reference, or behind a default, is still a literal.
    let secret = "sk-live-7c0ffee1234";
    for (value, reference) in [
        (format!("{secret}${{X}}"), "${KEY}"),
        (format!("${{X}} {secret}"), "${KEY}"),
        // A default that may not be committed is dropped; its variable stays.
        (format!("${{X:-{secret}}}"), "${X}"),
    ] {
        let _ = std::fs::remove_file(core.mcp_dir().join("lit.yaml"));
        let out = run(
            &core,
            home.path(),
            &[
                "mcp",
                "add",
                "lit",
                "--env",
                &format!("KEY={value}"),
                "--",
                "x",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let written = std::fs::read_to_string(core.mcp_dir().join("lit.yaml")).unwrap();
        assert!(
            !written.contains(secret) && written.contains(&format!("KEY: \"{reference}\"")),
            "{written}"
        );
        assert!(
            run(&core, home.path(), &["mcp", "remove", "lit"])
                .status
                .success()
        );
    }
    // Credentials in a URL or a secret option's value would be committed: refused.
    for args in [
        &["mcp", "add", "u", "--url", "https://user:pw@x.test/mcp"][..],
        &["mcp", "add", "u", "--url", "https://x.test/mcp?token=abc"][..],
        &["mcp", "add", "u", "--", "srv", "--api-key", "abc123"][..],
        // Secret shapes in positional arguments, inside shell scripts too.
        &[
            "mcp",
            "add",
            "u",
            "--",
            "srv",
            "Bearer",
            "x",
            "Authorization: Bearer sk-abc-123",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "sh",
            "-c",
            "curl -H 'Authorization: Bearer sk-abc-123' https://x.test",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "sh",
            "-c",
            "exec srv --token sk-abc-123",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "srv",
            "https://bob:pw-1234@x.test/",
        ][..],
        &["mcp", "add", "u", "--", "srv", "api_key=abc12345"][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "env",
            "GITHUB_TOKEN=ghp_abcdef123456",
            "srv",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "srv",
            "{\"password\": \"hunter22\"}",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "srv",
            "--auth-header",
            "Bearer sk-abc-123",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "sh",
            "-c",
            "curl -H 'PRIVATE-TOKEN: sk-abc-123' x",
        ][..],
        &[
            "mcp",
            "add",
            "u",
            "--",
            "srv",
            "-H",
            "X-Auth-Token: sk-abc-123",
        ][..],
    ] {
        let out = run(&core, home.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!core.mcp_dir().join("u.yaml").exists());
        let said = String::from_utf8_lossy(&out.stderr);
        for secret in [
            "sk-abc-123",
            "pw-1234",
            "abc12345",
            "ghp_abcdef",
            "hunter22",
        ] {
            assert!(!said.contains(secret), "{said}");
        }
    }
    // A reference in the secret's place is what the message asks for, and is written.
    let out = run(
        &core,
        home.path(),
        &[
            "mcp",
            "add",
            "r",
            "--",
            "sh",
            "-c",
            "curl -H 'Authorization: Bearer ${API_TOKEN}' https://x.test",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A dangling link where the declaration would go: never written through.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("planted");
    std::os::unix::fs::symlink(&target, core.mcp_dir().join("link.yaml")).unwrap();
    let out = run(&core, home.path(), &["mcp", "add", "link", "--", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!target.exists(), "written through a symlink");
    // Names that are not plain ids reach no file.
    for name in ["../agent", "a/b", ".."] {
        for verb in ["enable", "disable", "remove", "get"] {
            let out = run(&core, home.path(), &["mcp", verb, name]);
            assert_eq!(out.status.code(), Some(1), "{verb} {name}");
        }
    }
    // A link posing as a declaration is not edited either.
    let out = run(&core, home.path(), &["mcp", "disable", "link"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!target.exists());
}

#[test]
fn get_names_the_package_a_runner_fetches_and_the_declared_cwd() {
    let core = Core::new()
        .server(
            "files",
            "transport: stdio\ncommand: npx\nargs: [\"-y\", \"@modelcontextprotocol/server-filesystem\", \".\"]\ncwd: \".\"\n",
        )
        .server(
            "elsewhere",
            "transport: stdio\ncommand: npx\nargs: [\"--registry\", \"https://registry.example.test\", \"lookalike-pkg\"]\n",
        )
        .server(
            "boxed",
            "transport: stdio\ncommand: docker\nargs: [\"run\", \"-i\", \"--rm\", \"-e\", \"GITHUB_TOKEN\", \"ghcr.io/github/github-mcp-server\"]\n",
        )
        .grant_servers(&["files", "elsewhere", "boxed"]);
    let home = tempfile::tempdir().unwrap();
    let shown = text(&run(&core, home.path(), &["mcp", "get", "files"]).stdout);
    assert!(
        shown.contains("fetches and runs (npx npm): @modelcontextprotocol/server-filesystem\n"),
        "{shown}"
    );
    assert!(shown.contains("  cwd: .\n"), "{shown}");
    // The positional rule still holds in `args`.
    assert!(shown.contains("args: -y <value sha256:"), "{shown}");
    let out = run(&core, home.path(), &["mcp", "get", "files", "--json"]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["fetches"]["ecosystem"], "npm");
    assert_eq!(
        json["fetches"]["packages"][0],
        "@modelcontextprotocol/server-filesystem"
    );
    assert_eq!(json["cwd_declared"], ".");
    // An option that could change the source hides nothing and shows no name.
    let shown = text(&run(&core, home.path(), &["mcp", "get", "elsewhere"]).stdout);
    assert!(
        !shown.contains("fetches") && !shown.contains("lookalike-pkg"),
        "{shown}"
    );
    assert!(shown.contains("cwd: the workspace root"), "{shown}");
    let shown = text(&run(&core, home.path(), &["mcp", "get", "boxed"]).stdout);
    assert!(
        shown.contains("fetches and runs (docker run image): ghcr.io/github/github-mcp-server\n"),
        "{shown}"
    );
}

#[test]
fn harmless_literals_are_kept_and_check_names_unset_variables() {
    let core = Core::new();
    let home = tempfile::tempdir().unwrap();
    let out = run(
        &core,
        home.path(),
        &[
            "mcp",
            "add",
            "lit",
            "--env",
            "REGION=eu",
            "--env",
            "LOG_FORMAT=json",
            "--env",
            "API_KEY=abc",
            "--env",
            "ACCOUNT=k3yL1k3V4lu3xx9qZ0aa",
            "--env",
            "DSN=https://u:pw@db.example.test/x",
            // Secrets of no one shape, under names and values a loose rule would keep.
            "--env",
            "SMTP_PASS=abcd efgh ijkl mnop",
            "--env",
            "MYSQL_PWD=Tr0ub4dor&3",
            "--env",
            "MSSQL_CONN=Server=db;Uid=sa;Pwd=Hunter2;",
            "--env",
            "WALLET_MNEMONIC=abandon ability able about",
            "--env",
            "WEBHOOK_URL=https://eo3xk7q2m9z4p1abcd.m.pipedream.net",
            "--env",
            "CALLBACK=http://localhost/t/9f8e7d6c5b4a3f2e",
            "--env",
            "DATA_DIR=./data",
            "--env",
            "API_BASE=https://api.example.test",
            "--",
            exe(),
            "demo-server",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(core.mcp_dir().join("lit.yaml")).unwrap();
    for line in [
        "REGION: \"eu\"",
        "LOG_FORMAT: \"json\"",
        "API_KEY: \"${API_KEY}\"",
        "ACCOUNT: \"${ACCOUNT}\"",
        "DSN: \"${DSN}\"",
        "SMTP_PASS: \"${SMTP_PASS}\"",
        "MYSQL_PWD: \"${MYSQL_PWD}\"",
        "MSSQL_CONN: \"${MSSQL_CONN}\"",
        "WALLET_MNEMONIC: \"${WALLET_MNEMONIC}\"",
        "WEBHOOK_URL: \"${WEBHOOK_URL}\"",
        "CALLBACK: \"${CALLBACK}\"",
        "DATA_DIR: \"./data\"",
        "API_BASE: \"https://api.example.test\"",
    ] {
        assert!(written.contains(line), "{line}: {written}");
    }
    for said in [
        "kept the value of REGION as written",
        "kept the value of LOG_FORMAT as written",
        "set API_KEY in the host environment",
        "set ACCOUNT in the host environment",
    ] {
        assert!(stdout.contains(said), "{said}: {stdout}");
    }
    // init --check names each referenced variable this environment lacks, by name.
    let check = |env: &[(&str, &str)]| {
        let mut command = Command::new(exe());
        command
            .arg("--core")
            .arg(core.root())
            .args(["init", "--check"])
            .env_remove("API_KEY")
            .env_remove("ACCOUNT")
            .env_remove("DSN");
        for name in [
            "SMTP_PASS",
            "MYSQL_PWD",
            "MSSQL_CONN",
            "WALLET_MNEMONIC",
            "WEBHOOK_URL",
            "CALLBACK",
        ] {
            command.env(name, "set");
        }
        for (k, v) in env {
            command.env(k, v);
        }
        let out = command.stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success());
        text(&out.stderr)
    };
    let warned = check(&[]);
    for name in ["API_KEY", "ACCOUNT", "DSN"] {
        assert!(
            warned.contains(&format!("env.{name} references {name}, which is not set")),
            "{warned}"
        );
    }
    assert!(!warned.contains("REGION"), "{warned}");
    let warned = check(&[("API_KEY", "x-value"), ("ACCOUNT", "y"), ("DSN", "z")]);
    assert!(
        !warned.contains("not set") && !warned.contains("x-value"),
        "{warned}"
    );
}
