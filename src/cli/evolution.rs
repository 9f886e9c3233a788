//! `demiurge review [CANDIDATE] [--json]` and `demiurge promote CANDIDATE --review-token
//! TOKEN`.

use std::io::{BufRead, IsTerminal, Write};

use demiurge_mcp::evolution::CoreRepo;
use serde_json::json;

use super::{Cli, t};

pub(crate) fn review(cli: &Cli, candidate: &str, as_json: bool) -> u8 {
    let outcome = CoreRepo::open(&cli.core_dir()).and_then(|repo| repo.review(candidate));
    match outcome {
        Ok(review) => {
            if as_json {
                let changes: Vec<_> = review
                    .changes
                    .iter()
                    .map(|c| json!({"path": c.path, "change": c.change, "before": c.before, "after": c.after, "details": c.details}))
                    .collect();
                super::print_json(&json!({"changes": changes, "token": review.token}), false);
            } else {
                print!("{}", review.render());
            }
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            1
        }
    }
}

pub(crate) fn promote(cli: &Cli, candidate: &str, token: Option<&str>) -> u8 {
    let repo = match CoreRepo::open(&cli.core_dir()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            return 1;
        }
    };
    let yes = cli.yes;
    let outcome = repo.promote(candidate, token, |review| {
        eprint!("{}", review.render());
        eprintln!("promote {} to live?", &review.candidate[..12.min(review.candidate.len())]);
        if yes {
            eprintln!("  approved by --yes for this run");
            return true;
        }
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            eprintln!("  denied: no terminal to ask for approval of the promotion; re-run with --yes to approve");
            return false;
        }
        eprint!("  promote? [y/N]: ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
    });
    match outcome {
        Ok(p) => {
            println!(
                "promoted: live {} (previous {})",
                p.live,
                p.previous.as_deref().unwrap_or("none")
            );
            0
        }
        Err(e) => {
            eprintln!("error: {}", t(&e.to_string()));
            eprintln!("refs/demiurge/live and refs/demiurge/previous are unchanged");
            1
        }
    }
}
