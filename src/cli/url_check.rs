//! `demiurge url-check URL [--resolve HOST=ADDR[,ADDR]]... [--json]`: the URL policy's
//! audit view; exit 0 allowed, 3 blocked.

use std::net::IpAddr;
use std::sync::Arc;

use demiurge_mcp::net::{HickoryResolver, NetContext, Resolver, StaticResolver, UrlPolicy};

use super::{Cli, USAGE};

/// Exit code of a blocked URL.
const BLOCKED: u8 = 3;

pub(crate) async fn run(cli: &Cli, url: &str, resolve: &[String], json: bool) -> u8 {
    let resolver: Arc<dyn Resolver> = if resolve.is_empty() {
        Arc::new(HickoryResolver::from_system())
    } else {
        let table = StaticResolver::new();
        for entry in resolve {
            let Some((host, addrs)) = entry.split_once('=') else {
                eprintln!(
                    "error: --resolve takes HOST=ADDR[,ADDR], got `{}`",
                    super::t(entry)
                );
                return USAGE;
            };
            let parsed: Result<Vec<IpAddr>, _> = addrs
                .split(',')
                .filter(|a| !a.is_empty())
                .map(str::parse)
                .collect();
            match parsed {
                Ok(addrs) => {
                    table.set(host, addrs);
                }
                Err(_) => {
                    eprintln!(
                        "error: --resolve {}: `{}` is not a list of IP addresses",
                        super::t(host),
                        super::t(addrs)
                    );
                    return USAGE;
                }
            }
        }
        Arc::new(table)
    };
    let policy = UrlPolicy::with_trusted(cli.trust_network.iter().copied());
    let net = match NetContext::new(policy, resolver, &[]) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {}", super::t(&e.to_string()));
            return 1;
        }
    };
    let decision = net.check_url(url).await.audit();
    if json {
        super::print_json(&decision, false);
    } else {
        let target = if decision.target.is_empty() {
            "(unparsed url)".to_string()
        } else {
            decision.target.clone()
        };
        let addrs = decision.resolved_addresses.join(", ");
        if decision.allowed {
            println!("allowed: {target} -> {addrs}");
        } else if addrs.is_empty() {
            println!("blocked ({}): {target}", decision.reason);
        } else {
            println!("blocked ({}): {target} -> {addrs}", decision.reason);
        }
    }
    if decision.allowed { 0 } else { BLOCKED }
}
