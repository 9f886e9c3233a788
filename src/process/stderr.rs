//! stderr of stdio servers: captured into an anonymous temporary file (capped), then on
//! close read through a 12,000-character window, redacted and appended to the private
//! log `<home>/logs/mcp-stderr.log`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;

use crate::redact::{REDACTION_FAILED, Redactor, View};

/// Characters of stderr kept in the durable log per connection.
pub const STDERR_WINDOW_CHARS: usize = 12_000;
/// Bytes of stderr kept in the capture file; the rest is counted and dropped, so a
/// chatty server cannot fill the disk. Four bytes per char covers any UTF-8 window.
pub const STDERR_CAPTURE_CAP: u64 = (STDERR_WINDOW_CHARS as u64) * 4;

/// A running capture of one child's stderr.
#[derive(Debug)]
pub struct StderrCapture {
    task: JoinHandle<std::io::Result<(std::fs::File, u64)>>,
}

/// What a finished capture read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedStderr {
    /// The first [`STDERR_WINDOW_CHARS`] characters (lossy UTF-8).
    pub text: String,
    /// Whether anything was cut.
    pub truncated: bool,
}

impl StderrCapture {
    /// Starts copying `stderr` into an anonymous temporary file.
    ///
    /// # Errors
    /// When the temporary file cannot be created.
    pub fn start(mut stderr: ChildStderr) -> std::io::Result<Self> {
        let mut file = tempfile::tempfile()?;
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut total: u64 = 0;
            loop {
                let n = match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let room = STDERR_CAPTURE_CAP.saturating_sub(total) as usize;
                if room > 0 {
                    file.write_all(&buf[..n.min(room)])?;
                }
                total += n as u64;
            }
            Ok((file, total))
        });
        Ok(StderrCapture { task })
    }

    /// Waits (at most `wait`) for the stream to end, then reads the window. If the
    /// stream is still open after `wait` (a grandchild holding it), the copy is stopped
    /// and what was captured is read.
    pub async fn finish(self, wait: Duration) -> CapturedStderr {
        let abort = self.task.abort_handle();
        let outcome = match tokio::time::timeout(wait, self.task).await {
            Ok(Ok(Ok(pair))) => Some(pair),
            _ => {
                abort.abort();
                None
            }
        };
        let Some((mut file, total)) = outcome else {
            return CapturedStderr {
                text: String::new(),
                truncated: true,
            };
        };
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(0)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return CapturedStderr {
                text: String::new(),
                truncated: true,
            };
        }
        let lossy = String::from_utf8_lossy(&bytes);
        let mut chars = lossy.chars();
        let text: String = chars.by_ref().take(STDERR_WINDOW_CHARS).collect();
        let truncated = chars.next().is_some() || total > bytes.len() as u64;
        CapturedStderr { text, truncated }
    }
}

/// Appends one connection's stderr to `<home>/logs/mcp-stderr.log` (dir 0700, file
/// 0600, symlinks refused), redacted in the durable view. Nothing is written for an
/// empty capture.
///
/// # Errors
/// IO errors opening or writing the log.
pub fn append_stderr_log(
    home: &Path,
    server: &str,
    session: &str,
    captured: &CapturedStderr,
    redactor: &Redactor,
) -> std::io::Result<()> {
    if captured.text.is_empty() && !captured.truncated {
        return Ok(());
    }
    let body = redactor.text_views(&captured.text).durable;
    let body = if body == REDACTION_FAILED {
        REDACTION_FAILED.to_string()
    } else {
        body
    };
    let mut entry = format!(
        "--- mcp server {} (session {}) at {} ---\n",
        redactor.text(server, View::Durable),
        session,
        crate::events::now_ms()
    );
    entry.push_str(&body);
    if !entry.ends_with('\n') {
        entry.push('\n');
    }
    if captured.truncated {
        entry.push_str(&format!(
            "[... stderr truncated at {STDERR_WINDOW_CHARS} characters ...]\n"
        ));
    }
    let mut file = super::open_private_append(&home.join("logs").join("mcp-stderr.log"))?;
    file.write_all(entry.as_bytes())
}
