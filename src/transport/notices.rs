//! What a server tells the client outside a request's answer, beside list changes:
//! log messages, progress, resource updates. The client handler turns each into a
//! [`Notice`] and hands it to the connection's route (the connect pipeline builds it:
//! redaction, events); progress also goes to the call that asked for it.
//!
//! Bounds: the transport already paces unasked messages (1,000 a second); on top of
//! that a connection passes on at most [`NOTICE_BURST`] notices at once and
//! [`NOTICES_PER_SECOND`] after, counting what it dropped and saying so with the next
//! one it passes. Progress for a call always reaches that call's sink.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::model::ProgressToken;
use serde::Serialize;

/// Most notices of one connection passed on at once.
pub const NOTICE_BURST: u32 = 100;
/// Notices of one connection passed on per second after a burst.
pub const NOTICES_PER_SECOND: u32 = 20;
/// Most calls of one connection waiting for progress at once (one per call in flight;
/// a connection has at most a few hundred).
const MAX_PROGRESS_SINKS: usize = 1024;

/// One thing a server said, as the server said it (the route redacts).
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// `notifications/message`.
    Log {
        /// `debug` .. `emergency`.
        level: String,
        /// The server's logger name.
        logger: Option<String>,
        /// The message's data (any JSON).
        data: serde_json::Value,
    },
    /// `notifications/progress` for one of our requests.
    Progress(Progress),
    /// `notifications/resources/updated`.
    ResourceUpdated {
        /// The resource that changed.
        uri: String,
    },
    /// A task (the tasks extension) a call is following changed status.
    Task {
        /// The server's id of the task.
        id: String,
        /// `working`, `input_required`, `completed`, `failed`, `cancelled`.
        status: String,
        /// The server's status message.
        message: Option<String>,
    },
}

/// Progress of a call, as its server reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Progress {
    /// Progress so far (increases with every notification).
    pub progress: f64,
    /// The total, when the server knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What the server is doing (redacted before anyone sees it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where a connection's notices go, with how many were dropped before this one.
pub type NoticeRoute = Arc<dyn Fn(Notice, u64) + Send + Sync>;
/// Where one call's progress goes.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// What one call does with its progress: the caller's sink, if any, and the redactor
/// of its events (the call's own: a server echoing a sensitive argument in a progress
/// message is redacted like the result would be). The event route is made from it only
/// when progress arrives, so a call without progress pays for nothing but the watch.
#[derive(Clone)]
pub struct CallWatch {
    /// The caller's sink.
    pub sink: Option<ProgressSink>,
    /// The call's redactor.
    pub redactor: crate::redact::Redactor,
    /// The host's hold on the task the call may become.
    pub task: Option<super::task_handle::TaskHandle>,
    /// The call's trace context, sent to the server in `_meta`.
    pub trace: Option<super::TraceHeader>,
}

/// Makes the route of a connection's notices for one redactor (the connection's, or a
/// call's).
pub type RouteFactory = Arc<dyn Fn(&crate::redact::Redactor) -> NoticeRoute + Send + Sync>;

/// A token bucket: [`NOTICE_BURST`] at once, [`NOTICES_PER_SECOND`] after.
#[derive(Debug)]
struct Pace {
    tokens: f64,
    at: Instant,
    dropped: u64,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            tokens: f64::from(NOTICE_BURST),
            at: Instant::now(),
            dropped: 0,
        }
    }
}

impl Pace {
    /// `Some(dropped before)` when one more may pass now.
    fn admit(&mut self) -> Option<u64> {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * f64::from(NOTICES_PER_SECOND);
        self.tokens = (self.tokens + refill).min(f64::from(NOTICE_BURST));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Some(std::mem::take(&mut self.dropped))
        } else {
            self.dropped += 1;
            None
        }
    }
}

/// A connection's notice handling: the route, its pace, and the calls waiting for
/// progress, by progress token.
#[derive(Default)]
pub struct Notices {
    route: Option<NoticeRoute>,
    factory: Option<RouteFactory>,
    pace: Mutex<Pace>,
    sinks: Mutex<HashMap<ProgressToken, CallWatch>>,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notices")
            .field("route", &self.route.is_some())
            .finish()
    }
}

impl Notices {
    /// Notices passed on to the route `factory` makes for `redactor` (a call's
    /// progress: for that call's redactor).
    pub fn new(factory: RouteFactory, redactor: &crate::redact::Redactor) -> Self {
        Notices {
            route: Some(factory(redactor)),
            factory: Some(factory),
            ..Notices::default()
        }
    }

    /// Passes `notice` on, unless the connection is over its pace.
    pub fn deliver(&self, notice: Notice) {
        let Some(route) = &self.route else {
            return;
        };
        let admitted = self.pace.lock().map(|mut p| p.admit()).unwrap_or(None);
        if let Some(dropped) = admitted {
            route(notice, dropped);
        }
    }

    /// Passes on `notice` of one call through the route made for that call's redactor
    /// (a server repeating a sensitive argument in it is hidden), unless the connection
    /// is over its pace.
    pub fn deliver_for(&self, watch: &CallWatch, notice: Notice) {
        let admitted = self.pace.lock().map(|mut p| p.admit()).unwrap_or(None);
        if let (Some(dropped), Some(factory)) = (admitted, &self.factory) {
            factory(&watch.redactor)(notice, dropped);
        }
    }

    /// Progress for the request that holds `token`: its call's sink and event route
    /// when a call watches it, else the connection's route.
    pub fn progress(&self, token: &ProgressToken, progress: Progress) {
        let watch = self
            .sinks
            .lock()
            .ok()
            .and_then(|sinks| sinks.get(token).cloned());
        let Some(watch) = watch else {
            self.deliver(Notice::Progress(progress));
            return;
        };
        if let Some(sink) = &watch.sink {
            sink(progress.clone());
        }
        let admitted = self.pace.lock().map(|mut p| p.admit()).unwrap_or(None);
        if let (Some(dropped), Some(factory)) = (admitted, &self.factory) {
            factory(&watch.redactor)(Notice::Progress(progress), dropped);
        }
    }

    /// Sends the progress of the request holding `token` to `watch` until the guard is
    /// dropped. `None` when too many calls already wait (their progress then goes the
    /// connection's way).
    pub fn watch(
        self: &Arc<Self>,
        token: ProgressToken,
        watch: CallWatch,
    ) -> Option<ProgressGuard> {
        let mut sinks = self.sinks.lock().ok()?;
        if sinks.len() >= MAX_PROGRESS_SINKS {
            return None;
        }
        sinks.insert(token.clone(), watch);
        Some(ProgressGuard {
            notices: Arc::clone(self),
            token,
        })
    }
}

/// Stops a call's progress from reaching its sink when dropped.
pub struct ProgressGuard {
    notices: Arc<Notices>,
    token: ProgressToken,
}

impl Drop for ProgressGuard {
    fn drop(&mut self) {
        if let Ok(mut sinks) = self.notices.sinks.lock() {
            sinks.remove(&self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn a_flood_is_cut_to_the_burst_and_the_drop_is_counted() {
        let passed = Arc::new(AtomicU64::new(0));
        let reported = Arc::new(AtomicU64::new(0));
        let (p, r) = (Arc::clone(&passed), Arc::clone(&reported));
        let route: NoticeRoute = Arc::new(move |_, dropped| {
            p.fetch_add(1, Ordering::SeqCst);
            r.fetch_add(dropped, Ordering::SeqCst);
        });
        let notices = Notices::new(
            Arc::new(move |_| Arc::clone(&route)),
            &crate::redact::Redactor::new(),
        );
        let log = || Notice::Log {
            level: "info".into(),
            logger: None,
            data: serde_json::json!("x"),
        };
        for _ in 0..10_000 {
            notices.deliver(log());
        }
        let first = passed.load(Ordering::SeqCst);
        // The burst, plus what a slow machine refilled meanwhile.
        assert!(
            (u64::from(NOTICE_BURST)..u64::from(NOTICE_BURST) + 200).contains(&first),
            "{first}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        notices.deliver(log());
        assert_eq!(passed.load(Ordering::SeqCst), first + 1);
        assert_eq!(reported.load(Ordering::SeqCst), 10_000 - first);
    }

    #[test]
    fn progress_reaches_its_call_until_the_guard_goes() {
        let events = Arc::new(Mutex::new(0));
        let e = Arc::clone(&events);
        let route: NoticeRoute = Arc::new(move |_, _| *e.lock().unwrap() += 1);
        let redactor = crate::redact::Redactor::new();
        let notices = Arc::new(Notices::new(
            Arc::new(move |_| Arc::clone(&route)),
            &redactor,
        ));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let watch = CallWatch {
            sink: Some(Arc::new(move |p: Progress| {
                s.lock().unwrap().push(p.progress)
            })),
            redactor,
            task: None,
            trace: None,
        };
        let token = |n| ProgressToken(rmcp::model::NumberOrString::Number(n));
        // A string that reads as the number is another token.
        let text = ProgressToken(rmcp::model::NumberOrString::String("1".into()));
        let guard = notices.watch(token(1), watch).unwrap();
        let at = |progress| Progress {
            progress,
            total: None,
            message: None,
        };
        notices.progress(&token(1), at(1.0));
        notices.progress(&token(2), at(2.0));
        notices.progress(&text, at(4.0));
        drop(guard);
        notices.progress(&token(1), at(3.0));
        assert_eq!(*seen.lock().unwrap(), [1.0]);
        // Every notification is an event: the watched one through the call's route,
        // the others through the connection's.
        assert_eq!(*events.lock().unwrap(), 4);
    }
}
