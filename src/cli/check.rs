//! `demiurge init --check`: every declaration and every error, exit 0 valid, 1 invalid.

use demiurge_mcp::core;

use super::{Cli, t};

pub(crate) fn run(cli: &Cli) -> u8 {
    let report = core::load_report(&cli.core_dir());
    let grants = demiurge_mcp::authority::CapabilitySet::new(report.core.grants.iter().cloned());
    for d in &report.core.declarations {
        let mark = |cap: &str| {
            if grants.allows(cap) {
                format!("{cap} granted")
            } else {
                format!("{cap} missing")
            }
        };
        println!(
            "{}  {}  {}  {}  {}",
            t(&d.server_id),
            d.transport().as_str(),
            if d.enabled { "enabled" } else { "disabled" },
            t(&mark(&d.connect_capability())),
            t(&mark(&d.call_capability))
        );
    }
    if report.core.declarations.is_empty() && report.errors.is_empty() {
        println!(
            "no MCP servers declared under {}",
            t(&report
                .core
                .root
                .join(&report.core.mcp_root)
                .display()
                .to_string())
        );
    }
    for e in &report.errors {
        println!("error: {e}");
    }
    if report.errors.is_empty() {
        println!(
            "ok: {} declaration(s) valid",
            report.core.declarations.len()
        );
        0
    } else {
        println!("invalid: {} error(s)", report.errors.len());
        1
    }
}
