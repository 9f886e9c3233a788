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

/// Most session logs open at once. A close can be lost (the queue was full when the
/// session ended, or a resumed session wrote after it): the least recently written file
/// is closed past this bound, and opened again (appending) if its session writes again.
pub const MAX_OPEN_LOGS: usize = 256;

/// A session's log file while it is open.
struct Open {
    file: std::io::BufWriter<File>,
    path: PathBuf,
    size: u64,
    /// The writer's clock at this file's last write.
    used: u64,
}

impl Open {
    /// The log of `session` under `dir`, opened to append (created 0600).
    fn new(dir: &std::path::Path, session: &str) -> Option<Open> {
        let path = dir.join(format!("{}.jsonl", safe_file_name(session)));
        match crate::process::open_private_append(&path) {
            Ok(f) => Some(Open {
                size: f.metadata().map(|m| m.len()).unwrap_or(0),
                file: std::io::BufWriter::new(f),
                path,
                used: 0,
            }),
            Err(e) => {
                tracing::warn!("cannot open event log {}: {e}", path.display());
                None
            }
        }
    }
}

/// Makes room for one more open log: at [`MAX_OPEN_LOGS`], the least recently written
/// one is flushed and closed.
fn close_least_recent(files: &mut HashMap<String, Open>) {
    if files.len() < MAX_OPEN_LOGS {
        return;
    }
    let oldest = files
        .iter()
        .min_by_key(|(_, open)| open.used)
        .map(|(session, _)| session.clone());
    if let Some(mut open) = oldest.and_then(|session| files.remove(&session)) {
        let _ = open.file.flush();
    }
}

/// The writer thread: appends events to their session's file, flushing after each
/// batch; a file that reaches `max_bytes` is rotated to `<name>.1`.
pub(super) fn write_logs(
    dir: &std::path::Path,
    rx: std::sync::mpsc::Receiver<LogOp>,
    max_bytes: u64,
) {
    let mut files: HashMap<String, Open> = HashMap::new();
    // Which write last touched each open file, to close the least recent past the bound.
    let mut clock: u64 = 0;
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
                    if !files.contains_key(&event.session)
                        && let Some(open) = Open::new(dir, &event.session)
                    {
                        close_least_recent(&mut files);
                        files.insert(event.session.clone(), open);
                    }
                    line.clear();
                    clock += 1;
                    if let (Some(open), Ok(())) = (
                        files.get_mut(&event.session),
                        serde_json::to_writer(&mut line, &event),
                    ) {
                        open.used = clock;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Open files of this process under `dir`.
    fn open_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    #[test]
    fn lost_closes_leave_at_most_the_bound_of_logs_open() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, rx) = std::sync::mpsc::sync_channel(4096);
        let path = dir.path().to_path_buf();
        let writer = std::thread::spawn(move || write_logs(&path, rx, u64::MAX));
        // Sessions that end without their close reaching the writer (a full queue).
        for n in 0..MAX_OPEN_LOGS + 100 {
            let event = Event::new(
                format!("s-{n}"),
                crate::events::EventKind::EventsDropped { count: 1 },
            );
            tx.send(LogOp::Write(Box::new(event))).unwrap();
        }
        let (done, flushed) = std::sync::mpsc::channel();
        tx.send(LogOp::Flush(done)).unwrap();
        writer.thread().unpark();
        flushed.recv().unwrap();
        assert_eq!(open_under(dir.path()), MAX_OPEN_LOGS);
        // Every session's line reached its file, those closed early too.
        let files = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(files, MAX_OPEN_LOGS + 100);
        drop(tx);
        writer.join().unwrap();
        assert_eq!(open_under(dir.path()), 0);
    }
}
