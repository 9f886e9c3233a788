//! The CLI's approver: a terminal prompt showing the preview (and, for a call, its
//! arguments); `--yes` approves for the run; without a terminal and without `--yes`,
//! every prompt is denied (fail closed) with a message naming `--yes`.
//!
//! Every line of the terminal comes from one reader thread ([`terminal`]), shared by the
//! shell's commands, the approval prompts and the elicitations: a prompt whose question
//! is withdrawn (its future dropped), or answered, leaves no blocked read behind to
//! swallow the shell's next command; a line typed for a withdrawn prompt is discarded
//! before the next prompt is shown. The thread is detached, so a pending read never
//! holds the process when it exits (a signal, `/quit`).

use std::io::{BufRead, IsTerminal, Read, Write};
use std::sync::{Arc, OnceLock};

use demiurge_mcp::{ApprovalAnswer, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc};

/// Longest answer line kept (the rest of the line is ignored).
const ANSWER_CHARS: usize = 64;

/// Longest line the terminal's reader keeps (a shell command with its JSON arguments);
/// the rest of a longer line is dropped.
const LINE_BYTES: usize = 1024 * 1024;

/// Lines typed sooner than this after a prompt appeared were typed for something else
/// (a withdrawn prompt, type-ahead) and are not its answer.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(300);

type Lines = Arc<Mutex<mpsc::Receiver<(std::time::Instant, String)>>>;

/// The terminal's input, shared by the shell and every prompt of the CLI (approvals,
/// elicitations): one reader thread, one reader at a time, answers typed before a prompt
/// settled discarded.
#[derive(Default)]
pub(crate) struct Terminal {
    lines: OnceLock<Lines>,
}

/// The process's one terminal input.
pub(crate) fn terminal() -> Arc<Terminal> {
    static TERMINAL: OnceLock<Arc<Terminal>> = OnceLock::new();
    Arc::clone(TERMINAL.get_or_init(Arc::default))
}

impl Terminal {
    fn lines(&self) -> Lines {
        Arc::clone(self.lines.get_or_init(|| {
            let (tx, rx) = mpsc::channel(2);
            std::thread::spawn(move || {
                let mut stdin = std::io::stdin().lock();
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match (&mut stdin)
                        .take(LINE_BYTES as u64)
                        .read_until(b'\n', &mut line)
                    {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            // The rest of an over-long line is not a line of its own.
                            if !line.ends_with(b"\n") && line.len() >= LINE_BYTES {
                                let mut rest = Vec::new();
                                let _ = stdin.read_until(b'\n', &mut rest);
                            }
                            let text = String::from_utf8_lossy(&line).into_owned();
                            if tx.blocking_send((std::time::Instant::now(), text)).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
            Arc::new(Mutex::new(rx))
        }))
    }

    /// The next line typed (a shell command), whole; `None` when the input ended.
    pub(crate) async fn read_line(&self) -> Option<String> {
        let lines = self.lines();
        let mut lines = lines.lock().await;
        lines.recv().await.map(|(_, line)| line)
    }

    /// Shows `prompt` (after `text`) once no other prompt is on the terminal, and
    /// answers the first line typed after it settled; `None` when stdin ends. Says so
    /// when the future is dropped first (`what` was withdrawn).
    pub(crate) fn ask(
        &self,
        text: String,
        prompt: String,
        what: String,
    ) -> BoxFuture<'static, Option<String>> {
        let held = self.converse(what);
        Box::pin(async move {
            let mut conversation = held.await;
            let line = conversation
                .ask(&format!("{text}{prompt}"), ANSWER_CHARS, false)
                .await;
            conversation.finish();
            line
        })
    }

    /// The terminal for several questions in a row (an elicitation's fields), once no
    /// other prompt is on it; no other prompt is shown until the conversation ends.
    /// Dropped unfinished, it says `what` was withdrawn.
    pub(crate) fn converse(&self, what: String) -> BoxFuture<'static, Conversation> {
        let lines = self.lines();
        Box::pin(async move {
            let mut lines = lines.lock_owned().await;
            while lines.try_recv().is_ok() {}
            Conversation {
                lines,
                withdrawn: Withdrawn { what: Some(what) },
            }
        })
    }
}

/// The terminal's echo turned off until dropped (a hidden answer).
struct NoEcho(nix::sys::termios::Termios);

impl NoEcho {
    fn start() -> Option<NoEcho> {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok()?;
        let mut quiet = saved.clone();
        quiet.local_flags.remove(LocalFlags::ECHO);
        tcsetattr(&stdin, SetArg::TCSANOW, &quiet).ok()?;
        Some(NoEcho(saved))
    }
}

impl Drop for NoEcho {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            std::io::stdin(),
            nix::sys::termios::SetArg::TCSANOW,
            &self.0,
        );
        // The Enter that ended the answer was not echoed either.
        eprintln!();
    }
}

/// Questions asked one after another on the held terminal ([`Terminal::converse`]).
pub(crate) struct Conversation {
    lines: tokio::sync::OwnedMutexGuard<mpsc::Receiver<(std::time::Instant, String)>>,
    withdrawn: Withdrawn,
}

impl Conversation {
    /// Shows `prompt` and answers the first line typed after it settled, trimmed and
    /// cut to `max_chars`; `None` when stdin ends. A `hidden` answer is not echoed by
    /// the terminal while it is typed.
    pub(crate) async fn ask(
        &mut self,
        prompt: &str,
        max_chars: usize,
        hidden: bool,
    ) -> Option<String> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let _quiet = hidden.then(NoEcho::start).flatten();
        let shown = std::time::Instant::now();
        loop {
            match self.lines.recv().await {
                Some((at, line)) if at >= shown + SETTLE => {
                    break Some(line.trim().chars().take(max_chars).collect());
                }
                Some(_) => continue,
                None => break None,
            }
        }
    }

    /// The conversation ended with an answer: nothing was withdrawn.
    pub(crate) fn finish(mut self) {
        self.withdrawn.what = None;
    }
}

pub(crate) struct TerminalApprover {
    yes: bool,
    /// `--approve-changes`: changed definitions are approved without asking (`--yes`
    /// never approves them).
    approve_changes: bool,
    /// What an approval without asking says (`--yes`, or the demo's own core).
    approved_as: &'static str,
    terminal: Arc<Terminal>,
}

impl TerminalApprover {
    pub(crate) fn new(yes: bool, approve_changes: bool, terminal: Arc<Terminal>) -> Self {
        TerminalApprover {
            yes,
            approve_changes,
            approved_as: "approved by --yes for this run",
            terminal,
        }
    }

    /// The demo's approver: it approves the servers of the temporary core it made.
    pub(crate) fn for_demo() -> Self {
        TerminalApprover {
            yes: true,
            approve_changes: true,
            approved_as: "approved by the demo (it answers the prompts of its own temporary core)",
            terminal: Arc::default(),
        }
    }
}

/// Says so on the terminal when a prompt is withdrawn before it was answered.
struct Withdrawn {
    what: Option<String>,
}

impl Drop for Withdrawn {
    fn drop(&mut self) {
        if let Some(what) = self.what.take() {
            eprintln!(
                "\n  withdrawn: {what} is no longer asked (its requester went away or the approval deadline passed)"
            );
        }
    }
}

impl Approver for TerminalApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        if request.action == demiurge_mcp::actors::Action::Change {
            return self.decide_change(request);
        }
        let (yes, approved_as) = (self.yes, self.approved_as);
        let what = format!(
            "the {} approval of `{}`",
            request.action.as_str(),
            demiurge_mcp::text::escape(request.tool.as_deref().unwrap_or(&request.server))
        );
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let session = match request.action {
            demiurge_mcp::actors::Action::Call => "[s]ession (any arguments)",
            _ => "[s]ession",
        };
        let asked = (!yes && interactive && request.arguments_fit()).then(|| {
            self.terminal.ask(
                request.render(),
                format!("  allow? [o]nce / {session} / [a]lways (until the declaration changes) / [N]o: "),
                what.clone(),
            )
        });
        Box::pin(async move {
            if !request.arguments_fit() {
                eprint!("{}", request.render());
                eprintln!(
                    "  denied: the call's arguments cannot all be shown, so they cannot be approved here"
                );
                return ApprovalAnswer::Deny;
            }
            let Some(asked) = asked else {
                eprint!("{}", request.render());
                if yes {
                    eprintln!("  {approved_as}");
                    return ApprovalAnswer::AllowSession;
                }
                eprintln!("  denied: no terminal to ask for {what}; re-run with --yes to approve");
                return ApprovalAnswer::Deny;
            };
            let line = asked.await.unwrap_or_default();
            match line.to_lowercase().as_str() {
                "o" | "once" | "y" | "yes" => ApprovalAnswer::AllowOnce,
                "s" | "session" => ApprovalAnswer::AllowSession,
                "a" | "always" => ApprovalAnswer::AllowAlways,
                _ => ApprovalAnswer::Deny,
            }
        })
    }
}

impl TerminalApprover {
    /// A changed definition: approved by `--approve-changes`, else asked at a terminal
    /// (`--yes` does not answer it), else held back with the ways to approve it.
    fn decide_change(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        let server = demiurge_mcp::text::escape(&request.server).into_owned();
        let approve = self.approve_changes;
        let asked = (!approve && interactive).then(|| {
            self.terminal.ask(
                request.render(),
                "  approve these definitions? [y]es / [N]o: ".to_string(),
                format!("the changed definitions of `{server}`"),
            )
        });
        Box::pin(async move {
            let Some(asked) = asked else {
                eprint!("{}", request.render());
                if approve {
                    eprintln!("  approved by --approve-changes");
                    return ApprovalAnswer::AllowOnce;
                }
                eprintln!(
                    "  held back: no terminal to ask (--yes does not approve changed definitions); approve them with `demiurge pins approve {server}`, or re-run with --approve-changes"
                );
                return ApprovalAnswer::Deny;
            };
            match asked.await.unwrap_or_default().to_lowercase().as_str() {
                "y" | "yes" => ApprovalAnswer::AllowOnce,
                _ => ApprovalAnswer::Deny,
            }
        })
    }
}
