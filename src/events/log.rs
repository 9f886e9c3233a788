//! The per-session JSONL log: one file a session under
//! `<home>/runtime/session-events/`, appended by one writer thread in batches, rotated
//! at its size bound, private (0600) whatever the umask.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use super::Event;

/// How long events may wait in memory before reaching the log.
pub const LOG_BATCH: std::time::Duration = std::time::Duration::from_millis(100);

/// What the writer thread is asked to do. Events travel boxed: the queue holds many,
/// and the other operations are small.
pub(super) enum LogOp {
    Write(Box<Event>),
    Close(String),
    Flush(std::sync::mpsc::Sender<()>),
}

/// The writer thread: appends events to their session's file, flushing after each
/// batch; a file that reaches `max_bytes` is rotated to `<name>.1`.
pub(super) fn write_logs(
    dir: &std::path::Path,
    rx: std::sync::mpsc::Receiver<LogOp>,
    max_bytes: u64,
) {
    /// A session's log file while it is open.
    struct Open {
        file: std::io::BufWriter<File>,
        path: PathBuf,
        size: u64,
    }
    let mut files: HashMap<String, Open> = HashMap::new();
    let mut waiting: Vec<std::sync::mpsc::Sender<()>> = Vec::new();
    // One buffer for every line: an event costs no allocation here once it has grown.
    let mut line: Vec<u8> = Vec::new();
    loop {
        std::thread::park_timeout(LOG_BATCH);
        let mut op = match rx.try_recv() {
            Ok(op) => Some(op),
            Err(std::sync::mpsc::TryRecvError::Empty) => continue,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
        };
        while let Some(current) = op.take() {
            match current {
                LogOp::Write(event) => {
                    if !files.contains_key(&event.session) {
                        let path = dir.join(format!("{}.jsonl", safe_file_name(&event.session)));
                        match crate::process::open_private_append(&path) {
                            Ok(f) => {
                                let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                                let file = std::io::BufWriter::new(f);
                                files.insert(event.session.clone(), Open { file, path, size });
                            }
                            Err(e) => {
                                tracing::warn!("cannot open event log {}: {e}", path.display())
                            }
                        }
                    }
                    line.clear();
                    if let (Some(open), Ok(())) = (
                        files.get_mut(&event.session),
                        serde_json::to_writer(&mut line, &event),
                    ) {
                        line.push(b'\n');
                        if let Err(e) = open.file.write_all(&line) {
                            tracing::warn!("cannot write event log {}: {e}", open.path.display());
                        }
                        open.size += line.len() as u64;
                        if open.size >= max_bytes
                            && let Some(mut full) = files.remove(&event.session)
                        {
                            // Rotate: the full file becomes `.1`, the next event opens anew.
                            let _ = full.file.flush();
                            let _ =
                                std::fs::rename(&full.path, full.path.with_extension("jsonl.1"));
                        }
                    }
                    // A line of a huge event is not kept for the next one.
                    if line.capacity() > 64 * 1024 {
                        line = Vec::new();
                    }
                }
                LogOp::Close(session) => {
                    if let Some(mut open) = files.remove(&session) {
                        let _ = open.file.flush();
                    }
                }
                LogOp::Flush(done) => waiting.push(done),
            }
            op = rx.try_recv().ok();
        }
        for open in files.values_mut() {
            let _ = open.file.flush();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

pub(super) fn safe_file_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}
