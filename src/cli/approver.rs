//! The CLI's approver: a terminal prompt showing the preview (and, for a call, its
//! arguments); `--yes` approves for the run; without a terminal and without `--yes`,
//! every prompt is denied (fail closed) with a message naming `--yes`.
//!
//! Answers come from one reader thread, so a prompt whose question is withdrawn (its
//! future dropped) leaves no blocked read behind to swallow the next answer; a line
//! typed for a withdrawn prompt is discarded before the next prompt is shown.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::{Arc, OnceLock};

use demiurge_mcp::{ApprovalAnswer, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc};

/// Longest answer line kept (the rest of the line is ignored).
const ANSWER_CHARS: usize = 64;

type Lines = Arc<Mutex<mpsc::Receiver<String>>>;

pub(crate) struct TerminalApprover {
    yes: bool,
    /// Lines read from the terminal, started at the first prompt.
    lines: OnceLock<Lines>,
}

impl TerminalApprover {
    pub(crate) fn new(yes: bool) -> Self {
        TerminalApprover {
            yes,
            lines: OnceLock::new(),
        }
    }

    fn lines(&self) -> Lines {
        Arc::clone(self.lines.get_or_init(|| {
            let (tx, rx) = mpsc::channel(2);
            std::thread::spawn(move || {
                let stdin = std::io::stdin();
                let mut line = String::new();
                loop {
                    line.clear();
                    match stdin.lock().read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let answer: String = line.trim().chars().take(ANSWER_CHARS).collect();
                            if tx.blocking_send(answer).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
            Arc::new(Mutex::new(rx))
        }))
    }
}

/// Says so on the terminal when a prompt is withdrawn before it was answered.
struct Withdrawn {
    what: Option<String>,
}

impl Drop for Withdrawn {
    fn drop(&mut self) {
        if let Some(what) = self.what.take() {
            eprintln!("\n  withdrawn: {what} is no longer needed (its turn or session ended)");
        }
    }
}

impl Approver for TerminalApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let yes = self.yes;
        let what = format!(
            "the {} approval of `{}`",
            request.action.as_str(),
            demiurge_mcp::text::escape(request.tool.as_deref().unwrap_or(&request.server))
        );
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let lines = (!yes && interactive).then(|| self.lines());
        Box::pin(async move {
            let Some(lines) = lines else {
                eprint!("{}", request.render());
                if yes {
                    eprintln!("  approved by --yes for this run");
                    return ApprovalAnswer::AllowSession;
                }
                eprintln!("  denied: no terminal to ask for {what}; re-run with --yes to approve");
                return ApprovalAnswer::Deny;
            };
            // One prompt on the terminal at a time, whichever session asks.
            let mut lines = lines.lock().await;
            while lines.try_recv().is_ok() {}
            eprint!("{}", request.render());
            eprint!("  allow? [o]nce / [s]ession / [N]o: ");
            let _ = std::io::stderr().flush();
            let mut withdrawn = Withdrawn { what: Some(what) };
            let line = lines.recv().await.unwrap_or_default();
            withdrawn.what = None;
            match line.to_lowercase().as_str() {
                "o" | "once" | "y" | "yes" => ApprovalAnswer::AllowOnce,
                "s" | "session" => ApprovalAnswer::AllowSession,
                _ => ApprovalAnswer::Deny,
            }
        })
    }
}
