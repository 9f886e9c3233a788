//! `demiurge resources|read|prompts|prompt`: what servers offer beside tools, one turn
//! each. Everything a server wrote is escaped before the terminal sees it.

use demiurge_mcp::TurnCatalog;
use serde_json::{Value, json};

use super::{Cli, start_runtime, summary_line, t};

/// One turn of a fresh session, `with` it, then shutdown.
async fn with_turn<T>(
    cli: &Cli,
    with: impl AsyncFnOnce(&TurnCatalog) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    with_turn_for(cli, None, with).await
}

/// [`with_turn`] for `servers` only (every server when `None`): only they start.
async fn with_turn_for<T>(
    cli: &Cli,
    servers: Option<&[String]>,
    with: impl AsyncFnOnce(&TurnCatalog) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let runtime = start_runtime(cli).await?;
    let outcome = async {
        let (session, _) = runtime.start_session(cli.session_spec()).await?;
        let catalog = match servers {
            Some(servers) => session.prepare_turn_for(servers).await?,
            None => session.prepare_turn().await?,
        };
        super::tools::print_problems(&catalog, true);
        with(&catalog).await
    }
    .await;
    runtime.shutdown().await;
    outcome
}

/// `demiurge resources [--json]`.
pub(crate) async fn list_resources(cli: &Cli, as_json: bool) -> anyhow::Result<u8> {
    with_turn(cli, async |catalog| {
        if as_json {
            let out = json!({
                "resources": catalog.resources().collect::<Vec<_>>(),
                "templates": catalog.resource_templates().collect::<Vec<_>>(),
            });
            super::print_json(&out, true);
        } else {
            print_resources(catalog);
        }
        Ok(0)
    })
    .await
}

/// Resources and templates for a person.
pub(crate) fn print_resources(catalog: &TurnCatalog) {
    let mut rows = Vec::new();
    for r in catalog.resources() {
        let what = r.description.as_deref().unwrap_or(&r.name);
        rows.push(vec![
            t(&r.server).into_owned(),
            t(&r.uri).into_owned(),
            t(summary_line(what)).into_owned(),
        ]);
    }
    for r in catalog.resource_templates() {
        let what = r.description.as_deref().unwrap_or(&r.name);
        rows.push(vec![
            t(&r.server).into_owned(),
            t(&r.uri_template).into_owned(),
            format!("(template) {}", t(summary_line(what))),
        ]);
    }
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    if rows.is_empty() {
        println!("no resources");
    }
}

/// `demiurge read SERVER URI [--json]`.
pub(crate) async fn read(cli: &Cli, server: &str, uri: &str, as_json: bool) -> anyhow::Result<u8> {
    // Only SERVER starts; a server the core does not declare fails at once.
    let (ids, _) = super::call::owners_of(cli, server);
    if !ids.iter().any(|id| id == server) {
        let hint = demiurge_mcp::text::closest(server, ids.iter().map(String::as_str))
            .map(|id| format!("; did you mean `{}`?", t(id)))
            .unwrap_or_default();
        eprintln!("error: no enabled server `{}` is declared{hint}", t(server));
        return Ok(1);
    }
    let only = [server.to_string()];
    with_turn_for(cli, Some(&only), async |catalog| {
        Ok(match catalog.read_resource(server, uri).await {
            Ok(result) => {
                super::call::print_result(&result, as_json);
                u8::from(result.is_error)
            }
            Err(demiurge_mcp::CallError::UnknownTool(_)) => {
                let ids = catalog.servers().map(|s| s.server.as_str());
                let hint = demiurge_mcp::text::closest(server, ids)
                    .map(|id| format!("; did you mean `{}`?", t(id)))
                    .unwrap_or_default();
                eprintln!(
                    "error: no server `{}` is connected this turn{hint}",
                    t(server)
                );
                1
            }
            Err(refused) => {
                eprintln!("error: {}", t(&refused.to_string()));
                1
            }
        })
    })
    .await
}

/// `demiurge prompts [--json]`.
pub(crate) async fn list_prompts(cli: &Cli, as_json: bool) -> anyhow::Result<u8> {
    with_turn(cli, async |catalog| {
        if as_json {
            let prompts: Vec<_> = catalog.prompts().collect();
            super::print_json(&json!({ "prompts": prompts }), true);
        } else {
            print_prompts(catalog);
        }
        Ok(0)
    })
    .await
}

/// Prompts for a person, with their arguments (`name*` is required).
pub(crate) fn print_prompts(catalog: &TurnCatalog) {
    let mut rows = Vec::new();
    for p in catalog.prompts() {
        let arguments: Vec<String> = p
            .arguments
            .iter()
            .map(|a| format!("{}{}", a.name, if a.required { "*" } else { "" }))
            .collect();
        let what = p.description.as_deref().unwrap_or_default();
        rows.push(vec![
            t(&p.name).into_owned(),
            format!("({})", t(&arguments.join(", "))),
            t(summary_line(what)).into_owned(),
        ]);
    }
    for line in super::aligned(&rows) {
        println!("{line}");
    }
    if rows.is_empty() {
        println!("no prompts");
    }
}

/// `demiurge prompt NAME [--args JSON] [--json]`.
pub(crate) async fn prompt(cli: &Cli, name: &str, args: &str, as_json: bool) -> anyhow::Result<u8> {
    let Ok(arguments @ Value::Object(_)) = serde_json::from_str::<Value>(args) else {
        eprintln!(
            "error: --args must be a JSON object, for example --args '{{\"name\": \"Ada\"}}'"
        );
        return Ok(super::USAGE);
    };
    // Only the servers that can own NAME start; a name none can own fails at once.
    let (ids, owners) = super::call::owners_of(cli, name);
    if owners.is_empty() && !ids.is_empty() {
        let prefix = name.split_once("__").map_or(name, |(p, _)| p);
        let hint = demiurge_mcp::text::closest(prefix, ids.iter().map(String::as_str))
            .map(|id| format!("; did you mean a prompt of `{}` (`{}__...`)?", t(id), t(id)))
            .unwrap_or_else(|| "; run `demiurge prompts` to list them".into());
        eprintln!("error: unknown prompt `{}`{hint}", t(name));
        return Ok(1);
    }
    let owners = (!owners.is_empty()).then_some(owners);
    with_turn_for(cli, owners.as_deref(), async |catalog| {
        Ok(match catalog.get_prompt(name, arguments).await {
            Ok(got) if as_json => {
                super::print_json(&got, true);
                0
            }
            Ok(got) => {
                for message in &got.messages {
                    let text = message
                        .content
                        .get("text")
                        .and_then(Value::as_str)
                        .map_or_else(|| message.content.to_string(), str::to_string);
                    if text.contains('\n') {
                        println!(
                            "{}:\n{}",
                            t(&message.role),
                            demiurge_mcp::text::indented(&text, "  ")
                        );
                    } else {
                        println!(
                            "{}: {}",
                            t(&message.role),
                            demiurge_mcp::text::indented(&text, "")
                        );
                    }
                }
                0
            }
            Err(demiurge_mcp::CallError::UnknownTool(_)) => {
                let names: Vec<&str> = catalog.prompts().map(|p| p.name.as_str()).collect();
                let hint = demiurge_mcp::text::closest(name, names.iter().copied())
                    .map(|n| format!("; did you mean `{}`?", t(n)))
                    .unwrap_or_else(|| "; run `demiurge prompts` to list them".into());
                eprintln!("error: unknown prompt `{}`{hint}", t(name));
                1
            }
            Err(demiurge_mcp::CallError::ServerUnavailable { tool, server, .. }) => {
                // Its diagnostic or denial was printed with the turn's problems.
                eprintln!(
                    "error: `{}` is not available: server `{}` did not connect this turn (the reason is above)",
                    t(&tool),
                    t(&server)
                );
                1
            }
            Err(refused) => {
                eprintln!("error: {}", t(&refused.to_string()));
                1
            }
        })
    })
    .await
}
