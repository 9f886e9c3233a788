//! Confined stdio servers (`sandbox:`): a probe server tries each class of escape at
//! start (reads of the host's secret stores by absolute path, through a symlink and
//! through `..`; the runtime home outside its own directory; writes outside the
//! workspace and into another server's home; direct sockets; requests through the
//! egress proxy that the URL policy refuses; the runtime's environment), records what
//! happened in the workspace, and then serves: confinement keeps the server working.

mod common;

use std::path::Path;

use common::{Core, Harness, Recorder, clean_turn, exe, harness_with};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The connect preview `server` was approved with, as a terminal shows it.
fn preview_of(h: &Harness, server: &str) -> String {
    h.approver
        .requests()
        .into_iter()
        .find(|r| r.server == server)
        .map(|r| r.preview.render())
        .unwrap_or_default()
}

/// A shell probe: one `NAME allowed|denied` line per attempt into `probe.txt` in the
/// workspace (its cwd), then the demo server.
fn probe(checks: &[(&str, String)]) -> String {
    let mut script = String::from(": > probe.txt\n");
    for (name, attempt) in checks {
        script.push_str(&format!(
            "if ( {attempt} ) >/dev/null 2>&1; then echo '{name} allowed' >> probe.txt; else echo '{name} denied' >> probe.txt; fi\n"
        ));
    }
    script.push_str(&format!("exec '{}' demo-server\n", exe()));
    script
}

/// The directory of the demo binary, as a YAML string: what a shell probe that execs
/// it must be allowed to read.
fn bin_dir() -> String {
    serde_json::to_string(Path::new(exe()).parent().unwrap()).unwrap()
}

fn results(workspace: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(workspace.join("probe.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(name, verdict)| (name.to_string(), verdict.to_string()))
        .collect()
}

#[tokio::test]
async fn a_confined_server_reads_and_writes_only_what_it_may_and_still_works() {
    // The operator's home, with secret stores, beside the workspace.
    let outside = tempfile::tempdir().unwrap();
    let secrets = outside.path().join("operator");
    for (dir, file) in [
        (".ssh", "id_ed25519"),
        (".aws", "credentials"),
        (".kube", "config"),
        (".config/gcloud", "credentials.db"),
    ] {
        std::fs::create_dir_all(secrets.join(dir)).unwrap();
        std::fs::write(secrets.join(dir).join(file), "canary-secret").unwrap();
    }
    std::fs::write(secrets.join(".netrc"), "machine x password canary").unwrap();
    let core = Core::new().grant_servers(&["probe", "other"]);
    let workspace = core.root();
    std::os::unix::fs::symlink(secrets.join(".ssh/id_ed25519"), workspace.join("link")).unwrap();
    let h = harness_with(Recorder::allow(), |c| c).await;
    let home = h.home.path().to_path_buf();
    std::fs::create_dir_all(home.join("logs")).unwrap();
    std::fs::write(home.join("logs/mcp-stderr.log"), "runtime log").unwrap();
    let s = |p: &Path| p.display().to_string();
    // The workspace's parent, reached with `..` from inside it.
    let up = format!(
        "../{}/operator/.aws/credentials",
        outside
            .path()
            .strip_prefix(workspace.parent().unwrap())
            .map(s)
            .unwrap_or_else(|_| s(outside.path()))
    );
    let checks = vec![
        (
            "read_ssh",
            format!("cat '{}'", s(&secrets.join(".ssh/id_ed25519"))),
        ),
        (
            "read_aws",
            format!("cat '{}'", s(&secrets.join(".aws/credentials"))),
        ),
        (
            "read_kube",
            format!("cat '{}'", s(&secrets.join(".kube/config"))),
        ),
        (
            "read_gcloud",
            format!(
                "cat '{}'",
                s(&secrets.join(".config/gcloud/credentials.db"))
            ),
        ),
        (
            "read_netrc",
            format!("cat '{}'", s(&secrets.join(".netrc"))),
        ),
        ("list_operator_home", format!("ls '{}'", s(&secrets))),
        ("read_through_link", "cat ./link".to_string()),
        ("read_through_dotdot", format!("cat '{up}'")),
        (
            "read_runtime_log",
            format!("cat '{}'", s(&home.join("logs/mcp-stderr.log"))),
        ),
        ("list_runtime_home", format!("ls '{}'", s(&home))),
        (
            "write_outside",
            format!("echo x > '{}'", s(&secrets.join("planted"))),
        ),
        (
            "write_other_home",
            format!("echo x > '{}'", s(&home.join("sandbox/other/home/planted"))),
        ),
        ("write_workspace", "echo x > ./written".to_string()),
        ("write_own_home", "echo x > \"$HOME/written\"".to_string()),
        ("write_tmp", "echo x > \"$TMPDIR/written\"".to_string()),
        (
            "read_system",
            "cat /etc/hostname || cat /etc/passwd".to_string(),
        ),
    ];
    let script = probe(&checks);
    core.write(
        "probe",
        &format!(
            "command: sh\nargs: [-c, {}]\nsandbox:\n  filesystem: {{write: [\".\"], read: [{}]}}\n  network: none\n",
            serde_json::to_string(&script).unwrap(),
            bin_dir()
        ),
    );
    core.write(
        "other",
        &format!(
            "command: {}\nargs: [demo-server]\nsandbox: {{network: none}}\n",
            serde_json::to_string(exe()).unwrap()
        ),
    );
    let (session, catalog) = common::open(&h.runtime, core.spec()).await;
    assert!(
        catalog.diagnostics().is_empty(),
        "{:?}",
        catalog.diagnostics()
    );
    // The confined process runs without core dumps and with a bound on open files.
    let pid = session
        .servers()
        .await
        .into_iter()
        .find_map(|s| match s.state {
            demiurge_mcp::actors::ServerState::Connected { pid, .. } if s.server == "other" => pid,
            _ => None,
        })
        .expect("the confined demo server's pid");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let row = |name: &str| -> Vec<String> {
        let line = limits
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default();
        line[name.len()..]
            .split_whitespace()
            .take(2)
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("Max core file size"), ["0", "0"], "{limits}");
    let files = row("Max open files");
    assert!(
        files
            .iter()
            .all(|v| v.parse::<u64>().is_ok_and(|n| n <= 8192)),
        "{limits}"
    );
    let seen = results(&workspace);
    assert_eq!(seen.len(), checks.len(), "{seen:?}");
    for (name, verdict) in &seen {
        let expected = if name.starts_with("write_workspace")
            || name.starts_with("write_own_home")
            || name.starts_with("write_tmp")
            || name.starts_with("read_system")
        {
            "allowed"
        } else {
            "denied"
        };
        assert_eq!(verdict, expected, "{name}: {seen:?}");
    }
    assert!(!secrets.join("planted").exists());
    // Confined, the server works: its tools are listed and answer.
    let result = catalog
        .call("probe__echo", serde_json::json!({"message": "confined"}))
        .await
        .unwrap();
    assert_eq!(
        result.view(demiurge_mcp::redact::View::Operator).content,
        "confined"
    );
    // The preview said so.
    let preview = preview_of(&h, "probe");
    assert!(
        preview.contains("sandbox: confined: writes \".\" (the workspace includes .git"),
        "{preview}"
    );
    h.finish().await;
}

#[tokio::test]
async fn network_none_refuses_ip_sockets_and_every_sandbox_refuses_tracing_and_namespaces() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let python = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !python {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED: the TCP probe needs python3");
        return;
    }
    let connect =
        format!("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'");
    let py = |code: &str| format!("python3 -c '{code}'");
    let checks = vec![
        ("tcp_loopback", connect.clone()),
        (
            "udp_socket",
            py("import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"),
        ),
        (
            "packet_socket",
            py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)"),
        ),
        (
            "ptrace_runtime",
            py(
                "import ctypes, os, sys; sys.exit(ctypes.CDLL(None).ptrace(16, os.getppid(), 0, 0))",
            ),
        ),
        (
            "unix_socket",
            py("import socket; socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)"),
        ),
        (
            "new_user_namespace",
            py("import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000))"),
        ),
        (
            "threads_still_work",
            py("import threading; t = threading.Thread(target=print); t.start(); t.join()"),
        ),
        // Families no network namespace holds (vsock reaches the hypervisor).
        (
            "vsock_socket",
            py("import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)"),
        ),
        // The runtime's limits are not the server's to set; its own still are.
        (
            "limit_the_runtime",
            py("import os, resource; resource.prlimit(os.getppid(), resource.RLIMIT_CORE, (0, 0))"),
        ),
        (
            "limit_itself",
            py("import resource; resource.prlimit(0, resource.RLIMIT_CORE, (0, 0))"),
        ),
        ("etc_shadow", "cat /etc/shadow".to_string()),
        ("etc_hosts", "cat /etc/hosts".to_string()),
    ];
    let core = Core::new().grant_servers(&["none", "host"]);
    let declare = |network: &str| {
        format!(
            "command: sh\nargs: [-c, {}]\nsandbox: {{network: {network}, filesystem: {{read: [{}]}}}}\n",
            serde_json::to_string(
                &probe(&checks).replace("probe.txt", &format!("probe-{network}.txt"))
            )
            .unwrap(),
            bin_dir()
        )
    };
    core.write("none", &declare("none"));
    core.write("host", &declare("host"));
    let h = harness_with(Recorder::allow(), |c| c).await;
    clean_turn(&h, &core).await;
    let read = |network: &str| {
        std::fs::read_to_string(core.root().join(format!("probe-{network}.txt")))
            .unwrap_or_default()
    };
    let verdicts =
        |network: &str| -> Vec<String> { read(network).lines().map(str::to_string).collect() };
    assert_eq!(
        verdicts("none"),
        [
            "tcp_loopback denied",
            "udp_socket denied",
            "packet_socket denied",
            "ptrace_runtime denied",
            "unix_socket denied",
            "new_user_namespace denied",
            "threads_still_work allowed",
            "vsock_socket denied",
            "limit_the_runtime denied",
            "limit_itself allowed",
            "etc_shadow denied",
            "etc_hosts allowed"
        ]
    );
    // `network: host` reaches the network; the process rules hold all the same.
    assert_eq!(
        verdicts("host"),
        [
            "tcp_loopback allowed",
            "udp_socket allowed",
            "packet_socket denied",
            "ptrace_runtime denied",
            "unix_socket denied",
            "new_user_namespace denied",
            "threads_still_work allowed",
            "vsock_socket denied",
            "limit_the_runtime denied",
            "limit_itself allowed",
            "etc_shadow denied",
            "etc_hosts allowed"
        ]
    );
    let preview = preview_of(&h, "host");
    assert!(preview.contains("network unconfined (host)"), "{preview}");
    h.finish().await;
    drop(listener);
}

#[test]
fn an_undeclared_or_off_sandbox_is_shown_as_unconfined_and_bad_ones_are_load_errors() {
    let core = Core::new()
        .grant_servers(&["plain", "off", "bad", "web"])
        .server("plain", "command: x\n")
        .server("off", "command: x\nsandbox: off\n")
        .server("bad", "command: x\nsandbox: {network: everything}\n")
        .server(
            "web",
            "transport: streamable_http\nurl: https://x.example.test/mcp\nsandbox: off\n",
        );
    let report = demiurge_mcp::core::load_report(&core.root());
    let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
    assert!(
        errors.iter().any(|e| e.contains("bad.yaml")
            && e.contains("sandbox.network")
            && e.contains("must be `proxy`, `none` or `host`")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("web.yaml") && e.contains("only for `transport: stdio`")),
        "{errors:?}"
    );
    let shown = |id: &str| {
        let d = report
            .core
            .declarations
            .iter()
            .find(|d| d.server_id == id)
            .unwrap();
        demiurge_mcp::authority::ConnectPreview::new(
            d,
            demiurge_mcp::core::ApprovalPolicy::Prompt,
            None,
            &[],
        )
        .render()
    };
    let plain = shown("plain");
    assert!(
        plain.contains("sandbox: confined: writes \".\"")
            && plain.contains("network through the egress proxy")
            && plain.contains("(the default;"),
        "{plain}"
    );
    assert!(shown("off").contains("sandbox: off: the server runs with your authority"));
}

#[tokio::test]
async fn a_host_default_confines_undeclared_servers_and_a_floor_refuses_unconfined_ones() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "canary").unwrap();
    let reads = probe(&[("read_outside", format!("cat '{}'", secret.display()))]);
    let core = Core::new()
        .grant_servers(&["plain", "off"])
        .server(
            "plain",
            &format!(
                "command: sh\nargs: [-c, {}]\n",
                serde_json::to_string(&reads).unwrap()
            ),
        )
        .server(
            "off",
            &format!(
                "command: {}\nargs: [demo-server]\nsandbox: off\n",
                serde_json::to_string(exe()).unwrap()
            ),
        );
    // The default: an undeclared server runs confined (with the demo binary's
    // directory readable, as a declaration would say), and its preview says so.
    let default = demiurge_mcp::sandbox::Sandbox::Confined {
        write: vec![".".into()],
        read: vec![Path::new(exe()).parent().unwrap().display().to_string()],
        deny: vec![],
        network: demiurge_mcp::sandbox::Network::None,
    };
    let h = harness_with(Recorder::allow(), move |mut c| {
        c.sandbox_default = Some(default);
        c
    })
    .await;
    clean_turn(&h, &core).await;
    assert_eq!(
        results(&core.root()),
        [("read_outside".to_string(), "denied".to_string())]
    );
    let shown = |server: &str| preview_of(&h, server);
    assert!(
        shown("plain").contains("sandbox: confined"),
        "{}",
        shown("plain")
    );
    assert!(shown("off").contains("sandbox: off"), "{}", shown("off"));
    h.finish().await;
    // The floor: nothing unconfined starts, and nobody is asked about it.
    let h = harness_with(Recorder::allow(), |mut c| {
        c.require_sandbox = true;
        c
    })
    .await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let mut denied: Vec<(&str, &str)> = catalog
        .denied()
        .iter()
        .map(|d| (d.server.as_str(), d.reason.as_str()))
        .collect();
    denied.sort();
    assert_eq!(denied.len(), 2, "{denied:?}");
    assert!(
        denied.iter().all(|(_, r)| r.contains("only confined")),
        "{denied:?}"
    );
    assert!(h.approver.requests().is_empty());
    h.finish().await;
}

#[tokio::test]
async fn a_declared_tree_that_a_link_moves_outside_the_workspace_fails_closed() {
    let outside = tempfile::tempdir().unwrap();
    let core = Core::new().grant_servers(&["linked"]).server(
        "linked",
        &format!(
            "command: {}\nargs: [demo-server]\nsandbox: {{filesystem: {{write: [data]}}}}\n",
            serde_json::to_string(exe()).unwrap()
        ),
    );
    // `data` is a link out of the workspace (a core could commit one; a server that
    // can write the workspace could plant one).
    std::os::unix::fs::symlink(outside.path(), core.root().join("data")).unwrap();
    let h = harness_with(Recorder::allow(), |c| c).await;
    let (_session, catalog) = common::open(&h.runtime, core.spec()).await;
    let message = &catalog.diagnostics()[0].message;
    assert!(
        message
            .contains("sandbox.filesystem.write names a path that resolves outside the workspace")
            && message.contains("was not started"),
        "{message}"
    );
    assert!(catalog.tools().is_empty());
    h.finish().await;
}

/// A loopback HTTP server answering every request with `hello`; its port.
fn hello_server(bind: &str) -> u16 {
    let listener = std::net::TcpListener::bind(bind).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut stream in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = stream.read(&mut head);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    port
}

#[tokio::test]
async fn network_proxy_reaches_only_what_the_url_policy_allows_and_reports_each_refusal() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .map_or(true, |o| !o.status.success())
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED: the HTTP probe needs curl");
        return;
    }
    let port = hello_server("127.0.0.1:0");
    let port6 = std::net::TcpListener::bind("[::1]:0")
        .map(|l| {
            let p = l.local_addr().unwrap().port();
            std::mem::forget(l);
            p
        })
        .unwrap_or(1);
    let unix = tempfile::tempdir().unwrap();
    let socket = unix.path().join("agent.sock");
    let _unix_listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let curl = |args: &str| format!("curl -sf --max-time 5 {args} | grep -q hello");
    let checks = vec![
        // Direct sockets reach nothing: the namespace has only its own loopback.
        (
            "direct_loopback",
            curl(&format!("--noproxy '*' http://127.0.0.1:{port}/")),
        ),
        (
            "direct_ipv6",
            curl(&format!("--noproxy '*' -g 'http://[::1]:{port6}/'")),
        ),
        (
            "host_unix_socket",
            curl(&format!("--unix-socket '{}' http://x/", socket.display())),
        ),
        // Through the proxy: a trusted address and a name the runtime resolves to it.
        ("proxy_trusted", curl(&format!("http://127.0.0.1:{port}/"))),
        ("proxy_name", curl(&format!("http://allowed.test:{port}/"))),
        // Refused by the policy before any socket: untrusted loopback, a name that
        // resolves to a private address, metadata, a CONNECT to a private address.
        (
            "proxy_untrusted",
            curl(&format!("http://127.0.0.2:{port}/")),
        ),
        (
            "proxy_rebinding",
            curl(&format!("http://rebind.test:{port}/")),
        ),
        (
            "proxy_metadata",
            curl("http://169.254.169.254/latest/meta-data/"),
        ),
        ("connect_private", curl("https://10.1.2.3:8443/")),
        // The runtime's environment and memory are another domain's.
        ("runtime_environ", "cat /proc/$PPID/environ".to_string()),
        ("runtime_stat", "grep -q . /proc/$PPID/stat".to_string()),
    ];
    let core = Core::new().grant_servers(&["egress"]);
    core.write(
        "egress",
        &format!(
            "command: sh\nargs: [-c, {}]\nsandbox: {{network: proxy, filesystem: {{read: [{}]}}}}\n",
            serde_json::to_string(&probe(&checks)).unwrap(),
            bin_dir()
        ),
    );
    let resolver = demiurge_mcp::net::StaticResolver::new();
    resolver.set("allowed.test", ["127.0.0.1".parse().unwrap()]);
    resolver.set("rebind.test", ["10.9.8.7".parse().unwrap()]);
    let h = harness_with(Recorder::allow(), move |mut c| {
        c.url_policy =
            demiurge_mcp::net::UrlPolicy::with_trusted(["127.0.0.1/32".parse().unwrap()]);
        c.resolver = std::sync::Arc::new(resolver);
        c
    })
    .await;
    clean_turn(&h, &core).await;
    let verdict = |v: &str| v.to_string();
    assert_eq!(
        results(&core.root()),
        [
            ("direct_loopback", "denied"),
            ("direct_ipv6", "denied"),
            ("host_unix_socket", "denied"),
            ("proxy_trusted", "allowed"),
            ("proxy_name", "allowed"),
            ("proxy_untrusted", "denied"),
            ("proxy_rebinding", "denied"),
            ("proxy_metadata", "denied"),
            ("connect_private", "denied"),
            ("runtime_environ", "denied"),
            ("runtime_stat", "allowed"),
        ]
        .map(|(n, v)| (n.to_string(), verdict(v)))
    );
    // Every decision is an event of the egress phase; every refusal a sandbox denial.
    let decisions: Vec<(bool, String, String)> = h
        .sink
        .of_type("mcp.url_decision")
        .into_iter()
        .filter_map(|e| match e.kind {
            demiurge_mcp::events::EventKind::UrlDecision {
                phase: demiurge_mcp::events::UrlPhase::Egress,
                server,
                decision,
            } if server == "egress" => Some((
                decision.allowed,
                decision.hostname,
                decision.reason.to_string(),
            )),
            _ => None,
        })
        .collect();
    let expected = [
        (true, "127.0.0.1", "allowed"),
        (true, "allowed.test", "allowed"),
        (false, "127.0.0.2", "loopback"),
        (false, "rebind.test", "private"),
        (false, "169.254.169.254", "metadata"),
        (false, "10.1.2.3", "private"),
    ];
    assert_eq!(
        decisions,
        expected.map(|(a, host, reason)| (a, host.to_string(), reason.to_string())),
    );
    let denials: Vec<String> = h
        .sink
        .of_type("mcp.sandbox_denied")
        .into_iter()
        .map(|e| serde_json::to_string(&e).unwrap())
        .collect();
    assert_eq!(denials.len(), 4, "{denials:?}");
    assert!(
        denials[0].contains("\"kind\":\"egress\"") && denials[0].contains("loopback"),
        "{denials:?}"
    );
    let preview = preview_of(&h, "egress");
    assert!(
        preview.contains("network through the egress proxy"),
        "{preview}"
    );
    h.finish().await;
}

#[tokio::test]
async fn denied_paths_inside_the_workspace_are_hidden_and_the_rest_stays() {
    let core = Core::new().grant_servers(&["masked"]);
    let root = core.root();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::write(root.join("secrets/token"), "canary-token").unwrap();
    std::fs::write(root.join("private.txt"), "canary-private").unwrap();
    std::fs::write(root.join("public.txt"), "shared").unwrap();
    let checks = vec![
        (
            "read_denied_dir",
            "grep -q canary secrets/token".to_string(),
        ),
        ("list_denied_dir", "ls secrets".to_string()),
        ("write_denied_dir", "echo x > secrets/new".to_string()),
        ("read_denied_file", "grep -q canary private.txt".to_string()),
        ("write_denied_file", "echo x > private.txt".to_string()),
        (
            "read_through_a_link",
            "ln -s secrets/token via && grep -q canary via".to_string(),
        ),
        ("read_public", "grep -q shared public.txt".to_string()),
        ("write_workspace", "echo x > written.txt".to_string()),
    ];
    core.write(
        "masked",
        &format!(
            "command: sh\nargs: [-c, {}]\nsandbox: {{network: none, filesystem: {{read: [{}], deny: [secrets, private.txt]}}}}\n",
            serde_json::to_string(&probe(&checks)).unwrap(),
            bin_dir()
        ),
    );
    let h = harness_with(Recorder::allow(), |c| c).await;
    clean_turn(&h, &core).await;
    let verdicts: Vec<(String, String)> = results(&root);
    let expected = [
        ("read_denied_dir", "denied"),
        ("list_denied_dir", "denied"),
        ("write_denied_dir", "denied"),
        ("read_denied_file", "denied"),
        ("write_denied_file", "denied"),
        ("read_through_a_link", "denied"),
        ("read_public", "allowed"),
        ("write_workspace", "allowed"),
    ]
    .map(|(n, v)| (n.to_string(), v.to_string()));
    assert_eq!(verdicts, expected);
    // The operator's view is untouched.
    assert_eq!(
        std::fs::read_to_string(root.join("private.txt")).unwrap(),
        "canary-private"
    );
    let preview = preview_of(&h, "masked");
    assert!(
        preview.contains("hides \"secrets\", \"private.txt\""),
        "{preview}"
    );
    h.finish().await;
}

/// A fork bomb in a confined server stops at the process bound (`RLIMIT_NPROC`,
/// counted in the server's own user namespace): the shell counts the processes it
/// could start into the workspace, and the start fails. The kernel does not apply
/// the bound to uid 0, so as root the command runs as `nobody` (`setpriv`); nothing
/// the bomb started outlives the command.
#[test]
fn a_fork_bomb_stops_at_the_process_bound() {
    use std::os::unix::fs::chown;
    const NOBODY: u32 = 65534;
    let root = rustix::process::geteuid().is_root();
    let setpriv = Path::new("/usr/bin/setpriv");
    if root && !setpriv.exists() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: as root the fork-bomb test needs setpriv to run as nobody"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core");
    let home = dir.path().join("home");
    std::fs::create_dir_all(core.join("agent/mcp")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        core.join("agent.yaml"),
        "name: bomb\ncapabilities:\n  defaults:\n    \"mcp.connect:bomb\": {scope: core}\n    \"mcp.call:bomb\": {scope: core}\n",
    )
    .unwrap();
    // Twice the bound; each child's stdio elsewhere, so that the runtime hears the
    // shell's end at once.
    let script = format!(
        "sed -n 's/^Max processes *\\([0-9]*\\).*/\\1/p' /proc/self/limits > bound; n=0; while [ $n -lt {} ]; do sleep 60 </dev/null >/dev/null 2>&1 & n=$((n+1)); echo $n > started; done; exec '{}' demo-server",
        2 * demiurge_mcp::sandbox::launcher::MAX_PROCESSES,
        exe()
    );
    std::fs::write(
        core.join("agent/mcp/bomb.yaml"),
        format!(
            "command: /bin/sh\nargs: [\"-c\", {}]\nsandbox: {{filesystem: {{read: [{}]}}}}\napproval_policy: auto\n",
            serde_json::to_string(&script).unwrap(),
            bin_dir()
        ),
    )
    .unwrap();
    let mut command = if root {
        for path in [
            dir.path(),
            &core,
            &core.join("agent"),
            &core.join("agent/mcp"),
            &home,
        ]
        .into_iter()
        .map(Path::to_path_buf)
        .chain(["agent.yaml", "agent/mcp/bomb.yaml"].map(|f| core.join(f)))
        {
            chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let mut c = std::process::Command::new(setpriv);
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            exe(),
        ]);
        c
    } else {
        std::process::Command::new(exe())
    };
    let out = command
        .arg("--core")
        .arg(&core)
        .arg("--home")
        .arg(&home)
        .args(["--yes", "tools"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let started: u64 = std::fs::read_to_string(core.join("started"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    let bound = std::fs::read_to_string(core.join("bound")).unwrap_or_default();
    let most = demiurge_mcp::sandbox::launcher::MAX_PROCESSES;
    assert_eq!(bound.trim(), most.to_string(), "the bound in force: {text}");
    // The shell and its children, all but a few that were still being reaped.
    assert!(
        (most - 8..most).contains(&started),
        "the bomb started {started} processes: {text}"
    );
    assert!(
        text.contains("diagnostic: bomb") && text.to_lowercase().contains("fork"),
        "the start failed for want of a process: {text}"
    );
    let left = common::processes_with_env_prefix(&format!("HOME={}/sandbox/", home.display()));
    assert!(left.is_empty(), "{left:?} outlived the command");
}

#[tokio::test]
async fn a_launcher_made_ahead_becomes_the_next_confined_server_and_ends_with_the_runtime() {
    let yaml = format!(
        "command: {}\nargs: [demo-server]\nsandbox: {{filesystem: {{read: [{}]}}}}\n",
        serde_json::to_string(exe()).unwrap(),
        bin_dir()
    );
    let core = Core::new().grant_servers(&["a"]).server("a", &yaml);
    // Nothing is made before a confined start needs it.
    let h = harness_with(Recorder::allow(), |c| c).await;
    let me = h.home.path();
    assert!(common::launchers_of(me).is_empty());
    let first = common::pid_of(&clean_turn(&h, &core).await, "a__whoami").await;
    // Once that start is done, one launcher waits for the next.
    let mut waiting = Vec::new();
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || {
            waiting = common::launchers_of(me);
            waiting.len() == 1
        })
        .await,
        "{waiting:?}"
    );
    assert!(!waiting.contains(&first));
    // It holds nothing of any server: no environment at all.
    let environ = std::fs::read(format!("/proc/{}/environ", waiting[0])).unwrap();
    assert!(environ.is_empty(), "{}", String::from_utf8_lossy(&environ));
    // The next session's server is that launcher, confined like the first.
    let catalog = clean_turn(&h, &core).await;
    let second = common::pid_of(&catalog, "a__whoami").await;
    assert_eq!(second, waiting[0]);
    let result = catalog
        .call("a__env_names", serde_json::json!({}))
        .await
        .unwrap();
    let names = result
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert!(names.contains("HTTPS_PROXY"), "{names}");
    // In the server's own working directory (the launcher was made in `/`).
    let cwd = catalog.call("a__cwd", serde_json::json!({})).await.unwrap();
    let cwd = cwd
        .view(demiurge_mcp::redact::View::Operator)
        .content
        .clone();
    assert_eq!(
        Path::new(cwd.trim()).canonicalize().unwrap(),
        core.root().canonicalize().unwrap()
    );
    // A waiting launcher that was killed, or stopped, is not handed a server: the
    // start makes one of its own, at once.
    drop(catalog);
    for signal in [Signal::SIGKILL, Signal::SIGSTOP] {
        let mut waiting = Vec::new();
        assert!(
            common::eventually(std::time::Duration::from_secs(10), || {
                waiting = common::launchers_of(me);
                waiting.len() == 1
            })
            .await,
            "{signal}: {waiting:?}"
        );
        kill(Pid::from_raw(waiting[0] as i32), signal).unwrap();
        let started = std::time::Instant::now();
        let catalog = clean_turn(&h, &core).await;
        let pid = common::pid_of(&catalog, "a__whoami").await;
        assert_ne!(pid, waiting[0], "{signal}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(8),
            "{signal}: {:?}",
            started.elapsed()
        );
        assert!(
            common::eventually(std::time::Duration::from_secs(5), || !common::alive(
                waiting[0]
            ))
            .await,
            "{signal}: the launcher taken out of use is gone"
        );
    }
    // Shutting down ends the launcher made for a start that will not come.
    assert!(
        common::eventually(std::time::Duration::from_secs(10), || {
            common::launchers_of(me).len() == 1
        })
        .await
    );
    h.finish().await;
    assert!(
        common::launchers_of(me).is_empty(),
        "{:?}",
        common::launchers_of(me)
    );

    // A host that wants no process waiting gets none.
    let h = harness_with(Recorder::allow(), |mut c| {
        c.sandbox_launch_ahead = false;
        c
    })
    .await;
    clean_turn(&h, &core).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(common::launchers_of(h.home.path()).is_empty());
    h.finish().await;
}
