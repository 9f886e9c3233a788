//! How events reach their readers: the host's sink (directly, or from a bounded queue
//! on a thread of its own) and the session's JSONL log (on a writer thread), with
//! what is dropped when a reader cannot keep up counted.

use std::path::PathBuf;
use std::sync::Arc;

use super::log::{LogOp, safe_file_name, write_logs};
use super::{Event, EventKind, EventSink};

/// Fans events out to the host sink (synchronously) and the JSONL log of their session
/// (on a writer thread, so no call or turn waits for the disk).
pub struct EventHub {
    sink: Arc<dyn EventSink>,
    log_dir: Option<PathBuf>,
    writer: Option<Writer>,
    /// The sink's own thread and bounded queue, when delivery is queued.
    delivery: Option<Delivery>,
    /// Events the sink or the log never got because a queue was full.
    dropped: Arc<std::sync::atomic::AtomicU64>,
    /// The host's metrics, counted from every event before any queue.
    counter: Option<Arc<dyn EventCounter>>,
}

/// What counts events into the host's metrics (the telemetry): every event, on the
/// emitting task and before any queue, and every event a full queue drops.
pub trait EventCounter: Send + Sync {
    /// One event, in its event view.
    fn count(&self, event: &Event);
    /// One event the host's sink or the log will never get.
    fn dropped(&self);
}

/// How events reach the host's sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventDelivery {
    /// On the emitting task, synchronously (a slow sink slows the runtime; for tests
    /// and sinks that only push to a queue of their own).
    Direct,
    /// Through a bounded queue to a thread of its own: the hot path pays a queue push;
    /// a host slower than the runtime loses events past `capacity`, counted, and told
    /// by an `mcp.events_dropped` event once it catches up.
    Queued {
        /// Most events waiting for the sink.
        capacity: usize,
    },
}

impl Default for EventDelivery {
    fn default() -> Self {
        EventDelivery::Queued { capacity: 10_000 }
    }
}

/// The JSONL session logs under the runtime home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventLog {
    /// No session log is written.
    Off,
    /// One file per session; at `max_bytes` it is renamed `<session>.jsonl.1` (the one
    /// before that goes) and a new file begins.
    On {
        /// The size at which a session's log rotates.
        max_bytes: u64,
    },
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::On {
            max_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Most log operations waiting for the writer thread; past it, events are dropped
/// (and counted) rather than held.
pub const LOG_QUEUE: usize = 65_536;

enum DeliveryOp {
    Event(Box<Event>),
    Flush(std::sync::mpsc::Sender<()>),
}

struct Delivery {
    tx: std::sync::mpsc::SyncSender<DeliveryOp>,
}

/// The writer thread's queue. Senders never wake the thread: it wakes on its own every
/// [`LOG_BATCH`](super::LOG_BATCH) (or when unparked by a flush), so events on the hot path cost a queue
/// push, not a context switch.
struct Writer {
    tx: std::sync::mpsc::SyncSender<LogOp>,
    thread: std::thread::Thread,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("log_dir", &self.log_dir)
            .finish()
    }
}

impl EventHub {
    /// A hub writing JSONL under `log_dir` (created 0700) when given.
    pub fn new(sink: Arc<dyn EventSink>, log_dir: Option<PathBuf>) -> Self {
        Self::with(sink, log_dir, EventDelivery::Direct, EventLog::default())
    }

    /// A hub delivering to `sink` as `delivery` says and logging under `log_dir` as
    /// `log` says.
    pub fn with(
        sink: Arc<dyn EventSink>,
        log_dir: Option<PathBuf>,
        delivery: EventDelivery,
        log: EventLog,
    ) -> Self {
        let log_dir = match log {
            EventLog::Off => None,
            EventLog::On { .. } => log_dir,
        };
        let max_bytes = match log {
            EventLog::On { max_bytes } => max_bytes,
            EventLog::Off => u64::MAX,
        };
        let writer = log_dir.clone().and_then(|dir| {
            let (tx, rx) = std::sync::mpsc::sync_channel(LOG_QUEUE);
            std::thread::Builder::new()
                .name("demiurge-event-log".into())
                .stack_size(256 * 1024)
                .spawn(move || write_logs(&dir, rx, max_bytes))
                .ok()
                .map(|handle| Writer {
                    tx,
                    thread: handle.thread().clone(),
                })
        });
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let delivery = match delivery {
            // Nothing to deliver to: the sink is called in place, which costs nothing.
            _ if sink.discards() => None,
            EventDelivery::Direct => None,
            EventDelivery::Queued { capacity } => {
                let (tx, rx) = std::sync::mpsc::sync_channel(capacity.max(1));
                let (sink, dropped) = (Arc::clone(&sink), Arc::clone(&dropped));
                std::thread::Builder::new()
                    .name("demiurge-event-sink".into())
                    .stack_size(256 * 1024)
                    .spawn(move || deliver(&*sink, &rx, &dropped))
                    .ok()
                    .map(|_| Delivery { tx })
            }
        };
        EventHub {
            sink,
            log_dir,
            writer,
            delivery,
            dropped,
            counter: None,
        }
    }

    /// This hub, counting every event with `counter` (the host's metrics).
    pub fn with_counter(mut self, counter: Option<Arc<dyn EventCounter>>) -> Self {
        self.counter = counter;
        self
    }

    /// Events dropped so far because the host's sink (or the log) could not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Path of a session's JSONL log.
    pub fn log_path(&self, session: &str) -> Option<PathBuf> {
        self.log_dir
            .as_ref()
            .map(|d| d.join(format!("{}.jsonl", safe_file_name(session))))
    }

    /// Delivers one event: to the sink now, to the log on the writer thread. Log
    /// failures are reported through `tracing`, never raised: an event log must not
    /// take a turn down.
    pub fn emit(&self, session: &str, kind: EventKind) {
        let event = Event::new(session, kind);
        if let Some(counter) = &self.counter {
            counter.count(&event);
        }
        match &self.delivery {
            Some(d) => {
                if d.tx
                    .try_send(DeliveryOp::Event(Box::new(event.clone())))
                    .is_err()
                {
                    self.count_drop();
                }
            }
            None => self.sink.emit(&event),
        }
        if self.writer.is_some() {
            self.send(LogOp::Write(Box::new(event)));
        }
    }

    fn count_drop(&self) {
        self.dropped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(counter) = &self.counter {
            counter.dropped();
        }
    }

    fn send(&self, op: LogOp) {
        let Some(w) = &self.writer else { return };
        match op {
            LogOp::Flush(_) => {
                // A flush waits for room, but only so long: a writer stuck on a slow
                // disk must not hold the caller (or anyone else) for ever.
                let _ = send_within(&w.tx, op, FLUSH_WAIT);
                w.thread.unpark();
            }
            op => {
                if w.tx.try_send(op).is_err() {
                    self.count_drop();
                }
            }
        }
    }

    /// Closes a session's log file handle (the file stays).
    pub fn close_session(&self, session: &str) {
        self.send(LogOp::Close(session.to_string()));
    }

    /// Waits (at most five seconds each) until everything emitted so far reached the
    /// sink and is on disk.
    pub fn flush(&self) {
        if let Some(d) = &self.delivery {
            let (tx, rx) = std::sync::mpsc::channel();
            if send_within(&d.tx, DeliveryOp::Flush(tx), FLUSH_WAIT) {
                let _ = rx.recv_timeout(FLUSH_WAIT);
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(LogOp::Flush(tx));
        let _ = rx.recv_timeout(FLUSH_WAIT);
    }
}

/// The longest a flush waits, for room in a queue and then for its answer.
pub(crate) const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Sends `op` when the queue has room within `wait`; `false` when it never had.
fn send_within<T>(
    tx: &std::sync::mpsc::SyncSender<T>,
    mut op: T,
    wait: std::time::Duration,
) -> bool {
    let until = std::time::Instant::now() + wait;
    loop {
        match tx.try_send(op) {
            Ok(()) => return true,
            Err(std::sync::mpsc::TrySendError::Disconnected(_)) => return false,
            Err(std::sync::mpsc::TrySendError::Full(back)) => {
                if std::time::Instant::now() >= until {
                    return false;
                }
                op = back;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

/// How long the sink's thread rests after draining its queue before blocking again.
const DELIVERY_REST: std::time::Duration = std::time::Duration::from_millis(1);

/// The sink's thread: delivers queued events in order, telling the sink first how many
/// were dropped since the last one it got.
fn deliver(
    sink: &dyn EventSink,
    rx: &std::sync::mpsc::Receiver<DeliveryOp>,
    dropped: &std::sync::atomic::AtomicU64,
) {
    let mut told = 0;
    let mut drained = false;
    loop {
        // After a burst is drained the thread rests a moment before it blocks again: a
        // sender only wakes a thread blocked in `recv`, so a burst of events costs a
        // wake a millisecond at most, not a context switch each (on two cores, those
        // were taken from the calls themselves).
        let op = match rx.try_recv() {
            Ok(op) => op,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            Err(std::sync::mpsc::TryRecvError::Empty) if drained => {
                drained = false;
                std::thread::sleep(DELIVERY_REST);
                continue;
            }
            Err(std::sync::mpsc::TryRecvError::Empty) => match rx.recv() {
                Ok(op) => op,
                Err(_) => return,
            },
        };
        drained = true;
        match op {
            DeliveryOp::Event(event) => {
                let now = dropped.load(std::sync::atomic::Ordering::Relaxed);
                if now > told {
                    let note = Event::new(
                        &event.session,
                        EventKind::EventsDropped { count: now - told },
                    );
                    sink.emit(&note);
                    told = now;
                }
                sink.emit(&event);
            }
            DeliveryOp::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{MemorySink, NullSink};

    fn hub(sink: Arc<dyn EventSink>, dir: &std::path::Path) -> EventHub {
        let queued = EventDelivery::Queued { capacity: 16 };
        EventHub::with(sink, Some(dir.to_path_buf()), queued, EventLog::default())
    }

    /// A sink that discards gets no delivery thread, yet the session log is written; a
    /// sink that keeps gets its queue and every event.
    #[test]
    fn a_discarding_sink_costs_no_thread_and_the_log_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let null = hub(Arc::new(NullSink), dir.path());
        assert!(null.delivery.is_none());
        null.emit("s-1", EventKind::EventsDropped { count: 3 });
        null.flush();
        let log = std::fs::read_to_string(null.log_path("s-1").unwrap()).unwrap();
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("mcp.events_dropped"), "{log}");

        let memory = MemorySink::new();
        let kept = hub(Arc::new(memory.clone()), dir.path());
        assert!(kept.delivery.is_some());
        kept.emit("s-2", EventKind::EventsDropped { count: 1 });
        kept.flush();
        assert_eq!(memory.of_type("mcp.events_dropped").len(), 1);
    }
}
