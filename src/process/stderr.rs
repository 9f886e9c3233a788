//! stderr of stdio servers: captured into an anonymous temporary file (capped), then on
//! close redacted whole and cut to a 12,000-character window, and appended to the
//! private log `<home>/logs/mcp-stderr.log`.
//!
//! Adversary: a server author (threat model 2) who writes anything, any amount. Bounds:
//! the capture keeps [`STDERR_CAPTURE_CAP`] bytes, the log entry
//! [`STDERR_WINDOW_CHARS`] characters. Redaction comes before the cut, so a secret that
//! straddles the window's end is replaced whole; at the capture's own end, where a
//! secret may be cut mid-value, the last bytes (as many as the longest known secret) are
//! dropped before redaction, so no prefix of a secret survives.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;

use crate::redact::{Redactor, View};

/// Characters of stderr kept in the durable log per connection.
pub const STDERR_WINDOW_CHARS: usize = 12_000;
/// Bytes of stderr kept in the capture file; the rest is counted and dropped, so a
/// chatty server cannot fill the disk. Four bytes per char covers any UTF-8 window.
pub const STDERR_CAPTURE_CAP: u64 = (STDERR_WINDOW_CHARS as u64) * 4;

/// A running capture of one child's stderr.
#[derive(Debug)]
pub struct StderrCapture {
    /// The capture file (none until the first bytes) and the bytes seen.
    task: JoinHandle<std::io::Result<(Option<std::fs::File>, u64)>>,
}

/// What a finished capture read: raw, not yet redacted or cut to the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedStderr {
    /// Everything kept (at most [`STDERR_CAPTURE_CAP`] bytes, lossy UTF-8).
    pub text: String,
    /// Whether the server wrote more than was kept.
    pub truncated: bool,
    /// Bytes the server wrote.
    pub seen_bytes: u64,
    /// Bytes kept in the capture file (at most [`STDERR_CAPTURE_CAP`]).
    pub kept_bytes: u64,
}

impl StderrCapture {
    /// Starts copying `stderr` into an anonymous temporary file, made when the first
    /// bytes arrive (most servers write none).
    ///
    /// # Errors
    /// None today; kept for callers that treat a capture as optional.
    pub fn start(mut stderr: ChildStderr) -> std::io::Result<Self> {
        let task = tokio::spawn(async move {
            // Small: one of these lives per connection for its whole life.
            let mut buf = vec![0u8; 1024];
            let (mut file, mut total, mut unmade) = (None, 0u64, false);
            loop {
                let n = match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let room = STDERR_CAPTURE_CAP.saturating_sub(total) as usize;
                if room > 0 && file.is_none() && !unmade {
                    // No file (a full disk, no descriptors left): the stream is still
                    // drained, so the server never blocks on it, and the capture reads
                    // as cut.
                    file = tempfile::tempfile().ok();
                    unmade = file.is_none();
                }
                if let Some(kept) = file.as_mut().filter(|_| room > 0) {
                    kept.write_all(&buf[..n.min(room)])?;
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
        let lost = CapturedStderr {
            text: String::new(),
            truncated: true,
            seen_bytes: 0,
            kept_bytes: 0,
        };
        let Some((file, total)) = outcome else {
            return lost;
        };
        let mut bytes = Vec::new();
        if let Some(mut file) = file
            && (file.seek(SeekFrom::Start(0)).is_err() || file.read_to_end(&mut bytes).is_err())
        {
            return lost;
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        CapturedStderr {
            text,
            truncated: total > bytes.len() as u64,
            seen_bytes: total,
            kept_bytes: bytes.len() as u64,
        }
    }
}

/// How many of the last stderr lines a connect diagnostic shows, and how long each is.
pub const STDERR_TAIL_LINES: usize = 3;
/// See [`STDERR_TAIL_LINES`].
pub const STDERR_TAIL_CHARS: usize = 200;

/// The last non-blank lines of an already redacted text, each escaped (no control
/// character can forge a terminal line) and cut.
fn tail_of(redacted: &str) -> Vec<String> {
    let mut lines: Vec<String> = redacted
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(STDERR_TAIL_LINES)
        .map(|l| crate::result::cap_chars(&crate::text::escape(l.trim()), STDERR_TAIL_CHARS))
        .collect();
    lines.reverse();
    lines
}

/// Appends one connection's stderr to `<home>/logs/mcp-stderr.log` (dir 0700, file
/// 0600, symlinks refused), redacted in the durable view. Nothing is written for an
/// empty capture (`None`); after an entry, the last lines of what it holds
/// ([`STDERR_TAIL_LINES`]), for a diagnostic. Each entry is headed by a UTC time.
///
/// # Errors
/// IO errors opening or writing the log.
pub fn append_stderr_log(
    home: &Path,
    server: &str,
    session: &str,
    captured: &CapturedStderr,
    redactor: &Redactor,
) -> std::io::Result<Option<Vec<String>>> {
    if captured.text.is_empty() && !captured.truncated {
        return Ok(None);
    }
    let mut raw = captured.text.as_str();
    if captured.truncated {
        // The capture ended where the server was still writing: a secret may be cut
        // there, and its prefix would match nothing. Drop as much as the longest secret.
        let margin = redactor.longest_secret_chars();
        let keep = raw.chars().count().saturating_sub(margin);
        raw = &raw[..raw.char_indices().nth(keep).map_or(raw.len(), |(i, _)| i)];
    }
    // Redact first, then cut: on failure the view is exactly the marker, and raw stderr
    // never reaches the log.
    let redacted = redactor.text_views(raw).durable;
    let mut chars = redacted.chars();
    let body: String = chars.by_ref().take(STDERR_WINDOW_CHARS).collect();
    let cut = captured.truncated || chars.next().is_some();
    let mut entry = format!(
        "--- mcp server {} (session {}) at {} ---\n",
        redactor.text(server, View::Durable),
        session,
        crate::clock::utc(crate::clock::now_ms())
    );
    entry.push_str(&body);
    if !entry.ends_with('\n') {
        entry.push('\n');
    }
    if cut {
        entry.push_str(&format!(
            "[... stderr truncated at {STDERR_WINDOW_CHARS} characters ...]\n"
        ));
    }
    let mut file = super::open_private_append(&home.join("logs").join("mcp-stderr.log"))?;
    file.write_all(entry.as_bytes())?;
    Ok(Some(tail_of(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::REDACTION_FAILED;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Stdio;

    async fn capture(script: &str) -> CapturedStderr {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let capture = StderrCapture::start(child.stderr.take().unwrap()).unwrap();
        child.wait().await.unwrap();
        capture.finish(Duration::from_secs(10)).await
    }

    #[tokio::test]
    async fn a_silent_server_leaves_an_empty_capture_and_a_late_writer_is_kept() {
        let silent = capture("exit 0").await;
        assert_eq!((silent.text.as_str(), silent.truncated), ("", false));
        assert_eq!((silent.seen_bytes, silent.kept_bytes), (0, 0));
        // The file is made at the first bytes, however late they come.
        let late = capture("sleep 0.2; echo late >&2").await;
        assert_eq!((late.text.as_str(), late.truncated), ("late\n", false));
        assert_eq!((late.seen_bytes, late.kept_bytes), (5, 5));
    }

    #[tokio::test]
    async fn a_flood_is_drained_but_only_the_cap_is_kept() {
        let c = capture("head -c 5000000 /dev/zero | tr '\\0' x >&2").await;
        assert_eq!(c.seen_bytes, 5_000_000);
        assert!(c.kept_bytes <= STDERR_CAPTURE_CAP);
        assert_eq!(c.text.len() as u64, STDERR_CAPTURE_CAP);
        assert!(c.truncated);
    }

    #[tokio::test]
    async fn the_log_entry_is_redacted_headed_and_marked_when_cut() {
        let home = tempfile::tempdir().unwrap();
        let c =
            capture("echo 'token is canary-123456' >&2; head -c 20000 /dev/zero | tr '\\0' y >&2")
                .await;
        let r = Redactor::new().with_secrets([("API_TOKEN", "canary-123456")]);
        append_stderr_log(home.path(), "docs", "s-1", &c, &r).unwrap();
        let path = home.path().join("logs/mcp-stderr.log");
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.starts_with("--- mcp server docs (session s-1)"));
        assert!(log.contains("token is <redacted:API_TOKEN>") && !log.contains("canary-123456"));
        assert!(log.contains("truncated at 12000 characters"));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[tokio::test]
    async fn a_secret_across_the_window_or_the_capture_end_is_never_written() {
        let secret = "canary-straddles-4242";
        let r = Redactor::new().with_secrets([("API_TOKEN", secret)]);
        // Across the 12,000-character window: redacted whole before the cut.
        let pad = STDERR_WINDOW_CHARS - 5;
        let across_window =
            format!("head -c {pad} /dev/zero | tr '\\0' a >&2; echo '{secret}' >&2");
        // Across the end of the capture: the partial tail is dropped.
        let pad = STDERR_CAPTURE_CAP as usize - 7;
        let across_capture = format!(
            "head -c {pad} /dev/zero | tr '\\0' b >&2; echo '{secret}' >&2; head -c 9999 /dev/zero >&2"
        );
        // A multi-byte window: 12,000 characters reach the end of the capture.
        let wide = format!(
            "yes '\u{1F600}' | head -n 11995 | tr -d '\\n' >&2; printf '%s' '{secret}' >&2; head -c 99 /dev/zero >&2"
        );
        for script in [across_window, across_capture, wide] {
            let home = tempfile::tempdir().unwrap();
            let c = capture(&script).await;
            append_stderr_log(home.path(), "s", "s-1", &c, &r).unwrap();
            let log = std::fs::read_to_string(home.path().join("logs/mcp-stderr.log")).unwrap();
            for cut in 4..secret.len() {
                assert!(
                    !log.contains(&secret[..cut + 1]),
                    "a prefix of the secret leaked"
                );
            }
            assert!(log.contains("truncated at 12000 characters"));
        }
    }

    #[tokio::test]
    async fn a_redaction_failure_writes_only_the_marker() {
        let home = tempfile::tempdir().unwrap();
        let c = capture("echo 'raw secret text' >&2").await;
        append_stderr_log(home.path(), "docs", "s-1", &c, &Redactor::poisoned()).unwrap();
        let log = std::fs::read_to_string(home.path().join("logs/mcp-stderr.log")).unwrap();
        assert!(
            log.contains(REDACTION_FAILED) && !log.contains("raw secret text"),
            "{log}"
        );
    }

    #[tokio::test]
    async fn a_symlink_at_the_log_path_is_refused_not_followed() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = home.path().join("elsewhere.txt");
        std::fs::write(&elsewhere, "untouched").unwrap();
        std::fs::create_dir_all(home.path().join("logs")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, home.path().join("logs/mcp-stderr.log")).unwrap();
        let c = capture("echo hello >&2").await;
        assert!(append_stderr_log(home.path(), "docs", "s-1", &c, &Redactor::new()).is_err());
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "untouched");
    }
}
