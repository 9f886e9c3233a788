//! Where events go in the host: the trait a host implements, and two sinks of our own.

use std::sync::{Arc, Mutex};

use super::Event;

/// Where the host receives events. Called on runtime tasks: keep it quick.
pub trait EventSink: Send + Sync + 'static {
    /// One event, already in its event view.
    fn emit(&self, event: &Event);

    /// Whether this sink drops every event unseen. A hub then starts no delivery
    /// thread and copies nothing for it (the session logs are written all the same).
    fn discards(&self) -> bool {
        false
    }
}

/// A sink that keeps every event in memory: for tests and simple hosts.
#[derive(Debug, Clone, Default)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<Event>>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of everything received so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Events of one type.
    pub fn of_type(&self, type_name: &str) -> Vec<Event> {
        self.events()
            .into_iter()
            .filter(|e| e.type_name() == type_name)
            .collect()
    }
}

impl EventSink for MemorySink {
    fn emit(&self, event: &Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event.clone());
        }
    }
}

/// A sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &Event) {}

    fn discards(&self) -> bool {
        true
    }
}
