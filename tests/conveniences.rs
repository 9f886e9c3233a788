//! What users of other hosts write in declarations: `transport: http`,
//! `${VAR:-default}`, `env_vars`, per-tool timeouts, `required: true`; and what an
//! unknown `${...}` form gets (a load error naming the field, never a literal).

mod common;

use std::time::{Duration, Instant};

use common::{Core, Recorder, demo, demo_fault, harness_with};
use demiurge_mcp::PrepareError;
use serde_json::json;

#[test]
fn other_hosts_spellings_load_and_unknown_reference_forms_do_not() {
    let core = Core::new()
        .server("http", "transport: http\nurl: https://mcp.example.test/mcp\n")
        .server(
            "defaults",
            &demo("env:\n  REGION: \"${REGION:-eu-west-1}\"\n  TOKEN: \"Bearer ${TOKEN}\"\nenv_vars: [HOME_DIR, API_KEY]\n"),
        )
        .server("vscode", &demo("env:\n  KEY: \"${input:api-key}\"\n"))
        .server("shellish", &demo("env:\n  KEY: \"${KEY:?missing}\"\n"))
        .server("unclosed", &demo("env:\n  KEY: \"${KEY\"\n"))
        .server(
            "header",
            "transport: http\nurl: https://mcp.example.test/mcp\nheaders:\n  Authorization: \"Bearer ${env:TOKEN}\"\n",
        )
        .server("twice", &demo("env:\n  API_KEY: x\nenv_vars: [API_KEY]\n"))
        .server("badname", &demo("env_vars: [\"not a name\"]\n"))
        .server("http_env_vars", "transport: http\nurl: https://mcp.example.test/mcp\nenv_vars: [X]\n")
        .server("badtimeout", &demo("tool_timeouts:\n  sleep: -1\n"));
    let loaded = demiurge_mcp::core::load(&core.root()).unwrap();
    let ids: Vec<&str> = loaded
        .declarations
        .iter()
        .map(|d| d.server_id.as_str())
        .collect();
    assert_eq!(ids, ["defaults", "http"]);
    assert_eq!(
        loaded.declarations[1].transport(),
        demiurge_mcp::core::TransportKind::StreamableHttp
    );
    let demiurge_mcp::core::Endpoint::Stdio { env, .. } = &loaded.declarations[0].endpoint else {
        panic!("stdio")
    };
    assert_eq!(env["HOME_DIR"], "${HOME_DIR}");
    assert_eq!(env["API_KEY"], "${API_KEY}");
    for (id, field) in [
        ("vscode", "env.KEY"),
        ("shellish", "env.KEY"),
        ("unclosed", "env.KEY"),
        ("header", "headers.Authorization"),
        ("twice", "env_vars.API_KEY"),
        ("badname", "env_vars"),
        ("http_env_vars", "env_vars"),
        ("badtimeout", "tool_timeouts.sleep"),
    ] {
        let broken = loaded
            .broken
            .iter()
            .find(|b| b.server_id == id)
            .unwrap_or_else(|| panic!("{id} loaded"));
        let errors: Vec<String> = broken.errors.iter().map(ToString::to_string).collect();
        let errors = errors.join("; ");
        assert!(errors.contains(field), "{id}: {errors}");
        for value in ["api-key", "missing", "env:TOKEN"] {
            assert!(!errors.contains(value), "{id} quotes a value: {errors}");
        }
    }
}

#[tokio::test]
async fn defaults_fill_in_tool_timeouts_bound_one_tool_and_required_servers_fail_the_turn() {
    let core = Core::new()
        .grant_servers(&["demo", "broken"])
        .server(
            "demo",
            &demo("approval_policy: auto\nenv:\n  REGION: \"${REGION:-eu-west-1}\"\n  SET: \"${SET:-unused}\"\ntimeout_seconds: 60\ntool_timeouts:\n  sleep: 1\n"),
        )
        .server("broken", &demo_fault("exit-at-start", "required: true\n"));
    let h = harness_with(Recorder::allow(), |c| {
        c.with_host_env(common::host_env(&[("SET", "from-host")]))
    })
    .await;
    let (session, _) = h.runtime.start_session(core.spec()).await.unwrap();
    match session.prepare_turn().await {
        Err(PrepareError::Required { server, reason }) => {
            assert_eq!(server, "broken");
            assert!(reason.contains("exited"), "{reason}");
        }
        other => panic!("a required server that fails must fail the turn: {other:?}"),
    }
    // Without it the turn works: defaults and host values, and the per-tool timeout.
    core.write("broken", &demo_fault("exit-at-start", ""));
    let catalog = session.prepare_turn().await.unwrap();
    // Every env value is redacted wherever the server repeats it; the debug view's
    // digest tells which value the server had.
    let read = |uri: &'static str| {
        let catalog = catalog.clone();
        async move {
            let r = catalog.read_resource("demo", uri).await.unwrap();
            r.view(demiurge_mcp::redact::View::Debug).content.clone()
        }
    };
    let digest = |v: &str| {
        use sha2::Digest;
        let hex: String = sha2::Sha256::digest(v.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        hex[..16].to_string()
    };
    // REGION is not in the host environment: its default; SET is: the host's value.
    assert_eq!(
        read("demo://env/REGION").await,
        format!("<redacted:REGION:{}>", digest("eu-west-1"))
    );
    assert_eq!(
        read("demo://env/SET").await,
        format!("<redacted:SET:{}>", digest("from-host"))
    );
    let started = Instant::now();
    let slept = catalog
        .call("demo__sleep", json!({"ms": 5000}))
        .await
        .unwrap();
    assert!(
        slept.is_error,
        "{:?}",
        slept.view(demiurge_mcp::redact::View::Operator)
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the 1 s tool timeout did not hold: {:?}",
        started.elapsed()
    );
    // Other tools keep the declaration's timeout.
    let echo = catalog
        .call("demo__echo", json!({"message": "ok"}))
        .await
        .unwrap();
    assert!(!echo.is_error);
    h.finish().await;
}
