//! The CLI's approver: a terminal prompt showing the preview; `--yes` approves for the
//! run; without a terminal and without `--yes`, every prompt is denied (fail closed)
//! with a message naming `--yes`.

use std::io::{BufRead, IsTerminal, Write};

use demiurge_mcp::{ApprovalAnswer, ApprovalRequest, Approver};
use futures::future::BoxFuture;

pub(crate) struct TerminalApprover {
    yes: bool,
}

impl TerminalApprover {
    pub(crate) fn new(yes: bool) -> Self {
        TerminalApprover { yes }
    }
}

impl Approver for TerminalApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let yes = self.yes;
        Box::pin(async move {
            eprint!("{}", request.render());
            if yes {
                eprintln!("  approved by --yes for this run");
                return ApprovalAnswer::AllowSession;
            }
            if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                eprintln!(
                    "  denied: no terminal to ask for approval of {} `{}`; re-run with --yes to approve",
                    request.action.as_str(),
                    demiurge_mcp::text::escape(request.tool.as_deref().unwrap_or(&request.server))
                );
                return ApprovalAnswer::Deny;
            }
            tokio::task::spawn_blocking(|| {
                eprint!("  allow? [o]nce / [s]ession / [N]o: ");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
                match line.trim().to_lowercase().as_str() {
                    "o" | "once" | "y" | "yes" => ApprovalAnswer::AllowOnce,
                    "s" | "session" => ApprovalAnswer::AllowSession,
                    _ => ApprovalAnswer::Deny,
                }
            })
            .await
            .unwrap_or(ApprovalAnswer::Deny)
        })
    }
}
